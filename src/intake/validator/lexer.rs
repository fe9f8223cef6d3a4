//! The one JSON lexer of the validator: RFC 8259's grammar with serde_json's
//! limits, over text already known to be UTF-8.
//!
//! Every reader of the validator (the event envelope, the payload, tags, legal
//! bases, custom fields, unknown attributes, the traffic-source cookie test)
//! and every later reading of checked text ([`crate::Tags`], the decoding of
//! escapes) goes through [`Lexer`], so a document is accepted or refused by
//! one piece of code. The readers pull values member by member; the lexer
//! never builds a tree, and strings come out as slices of the text
//! ([`JsonStr`]), decoded only when they hold escapes.
//!
//! serde_json's limits, so that both accept the same documents: strings hold
//! no raw control character and no lone UTF-16 surrogate escape, numbers fit
//! an `f64`, arrays and objects nest at most [`NESTING_LIMIT`] deep.

use std::borrow::Cow;

/// The byte offset at which the body stops being JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct NotJson(pub(super) usize);

/// What every lexer step returns: the value read, or where JSON stopped.
pub(super) type Scan<T> = Result<T, NotJson>;

/// The deepest nesting of arrays and objects accepted, as in serde_json
/// (whose recursion limit of 128 refuses the 128th level), so that both accept
/// the same documents. It also bounds the recursion of the lexer.
pub(super) const NESTING_LIMIT: usize = 127;

/// A JSON lexer over text already known to be UTF-8.
///
/// It checks the grammar of RFC 8259 as it goes and hands out strings as
/// slices of the body; the readers drive it member by member, so the
/// body is read exactly once. Hand-written rather than serde-driven because a
/// generic deserializer spent most of the time of a validation in plumbing
/// (about twice the cost of this lexer on the benchmark bodies).
#[derive(Clone, Debug)]
pub(super) struct Lexer<'a> {
    /// The whole text read, the body or a slice of it.
    text: &'a str,
    /// The byte offset of the next byte to read.
    position: usize,
    /// Levels of nesting above the event (1 in a batch).
    nesting_offset: usize,
}

/// A JSON string as it appears in the body: its contents between the quotes,
/// escapes left in, and whether it holds any.
#[derive(Clone, Copy, Debug)]
pub(super) struct JsonStr<'a> {
    /// The text between the quotes, escapes left in.
    contents: &'a str,
    /// Whether `contents` holds an escape, and so must be decoded.
    escaped: bool,
}

impl<'a> JsonStr<'a> {
    /// The string itself: borrowed from the body unless it held escapes.
    #[inline]
    pub(super) fn decode(self) -> Cow<'a, str> {
        if self.escaped {
            Cow::Owned(unescape(self.contents))
        } else {
            Cow::Borrowed(self.contents)
        }
    }
}

/// A value read where a scalar is expected.
pub(super) enum Scalar<'a> {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A string.
    Str(JsonStr<'a>),
    /// A number, an array or an object (skipped).
    Other,
}

impl<'a> Lexer<'a> {
    /// A lexer at the start of `text`, which sits `nesting_offset` levels of
    /// arrays and objects deep in the document (1 for the events of a batch).
    pub(super) fn new(text: &'a str, nesting_offset: usize) -> Self {
        Lexer {
            text,
            position: 0,
            nesting_offset,
        }
    }

