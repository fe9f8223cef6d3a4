//! The payload: its standard fields (the contact's and the conversion's) and
//! the reader that checks each against its rule, handing `tags`,
//! `legal_bases` and the `cf_` and unknown members to their own readers.
//!
//! Spec, "Conversion event": `conversion_identifier` and `email` are
//! required; every other standard field is optional, may be `null` (same as
//! absent), and must have its JSON type.

use super::context::{Ctx, Shaped};
use super::custom_fields::read_other_payload_member;
use super::errors::{DataType, ErrorType, ValidationRules};
use super::event::ConversionEvent;
use super::legal_bases::read_legal_bases;
use super::lexer::{Lexer, Scalar, Scan};
use super::membership::PositionSet;
use super::string_rules::{
    is_blank, is_plausible_email, is_too_long, is_uuid_shaped, unescaped_refused_control,
};
use super::tags::read_tags;
use super::traffic_source::is_traffic_source_cookie;
use super::vocabulary::Field;

/// Reads the `payload` object (at depth 2) into the event.
pub(super) fn read_payload<'a>(
    lexer: &mut Lexer<'a>,
    ctx: &mut Ctx<'_, 'a>,
    event: &mut ConversionEvent<'a>,
) -> Scan<Shaped<()>> {
    match lexer.peek_value() {
        Some(b'{') => lexer.open(b'{', 2)?,
        Some(b'n') => return lexer.literal(b"null").map(|()| Shaped::Null),
        _ => return lexer.skip_value(2).map(|_| Shaped::Wrong),
    }
    let mut custom_seen = PositionSet::default();
    let mut seen = 0u32;
    let mut sent = 0u32;
    let mut first = true;
    while let Some(key) = lexer.next_key(&mut first)? {
        let name = key.decode();
        let Some(field) = Field::classify(&name) else {
            read_other_payload_member(lexer, ctx, name, event, &mut custom_seen)?;
            continue;
        };
        if seen & field.bit() != 0 {
            lexer.skip_value(3)?;
            ctx.report(ErrorType::DuplicateField, ctx.field_path(field), None);
            continue;
        }
        seen |= field.bit();
        match field {
            Field::Tags => event.tags = read_tags(lexer, ctx)?,
            Field::AvailableForMailing => match lexer.scalar(3)? {
                Scalar::Null => {}
                Scalar::Bool(value) => event.available_for_mailing = Some(value),
                Scalar::Str(_) | Scalar::Other => {
                    ctx.wrong_type(ctx.field_path(field), DataType::Boolean);
                }
            },
            Field::LegalBases => match read_legal_bases(lexer, ctx, event)? {
                Shaped::Right(()) => event.legal_bases_present = true,
                Shaped::Null => {}
                Shaped::Wrong => ctx.wrong_type(ctx.field_path(field), DataType::Array),
            },
            _ => match lexer.scalar(3)? {
                Scalar::Null => {}
                Scalar::Str(value) => {
                    sent |= field.bit();
                    let value = value.decode();
                    let refused_control = unescaped_refused_control(&value);
                    check_string(ctx, event, field, &value, refused_control);
                    event.set_string(field, value);
                }
                Scalar::Bool(_) | Scalar::Other => {
                    sent |= field.bit();
                    ctx.wrong_type(ctx.field_path(field), DataType::String);
                }
            },
        }
    }
    for field in [Field::ConversionIdentifier, Field::Email] {
        if sent & field.bit() == 0 {
            ctx.report(ErrorType::CannotBeNull, ctx.field_path(field), None);
        }
    }
    // Spec, traffic_source: "When a cookie value is passed, traffic_medium,
    // traffic_campaign and traffic_value must be empty."
    if event.traffic_source_is_cookie {
        for field in [
            Field::TrafficMedium,
            Field::TrafficCampaign,
            Field::TrafficValue,
        ] {
            if event.string(field).is_some_and(|value| !is_blank(value)) {
                ctx.report(
                    ErrorType::ConflictingField,
                    ctx.field_path(field),
                    Some(ValidationRules::ConflictsWith(Field::TrafficSource.name())),
                );
            }
        }
    }
    Ok(Shaped::Right(()))
}

/// Checks a standard string field of the payload; `refused_control` tells
/// whether it held a control character no store may be given.
fn check_string(
    ctx: &mut Ctx<'_, '_>,
    event: &mut ConversionEvent<'_>,
    field: Field,
    value: &str,
    refused_control: bool,
) {
    let max = match field {
        Field::TrafficSource => ctx.limits.max_traffic_source_len,
        _ => ctx.limits.max_string_len,
    };
    let failure = if refused_control {
        Some((ErrorType::InvalidCharacters, None))
    } else if is_too_long(value, max) {
        Some((
            ErrorType::ValueTooLong,
            Some(ValidationRules::MaxLength(max)),
        ))
    } else {
        match field {
            Field::ConversionIdentifier if is_blank(value) => {
                Some((ErrorType::CannotBeBlank, None))
            }
            Field::Email if is_blank(value) => Some((ErrorType::CannotBeBlank, None)),
            Field::Email if !is_plausible_email(value) => {
                Some((ErrorType::InvalidEmailFormat, None))
            }
            // A blank tracking id is what a form sends when the visitor had no
            // cookie: it is treated as not sent rather than as a bad UUID.
            Field::ClientTrackingId if !is_blank(value) && !is_uuid_shaped(value) => Some((
                ErrorType::InvalidFormat,
                Some(ValidationRules::Format("uuid")),
            )),
            Field::TrafficSource => {
                event.traffic_source_is_cookie = is_traffic_source_cookie(value);
                None
            }
            _ => None,
        }
    };
    if let Some((error_type, rules)) = failure {
        ctx.report(error_type, ctx.field_path(field), rules);
    }
}
