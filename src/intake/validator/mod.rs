//! Conversion events: a pure validator for their JSON body and the typed event it yields.
//!
//! [`validate_conversion`] checks a body against the rules of the spec's
//! "Conversion event" section and of COMPAT.md in one pass over the bytes,
//! without I/O, clock or store. A valid event borrows its strings from the body,
//! so validating a typical event allocates nothing; an invalid one costs about
//! one allocation per error, and every error is reported, not only the first.
//!
//! How the pass is built: the body is checked as UTF-8 once, then a small JSON
//! scanner (the grammar of RFC 8259, with serde_json's limits) walks it while
//! the readers below apply the rules member by member; there is no
//! `serde_json::Value`. Strings are `&str` slices of the body (`Cow::Owned`
//! only when they hold escapes), `tags` is kept as its raw JSON text and read
//! again lazily, and the few variable-length lists (legal bases, custom fields,
//! dropped attribute names) live in inline `SmallVec`s. Errors are compact
//! values rendered to text only by [`ValidationErrors::to_body`].
//!
//! Linear time whatever the body: every set the rules test membership of
//! (dropped attribute names, tags, the account's custom fields, the custom
//! fields already sent) is searched linearly only while it is small and is
//! hashed past that, so no shape of body, however hostile, costs more than a
//! small constant per byte (`benches/validation.rs` times one body per
//! shape); errors past [`ConversionLimits::max_errors`] and dropped names past
//! the first 100 are counted, not kept.

pub(crate) mod errors;
pub(crate) mod json_path;
mod membership;

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde_json::{Map, Value};
use smallvec::SmallVec;

use errors::{
    DataType, Detail, ErrorCollector, ErrorType, FieldError, ValidationErrors, ValidationRules,
};
use json_path::JsonPath;
use membership::{HashedSet, PositionSet, SmallSet};

// ---------------------------------------------------------------------------
// Limits
// ---------------------------------------------------------------------------

/// What the validator does with attributes that are neither standard fields
/// nor custom fields of the account.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UnknownAttributes {
    /// Accept the event, leave the attribute out of the recorded payload and
    /// list it in [`ConversionEvent::unknown_attributes`]. This is what the
    /// real service does (COMPAT.md: such attributes "are not stored ... and
    /// the event is still accepted"), so it is the default.
    #[default]
    AcceptAndDrop,
    /// Reject the event with an [`ErrorType::UnknownField`] error
    /// (`UNKNOWN_FIELD`) on each such attribute.
    Reject,
}

/// Bounds the validator enforces on a conversion event.
///
/// Build one with [`ConversionLimits::default`] and change the fields you need:
///
/// ```
/// let mut limits = conversion_gateway::ConversionLimits::default();
/// limits.max_tags = 20;
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConversionLimits {
    /// Largest body accepted, in bytes, checked before any parsing; a larger
    /// body is answered 413 with `BODY_TOO_LARGE`. Default 204 800 (200 KiB),
    /// the 0.2 MB cap of the real service's conversion and batch routes.
    pub max_body_bytes: usize,
    /// Longest string accepted in a standard field other than
    /// `traffic_source`, and in a custom field, in characters. Default 1024.
    pub max_string_len: usize,
    /// Longest `traffic_source` accepted, in characters. It may carry the
    /// base64 of the `__trf.src` cookie, a JSON document of a few hundred bytes
    /// to a few KiB, hence its own bound. Default 4096.
    pub max_traffic_source_len: usize,
    /// Most elements accepted in `tags`. Default 50.
    pub max_tags: usize,
    /// Longest tag accepted, in characters. Default 255.
    pub max_tag_len: usize,
    /// Most elements accepted in `legal_bases`. Default 10.
    pub max_legal_bases: usize,
    /// Deepest nesting of arrays and objects accepted, counting the event
    /// object as depth 1 (so `payload` is 2 and a legal-basis object 4).
    ///
    /// It bounds the values the validator does not interpret: those of
    /// attributes accepted and dropped, the only place where the event may
    /// nest freely. The standard fields have a fixed shape and a wrong shape is
    /// an `INVALID_DATA_TYPE` error whatever its depth. Default 8.
    pub max_depth: usize,
    /// Most events accepted in one [`validate_batch`] body. Default 1000.
    pub max_batch_events: usize,
    /// What to do with unknown attributes; default
    /// [`UnknownAttributes::AcceptAndDrop`].
    pub unknown_attributes: UnknownAttributes,
    /// Most errors listed in one answer (at least 1 is). When more are
    /// found, the answer lists the first ones and ends with a
    /// `TOO_MANY_ERRORS` item giving the total
    /// ([`ErrorType::TooManyErrors`]); errors past the bound are counted, not
    /// kept, so a body of 18,000 repeated keys answers a few kilobytes rather
    /// than megabytes. Default 100.
    pub max_errors: usize,
}

impl Default for ConversionLimits {
    fn default() -> Self {
        ConversionLimits {
            max_body_bytes: 200 * 1024,
            max_string_len: 1024,
            max_traffic_source_len: 4096,
            max_tags: 50,
            max_tag_len: 255,
            max_legal_bases: 10,
            max_depth: 8,
            max_batch_events: 1000,
            unknown_attributes: UnknownAttributes::AcceptAndDrop,
            max_errors: 100,
        }
    }
}

// ---------------------------------------------------------------------------
// Legal bases
// ---------------------------------------------------------------------------

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

/// A closed set of string values, as sent on the wire.
trait Choice: Copy + 'static {
    /// Every accepted value, for `validation_rules.valid_options`.
    const OPTIONS: &'static [&'static str];
    fn parse(value: &str) -> Option<Self>;
}

macro_rules! choice {
    ($name:ident { $($variant:ident => $wire:literal),+ $(,)? }) => {
        impl Choice for $name {
            const OPTIONS: &'static [&'static str] = &[$($wire),+];
            fn parse(value: &str) -> Option<Self> {
                match value {
                    $($wire => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl $name {
            /// The value as sent on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $wire,)+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
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

/// The only accepted `event_type` (spec: "Must be `CONVERSION` for this event").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EventType {
    Conversion,
}
choice!(EventType { Conversion => "CONVERSION" });

/// The only accepted `event_family` (spec: "Only `CDP` is accepted").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EventFamily {
    Cdp,
}
choice!(EventFamily { Cdp => "CDP" });

// ---------------------------------------------------------------------------
// Field names
// ---------------------------------------------------------------------------

/// Member names of an object the validator knows.
trait Known: Copy {
    fn classify(name: &str) -> Option<Self>;
}

/// Top-level members of an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Top {
    EventType,
    EventFamily,
    Payload,
}

impl Top {
    const fn name(self) -> &'static str {
        match self {
            Top::EventType => "event_type",
            Top::EventFamily => "event_family",
            Top::Payload => "payload",
        }
    }
}

impl Known for Top {
    fn classify(name: &str) -> Option<Self> {
        match name {
            "event_type" => Some(Top::EventType),
            "event_family" => Some(Top::EventFamily),
            "payload" => Some(Top::Payload),
            _ => None,
        }
    }
}

/// Standard members of `payload`; the string fields come first so that their
/// discriminant indexes [`ConversionEvent::strings`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Field {
    ConversionIdentifier,
    Email,
    Name,
    JobTitle,
    State,
    City,
    Country,
    PersonalPhone,
    MobilePhone,
    Twitter,
    Facebook,
    Linkedin,
    Website,
    CompanyName,
    CompanySite,
    CompanyAddress,
    ClientTrackingId,
    TrafficSource,
    TrafficMedium,
    TrafficCampaign,
    TrafficValue,
    Tags,
    AvailableForMailing,
    LegalBases,
}

/// How many [`Field`]s hold a plain string.
const STRING_FIELDS: usize = Field::TrafficValue as usize + 1;

/// Wire names of [`Field`], by discriminant.
const FIELD_NAMES: [&str; Field::LegalBases as usize + 1] = [
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
    const fn name(self) -> &'static str {
        FIELD_NAMES[self as usize]
    }

    const fn bit(self) -> u32 {
        1 << self as u32
    }
}

