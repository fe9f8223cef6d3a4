//! The recorded payload's JSON text, written straight from a validated
//! event: the members [`ConversionEvent::to_payload_json`] would hold, in
//! the order its map sorts them (module `member_order`), in the compact
//! form and with the escapes `serde_json` writes, so that the text is the
//! one that `Value` serialises to, byte for byte.
//!
//! Written by hand rather than through `serde_json`'s serializer: that
//! took 10,500 instructions of a typical conversion's 78,000 in the
//! service (`valgrind --tool=callgrind`, memory store), two thirds of them
//! escaping strings a byte at a time through its writer, for strings that
//! almost never hold anything to escape.

use smallvec::SmallVec;

use crate::records::event::EventPayload;

use super::event::ConversionEvent;
use super::lexer::find_special;
use super::member_order;
use super::tags::Tags;
use super::vocabulary::{FIELD_NAMES, Field, STRING_FIELDS};

// Here rather than in `event.rs`, so that this module imports the event
// and not the other way round.
impl ConversionEvent<'_> {
    /// The normalized payload to record, as [`ConversionEvent::to_payload_json`]
    /// gives it, written straight to its JSON text: members in the same
    /// (sorted) order, the same compact form, without building a
    /// [`Value`](serde_json::Value) first.
    pub fn to_payload(&self) -> EventPayload {
        EventPayload::from_written_json(payload_text(self))
    }
}

/// The payload of `event` as JSON text.
fn payload_text(event: &ConversionEvent<'_>) -> String {
    let mut payload = Payload {
        out: String::with_capacity(size_hint(event)),
        first: true,
    };
    payload.out.push('{');
    let (before, after) = member_order::around_custom_fields();
    for &index in before {
        payload.standard(event, index);
    }
    // Custom names are unique: a valid event names no member twice
    // (`DUPLICATE_FIELD`).
    let mut custom: SmallVec<[(&str, &str); 8]> = event.custom_members().collect();
    custom.sort_unstable_by(|a, b| a.0.cmp(b.0));
    for (name, value) in custom {
        payload.name(name);
        write_string(&mut payload.out, value);
    }
    for &index in after {
        payload.standard(event, index);
    }
    payload.out.push('}');
    payload.out
}

/// How many bytes the payload of `event` takes, to a byte or two (legal
/// bases counted at their longest; more when a string needs an escape), so
/// that its text is allocated once.
fn size_hint(event: &ConversionEvent<'_>) -> usize {
    // Each member: its name, its value, two pairs of quotes, `:` and `,`.
    let member = |name: &str, value: &str| name.len() + value.len() + 6;
    let standard: usize = event
        .standard_strings()
        .map(|(name, value)| member(name, value))
        .sum();
    let custom: usize = event
        .custom_members()
        .map(|(name, value)| member(name, value))
        .sum();
    // `"tags":` and a `,`, then the array as sent (compact, as clients
    // send it: longer when it holds spaces or escapes).
    let tags = event.tags.map_or(0, |raw| raw.len() + 8);
    // `"available_for_mailing":false,`.
    let flag = event.available_for_mailing.map_or(0, |_| 30);
    // `"legal_bases":[]`, a `,`, and at most 72 bytes a basis.
    let legal_bases = if event.legal_bases_present {
        17 + event.legal_bases_read().len() * 72
    } else {
        0
    };
    // And the braces.
    standard + custom + tags + flag + legal_bases + 2
}

/// The text being written, and whether no member is written yet.
struct Payload {
    out: String,
    first: bool,
}

impl Payload {
    /// Writes the name of the next member and its `:`.
    fn name(&mut self, name: &str) {
        self.separate();
        write_string(&mut self.out, name);
        self.out.push(':');
    }

    /// Writes the name of the next member, a standard field's (which holds
    /// nothing to escape), and its `:`.
    fn standard_name(&mut self, name: &str) {
        self.separate();
        self.out.push('"');
        self.out.push_str(name);
        self.out.push_str("\":");
    }

    /// Writes the `,` before a member but the first.
    fn separate(&mut self) {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
    }

    /// Writes the standard member at `index` of [`FIELD_NAMES`], if `event`
    /// has it.
    fn standard(&mut self, event: &ConversionEvent<'_>, index: usize) {
        let Some(name) = FIELD_NAMES.get(index) else {
            return;
        };
        if index < STRING_FIELDS {
            if let Some(text) = event.string_at(index) {
                self.standard_name(name);
                write_string(&mut self.out, text);
            }
        } else if index == Field::Tags as usize {
            if let Some(raw) = event.tags {
                self.standard_name(name);
                self.tags(raw);
            }
        } else if index == Field::AvailableForMailing as usize {
            if let Some(flag) = event.available_for_mailing {
                self.standard_name(name);
                self.out.push_str(if flag { "true" } else { "false" });
            }
        } else if event.legal_bases_present {
            // `legal_bases`, the last field.
            self.standard_name(name);
            self.legal_bases(event);
        }
    }

    /// `tags`, from the raw text of the validated array: each tag written
    /// again from its unescaped value.
    fn tags(&mut self, raw: &str) {
        self.out.push('[');
        for (index, tag) in Tags::new(raw).enumerate() {
            if index > 0 {
                self.out.push(',');
            }
            write_string(&mut self.out, &tag);
        }
        self.out.push(']');
    }

