//! The bodies of the event routes: the conversion event (spec.md,
//! "Conversion event"), the batch, and the receipts.
//!
//! Schema-only mirrors: the validator reads events in one pass without
//! serde, and the receipts are built with `json!`. Events and payloads are
//! open objects, as the validator is: an attribute that is neither a
//! standard field nor a custom field (`cf_<name>`) of the account is
//! accepted and dropped.

use utoipa::openapi::schema::{
    AllOfBuilder, AnyOfBuilder, ArrayBuilder, ObjectBuilder, Schema, SchemaFormat, Type,
};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{Modify, PartialSchema, ToSchema};

use serde::Deserialize;

/// Characters no stored string may hold: C0 controls but tab, line feed
/// and carriage return (`INVALID_CHARACTERS`).
const NO_CONTROLS: &str = "^[^\\u0000-\\u0008\\u000B\\u000C\\u000E-\\u001F]*$";

/// A string of the payload: at most 1024 characters, no control
/// characters but tab and line breaks.
pub(crate) struct PayloadString;

impl PartialSchema for PayloadString {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .max_length(Some(1024))
            .pattern(Some(NO_CONTROLS))
            .into()
    }
}

impl ToSchema for PayloadString {}

/// A required string of the payload: a [`PayloadString`] that is not blank.
pub(crate) struct RequiredString;

impl PartialSchema for RequiredString {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(1024))
            .pattern(Some(Self::pattern()))
            .into()
    }
}

impl ToSchema for RequiredString {}

impl RequiredString {
    /// No control character but tab and line breaks, and one character
    /// that is not white space (`char::is_whitespace`; ECMA-262's `\s` is
    /// another set: it holds U+FEFF and not U+0085).
    pub(crate) fn pattern() -> &'static str {
        static PATTERN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        PATTERN.get_or_init(|| visible_text_pattern(""))
    }
}

/// A string without refused control characters, with at least one
/// character that is neither white space nor control, and none of
/// `excluded` (a character class body).
fn visible_text_pattern(excluded: &str) -> String {
    let space = char_class(char::is_whitespace);
    let allowed = format!("[^{excluded}\\u0000-\\u0008\\u000B\\u000C\\u000E-\\u001F]");
    let visible = format!("[^{space}{excluded}\\u0000-\\u001F]");
    format!("^{allowed}*{visible}{allowed}*$")
}

/// A conversion with only its required fields, for the document's
/// examples of the single-event routes. (Neither the event's schema nor the
/// batch has one: Schemathesis builds its longest-batch case, 1,001 events,
/// from them, and 1,001 events of that size pass the 200 KiB body limit,
/// answered 413 before the count is read.)
pub(crate) fn minimal_conversion(email: &str) -> serde_json::Value {
    serde_json::json!({
        "event_type": "CONVERSION",
        "event_family": "CDP",
        "payload": { "conversion_identifier": "newsletter-signup", "email": email }
    })
}

/// A conversion event: recorded each time a conversion occurs.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct ConversionEvent {
    /// `CONVERSION`, the only type accepted.
    pub(crate) event_type: EventType,
    /// `CDP`, the only family accepted.
    pub(crate) event_family: EventFamily,
    /// The contact and the conversion.
    pub(crate) payload: ConversionPayload,
}

/// The only event type accepted.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub(crate) enum EventType {
    /// A conversion.
    Conversion,
}

/// The only event family accepted.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub(crate) enum EventFamily {
    /// The only family.
    Cdp,
}