impl Known for Field {
    fn classify(name: &str) -> Option<Self> {
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

/// Members of a legal-basis object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BasisKey {
    Category,
    Type,
    Status,
}

impl BasisKey {
    const fn name(self) -> &'static str {
        match self {
            BasisKey::Category => "category",
            BasisKey::Type => "type",
            BasisKey::Status => "status",
        }
    }
}

impl Known for BasisKey {
    fn classify(name: &str) -> Option<Self> {
        match name {
            "category" => Some(BasisKey::Category),
            "type" => Some(BasisKey::Type),
            "status" => Some(BasisKey::Status),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------
// The validated event
// ---------------------------------------------------------------------------

/// Where an attribute that was accepted and dropped sat.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Scope {
    Event,
    Payload,
    LegalBasis(u32),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Dropped<'a> {
    scope: Scope,
    name: Cow<'a, str>,
}

/// Most dropped attributes an event lists; the others are only counted.
const MAX_LISTED_UNKNOWN: usize = 100;

/// The attributes accepted and dropped from one event, once per place: the
/// first [`MAX_LISTED_UNKNOWN`] listed in document order, all of them counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct DroppedAttributes<'a> {
    listed: SmallVec<[Dropped<'a>; 4]>,
    count: usize,
}

impl<'a> DroppedAttributes<'a> {
    /// Adds an attribute not dropped before.
    fn push(&mut self, scope: Scope, name: Cow<'a, str>) {
        self.count += 1;
        if self.listed.len() < MAX_LISTED_UNKNOWN {
            self.listed.push(Dropped { scope, name });
        }
    }

    fn lists(&self, scope: Scope, name: &str) -> bool {
        self.listed
            .iter()
            .any(|dropped| dropped.scope == scope && dropped.name == name)
    }
}

/// A conversion event that passed [`validate_conversion`], borrowing its
/// strings from the request body.
///
/// Strings are `&str` into the body, except those that held JSON escapes
/// (`"na\u00efve"`), which were unescaped into an owned string. Attributes that
/// are neither standard nor custom fields are not kept; their paths are listed
/// by [`ConversionEvent::unknown_attributes`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConversionEvent<'a> {
    strings: [Option<Cow<'a, str>>; STRING_FIELDS],
    /// Raw JSON text of `tags`, an array of strings already validated.
    tags: Option<&'a str>,
    available_for_mailing: Option<bool>,
    legal_bases_present: bool,
    legal_bases: SmallVec<[LegalBasis; 16]>,
    /// Custom fields as (full key with its `cf_` prefix, value).
    custom: SmallVec<[(Cow<'a, str>, Cow<'a, str>); 8]>,
    dropped: DroppedAttributes<'a>,
    traffic_source_is_cookie: bool,
}

macro_rules! optional_string_accessors {
    ($($(#[$doc:meta])* $method:ident => $field:ident;)+) => {
        $(
            $(#[$doc])*
            pub fn $method(&self) -> Option<&str> {
                self.string(Field::$field)
            }
        )+
    };
}

impl<'a> ConversionEvent<'a> {
    fn empty() -> Self {
        ConversionEvent {
            strings: [const { None }; STRING_FIELDS],
            tags: None,
            available_for_mailing: None,
            legal_bases_present: false,
            legal_bases: SmallVec::new(),
            custom: SmallVec::new(),
            dropped: DroppedAttributes::default(),
            traffic_source_is_cookie: false,
        }
    }

    fn string(&self, field: Field) -> Option<&str> {
        self.strings.get(field as usize)?.as_deref()
    }

    /// The event type, always `CONVERSION`.
    pub fn event_type(&self) -> &'static str {
        EventType::Conversion.as_str()
    }

    /// The event family, always `CDP`.
    pub fn event_family(&self) -> &'static str {
        EventFamily::Cdp.as_str()
    }

    /// `conversion_identifier`: the name of the conversion; never blank.
    pub fn conversion_identifier(&self) -> &str {
        self.string(Field::ConversionIdentifier).unwrap_or_default()
    }

    /// `email`: the contact's e-mail address, as sent (not lowercased).
    pub fn email(&self) -> &str {
        self.string(Field::Email).unwrap_or_default()
    }

    optional_string_accessors! {
        /// `name`: the contact's name.
        name => Name;
        /// `job_title`: the contact's job title.
        job_title => JobTitle;
        /// `state`: the contact's state.
        state => State;
        /// `city`: the contact's city.
        city => City;
        /// `country`: the contact's country.
        country => Country;
        /// `personal_phone`: the contact's phone.
        personal_phone => PersonalPhone;
        /// `mobile_phone`: the contact's mobile phone.
        mobile_phone => MobilePhone;
        /// `twitter`: the contact's Twitter handle.
        twitter => Twitter;
        /// `facebook`: the contact's Facebook name.
        facebook => Facebook;
        /// `linkedin`: the contact's LinkedIn name.
        linkedin => Linkedin;
        /// `website`: the contact's website.
        website => Website;
        /// `company_name`: the contact's company.
        company_name => CompanyName;
        /// `company_site`: the company's website.
        company_site => CompanySite;
        /// `company_address`: the company's address.
        company_address => CompanyAddress;
        /// `client_tracking_id`: the visitor-tracking cookie, UUID-shaped when not blank.
        client_tracking_id => ClientTrackingId;
        /// `traffic_source`: a traffic-source cookie or a UTM source; see
        /// [`ConversionEvent::traffic_source_is_cookie`].
        traffic_source => TrafficSource;
        /// `traffic_medium`: the UTM medium.
        traffic_medium => TrafficMedium;
        /// `traffic_campaign`: the UTM campaign.
        traffic_campaign => TrafficCampaign;
        /// `traffic_value`: the UTM term.
        traffic_value => TrafficValue;
    }

    /// Whether `traffic_source` holds a traffic-source cookie (JSON object
    /// text, raw or base64) rather than a UTM source.
    pub fn traffic_source_is_cookie(&self) -> bool {
        self.traffic_source_is_cookie
    }

    /// `tags`, in order: lowercase, unique, never blank. Empty when absent.
    pub fn tags(&self) -> Tags<'a> {
        Tags::new(self.tags.unwrap_or("[]"))
    }

    /// `available_for_mailing`, when sent.
    pub fn available_for_mailing(&self) -> Option<bool> {
        self.available_for_mailing
    }

    /// `legal_bases`, in order. Empty when absent.
    pub fn legal_bases(&self) -> impl ExactSizeIterator<Item = LegalBasis> + '_ {
        self.legal_bases.iter().copied()
    }

    /// The custom fields sent, as (name without the `cf_` prefix, value), in
    /// order; `null` ones are left out.
    pub fn custom_fields(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + '_ {
        self.custom
            .iter()
            .map(|(key, value)| (key.get(CUSTOM_PREFIX.len()..).unwrap_or_default(), &**value))
    }

    /// The value of one custom field, by name without the `cf_` prefix.
    pub fn custom_field(&self, name: &str) -> Option<&str> {
        self.custom_fields()
            .find(|(field, _)| *field == name)
            .map(|(_, value)| value)
    }

    /// Paths of the attributes that were accepted and dropped
    /// ([`UnknownAttributes::AcceptAndDrop`]), relative to the event, such as
    /// `$.payload.utm_content` or `$.payload.legal_bases[0].note`; for the host
    /// to report. [`JsonPath::last_key`] gives the bare name.
    ///
    /// Each place is listed once, however often its name was repeated, in
    /// document order; only the first 100 are listed, so that a body of
    /// thousands of made-up names cannot make the event (or the receipt built
    /// from it) grow with it: [`ConversionEvent::unknown_attribute_count`]
    /// gives how many there were. A name holding characters that need it is
    /// rendered escaped (`$.payload['a\u0000b']`), so a path is always safe
    /// to log or to send.
    pub fn unknown_attributes(&self) -> impl ExactSizeIterator<Item = JsonPath<'_>> + '_ {
        self.dropped.listed.iter().map(|dropped| {
            let name: &str = &dropped.name;
            match dropped.scope {
                Scope::Event => JsonPath::root().key(name),
                Scope::Payload => JsonPath::root().name("payload").key(name),
                Scope::LegalBasis(index) => JsonPath::root()
                    .name("payload")
                    .name(Field::LegalBases.name())
                    .index(index as usize)
                    .key(name),
            }
        })
    }

    /// How many attributes were accepted and dropped, each place counted once:
    /// at least [`ConversionEvent::unknown_attributes`]'s length, more when
    /// that list was cut at 100.
    pub fn unknown_attribute_count(&self) -> usize {
        self.dropped.count
    }

    /// The normalized payload to record: the standard fields sent (without the
    /// `null` ones) and the custom fields under their `cf_` names; unknown
    /// attributes are left out, and legal-basis objects keep only `category`,
    /// `type` and `status`.
    pub fn to_payload_json(&self) -> Value {
        let mut payload = Map::new();
        for (index, value) in self.strings.iter().enumerate() {
            if let (Some(value), Some(name)) = (value, FIELD_NAMES.get(index)) {
                payload.insert(
                    (*name).to_owned(),
                    Value::String(value.clone().into_owned()),
                );
            }
        }
        if self.tags.is_some() {
            let tags = self
                .tags()
                .map(|tag| Value::String(tag.into_owned()))
                .collect();
            payload.insert(Field::Tags.name().to_owned(), Value::Array(tags));
        }
        if let Some(available) = self.available_for_mailing {
            payload.insert(
                Field::AvailableForMailing.name().to_owned(),
                Value::Bool(available),
            );
        }
        if self.legal_bases_present {
            let bases = self
                .legal_bases
                .iter()
                .map(|basis| {
                    let mut object = Map::new();
                    object.insert("category".to_owned(), basis.category.as_str().into());
                    object.insert("type".to_owned(), basis.kind.as_str().into());
                    if let Some(status) = basis.status {
                        object.insert("status".to_owned(), status.as_str().into());
                    }
                    Value::Object(object)
                })
                .collect();
            payload.insert(Field::LegalBases.name().to_owned(), Value::Array(bases));
        }
        for (key, value) in &self.custom {
            payload.insert(
                key.clone().into_owned(),
                Value::String(value.clone().into_owned()),
            );
        }
        Value::Object(payload)
    }
}

/// Iterator over the tags of a [`ConversionEvent`]; see [`ConversionEvent::tags`].
///
/// Each tag borrows from the body unless it held JSON escapes.
#[derive(Clone, Debug)]
pub struct Tags<'a> {
    /// The scanner over the raw text of `tags`, past the `[` and the tags
    /// already given.
    scanner: Scanner<'a>,
    /// Whether no tag has been given yet (no `,` comes before the next one).
    first: bool,
}

