//! The OpenAPI 3.1 document of every JSON route: those of
//! [`router`](crate::axum::router) and of
//! [`operations_router`](crate::axum::operations_router), served by
//! `router` at `GET /openapi.json` and kept at the repository's root as
//! `openapi.json`.
//!
//! Where each part comes from, so that it follows the code:
//!
//! - operations: a `#[utoipa::path]` on each handler (`router.rs`,
//!   `cors.rs`, `operating.rs`, and [`serve_document`] here), naming the
//!   path by the constant the router is built with;
//! - bodies: `ToSchema` derives, on the core's own types where the core
//!   serializes one (the metadata), else on schema-only mirrors of the
//!   `json!` the core builds, one file per area (`errors`, `oauth`,
//!   `intake`, `webhooks`, `operating`); the tests read real answers into
//!   these mirrors and validate them against the document;
//! - headers the service adds by rule, whichever route answers
//!   (`Retry-After` on every 503, the rate-limit fields on every 429, the
//!   challenge on every 401, CORS on the conversion route): [`ServiceRules`];
//! - security schemes: [`SecuritySchemes`].
//!
//! The list of routes the routers serve is their route table
//! ([`router_routes`](crate::axum::router_routes),
//! [`operations_routes`](crate::axum::operations_routes)); the tests fail
//! when the table and the document disagree.

// Schema-only mirrors of the bodies: the document reads their shape and
// the tests read real answers into them, but no library code reads their
// fields, which `dead_code` would otherwise flag one by one.
#[allow(dead_code)]
pub(crate) mod errors;
#[allow(dead_code)]
pub(crate) mod intake;
#[allow(dead_code)]
pub(crate) mod oauth;
#[allow(dead_code)]
pub(crate) mod operating;
#[allow(dead_code)]
pub(crate) mod webhooks;

use std::sync::OnceLock;

use ::axum::response::{IntoResponse, Response};
use http::header;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{
    ApiKey, ApiKeyValue, AuthorizationCode, Flow, HttpAuthScheme, HttpBuilder, OAuth2, Scopes,
    SecurityScheme,
};
use utoipa::openapi::{HttpMethod, RefOr};
use utoipa::{Modify, OpenApi};

use crate::axum::router::CONVERSIONS_PATH;
use crate::oauth::metadata::TOKEN_PATH;
use crate::signin::flows::DIALOG_PATH;
use intake::StatusWithConsent;
use oauth::BodyCredentialsInPairs;

/// Where [`router`](crate::axum::router) serves the document.
pub const OPENAPI_PATH: &str = "/openapi.json";

/// The service's routes, as utoipa collects them.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "conversion-gateway",
        description = "The auth and conversion-intake API of a marketing platform: OAuth 2.0 \
            tokens, revocation, introspection and metadata; conversion events by API key or \
            bearer token; webhooks; health and readiness.\n\n\
            Every answer is JSON. Errors are `{\"error_type\", \"error_message\"}` \
            (`ServiceError`), or for the problems of a body `{\"errors\": [...]}` (`FieldErrors`), \
            each item with `error_type`, `error_message`, `path` and, where a rule names what is \
            accepted, `validation_rules`; the OAuth endpoints add RFC 6749's `error` and \
            `error_description` (`OAuthError`). Every 503 carries `Retry-After`; every 401 of a \
            bearer route a `WWW-Authenticate` challenge (`error=\"expired_token\"` when the token \
            expired: refresh it).",
    ),
    paths(
        crate::axum::router::token,
        crate::axum::router::revoke,
        crate::axum::router::introspect,
        crate::axum::router::metadata,
        crate::axum::router::conversion,
        crate::axum::cors::preflight,
        crate::axum::router::event,
        crate::axum::router::batch,
        crate::axum::router::create_webhook,
        crate::axum::router::list_webhooks,
        crate::axum::router::show_webhook,
        crate::axum::router::update_webhook,
        crate::axum::router::delete_webhook,
        crate::axum::operating::healthz,
        crate::axum::operating::readyz,
        serve_document,
    ),
    components(schemas(intake::ConversionEvent, errors::ServiceError, errors::FieldErrors)),
    modifiers(
        &SecuritySchemes,
        &ServiceRules,
        &OptionalTokenBody,
        &BodyCredentialsInPairs,
        &StatusWithConsent
    ),
    tags(
        (name = "oauth", description = "Tokens (RFC 6749), revocation (RFC 7009), \
            introspection (RFC 7662) and metadata (RFC 8414)."),
        (name = "intake", description = "Conversion events: by API key from website forms, \
            by bearer token from applications."),
        (name = "webhooks", description = "An application's webhooks, which receive the \
            account's conversions (docs/webhooks.md)."),
        (name = "operations", description = "For load balancers and tools."),
    ),
)]
struct ApiDoc;