/// The contact and the conversion. Every custom field of the account is
/// accepted as a string under its name prefixed with `cf_`; other members
/// are accepted and dropped.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct ConversionPayload {
    /// The name of the conversion.
    #[schema(value_type = RequiredString)]
    pub(crate) conversion_identifier: String,
    /// The contact's e-mail: at most 254 bytes, a local part of 1 to 64,
    /// a domain with a dot.
    #[schema(format = Email, max_length = 254)]
    pub(crate) email: String,
    /// The contact's name.
    #[schema(value_type = Option<PayloadString>)]
    pub(crate) name: Option<String>,
    /// The contact's job title.
    #[schema(value_type = Option<PayloadString>)]
    pub(crate) job_title: Option<String>,
    /// The contact's state.
    #[schema(value_type = Option<PayloadString>)]
    pub(crate) state: Option<String>,
    /// The contact's city.
    #[schema(value_type = Option<PayloadString>)]
    pub(crate) city: Option<String>,
    /// The contact's country.
    #[schema(value_type = Option<PayloadString>)]
    pub(crate) country: Option<String>,
    /// The contact's phone.
    #[schema(value_type = Option<PayloadString>)]
    pub(crate) personal_phone: Option<String>,
    /// The contact's mobile phone.
    #[schema(value_type = Option<PayloadString>)]
    pub(crate) mobile_phone: Option<String>,
    /// The contact's Twitter handle.
    #[schema(value_type = Option<PayloadString>)]
    pub(crate) twitter: Option<String>,
    /// The contact's Facebook name.
    #[schema(value_type = Option<PayloadString>)]
    pub(crate) facebook: Option<String>,
    /// The contact's LinkedIn name.
    #[schema(value_type = Option<PayloadString>)]
    pub(crate) linkedin: Option<String>,
    /// The contact's website.
    #[schema(value_type = Option<PayloadString>)]
    pub(crate) website: Option<String>,
    /// The contact's company.
    #[schema(value_type = Option<PayloadString>)]
    pub(crate) company_name: Option<String>,
    /// The company's website.
    #[schema(value_type = Option<PayloadString>)]
    pub(crate) company_site: Option<String>,
    /// The company's address.
    #[schema(value_type = Option<PayloadString>)]
    pub(crate) company_address: Option<String>,
    /// The visitor-tracking cookie's value.
    #[schema(value_type = Option<TrackingId>)]
    pub(crate) client_tracking_id: Option<String>,
    /// The traffic-source cookie's value (JSON, raw or base64; then the
    /// other `traffic_` fields must be empty), or a UTM source; at most
    /// 4096 characters.
    #[schema(
        max_length = 4096,
        pattern = "^[^\\u0000-\\u0008\\u000B\\u000C\\u000E-\\u001F]*$"
    )]
    pub(crate) traffic_source: Option<String>,
    /// The UTM medium.
    #[schema(value_type = Option<PayloadString>)]
    pub(crate) traffic_medium: Option<String>,
    /// The UTM campaign.
    #[schema(value_type = Option<PayloadString>)]
    pub(crate) traffic_campaign: Option<String>,
    /// The UTM term.
    #[schema(value_type = Option<PayloadString>)]
    pub(crate) traffic_value: Option<String>,
    /// Tags added to the contact: lowercase, unique, not blank, at most 255
    /// characters each, at most 50.
    #[schema(max_items = 50, value_type = Option<std::collections::BTreeSet<Tag>>)]
    pub(crate) tags: Option<Vec<String>>,
    /// Whether the contact receives e-mails.
    pub(crate) available_for_mailing: Option<bool>,
    /// The contact's legal bases, at most 10.
    #[schema(max_items = 10)]
    pub(crate) legal_bases: Option<Vec<LegalBasis>>,
}

/// A tag: lowercase, not blank, at most 255 characters.
pub(crate) struct Tag;

/// The characters for which `holds` is true, as the body of a regex
/// character class: every run of them, read from Rust's own tables, so the
/// document and the validator cannot disagree. Listed rather than written
/// as a Unicode property (`\p{Lu}`): not every regex engine that reads the
/// document has them (Schemathesis's generator approximates `\p{Lu}` with
/// a few Latin ranges). Characters of the Basic Multilingual Plane are
/// escaped (`\u00C0`); the others are written as themselves, which engines
/// without `\u{...}` read too.
pub(super) fn char_class(holds: impl Fn(char) -> bool) -> String {
    fn write(class: &mut String, c: char) {
        if u32::from(c) <= 0xFFFF {
            class.push_str(&format!("\\u{:04X}", u32::from(c)));
        } else {
            class.push(c);
        }
    }
    let mut class = String::new();
    let mut run: Option<(char, char)> = None;
    let chars = (0..=u32::from(char::MAX)).filter_map(char::from_u32);
    for c in chars.map(Some).chain(std::iter::once(None)) {
        let held = c.filter(|&c| holds(c));
        match (run, held) {
            (Some((first, last)), Some(c)) if u32::from(c) == u32::from(last) + 1 => {
                run = Some((first, c));
            }
            _ => {
                if let Some((first, last)) = run.take() {
                    write(&mut class, first);
                    if last != first {
                        class.push('-');
                        write(&mut class, last);
                    }
                }
                run = held.map(|c| (c, c));
            }
        }
    }
    class
}

/// A control character the validator refuses in a string
/// (`INVALID_CHARACTERS`): C0 but tab, line feed and carriage return.
fn refused_control(c: char) -> bool {
    c < ' ' && !matches!(c, '\t' | '\n' | '\r')
}

/// The visitor-tracking cookie's value: a UUID, or blank (what a form
/// sends when the visitor had no cookie, taken as not sent).
pub(crate) struct TrackingId;

impl TrackingId {
    /// A blank value: white space only (`char::is_whitespace`), without
    /// the control characters refused in any string.
    pub(crate) fn blank_pattern() -> &'static str {
        static PATTERN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        PATTERN.get_or_init(|| {
            let blank = char_class(|c| c.is_whitespace() && !refused_control(c));
            format!("^[{blank}]*$")
        })
    }
}

