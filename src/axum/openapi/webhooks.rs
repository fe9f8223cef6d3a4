//! The bodies of `/integrations/webhooks` (docs/webhooks.md).
//!
//! Schema-only mirrors: the registration body is read from a JSON value
//! field by field (`read_spec`), and webhooks are answered with `json!`
//! (`WebhookView::to_json`). A registration is an open object (other
//! members are ignored); the answers are closed.

use serde::Deserialize;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

/// What a webhook is called for.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) enum WebhookEventType {
    /// A contact converted. (`WEBHOOK.MARKED_OPPORTUNITY`, the real
    /// service's other type, is refused until the platform has
    /// opportunities.)
    #[serde(rename = "WEBHOOK.CONVERTED")]
    Converted,
}

/// What a webhook delivers: contacts.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub(crate) enum EntityType {
    /// A contact per delivery.
    Contact,
}

/// How a delivery is sent.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub(crate) enum HttpMethod {
    /// The only method.
    Post,
}

/// What a delivery carries beside the contact.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub(crate) enum WebhookRelation {
    /// The contact's company.
    Company,
    /// The contact's funnel stage (accepted; adds nothing yet).
    ContactFunnel,
}

/// Whether a webhook is called.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WebhookStatus {
    /// Deliveries are made.
    Active,
    /// Switched off: new conversions are not delivered.
    Inactive,
}

/// A webhook to register. Before it is stored, the URL gets a signed
/// validation call that must answer 2xx within 5 s.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(examples(json!({
    "event_type": "WEBHOOK.CONVERTED",
    "entity_type": "CONTACT",
    "url": "https://hooks.example.com/conversions",
    "http_method": "POST",
    "event_identifiers": ["newsletter-signup"],
    "include_relations": ["COMPANY"]
})))]
pub(crate) struct WebhookRegistration {
    /// What it is called for.
    pub(crate) event_type: WebhookEventType,
    /// `CONTACT`.
    pub(crate) entity_type: EntityType,
    /// Where deliveries are POSTed: `https`, to a host whose addresses are
    /// all public (unless the service allows private ones).
    #[schema(format = "uri")]
    pub(crate) url: String,
    /// `POST`.
    pub(crate) http_method: HttpMethod,
    /// The conversion identifiers to deliver, at most 100; empty or absent:
    /// every conversion.
    #[schema(max_items = 100, value_type = Option<Vec<EventIdentifier>>)]
    pub(crate) event_identifiers: Option<Vec<String>>,
    /// What deliveries carry beside the contact.
    pub(crate) include_relations: Option<Vec<WebhookRelation>>,
}

/// A webhook's new values: the fields of a registration, each optional (a
/// field left out keeps its value), and its `status`. A new `url` gets the
/// validation call first.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct WebhookUpdate {
    /// What it is called for.
    #[serde(default)]
    #[schema(nullable = false)]
    pub(crate) event_type: Option<WebhookEventType>,
    /// `CONTACT`.
    #[serde(default)]
    #[schema(nullable = false)]
    pub(crate) entity_type: Option<EntityType>,
    /// Where deliveries are POSTed.
    #[serde(default)]
    #[schema(format = "uri", nullable = false)]
    pub(crate) url: Option<String>,
    /// `POST`.
    #[serde(default)]
    #[schema(nullable = false)]
    pub(crate) http_method: Option<HttpMethod>,
    /// The conversion identifiers to deliver, at most 100; empty or `null`:
    /// every conversion.
    #[schema(max_items = 100, value_type = Option<Vec<EventIdentifier>>)]
    pub(crate) event_identifiers: Option<Vec<String>>,
    /// What deliveries carry beside the contact.
    pub(crate) include_relations: Option<Vec<WebhookRelation>>,
    /// Switches the webhook on (its waiting deliveries go out) or off.
    pub(crate) status: Option<WebhookStatus>,
}

/// A conversion identifier a webhook delivers: not blank, at most 255
/// characters.
pub(crate) struct EventIdentifier;

impl PartialSchema for EventIdentifier {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(255))
            .pattern(Some(Self::pattern()))
            .into()
    }
}

impl ToSchema for EventIdentifier {}