impl<'a> Tags<'a> {
    /// The tags of `text`, the raw text of an array of strings the scanner
    /// has checked.
    fn new(text: &'a str) -> Self {
        let mut scanner = Scanner::new(text, 0);
        // The text was sliced from the `[` on: it opens with one.
        let _opened = scanner.eat(b'[');
        Tags {
            scanner,
            first: true,
        }
    }
}

impl<'a> Iterator for Tags<'a> {
    type Item = Cow<'a, str>;

    fn next(&mut self) -> Option<Self::Item> {
        // The same scanner that checked the array when the event was
        // validated reads it again, so it cannot fail here; should it, the
        // iteration ends rather than panics.
        if !self.scanner.next_element(&mut self.first).ok()? {
            return None;
        }
        match self.scanner.peek_value() {
            Some(b'"') => self.scanner.string().ok().map(JsonStr::decode),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------

const CUSTOM_PREFIX: &str = "cf_";

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
/// hold U+0000, which PostgreSQL cannot store in `text` or `jsonb`, nor any
/// other C0 control character but tab, line feed and carriage return (U+0001
/// to U+001F except U+0009, U+000A, U+000D). Such a character sent as an
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
    if let Some(too_large) = body_too_large(body, limits) {
        return Err(too_large);
    }
    let text = utf8(body)?;
    let mut ctx = Ctx::new(limits, custom_fields);
    let mut event = ConversionEvent::empty();
    let mut scanner = Scanner::new(text, 0);
    let shape = read_event(&mut scanner, &mut ctx, &mut event)
        .and_then(|shape| scanner.finish().map(|()| shape));
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
    if let Some(too_large) = body_too_large(body, limits) {
        return Err(too_large);
    }
    let text = utf8(body)?;
    let mut ctx = Ctx::new(limits, custom_fields);
    // The batch array is one level of nesting above its events.
    let mut scanner = Scanner::new(text, 1);
    let outcome =
        read_batch(&mut scanner, &mut ctx).and_then(|events| scanner.finish().map(|()| events));
    match outcome {
        Err(NotJson(at)) => Err(not_json(body, at)),
        Ok(None) => Err(ValidationErrors::single(FieldError::bad_body(
            Detail::ExpectedArray,
        ))),
        Ok(Some(events)) if ctx.errors.is_empty() => Ok(events),
        Ok(Some(_)) => Err(ctx.errors.finish()),
    }
}

fn body_too_large(body: &[u8], limits: &ConversionLimits) -> Option<ValidationErrors> {
    // Checked before parsing, so an oversized body costs nothing to refuse.
    (body.len() > limits.max_body_bytes)
        .then(|| ValidationErrors::body_too_large(limits.max_body_bytes))
}

/// The body as text: JSON is UTF-8 (RFC 8259 section 8.1).
///
/// One check of the whole body is cheaper than one per string, and lets the
/// scanner slice strings out of it without checking them again.
fn utf8(body: &[u8]) -> Result<&str, ValidationErrors> {
    std::str::from_utf8(body).map_err(|error| not_json(body, error.valid_up_to()))
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

// ---------------------------------------------------------------------------
// Validation context
// ---------------------------------------------------------------------------

/// Account custom-field lists up to this long are always searched linearly:
/// a search costs no more than hashing the name would.
const LINEAR_CUSTOM_FIELDS: usize = 16;

/// Dropped attributes an event may have before their names are hashed
/// rather than searched.
const LINEAR_DROPPED: usize = 8;

/// State shared by the readers of one validation; `'a` is the body's.
struct Ctx<'l, 'a> {
    limits: &'l ConversionLimits,
    custom_fields: &'l [&'l str],
    /// The position of each name in `custom_fields`, once built; see
    /// [`Ctx::custom_field_index`].
    custom_index: Option<HashMap<&'l str, usize>>,
    /// Names compared by linear searches of `custom_fields` so far.
    custom_compared: usize,
    errors: ErrorCollector,
    /// Every attribute dropped from the event being read, once it has more
    /// than [`LINEAR_DROPPED`]; see [`Ctx::drop_attribute`].
    dropped_seen: Option<HashedSet<(Scope, Cow<'a, str>)>>,
    /// Index of the event being validated in a batch.
    event: Option<usize>,
}

impl<'l, 'a> Ctx<'l, 'a> {
    fn new(limits: &'l ConversionLimits, custom_fields: &'l [&'l str]) -> Self {
        Ctx {
            limits,
            custom_fields,
            custom_index: None,
            custom_compared: 0,
            errors: ErrorCollector::new(limits.max_errors),
            dropped_seen: None,
            event: None,
        }
    }

    /// The path of the event being validated: `$`, or `$[i]` in a batch.
    fn event_path(&self) -> JsonPath<'static> {
        match self.event {
            Some(index) => JsonPath::root().index(index),
            None => JsonPath::root(),
        }
    }

    fn payload_path(&self) -> JsonPath<'static> {
        self.event_path().name("payload")
    }

    fn field_path(&self, field: Field) -> JsonPath<'static> {
        self.payload_path().name(field.name())
    }

    fn basis_path(&self, index: usize) -> JsonPath<'static> {
        self.field_path(Field::LegalBases).index(index)
    }