    /// The whole text read.
    pub(super) fn text(&self) -> &'a str {
        self.text
    }

    /// The text as bytes: JSON's delimiters are all ASCII.
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// Refuses the text at the current position.
    fn fail<T>(&self) -> Scan<T> {
        Err(NotJson(self.position))
    }

    /// The next byte, not consumed.
    fn peek(&self) -> Option<u8> {
        self.bytes().get(self.position).copied()
    }

    /// Skips whitespace and gives the first byte of the value that follows.
    pub(super) fn peek_value(&mut self) -> Option<u8> {
        self.position = skip_whitespace(self.bytes(), self.position);
        self.peek()
    }

    /// Consumes `byte` if it is next; whether it was.
    pub(super) fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        self.position += usize::from(found);
        found
    }

    /// Consumes `byte`, which must be next.
    fn expect(&mut self, byte: u8) -> Scan<()> {
        if self.eat(byte) { Ok(()) } else { self.fail() }
    }

    /// Checks that only whitespace is left.
    pub(super) fn finish(&mut self) -> Scan<()> {
        if self.peek_value().is_none() {
            Ok(())
        } else {
            self.fail()
        }
    }

    /// Reads the opening byte of an array or object at `depth`.
    pub(super) fn open(&mut self, byte: u8, depth: usize) -> Scan<()> {
        if depth + self.nesting_offset > NESTING_LIMIT {
            return self.fail();
        }
        self.expect(byte)
    }

    /// Moves to the next member of an object whose `{` was read, giving its
    /// name, the lexer then sitting on its value; `None` after the `}`.
    #[inline(always)]
    pub(super) fn next_key(&mut self, first: &mut bool) -> Scan<Option<JsonStr<'a>>> {
        self.position = skip_whitespace(self.bytes(), self.position);
        if self.eat(b'}') {
            return Ok(None);
        }
        if !std::mem::replace(first, false) {
            self.expect(b',')?;
            self.position = skip_whitespace(self.bytes(), self.position);
        }
        let name = self.string()?;
        self.position = skip_whitespace(self.bytes(), self.position);
        self.expect(b':')?;
        Ok(Some(name))
    }

    /// Moves to the next element of an array whose `[` was read: `true` with
    /// the lexer on the element, `false` after the `]`.
    pub(super) fn next_element(&mut self, first: &mut bool) -> Scan<bool> {
        self.position = skip_whitespace(self.bytes(), self.position);
        if self.eat(b']') {
            return Ok(false);
        }
        if !std::mem::replace(first, false) {
            self.expect(b',')?;
        }
        Ok(true)
    }

    /// Reads a string, its opening quote next.
    ///
    /// Inlined, as are [`Lexer::next_key`] and [`Lexer::scalar`], into the
    /// readers: called out of line once per string (some 60 in a full
    /// event), their register saves and restores were 16% of a
    /// validation's instructions (`valgrind --tool=callgrind` on the
    /// validator bench: typical 12,122 to 10,208, full 25,707 to 21,870,
    /// minimal 3,284 to 2,740; benches/README.md, "Validation").
    #[inline(always)]
    pub(super) fn string(&mut self) -> Scan<JsonStr<'a>> {
        self.expect(b'"')?;
        let start = self.position;
        let mut escaped = false;
        loop {
            self.position = find_special(self.bytes(), self.position);
            match self.peek() {
                Some(b'"') => {
                    let Some(contents) = self.text.get(start..self.position) else {
                        return self.fail();
                    };
                    self.position += 1;
                    return Ok(JsonStr { contents, escaped });
                }
                Some(b'\\') => {
                    escaped = true;
                    self.position += 1;
                    self.escape()?;
                }
                // RFC 8259 section 7: control characters must be escaped.
                _ => return self.fail(),
            }
        }
    }

    /// Decodes the contents of a string this lexer has read (the text
    /// between its quotes, the lexer at its start) into `decoded`.
    fn unescape_into(&mut self, decoded: &mut String) -> Scan<()> {
        loop {
            let start = self.position;
            self.position = find_special(self.bytes(), start);
            // Both ends sit on an ASCII byte or the end: char boundaries.
            decoded.push_str(self.text.get(start..self.position).unwrap_or_default());
            match self.peek() {
                None => return Ok(()),
                Some(b'\\') => {
                    self.position += 1;
                    decoded.push(self.escape()?);
                }
                // A quote or a raw control character: not string contents.
                Some(_) => return self.fail(),
            }
        }
    }

    /// Reads an escape, its backslash just read, and gives the character it
    /// stands for.
    fn escape(&mut self) -> Scan<char> {
        let decoded = match self.peek() {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                self.position += 1;
                return self.unicode_escape();
            }
            _ => return self.fail(),
        };
        self.position += 1;
        Ok(decoded)
    }

    /// Reads the four hexadecimal digits of a `\u` escape (and those of the
    /// low surrogate escape that must follow a high one); gives the character.
    fn unicode_escape(&mut self) -> Scan<char> {
        let scalar = match self.hex4()? {
            // RFC 8259 section 7: a character outside the Basic
            // Multilingual Plane is a pair of surrogate escapes;
            // serde_json refuses a lone surrogate in a string, so do we.
            high @ 0xD800..=0xDBFF => {
                if !(self.eat(b'\\') && self.eat(b'u')) {
                    return self.fail();
                }
                match self.hex4()? {
                    low @ 0xDC00..=0xDFFF => {
                        0x10000 + (u32::from(high - 0xD800) << 10) + u32::from(low - 0xDC00)
                    }
                    _ => return self.fail(),
                }
            }
            0xDC00..=0xDFFF => return self.fail(),
            scalar => u32::from(scalar),
        };
        // Every value left is a Unicode scalar value: surrogates were refused.
        char::from_u32(scalar).map_or_else(|| self.fail(), Ok)
    }

    /// Reads the four hexadecimal digits of a `\u` escape.
    fn hex4(&mut self) -> Scan<u16> {
        let digits = self.bytes().get(self.position..self.position + 4);
        let Some(digits) = digits.filter(|d| d.iter().all(u8::is_ascii_hexdigit)) else {
            return self.fail();
        };
        let value = digits.iter().fold(0u16, |value, digit| {
            let nibble = match digit {
                b'0'..=b'9' => digit - b'0',
                b'a'..=b'f' => digit - b'a' + 10,
                _ => digit - b'A' + 10,
            };
            (value << 4) | u16::from(nibble)
        });
        self.position += 4;
        Ok(value)
    }

    /// Reads `true`, `false` or `null`, as `word` says.
    pub(super) fn literal(&mut self, word: &[u8]) -> Scan<()> {
        let end = self.position + word.len();
        if self.bytes().get(self.position..end) == Some(word) {
            self.position = end;
            Ok(())
        } else {
            self.fail()
        }
    }

    /// Reads a number (RFC 8259 section 6).
    fn number(&mut self) -> Scan<()> {
        let start = self.position;
        self.eat(b'-');
        let integer = self.position;
        match self.peek() {
            Some(b'0') => self.position += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return self.fail(),
        }
        let integer_digits = self.position - integer;
        if self.eat(b'.') {
            self.required_digits()?;
        }
        let exponent = self.eat(b'e') || self.eat(b'E');
        if exponent {
            let _sign = self.eat(b'+') || self.eat(b'-');
            self.required_digits()?;
        }
        // Without an exponent, a number of at most 308 integer digits is
        // below 1e308 < f64::MAX: finite, whatever its fraction. Parsing it
        // to find out took a fifth of the time of a body of `"x":0` members.
        if !exponent && integer_digits <= MAX_FINITE_INTEGER_DIGITS {
            return Ok(());
        }
        // serde_json refuses a number that overflows an f64; so do we.
        let finite = self
            .text
            .get(start..self.position)
            .and_then(|number| number.parse::<f64>().ok())
            .is_some_and(f64::is_finite);
        if finite { Ok(()) } else { Err(NotJson(start)) }
    }

    /// Reads any number of decimal digits.
    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.position += 1;
        }
    }

    /// Reads one decimal digit or more.
    fn required_digits(&mut self) -> Scan<()> {
        let start = self.position;
        self.digits();
        if self.position == start {
            self.fail()
        } else {
            Ok(())
        }
    }

    /// Skips any value; `depth` is its depth if it is a container. Gives the
    /// depth of the deepest container in it, 0 when it holds none.
    pub(super) fn skip_value(&mut self, depth: usize) -> Scan<usize> {
        match self.peek_value() {
            Some(b'"') => self.string().map(|_| 0),
            Some(b'{') => {
                self.open(b'{', depth)?;
                let (mut first, mut deepest) = (true, depth);
                while self.next_key(&mut first)?.is_some() {
                    deepest = deepest.max(self.skip_value(depth + 1)?);
                }
                Ok(deepest)
            }
            Some(b'[') => {
                self.open(b'[', depth)?;
                let (mut first, mut deepest) = (true, depth);
                while self.next_element(&mut first)? {
                    deepest = deepest.max(self.skip_value(depth + 1)?);
                }
                Ok(deepest)
            }
            Some(b't') => self.literal(b"true").map(|()| 0),
            Some(b'f') => self.literal(b"false").map(|()| 0),
            Some(b'n') => self.literal(b"null").map(|()| 0),
            Some(b'-' | b'0'..=b'9') => self.number().map(|()| 0),
            _ => self.fail(),
        }
    }

    /// The byte offset of the next byte to read.
    pub(super) fn position(&self) -> usize {
        self.position
    }

    /// The text read since byte offset `start`.
    pub(super) fn read_since(&self, start: usize) -> Option<&'a str> {
        self.text.get(start..self.position)
    }

    /// Reads a value where a scalar is expected; anything else is skipped.
    #[inline(always)]
    pub(super) fn scalar(&mut self, depth: usize) -> Scan<Scalar<'a>> {
        Ok(match self.peek_value() {
            Some(b'"') => Scalar::Str(self.string()?),
            Some(b't') => self.literal(b"true").map(|()| Scalar::Bool(true))?,
            Some(b'f') => self.literal(b"false").map(|()| Scalar::Bool(false))?,
            Some(b'n') => self.literal(b"null").map(|()| Scalar::Null)?,
            _ => self.skip_value(depth).map(|_| Scalar::Other)?,
        })
    }
}

