//! Where a validated event's strings are: spans of the body they were read
//! from, or of the event's own buffer for those that held escapes.
//!
//! A `Cow<str>` is 24 bytes, and an event holds over thirty of them (every
//! standard field, every custom field's name and value, the names of dropped
//! attributes): 1,144 bytes in all, which every move of the event copied and
//! every drop walked. A span is 8 bytes, and the event was then 528 (240
//! since its rarer parts moved to `extras`): validating a minimal event
//! under the validator bench took a fifth less time for it, the typical,
//! full and invalid ones 6 to 7% less (side by side, benches/README.md,
//! "Validation").

use std::borrow::Cow;

/// The most bytes a body may have for its offsets to fit a span: longer
/// bodies are refused as too large, whatever the limits say.
pub(super) const MAX_SPANNED_BYTES: usize = 1 << 30;

/// The flag of a span into [`EventText::decoded`] rather than the body.
const DECODED: u32 = 1 << 31;

/// A string of a validated event: `len` bytes from `start`, in the body or,
/// when `start` carries [`DECODED`], in the event's decoded strings.
///
/// Both halves in one `u64` (the start above, the length below), so that a
/// span is written, copied and compared as one word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct TextSpan(u64);

impl TextSpan {
    /// No string: a field not sent (or sent `null`). No kept string starts
    /// there, since every offset is below [`MAX_SPANNED_BYTES`].
    pub(super) const ABSENT: TextSpan = TextSpan(u64::MAX);

    fn new(start: u32, len: u32) -> Self {
        TextSpan((u64::from(start) << 32) | u64::from(len))
    }

    fn start(self) -> u32 {
        (self.0 >> 32) as u32
    }

    fn len(self) -> u32 {
        self.0 as u32
    }

    /// Whether the span holds a string.
    pub(super) fn is_present(self) -> bool {
        self != TextSpan::ABSENT
    }
}

/// The text an event's spans point into: the body it was read from, and
/// the decoded copies of its strings that held escapes.
#[derive(Clone, Debug)]
pub(super) struct EventText<'a> {
    /// The text the event's lexer read (a batch's whole body for each of
    /// its events).
    body: &'a str,
    /// The strings that held escapes, decoded, one after the other.
    decoded: String,
}

impl<'a> EventText<'a> {
    /// Text with nothing kept yet, over `body` (at most
    /// [`MAX_SPANNED_BYTES`] long).
    pub(super) fn new(body: &'a str) -> Self {
        EventText {
            body,
            decoded: String::new(),
        }
    }

    /// Keeps `value`, a string read from the body (borrowed) or decoded
    /// from it (owned), and gives its span.
    pub(super) fn keep(&mut self, value: Cow<'a, str>) -> TextSpan {
        if let Cow::Borrowed(text) = value
            && let Some(span) = self.span_in_body(text)
        {
            return span;
        }
        // Decoded strings are never longer than the escaped text they come
        // from, so the buffer stays below the body's length: its offsets fit
        // a span, under the flag's bit.
        let start = offset(self.decoded.len());
        self.decoded.push_str(&value);
        TextSpan::new(start | DECODED, offset(value.len()))
    }

    /// The span of `text` if it is a slice of the body.
    fn span_in_body(&self, text: &str) -> Option<TextSpan> {
        let start = (text.as_ptr() as usize).checked_sub(self.body.as_ptr() as usize)?;
        let end = start.checked_add(text.len())?;
        (end <= self.body.len()).then(|| TextSpan::new(offset(start), offset(text.len())))
    }

    /// The string `span` stands for, borrowed from the body when it is
    /// there, else copied.
    pub(super) fn cow(&self, span: TextSpan) -> Cow<'a, str> {
        // A decoded or absent span starts at 2^31 or more, past any body
        // (at most MAX_SPANNED_BYTES): only a span of the body finds text.
        let start = span.start() as usize;
        match self.body.get(start..start + span.len() as usize) {
            Some(text) => Cow::Borrowed(text),
            None => Cow::Owned(self.get(span).to_owned()),
        }
    }

    /// The string `span` stands for; empty for [`TextSpan::ABSENT`].
    pub(super) fn get(&self, span: TextSpan) -> &str {
        if !span.is_present() {
            return "";
        }
        let (text, start) = if span.start() & DECODED == 0 {
            (self.body, span.start())
        } else {
            (self.decoded.as_str(), span.start() & !DECODED)
        };
        let start = start as usize;
        text.get(start..start + span.len() as usize)
            .unwrap_or_default()
    }
}

/// An offset or a length within a body of at most [`MAX_SPANNED_BYTES`].
fn offset(value: usize) -> u32 {
    debug_assert!(
        value <= MAX_SPANNED_BYTES,
        "bodies past the bound are refused"
    );
    u32::try_from(value.min(MAX_SPANNED_BYTES)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_of_the_body_is_kept_as_its_place_in_it() {
        let body = r#"{"city":"Porto Alegre","name":"Zo\u00eb"}"#;
        let mut text = EventText::new(body);
        let city = text.keep(Cow::Borrowed(&body[9..21]));
        assert_eq!((city.start(), city.len()), (9, 12));
        assert_eq!(text.get(city), "Porto Alegre");
        assert!(text.decoded.is_empty(), "nothing copied");
    }

    #[test]
    fn decoded_strings_and_strings_from_elsewhere_are_copied_once_each() {
        let body = r#"{"name":"Zo\u00eb","job":"a\nb"}"#;
        let mut text = EventText::new(body);
        let name = text.keep(Cow::Owned("Zoë".to_owned()));
        let job = text.keep(Cow::Owned("a\nb".to_owned()));
        let other = text.keep(Cow::Borrowed("not in the body"));
        assert_eq!(
            (text.get(name), text.get(job), text.get(other)),
            ("Zoë", "a\nb", "not in the body")
        );
        assert_eq!(text.decoded, "Zoëa\nbnot in the body");
        assert_ne!(name.start() & DECODED, 0);
    }

    #[test]
    fn a_span_of_the_body_comes_back_borrowed_and_a_decoded_one_copied() {
        let body = r#"{"city":"Recife","name":"Zo\u00eb"}"#;
        let mut text = EventText::new(body);
        let city = text.keep(Cow::Borrowed(&body[9..15]));
        let name = text.keep(Cow::Owned("Zoë".to_owned()));
        assert!(matches!(text.cow(city), Cow::Borrowed("Recife")));
        assert!(matches!(text.cow(name), Cow::Owned(ref name) if name == "Zoë"));
        assert!(matches!(text.cow(TextSpan::ABSENT), Cow::Owned(ref none) if none.is_empty()));
    }

    #[test]
    fn an_empty_string_and_the_absent_span_differ() {
        let body = r#"{"city":""}"#;
        let mut text = EventText::new(body);
        let empty = text.keep(Cow::Borrowed(&body[9..9]));
        assert!(empty.is_present());
        assert_eq!(text.get(empty), "");
        assert!(!TextSpan::ABSENT.is_present());
        assert_eq!(text.get(TextSpan::ABSENT), "");
    }
}
