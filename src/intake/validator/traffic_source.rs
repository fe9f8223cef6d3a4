//! Whether `traffic_source` holds the traffic-source cookie rather than a UTM
//! source: JSON object text, raw or base64 in either alphabet.
//!
//! Spec, `traffic_source`: "When a cookie value is passed, traffic_medium,
//! traffic_campaign and traffic_value must be empty"; the payload reader
//! enforces that, this file only recognises the cookie.

use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

use super::lexer::Lexer;

/// Base64 as browsers and servers write it: padding optional, any trailing bits.
const LENIENT_BASE64: GeneralPurposeConfig = GeneralPurposeConfig::new()
    .with_decode_padding_mode(DecodePaddingMode::Indifferent)
    .with_decode_allow_trailing_bits(true);
const STANDARD_BASE64: GeneralPurpose = GeneralPurpose::new(&alphabet::STANDARD, LENIENT_BASE64);
const URL_SAFE_BASE64: GeneralPurpose = GeneralPurpose::new(&alphabet::URL_SAFE, LENIENT_BASE64);

/// Largest decoded cookie checked without allocating: the base64 of a
/// `traffic_source` at its default length bound (4096) fits.
const COOKIE_BUFFER: usize = 3072;

/// Whether a `traffic_source` value is a traffic-source cookie rather than a
/// UTM source: JSON object text, raw, or base64-encoded (standard or URL-safe
/// alphabet, padded or not). Surrounding whitespace is ignored.
///
/// Website forms send in `traffic_source` the value of the `__trf.src`
/// cookie the real service's tracking script sets: JSON, either raw or
/// base64-encoded.
pub(super) fn is_traffic_source_cookie(value: &str) -> bool {
    let value = value.trim();
    if value.starts_with('{') {
        return is_json_object(value.as_bytes());
    }
    // The base64 of text starting with `{` (0x7B = 011110 11) starts with `e`:
    // a cheap test that keeps UTM sources such as `google` from being decoded.
    if !value.starts_with('e') {
        return false;
    }
    let bytes = value.as_bytes();
    let engine = if bytes.iter().any(|b| matches!(b, b'-' | b'_')) {
        &URL_SAFE_BASE64
    } else {
        &STANDARD_BASE64
    };
    decode_and_check(engine, bytes)
}

/// Decodes base64 `bytes` and checks that they are one JSON object; in a
/// buffer on the stack unless the value is longer than the default bound
/// allows. Out of line, so that the 3 KiB buffer is reserved only while a
/// cookie is decoded, not in the frame of each reader it would inline into.
#[inline(never)]
fn decode_and_check(engine: &GeneralPurpose, bytes: &[u8]) -> bool {
    if base64::decoded_len_estimate(bytes.len()) <= COOKIE_BUFFER {
        let mut buffer = [0u8; COOKIE_BUFFER];
        match engine.decode_slice(bytes, &mut buffer) {
            Ok(len) => buffer.get(..len).is_some_and(is_json_object),
            Err(_) => false,
        }
    } else {
        // Only when max_traffic_source_len was raised above its default.
        engine
            .decode(bytes)
            .is_ok_and(|decoded| is_json_object(&decoded))
    }
}

/// Whether `bytes` is exactly one JSON object (whitespace around allowed).
fn is_json_object(bytes: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return false;
    };
    let mut lexer = Lexer::new(text, 0);
    lexer.peek_value() == Some(b'{') && lexer.skip_value(1).is_ok() && lexer.finish().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_json_object_is_a_cookie() {
        assert!(is_traffic_source_cookie(
            r#"{"first_session":{"value":"https://www.google.com/","extra_params":{}}}"#
        ));
        assert!(is_traffic_source_cookie("  {} "));
        assert!(!is_traffic_source_cookie("{not json"));
        assert!(!is_traffic_source_cookie("{} trailing"));
    }

    #[test]
    fn base64_json_object_is_a_cookie_in_every_flavour() {
        let json = r#"{"first_session":{"value":"https://a.b/?x=1&y=~~~","extra_params":{}}}"#;
        for engine in [
            base64::engine::general_purpose::STANDARD,
            base64::engine::general_purpose::STANDARD_NO_PAD,
            base64::engine::general_purpose::URL_SAFE,
            base64::engine::general_purpose::URL_SAFE_NO_PAD,
        ] {
            let encoded = engine.encode(json);
            assert!(is_traffic_source_cookie(&encoded), "{encoded}");
        }
        assert!(is_traffic_source_cookie("e30="));
        assert!(is_traffic_source_cookie("e30"));
    }

    /// A cookie longer than the stack buffer holds (a host that raised
    /// `max_traffic_source_len`) is decoded on the heap, not refused.
    #[test]
    fn a_cookie_longer_than_the_buffer_is_still_a_cookie() {
        for len in [COOKIE_BUFFER - 40, COOKIE_BUFFER, 4 * COOKIE_BUFFER] {
            let json = format!(r#"{{"first_session":{{"value":"{}"}}}}"#, "x".repeat(len));
            let encoded = base64::engine::general_purpose::STANDARD.encode(&json);
            assert!(is_traffic_source_cookie(&encoded), "{len}");
            assert!(
                !is_traffic_source_cookie(&encoded[..encoded.len() - 8]),
                "{len}"
            );
        }
    }

    #[test]
    fn utm_sources_and_other_base64_are_not_cookies() {
        for value in [
            "google",
            "facebook",
            "email",
            "e",
            "eW91dHViZQ==",
            "W10=",
            "",
        ] {
            assert!(!is_traffic_source_cookie(value), "{value}");
        }
    }
}
