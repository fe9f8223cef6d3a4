//! The typed event a valid body yields: [`ConversionEvent`], borrowing its
//! strings from the body, and the normalized payload it records.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::dropped::Dropped;
use super::extras::EventExtras;
use super::json_path::JsonPath;
use super::tags::Tags;
use super::text_span::{EventText, TextSpan};
use super::vocabulary::{
    CUSTOM_PREFIX, EventFamily, EventType, FIELD_NAMES, Field, LegalBasis, STRING_FIELDS, Scope,
};

/// A conversion event that passed [`validate_conversion`](crate::validate_conversion), borrowing its
/// strings from the request body.
///
/// Strings are `&str` into the body, except those that held JSON escapes
/// (`"na\u00efve"`), which were unescaped into a buffer of the event's own.
/// Attributes that are neither standard nor custom fields are not kept;
/// their paths are listed by [`ConversionEvent::unknown_attributes`].
#[derive(Clone)]
pub struct ConversionEvent<'a> {
    /// Where the strings are: the body, and the decoded ones.
    pub(super) text: EventText<'a>,
    /// The standard string fields sent, by [`Field`] discriminant
    /// ([`TextSpan::ABSENT`] when not sent or `null`).
    pub(super) strings: [TextSpan; STRING_FIELDS],
    /// Raw JSON text of `tags`, an array of strings already validated.
    pub(super) tags: Option<&'a str>,
    /// `available_for_mailing`, when sent.
    pub(super) available_for_mailing: Option<bool>,
    /// Whether `legal_bases` was sent (as an array), even empty.
    pub(super) legal_bases_present: bool,
    /// Whether `traffic_source` holds the traffic-source cookie.
    pub(super) traffic_source_is_cookie: bool,
    /// The legal bases, custom fields and dropped attributes, once the
    /// event has any.
    pub(super) extras: Option<Box<EventExtras>>,
}

// By what the event says, not where its strings sit: two events read from
// different bodies are equal when they hold the same values.
impl PartialEq for ConversionEvent<'_> {
    fn eq(&self, other: &Self) -> bool {
        (0..STRING_FIELDS).all(|index| self.string_at(index) == other.string_at(index))
            && self.tags.is_some() == other.tags.is_some()
            && self.tags().eq(other.tags())
            && self.available_for_mailing == other.available_for_mailing
            && self.legal_bases_present == other.legal_bases_present
            && self.legal_bases().eq(other.legal_bases())
            && self.custom_members().eq(other.custom_members())
            && self.dropped_members().eq(other.dropped_members())
            && self.unknown_attribute_count() == other.unknown_attribute_count()
            && self.traffic_source_is_cookie == other.traffic_source_is_cookie
    }
}

impl Eq for ConversionEvent<'_> {}

impl std::fmt::Debug for ConversionEvent<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let strings: Vec<(&str, &str)> = self.standard_strings().collect();
        let custom: Vec<(&str, &str)> = self.custom_members().collect();
        let dropped: Vec<(Scope, &str)> = self.dropped_members().collect();
        let tags: Option<Vec<Cow<'_, str>>> = self.tags.map(|_| self.tags().collect());
        let legal_bases: Vec<LegalBasis> = self.legal_bases().collect();
        f.debug_struct("ConversionEvent")
            .field("strings", &strings)
            .field("tags", &tags)
            .field("available_for_mailing", &self.available_for_mailing)
            .field("legal_bases_present", &self.legal_bases_present)
            .field("legal_bases", &legal_bases)
            .field("custom", &custom)
            .field("dropped", &dropped)
            .field("dropped_count", &self.unknown_attribute_count())
            .field("traffic_source_is_cookie", &self.traffic_source_is_cookie)
            .finish()
    }
}

