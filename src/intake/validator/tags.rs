//! Tags: the `tags` array of the payload, checked as it is read and kept as
//! its raw JSON text, then read again by the lexer only when the host asks
//! for them ([`Tags`]), so that a valid event holds no list of tags.
//!
//! As the real service requires, tags are lowercase (`VALUES_MUST_BE_LOWERCASE`) and unique
//! (`VALUES_MUST_BE_UNIQUE`).

use std::borrow::Cow;

use super::context::Ctx;
use super::errors::{DataType, ErrorType, ValidationRules};
use super::json_path::JsonPath;
use super::lexer::{JsonStr, Lexer, Scan};
use super::membership::SmallSet;
use super::string_rules::{is_blank, is_too_long, unescaped_refused_control};
use super::vocabulary::Field;

/// Iterator over the tags of a [`ConversionEvent`](crate::ConversionEvent); see
/// [`ConversionEvent::tags`](crate::ConversionEvent::tags).
///
/// Each tag borrows from the body unless it held JSON escapes.
#[derive(Clone, Debug)]
pub struct Tags<'a> {
    /// The lexer over the raw text of `tags`, past the `[` and the tags
    /// already given.
    lexer: Lexer<'a>,
    /// Whether no tag has been given yet (no `,` comes before the next one).
    first: bool,
}

impl<'a> Tags<'a> {
    /// The tags of `text`, the raw text of an array of strings the lexer
    /// has checked.
    pub(super) fn new(text: &'a str) -> Self {
        let mut lexer = Lexer::new(text, 0);
        // The text was sliced from the `[` on: it opens with one.
        let _opened = lexer.eat(b'[');
        Tags { lexer, first: true }
    }
}

impl<'a> Iterator for Tags<'a> {
    type Item = Cow<'a, str>;

    fn next(&mut self) -> Option<Self::Item> {
        // The same lexer that checked the array when the event was
        // validated reads it again, so it cannot fail here; should it, the
        // iteration ends rather than panics.
        if !self.lexer.next_element(&mut self.first).ok()? {
            return None;
        }
        match self.lexer.peek_value() {
            Some(b'"') => self.lexer.string().ok().map(JsonStr::decode),
            _ => None,
        }
    }
}

/// Reads `tags` (an array at depth 3); gives its raw text to keep, `None`
/// for `null` or a value of another type.
pub(super) fn read_tags<'a>(lexer: &mut Lexer<'a>, ctx: &mut Ctx<'_, 'a>) -> Scan<Option<&'a str>> {
    match lexer.peek_value() {
        Some(b'[') => {}
        Some(b'n') => return lexer.literal(b"null").map(|()| None),
        _ => {
            lexer.skip_value(3)?;
            ctx.wrong_type(ctx.field_path(Field::Tags), DataType::Array);
            return Ok(None);
        }
    }
    let start = lexer.position();
    lexer.open(b'[', 3)?;
    let limits = ctx.limits;
    // The tags read so far, unescaped: hashed past the first few, so that
    // even a raised `max_tags` never makes the uniqueness test quadratic.
    let mut earlier = SmallSet::default();
    let (mut first, mut index) = (true, 0);
    while lexer.next_element(&mut first)? {
        if index >= limits.max_tags {
            if index == limits.max_tags {
                ctx.report(
                    ErrorType::TooManyItems,
                    ctx.field_path(Field::Tags),
                    Some(ValidationRules::MaxItems(limits.max_tags)),
                );
            }
            lexer.skip_value(4)?;
            index += 1;
            continue;
        }
        if lexer.peek_value() != Some(b'"') {
            lexer.skip_value(4)?;
            ctx.wrong_type(tag_path(ctx, index), DataType::String);
            index += 1;
            continue;
        }
        // Unescaped once (only a tag with escapes allocates), so that each
        // rule below and each uniqueness comparison reads plain text.
        let tag = lexer.string()?.decode();
        let failure = if unescaped_refused_control(&tag) {
            Some((ErrorType::InvalidCharacters, None))
        } else if is_blank(&tag) {
            Some((ErrorType::CannotBeBlank, None))
        } else if is_too_long(&tag, limits.max_tag_len) {
            Some((
                ErrorType::ValueTooLong,
                Some(ValidationRules::MaxLength(limits.max_tag_len)),
            ))
        } else if has_uppercase(&tag) {
            Some((ErrorType::ValuesMustBeLowercase, None))
        } else if !earlier.insert(tag) {
            Some((ErrorType::ValuesMustBeUnique, None))
        } else {
            None
        };
        if let Some((error_type, rules)) = failure {
            ctx.report(error_type, tag_path(ctx, index), rules);
        }
        index += 1;
    }
    Ok(lexer.read_since(start))
}

/// Whether a string holds an uppercase letter.
pub(crate) fn has_uppercase(value: &str) -> bool {
    if value.is_ascii() {
        value.bytes().any(|b| b.is_ascii_uppercase())
    } else {
        value.chars().any(char::is_uppercase)
    }
}

/// The path of the `index`th tag.
fn tag_path(ctx: &Ctx<'_, '_>, index: usize) -> JsonPath<'static> {
    JsonPath::payload_member(ctx.event, Field::Tags.name(), Some(index))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_read_back_every_string_of_a_checked_array() {
        let text = r#"[ "a" , "b\"]" ,"na\u00efve",""]"#;
        let tags: Vec<Cow<'_, str>> = Tags::new(text).collect();
        assert_eq!(tags, ["a", "b\"]", "na\u{ef}ve", ""]);
        assert!(matches!(tags[0], Cow::Borrowed("a")), "{:?}", tags[0]);
        assert_eq!(Tags::new("[]").count(), 0);
        assert_eq!(Tags::new("[ ]").count(), 0);
        // Text no lexer checked ends the iteration; it never panics.
        assert_eq!(Tags::new("not an array").count(), 0);
        assert_eq!(Tags::new(r#"["a",12,"b"]"#).count(), 1);
    }
}