    /// `legal_bases`, each with `category`, `type` and, when sent, `status`,
    /// in the order a JSON object map sorts them.
    fn legal_bases(&mut self, event: &ConversionEvent<'_>) {
        let out = &mut self.out;
        out.push('[');
        for (index, basis) in event.legal_bases_read().iter().enumerate() {
            if index > 0 {
                out.push(',');
            }
            out.push_str("{\"category\":");
            write_string(out, basis.category.as_str());
            if let Some(status) = basis.status {
                out.push_str(",\"status\":");
                write_string(out, status.as_str());
            }
            out.push_str(",\"type\":");
            write_string(out, basis.kind.as_str());
            out.push('}');
        }
        out.push(']');
    }
}

/// Writes `text` as a JSON string, escaped as `serde_json` escapes it:
/// `"` and `\` with a backslash, the control characters U+0000 to U+001F
/// as `\b`, `\t`, `\n`, `\f`, `\r` or `\u00XX` (lowercase hex), and
/// nothing else (RFC 8259, section 7: only these must be escaped).
fn write_string(out: &mut String, text: &str) {
    out.push('"');
    let bytes = text.as_bytes();
    // The lexer's scan for the end of a string finds the first byte to
    // escape: exactly the bytes a JSON string cannot hold raw.
    let clean = find_special(bytes, 0);
    if clean == bytes.len() {
        // The common case: nothing to escape, one copy.
        out.push_str(text);
        out.push('"');
        return;
    }
    let mut copied = 0;
    for (index, &byte) in bytes.iter().enumerate().skip(clean) {
        let escape = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            b'\t' => "\\t",
            b'\n' => "\\n",
            0x0C => "\\f",
            b'\r' => "\\r",
            0x00..=0x1F => "",
            _ => continue,
        };
        out.push_str(text.get(copied..index).unwrap_or_default());
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xF)]));
        } else {
            out.push_str(escape);
        }
        copied = index + 1;
    }
    out.push_str(text.get(copied..).unwrap_or_default());
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intake::validator::vocabulary::CUSTOM_PREFIX;

    fn written(text: &str) -> String {
        let mut out = String::new();
        write_string(&mut out, text);
        out
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let mut every_char: String = (0u8..=0x7F).map(char::from).collect();
        every_char.push_str("é€😀\u{2028}/");
        let samples = [
            "",
            "plain",
            "exactly8",
            "sixteen bytes!!!",
            "quote\" and back\\slash",
            "a\u{8}b\u{c}c\nd\re\tf\u{1}g\u{1f}h\u{7f}",
            "eight by\"",
            "\"\"\"\"\"\"\"\"\"",
            "Zoë Çelik, São Paulo",
            &every_char,
        ];
        for sample in samples {
            let expected = serde_json::to_string(sample).expect("a string");
            assert_eq!(written(sample), expected, "{sample:?}");
        }
    }

    #[test]
    fn an_escape_is_found_at_every_place_of_strings_of_every_length() {
        for len in 0..=17 {
            let clean = "a".repeat(len);
            assert_eq!(written(&clean), format!("\"{clean}\""));
            for place in 0..len {
                for special in ['"', '\\', '\n', '\u{0}'] {
                    let mut text = clean.clone();
                    text.replace_range(place..=place, &special.to_string());
                    let expected = serde_json::to_string(&text).expect("a string");
                    assert_eq!(written(&text), expected, "{text:?}");
                }
            }
        }
    }

    /// The text is allocated once, at about its size: the hint is never
    /// short (the text would grow, copied) and never far over.
    #[test]
    fn the_text_is_allocated_once_at_about_its_size() {
        let bodies: [&[u8]; 4] = [
            include_bytes!("../../../benches/data/minimal.json"),
            include_bytes!("../../../benches/data/typical.json"),
            include_bytes!("../../../benches/data/full.json"),
            br#"{"event_type":"CONVERSION","event_family":"CDP","payload":{
                "conversion_identifier":"x","email":"a@example.com","legal_bases":[]}}"#,
        ];
        for body in bodies {
            // The account's custom fields: those the body sends.
            let sent: serde_json::Value = serde_json::from_slice(body).expect("JSON");
            let custom: Vec<&str> = sent["payload"]
                .as_object()
                .into_iter()
                .flat_map(|payload| payload.keys())
                .filter_map(|name| name.strip_prefix(CUSTOM_PREFIX))
                .collect();
            let limits = crate::ConversionLimits::default();
            let event = crate::validate_conversion(body, &custom, &limits).expect("valid");
            let hint = size_hint(&event);
            let text = payload_text(&event);
            assert_eq!(text.capacity(), hint, "allocated once: {text}");
            // The first member has no `,`, `true` is shorter than `false`,
            // and a legal basis may take less than the most.
            let slack = 2 + 72 * event.legal_bases_read().len();
            assert!(
                (text.len()..=text.len() + slack).contains(&hint),
                "hint {hint} for {} bytes: {text}",
                text.len()
            );
        }
    }

    #[test]
    fn no_standard_name_needs_an_escape() {
        for name in FIELD_NAMES {
            assert_eq!(written(name), format!("\"{name}\""));
        }
    }
}