/// The document, as JSON.
///
/// The same on every call: built from the code alone, never from a
/// [`crate::GatewayConfig`] (it names no server, so a client resolves its
/// paths against the address it fetched it from).
pub fn openapi_document() -> serde_json::Value {
    serde_json::to_value(ApiDoc::openapi()).unwrap_or_default()
}

/// `GET /openapi.json`: the document, built once.
#[utoipa::path(
    get,
    path = OPENAPI_PATH,
    tag = "operations",
    operation_id = "openapi",
    summary = "This document",
    responses(
        (status = 200, description = "The OpenAPI 3.1 document of every JSON route.",
            content_type = "application/json", body = Object),
    ),
)]
pub(super) async fn serve_document() -> Response {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    let text = DOCUMENT.get_or_init(|| {
        serde_json::to_string(&openapi_document()).unwrap_or_else(|_| "{}".to_owned())
    });
    ([(header::CONTENT_TYPE, "application/json")], text.as_str()).into_response()
}

/// The security schemes the operations name.
struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        // The bearer token is what RFC 6749 section 4.1's authorization code
        // flow issues: describing it as that flow tells generated clients
        // where to send the user and where to redeem and refresh, and tells
        // tools such as Schemathesis that the token endpoint mints
        // credentials, so that a random `code` refused there is not "valid
        // data rejected".
        components.add_security_scheme(
            "bearer",
            SecurityScheme::OAuth2(OAuth2::with_description(
                [Flow::AuthorizationCode(
                    AuthorizationCode::with_refresh_url(
                        DIALOG_PATH,
                        TOKEN_PATH,
                        Scopes::new(),
                        TOKEN_PATH,
                    ),
                )],
                "An access token (`cgat_...`) from the authorization code flow (RFC 6749 \
                 section 4.1): the user approves the app at `/auth/dialog`, the app \
                 redeems the code and refreshes at `POST /auth/token`, and sends \
                 `Authorization: Bearer <token>` (RFC 6750). Access tokens last 86400 s.",
            )),
        );
        components.add_security_scheme(
            "api_key",
            SecurityScheme::ApiKey(ApiKey::Query(ApiKeyValue::with_description(
                "api_key",
                "An API key of the account (`cgak_...`), in the query string.",
            ))),
        );
        components.add_security_scheme(
            "client_basic",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Basic)
                    .description(Some(
                        "An application's `client_id` and `client_secret` with HTTP Basic \
                         (RFC 6749 section 2.3.1, percent-encoded or not). The same \
                         credentials may come in the body as `client_id` and `client_secret` \
                         instead (the operations' `{}` alternative); both may be sent if they \
                         agree.",
                    ))
                    .build(),
            ),
        );
    }
}

/// Headers the service adds by rule, whichever route answers.
struct ServiceRules;

impl ServiceRules {
    /// A header whose value is text matching `pattern`.
    fn header(pattern: &str, description: &str) -> utoipa::openapi::header::Header {
        HeaderBuilder::new()
            .schema(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(pattern)),
            )
            .description(Some(description))
            .build()
    }
}