    fn scope_path<'n>(&self, scope: Scope, name: &'n str) -> JsonPath<'n> {
        match scope {
            Scope::Event => self.event_path().key(name),
            Scope::Payload => self.payload_path().key(name),
            Scope::LegalBasis(index) => self.basis_path(index as usize).key(name),
        }
    }

    fn report(
        &mut self,
        error_type: ErrorType,
        path: JsonPath<'_>,
        rules: Option<ValidationRules>,
    ) {
        self.errors.push(error_type, path, rules);
    }

    fn wrong_type(&mut self, path: JsonPath<'_>, expected: DataType) {
        self.report(
            ErrorType::InvalidDataType,
            path,
            Some(ValidationRules::DataType(expected)),
        );
    }

    /// The position of `name` (without its `cf_` prefix) among the account's
    /// custom fields (the first, should the account list it twice).
    fn custom_field_index(&mut self, name: &str) -> Option<usize> {
        if let Some(index) = &self.custom_index {
            return index.get(name).copied();
        }
        let fields = self.custom_fields;
        // One linear search per `cf_` member would cost members times fields
        // (25,000 made-up `cf_` names against 1,000 fields: 25 million
        // comparisons). Once the searches have compared four times as many
        // names as the account has, hash them all: a validation then costs at
        // most five passes over the list plus one lookup per member, and a
        // typical event with a few custom fields never builds the index.
        if fields.len() > LINEAR_CUSTOM_FIELDS && self.custom_compared >= 4 * fields.len() {
            let mut index = HashMap::with_capacity(fields.len());
            for (position, field) in fields.iter().enumerate() {
                index.entry(*field).or_insert(position);
            }
            let found = index.get(name).copied();
            self.custom_index = Some(index);
            return found;
        }
        let found = fields.iter().position(|field| *field == name);
        self.custom_compared += found.map_or(fields.len(), |position| position + 1);
        found
    }

    /// Reports a choice that was sent but is not acceptable; gives the value
    /// when it is acceptable.
    ///
    /// The path is built only when there is an error to report.
    fn check_choice<C: Choice>(
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

    /// Reads the value of an attribute that is neither standard nor custom,
    /// and applies the unknown-attribute policy to it; `depth` is the depth
    /// the value has if it is a container.
    fn unknown_attribute(
        &mut self,
        scanner: &mut Scanner<'a>,
        name: Cow<'a, str>,
        scope: Scope,
        depth: usize,
        dropped: &mut DroppedAttributes<'a>,
    ) -> Scan<()> {
        let deepest = scanner.skip_value(depth)?;
        match self.limits.unknown_attributes {
            UnknownAttributes::Reject => {
                self.report(ErrorType::UnknownField, self.scope_path(scope, &name), None);
            }
            UnknownAttributes::AcceptAndDrop => {
                let max = self.limits.max_depth;
                if deepest > max {
                    self.report(
                        ErrorType::TooDeeplyNested,
                        self.scope_path(scope, &name),
                        Some(ValidationRules::MaxDepth(max)),
                    );
                } else {
                    self.drop_attribute(scope, name, dropped);
                }
            }
        }
        Ok(())
    }

    /// Adds a dropped attribute to the event's, unless the same name was
    /// already dropped from the same object.
    fn drop_attribute(
        &mut self,
        scope: Scope,
        name: Cow<'a, str>,
        dropped: &mut DroppedAttributes<'a>,
    ) {
        // A search of the list per name made 25,000 distinct names cost 300
        // million comparisons (0.5 to 1.5 s): past a few names, every one is
        // hashed instead.
        if self.dropped_seen.is_none() {
            if dropped.lists(scope, &name) {
                return;
            }
            if dropped.count < LINEAR_DROPPED {
                dropped.push(scope, name);
                return;
            }
            // All the names dropped so far are listed (fewer than the list
            // holds), so the set starts complete.
            let listed = dropped.listed.iter();
            let seen = listed.map(|dropped| (dropped.scope, dropped.name.clone()));
            self.dropped_seen = Some(seen.collect());
        }
        let Some(seen) = &mut self.dropped_seen else {
            return;
        };
        if dropped.listed.len() < MAX_LISTED_UNKNOWN {
            if seen.insert((scope, name.clone())) {
                dropped.push(scope, name);
            }
        } else if seen.insert((scope, name)) {
            dropped.count += 1;
        }
    }
}

// ---------------------------------------------------------------------------
// Scanner: JSON syntax, one byte at a time
// ---------------------------------------------------------------------------

/// The byte offset at which the body stops being JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct NotJson(usize);

type Scan<T> = Result<T, NotJson>;

/// The deepest nesting of arrays and objects accepted, as in serde_json
/// (whose recursion limit of 128 refuses the 128th level), so that both accept
/// the same documents. It also bounds the recursion of the scanner.
const NESTING_LIMIT: usize = 127;

/// A JSON scanner over text already known to be UTF-8.
///
/// It checks the grammar of RFC 8259 as it goes and hands out strings as
/// slices of the body; the readers below drive it member by member, so the
/// body is read exactly once. Hand-written rather than serde-driven because a
/// generic deserializer spent most of the time of a validation in plumbing
/// (about twice the cost of this scanner on the benchmark bodies).
#[derive(Clone, Debug)]
struct Scanner<'a> {
    text: &'a str,
    position: usize,
    /// Levels of nesting above the event (1 in a batch).
    nesting_offset: usize,
}

/// A JSON string as it appears in the body: its contents between the quotes,
/// escapes left in, and whether it holds any.
#[derive(Clone, Copy, Debug)]
struct JsonStr<'a> {
    contents: &'a str,
    escaped: bool,
}

impl<'a> JsonStr<'a> {
    /// The string itself: borrowed from the body unless it held escapes.
    #[inline]
    fn decode(self) -> Cow<'a, str> {
        if self.escaped {
            Cow::Owned(unescape(self.contents))
        } else {
            Cow::Borrowed(self.contents)
        }
    }
}

/// A value read where a scalar is expected.
enum Scalar<'a> {
    Null,
    Bool(bool),
    Str(JsonStr<'a>),
    /// A number, an array or an object (skipped).
    Other,
}

/// A value of a closed set of strings.
enum Chosen<C> {
    Null,
    Valid(C),
    Invalid,
    WrongType,
}

impl<'a> Scalar<'a> {
    fn choice<C: Choice>(self) -> Chosen<C> {
        match self {
            Scalar::Null => Chosen::Null,
            Scalar::Str(value) => C::parse(&value.decode()).map_or(Chosen::Invalid, Chosen::Valid),
            Scalar::Bool(_) | Scalar::Other => Chosen::WrongType,
        }
    }
}

/// What a container-expecting reader found.
enum Shaped<T> {
    /// The expected container, with what was read from it.
    Right(T),
    /// `null`.
    Null,
    /// Another JSON type.
    Wrong,
}

impl<'a> Scanner<'a> {
    fn new(text: &'a str, nesting_offset: usize) -> Self {
        Scanner {
            text,
            position: 0,
            nesting_offset,
        }
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn fail<T>(&self) -> Scan<T> {
        Err(NotJson(self.position))
    }

    fn peek(&self) -> Option<u8> {
        self.bytes().get(self.position).copied()
    }

    /// Skips whitespace and gives the first byte of the value that follows.
    fn peek_value(&mut self) -> Option<u8> {
        self.position = skip_whitespace(self.bytes(), self.position);
        self.peek()
    }

    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        self.position += usize::from(found);
        found
    }

    fn expect(&mut self, byte: u8) -> Scan<()> {
        if self.eat(byte) { Ok(()) } else { self.fail() }
    }

    /// Checks that only whitespace is left.
    fn finish(&mut self) -> Scan<()> {
        if self.peek_value().is_none() {
            Ok(())
        } else {
            self.fail()
        }
    }

    /// Reads the opening byte of an array or object at `depth`.
    fn open(&mut self, byte: u8, depth: usize) -> Scan<()> {
        if depth + self.nesting_offset > NESTING_LIMIT {
            return self.fail();
        }
        self.expect(byte)
    }