impl EventIdentifier {
    /// One character that is not white space by Rust's `char::is_whitespace`,
    /// what the registration's `str::trim` removes. Not ECMA-262's `\S`: its
    /// white space holds U+FEFF and not U+0085 (NEL), so a fuzzer took
    /// `"\u0085"` for an identifier the service then refused as blank.
    pub(crate) fn pattern() -> &'static str {
        static PATTERN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        PATTERN.get_or_init(|| format!("[^{}]", super::intake::char_class(char::is_whitespace)))
    }
}

/// A webhook, never with its secret.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Webhook {
    /// Its identifier.
    #[schema(format = "uuid")]
    pub(crate) uuid: String,
    /// What it is called for.
    pub(crate) event_type: WebhookEventType,
    /// `CONTACT`.
    pub(crate) entity_type: EntityType,
    /// Where deliveries are POSTed.
    pub(crate) url: String,
    /// `POST`.
    pub(crate) http_method: HttpMethod,
    /// The conversion identifiers delivered; empty: every conversion.
    pub(crate) event_identifiers: Vec<String>,
    /// What deliveries carry beside the contact.
    pub(crate) include_relations: Vec<WebhookRelation>,
    /// Whether it is called.
    pub(crate) status: WebhookStatus,
    /// When it was registered (RFC 3339).
    #[schema(format = DateTime)]
    pub(crate) created_at: String,
    /// When it was last changed (RFC 3339).
    #[schema(format = DateTime)]
    pub(crate) updated_at: String,
}

/// A webhook just registered, with its signing secret: shown this once.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WebhookCreated {
    /// Its identifier.
    #[schema(format = "uuid")]
    pub(crate) uuid: String,
    /// What it is called for.
    pub(crate) event_type: WebhookEventType,
    /// `CONTACT`.
    pub(crate) entity_type: EntityType,
    /// Where deliveries are POSTed.
    pub(crate) url: String,
    /// `POST`.
    pub(crate) http_method: HttpMethod,
    /// The conversion identifiers delivered; empty: every conversion.
    pub(crate) event_identifiers: Vec<String>,
    /// What deliveries carry beside the contact.
    pub(crate) include_relations: Vec<WebhookRelation>,
    /// Whether it is called.
    pub(crate) status: WebhookStatus,
    /// When it was registered (RFC 3339).
    #[schema(format = DateTime)]
    pub(crate) created_at: String,
    /// When it was last changed (RFC 3339).
    #[schema(format = DateTime)]
    pub(crate) updated_at: String,
    /// The Standard Webhooks signing secret of its deliveries.
    #[schema(pattern = "^whsec_")]
    pub(crate) secret: String,
}

/// A webhook with its last attempts.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WebhookDetail {
    /// Its identifier.
    #[schema(format = "uuid")]
    pub(crate) uuid: String,
    /// What it is called for.
    pub(crate) event_type: WebhookEventType,
    /// `CONTACT`.
    pub(crate) entity_type: EntityType,
    /// Where deliveries are POSTed.
    pub(crate) url: String,
    /// `POST`.
    pub(crate) http_method: HttpMethod,
    /// The conversion identifiers delivered; empty: every conversion.
    pub(crate) event_identifiers: Vec<String>,
    /// What deliveries carry beside the contact.
    pub(crate) include_relations: Vec<WebhookRelation>,
    /// Whether it is called.
    pub(crate) status: WebhookStatus,
    /// When it was registered (RFC 3339).
    #[schema(format = DateTime)]
    pub(crate) created_at: String,
    /// When it was last changed (RFC 3339).
    #[schema(format = DateTime)]
    pub(crate) updated_at: String,
    /// Its last 10 attempts, newest first, without bodies.
    #[schema(max_items = 10)]
    pub(crate) last_attempts: Vec<Attempt>,
}

/// One attempt at a delivery.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Attempt {
    /// When it started (RFC 3339).
    #[schema(format = DateTime)]
    pub(crate) at: String,
    /// The receiver's status code, if it answered.
    #[schema(required = true)]
    pub(crate) status: Option<u16>,
    /// Why it failed (`timeout`, `redirect`, `status 500`, ...), if it did.
    #[schema(required = true)]
    pub(crate) error: Option<String>,
    /// How long it took, in milliseconds.
    pub(crate) duration_ms: u64,
}

/// The calling application's webhooks for its account, oldest first.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WebhookList {
    /// The webhooks, without secrets.
    pub(crate) webhooks: Vec<Webhook>,
}
