//! The validator's vocabulary: the names the readers agree on, in one
//! place that imports no reader, so that no two of them import each other.
//!
//! - [`Field`]: the payload's standard fields and their wire names;
//! - [`EventType`] and [`EventFamily`]: the envelope's closed sets;
//! - [`LegalBasis`] and its [`LegalBasisCategory`], [`LegalBasisType`] and
//!   [`LegalBasisStatus`]: the closed sets of a `legal_bases` element;
//! - [`Scope`]: the objects an unknown attribute can sit in;
//! - [`CUSTOM_PREFIX`]: what marks a payload member as a custom field.
//!
//! The readers (`envelope`, `payload`, `tags`, `legal_bases`,
//! `custom_fields`, `unknown`), the shared `context` and the typed `event`
//! all import it; it imports only `choice`, for matching wire strings
//! against the closed sets.

use super::choice::choice;

/// The prefix of a custom field's member name in the payload.
pub(super) const CUSTOM_PREFIX: &str = "cf_";

/// Standard members of `payload`; the string fields come first so that their
/// discriminant indexes [`ConversionEvent::strings`](super::event::ConversionEvent::strings).
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
    pub(super) const fn bit(self) -> u32 {
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

/// The only accepted `event_type` (spec: "Must be `CONVERSION` for this event").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum EventType {
    /// `CONVERSION`.
    Conversion,
}
choice!(EventType { Conversion => "CONVERSION" });

/// The only accepted `event_family` (spec: "Only `CDP` is accepted").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum EventFamily {
    /// `CDP`.
    Cdp,
}
choice!(EventFamily { Cdp => "CDP" });

/// The `category` of a legal basis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LegalBasisCategory {
    /// `communications`: consent to receive e-mails and other messages.
    Communications,
    /// `data_processing`: grounds for processing the contact's data.
    DataProcessing,
}

/// The `type` of a legal basis (named `kind` here, `type` being a keyword).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LegalBasisType {
    /// `consent`; a `status` is then required.
    Consent,
    /// `pre_existent_contract`.
    PreExistentContract,
    /// `legitimate_interest`.
    LegitimateInterest,
    /// `judicial_process`.
    JudicialProcess,
    /// `vital_interest`.
    VitalInterest,
    /// `public_interest`.
    PublicInterest,
}

/// The `status` of a legal basis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LegalBasisStatus {
    /// `granted`.
    Granted,
    /// `declined`.
    Declined,
}

/// One validated element of `legal_bases`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct LegalBasis {
    /// The `category` member.
    pub category: LegalBasisCategory,
    /// The `type` member.
    pub kind: LegalBasisType,
    /// The `status` member; always present when `kind` is
    /// [`LegalBasisType::Consent`], and kept when sent with another type.
    pub status: Option<LegalBasisStatus>,
}

choice!(LegalBasisCategory {
    Communications => "communications",
    DataProcessing => "data_processing",
});
choice!(LegalBasisType {
    Consent => "consent",
    PreExistentContract => "pre_existent_contract",
    LegitimateInterest => "legitimate_interest",
    JudicialProcess => "judicial_process",
    VitalInterest => "vital_interest",
    PublicInterest => "public_interest",
});
choice!(LegalBasisStatus {
    Granted => "granted",
    Declined => "declined",
});

/// Where an attribute that was accepted and dropped sat.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Scope {
    /// The event object itself.
    Event,
    /// `payload`.
    Payload,
    /// The legal-basis object at this index of `legal_bases`.
    LegalBasis(u32),
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
        // A name of a field's length that is not its name: the dispatch on
        // the length must still compare the whole name.
        for field in FIELDS {
            let name = field.name();
            let near_miss = format!("{}X", &name[..name.len() - 1]);
            assert_eq!(Field::classify(&near_miss), None, "{near_miss}");
        }
    }
}