    /// Moves to the next member of an object whose `{` was read, giving its
    /// name, the scanner then sitting on its value; `None` after the `}`.
    fn next_key(&mut self, first: &mut bool) -> Scan<Option<JsonStr<'a>>> {
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
    /// the scanner on the element, `false` after the `]`.
    fn next_element(&mut self, first: &mut bool) -> Scan<bool> {
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
    fn string(&mut self) -> Scan<JsonStr<'a>> {
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

    /// Decodes the contents of a string this scanner has read (the text
    /// between its quotes, the scanner at its start) into `decoded`.
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
            // serde_json refuses a lone surrogate in a string, so do we
            // (and PostgreSQL's jsonb refuses one too).
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

    fn literal(&mut self, word: &[u8]) -> Scan<()> {
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

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.position += 1;
        }
    }

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
    fn skip_value(&mut self, depth: usize) -> Scan<usize> {
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

    /// Reads a value where a scalar is expected; anything else is skipped.
    fn scalar(&mut self, depth: usize) -> Scan<Scalar<'a>> {
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
fn find_special(bytes: &[u8], mut at: usize) -> usize {
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

// ---------------------------------------------------------------------------
// Readers: event, payload, tags, legal bases, batch
// ---------------------------------------------------------------------------

/// Reads one event object (at depth 1) into `event`, its errors into `ctx`.
fn read_event<'a>(
    scanner: &mut Scanner<'a>,
    ctx: &mut Ctx<'_, 'a>,
    event: &mut ConversionEvent<'a>,
) -> Scan<Shaped<()>> {
    // The names dropped from the previous event of a batch are not this one's.
    ctx.dropped_seen = None;
    match scanner.peek_value() {
        Some(b'{') => scanner.open(b'{', 1)?,
        Some(b'n') => return scanner.literal(b"null").map(|()| Shaped::Null),
        _ => return scanner.skip_value(1).map(|_| Shaped::Wrong),
    }
    let (mut seen_type, mut seen_family, mut seen_payload) = (false, false, false);
    let (mut has_type, mut has_family, mut has_payload) = (false, false, false);
    let mut first = true;
    while let Some(key) = scanner.next_key(&mut first)? {
        let name = key.decode();
        let Some(top) = Top::classify(&name) else {
            ctx.unknown_attribute(scanner, name, Scope::Event, 2, &mut event.dropped)?;
            continue;
        };
        let seen = match top {
            Top::EventType => &mut seen_type,
            Top::EventFamily => &mut seen_family,
            Top::Payload => &mut seen_payload,
        };
        let path = |ctx: &Ctx<'_, 'a>| ctx.event_path().name(top.name());
        if std::mem::replace(seen, true) {
            scanner.skip_value(2)?;
            ctx.report(ErrorType::DuplicateField, path(ctx), None);
            continue;
        }
        match top {
            Top::EventType => {
                let chosen = scanner.scalar(2)?.choice::<EventType>();
                has_type = !matches!(chosen, Chosen::Null);
                ctx.check_choice(path, chosen);
            }
            Top::EventFamily => {
                let chosen = scanner.scalar(2)?.choice::<EventFamily>();
                has_family = !matches!(chosen, Chosen::Null);
                ctx.check_choice(path, chosen);
            }
            Top::Payload => match read_payload(scanner, ctx, event)? {
                Shaped::Right(()) => has_payload = true,
                Shaped::Null => {}
                Shaped::Wrong => {
                    has_payload = true;
                    ctx.wrong_type(path(ctx), DataType::Object);
                }
            },
        }
    }
    // Spec: event_type, event_family and payload are required.
    for (present, top) in [
        (has_type, Top::EventType),
        (has_family, Top::EventFamily),
        (has_payload, Top::Payload),
    ] {
        if !present {
            let path = ctx.event_path().name(top.name());
            ctx.report(ErrorType::CannotBeNull, path, None);
        }
    }
    Ok(Shaped::Right(()))
}

/// Reads the `payload` object (at depth 2) into the event.
fn read_payload<'a>(
    scanner: &mut Scanner<'a>,
    ctx: &mut Ctx<'_, 'a>,
    event: &mut ConversionEvent<'a>,
) -> Scan<Shaped<()>> {
    match scanner.peek_value() {
        Some(b'{') => scanner.open(b'{', 2)?,
        Some(b'n') => return scanner.literal(b"null").map(|()| Shaped::Null),
        _ => return scanner.skip_value(2).map(|_| Shaped::Wrong),
    }
    let mut custom_seen = PositionSet::default();
    let mut seen = 0u32;
    let mut sent = 0u32;
    let mut first = true;
    while let Some(key) = scanner.next_key(&mut first)? {
        let name = key.decode();
        let Some(field) = Field::classify(&name) else {
            read_other_payload_member(scanner, ctx, name, event, &mut custom_seen)?;
            continue;
        };
        if seen & field.bit() != 0 {
            scanner.skip_value(3)?;
            ctx.report(ErrorType::DuplicateField, ctx.field_path(field), None);
            continue;
        }
        seen |= field.bit();
        match field {
            Field::Tags => event.tags = read_tags(scanner, ctx)?,
            Field::AvailableForMailing => match scanner.scalar(3)? {
                Scalar::Null => {}
                Scalar::Bool(value) => event.available_for_mailing = Some(value),
                Scalar::Str(_) | Scalar::Other => {
                    ctx.wrong_type(ctx.field_path(field), DataType::Boolean);
                }
            },
            Field::LegalBases => match read_legal_bases(scanner, ctx, event)? {
                Shaped::Right(()) => event.legal_bases_present = true,
                Shaped::Null => {}
                Shaped::Wrong => ctx.wrong_type(ctx.field_path(field), DataType::Array),
            },
            _ => match scanner.scalar(3)? {
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

/// Reads a payload member that is not a standard field: a custom field of the
/// account, or an unknown attribute.
fn read_other_payload_member<'a>(
    scanner: &mut Scanner<'a>,
    ctx: &mut Ctx<'_, 'a>,
    name: Cow<'a, str>,
    event: &mut ConversionEvent<'a>,
    custom_seen: &mut PositionSet,
) -> Scan<()> {
    let custom = match name.strip_prefix(CUSTOM_PREFIX) {
        Some(bare) => ctx.custom_field_index(bare),
        None => None,
    };
    let Some(custom) = custom else {
        return ctx.unknown_attribute(scanner, name, Scope::Payload, 3, &mut event.dropped);
    };
    if !custom_seen.insert(custom) {
        scanner.skip_value(3)?;
        ctx.report(
            ErrorType::DuplicateField,
            ctx.payload_path().key(&*name),
            None,
        );
        return Ok(());
    }
    match scanner.scalar(3)? {
        Scalar::Null => {}
        Scalar::Str(value) => {
            let value = value.decode();
            // The name is stored too, as the payload's key: an account's
            // field named with a control character is refused like a value.
            let refused_control =
                unescaped_refused_control(&value) || unescaped_refused_control(&name);
            let max = ctx.limits.max_string_len;
            if refused_control {
                ctx.report(
                    ErrorType::InvalidCharacters,
                    ctx.payload_path().key(&*name),
                    None,
                );
            } else if is_too_long(&value, max) {
                ctx.report(
                    ErrorType::ValueTooLong,
                    ctx.payload_path().key(&*name),
                    Some(ValidationRules::MaxLength(max)),
                );
            } else {
                event.custom.push((name, value));
            }
        }
        Scalar::Bool(_) | Scalar::Other => {
            ctx.wrong_type(ctx.payload_path().key(&*name), DataType::String);
        }
    }
    Ok(())
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

/// Reads `tags` (an array at depth 3); gives its raw text to keep, `None`
/// for `null` or a value of another type.
fn read_tags<'a>(scanner: &mut Scanner<'a>, ctx: &mut Ctx<'_, 'a>) -> Scan<Option<&'a str>> {
    match scanner.peek_value() {
        Some(b'[') => {}
        Some(b'n') => return scanner.literal(b"null").map(|()| None),
        _ => {
            scanner.skip_value(3)?;
            ctx.wrong_type(ctx.field_path(Field::Tags), DataType::Array);
            return Ok(None);
        }
    }
    let start = scanner.position;
    scanner.open(b'[', 3)?;
    let limits = ctx.limits;
    // The tags read so far, unescaped: hashed past the first few, so that
    // even a raised `max_tags` never makes the uniqueness test quadratic.
    let mut earlier = SmallSet::default();
    let (mut first, mut index) = (true, 0);
    while scanner.next_element(&mut first)? {
        if index >= limits.max_tags {
            if index == limits.max_tags {
                ctx.report(
                    ErrorType::TooManyItems,
                    ctx.field_path(Field::Tags),
                    Some(ValidationRules::MaxItems(limits.max_tags)),
                );
            }
            scanner.skip_value(4)?;
            index += 1;
            continue;
        }
        if scanner.peek_value() != Some(b'"') {
            scanner.skip_value(4)?;
            ctx.wrong_type(tag_path(ctx, index), DataType::String);
            index += 1;
            continue;
        }
        // Unescaped once (only a tag with escapes allocates), so that each
        // rule below and each uniqueness comparison reads plain text.
        let tag = scanner.string()?.decode();
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
    Ok(scanner.text.get(start..scanner.position))
}

/// Whether a string holds an uppercase letter.
fn has_uppercase(value: &str) -> bool {
    if value.is_ascii() {
        value.bytes().any(|b| b.is_ascii_uppercase())
    } else {
        value.chars().any(char::is_uppercase)
    }
}

fn tag_path(ctx: &Ctx<'_, '_>, index: usize) -> JsonPath<'static> {
    ctx.field_path(Field::Tags).index(index)
}

/// Reads `legal_bases` (an array at depth 3) into the event.
fn read_legal_bases<'a>(
    scanner: &mut Scanner<'a>,
    ctx: &mut Ctx<'_, 'a>,
    event: &mut ConversionEvent<'a>,
) -> Scan<Shaped<()>> {
    match scanner.peek_value() {
        Some(b'[') => scanner.open(b'[', 3)?,
        Some(b'n') => return scanner.literal(b"null").map(|()| Shaped::Null),
        _ => return scanner.skip_value(3).map(|_| Shaped::Wrong),
    }
    let max = ctx.limits.max_legal_bases;
    let (mut first, mut index) = (true, 0);
    while scanner.next_element(&mut first)? {
        if index >= max {
            if index == max {
                ctx.report(
                    ErrorType::TooManyItems,
                    ctx.field_path(Field::LegalBases),
                    Some(ValidationRules::MaxItems(max)),
                );
            }
            scanner.skip_value(4)?;
        } else if scanner.peek_value() == Some(b'{') {
            if let Some(basis) = read_legal_basis(scanner, ctx, &mut event.dropped, index)? {
                event.legal_bases.push(basis);
            }
        } else {
            scanner.skip_value(4)?;
            ctx.wrong_type(ctx.basis_path(index), DataType::Object);
        }
        index += 1;
    }
    Ok(Shaped::Right(()))
}

/// Reads one legal-basis object (at depth 4), its `{` next; `None` when it
/// had errors.
fn read_legal_basis<'a>(
    scanner: &mut Scanner<'a>,
    ctx: &mut Ctx<'_, 'a>,
    dropped: &mut DroppedAttributes<'a>,
    index: usize,
) -> Scan<Option<LegalBasis>> {
    scanner.open(b'{', 4)?;
    let errors_before = ctx.errors.found();
    let mut seen = [false; 3];
    let mut sent = [false; 3];
    let (mut category, mut kind, mut status) = (None, None, None);
    let mut first = true;
    while let Some(key) = scanner.next_key(&mut first)? {
        let name = key.decode();
        let Some(key) = BasisKey::classify(&name) else {
            let scope = Scope::LegalBasis(u32::try_from(index).unwrap_or(u32::MAX));
            // Depth 5: event 1, payload 2, legal_bases 3, this object 4.
            ctx.unknown_attribute(scanner, name, scope, 5, dropped)?;
            continue;
        };
        let path = |ctx: &Ctx<'_, 'a>| ctx.basis_path(index).name(key.name());
        if std::mem::replace(&mut seen[key as usize], true) {
            scanner.skip_value(5)?;
            ctx.report(ErrorType::DuplicateField, path(ctx), None);
            continue;
        }
        let value = scanner.scalar(5)?;
        sent[key as usize] = !matches!(value, Scalar::Null);
        match key {
            BasisKey::Category => category = ctx.check_choice(path, value.choice()),
            BasisKey::Type => kind = ctx.check_choice(path, value.choice()),
            BasisKey::Status => status = ctx.check_choice(path, value.choice()),
        }
    }
    let mut required = [BasisKey::Category, BasisKey::Type, BasisKey::Status].as_slice();
    // COMPAT.md: status comes with type consent; without it the consent
    // would record neither a grant nor a refusal.
    if kind != Some(LegalBasisType::Consent) {
        required = &required[..2];
    }
    for key in required {
        if !sent[*key as usize] {
            ctx.report(
                ErrorType::CannotBeNull,
                ctx.basis_path(index).name(key.name()),
                None,
            );
        }
    }
    Ok(match (category, kind) {
        (Some(category), Some(kind)) if ctx.errors.found() == errors_before => Some(LegalBasis {
            category,
            kind,
            status,
        }),
        _ => None,
    })
}

/// Reads a batch: an array of events; `None` when the body is not an array.
fn read_batch<'a>(
    scanner: &mut Scanner<'a>,
    ctx: &mut Ctx<'_, 'a>,
) -> Scan<Option<Vec<ConversionEvent<'a>>>> {
    match scanner.peek_value() {
        Some(b'[') => scanner.open(b'[', 0)?,
        _ => return scanner.skip_value(0).map(|_| None),
    }
    let max = ctx.limits.max_batch_events;
    let mut events = Vec::with_capacity(max.min(4));
    let (mut first, mut index) = (true, 0);
    while scanner.next_element(&mut first)? {
        if index >= max {
            if index == max {
                ctx.event = None;
                ctx.report(
                    ErrorType::TooManyItems,
                    JsonPath::root(),
                    Some(ValidationRules::MaxItems(max)),
                );
            }
            scanner.skip_value(1)?;
            index += 1;
            continue;
        }
        ctx.event = Some(index);
        let mut event = ConversionEvent::empty();
        match read_event(scanner, ctx, &mut event)? {
            // Once any event failed the batch fails: stop keeping events.
            Shaped::Right(()) if ctx.errors.is_empty() => events.push(event),
            Shaped::Right(()) => {}
            Shaped::Null | Shaped::Wrong => ctx.wrong_type(ctx.event_path(), DataType::Object),
        }
        index += 1;
    }
    ctx.event = None;
    if index == 0 {
        ctx.report(ErrorType::CannotBeEmpty, JsonPath::root(), None);
    }
    Ok(Some(events))
}

