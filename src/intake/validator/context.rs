//! What every reader of one validation shares: the limits, the account's
//! custom fields, the errors found so far, where in the document it is; and
//! the shape a container-expecting reader reports.

use std::borrow::Cow;

use super::choice::{Choice, Chosen};
use super::errors::{DataType, ErrorCollector, ErrorType, ValidationRules};
use super::json_path::JsonPath;
use super::limits::ConversionLimits;
use super::membership::{CustomFields, HashedSet};
use super::vocabulary::{Field, Scope};

/// State shared by the readers of one validation; `'a` is the body's.
pub(super) struct Ctx<'l, 'a> {
    /// The bounds to enforce.
    pub(super) limits: &'l ConversionLimits,
    /// The account's custom fields, searched by name.
    pub(super) custom_fields: CustomFields<'l>,
    /// The errors found so far, in document order.
    pub(super) errors: ErrorCollector,
    /// Every attribute dropped from the event being read, once it has more
    /// than [`LINEAR_DROPPED`](super::unknown::LINEAR_DROPPED); see
    /// [`drop_attribute`](super::unknown::drop_attribute).
    pub(super) dropped_seen: Option<HashedSet<(Scope, Cow<'a, str>)>>,
    /// Index of the event being validated in a batch.
    pub(super) event: Option<usize>,
}

impl<'l, 'a> Ctx<'l, 'a> {
    /// The context of a validation that has found nothing yet.
    pub(super) fn new(limits: &'l ConversionLimits, custom_fields: &'l [&'l str]) -> Self {
        Ctx {
            limits,
            custom_fields: CustomFields::new(custom_fields),
            errors: ErrorCollector::new(limits.max_errors),
            dropped_seen: None,
            event: None,
        }
    }

    /// The path of the event being validated: `$`, or `$[i]` in a batch.
    pub(super) fn event_path(&self) -> JsonPath<'static> {
        match self.event {
            Some(index) => JsonPath::root().index(index),
            None => JsonPath::root(),
        }
    }

    /// The path of the event's `payload`.
    pub(super) fn payload_path(&self) -> JsonPath<'static> {
        self.event_path().name("payload")
    }

    /// The path of a standard field of the payload.
    pub(super) fn field_path(&self, field: Field) -> JsonPath<'static> {
        JsonPath::payload_member(self.event, field.name(), None)
    }

    /// The path of the `index`th element of `legal_bases`.
    pub(super) fn basis_path(&self, index: usize) -> JsonPath<'static> {
        self.field_path(Field::LegalBases).index(index)
    }

    /// The path of the object `scope` stands for.
    fn scope_path(&self, scope: Scope) -> JsonPath<'static> {
        match scope {
            Scope::Event => self.event_path(),
            Scope::Payload => self.payload_path(),
            Scope::LegalBasis(index) => self.basis_path(index as usize),
        }
    }

    /// Records an error at the member `name` of the object `scope` stands
    /// for. The error outlives the body, so its path holds a copy of the
    /// name: made only if the error is kept (see [`ErrorCollector::push_with`]).
    pub(super) fn report_member(
        &mut self,
        error_type: ErrorType,
        scope: Scope,
        name: &str,
        rules: Option<ValidationRules>,
    ) {
        let object = self.scope_path(scope);
        self.errors
            .push_with(error_type, || object.key(name.to_owned()), rules);
    }

    /// Records an error at `path`.
    pub(super) fn report(
        &mut self,
        error_type: ErrorType,
        path: JsonPath<'static>,
        rules: Option<ValidationRules>,
    ) {
        self.errors.push(error_type, path, rules);
    }

    /// Records an `INVALID_DATA_TYPE` at `path`: `expected` was not sent.
    pub(super) fn wrong_type(&mut self, path: JsonPath<'static>, expected: DataType) {
        self.report(
            ErrorType::InvalidDataType,
            path,
            Some(ValidationRules::DataType(expected)),
        );
    }

    /// Reports a choice that was sent but is not acceptable; gives the value
    /// when it is acceptable.
    ///
    /// The path is built only when there is an error to report.
    pub(super) fn check_choice<C: Choice>(
        &mut self,
        path: impl FnOnce(&Self) -> JsonPath<'static>,
        choice: Chosen<C>,
    ) -> Option<C> {
        match choice {
            Chosen::Null => None,
            Chosen::Valid(value) => Some(value),
            Chosen::Invalid => {
                self.report(
                    ErrorType::InvalidOption,
                    path(self),
                    Some(ValidationRules::ValidOptions(C::OPTIONS)),
                );
                None
            }
            Chosen::WrongType => {
                self.wrong_type(path(self), DataType::String);
                None
            }
        }
    }
}

/// What a container-expecting reader found.
pub(super) enum Shaped<T> {
    /// The expected container, with what was read from it.
    Right(T),
    /// `null`.
    Null,
    /// Another JSON type.
    Wrong,
}
