//! The bodies of the token, revocation and introspection endpoints
//! (the metadata's schema is derived on `AuthorizationServerMetadata`
//! itself).
//!
//! Schema-only mirrors: the core reads these requests into a map of
//! strings (`Params`) and builds these answers with `json!`. Each request
//! comes as JSON or as a form; in JSON a member that is `null` counts as
//! absent and any other member must be a string (else `400
//! INVALID_DATA_TYPE`), in a form an empty value counts as absent.

use std::collections::BTreeMap;

use serde::Deserialize;
use utoipa::openapi::schema::{
    AllOfBuilder, AnyOfBuilder, ObjectBuilder, Schema, SchemaType, Type,
};
use utoipa::{Modify, ToSchema};

use crate::axum::openapi::errors::{FieldError, ServiceError, ValidationRules};

/// The grants the token endpoint serves.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum GrantType {
    /// Exchange a code (RFC 6749 section 4.1.3).
    AuthorizationCode,
    /// Refresh (RFC 6749 section 6).
    RefreshToken,
}

/// A token request as JSON, as the real service documents it: `code` for
/// an exchange, `refresh_token` for a refresh (`grant_type` may say which,
/// and must then agree). The client's credentials are `client_id` and
/// `client_secret` here or HTTP Basic (both may be sent if they agree).
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct TokenRequestJson {
    /// Which grant; without it, the body's `code` or `refresh_token` says.
    pub(crate) grant_type: Option<GrantType>,
    /// The authorization code to exchange (or in the query string).
    pub(crate) code: Option<String>,
    /// The redirect URI the code was issued for, if the dialog had one.
    pub(crate) redirect_uri: Option<String>,
    /// PKCE's verifier (RFC 7636), for a code issued with a challenge.
    pub(crate) code_verifier: Option<String>,
    /// The refresh token to use.
    pub(crate) refresh_token: Option<String>,
    /// The application's id, unless sent with HTTP Basic.
    pub(crate) client_id: Option<String>,
    /// The application's secret, unless sent with HTTP Basic.
    pub(crate) client_secret: Option<String>,
    /// Other members are ignored, but must be strings or `null`.
    #[serde(flatten)]
    pub(crate) other: BTreeMap<String, Option<String>>,
}

/// A token request as a form (RFC 6749 section 4.1.3), as standard OAuth
/// clients send it: the members of [`TokenRequestJson`].
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct TokenRequestForm {
    /// Which grant; without it, the body's `code` or `refresh_token` says.
    #[serde(default)]
    #[schema(nullable = false)]
    pub(crate) grant_type: Option<GrantType>,
    /// The authorization code to exchange (or in the query string).
    #[serde(default)]
    pub(crate) code: String,
    /// The redirect URI the code was issued for, if the dialog had one.
    #[serde(default)]
    pub(crate) redirect_uri: String,
    /// PKCE's verifier (RFC 7636), for a code issued with a challenge.
    #[serde(default)]
    pub(crate) code_verifier: String,
    /// The refresh token to use.
    #[serde(default)]
    pub(crate) refresh_token: String,
    /// The application's id, unless sent with HTTP Basic.
    #[serde(default)]
    pub(crate) client_id: String,
    /// The application's secret, unless sent with HTTP Basic.
    #[serde(default)]
    pub(crate) client_secret: String,
    /// Other fields are ignored.
    #[serde(flatten)]
    pub(crate) other: BTreeMap<String, String>,
}

/// Tokens: `200` of the token endpoint, never cached.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TokenIssued {
    /// The bearer credential of API calls (`Authorization: Bearer ...`).
    #[schema(pattern = "^cgat_")]
    pub(crate) access_token: String,
    /// The refresh token to use next.
    #[schema(pattern = "^cgrt_")]
    pub(crate) refresh_token: String,
    /// The access token's lifetime in seconds (86400 by default).
    pub(crate) expires_in: i64,
    /// `Bearer` (RFC 6750), which standard clients require.
    pub(crate) token_type: BearerTokenType,
}

/// The type of an access token.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) enum BearerTokenType {
    /// RFC 6750's bearer token.
    Bearer,
}

/// A refused token, revocation or introspection request: the service's
/// `error_type` and `error_message` for the real service's clients, RFC
/// 6749 section 5.2's `error` and `error_description` for standard ones,
/// the offending parameter's `path` and rule where there is one, and for a
/// missing parameter the real service's list, `errors`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OAuthError {
    /// Such as `CANNOT_BE_NULL`, `ACCESS_DENIED`, `EXPIRED_CODE_GRANT` or
    /// `INVALID_REFRESH_TOKEN`.
    pub(crate) error_type: String,
    /// In plain English; never a secret.
    pub(crate) error_message: String,
    /// RFC 6749 section 5.2's error code.
    pub(crate) error: OAuthErrorCode,
    /// The same text as `error_message`.
    pub(crate) error_description: String,
    /// The offending parameter, such as `body.client_secret`.
    #[serde(default)]
    pub(crate) path: String,
    /// The rule broken: `data_type` or `valid_options`.
    #[serde(default)]
    pub(crate) validation_rules: ValidationRules,
    /// For a missing parameter: the real service's list, one
    /// `CANNOT_BE_NULL` item.
    #[serde(default)]
    #[schema(min_items = 1)]
    pub(crate) errors: Vec<FieldError>,
}

/// RFC 6749 section 5.2's error codes the service answers.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum OAuthErrorCode {
    /// A parameter missing, repeated, of the wrong type or conflicting, or
    /// a body that cannot be read as its content type.
    InvalidRequest,
    /// A `grant_type` the endpoint does not serve.
    UnsupportedGrantType,
    /// Client authentication failed.
    InvalidClient,
    /// The code or refresh token is invalid, used, expired or revoked.
    InvalidGrant,
}

