//! JSON paths naming a place in a request body, as reported in validation errors.

use std::borrow::Cow;
use std::fmt;

/// The most segments a path holds: `$[3].payload.legal_bases[0].status` is the
/// deepest place the conversion validator ever reports.
const MAX_SEGMENTS: usize = 5;

/// One step of a [`JsonPath`], as returned by [`JsonPath::segments`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PathSegment<'p> {
    /// A member of an object, by name (unescaped).
    Key(&'p str),
    /// An element of an array, by zero-based index.
    Index(usize),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Segment<'a> {
    /// A name known at compile time: costs nothing to keep in an owned path.
    Static(&'static str),
    /// A name from the document, borrowed or already owned.
    Key(Cow<'a, str>),
    Index(usize),
}

impl Segment<'_> {
    fn into_owned(self) -> Segment<'static> {
        match self {
            Segment::Static(name) => Segment::Static(name),
            Segment::Key(name) => Segment::Key(Cow::Owned(name.into_owned())),
            Segment::Index(index) => Segment::Index(index),
        }
    }

    fn key(&self) -> Option<&str> {
        match self {
            Segment::Static(name) => Some(name),
            Segment::Key(name) => Some(name),
            Segment::Index(_) => None,
        }
    }
}

/// A path to a value inside a JSON document, rendered like `$.payload.tags[1]`.
///
/// The rendering follows the normalized paths of RFC 9535 (JSONPath), except
/// that member names made only of ASCII letters, digits and `_` (and not
/// starting with a digit) use the dot form `.name`, as the service's own errors
/// do (`$.event_type`); any other name uses the bracket form `['my key']`.
///
/// Paths built by this crate borrow member names from the request body where
/// they can; [`JsonPath::into_owned`] detaches one from it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct JsonPath<'a> {
    segments: [Segment<'a>; MAX_SEGMENTS],
    len: u8,
}

impl JsonPath<'static> {
    /// The path of the whole document, `$`.
    #[inline]
    pub const fn root() -> Self {
        JsonPath {
            segments: [const { Segment::Index(0) }; MAX_SEGMENTS],
            len: 0,
        }
    }

    /// The path of the payload member `name` (a constant) of the event,
    /// `$.payload.name`, or `$[i].payload.name` for the `i`th event of a
    /// batch; with `item`, of that element of the member's array
    /// (`$.payload.tags[2]`).
    ///
    /// Written whole, where `root().name("payload").name(name)` would move
    /// the path once a segment: each move copied it with wide loads of
    /// what narrower stores had just written, a stall every time, which
    /// made an invalid body's error paths cost more time than their
    /// instructions (benches/README.md, "Validation").
    pub(crate) fn payload_member(
        event: Option<usize>,
        name: &'static str,
        item: Option<usize>,
    ) -> Self {
        use Segment::{Index, Static};
        let (segments, len) = match (event, item) {
            (None, None) => (
                [
                    Static("payload"),
                    Static(name),
                    Index(0),
                    Index(0),
                    Index(0),
                ],
                2,
            ),
            (None, Some(item)) => (
                [
                    Static("payload"),
                    Static(name),
                    Index(item),
                    Index(0),
                    Index(0),
                ],
                3,
            ),
            (Some(event), None) => (
                [
                    Index(event),
                    Static("payload"),
                    Static(name),
                    Index(0),
                    Index(0),
                ],
                3,
            ),
            (Some(event), Some(item)) => (
                [
                    Index(event),
                    Static("payload"),
                    Static(name),
                    Index(item),
                    Index(0),
                ],
                4,
            ),
        };
        JsonPath { segments, len }
    }
}

impl<'a> JsonPath<'a> {
    /// Appends an object member whose name is a constant; a path already
    /// holding the maximum number of segments (five) is returned unchanged.
    #[inline]
    pub(crate) fn name(self, name: &'static str) -> Self {
        self.push(Segment::Static(name))
    }

    /// Appends an object member named by the document; see [`JsonPath::name`]
    /// for the length bound.
    #[inline]
    pub(crate) fn key(self, name: impl Into<Cow<'a, str>>) -> Self {
        self.push(Segment::Key(name.into()))
    }

    /// Appends an array index; see [`JsonPath::key`] for the length bound.
    #[inline]
    pub(crate) fn index(self, index: usize) -> Self {
        self.push(Segment::Index(index))
    }