// ---------------------------------------------------------------------------
// Field rules
// ---------------------------------------------------------------------------

/// Whether a string holds a control character no stored string may hold:
/// U+0000 to U+001F except tab, line feed and carriage return. See
/// [`ErrorType::InvalidCharacters`] for why.
fn has_refused_control(value: &str) -> bool {
    // In UTF-8 every byte of a multi-byte character is 0x80 or above: a byte
    // below 0x20 is the control character itself.
    value
        .bytes()
        .any(|b| b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r'))
}

/// Whether an unescaped string holds a control character no stored string
/// may hold. Only an escape can have put one there (a raw one is not JSON),
/// so a string borrowed from the body, which held none, is not searched:
/// strings without escapes, nearly all of them, pay nothing for the rule.
// The variant is the point (`Owned` is what an escaped string decodes to),
// so the function takes the `Cow`, not the `&str` clippy suggests.
#[allow(clippy::ptr_arg)]
fn unescaped_refused_control(value: &Cow<'_, str>) -> bool {
    matches!(value, Cow::Owned(_)) && has_refused_control(value)
}

/// Whether a string is empty or only whitespace.
fn is_blank(value: &str) -> bool {
    value.chars().all(char::is_whitespace)
}

/// Whether a string holds more than `max` characters (Unicode scalar values).
fn is_too_long(value: &str, max: usize) -> bool {
    // A character takes at least one byte: only count when the bytes exceed.
    value.len() > max && value.chars().count() > max
}

/// Whether `value` is a plausible e-mail address; see [`validate_conversion`]
/// for the rule.
fn is_plausible_email(value: &str) -> bool {
    // RFC 5321 section 4.5.3.1: a path is at most 256 octets including the
    // angle brackets (254 for the address), a local part at most 64.
    if value.len() > 254 {
        return false;
    }
    // One pass over the bytes: this runs for every event.
    let mut at = None;
    let (mut label_len, mut dots) = (0usize, 0usize);
    for (index, byte) in value.bytes().enumerate() {
        match byte {
            b'@' if at.is_some() => return false,
            b'@' => (at, label_len) = (Some(index), 0),
            // Whitespace and control characters, ASCII ones here.
            0..=0x20 | 0x7f => return false,
            b'.' if at.is_some() => {
                if label_len == 0 {
                    return false;
                }
                (label_len, dots) = (0, dots + 1);
            }
            _ => label_len += 1,
        }
    }
    let Some(at) = at else {
        return false;
    };
    (1..=64).contains(&at)
        && dots > 0
        && label_len > 0
        && (value.is_ascii() || !value.chars().any(|c| c.is_whitespace() || c.is_control()))
}

/// Whether `value` has the shape of a UUID: 8-4-4-4-12 hexadecimal digits.
fn is_uuid_shaped(value: &str) -> bool {
    let bytes = value.as_bytes();
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(index, byte)| match index {
            8 | 13 | 18 | 23 => *byte == b'-',
            _ => byte.is_ascii_hexdigit(),
        })
}

