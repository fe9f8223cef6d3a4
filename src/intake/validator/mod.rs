//! Conversion events: a pure validator for their JSON body and the typed event it yields.
//!
//! [`validate_conversion`] checks a body against the rules of the real
//! service's conversion event (required `event_type`, `event_family` and
//! `payload.conversion_identifier` and `email`, typed and bounded standard
//! fields, custom `cf_` fields, legal bases, lowercase unique tags) in one
//! pass over the bytes,
//! without I/O, clock or store. A valid event borrows its strings from the body,
//! so validating a typical event allocates nothing (an event with custom
//! fields, legal bases or dropped attributes makes one block for them,
//! `extras`); an invalid one costs about one allocation per error, and
//! every error is reported, not only the first.
//!
//! # The flow
//!
//! ```text
//! body ──► size check ──► UTF-8 check ──► lexer ──► readers ──┬─► ConversionEvent
//!          (413 first)    (once, whole)   (RFC 8259,  (rules,  │   (strings borrowed)
//!                                          serde_json  member   └─► ValidationErrors
//!                                          limits)     by member)   (every error, in order)
//! ```
//!
//! 1. Size: [`validate_conversion`] / [`validate_batch`] refuse a body over
//!    [`ConversionLimits::max_body_bytes`] before reading it (`limits`).
//! 2. UTF-8: the body is checked once, whole ([`utf8`]; RFC 8259 section
//!    8.1), so the lexer can slice strings out of it without checking again.
//! 3. Lexer: one JSON lexer (`lexer`, [`lexer::Lexer`]) checks the grammar of
//!    RFC 8259 with serde_json's limits as the readers pull values from it;
//!    there is no `serde_json::Value`, and a body that stops being JSON is a
//!    single `BAD_REQUEST` with its line and column ([`not_json`]).
//! 4. Readers, one per part of the event, each applying its rules member by
//!    member into the shared [`context::Ctx`]:
//!    - `envelope`: the batch array and the event object (`event_type`,
//!      `event_family`, `payload`);
//!    - `payload`: the standard fields, checked by `string_rules` and
//!      `traffic_source`;
//!    - `tags`, `legal_bases` (whose closed sets of values are `choice`s);
//!    - `custom_fields` (`cf_` members) and `unknown` (everything else,
//!      accepted and dropped or rejected).
//!
//!    The names they share (the payload's fields, the event types, the legal
//!    bases' closed sets, the scopes of unknown attributes, the `cf_`
//!    prefix) are in `vocabulary`, which imports no reader: the modules
//!    import each other in one direction only, from the envelope down to the
//!    lexer, and `.ci/run` checks that no cycle comes back.
//! 5. Answer: the typed event (`event`), or the errors collected (`errors`,
//!    with their paths from `json_path`), rendered to text only by
//!    [`ValidationErrors::to_body`].
//!
//! Strings are `&str` slices of the body (`Cow::Owned` only when they hold
//! escapes), `tags` is kept as its raw JSON text and read again lazily by the
//! same lexer, and the few variable-length lists (legal bases, custom fields,
//! dropped attribute names) live in inline `SmallVec`s of one block
//! (`extras`), made only for an event that has any, so the event itself
//! stays small to move.
//!
//! Linear time whatever the body: every set the rules test membership of
//! (dropped attribute names, tags, the account's custom fields, the custom
//! fields already sent) is searched linearly only while it is small and is
//! hashed past that (`membership`), so no shape of body, however hostile,
//! costs more than a small constant per byte (`benches/validation.rs` times
//! one body per shape); errors past [`ConversionLimits::max_errors`] and
//! dropped names past the first 100 are counted, not kept.

mod choice;
mod context;
mod custom_fields;
mod dropped;
mod envelope;
pub(crate) mod errors;
pub(crate) mod event;
mod extras;
pub(crate) mod json_path;
mod legal_bases;
mod lexer;
pub(crate) mod limits;
mod member_order;
mod membership;
mod payload;
mod payload_text;
mod string_rules;
pub(crate) mod tags;
mod text_span;
mod traffic_source;
mod unknown;
pub(crate) mod vocabulary;

use context::{Ctx, Shaped};
use envelope::{read_batch, read_event};
use errors::{Detail, FieldError, ValidationErrors};
use event::ConversionEvent;
use lexer::{Lexer, NotJson};
use limits::ConversionLimits;