    #[inline]
    fn push(mut self, segment: Segment<'a>) -> Self {
        // A silent truncation is better than a panic on untrusted input; the
        // validator never builds paths deeper than MAX_SEGMENTS anyway.
        if let Some(slot) = self.segments.get_mut(usize::from(self.len)) {
            *slot = segment;
            self.len += 1;
        }
        self
    }

    fn used(&self) -> &[Segment<'a>] {
        &self.segments[..usize::from(self.len)]
    }

    /// The segments after `$`, outermost first.
    pub fn segments(&self) -> impl DoubleEndedIterator<Item = PathSegment<'_>> + '_ {
        self.used().iter().map(|segment| match segment {
            Segment::Index(index) => PathSegment::Index(*index),
            named => PathSegment::Key(named.key().unwrap_or_default()),
        })
    }

    /// Whether this is the path of the whole document, `$`.
    pub fn is_root(&self) -> bool {
        self.len == 0
    }

    /// The name of the innermost object member on the path, if any.
    ///
    /// For `$.payload.tags[1]` this is `tags`; for `$[3]` it is `None`.
    pub fn last_key(&self) -> Option<&str> {
        self.segments().rev().find_map(|segment| match segment {
            PathSegment::Key(name) => Some(name),
            PathSegment::Index(_) => None,
        })
    }

    /// Detaches the path from the document its names were borrowed from.
    ///
    /// Only names borrowed from the document are copied: constant names and
    /// indices cost nothing.
    pub fn into_owned(self) -> JsonPath<'static> {
        JsonPath {
            segments: self.segments.map(Segment::into_owned),
            len: self.len,
        }
    }

    /// A short name for the place in messages: the innermost member name and
    /// the indices after it (`tags[1]`, `status`), or `None` for `$` and `$[3]`.
    pub(crate) fn label(&self) -> Option<Label<'_>> {
        let used = self.used();
        let start = used.iter().rposition(|segment| segment.key().is_some())?;
        Some(Label(&used[start..]))
    }
}

/// The tail of a path used to name a field in a message; see [`JsonPath::label`].
///
/// A name that is not a short lowercase identifier (it came from the client:
/// it may be long, odd, or start with anything) shows as `this field`, so that
/// a message always starts in lowercase and stays short; the path names it.
pub(crate) struct Label<'p>(&'p [Segment<'p>]);

fn is_label_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= 64
        && matches!(bytes.next(), Some(b'a'..=b'z'))
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
}

impl fmt::Display for Label<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The label starts at the innermost name (`JsonPath::label`), so
        // only its first segment is a name; the others are indices.
        for segment in self.0 {
            match segment {
                Segment::Index(index) => write!(f, "[{index}]")?,
                named => match named.key() {
                    Some(name) if is_label_name(name) => f.write_str(name)?,
                    _ => f.write_str("this field")?,
                },
            }
        }
        Ok(())
    }
}

fn is_plain_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z' | b'A'..=b'Z' | b'_'))
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn write_key(f: &mut fmt::Formatter<'_>, name: &str) -> fmt::Result {
    if is_plain_name(name) {
        return write!(f, ".{name}");
    }
    // RFC 9535 section 2.7: normalized paths quote names with single quotes
    // and escape `'`, `\` and control characters.
    f.write_str("['")?;
    for c in name.chars() {
        match c {
            '\'' => f.write_str("\\'")?,
            '\\' => f.write_str("\\\\")?,
            '\u{8}' => f.write_str("\\b")?,
            '\u{c}' => f.write_str("\\f")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            // The other C0 controls; DEL and the C1 controls are written as they are.
            c if c < '\u{20}' => write!(f, "\\u{:04x}", c as u32)?,
            c => write!(f, "{c}")?,
        }
    }
    f.write_str("']")
}

impl fmt::Display for JsonPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("$")?;
        for segment in self.segments() {
            match segment {
                PathSegment::Key(name) => write_key(f, name)?,
                PathSegment::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

impl fmt::Debug for JsonPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JsonPath({self})")
    }
}

impl PartialEq<str> for JsonPath<'_> {
    /// Compares the rendering (`$.payload.email`) without building a string.
    fn eq(&self, other: &str) -> bool {
        /// Consumes the expected text as the rendering is written.
        struct Expect<'s>(&'s str);
        impl fmt::Write for Expect<'_> {
            fn write_str(&mut self, part: &str) -> fmt::Result {
                self.0 = self.0.strip_prefix(part).ok_or(fmt::Error)?;
                Ok(())
            }
        }
        let mut expect = Expect(other);
        fmt::write(&mut expect, format_args!("{self}")).is_ok() && expect.0.is_empty()
    }
}