/// The most integer digits a number without an exponent can have and surely
/// fit an `f64` (whose largest finite value is about 1.8e308).
const MAX_FINITE_INTEGER_DIGITS: usize = 308;

/// The position of the first `"`, `\` or control character at or after `at`,
/// or the end of `bytes`.
pub(super) fn find_special(bytes: &[u8], mut at: usize) -> usize {
    // Eight bytes at a time (Mycroft's zero-byte test, as serde_json does):
    // the lowest flagged byte of a word is always a true match.
    const ONES: u64 = u64::MAX / 255;
    const HIGH: u64 = ONES << 7;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let Ok(chunk) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        let word = u64::from_le_bytes(chunk);
        let control = word.wrapping_sub(ONES * 0x20) & !word;
        let quote = word ^ (ONES * u64::from(b'"'));
        let quote = quote.wrapping_sub(ONES) & !quote;
        let backslash = word ^ (ONES * u64::from(b'\\'));
        let backslash = backslash.wrapping_sub(ONES) & !backslash;
        let found = (control | quote | backslash) & HIGH;
        if found != 0 {
            return at + (found.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    while bytes
        .get(at)
        .is_some_and(|b| *b != b'"' && *b != b'\\' && *b >= 0x20)
    {
        at += 1;
    }
    at
}

/// The position of the first byte at or after `position` that is not JSON
/// whitespace (RFC 8259 section 2), or the end of `bytes`.
fn skip_whitespace(bytes: &[u8], mut position: usize) -> usize {
    while bytes
        .get(position)
        .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
    {
        position += 1;
    }
    position
}

/// Raw JSON string contents the lexer has read, escapes decoded. Out of
/// line: most strings have no escape, and their path through
/// [`JsonStr::decode`] stays small enough to inline.
#[inline(never)]
fn unescape(contents: &str) -> String {
    // An escape is never shorter than the UTF-8 of what it stands for: one
    // allocation of the raw length always suffices.
    let mut decoded = String::with_capacity(contents.len());
    // The lexer that checked the escapes decodes them: one grammar, read
    // by one piece of code. Checked contents decode whole; anything else
    // would stop at its first malformed escape, never panic.
    let _checked = Lexer::new(contents, 0).unescape_into(&mut decoded);
    decoded
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn escapes_decode_as_the_lexer_reads_them() {
        let decoded = unescaped(r#""na\u00efve \ud83d\ude00 \n\t\/\\\u0041\"\b\f\r""#);
        assert_eq!(decoded, "na\u{ef}ve \u{1F600} \n\t/\\A\"\u{8}\u{c}\r");
        assert!(matches!(unescaped(r#""ab""#), Cow::Borrowed("ab")));
        assert_eq!(unescape(r"\u00e9\uD83D\uDE00x"), "\u{e9}\u{1F600}x");
        // Contents no lexer checked stop at the first malformed escape.
        assert_eq!(unescape(r"ok\x rest"), "ok");
        assert_eq!(unescape(r"a\ud800"), "a");
    }

    fn scan(text: &str) -> Scan<usize> {
        let mut lexer = Lexer::new(text, 0);
        let deepest = lexer.skip_value(1)?;
        lexer.finish().map(|()| deepest)
    }

    #[test]
    fn lexer_accepts_rfc_8259_json() {
        for ok in [
            "0",
            "-0",
            "1.5e-3",
            "-12E+4",
            "1e308",
            "true",
            "false",
            "null",
            r#""""#,
            r#""a\"b\\c\/\b\f\n\r\t\u00e9\ud83d\ude00""#,
            " [ 1 , [ ] , { } ] ",
            r#"{"a":{"b":[1,"x",null]},"c":""}"#,
            r#""caf\u00e9 \u2028""#,
        ] {
            assert!(scan(ok).is_ok(), "{ok}");
        }
        assert_eq!(scan("[[1],[[2]]]"), Ok(3));
        assert_eq!(scan(r#"{"a":{"b":{}},"c":1}"#), Ok(3));
        assert_eq!(scan(r#"[{"a":[{}]}]"#), Ok(4));
        assert_eq!(scan("7"), Ok(0));
    }

    #[test]
    fn lexer_refuses_what_serde_json_refuses() {
        for bad in [
            "",
            "01",
            "1.",
            ".5",
            "-",
            "+1",
            "1e",
            "1e400",
            "tru",
            "nul",
            "[1,]",
            "[,1]",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "{a:1}",
            "[1 2]",
            "\"\\x\"",
            "\"\\u12\"",
            "\"\\ud800\"",
            "\"x\\udc00\"",
            "\"\\ud800\\u0041\"",
            "\"tab\there\"",
            "\"open",
            "{} {}",
            "[",
            "]",
            "NaN",
            "Infinity",
        ] {
            assert!(scan(bad).is_err(), "{bad:?}");
            assert!(
                serde_json::from_str::<Value>(bad).is_err(),
                "serde_json accepts {bad:?}"
            );
        }
    }

    #[test]
    fn lexer_nests_as_deep_as_serde_json() {
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(scan(&nested(NESTING_LIMIT)).is_ok());
        assert!(serde_json::from_str::<Value>(&nested(NESTING_LIMIT)).is_ok());
        assert!(scan(&nested(NESTING_LIMIT + 1)).is_err());
        assert!(serde_json::from_str::<Value>(&nested(NESTING_LIMIT + 1)).is_err());
        assert!(scan(&nested(100_000)).is_err());
        let objects =
            |depth: usize| format!("{}{}", "{\"a\":".repeat(depth - 1) + "{", "}".repeat(depth));
        assert!(scan(&objects(NESTING_LIMIT)).is_ok());
        assert!(serde_json::from_str::<Value>(&objects(NESTING_LIMIT)).is_ok());
        assert!(scan(&objects(NESTING_LIMIT + 1)).is_err());
        assert!(serde_json::from_str::<Value>(&objects(NESTING_LIMIT + 1)).is_err());
        assert!(scan(&objects(100_000)).is_err());
    }

    #[test]
    fn special_bytes_are_found_in_every_lane() {
        for position in 0..20 {
            for special in [b'"', b'\\', 0x00, 0x1f] {
                let mut bytes = vec![b'a'; 20];
                bytes.extend_from_slice("é€".as_bytes());
                bytes[position] = special;
                assert_eq!(find_special(&bytes, 0), position);
            }
        }
        assert_eq!(
            find_special("abcé€😀 xyz".as_bytes(), 0),
            "abcé€😀 xyz".len()
        );
        assert_eq!(find_special(b"", 0), 0);
    }

    fn unescaped(json: &str) -> Cow<'_, str> {
        let mut lexer = Lexer::new(json, 0);
        let string = lexer.string().map(JsonStr::decode);
        assert_eq!(lexer.position, json.len(), "{json}");
        string.unwrap_or_else(|NotJson(at)| panic!("{json}: not JSON at {at}"))
    }
}
