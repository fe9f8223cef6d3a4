//! The rules a string of the payload is checked against: characters no store
//! can keep, blankness, length in characters, and the shapes of `email` and
//! `client_tracking_id`. Pure functions of the string.

use std::borrow::Cow;

/// Whether a string holds a control character no stored string may hold:
/// U+0000 to U+001F except tab, line feed and carriage return. See
/// [`ErrorType::InvalidCharacters`] for why.
pub(super) fn has_refused_control(value: &str) -> bool {
    // In UTF-8 every byte of a multi-byte character is 0x80 or above: a byte
    // below 0x20 is the control character itself.
    value
        .bytes()
        .any(|b| b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r'))
}

/// Whether an unescaped string holds a control character no stored string
/// may hold. Only an escape can have put one there (a raw one is not JSON),
/// so a string borrowed from the body, which held none, is not searched:
/// strings without escapes, nearly all of them, pay nothing for the rule.
// The variant is the point (`Owned` is what an escaped string decodes to),
// so the function takes the `Cow`, not the `&str` clippy suggests.
#[allow(clippy::ptr_arg)]
pub(super) fn unescaped_refused_control(value: &Cow<'_, str>) -> bool {
    matches!(value, Cow::Owned(_)) && has_refused_control(value)
}

/// Whether a string is empty or only whitespace.
pub(super) fn is_blank(value: &str) -> bool {
    value.chars().all(char::is_whitespace)
}

/// Whether a string holds more than `max` characters (Unicode scalar values).
pub(super) fn is_too_long(value: &str, max: usize) -> bool {
    // A character takes at least one byte: only count when the bytes exceed.
    value.len() > max && value.chars().count() > max
}

/// What the e-mail rule tells apart in a byte, by [`EMAIL_BYTES`].
const ORDINARY: u8 = 0;
/// `@`.
const AT: u8 = 1;
/// `.`.
const DOT: u8 = 2;
/// A space or an ASCII control character (U+0000 to U+0020, U+007F).
const REFUSED: u8 = 3;

/// The class of every byte for [`is_plausible_email`]: one load and one
/// test a byte for the common case, where a chain of comparisons per byte
/// cost 390 instructions for a 26-byte address, a seventh of a minimal
/// event's validation.
static EMAIL_BYTES: [u8; 256] = {
    let mut classes = [ORDINARY; 256];
    let mut byte = 0;
    while byte <= 0x20 {
        classes[byte] = REFUSED;
        byte += 1;
    }
    classes[0x7f] = REFUSED;
    classes[b'@' as usize] = AT;
    classes[b'.' as usize] = DOT;
    classes
};

/// Whether `value` is a plausible e-mail address; see [`validate_conversion`]
/// for the rule.
pub(super) fn is_plausible_email(value: &str) -> bool {
    // RFC 5321 section 4.5.3.1: a path is at most 256 octets including the
    // angle brackets (254 for the address), a local part at most 64.
    if value.len() > 254 {
        return false;
    }
    // One pass over the bytes: this runs for every event.
    let mut at = None;
    let (mut label_len, mut dots) = (0usize, 0usize);
    for (index, byte) in value.bytes().enumerate() {
        match EMAIL_BYTES[usize::from(byte)] {
            ORDINARY => label_len += 1,
            AT if at.is_none() => (at, label_len) = (Some(index), 0),
            // Dots in the local part are the local part's business; nothing
            // to count either, as the `@` starts the first label at 0.
            DOT if at.is_none() => {}
            // A domain's labels are never empty.
            DOT if label_len > 0 => (label_len, dots) = (0, dots + 1),
            _ => return false,
        }
    }
    let Some(at) = at else {
        return false;
    };
    (1..=64).contains(&at)
        && dots > 0
        && label_len > 0
        && (value.is_ascii() || !value.chars().any(|c| c.is_whitespace() || c.is_control()))
}

/// Whether `value` has the shape of a UUID: 8-4-4-4-12 hexadecimal digits.
pub(super) fn is_uuid_shaped(value: &str) -> bool {
    let bytes = value.as_bytes();
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(index, byte)| match index {
            8 | 13 | 18 | 23 => *byte == b'-',
            _ => byte.is_ascii_hexdigit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intake::validator::lexer::{JsonStr, Lexer};

    /// A JSON string literal, read and decoded by the lexer.
    fn unescaped(json: &str) -> Cow<'_, str> {
        let decoded = Lexer::new(json, 0).string().map(JsonStr::decode);
        decoded.unwrap_or_else(|error| panic!("{json}: {error:?}"))
    }

    #[test]
    fn email_rule_accepts_ordinary_addresses() {
        for ok in [
            "a@b.co",
            "first.last+tag@example.com.br",
            "jose.silva@exemplo.com",
            "ünïcode@exämple.org",
            "x@a.b",
            "a..b@c.d",
            ".a@b.c",
            "a!#$%&'*+/=?^_`{|}~-@b.c",
        ] {
            assert!(is_plausible_email(ok), "{ok}");
        }
    }

    #[test]
    fn email_rule_refuses_implausible_addresses() {
        let long_local = format!("{}@example.com", "a".repeat(65));
        let long_total = format!("a@{}.com", "b".repeat(250));
        for bad in [
            "",
            "plain",
            "@example.com",
            "a@",
            "a@localhost",
            "a@@example.com",
            "a@b@example.com",
            "a b@example.com",
            "a@exa mple.com",
            "a@example..com",
            "a@.example.com",
            "a@example.com.",
            "a@.",
            "a@..",
            "a@b.",
            "a@b..c",
            "a@b.c@d.e",
            "a@b.c\u{7f}",
            "a\u{7f}@b.c",
            "a@b.c ",
            "\u{0}a@b.c",
            "a\u{7}@example.com",
            "a\u{a0}b@example.com",
            "a@exa\u{3000}mple.com",
            long_local.as_str(),
            long_total.as_str(),
        ] {
            assert!(!is_plausible_email(bad), "{bad}");
        }
    }

    #[test]
    fn email_bounds_are_inclusive() {
        let local_64 = format!("{}@example.com", "a".repeat(64));
        assert!(is_plausible_email(&local_64));
        let total_254 = format!("a@{}.com", "b".repeat(248));
        assert_eq!(total_254.len(), 254);
        assert!(is_plausible_email(&total_254));
    }

    /// The rule as a chain of comparisons per byte, as it was written
    /// before [`EMAIL_BYTES`]: what the table must agree with.
    fn email_by_comparisons(value: &str) -> bool {
        if value.len() > 254 {
            return false;
        }
        let mut at = None;
        let (mut label_len, mut dots) = (0usize, 0usize);
        for (index, byte) in value.bytes().enumerate() {
            match byte {
                b'@' if at.is_some() => return false,
                b'@' => (at, label_len) = (Some(index), 0),
                0..=0x20 | 0x7f => return false,
                b'.' if at.is_some() => {
                    if label_len == 0 {
                        return false;
                    }
                    (label_len, dots) = (0, dots + 1);
                }
                _ => label_len += 1,
            }
        }
        at.is_some_and(|at| (1..=64).contains(&at))
            && dots > 0
            && label_len > 0
            && !value.chars().any(|c| c.is_whitespace() || c.is_control())
    }

    #[test]
    fn email_rule_agrees_with_the_comparisons_on_every_short_string() {
        // Every string of up to six characters over the characters the
        // rule tells apart, and every byte value once in a valid address.
        let alphabet = ['a', '@', '.', ' ', '\u{7f}', '\u{a0}', 'é', '\u{1}'];
        let mut strings = vec![String::new()];
        let mut checked = 0;
        for _ in 0..6 {
            let mut longer = Vec::with_capacity(strings.len() * alphabet.len());
            for prefix in &strings {
                for c in alphabet {
                    let mut string = prefix.clone();
                    string.push(c);
                    let expected = email_by_comparisons(&string);
                    assert_eq!(is_plausible_email(&string), expected, "{string:?}");
                    checked += 1;
                    longer.push(string);
                }
            }
            strings = longer;
        }
        assert!(checked > 250_000);
        for c in (0..=0x7f_u8)
            .map(char::from)
            .chain(['\u{80}', '\u{85}', '\u{2028}'])
        {
            for address in [format!("a{c}b@c.d"), format!("ab@c{c}d.e")] {
                let expected = email_by_comparisons(&address);
                assert_eq!(is_plausible_email(&address), expected, "{address:?}");
            }
        }
    }

    #[test]
    fn uuid_shape_is_8_4_4_4_12_hex() {
        assert!(is_uuid_shaped("6ba7b810-9dad-11d1-80b4-00c04fd430c8"));
        assert!(is_uuid_shaped("6BA7B810-9DAD-11D1-80B4-00C04FD430C8"));
        assert!(!is_uuid_shaped("6ba7b8109dad11d180b400c04fd430c8"));
        assert!(!is_uuid_shaped("6ba7b810-9dad-11d1-80b4-00c04fd430cg"));
        assert!(!is_uuid_shaped("6ba7b810-9dad-11d1-80b400-c04fd430c8"));
        assert!(!is_uuid_shaped(" 6ba7b810-9dad-11d1-80b4-00c04fd430c8"));
        assert!(!is_uuid_shaped("é6ba7b810-9dad-11d1-80b4-00c04fd430"));
        let valid = "6ba7b810-9dad-11d1-80b4-00c04fd430c8";
        // Every place: a dash where a digit goes, a digit where a dash goes,
        // a letter past `f`.
        for index in 0..valid.len() {
            let dash = matches!(index, 8 | 13 | 18 | 23);
            for replacement in ["-", "0", "g", "G", "/", ":", "@", "`"] {
                let mut changed = valid.to_owned();
                changed.replace_range(index..=index, replacement);
                let hex = replacement == "0";
                let expected = if dash { replacement == "-" } else { hex };
                assert_eq!(is_uuid_shaped(&changed), expected, "{changed}");
            }
        }
        assert!(!is_uuid_shaped(&valid[1..]));
        assert!(!is_uuid_shaped(&format!("{valid}0")));
    }

    #[test]
    fn escapes_of_refused_controls_are_found_once_unescaped() {
        for refused in [
            r#""\u0000""#,
            r#""a\u0001""#,
            r#""\u001f""#,
            r#""\u001F""#,
            r#""\u000b""#,
            r#""\u000C""#,
            r#""\b""#,
            r#""x\fy""#,
            r#""\u0008""#,
        ] {
            assert!(unescaped_refused_control(&unescaped(refused)), "{refused}");
        }
        for kept in [
            r#""plain""#,
            r#""\t\n\r\u0009\u000a\u000D""#,
            r#""\u0020\u007f\u0085\u009f\"\\\/""#,
            r#""\ud83d\ude00 \u00e9\u4e2d""#,
        ] {
            assert!(!unescaped_refused_control(&unescaped(kept)), "{kept}");
        }
        // A borrowed string is never searched: it cannot hold one.
        assert!(!unescaped_refused_control(&Cow::Borrowed("a\u{0}b")));
        assert!(unescaped_refused_control(&Cow::Owned("a\u{0}b".to_owned())));
        for c in (0u8..0x20).map(char::from) {
            let refused = !matches!(c, '\t' | '\n' | '\r');
            assert_eq!(has_refused_control(&format!("é{c}")), refused, "{c:?}");
        }
        assert!(!has_refused_control(
            "\u{7f}\u{80}\u{9f}\u{fffd}\u{10ffff} "
        ));
    }

    #[test]
    fn length_counts_characters_not_bytes() {
        assert!(!is_too_long("ééé", 3));
        assert!(is_too_long("éééé", 3));
    }
}
