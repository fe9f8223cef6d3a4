//! Errors found while validating a conversion event, and their wire shape.
//!
//! Errors stay compact while they are collected (an enum, a path of static or
//! borrowed names, a rule as an enum) and become strings only in
//! [`ValidationErrors::to_body`], so that an invalid event costs about one
//! allocation per error rather than several. At most
//! [`ConversionLimits::max_errors`](crate::ConversionLimits::max_errors) are
//! kept; past them the errors are only counted, so that neither the memory of
//! a validation nor the size of its answer grows with a hostile body.

use std::fmt;

use serde_json::{Map, Value, json};

use super::json_path::JsonPath;

/// The kind of a validation error, sent as `error_type`.
///
/// The names are those the real service (the RD Station Marketing API) uses
/// where it has one (`BAD_REQUEST`, `CANNOT_BE_NULL`, `CANNOT_BE_BLANK`, `INVALID_DATA_TYPE`,
/// `INVALID_OPTION`, `INVALID_EMAIL_FORMAT`, `VALUES_MUST_BE_LOWERCASE`,
/// `VALUES_MUST_BE_UNIQUE`, `CONFLICTING_FIELD`); the others are this crate's
/// and are documented on each variant.
///
/// Every kind is answered with status 400 but [`ErrorType::BodyTooLarge`]
/// (413); see [`ErrorType::http_status`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorType {
    /// `BAD_REQUEST`: the body is not JSON, or not a JSON object (an array for a
    /// batch). Reported alone, at path `$`.
    BadRequest,
    /// `BODY_TOO_LARGE`: the body is longer than
    /// [`ConversionLimits::max_body_bytes`](crate::ConversionLimits::max_body_bytes);
    /// answered with status 413, at path `$`.
    BodyTooLarge,
    /// `CANNOT_BE_NULL`: a required field is missing or `null`.
    CannotBeNull,
    /// `CANNOT_BE_BLANK`: a required string (or a tag) is empty or only whitespace.
    CannotBeBlank,
    /// `CANNOT_BE_EMPTY`: a batch holds no event.
    CannotBeEmpty,
    /// `INVALID_DATA_TYPE`: a field holds the wrong JSON type; the rules give the
    /// expected `data_type`.
    InvalidDataType,
    /// `INVALID_OPTION`: a value outside an enumeration; the rules give the
    /// `valid_options`.
    InvalidOption,
    /// `INVALID_EMAIL_FORMAT`: `email` is not a plausible e-mail address.
    InvalidEmailFormat,
    /// `INVALID_FORMAT`: a string does not have the shape its field requires
    /// (`client_tracking_id` must be a UUID); the rules give the `format`.
    InvalidFormat,
    /// `VALUES_MUST_BE_LOWERCASE`: a tag holds an uppercase letter.
    ValuesMustBeLowercase,
    /// `VALUES_MUST_BE_UNIQUE`: a tag repeats an earlier tag.
    ValuesMustBeUnique,
    /// `CONFLICTING_FIELD`: a field is set that must be empty given another one
    /// (a UTM field beside a traffic-source cookie); the rules name the other
    /// field as `conflicts_with`.
    ConflictingField,
    /// `VALUE_TOO_LONG`: a string is longer than allowed; the rules give the
    /// `max_length` in characters.
    ValueTooLong,
    /// `TOO_MANY_ITEMS`: an array (tags, legal bases, a batch) is longer than
    /// allowed; the rules give `max_items`.
    TooManyItems,
    /// `TOO_DEEPLY_NESTED`: a value nests arrays or objects deeper than allowed;
    /// the rules give `max_depth`.
    TooDeeplyNested,
    /// `UNKNOWN_FIELD`: an attribute that is neither a standard field nor a
    /// custom field of the account, when unknown attributes are rejected.
    UnknownField,
    /// `DUPLICATE_FIELD`: an object names the same member twice, which would
    /// leave it ambiguous which value was validated and which is recorded.
    DuplicateField,
    /// `INVALID_CHARACTERS`: a string that would be stored (a standard
    /// payload string, `conversion_identifier` and `email` included, a tag, a
    /// custom field's value or name) holds a C0 control character other than
    /// tab, line feed and carriage return: U+0000 to U+001F except U+0009,
    /// U+000A and U+000D, written as a JSON escape (`\u0000`, `\b`, `\f`).
    ///
    /// PostgreSQL's `text` cannot hold U+0000 at all (nor could the `jsonb`
    /// its payloads were kept in before its migration 7), so an event
    /// holding one could be stored by some stores and not by others; the other
    /// controls are refused with it, as characters no form field sends. Tabs
    /// and line breaks stay accepted (multi-line addresses). A control
    /// character written raw is not JSON (RFC 8259 section 7) and makes the
    /// body a `BAD_REQUEST`, as does a lone UTF-16 surrogate escape
    /// (`"\ud800"`), which no store can hold either.
    InvalidCharacters,
    /// `TOO_MANY_ERRORS`: the last item of an answer that lists only the first
    /// [`ConversionLimits::max_errors`](crate::ConversionLimits::max_errors)
    /// of the errors found. Its path is `$`, its rules
    /// `{"max_errors": N}` (the number listed before it), and its message
    /// gives the total found: `the body has 18606 errors; the first 100 are
    /// listed`; [`ValidationErrors::found`] gives it as a number.
    TooManyErrors,
}