/// Which kind of token a request names, to be looked up first.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum TokenTypeHint {
    /// An access token.
    AccessToken,
    /// A refresh token.
    RefreshToken,
}

/// A token to revoke (RFC 7009) or introspect (RFC 7662), as JSON. The
/// caller's credentials are `client_id` and `client_secret` here or HTTP
/// Basic (or, to revoke, an access token of the application as Bearer).
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct TokenReferenceJson {
    /// The access or refresh token.
    #[schema(min_length = 1)]
    pub(crate) token: String,
    /// Where to look first; other values are ignored (RFC 7009 section
    /// 2.1), and the other kind is searched too.
    pub(crate) token_type_hint: Option<String>,
    /// The caller's id, unless sent with HTTP Basic.
    pub(crate) client_id: Option<String>,
    /// The caller's secret, unless sent with HTTP Basic.
    pub(crate) client_secret: Option<String>,
    /// Other members are ignored, but must be strings or `null`.
    #[serde(flatten)]
    pub(crate) other: BTreeMap<String, Option<String>>,
}

/// A token to revoke (RFC 7009) or introspect (RFC 7662), as a form, as
/// those RFCs send it: the fields of [`TokenReferenceJson`].
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct TokenReferenceForm {
    /// The access or refresh token.
    #[schema(min_length = 1)]
    pub(crate) token: String,
    /// Where to look first (`access_token` or `refresh_token`); other
    /// values are ignored.
    #[serde(default)]
    pub(crate) token_type_hint: String,
    /// The caller's id, unless sent with HTTP Basic.
    #[serde(default)]
    pub(crate) client_id: String,
    /// The caller's secret, unless sent with HTTP Basic.
    #[serde(default)]
    pub(crate) client_secret: String,
    /// Other fields are ignored.
    #[serde(flatten)]
    pub(crate) other: BTreeMap<String, String>,
}

/// `{}`: the revocation was accepted, whether or not the token existed
/// (RFC 7009 section 2.2).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Revoked {}

/// RFC 7662 section 2.2's answer: `{"active": false}` alone for a token
/// that is unknown, expired, revoked or not the caller's to see; the
/// token's facts when it is active.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Introspection {
    /// Whether the token is usable now.
    pub(crate) active: bool,
    /// The application it was issued to.
    #[serde(default)]
    pub(crate) client_id: String,
    /// Its kind.
    #[serde(default)]
    #[schema(nullable = false)]
    pub(crate) token_type: Option<IntrospectedType>,
    /// When it expires, in Unix seconds; absent for a refresh token without
    /// expiry.
    #[serde(default)]
    pub(crate) exp: i64,
    /// When it was issued, in Unix seconds.
    #[serde(default)]
    pub(crate) iat: i64,
    /// The account it acts on.
    #[serde(default)]
    #[schema(format = "uuid")]
    pub(crate) sub: String,
    /// Its grant.
    #[serde(default)]
    #[schema(format = "uuid")]
    pub(crate) grant_id: String,
}

/// The kind of an introspected token.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) enum IntrospectedType {
    /// An access token.
    Bearer,
    /// A refresh token.
    #[serde(rename = "refresh_token")]
    RefreshToken,
}

/// A refused OAuth request: RFC 6749's and the service's vocabularies
/// (`OAuthError`); or the service's error alone (`ServiceError`) for a body
/// that could not be read, or, at the revocation endpoint, a refused
/// bearer token.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum OAuthRefusal {
    /// Both vocabularies.
    OAuth(OAuthError),
    /// The service's alone.
    Service(ServiceError),
}

/// The request bodies that may carry a client's credentials.
const CREDENTIAL_BODIES: [&str; 4] = [
    "TokenRequestJson",
    "TokenRequestForm",
    "TokenReferenceJson",
    "TokenReferenceForm",
];

/// `client_id` and `client_secret` in a body come together or not at all:
/// one without the other is `400 CANNOT_BE_NULL` on the missing one
/// (`COMPAT.md`, a required field missing), where an empty value or a JSON
/// `null` counts as absent (RFC 6749 section 3.1). Each such body becomes
/// `allOf: [its fields, anyOf: [both given, neither given]]`; "neither"
/// is spelled with `maxLength: 0`, since utoipa has no `not`. (With HTTP
/// Basic a `client_id` alone that names the same client is accepted too;
/// the document asks for the pair, which every client may send.)
pub(crate) struct BodyCredentialsInPairs;

impl BodyCredentialsInPairs {
    /// An object whose `client_id` and `client_secret` are both `given`
    /// (non-empty strings) or both absent, empty or `null`.
    fn pair(given: bool) -> Schema {
        let value = |name: &str| {
            if given {
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .min_length(Some(1))
                    .description(Some(format!("A non-empty `{name}`.")))
            } else {
                ObjectBuilder::new()
                    .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
                    .max_length(Some(0))
                    .description(Some(format!("No `{name}`: absent, empty or `null`.")))
            }
        };
        let mut object = ObjectBuilder::new()
            .property("client_id", value("client_id"))
            .property("client_secret", value("client_secret"));
        if given {
            object = object.required("client_id").required("client_secret");
        }
        object.into()
    }
}

impl Modify for BodyCredentialsInPairs {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let Some(components) = openapi.components.as_mut() else {
            return;
        };
        for name in CREDENTIAL_BODIES {
            let Some(fields) = components.schemas.remove(name) else {
                continue;
            };
            let pairs = AnyOfBuilder::new()
                .item(Self::pair(true))
                .item(Self::pair(false));
            let body = AllOfBuilder::new().item(fields).item(pairs);
            components.schemas.insert(name.to_owned(), body.into());
        }
    }
}
