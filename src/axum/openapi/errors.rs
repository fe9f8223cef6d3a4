//! The error bodies every route shares: the service's error, the list of
//! field errors, and the answer over a rate limit.
//!
//! Schema-only mirrors of bodies the core builds with `json!`
//! (`HttpAnswer::error`, `FieldError::to_json`, `WebhookFieldError::to_json`,
//! `RateLimited`'s answer). `deny_unknown_fields` becomes
//! `additionalProperties: false`: the core never adds a member, and the
//! tests read real answers into these types, so a member added there and
//! not here fails them.

use serde::Deserialize;
use utoipa::ToSchema;

/// The service's error: what went wrong as a stable `error_type` and a
/// sentence for people.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServiceError {
    /// Stable and upper case, such as `UNAUTHORIZED`, `NOT_FOUND`,
    /// `UNSUPPORTED_MEDIA_TYPE`, `BODY_TOO_LARGE`, `BAD_REQUEST`,
    /// `IDEMPOTENCY_KEY_REUSED`, `UNPROCESSABLE_ENTITY` or
    /// `SERVICE_UNAVAILABLE`.
    pub(crate) error_type: String,
    /// In plain English; never a secret.
    pub(crate) error_message: String,
}

/// Every problem found in a body, each with its JSON path: at most 100,
/// then a `TOO_MANY_ERRORS` item giving the total.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FieldErrors {
    /// The problems, in the order found.
    #[schema(min_items = 1)]
    pub(crate) errors: Vec<FieldError>,
}

/// One problem of a body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FieldError {
    /// Such as `CANNOT_BE_NULL`, `INVALID_OPTION`, `INVALID_DATA_TYPE`,
    /// `INVALID_EMAIL_FORMAT`, `BODY_TOO_LARGE` or `TOO_MANY_ERRORS`.
    pub(crate) error_type: String,
    /// In plain English; names the field, never quotes its value.
    pub(crate) error_message: String,
    /// Where: a JSON path such as `$.payload.email` or `$[2].event_type`
    /// (`body.client_secret` on the token endpoint).
    pub(crate) path: String,
    /// The rule broken, where one names what is accepted.
    #[serde(default)]
    pub(crate) validation_rules: ValidationRules,
}

/// The rule an error broke: one of these members.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ValidationRules {
    /// The accepted values of an enumeration.
    #[serde(default)]
    pub(crate) valid_options: Vec<String>,
    /// The JSON type the field must hold.
    #[serde(default)]
    pub(crate) data_type: DataType,
    /// The most characters a string may hold.
    #[serde(default)]
    pub(crate) max_length: u64,
    /// The most elements an array may hold.
    #[serde(default)]
    pub(crate) max_items: u64,
    /// The deepest nesting allowed, the event object being 1.
    #[serde(default)]
    pub(crate) max_depth: u64,
    /// The largest body accepted, in bytes.
    #[serde(default)]
    pub(crate) max_bytes: u64,
    /// The shape a string must have, such as `uuid`.
    #[serde(default)]
    pub(crate) format: String,
    /// The field whose value forbids this one.
    #[serde(default)]
    pub(crate) conflicts_with: String,
    /// The most errors listed in one answer.
    #[serde(default)]
    pub(crate) max_errors: u64,
}

/// A JSON type, as `validation_rules.data_type` names it.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum DataType {
    /// A JSON string.
    #[default]
    String,
    /// `true` or `false`.
    Boolean,
    /// A JSON array.
    Array,
    /// A JSON object.
    Object,
}

/// A request over a rate limit: nothing of it was recorded. The service's
/// `error_type` and `error_message`, and the real service's lead limiter's
/// `error`, `max`, `usage` and `remaining_time`, which its old clients read.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RateLimitExceeded {
    /// `RATE_LIMIT_EXCEEDED`.
    #[schema(pattern = "^RATE_LIMIT_EXCEEDED$")]
    pub(crate) error_type: String,
    /// Which limit, for whom, and when to retry.
    pub(crate) error_message: String,
    /// Which limit was exceeded, and for whom.
    pub(crate) error: String,
    /// The limit's number of events per window.
    pub(crate) max: u32,
    /// Events already counted in the current window.
    pub(crate) usage: u32,
    /// Seconds until the window ends, as `Retry-After`.
    pub(crate) remaining_time: u64,
}

/// A refused body: its problems (`FieldErrors`), or one error about the
/// request as a whole (`ServiceError`: a body that could not be read, a
/// malformed query string or `Idempotency-Key`, a path that is not UTF-8).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum BadRequest {
    /// Every problem of the body.
    Fields(FieldErrors),
    /// One problem of the request.
    Request(ServiceError),
}