impl ErrorType {
    /// The wire name sent as `error_type`, such as `INVALID_OPTION`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorType::BadRequest => "BAD_REQUEST",
            ErrorType::BodyTooLarge => "BODY_TOO_LARGE",
            ErrorType::CannotBeNull => "CANNOT_BE_NULL",
            ErrorType::CannotBeBlank => "CANNOT_BE_BLANK",
            ErrorType::CannotBeEmpty => "CANNOT_BE_EMPTY",
            ErrorType::InvalidDataType => "INVALID_DATA_TYPE",
            ErrorType::InvalidOption => "INVALID_OPTION",
            ErrorType::InvalidEmailFormat => "INVALID_EMAIL_FORMAT",
            ErrorType::InvalidFormat => "INVALID_FORMAT",
            ErrorType::ValuesMustBeLowercase => "VALUES_MUST_BE_LOWERCASE",
            ErrorType::ValuesMustBeUnique => "VALUES_MUST_BE_UNIQUE",
            ErrorType::ConflictingField => "CONFLICTING_FIELD",
            ErrorType::ValueTooLong => "VALUE_TOO_LONG",
            ErrorType::TooManyItems => "TOO_MANY_ITEMS",
            ErrorType::TooDeeplyNested => "TOO_DEEPLY_NESTED",
            ErrorType::UnknownField => "UNKNOWN_FIELD",
            ErrorType::DuplicateField => "DUPLICATE_FIELD",
            ErrorType::InvalidCharacters => "INVALID_CHARACTERS",
            ErrorType::TooManyErrors => "TOO_MANY_ERRORS",
        }
    }

    /// The HTTP status an error of this kind is answered with: 413 for
    /// [`ErrorType::BodyTooLarge`], 400 for every other kind.
    pub const fn http_status(self) -> u16 {
        // Exhaustive on purpose: a new kind does not compile until it is mapped.
        match self {
            ErrorType::BodyTooLarge => 413,
            ErrorType::BadRequest
            | ErrorType::CannotBeNull
            | ErrorType::CannotBeBlank
            | ErrorType::CannotBeEmpty
            | ErrorType::InvalidDataType
            | ErrorType::InvalidOption
            | ErrorType::InvalidEmailFormat
            | ErrorType::InvalidFormat
            | ErrorType::ValuesMustBeLowercase
            | ErrorType::ValuesMustBeUnique
            | ErrorType::ConflictingField
            | ErrorType::ValueTooLong
            | ErrorType::TooManyItems
            | ErrorType::TooDeeplyNested
            | ErrorType::UnknownField
            | ErrorType::DuplicateField
            | ErrorType::InvalidCharacters
            | ErrorType::TooManyErrors => 400,
        }
    }
}

