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

/// Standard members of `payload`; the string fields come first so that their
/// discriminant indexes [`ConversionEvent::strings`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Field {
    /// `conversion_identifier`.
    ConversionIdentifier,
    /// `email`.
    Email,
    /// `name`.
    Name,
    /// `job_title`.
    JobTitle,
    /// `state`.
    State,
    /// `city`.
    City,
    /// `country`.
    Country,
    /// `personal_phone`.
    PersonalPhone,
    /// `mobile_phone`.
    MobilePhone,
    /// `twitter`.
    Twitter,
    /// `facebook`.
    Facebook,
    /// `linkedin`.
    Linkedin,
    /// `website`.
    Website,
    /// `company_name`.
    CompanyName,
    /// `company_site`.
    CompanySite,
    /// `company_address`.
    CompanyAddress,
    /// `client_tracking_id`.
    ClientTrackingId,
    /// `traffic_source`.
    TrafficSource,
    /// `traffic_medium`.
    TrafficMedium,
    /// `traffic_campaign`.
    TrafficCampaign,
    /// `traffic_value`.
    TrafficValue,
    /// `tags`.
    Tags,
    /// `available_for_mailing`.
    AvailableForMailing,
    /// `legal_bases`.
    LegalBases,
}

/// How many [`Field`]s hold a plain string.
pub(super) const STRING_FIELDS: usize = Field::TrafficValue as usize + 1;

/// Wire names of [`Field`], by discriminant.
pub(super) const FIELD_NAMES: [&str; Field::LegalBases as usize + 1] = [
    "conversion_identifier",
    "email",
    "name",
    "job_title",
    "state",
    "city",
    "country",
    "personal_phone",
    "mobile_phone",
    "twitter",
    "facebook",
    "linkedin",
    "website",
    "company_name",
    "company_site",
    "company_address",
    "client_tracking_id",
    "traffic_source",
    "traffic_medium",
    "traffic_campaign",
    "traffic_value",
    "tags",
    "available_for_mailing",
    "legal_bases",
];

/// Every [`Field`], by discriminant.
#[cfg(test)]
const FIELDS: [Field; Field::LegalBases as usize + 1] = [
    Field::ConversionIdentifier,
    Field::Email,
    Field::Name,
    Field::JobTitle,
    Field::State,
    Field::City,
    Field::Country,
    Field::PersonalPhone,
    Field::MobilePhone,
    Field::Twitter,
    Field::Facebook,
    Field::Linkedin,
    Field::Website,
    Field::CompanyName,
    Field::CompanySite,
    Field::CompanyAddress,
    Field::ClientTrackingId,
    Field::TrafficSource,
    Field::TrafficMedium,
    Field::TrafficCampaign,
    Field::TrafficValue,
    Field::Tags,
    Field::AvailableForMailing,
    Field::LegalBases,
];

impl Field {
    /// The field's name on the wire.
    pub(super) const fn name(self) -> &'static str {
        FIELD_NAMES[self as usize]
    }

    /// The field's bit in a `u32` set of fields.
    const fn bit(self) -> u32 {
        1 << self as u32
    }

    /// The member `name` names, if the validator knows it.
    pub(super) fn classify(name: &str) -> Option<Self> {
        // Dispatching on the length first leaves at most three comparisons of
        // equal-length strings: this runs for every member of every payload.
        // Literal names let the compiler compare them inline, without memcmp.
        Some(match name.len() {
            4 => match name {
                "name" => Field::Name,
                "city" => Field::City,
                "tags" => Field::Tags,
                _ => return None,
            },
            5 => match name {
                "email" => Field::Email,
                "state" => Field::State,
                _ => return None,
            },
            7 => match name {
                "country" => Field::Country,
                "twitter" => Field::Twitter,
                "website" => Field::Website,
                _ => return None,
            },
            8 => match name {
                "facebook" => Field::Facebook,
                "linkedin" => Field::Linkedin,
                _ => return None,
            },
            9 if name == "job_title" => Field::JobTitle,
            11 if name == "legal_bases" => Field::LegalBases,
            12 => match name {
                "mobile_phone" => Field::MobilePhone,
                "company_name" => Field::CompanyName,
                "company_site" => Field::CompanySite,
                _ => return None,
            },
            13 if name == "traffic_value" => Field::TrafficValue,
            14 => match name {
                "personal_phone" => Field::PersonalPhone,
                "traffic_source" => Field::TrafficSource,
                "traffic_medium" => Field::TrafficMedium,
                _ => return None,
            },
            15 if name == "company_address" => Field::CompanyAddress,
            16 if name == "traffic_campaign" => Field::TrafficCampaign,
            18 if name == "client_tracking_id" => Field::ClientTrackingId,
            21 => match name {
                "conversion_identifier" => Field::ConversionIdentifier,
                "available_for_mailing" => Field::AvailableForMailing,
                _ => return None,
            },
            _ => return None,
        })
    }
}

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
                    if let Some(slot) = event.strings.get_mut(field as usize) {
                        *slot = Some(value);
                    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_name_classifies_back_to_its_field() {
        for field in FIELDS {
            assert_eq!(Field::classify(field.name()), Some(field));
        }
        for other in ["", "Email", "emails", "cf_email", "tag", "legal_basis"] {
            assert_eq!(Field::classify(other), None, "{other}");
        }
    }
}