impl PartialSchema for TrackingId {
    fn schema() -> RefOr<Schema> {
        AnyOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .format(Some(SchemaFormat::Custom("uuid".to_owned()))),
            )
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(Self::blank_pattern())),
            )
            .item(ObjectBuilder::new().schema_type(Type::Null))
            .description(Some(
                "A UUID (8-4-4-4-12 hexadecimal digits), or blank: taken as not sent.",
            ))
            .into()
    }
}

impl ToSchema for TrackingId {}

impl Tag {
    /// The pattern of a tag: no uppercase character, no control character
    /// but tab and line breaks, and one character that is not blank.
    pub(crate) fn pattern() -> &'static str {
        static PATTERN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        PATTERN.get_or_init(|| visible_text_pattern(&char_class(char::is_uppercase)))
    }
}

impl PartialSchema for Tag {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(
                "Lowercase (no uppercase letter of any script), not blank, unique in its \
                 list, at most 255 characters.",
            ))
            .min_length(Some(1))
            .max_length(Some(255))
            .pattern(Some(Self::pattern()))
            .into()
    }
}

impl ToSchema for Tag {}

/// A legal basis of the contact; `status` is required with type
/// `consent`.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct LegalBasis {
    /// What it covers.
    pub(crate) category: LegalBasisCategory,
    /// Its ground.
    #[serde(rename = "type")]
    pub(crate) kind: LegalBasisType,
    /// Whether it was granted.
    pub(crate) status: Option<LegalBasisStatus>,
}

/// The category of a legal basis.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum LegalBasisCategory {
    /// Receiving e-mails and other messages.
    Communications,
    /// Processing the contact's data.
    DataProcessing,
}

/// The ground of a legal basis.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum LegalBasisType {
    /// Consent; `status` is then required.
    Consent,
    /// An existing contract.
    PreExistentContract,
    /// Legitimate interest.
    LegitimateInterest,
    /// A judicial process.
    JudicialProcess,
    /// Vital interest.
    VitalInterest,
    /// Public interest.
    PublicInterest,
}

/// The status of a legal basis.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum LegalBasisStatus {
    /// Granted.
    Granted,
    /// Declined.
    Declined,
}

/// A batch: 1 to 1000 events, recorded all or nothing.
pub(crate) struct ConversionBatch;

impl PartialSchema for ConversionBatch {
    fn schema() -> RefOr<Schema> {
        ArrayBuilder::new()
            .items(Ref::from_schema_name("ConversionEvent"))
            .min_items(Some(1))
            .max_items(Some(1000))
            .into()
    }
}

impl ToSchema for ConversionBatch {}

/// The event recorded (or, for a retry with the same `Idempotency-Key`,
/// recorded before).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventRecorded {
    /// The event's identifier.
    #[schema(format = "uuid")]
    pub(crate) event_uuid: String,
}

/// The batch recorded: its identifier, and each event's in request order.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchRecorded {
    /// The batch's identifier.
    #[schema(format = "uuid")]
    pub(crate) event_batch_uuid: String,
    /// One per event, in request order.
    pub(crate) events: Vec<EventRecorded>,
}

/// `status` is required (and not `null`) when a legal basis's `type` is
/// `consent`, and only then: without it a consent would record neither a
/// grant nor a refusal (`CANNOT_BE_NULL` on `status`). The derive cannot say
/// "required if", so `LegalBasis` becomes `allOf: [its fields, anyOf:
/// [a type other than consent, a status]]`, the other types read from
/// `LegalBasisType` itself so that the two cannot drift.
pub(crate) struct StatusWithConsent;

impl Modify for StatusWithConsent {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let Some(components) = openapi.components.as_mut() else {
            return;
        };
        let other_types: Vec<serde_json::Value> = match components.schemas.get("LegalBasisType") {
            Some(RefOr::T(Schema::Object(kinds))) => kinds
                .enum_values
                .iter()
                .flatten()
                .filter(|kind| kind.as_str() != Some("consent"))
                .cloned()
                .collect(),
            _ => return,
        };
        let Some(fields) = components.schemas.remove("LegalBasis") else {
            return;
        };
        let not_consent = ObjectBuilder::new().property(
            "type",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(other_types))
                .description(Some("A type other than `consent`.")),
        );
        let with_status = ObjectBuilder::new()
            .property("status", Ref::from_schema_name("LegalBasisStatus"))
            .required("status");
        let basis = AllOfBuilder::new()
            .item(fields)
            .item(AnyOfBuilder::new().item(not_consent).item(with_status));
        components
            .schemas
            .insert("LegalBasis".to_owned(), basis.into());
    }
}