impl fmt::Display for ErrorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A JSON type a field is expected to hold, sent as `validation_rules.data_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DataType {
    /// A JSON string, `"string"`.
    String,
    /// `true` or `false`, `"boolean"`.
    Boolean,
    /// A JSON array, `"array"`.
    Array,
    /// A JSON object, `"object"`.
    Object,
}

impl DataType {
    /// The wire name, such as `string`.
    pub const fn as_str(self) -> &'static str {
        match self {
            DataType::String => "string",
            DataType::Boolean => "boolean",
            DataType::Array => "array",
            DataType::Object => "object",
        }
    }

    const fn article(self) -> &'static str {
        match self {
            DataType::String | DataType::Boolean => "a",
            DataType::Array | DataType::Object => "an",
        }
    }
}

/// The rule an error broke, sent as `validation_rules`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ValidationRules {
    /// `{"valid_options": [...]}`: the accepted values of an enumeration.
    ValidOptions(&'static [&'static str]),
    /// `{"data_type": "..."}`: the JSON type the field must hold.
    DataType(DataType),
    /// `{"max_length": N}`: the most characters a string may hold.
    MaxLength(usize),
    /// `{"max_items": N}`: the most elements an array may hold.
    MaxItems(usize),
    /// `{"max_depth": N}`: the deepest nesting allowed, the event object being 1.
    MaxDepth(usize),
    /// `{"max_bytes": N}`: the largest body accepted.
    MaxBytes(usize),
    /// `{"format": "..."}`: the shape a string must have, such as `uuid`.
    Format(&'static str),
    /// `{"conflicts_with": "..."}`: the field whose value forbids this one.
    ConflictsWith(&'static str),
    /// `{"max_errors": N}`: the most errors listed in one answer.
    MaxErrors(usize),
}

impl ValidationRules {
    /// The rule as the JSON object sent under `validation_rules`.
    pub fn to_json(&self) -> Value {
        match *self {
            ValidationRules::ValidOptions(options) => json!({ "valid_options": options }),
            ValidationRules::DataType(data_type) => json!({ "data_type": data_type.as_str() }),
            ValidationRules::MaxLength(max) => json!({ "max_length": max }),
            ValidationRules::MaxItems(max) => json!({ "max_items": max }),
            ValidationRules::MaxDepth(max) => json!({ "max_depth": max }),
            ValidationRules::MaxBytes(max) => json!({ "max_bytes": max }),
            ValidationRules::Format(format) => json!({ "format": format }),
            ValidationRules::ConflictsWith(field) => json!({ "conflicts_with": field }),
            ValidationRules::MaxErrors(max) => json!({ "max_errors": max }),
        }
    }
}

/// What an error about the whole body says beyond its type, for the message
/// only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Detail {
    /// Not JSON; the 1-based line and column (in bytes) of the first problem.
    Syntax { line: usize, column: usize },
    /// JSON, but not an object.
    ExpectedObject,
    /// JSON, but not an array (batch).
    ExpectedArray,
    /// More errors were found than listed: how many in all.
    ErrorCount { found: usize },
}

/// One problem found in a conversion event: what, where, and the rule broken.
///
/// Its [`Display`](fmt::Display) is the `error_message`: plain English starting
/// in lowercase, naming the field but never quoting its value (values may be
/// personal data).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FieldError {
    error_type: ErrorType,
    path: JsonPath<'static>,
    rules: Option<ValidationRules>,
    detail: Option<Detail>,
}

impl FieldError {
    pub(crate) fn new(
        error_type: ErrorType,
        path: JsonPath<'static>,
        rules: Option<ValidationRules>,
    ) -> Self {
        FieldError {
            error_type,
            path,
            rules,
            detail: None,
        }
    }

    /// A `BAD_REQUEST` about the whole body.
    pub(crate) fn bad_body(detail: Detail) -> Self {
        FieldError {
            error_type: ErrorType::BadRequest,
            path: JsonPath::root(),
            rules: None,
            detail: Some(detail),
        }
    }

    /// The `TOO_MANY_ERRORS` item that ends a list cut at `max` errors.
    fn too_many(max: usize, found: usize) -> Self {
        FieldError {
            error_type: ErrorType::TooManyErrors,
            path: JsonPath::root(),
            rules: Some(ValidationRules::MaxErrors(max)),
            detail: Some(Detail::ErrorCount { found }),
        }
    }

    /// The kind of the error, sent as `error_type`.
    pub fn error_type(&self) -> ErrorType {
        self.error_type
    }

    /// The place of the offending value, sent as `path` (`$.payload.email`).
    pub fn path(&self) -> &JsonPath<'static> {
        &self.path
    }

    /// The rule that was broken, sent as `validation_rules` when present.
    pub fn validation_rules(&self) -> Option<ValidationRules> {
        self.rules
    }

    /// The error as one element of the `errors` array of the response body.
    pub fn to_json(&self) -> Value {
        let mut object = Map::new();
        object.insert("error_type".into(), self.error_type.as_str().into());
        object.insert("error_message".into(), self.to_string().into());
        object.insert("path".into(), self.path.to_string().into());
        if let Some(rules) = &self.rules {
            object.insert("validation_rules".into(), rules.to_json());
        }
        Value::Object(object)
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(field) = self.path.label() else {
            return self.fmt_whole(f);
        };
        match (self.error_type, self.rules) {
            (ErrorType::CannotBeNull, _) => write!(f, "{field} is required and cannot be null"),
            (ErrorType::CannotBeBlank, _) => write!(f, "{field} cannot be blank"),
            (ErrorType::InvalidDataType, Some(ValidationRules::DataType(t))) => {
                write!(f, "{field} must be {} {}", t.article(), t.as_str())
            }
            (ErrorType::InvalidOption, Some(ValidationRules::ValidOptions(options))) => {
                write!(f, "{field} must be one of: {}", options.join(", "))
            }
            (ErrorType::InvalidEmailFormat, _) => {
                write!(f, "{field} is not a valid e-mail address")
            }
            (ErrorType::InvalidFormat, Some(ValidationRules::Format("uuid"))) => write!(
                f,
                "{field} must be a UUID (hexadecimal digits grouped 8-4-4-4-12)"
            ),
            (ErrorType::ValuesMustBeLowercase, _) => write!(f, "{field} must be lowercase"),
            (ErrorType::ValuesMustBeUnique, _) => {
                write!(f, "{field} repeats an earlier value; values must be unique")
            }
            (ErrorType::ConflictingField, Some(ValidationRules::ConflictsWith(other))) => write!(
                f,
                "{field} must be empty when {other} holds a traffic-source cookie"
            ),
            (ErrorType::ValueTooLong, Some(ValidationRules::MaxLength(max))) => {
                write!(f, "{field} is longer than {max} characters")
            }
            (ErrorType::TooManyItems, Some(ValidationRules::MaxItems(max))) => {
                write!(f, "{field} holds more than {max} items")
            }
            (ErrorType::TooDeeplyNested, Some(ValidationRules::MaxDepth(max))) => {
                write!(f, "{field} is nested deeper than {max} levels")
            }
            (ErrorType::UnknownField, _) => {
                write!(f, "{field} is not a known field")
            }
            (ErrorType::DuplicateField, _) => write!(f, "{field} appears more than once"),
            (ErrorType::InvalidCharacters, _) => write!(
                f,
                "{field} must not contain control characters other than tab, line feed and carriage return"
            ),
            (error_type, _) => write!(f, "{field} is invalid ({})", error_type.as_str()),
        }
    }
}

impl FieldError {
    /// The message of an error about the body or a whole event of a batch.
    fn fmt_whole(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.path.is_root() {
            "the body"
        } else {
            "the event"
        };
        match (self.error_type, self.detail, self.rules) {
            (_, Some(Detail::Syntax { line, column }), _) => write!(
                f,
                "the body is not valid JSON (line {line}, column {column})"
            ),
            (_, Some(Detail::ExpectedObject), _) => f.write_str("the body must be a JSON object"),
            (_, Some(Detail::ExpectedArray), _) => {
                f.write_str("the body must be a JSON array of events")
            }
            (
                ErrorType::TooManyErrors,
                Some(Detail::ErrorCount { found }),
                Some(ValidationRules::MaxErrors(max)),
            ) => write!(f, "the body has {found} errors; the first {max} are listed"),
            (ErrorType::BodyTooLarge, _, Some(ValidationRules::MaxBytes(max))) => {
                write!(f, "the body is larger than {max} bytes")
            }
            (ErrorType::CannotBeEmpty, _, _) => {
                f.write_str("the batch must hold at least one event")
            }
            (ErrorType::TooManyItems, _, Some(ValidationRules::MaxItems(max))) => {
                write!(f, "the batch holds more than {max} events")
            }
            (ErrorType::InvalidDataType, _, Some(ValidationRules::DataType(t))) => {
                write!(f, "{what} must be {} {}", t.article(), t.as_str())
            }
            (error_type, _, _) => write!(f, "{what} is invalid ({})", error_type.as_str()),
        }
    }
}

impl std::error::Error for FieldError {}

/// The problems found in a conversion event (or a batch): never empty, and
/// bounded.
///
/// The first [`ConversionLimits::max_errors`](crate::ConversionLimits::max_errors)
/// problems found (100 by default) are listed; when more were found, the list
/// ends with one more item, an [`ErrorType::TooManyErrors`] at `$` that gives
/// the total (see there for its shape), and [`ValidationErrors::found`] says
/// how many there were.
///
/// Answer it with [`ValidationErrors::status`] and [`ValidationErrors::to_body`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the conversion event is invalid: {}", summary(.errors, *.found))]
pub struct ValidationErrors {
    errors: Vec<FieldError>,
    found: usize,
}

fn summary(errors: &[FieldError], found: usize) -> String {
    match errors.first() {
        None => "no error recorded".to_owned(),
        Some(only) if found <= 1 => only.to_string(),
        Some(first) => format!("{first} (and {} more)", found - 1),
    }
}

/// Errors as the validator finds them: the first `max` kept, the others only
/// counted, so that a body holding thousands of errors costs no more memory
/// than one holding `max`.
#[derive(Debug)]
pub(crate) struct ErrorCollector {
    kept: Vec<FieldError>,
    found: usize,
    max: usize,
}

impl ErrorCollector {
    /// An empty collector keeping at most `max` errors (at least one).
    pub(crate) fn new(max: usize) -> Self {
        ErrorCollector {
            kept: Vec::new(),
            found: 0,
            max: max.max(1),
        }
    }

    /// Whether no error was found.
    pub(crate) fn is_empty(&self) -> bool {
        self.found == 0
    }

    /// Counts an error, and keeps it while fewer than `max` are kept.
    pub(crate) fn push(
        &mut self,
        error_type: ErrorType,
        path: JsonPath<'static>,
        rules: Option<ValidationRules>,
    ) {
        self.push_with(error_type, || path, rules);
    }

    /// As [`ErrorCollector::push`], the path built by `path` only when the
    /// error is kept: a path naming a member of the body holds a copy of
    /// the name (an allocation), not made for an error past `max`.
    pub(crate) fn push_with(
        &mut self,
        error_type: ErrorType,
        path: impl FnOnce() -> JsonPath<'static>,
        rules: Option<ValidationRules>,
    ) {
        self.found += 1;
        if self.kept.len() < self.max {
            self.kept.push(FieldError::new(error_type, path(), rules));
        }
    }

    /// The errors found, ended by a `TOO_MANY_ERRORS` item when some were
    /// not kept.
    pub(crate) fn finish(mut self) -> ValidationErrors {
        if self.found > self.kept.len() {
            self.kept.push(FieldError::too_many(self.max, self.found));
        }
        ValidationErrors {
            errors: self.kept,
            found: self.found,
        }
    }
}

impl ValidationErrors {
    /// Wraps a non-empty list of errors, all of those found.
    pub(crate) fn new(errors: Vec<FieldError>) -> Self {
        debug_assert!(!errors.is_empty(), "validation errors must not be empty");
        ValidationErrors {
            found: errors.len(),
            errors,
        }
    }

    pub(crate) fn single(error: FieldError) -> Self {
        ValidationErrors::new(vec![error])
    }

    /// The single `BODY_TOO_LARGE` error (status 413) for a body over
    /// `max_bytes`, exactly as [`crate::validate_conversion`] gives it. For
    /// hosts whose HTTP layer refuses an oversized body before the validator
    /// sees it, so that clients get one error shape whichever layer refused.
    pub fn body_too_large(max_bytes: usize) -> Self {
        ValidationErrors::single(FieldError::new(
            ErrorType::BodyTooLarge,
            JsonPath::root(),
            Some(ValidationRules::MaxBytes(max_bytes)),
        ))
    }

    /// The errors as answered, in the order they were found (document order,
    /// with the checks that need a whole object, such as missing fields, at
    /// its end): the first `max_errors` found, then, if more were found, one
    /// [`ErrorType::TooManyErrors`] item.
    pub fn errors(&self) -> &[FieldError] {
        &self.errors
    }

    /// How many problems were found, those left out of the list included (the
    /// `TOO_MANY_ERRORS` item is not one of them).
    pub fn found(&self) -> usize {
        self.found
    }

    /// Consumes the list, giving the errors as [`ValidationErrors::errors`]
    /// lists them.
    pub fn into_errors(self) -> Vec<FieldError> {
        self.errors
    }

    /// The HTTP status to answer with: 413 when the body was too large, else 400.
    pub fn status(&self) -> u16 {
        self.errors
            .iter()
            .map(|error| error.error_type.http_status())
            .max()
            .unwrap_or(400)
    }

    /// The response body:
    /// `{"errors": [{"error_type", "error_message", "path", "validation_rules"?}, ...]}`,
    /// `validation_rules` being left out when the error has none; at most
    /// `max_errors` items and a `TOO_MANY_ERRORS` one.
    pub fn to_body(&self) -> Value {
        json!({ "errors": self.errors.iter().map(FieldError::to_json).collect::<Vec<_>>() })
    }
}

impl<'e> IntoIterator for &'e ValidationErrors {
    type Item = &'e FieldError;
    type IntoIter = std::slice::Iter<'e, FieldError>;

    fn into_iter(self) -> Self::IntoIter {
        self.errors.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(field: &'static str) -> JsonPath<'static> {
        JsonPath::root().name("payload").name(field)
    }

    #[test]
    fn the_list_is_given_whole_by_every_accessor() {
        let body = br#"{"event_type":"SALE","event_family":"CDP","payload":{"email":1}}"#;
        let errors = crate::validate_conversion(body, &[], &crate::ConversionLimits::default())
            .expect_err("invalid");
        assert!(errors.errors().len() >= 3, "{:?}", errors.errors());
        let iterated: Vec<&FieldError> = (&errors).into_iter().collect();
        assert_eq!(iterated, errors.errors().iter().collect::<Vec<_>>());
        let listed = errors.errors().to_vec();
        assert_eq!(errors.into_errors(), listed);
    }

    #[test]
    fn wire_names_are_screaming_snake_case() {
        assert_eq!(ErrorType::InvalidOption.as_str(), "INVALID_OPTION");
        assert_eq!(
            ErrorType::ValuesMustBeLowercase.to_string(),
            "VALUES_MUST_BE_LOWERCASE"
        );
    }

    #[test]
    fn body_too_large_alone_answers_413() {
        let errors = ValidationErrors::single(FieldError::new(
            ErrorType::BodyTooLarge,
            JsonPath::root(),
            Some(ValidationRules::MaxBytes(10)),
        ));
        assert_eq!(errors.status(), 413);
        assert_eq!(
            errors.errors()[0].to_string(),
            "the body is larger than 10 bytes"
        );
    }

    #[test]
    fn rules_are_left_out_of_the_body_when_absent() {
        let error = FieldError::new(ErrorType::CannotBeNull, payload("email"), None);
        assert_eq!(
            error.to_json(),
            json!({
                "error_type": "CANNOT_BE_NULL",
                "error_message": "email is required and cannot be null",
                "path": "$.payload.email",
            })
        );
    }

    #[test]
    fn messages_start_lowercase_and_name_the_field() {
        let error = FieldError::new(
            ErrorType::InvalidDataType,
            JsonPath::root().name("payload").name("tags").index(2),
            Some(ValidationRules::DataType(DataType::String)),
        );
        assert_eq!(error.to_string(), "tags[2] must be a string");
        let bad = FieldError::bad_body(Detail::Syntax { line: 1, column: 7 });
        assert_eq!(
            bad.to_string(),
            "the body is not valid JSON (line 1, column 7)"
        );
    }

    fn collected(max: usize, count: usize) -> ValidationErrors {
        let mut collector = ErrorCollector::new(max);
        for _ in 0..count {
            collector.push(ErrorType::DuplicateField, payload("name"), None);
        }
        collector.finish()
    }

    #[test]
    fn a_collector_keeps_exactly_max_errors_without_a_summary() {
        let errors = collected(3, 3);
        assert_eq!(errors.found(), 3);
        let types: Vec<_> = errors.errors().iter().map(FieldError::error_type).collect();
        assert_eq!(types, [ErrorType::DuplicateField; 3]);
    }

    #[test]
    fn a_collector_past_max_ends_with_the_count() {
        let errors = collected(3, 4);
        assert_eq!(errors.found(), 4);
        assert_eq!(errors.errors().len(), 4, "{}", errors.to_body());
        assert_eq!(
            errors.errors()[3].to_json(),
            json!({
                "error_type": "TOO_MANY_ERRORS",
                "error_message": "the body has 4 errors; the first 3 are listed",
                "path": "$",
                "validation_rules": { "max_errors": 3 },
            })
        );
        assert_eq!(errors.status(), 400);
        assert_eq!(
            errors.to_string(),
            "the conversion event is invalid: name appears more than once (and 3 more)"
        );
        let many = collected(3, 10_000);
        assert_eq!(many.errors().len(), 4, "{}", many.to_body());
        assert_eq!(many.found(), 10_000);
    }

    #[test]
    fn one_error_is_summed_up_alone() {
        let one = collected(3, 1);
        assert_eq!(
            one.to_string(),
            "the conversion event is invalid: name appears more than once"
        );
        let two = collected(3, 2);
        assert_eq!(
            two.to_string(),
            "the conversion event is invalid: name appears more than once (and 1 more)"
        );
    }

    #[test]
    fn a_collector_keeps_at_least_one_error() {
        let errors = collected(0, 2);
        assert_eq!(errors.errors()[0].error_type(), ErrorType::DuplicateField);
        assert_eq!(
            errors.errors()[1].to_string(),
            "the body has 2 errors; the first 1 are listed"
        );
    }

    #[test]
    fn invalid_characters_name_the_field() {
        let error = FieldError::new(ErrorType::InvalidCharacters, payload("city"), None);
        assert_eq!(
            error.to_json(),
            json!({
                "error_type": "INVALID_CHARACTERS",
                "error_message": "city must not contain control characters other than tab, line feed and carriage return",
                "path": "$.payload.city",
            })
        );
    }

    #[test]
    fn display_of_the_list_summarises() {
        let errors = ValidationErrors::new(vec![
            FieldError::new(ErrorType::CannotBeNull, payload("email"), None),
            FieldError::new(ErrorType::CannotBeBlank, payload("name"), None),
        ]);
        assert_eq!(
            errors.to_string(),
            "the conversion event is invalid: email is required and cannot be null (and 1 more)"
        );
    }
}