/// Validates one conversion event body and returns the typed event.
///
/// `body` is the raw request body; `custom_fields` are the names of the
/// account's custom fields, *without* the `cf_` prefix (a payload member
/// `cf_plan` is accepted when `"plan"` is listed). The function is pure: no
/// I/O, no clock, no store, and it never panics, whatever the bytes.
///
/// The rules: `event_type` must be `CONVERSION` and `event_family` `CDP`;
/// `payload` must be an object holding a non-blank `conversion_identifier` and
/// a plausible `email` (see below); every other standard field is optional, may
/// be `null` (same as absent), and must have its JSON type (strings; `tags` an
/// array of lowercase, unique, non-blank strings; `available_for_mailing` a
/// boolean; `legal_bases` an array of objects with a known `category` and
/// `type`, and a `status` when the type is `consent`); a non-blank
/// `client_tracking_id` must be a UUID (8-4-4-4-12 hexadecimal digits); when
/// `traffic_source` holds a traffic-source cookie (JSON object text, raw or
/// base64 in the standard or URL-safe alphabet, padded or not), each of
/// `traffic_medium`, `traffic_campaign` and `traffic_value` that is not blank is
/// a `CONFLICTING_FIELD`; `cf_` fields of the account must be strings; other
/// attributes follow [`ConversionLimits::unknown_attributes`]; no member may
/// appear twice in an object; and the bounds of `limits` hold.
///
/// Every string that will be stored (each standard payload string,
/// `conversion_identifier` and `email` included, each tag, each custom
/// field's value and name) must be storable by every store alike: it must not
/// hold U+0000, which PostgreSQL cannot store in `text` (its `email` and
/// `conversion_identifier` columns), nor any other C0 control character but
/// tab, line feed and carriage return (U+0001 to U+001F except U+0009,
/// U+000A, U+000D). Such a character sent as an
/// escape (`\u0000`, `\b`, `\f`) is an `INVALID_CHARACTERS` error at the
/// field's path, reported before any other rule of that field; sent raw it is
/// not JSON (see below). Escaped tabs and line breaks are accepted. The names
/// of dropped attributes are never stored, so they may hold anything JSON
/// can; their paths render it escaped.
///
/// An e-mail address is plausible when it is at most 254 bytes long, holds
/// exactly one `@`, a local part of 1 to 64 bytes before it, a domain after it
/// made of at least two non-empty dot-separated labels, and no whitespace or
/// control character anywhere (RFC 5321 section 4.5.3.1 gives the lengths).
///
/// The body must be JSON as RFC 8259 defines it, with the limits serde_json
/// sets: strings hold no raw control character and no lone UTF-16 surrogate
/// escape (`"\ud800"` is refused, never replaced with U+FFFD), numbers fit an
/// `f64`, and arrays and objects nest at most 127 deep.
///
/// The time taken is linear in the length of the body (plus the number of
/// custom fields of the account) whatever its shape, and the memory used too.
///
/// # Errors
///
/// [`ValidationErrors`] with the problems found, in document order (checks
/// that need a whole object, such as a missing field, come at its end): all of
/// them up to [`ConversionLimits::max_errors`], then a `TOO_MANY_ERRORS` item
/// with the total. A body longer than [`ConversionLimits::max_body_bytes`]
/// gives a single `BODY_TOO_LARGE` (status 413) without being parsed; a body
/// that is not JSON, or not a JSON object, gives a single `BAD_REQUEST` at `$`.
pub fn validate_conversion<'a>(
    body: &'a [u8],
    custom_fields: &[&str],
    limits: &ConversionLimits,
) -> Result<ConversionEvent<'a>, ValidationErrors> {
    if let Some(too_large) = body_too_large(body.len(), limits) {
        return Err(too_large);
    }
    let text = utf8(body)?;
    let mut ctx = Ctx::new(limits, custom_fields);
    let mut event = ConversionEvent::empty(text);
    let mut lexer = Lexer::new(text, 0);
    let shape = read_event(&mut lexer, &mut ctx, &mut event)
        .and_then(|shape| lexer.finish().map(|()| shape));
    match shape {
        Err(NotJson(at)) => Err(not_json(body, at)),
        Ok(Shaped::Wrong | Shaped::Null) => Err(ValidationErrors::single(FieldError::bad_body(
            Detail::ExpectedObject,
        ))),
        Ok(Shaped::Right(())) if ctx.errors.is_empty() => Ok(event),
        Ok(Shaped::Right(())) => Err(ctx.errors.finish()),
    }
}