/// Base64 as browsers and servers write it: padding optional, any trailing bits.
const LENIENT_BASE64: GeneralPurposeConfig = GeneralPurposeConfig::new()
    .with_decode_padding_mode(DecodePaddingMode::Indifferent)
    .with_decode_allow_trailing_bits(true);
const STANDARD_BASE64: GeneralPurpose = GeneralPurpose::new(&alphabet::STANDARD, LENIENT_BASE64);
const URL_SAFE_BASE64: GeneralPurpose = GeneralPurpose::new(&alphabet::URL_SAFE, LENIENT_BASE64);

/// Largest decoded cookie checked without allocating: the base64 of a
/// `traffic_source` at its default length bound (4096) fits.
const COOKIE_BUFFER: usize = 3072;

/// Whether a `traffic_source` value is a traffic-source cookie rather than a
/// UTM source: JSON object text, raw, or base64-encoded (standard or URL-safe
/// alphabet, padded or not). Surrounding whitespace is ignored.
///
/// COMPAT.md: "`traffic_source` may hold the value of the `__trf.src` cookie,
/// which is JSON, either raw or base64-encoded".
fn is_traffic_source_cookie(value: &str) -> bool {
    let value = value.trim();
    if value.starts_with('{') {
        return is_json_object(value.as_bytes());
    }
    // The base64 of text starting with `{` (0x7B = 011110 11) starts with `e`:
    // a cheap test that keeps UTM sources such as `google` from being decoded.
    if !value.starts_with('e') {
        return false;
    }
    let bytes = value.as_bytes();
    let engine = if bytes.iter().any(|b| matches!(b, b'-' | b'_')) {
        &URL_SAFE_BASE64
    } else {
        &STANDARD_BASE64
    };
    decode_and_check(engine, bytes)
}

#[inline(never)]
fn decode_and_check(engine: &GeneralPurpose, bytes: &[u8]) -> bool {
    if base64::decoded_len_estimate(bytes.len()) <= COOKIE_BUFFER {
        let mut buffer = [0u8; COOKIE_BUFFER];
        match engine.decode_slice(bytes, &mut buffer) {
            Ok(len) => buffer.get(..len).is_some_and(is_json_object),
            Err(_) => false,
        }
    } else {
        // Only when max_traffic_source_len was raised above its default.
        engine
            .decode(bytes)
            .is_ok_and(|decoded| is_json_object(&decoded))
    }
}

/// Whether `bytes` is exactly one JSON object (whitespace around allowed).
fn is_json_object(bytes: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return false;
    };
    let mut scanner = Scanner::new(text, 0);
    scanner.peek_value() == Some(b'{') && scanner.skip_value(1).is_ok() && scanner.finish().is_ok()
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

