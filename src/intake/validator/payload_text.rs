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

use super::event::ConversionEvent;
use super::member_order;
use super::tags::Tags;
use super::vocabulary::{FIELD_NAMES, Field, LegalBasis, STRING_FIELDS};

/// The payload of `event` as JSON text.
pub(super) fn payload_text(event: &ConversionEvent<'_>) -> String {
    let members = members(event);
    let mut out = String::with_capacity(members.iter().map(Member::size_hint).sum::<usize>() + 2);
    out.push('{');
    for (index, member) in members.iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        write_string(&mut out, member.name);
        out.push(':');
        member.value.write(&mut out);
    }
    out.push('}');
    out
}

/// One member of a payload: its name and value.
struct Member<'e, 'a> {
    name: &'e str,
    value: MemberValue<'e, 'a>,
}

impl Member<'_, '_> {
    /// About how many bytes the member takes in the text (exact unless
    /// something in it needs an escape), so that the text is allocated
    /// once.
    fn size_hint(&self) -> usize {
        // The quotes around the name, the `:` and the `,`.
        let value = match &self.value {
            MemberValue::Text(text) => text.len() + 2,
            MemberValue::Tags(raw) => raw.len(),
            MemberValue::Flag(_) => 5,
            MemberValue::LegalBases(bases) => bases.len() * 72 + 2,
        };
        self.name.len() + 4 + value
    }
}

/// The value of a payload member.
enum MemberValue<'e, 'a> {
    /// A string field, standard or custom.
    Text(&'e str),
    /// `tags`: the raw text of the validated array, each tag written again
    /// from its unescaped value.
    Tags(&'a str),
    /// `available_for_mailing`.
    Flag(bool),
    /// `legal_bases`, each with `category`, `type` and, when sent, `status`.
    LegalBases(&'e [LegalBasis]),
}

impl MemberValue<'_, '_> {
    fn write(&self, out: &mut String) {
        match self {
            MemberValue::Text(text) => write_string(out, text),
            MemberValue::Tags(raw) => {
                out.push('[');
                for (index, tag) in Tags::new(raw).enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    write_string(out, &tag);
                }
                out.push(']');
            }
            MemberValue::Flag(flag) => out.push_str(if *flag { "true" } else { "false" }),
            MemberValue::LegalBases(bases) => {
                out.push('[');
                for (index, basis) in bases.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    // In the order a JSON object map sorts them.
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
    }
}

/// The members of `event`'s payload, in the order a [`serde_json::Map`]
/// sorts them: the standard members before the custom fields, the custom
/// fields sorted by name, then the standard members after them.
fn members<'e, 'a>(event: &'e ConversionEvent<'a>) -> SmallVec<[Member<'e, 'a>; 24]> {
    let (before, after) = member_order::around_custom_fields();
    let mut members: SmallVec<[Member<'e, 'a>; 24]> = SmallVec::new();
    let standard = |index: &usize| {
        Some(Member {
            name: FIELD_NAMES.get(*index)?,
            value: standard_value(event, *index)?,
        })
    };
    members.extend(before.iter().filter_map(standard));
    let custom_start = members.len();
    for (name, value) in event.custom_members() {
        members.push(Member {
            name,
            value: MemberValue::Text(value),
        });
    }
    // Custom names are unique: a valid event names no member twice
    // (`DUPLICATE_FIELD`).
    members[custom_start..].sort_unstable_by(|a, b| a.name.cmp(b.name));
    members.extend(after.iter().filter_map(standard));
    members
}

/// The value of the standard member at `index` of [`FIELD_NAMES`], if
/// `event` has it.
fn standard_value<'e, 'a>(
    event: &'e ConversionEvent<'a>,
    index: usize,
) -> Option<MemberValue<'e, 'a>> {
    if index < STRING_FIELDS {
        event.string_at(index).map(MemberValue::Text)
    } else if index == Field::Tags as usize {
        event.tags.map(MemberValue::Tags)
    } else if index == Field::AvailableForMailing as usize {
        event.available_for_mailing.map(MemberValue::Flag)
    } else {
        // `legal_bases`, the last field.
        event
            .legal_bases_present
            .then_some(MemberValue::LegalBases(&event.legal_bases))
    }
}

/// Writes `text` as a JSON string, escaped as `serde_json` escapes it:
/// `"` and `\` with a backslash, the control characters U+0000 to U+001F
/// as `\b`, `\t`, `\n`, `\f`, `\r` or `\u00XX` (lowercase hex), and
/// nothing else (RFC 8259, section 7: only these must be escaped).
fn write_string(out: &mut String, text: &str) {
    out.push('"');
    let bytes = text.as_bytes();
    // Eight bytes at a time while none needs an escape: the common case.
    let mut clean = 0;
    while let Some(word) = bytes.get(clean..clean + 8) {
        let word = u64::from_le_bytes(word.try_into().unwrap_or_default());
        if needs_escape(word) {
            break;
        }
        clean += 8;
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

/// Whether any of the eight bytes of `word` is below 0x20, `"` or `\`
/// (the bit tricks of "Bit Twiddling Hacks", *Determine if a word has a
/// byte less than n* and *has a zero byte*: exact for the question "any?").
fn needs_escape(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word;
    let quote = word ^ (ONES * u64::from(b'"'));
    let quote = quote.wrapping_sub(ONES) & !quote;
    let backslash = word ^ (ONES * u64::from(b'\\'));
    let backslash = backslash.wrapping_sub(ONES) & !backslash;
    (below_space | quote | backslash) & HIGHS != 0
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn every_byte_that_needs_an_escape_is_found_in_every_lane() {
        for lane in 0..8 {
            for byte in 0u8..=0xFF {
                let mut word = [b'a'; 8];
                word[lane] = byte;
                let expected = byte < 0x20 || byte == b'"' || byte == b'\\';
                assert_eq!(
                    needs_escape(u64::from_le_bytes(word)),
                    expected,
                    "byte {byte:#x} in lane {lane}"
                );
            }
        }
        // Bytes just past the ranges, in every lane at once.
        for byte in [0x20u8, b'"' + 1, b'"' - 1, b'\\' + 1, b'\\' - 1, 0x80, 0xFF] {
            assert!(!needs_escape(u64::from_le_bytes([byte; 8])), "{byte:#x}");
        }
    }
}