impl PartialEq<&str> for JsonPath<'_> {
    fn eq(&self, other: &&str) -> bool {
        *self == **other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_renders_as_dollar() {
        assert_eq!(JsonPath::root().to_string(), "$");
        assert!(JsonPath::root().is_root());
    }

    #[test]
    fn keys_and_indices_render_in_dot_and_bracket_form() {
        let path = JsonPath::root()
            .index(3)
            .name("payload")
            .name("legal_bases")
            .index(0)
            .name("status");
        assert_eq!(path.to_string(), "$[3].payload.legal_bases[0].status");
        assert_eq!(path.last_key(), Some("status"));
    }

    #[test]
    fn unusual_names_use_quoted_brackets() {
        let path = JsonPath::root().name("payload").key("it's a\\b\n");
        assert_eq!(path.to_string(), r"$.payload['it\'s a\\b\n']");
        let path = JsonPath::root().key("9lives").key("a.b").key("");
        assert_eq!(path.to_string(), "$['9lives']['a.b']['']");
        // RFC 9535 section 2.7: only U+0000 to U+001F are escaped.
        let path = JsonPath::root().key("\u{1}\u{1f} \u{7f}\u{85}");
        assert_eq!(path.to_string(), "$['\\u0001\\u001f \u{7f}\u{85}']");
        assert_eq!(format!("{path:?}"), format!("JsonPath({path})"));
    }

    #[test]
    fn label_is_the_innermost_name_and_its_indices() {
        let path = JsonPath::root().name("payload").name("tags").index(1);
        assert_eq!(
            path.label().map(|l| l.to_string()).as_deref(),
            Some("tags[1]")
        );
        assert!(JsonPath::root().index(2).label().is_none());
        let odd = JsonPath::root().name("payload").key("Utm Content");
        assert_eq!(
            odd.label().map(|l| l.to_string()).as_deref(),
            Some("this field")
        );
        let label = |path: JsonPath<'_>| path.label().map(|l| l.to_string());
        let basis = JsonPath::root()
            .index(3)
            .name("payload")
            .name("legal_bases")
            .index(0);
        assert_eq!(label(basis).as_deref(), Some("legal_bases[0]"));
        let nested = JsonPath::root().name("a").index(1).index(2);
        assert_eq!(label(nested).as_deref(), Some("a[1][2]"));
        let odd_item = JsonPath::root().key("Utm Content").index(0);
        assert_eq!(label(odd_item).as_deref(), Some("this field[0]"));
    }

    #[test]
    fn pushing_past_the_bound_drops_the_extra_segment() {
        let path = JsonPath::root()
            .index(1)
            .index(2)
            .index(3)
            .index(4)
            .index(5)
            .index(6);
        assert_eq!(path.to_string(), "$[1][2][3][4][5]");
    }

    #[test]
    fn comparison_with_text_is_exact() {
        let path = JsonPath::root().name("payload").name("email");
        assert_eq!(path, "$.payload.email");
        assert_ne!(path, "$.payload.emai");
        assert_ne!(path, "$.payload.emails");
        assert_ne!(path, "");
    }

    #[test]
    fn a_payload_member_written_whole_is_the_path_built_segment_by_segment() {
        let built = |event: Option<usize>| match event {
            Some(index) => JsonPath::root().index(index).name("payload"),
            None => JsonPath::root().name("payload"),
        };
        for event in [None, Some(0), Some(7)] {
            let whole = JsonPath::payload_member(event, "tags", None);
            assert_eq!(whole, built(event).name("tags"));
            let item = JsonPath::payload_member(event, "tags", Some(2));
            assert_eq!(item, built(event).name("tags").index(2));
        }
        assert_eq!(
            JsonPath::payload_member(Some(3), "tags", Some(1)).to_string(),
            "$[3].payload.tags[1]"
        );
        assert_eq!(
            JsonPath::payload_member(None, "email", None).to_string(),
            "$.payload.email"
        );
    }

    #[test]
    fn into_owned_keeps_the_rendering() {
        let name = String::from("cf_age");
        let owned = JsonPath::root()
            .name("payload")
            .key(name.as_str())
            .into_owned();
        drop(name);
        assert_eq!(owned, "$.payload.cf_age");
    }
}