/// Validates a batch body, a JSON array of conversion events, as a whole.
///
/// Each event follows the rules of [`validate_conversion`]; the batch is
/// accepted only when every event is valid, and the events come back in
/// request order.
///
/// # Errors
///
/// [`ValidationErrors`] with the problems of every event (up to
/// [`ConversionLimits::max_errors`] for the whole batch, then a
/// `TOO_MANY_ERRORS` item), paths starting with
/// the event's index (`$[3].payload.email`); an event that is not an object is
/// an `INVALID_DATA_TYPE` at `$[i]`. An empty array is a `CANNOT_BE_EMPTY` at
/// `$`; more than [`ConversionLimits::max_batch_events`] events is a
/// `TOO_MANY_ITEMS` at `$` (the events past the bound are checked for syntax
/// only). A body over [`ConversionLimits::max_body_bytes`] gives a single
/// `BODY_TOO_LARGE` (413); a body that is not JSON, or not an array, a single
/// `BAD_REQUEST`.
pub fn validate_batch<'a>(
    body: &'a [u8],
    custom_fields: &[&str],
    limits: &ConversionLimits,
) -> Result<Vec<ConversionEvent<'a>>, ValidationErrors> {
    if let Some(too_large) = body_too_large(body.len(), limits) {
        return Err(too_large);
    }
    let text = utf8(body)?;
    let mut ctx = Ctx::new(limits, custom_fields);
    // The batch array is one level of nesting above its events.
    let mut lexer = Lexer::new(text, 1);
    let outcome =
        read_batch(&mut lexer, &mut ctx).and_then(|events| lexer.finish().map(|()| events));
    match outcome {
        Err(NotJson(at)) => Err(not_json(body, at)),
        Ok(None) => Err(ValidationErrors::single(FieldError::bad_body(
            Detail::ExpectedArray,
        ))),
        Ok(Some(events)) if ctx.errors.is_empty() => Ok(events),
        Ok(Some(_)) => Err(ctx.errors.finish()),
    }
}

fn body_too_large(length: usize, limits: &ConversionLimits) -> Option<ValidationErrors> {
    // Checked before parsing, so an oversized body costs nothing to refuse.
    // Past 1 GiB, whatever the limits say: an event's strings are kept as
    // 32-bit offsets into its body.
    let max = limits.max_body_bytes.min(text_span::MAX_SPANNED_BYTES);
    (length > max).then(|| ValidationErrors::body_too_large(max))
}

/// The body as text: JSON is UTF-8 (RFC 8259 section 8.1).
///
/// One check of the whole body is cheaper than one per string, and lets the
/// lexer slice strings out of it without checking them again. simdutf8
/// checks a valid body in about a fifth of the instructions of
/// `std::str::from_utf8` (typical body: 573 to 110 or so); only a body
/// that fails is checked again by std, for where it stops being UTF-8.
fn utf8(body: &[u8]) -> Result<&str, ValidationErrors> {
    match simdutf8::basic::from_utf8(body) {
        Ok(text) => Ok(text),
        Err(_) => std::str::from_utf8(body).map_err(|error| not_json(body, error.valid_up_to())),
    }
}

/// A `BAD_REQUEST` for a body that stops being JSON at byte `at`, with the
/// 1-based line and column (in bytes) of that byte.
fn not_json(body: &[u8], at: usize) -> ValidationErrors {
    let prefix = body.get(..at).unwrap_or(body);
    let line_start = prefix
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |newline| newline + 1);
    ValidationErrors::single(FieldError::bad_body(Detail::Syntax {
        line: 1 + prefix.iter().filter(|b| **b == b'\n').count(),
        column: prefix.len() - line_start + 1,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_utf8_check_agrees_with_std_at_every_place_of_a_body() {
        // Malformed sequences (overlong, surrogate, past U+10FFFF, cut
        // short, a stray continuation byte) and well-formed ones of every
        // length, at every place of bodies longer than one SIMD block.
        let sequences: [&[u8]; 11] = [
            b"\xc0\xaf",
            b"\xe0\x80\xaf",
            b"\xed\xa0\x80",
            b"\xf4\x90\x80\x80",
            b"\xf8\x88\x80\x80\x80",
            b"\xe2\x82",
            b"\x80",
            b"\xff",
            "\u{e9}".as_bytes(),
            "\u{20ac}".as_bytes(),
            "\u{10ffff}".as_bytes(),
        ];
        for sequence in sequences {
            for length in [0, 1, 15, 16, 31, 32, 63, 64, 65, 130] {
                for place in 0..=length {
                    let mut body = vec![b'a'; length];
                    body.splice(place..place, sequence.iter().copied());
                    let expected = std::str::from_utf8(&body)
                        .map_err(|error| not_json(&body, error.valid_up_to()));
                    assert_eq!(
                        utf8(&body),
                        expected,
                        "{sequence:x?} at {place} of {length}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_body_past_what_a_span_can_hold_is_too_large_whatever_the_limits() {
        let mut limits = ConversionLimits {
            max_body_bytes: usize::MAX,
            ..ConversionLimits::default()
        };
        let bound = text_span::MAX_SPANNED_BYTES;
        assert!(body_too_large(bound, &limits).is_none());
        let refused = body_too_large(bound + 1, &limits).expect("refused");
        assert_eq!(refused, ValidationErrors::body_too_large(bound));
        // Below the bound, the limits decide.
        limits.max_body_bytes = 10;
        assert!(body_too_large(10, &limits).is_none());
        assert_eq!(
            body_too_large(11, &limits),
            Some(ValidationErrors::body_too_large(10))
        );
    }
}