/// Raw JSON string contents the scanner has read, escapes decoded. Out of
/// line: most strings have no escape, and their path through
/// [`JsonStr::decode`] stays small enough to inline.
#[inline(never)]
fn unescape(contents: &str) -> String {
    // An escape is never shorter than the UTF-8 of what it stands for: one
    // allocation of the raw length always suffices.
    let mut decoded = String::with_capacity(contents.len());
    // The scanner that checked the escapes decodes them: one grammar, read
    // by one piece of code. Checked contents decode whole; anything else
    // would stop at its first malformed escape, never panic.
    let _checked = Scanner::new(contents, 0).unescape_into(&mut decoded);
    decoded
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

    #[test]
    fn email_rule_accepts_ordinary_addresses() {
        for ok in [
            "a@b.co",
            "first.last+tag@example.com.br",
            "jose.silva@exemplo.com",
            "ünïcode@exämple.org",
        ] {
            assert!(is_plausible_email(ok), "{ok}");
        }
    }

    #[test]
    fn email_rule_refuses_implausible_addresses() {
        let long_local = format!("{}@example.com", "a".repeat(65));
        let long_total = format!("a@{}.com", "b".repeat(250));
        for bad in [
            "",
            "plain",
            "@example.com",
            "a@",
            "a@localhost",
            "a@@example.com",
            "a@b@example.com",
            "a b@example.com",
            "a@exa mple.com",
            "a@example..com",
            "a@.example.com",
            "a@example.com.",
            "a\u{7}@example.com",
            "a\u{a0}b@example.com",
            "a@exa\u{3000}mple.com",
            long_local.as_str(),
            long_total.as_str(),
        ] {
            assert!(!is_plausible_email(bad), "{bad}");
        }
    }

    #[test]
    fn uuid_shape_is_8_4_4_4_12_hex() {
        assert!(is_uuid_shaped("6ba7b810-9dad-11d1-80b4-00c04fd430c8"));
        assert!(is_uuid_shaped("6BA7B810-9DAD-11D1-80B4-00C04FD430C8"));
        assert!(!is_uuid_shaped("6ba7b8109dad11d180b400c04fd430c8"));
        assert!(!is_uuid_shaped("6ba7b810-9dad-11d1-80b4-00c04fd430cg"));
        assert!(!is_uuid_shaped("6ba7b810-9dad-11d1-80b400-c04fd430c8"));
        assert!(!is_uuid_shaped(" 6ba7b810-9dad-11d1-80b4-00c04fd430c8"));
        assert!(!is_uuid_shaped("é6ba7b810-9dad-11d1-80b4-00c04fd430"));
    }

    #[test]
    fn raw_json_object_is_a_cookie() {
        assert!(is_traffic_source_cookie(
            r#"{"first_session":{"value":"https://www.google.com/","extra_params":{}}}"#
        ));
        assert!(is_traffic_source_cookie("  {} "));
        assert!(!is_traffic_source_cookie("{not json"));
        assert!(!is_traffic_source_cookie("{} trailing"));
    }

    #[test]
    fn base64_json_object_is_a_cookie_in_every_flavour() {
        let json = r#"{"first_session":{"value":"https://a.b/?x=1&y=~~~","extra_params":{}}}"#;
        for engine in [
            base64::engine::general_purpose::STANDARD,
            base64::engine::general_purpose::STANDARD_NO_PAD,
            base64::engine::general_purpose::URL_SAFE,
            base64::engine::general_purpose::URL_SAFE_NO_PAD,
        ] {
            let encoded = engine.encode(json);
            assert!(is_traffic_source_cookie(&encoded), "{encoded}");
        }
        assert!(is_traffic_source_cookie("e30="));
        assert!(is_traffic_source_cookie("e30"));
    }

    #[test]
    fn utm_sources_and_other_base64_are_not_cookies() {
        for value in [
            "google",
            "facebook",
            "email",
            "e",
            "eW91dHViZQ==",
            "W10=",
            "",
        ] {
            assert!(!is_traffic_source_cookie(value), "{value}");
        }
    }

    #[test]
    fn tags_read_back_every_string_of_a_checked_array() {
        let text = r#"[ "a" , "b\"]" ,"na\u00efve",""]"#;
        let tags: Vec<Cow<'_, str>> = Tags::new(text).collect();
        assert_eq!(tags, ["a", "b\"]", "na\u{ef}ve", ""]);
        assert!(matches!(tags[0], Cow::Borrowed("a")), "{:?}", tags[0]);
        assert_eq!(Tags::new("[]").count(), 0);
        assert_eq!(Tags::new("[ ]").count(), 0);
        // Text no scanner checked ends the iteration; it never panics.
        assert_eq!(Tags::new("not an array").count(), 0);
        assert_eq!(Tags::new(r#"["a",12,"b"]"#).count(), 1);
    }

    #[test]
    fn escapes_decode_as_the_scanner_reads_them() {
        let decoded = unescaped(r#""na\u00efve \ud83d\ude00 \n\t\/\\\u0041\"\b\f\r""#);
        assert_eq!(decoded, "na\u{ef}ve \u{1F600} \n\t/\\A\"\u{8}\u{c}\r");
        assert!(matches!(unescaped(r#""ab""#), Cow::Borrowed("ab")));
        assert_eq!(unescape(r"\u00e9\uD83D\uDE00x"), "\u{e9}\u{1F600}x");
        // Contents no scanner checked stop at the first malformed escape.
        assert_eq!(unescape(r"ok\x rest"), "ok");
        assert_eq!(unescape(r"a\ud800"), "a");
    }

    fn scan(text: &str) -> Scan<usize> {
        let mut scanner = Scanner::new(text, 0);
        let deepest = scanner.skip_value(1)?;
        scanner.finish().map(|()| deepest)
    }

    #[test]
    fn scanner_accepts_rfc_8259_json() {
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
        assert_eq!(scan("7"), Ok(0));
    }

    #[test]
    fn scanner_refuses_what_serde_json_refuses() {
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
    fn scanner_nests_as_deep_as_serde_json() {
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(scan(&nested(NESTING_LIMIT)).is_ok());
        assert!(serde_json::from_str::<Value>(&nested(NESTING_LIMIT)).is_ok());
        assert!(scan(&nested(NESTING_LIMIT + 1)).is_err());
        assert!(serde_json::from_str::<Value>(&nested(NESTING_LIMIT + 1)).is_err());
        assert!(scan(&nested(100_000)).is_err());
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
        let mut scanner = Scanner::new(json, 0);
        let string = scanner.string().map(JsonStr::decode);
        assert_eq!(scanner.position, json.len(), "{json}");
        string.unwrap_or_else(|NotJson(at)| panic!("{json}: not JSON at {at}"))
    }

    #[test]
    fn escapes_of_refused_controls_are_found_once_unescaped() {
        for refused in [
            r#""\u0000""#,
            r#""a\u0001""#,
            r#""\u001f""#,
            r#""\u001F""#,
            r#""\u000b""#,
            r#""\u000C""#,
            r#""\b""#,
            r#""x\fy""#,
            r#""\u0008""#,
        ] {
            assert!(unescaped_refused_control(&unescaped(refused)), "{refused}");
        }
        for kept in [
            r#""plain""#,
            r#""\t\n\r\u0009\u000a\u000D""#,
            r#""\u0020\u007f\u0085\u009f\"\\\/""#,
            r#""\ud83d\ude00 \u00e9\u4e2d""#,
        ] {
            assert!(!unescaped_refused_control(&unescaped(kept)), "{kept}");
        }
        // A borrowed string is never searched: it cannot hold one.
        assert!(!unescaped_refused_control(&Cow::Borrowed("a\u{0}b")));
        assert!(unescaped_refused_control(&Cow::Owned("a\u{0}b".to_owned())));
        for c in (0u8..0x20).map(char::from) {
            let refused = !matches!(c, '\t' | '\n' | '\r');
            assert_eq!(has_refused_control(&format!("é{c}")), refused, "{c:?}");
        }
        assert!(!has_refused_control(
            "\u{7f}\u{80}\u{9f}\u{fffd}\u{10ffff} "
        ));
    }

    #[test]
    fn custom_field_searches_stop_once_they_cost_a_few_passes() {
        let names: Vec<String> = (0..1000).map(|i| format!("f{i}")).collect();
        let account: Vec<&str> = names.iter().map(String::as_str).collect();
        let limits = ConversionLimits::default();
        let mut ctx = Ctx::new(&limits, &account);
        // 20,000 lookups of names the account does not have, then real ones:
        // a linear search each would compare 20 million names.
        for i in 0..20_000 {
            assert_eq!(ctx.custom_field_index(&format!("x{i}")), None);
        }
        assert!(ctx.custom_index.is_some(), "the names were never indexed");
        assert!(
            ctx.custom_compared <= 5 * account.len(),
            "{} names compared",
            ctx.custom_compared
        );
        assert_eq!(ctx.custom_field_index("f0"), Some(0));
        assert_eq!(ctx.custom_field_index("f999"), Some(999));
        // A small account is always searched, never indexed.
        let small = ["plan", "segment", "plan"];
        let mut ctx = Ctx::new(&limits, &small);
        for _ in 0..1000 {
            assert_eq!(ctx.custom_field_index("plan"), Some(0));
            assert_eq!(ctx.custom_field_index("nope"), None);
        }
        assert!(ctx.custom_index.is_none());
        // An indexed account named twice keeps the first position.
        let mut twice = account.clone();
        twice.push("f5");
        let mut ctx = Ctx::new(&limits, &twice);
        for _ in 0..10 {
            ctx.custom_field_index("nope");
        }
        assert!(ctx.custom_index.is_some());
        assert_eq!(ctx.custom_field_index("f5"), Some(5));
    }

    #[test]
    fn dropped_names_are_hashed_past_a_few() {
        let names: Vec<String> = (0..1000).map(|i| format!("n{i}")).collect();
        let limits = ConversionLimits::default();
        let mut ctx = Ctx::new(&limits, &[]);
        let mut dropped = DroppedAttributes::default();
        for (i, name) in names.iter().enumerate() {
            ctx.drop_attribute(Scope::Payload, Cow::Borrowed(name), &mut dropped);
            assert_eq!(ctx.dropped_seen.is_some(), i >= LINEAR_DROPPED, "{i}");
            // Again, and in another object: once per place.
            ctx.drop_attribute(Scope::Payload, Cow::Borrowed(name), &mut dropped);
        }
        ctx.drop_attribute(Scope::Event, Cow::Borrowed("n1"), &mut dropped);
        ctx.drop_attribute(Scope::LegalBasis(0), Cow::Borrowed("n1"), &mut dropped);
        ctx.drop_attribute(Scope::LegalBasis(1), Cow::Borrowed("n1"), &mut dropped);
        assert_eq!(dropped.count, 1003);
        assert_eq!(dropped.listed.len(), MAX_LISTED_UNKNOWN);
        let listed: Vec<&str> = dropped.listed.iter().map(|d| &*d.name).collect();
        let first: Vec<&str> = names.iter().take(100).map(String::as_str).collect();
        assert_eq!(listed, first);
    }

    #[test]
    fn length_counts_characters_not_bytes() {
        assert!(!is_too_long("ééé", 3));
        assert!(is_too_long("éééé", 3));
    }
}
