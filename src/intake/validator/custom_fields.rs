//! Custom fields: the `cf_` members of the payload that the account defines
//! (the account's list is searched by [`CustomFields`](super::membership::CustomFields)).
//!
//! As in the real service, a payload member `cf_plan` is the account's custom field
//! `plan`; its value must be a string. A `cf_` member the account does not
//! define is an unknown attribute ([`super::unknown`]).

use std::borrow::Cow;

use super::context::Ctx;
use super::errors::{DataType, ErrorType, ValidationRules};
use super::event::ConversionEvent;
use super::lexer::{Lexer, Scalar, Scan};
use super::membership::PositionSet;
use super::string_rules::{is_too_long, unescaped_refused_control};
use super::unknown::read_unknown_attribute;
use super::vocabulary::{CUSTOM_PREFIX, Scope};

/// Reads a payload member that is not a standard field: a custom field of the
/// account, or an unknown attribute.
pub(super) fn read_other_payload_member<'a>(
    lexer: &mut Lexer<'a>,
    ctx: &mut Ctx<'_, 'a>,
    name: Cow<'a, str>,
    event: &mut ConversionEvent<'a>,
    custom_seen: &mut PositionSet,
) -> Scan<()> {
    let custom = match name.strip_prefix(CUSTOM_PREFIX) {
        Some(bare) => ctx.custom_fields.position(bare),
        None => None,
    };
    let Some(custom) = custom else {
        return read_unknown_attribute(
            lexer,
            ctx,
            name,
            Scope::Payload,
            3,
            &mut event.extras,
            &mut event.text,
        );
    };
    if !custom_seen.insert(custom) {
        lexer.skip_value(3)?;
        ctx.report_member(ErrorType::DuplicateField, Scope::Payload, &name, None);
        return Ok(());
    }
    match lexer.scalar(3)? {
        Scalar::Null => {}
        Scalar::Str(value) => {
            let value = value.decode();
            // The name is stored too, as the payload's key: an account's
            // field named with a control character is refused like a value.
            let refused_control =
                unescaped_refused_control(&value) || unescaped_refused_control(&name);
            let max = ctx.limits.max_string_len;
            if refused_control {
                ctx.report_member(ErrorType::InvalidCharacters, Scope::Payload, &name, None);
            } else if is_too_long(&value, max) {
                ctx.report_member(
                    ErrorType::ValueTooLong,
                    Scope::Payload,
                    &name,
                    Some(ValidationRules::MaxLength(max)),
                );
            } else {
                event.push_custom(name, value);
            }
        }
        Scalar::Bool(_) | Scalar::Other => {
            ctx.report_member(
                ErrorType::InvalidDataType,
                Scope::Payload,
                &name,
                Some(ValidationRules::DataType(DataType::String)),
            );
        }
    }
    Ok(())
}