/// Accessors of the optional standard string fields, one line each.
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
    /// An event with nothing read into it yet, to be read from `body`.
    pub(super) fn empty(body: &'a str) -> Self {
        ConversionEvent {
            text: EventText::new(body),
            strings: [TextSpan::ABSENT; STRING_FIELDS],
            tags: None,
            available_for_mailing: None,
            legal_bases_present: false,
            traffic_source_is_cookie: false,
            extras: None,
        }
    }

    /// The value of a standard string field, when sent.
    pub(super) fn string(&self, field: Field) -> Option<&str> {
        self.string_at(field as usize)
    }

    /// The standard string field at `index` (a [`Field`] discriminant).
    pub(super) fn string_at(&self, index: usize) -> Option<&str> {
        let span = *self.strings.get(index)?;
        span.is_present().then(|| self.text.get(span))
    }

    /// The standard string fields sent, as (name, value), in [`Field`] order.
    pub(super) fn standard_strings(&self) -> impl Iterator<Item = (&'static str, &str)> + '_ {
        (0..STRING_FIELDS)
            .filter_map(|index| Some((*FIELD_NAMES.get(index)?, self.string_at(index)?)))
    }

    /// The attributes dropped and listed, as (object, name).
    fn dropped_members(&self) -> impl Iterator<Item = (Scope, &str)> + '_ {
        (self.dropped_listed().iter()).map(|dropped| (dropped.scope, self.text.get(dropped.name)))
    }

    /// The attributes dropped and listed, as kept.
    fn dropped_listed(&self) -> &[Dropped] {
        self.extras
            .as_ref()
            .map_or(&[], |extras| &extras.dropped.listed)
    }

    /// The custom fields sent, as kept.
    fn custom_spans(&self) -> &[(TextSpan, TextSpan)] {
        self.extras.as_ref().map_or(&[], |extras| &extras.custom)
    }

    /// The legal bases sent, as kept.
    pub(super) fn legal_bases_read(&self) -> &[LegalBasis] {
        self.extras
            .as_ref()
            .map_or(&[], |extras| &extras.legal_bases)
    }

    /// Keeps a legal basis read, after those already kept.
    pub(super) fn push_legal_basis(&mut self, basis: LegalBasis) {
        EventExtras::of(&mut self.extras).legal_bases.push(basis);
    }

    /// Keeps `value` as the standard string `field`.
    pub(super) fn set_string(&mut self, field: Field, value: Cow<'a, str>) {
        let span = self.text.keep(value);
        if let Some(slot) = self.strings.get_mut(field as usize) {
            *slot = span;
        }
    }

    /// Keeps a custom field: its name with the `cf_` prefix, and its value.
    pub(super) fn push_custom(&mut self, name: Cow<'a, str>, value: Cow<'a, str>) {
        let name = self.text.keep(name);
        let value = self.text.keep(value);
        EventExtras::of(&mut self.extras).custom.push((name, value));
    }

    /// The custom fields sent, as (name with the `cf_` prefix, value).
    pub(super) fn custom_members(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + '_ {
        self.custom_spans()
            .iter()
            .map(|(name, value)| (self.text.get(*name), self.text.get(*value)))
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
        self.legal_bases_read().iter().copied()
    }

    /// The custom fields sent, as (name without the `cf_` prefix, value), in
    /// order; `null` ones are left out.
    pub fn custom_fields(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + '_ {
        self.custom_members()
            .map(|(key, value)| (key.get(CUSTOM_PREFIX.len()..).unwrap_or_default(), value))
    }

    /// The value of one custom field, by name without the `cf_` prefix.
    pub fn custom_field(&self, name: &str) -> Option<&str> {
        self.custom_fields()
            .find(|(field, _)| *field == name)
            .map(|(_, value)| value)
    }

    /// Paths of the attributes that were accepted and dropped
    /// ([`UnknownAttributes::AcceptAndDrop`](crate::UnknownAttributes::AcceptAndDrop)), relative to the event, such as
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
        self.dropped_listed().iter().map(|dropped| {
            let name = self.text.get(dropped.name);
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
        self.extras
            .as_ref()
            .map_or(0, |extras| extras.dropped.count)
    }

    /// The normalized payload to record: the standard fields sent (without the
    /// `null` ones) and the custom fields under their `cf_` names; unknown
    /// attributes are left out, and legal-basis objects keep only `category`,
    /// `type` and `status`.
    pub fn to_payload_json(&self) -> Value {
        let mut payload = Map::new();
        for (name, value) in self.standard_strings() {
            payload.insert(name.to_owned(), Value::String(value.to_owned()));
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
                .legal_bases()
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
        for (key, value) in self.custom_members() {
            payload.insert(key.to_owned(), Value::String(value.to_owned()));
        }
        Value::Object(payload)
    }
}