impl Modify for ServiceRules {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let retry_after = Self::header(
            "^[0-9]+$",
            "Seconds to wait before retrying (RFC 9110 section 10.2.3).",
        );
        let challenge = Self::header(
            "^(Bearer|Basic) ",
            "On a bearer route, RFC 6750's challenge: `Bearer realm=\"...\", \
             error=\"invalid_request\"|\"invalid_token\"|\"expired_token\", \
             error_description=\"...\"` (`expired_token`: refresh the token). On the token \
             endpoint, `Basic realm=\"...\"` for refused HTTP Basic credentials, or `Bearer \
             realm=\"...\", error=\"invalid_grant\", error_description=\"...\"` for a refused \
             code or refresh token. Absent otherwise.",
        );
        let cors = [
            (
                "Access-Control-Allow-Origin",
                Self::header("^\\*$", "`*`: any website's script may read the answer."),
            ),
            (
                "Access-Control-Expose-Headers",
                Self::header("^idempotent-replayed$", "`idempotent-replayed`."),
            ),
            (
                "Vary",
                Self::header(
                    ".",
                    "`origin, access-control-request-method, access-control-request-headers`.",
                ),
            ),
        ];
        let conversion = openapi
            .paths
            .paths
            .get(CONVERSIONS_PATH)
            .and_then(|item| item.post.as_ref())
            .and_then(|operation| operation.operation_id.clone());
        for item in openapi.paths.paths.values_mut() {
            for method in [
                HttpMethod::Get,
                HttpMethod::Post,
                HttpMethod::Put,
                HttpMethod::Delete,
                HttpMethod::Options,
            ] {
                let Some(operation) = operation_mut(item, method) else {
                    continue;
                };
                let cors_route =
                    operation.operation_id.is_some() && operation.operation_id == conversion;
                for (status, response) in operation.responses.responses.iter_mut() {
                    let RefOr::T(response) = response else {
                        continue;
                    };
                    let headers = &mut response.headers;
                    match status.as_str() {
                        "401" => {
                            headers.insert("WWW-Authenticate".into(), challenge.clone());
                        }
                        "429" => {
                            headers.insert("Retry-After".into(), retry_after.clone());
                            headers.insert(
                                "RateLimit-Policy".into(),
                                Self::header(
                                    "^\"[a-z]+\";q=[0-9]+;w=[0-9]+$",
                                    "The limit exceeded: its name, quota `q` and window `w` in \
                                     seconds (draft-ietf-httpapi-ratelimit-headers).",
                                ),
                            );
                            headers.insert(
                                "RateLimit".into(),
                                Self::header(
                                    "^\"[a-z]+\";r=[0-9]+;t=[0-9]+$",
                                    "The limit's remaining quota `r` and seconds `t` until \
                                     its window ends.",
                                ),
                            );
                        }
                        "503" => {
                            headers.insert("Retry-After".into(), retry_after.clone());
                        }
                        _ => {}
                    }
                    if cors_route {
                        for (name, header) in &cors {
                            headers.insert((*name).into(), header.clone());
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;

/// The token endpoint's body is optional: HTTP Basic and a `code` in the
/// query string are a whole request, and an empty body without a
/// `Content-Type` has no parameters. (utoipa marks a body required unless
/// its type is an `Option`, which would also allow a JSON `null`, which
/// the endpoint refuses.)
struct OptionalTokenBody;

impl Modify for OptionalTokenBody {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let body = openapi
            .paths
            .paths
            .get_mut(TOKEN_PATH)
            .and_then(|item| item.post.as_mut())
            .and_then(|operation| operation.request_body.as_mut());
        if let Some(body) = body {
            body.required = Some(utoipa::openapi::Required::False);
        }
    }
}

/// The operation of `item` for `method`, if it has one.
fn operation_mut(
    item: &mut utoipa::openapi::PathItem,
    method: HttpMethod,
) -> Option<&mut utoipa::openapi::path::Operation> {
    match method {
        HttpMethod::Get => item.get.as_mut(),
        HttpMethod::Post => item.post.as_mut(),
        HttpMethod::Put => item.put.as_mut(),
        HttpMethod::Delete => item.delete.as_mut(),
        HttpMethod::Options => item.options.as_mut(),
        HttpMethod::Head => item.head.as_mut(),
        HttpMethod::Patch => item.patch.as_mut(),
        HttpMethod::Trace => item.trace.as_mut(),
    }
}
