//! Every JSON route of the service as one axum router, built from one
//! table of routes, each handler with its OpenAPI description.

use std::sync::Arc;
use std::time::Duration;

use ::axum::Router;
use ::axum::extract::{Path, State};
use ::axum::response::{IntoResponse as _, Response};
use http::{Method, StatusCode};
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;

use crate::answer::{HttpAnswer, ToHttpAnswer};
use crate::axum::cors;
use crate::axum::extract::{EventRequest, OAuthRequest, WebhookRequest};
use crate::axum::openapi::{self, OPENAPI_PATH, serve_document};
use crate::axum::request_timeout::RequestTimeoutLayer;
use crate::axum::respond::{panic_as_json, plain_errors_as_json};
use crate::axum::route_table::{self, Route};
use crate::gateway::Gateway;
use crate::oauth::metadata::{INTROSPECTION_PATH, METADATA_PATH, REVOCATION_PATH, TOKEN_PATH};

/// The webhook routes' collection: `GET` lists, `POST` registers;
/// `{WEBHOOKS_PATH}/{uuid}` reads, replaces and deletes one.
pub const WEBHOOKS_PATH: &str = "/integrations/webhooks";

/// One webhook: `GET` reads, `PUT` replaces, `DELETE` deletes.
pub(crate) const WEBHOOK_PATH: &str = "/integrations/webhooks/{uuid}";

/// Conversions from website forms, by API key (with CORS).
pub(crate) const CONVERSIONS_PATH: &str = "/platform/conversions";

/// One event from an application, by bearer token.
pub(crate) const EVENTS_PATH: &str = "/platform/events";

/// A batch of events from an application, by bearer token.
pub(crate) const EVENT_BATCH_PATH: &str = "/platform/events/batch";

/// How long one request may take before it is answered 503 with
/// `Retry-After`, counted from when its handler first waits (one answered
/// without waiting costs no timer); it also bounds how long a graceful
/// shutdown waits.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The token, revocation, introspection, metadata, event and webhook
/// routes, on `gateway`, and the OpenAPI document of every JSON route at
/// `GET /openapi.json` ([`openapi_document`](crate::axum::openapi_document)).
///
/// Generic over the state `S` of the host's router, so that it merges into
/// it (`host_routes.merge(router(gateway))`). A failure the client is told
/// only "503" about is logged (`tracing`, level error) with its causes.
pub fn router<S: Clone + Send + Sync + 'static>(gateway: Arc<Gateway>) -> Router<S> {
    route_table::build(routes())
        .fallback(not_found)
        // One layer of three: axum wraps each route once per `layer` call,
        // and every wrapper clones and boxes the route again for each
        // request. Outermost first: a panic's 500, then the JSON rewrite of
        // error answers axum and tower make themselves (the timeout's 503
        // included), then the timeout.
        .layer(
            ServiceBuilder::new()
                .layer(CatchPanicLayer::custom(panic_as_json))
                .map_response(plain_errors_as_json)
                .layer(RequestTimeoutLayer::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    REQUEST_TIMEOUT,
                )),
        )
        .with_state(gateway)
}

/// The method and path of every route [`router`] serves, in the order it
/// adds them (a `GET` route also answers `HEAD`). The OpenAPI document
/// lists exactly these, with those of
/// [`operations_routes`](crate::axum::operations_routes).
pub fn router_routes() -> Vec<(Method, &'static str)> {
    route_table::listing(&routes())
}

/// The table [`router`] is built from and [`router_routes`] lists: a route
/// is added here, and nowhere else.
fn routes() -> Vec<Route<Arc<Gateway>>> {
    vec![
        Route::new(Method::POST, TOKEN_PATH, token),
        Route::new(Method::POST, REVOCATION_PATH, revoke),
        Route::new(Method::POST, INTROSPECTION_PATH, introspect),
        Route::new(Method::GET, METADATA_PATH, metadata),
        // The one route browsers call: it answers CORS (see `cors`).
        Route::new(Method::POST, CONVERSIONS_PATH, conversion),
        Route::new(Method::OPTIONS, CONVERSIONS_PATH, cors::preflight),
        Route::new(Method::POST, EVENTS_PATH, event),
        Route::new(Method::POST, EVENT_BATCH_PATH, batch),
        Route::new(Method::GET, WEBHOOKS_PATH, list_webhooks),
        Route::new(Method::POST, WEBHOOKS_PATH, create_webhook),
        Route::new(Method::GET, WEBHOOK_PATH, show_webhook),
        Route::new(Method::PUT, WEBHOOK_PATH, update_webhook),
        Route::new(Method::DELETE, WEBHOOK_PATH, delete_webhook),
        Route::new(Method::GET, OPENAPI_PATH, serve_document),
    ]
}

/// The state of the routes: the gateway itself.
type Shared = State<Arc<Gateway>>;

#[utoipa::path(
    post,
    path = TOKEN_PATH,
    tag = "oauth",
    summary = "Exchange a code, or refresh tokens",
    description = "RFC 6749 sections 4.1.3 and 6. A body with `code` exchanges it (once: a \
        code used twice revokes its tokens), one with `refresh_token` refreshes; `grant_type`, \
        when sent, must agree. The client authenticates with HTTP Basic or with `client_id` and \
        `client_secret` in the body. A `Bearer` header is ignored. Every answer is `no-store`.",
    params(("code" = Option<String>, Query,
        description = "The code, for clients that send it in the query string.")),
    request_body(content(
        (openapi::oauth::TokenRequestJson = "application/json"),
        (openapi::oauth::TokenRequestForm = "application/x-www-form-urlencoded"),
    ), description = "The grant, and the client's credentials unless sent with HTTP Basic. \
        Optional: HTTP Basic and a `code` in the query string are a whole request."),
    responses(
        (status = 200, description = "Tokens.", body = openapi::oauth::TokenIssued,
            headers(("Cache-Control" = String, description = "`no-store`."))),
        (status = 400, description = "A parameter missing, repeated, of the wrong type or \
            conflicting, an unsupported `grant_type`, or a body that cannot be parsed or read.",
            body = openapi::oauth::OAuthRefusal),
        (status = 401, description = "Wrong client credentials (`ACCESS_DENIED`, \
            `invalid_client`), a code never issued or of another client (`ACCESS_DENIED`), \
            used or expired (`EXPIRED_CODE_GRANT`), or a refresh token invalid or revoked \
            (`INVALID_REFRESH_TOKEN`); all `invalid_grant` but the first.",
            body = openapi::oauth::OAuthError),
        (status = 413, description = "A body over 16 KiB (`BODY_TOO_LARGE`).",
            body = openapi::errors::ServiceError),
        (status = 415, description = "A body neither JSON nor a form.",
            body = openapi::oauth::OAuthError),
        (status = 422, description = "A value the store cannot hold (`UNPROCESSABLE_ENTITY`); \
            do not retry.", body = openapi::errors::ServiceError),
        (status = 503, description = "The store failed (`SERVICE_UNAVAILABLE`); retry.",
            body = openapi::errors::ServiceError),
    ),
    security(("client_basic" = []), ()),
)]
pub(super) async fn token(State(gateway): Shared, request: OAuthRequest) -> HttpAnswer {
    settle(&gateway, gateway.token(&request.parts()).await)
}

#[utoipa::path(
    post,
    path = REVOCATION_PATH,
    tag = "oauth",
    summary = "Revoke a token and its grant",
    description = "RFC 7009. Revoking an access or a refresh token revokes its whole grant. An \
        unknown token, or one of another application, is answered the same way and revokes \
        nothing. The caller authenticates with client credentials (HTTP Basic or the body) or \
        with one of the application's access tokens as `Bearer`.",
    request_body(content(
        (openapi::oauth::TokenReferenceForm = "application/x-www-form-urlencoded"),
        (openapi::oauth::TokenReferenceJson = "application/json"),
    )),
    responses(
        (status = 200, description = "`{}`: accepted.", body = openapi::oauth::Revoked),
        (status = 400, description = "No `token`, a parameter repeated, of the wrong type or \
            conflicting, or a body that cannot be parsed or read.",
            body = openapi::oauth::OAuthRefusal),
        (status = 401, description = "Wrong client credentials (`ACCESS_DENIED`), or no \
            credentials and no valid bearer token (`UNAUTHORIZED`).",
            body = openapi::oauth::OAuthRefusal),
        (status = 413, description = "A body over 16 KiB (`BODY_TOO_LARGE`).",
            body = openapi::errors::ServiceError),
        (status = 415, description = "A body neither a form nor JSON.",
            body = openapi::oauth::OAuthError),
        (status = 422, description = "A value the store cannot hold (`UNPROCESSABLE_ENTITY`); \
            do not retry.", body = openapi::errors::ServiceError),
        (status = 503, description = "The store failed (`SERVICE_UNAVAILABLE`); retry.",
            body = openapi::errors::ServiceError),
    ),
    security(("bearer" = []), ("client_basic" = []), ()),
)]
pub(super) async fn revoke(State(gateway): Shared, request: OAuthRequest) -> HttpAnswer {
    settle(&gateway, gateway.revoke(&request.parts()).await)
}

#[utoipa::path(
    post,
    path = INTROSPECTION_PATH,
    tag = "oauth",
    summary = "Describe a token",
    description = "RFC 7662. An application learns about its own tokens only; a resource \
        server registered with the gateway about any. A refresh token is active when a refresh \
        with it would be answered with tokens now.",
    request_body(content(
        (openapi::oauth::TokenReferenceForm = "application/x-www-form-urlencoded"),
        (openapi::oauth::TokenReferenceJson = "application/json"),
    )),
    responses(
        (status = 200, description = "The token's state.", body = openapi::oauth::Introspection),
        (status = 400, description = "No `token`, a parameter repeated, of the wrong type or \
            conflicting, or a body that cannot be parsed or read.",
            body = openapi::oauth::OAuthRefusal),
        (status = 401, description = "Missing or wrong caller credentials (`ACCESS_DENIED`, \
            `invalid_client`).", body = openapi::oauth::OAuthError),
        (status = 413, description = "A body over 16 KiB (`BODY_TOO_LARGE`).",
            body = openapi::errors::ServiceError),
        (status = 415, description = "A body neither a form nor JSON.",
            body = openapi::oauth::OAuthError),
        (status = 422, description = "A value the store cannot hold (`UNPROCESSABLE_ENTITY`); \
            do not retry.", body = openapi::errors::ServiceError),
        (status = 503, description = "The store failed (`SERVICE_UNAVAILABLE`); retry.",
            body = openapi::errors::ServiceError),
    ),
    security(("client_basic" = []), ()),
)]
pub(super) async fn introspect(State(gateway): Shared, request: OAuthRequest) -> HttpAnswer {
    settle(&gateway, gateway.introspect(&request.parts()).await)
}

#[utoipa::path(
    get,
    path = METADATA_PATH,
    tag = "oauth",
    summary = "Authorization server metadata",
    description = "RFC 8414: the endpoints and what they support, under the configured base URL.",
    responses(
        (status = 200, description = "The metadata; cacheable for an hour.",
            body = crate::oauth::metadata::AuthorizationServerMetadata),
    ),
)]
pub(super) async fn metadata(State(gateway): Shared) -> HttpAnswer {
    gateway.answer(gateway.metadata())
}

#[utoipa::path(
    post,
    path = CONVERSIONS_PATH,
    tag = "intake",
    summary = "Record a conversion, by API key",
    description = "One conversion from a website form. Answers CORS, so a page's script may \
        call it from any origin; `navigator.sendBeacon` sends the same JSON as \
        `text/plain;charset=UTF-8`. With an `Idempotency-Key`, a retry with the same body \
        within 24 h answers the first `event_uuid` with `Idempotent-Replayed: true` and records \
        nothing.",
    params(("Idempotency-Key" = Option<String>, Header, nullable = false, pattern = "^[!-~]{1,255}$",
        description = "1 to 255 visible ASCII characters, chosen by the client per event.")),
    request_body(content(
        (openapi::intake::ConversionEvent = "application/json",
            example = json!(openapi::intake::minimal_conversion("ana@example.com"))),
        (openapi::intake::ConversionEvent = "text/plain"),
    ), description = "The event, as JSON; under `text/plain`, the same JSON text. At most 200 KiB."),
    responses(
        (status = 200, description = "Recorded, or recorded before (a replay).",
            body = openapi::intake::EventRecorded,
            headers(("Idempotent-Replayed" = String,
                description = "`true` on a replay of an earlier request's answer."))),
        (status = 400, description = "The event's problems (`errors`), or a malformed query \
            string, `Idempotency-Key` or body.", body = openapi::errors::BadRequest),
        (status = 401, description = "The `api_key` is missing, unknown or switched off \
            (`UNAUTHORIZED`).", body = openapi::errors::ServiceError),
        (status = 413, description = "A body over 200 KiB: one `BODY_TOO_LARGE` at `$`.",
            body = openapi::errors::FieldErrors),
        (status = 415, description = "A body neither JSON nor `text/plain`.",
            body = openapi::errors::ServiceError),
        (status = 409, description = "The `Idempotency-Key` was used with another body \
            (`IDEMPOTENCY_KEY_REUSED`): choose a new key.", body = openapi::errors::ServiceError),
        (status = 422, description = "A value the store cannot hold (`UNPROCESSABLE_ENTITY`).",
            body = openapi::errors::ServiceError),
        (status = 429, description = "Over a rate limit (per contact, account or API key): \
            nothing recorded.", body = openapi::errors::RateLimitExceeded),
        (status = 503, description = "The store (or a rate limiter that fails closed) failed: \
            nothing recorded; retry.", body = openapi::errors::ServiceError),
    ),
    security(("api_key" = [])),
)]
pub(super) async fn conversion(
    State(gateway): Shared,
    request: Result<EventRequest, HttpAnswer>,
) -> Response {
    // A refused body (413) carries the CORS headers too.
    let answer = match request {
        Ok(request) => settle(&gateway, gateway.record_conversion(&request.parts()).await),
        Err(refusal) => refusal,
    };
    cors::allow(answer.into_response())
}

#[utoipa::path(
    post,
    path = EVENTS_PATH,
    tag = "intake",
    summary = "Record an event, by bearer token",
    description = "One conversion from an application, for the account its token acts on. \
        `Idempotency-Key` as on `/platform/conversions`.",
    params(("Idempotency-Key" = Option<String>, Header, nullable = false, pattern = "^[!-~]{1,255}$",
        description = "1 to 255 visible ASCII characters, chosen by the client per event.")),
    request_body(content((openapi::intake::ConversionEvent = "application/json",
            example = json!(openapi::intake::minimal_conversion("bo@example.com")))),
        description = "The event. At most 200 KiB."),
    responses(
        (status = 200, description = "Recorded, or recorded before (a replay).",
            body = openapi::intake::EventRecorded,
            headers(("Idempotent-Replayed" = String,
                description = "`true` on a replay of an earlier request's answer."))),
        (status = 400, description = "The event's problems (`errors`), or a malformed \
            `Idempotency-Key` or body.", body = openapi::errors::BadRequest),
        (status = 401, description = "No valid bearer token (`UNAUTHORIZED`).",
            body = openapi::errors::ServiceError),
        (status = 413, description = "A body over 200 KiB: one `BODY_TOO_LARGE` at `$`.",
            body = openapi::errors::FieldErrors),
        (status = 415, description = "A body that is not JSON.",
            body = openapi::errors::ServiceError),
        (status = 409, description = "The `Idempotency-Key` was used with another body \
            (`IDEMPOTENCY_KEY_REUSED`): choose a new key.", body = openapi::errors::ServiceError),
        (status = 422, description = "A value the store cannot hold (`UNPROCESSABLE_ENTITY`).",
            body = openapi::errors::ServiceError),
        (status = 429, description = "Over a rate limit (per contact, account or application): \
            nothing recorded.", body = openapi::errors::RateLimitExceeded),
        (status = 503, description = "The store (or a rate limiter that fails closed) failed: \
            nothing recorded; retry.", body = openapi::errors::ServiceError),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn event(State(gateway): Shared, request: EventRequest) -> HttpAnswer {
    settle(&gateway, gateway.record_event(&request.parts()).await)
}

#[utoipa::path(
    post,
    path = EVENT_BATCH_PATH,
    tag = "intake",
    summary = "Record a batch of events, by bearer token",
    description = "1 to 1000 events, validated whole and recorded all or nothing; every error \
        names its event's index (`$[2].payload.email`). `Idempotency-Key` as on \
        `/platform/conversions`.",
    params(("Idempotency-Key" = Option<String>, Header, nullable = false, pattern = "^[!-~]{1,255}$",
        description = "1 to 255 visible ASCII characters, chosen by the client per batch.")),
    request_body(content((openapi::intake::ConversionBatch = "application/json")),
        description = "The events. At most 200 KiB."),
    responses(
        (status = 200, description = "Recorded, or recorded before (a replay).",
            body = openapi::intake::BatchRecorded,
            headers(("Idempotent-Replayed" = String,
                description = "`true` on a replay of an earlier request's answer."))),
        (status = 400, description = "The events' problems (`errors`), or a malformed \
            `Idempotency-Key` or body.", body = openapi::errors::BadRequest),
        (status = 401, description = "No valid bearer token (`UNAUTHORIZED`).",
            body = openapi::errors::ServiceError),
        (status = 413, description = "A body over 200 KiB: one `BODY_TOO_LARGE` at `$`.",
            body = openapi::errors::FieldErrors),
        (status = 415, description = "A body that is not JSON.",
            body = openapi::errors::ServiceError),
        (status = 409, description = "The `Idempotency-Key` was used with another body \
            (`IDEMPOTENCY_KEY_REUSED`): choose a new key.", body = openapi::errors::ServiceError),
        (status = 422, description = "A value the store cannot hold (`UNPROCESSABLE_ENTITY`).",
            body = openapi::errors::ServiceError),
        (status = 429, description = "Over a rate limit (per contact, account or application): \
            nothing recorded.", body = openapi::errors::RateLimitExceeded),
        (status = 503, description = "The store (or a rate limiter that fails closed) failed: \
            nothing recorded; retry.", body = openapi::errors::ServiceError),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn batch(State(gateway): Shared, request: EventRequest) -> HttpAnswer {
    settle(&gateway, gateway.record_event_batch(&request.parts()).await)
}

#[utoipa::path(
    post,
    path = WEBHOOKS_PATH,
    tag = "webhooks",
    summary = "Register a webhook",
    description = "For the calling application and the account its token acts on. Its URL must \
        answer a signed validation call with 2xx within 5 s first. At most 20 per account; one \
        URL once per `event_type`.",
    request_body(content((openapi::webhooks::WebhookRegistration = "application/json")),
        description = "The webhook. Read as JSON also when `Content-Type` is absent."),
    responses(
        (status = 201, description = "Registered, with its signing secret, shown this once.",
            body = openapi::webhooks::WebhookCreated),
        (status = 400, description = "The body's problems (`errors`; `DUPLICATE_URL`, \
            `TOO_MANY_WEBHOOKS` among them), or a body that could not be read.",
            body = openapi::errors::BadRequest),
        (status = 401, description = "No valid bearer token, or the URL did not answer the \
            validation call with 2xx in time (`UNAUTHORIZED`).",
            body = openapi::errors::ServiceError),
        (status = 413, description = "A body over 334,972 bytes (`BODY_TOO_LARGE`): more \
            than the largest valid registration.",
            body = openapi::errors::ServiceError),
        (status = 415, description = "A `Content-Type` other than JSON.",
            body = openapi::errors::ServiceError),
        (status = 422, description = "A value the store cannot hold (`UNPROCESSABLE_ENTITY`); \
            do not retry.", body = openapi::errors::ServiceError),
        (status = 503, description = "The store failed (`SERVICE_UNAVAILABLE`); retry.",
            body = openapi::errors::ServiceError),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn create_webhook(State(gateway): Shared, request: WebhookRequest) -> HttpAnswer {
    settle(&gateway, gateway.create_webhook(&request.parts()).await)
}

#[utoipa::path(
    get,
    path = WEBHOOKS_PATH,
    tag = "webhooks",
    summary = "List the application's webhooks",
    responses(
        (status = 200, description = "The calling application's webhooks for its account.",
            body = openapi::webhooks::WebhookList),
        (status = 400, description = "A body that could not be read (`BAD_REQUEST`).",
            body = openapi::errors::ServiceError),
        (status = 401, description = "No valid bearer token (`UNAUTHORIZED`).",
            body = openapi::errors::ServiceError),
        (status = 413, description = "A body over 334,972 bytes (`BODY_TOO_LARGE`): more \
            than the largest valid registration.",
            body = openapi::errors::ServiceError),
        (status = 422, description = "The store refused a value (`UNPROCESSABLE_ENTITY`); \
            do not retry.", body = openapi::errors::ServiceError),
        (status = 503, description = "The store failed (`SERVICE_UNAVAILABLE`); retry.",
            body = openapi::errors::ServiceError),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn list_webhooks(State(gateway): Shared, request: WebhookRequest) -> HttpAnswer {
    settle(&gateway, gateway.list_webhooks(&request.parts()).await)
}

#[utoipa::path(
    get,
    path = WEBHOOK_PATH,
    tag = "webhooks",
    summary = "Read a webhook and its last attempts",
    params(("uuid" = String, Path, description = "The webhook's `uuid`.")),
    responses(
        (status = 200, description = "The webhook and its last 10 attempts, newest first.",
            body = openapi::webhooks::WebhookDetail),
        (status = 400, description = "A path or body that could not be read (`BAD_REQUEST`).",
            body = openapi::errors::ServiceError),
        (status = 401, description = "No valid bearer token (`UNAUTHORIZED`).",
            body = openapi::errors::ServiceError),
        (status = 404, description = "No webhook of the caller's has this uuid (`NOT_FOUND`).",
            body = openapi::errors::ServiceError),
        (status = 413, description = "A body over 334,972 bytes (`BODY_TOO_LARGE`): more \
            than the largest valid registration.",
            body = openapi::errors::ServiceError),
        (status = 422, description = "The store refused a value (`UNPROCESSABLE_ENTITY`); \
            do not retry.", body = openapi::errors::ServiceError),
        (status = 503, description = "The store failed (`SERVICE_UNAVAILABLE`); retry.",
            body = openapi::errors::ServiceError),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn show_webhook(
    State(gateway): Shared,
    Path(uuid): Path<String>,
    request: WebhookRequest,
) -> HttpAnswer {
    settle(
        &gateway,
        gateway.show_webhook(&request.parts(), &uuid).await,
    )
}

#[utoipa::path(
    put,
    path = WEBHOOK_PATH,
    tag = "webhooks",
    summary = "Change a webhook",
    description = "A field left out keeps its value; `status` switches it on or off. A new URL \
        gets the validation call first.",
    params(("uuid" = String, Path, description = "The webhook's `uuid`.")),
    request_body(content((openapi::webhooks::WebhookUpdate = "application/json")),
        description = "The new values. Read as JSON also when `Content-Type` is absent."),
    responses(
        (status = 200, description = "The webhook as changed.",
            body = openapi::webhooks::Webhook),
        (status = 400, description = "The body's problems (`errors`; `DUPLICATE_URL` among \
            them), or a path or body that could not be read.",
            body = openapi::errors::BadRequest),
        (status = 401, description = "No valid bearer token, or the new URL did not answer the \
            validation call with 2xx in time (`UNAUTHORIZED`).",
            body = openapi::errors::ServiceError),
        (status = 404, description = "No webhook of the caller's has this uuid (`NOT_FOUND`).",
            body = openapi::errors::ServiceError),
        (status = 413, description = "A body over 334,972 bytes (`BODY_TOO_LARGE`): more \
            than the largest valid registration.",
            body = openapi::errors::ServiceError),
        (status = 415, description = "A `Content-Type` other than JSON.",
            body = openapi::errors::ServiceError),
        (status = 422, description = "A value the store cannot hold (`UNPROCESSABLE_ENTITY`); \
            do not retry.", body = openapi::errors::ServiceError),
        (status = 503, description = "The store failed (`SERVICE_UNAVAILABLE`); retry.",
            body = openapi::errors::ServiceError),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn update_webhook(
    State(gateway): Shared,
    Path(uuid): Path<String>,
    request: WebhookRequest,
) -> HttpAnswer {
    settle(
        &gateway,
        gateway.update_webhook(&request.parts(), &uuid).await,
    )
}

#[utoipa::path(
    delete,
    path = WEBHOOK_PATH,
    tag = "webhooks",
    summary = "Delete a webhook",
    description = "With its pending deliveries.",
    params(("uuid" = String, Path, description = "The webhook's `uuid`.")),
    responses(
        (status = 204, description = "Deleted."),
        (status = 400, description = "A path or body that could not be read (`BAD_REQUEST`).",
            body = openapi::errors::ServiceError),
        (status = 401, description = "No valid bearer token (`UNAUTHORIZED`).",
            body = openapi::errors::ServiceError),
        (status = 404, description = "No webhook of the caller's has this uuid (`NOT_FOUND`).",
            body = openapi::errors::ServiceError),
        (status = 413, description = "A body over 334,972 bytes (`BODY_TOO_LARGE`): more \
            than the largest valid registration.",
            body = openapi::errors::ServiceError),
        (status = 422, description = "The store refused a value (`UNPROCESSABLE_ENTITY`); \
            do not retry.", body = openapi::errors::ServiceError),
        (status = 503, description = "The store failed (`SERVICE_UNAVAILABLE`); retry.",
            body = openapi::errors::ServiceError),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn delete_webhook(
    State(gateway): Shared,
    Path(uuid): Path<String>,
    request: WebhookRequest,
) -> HttpAnswer {
    settle(
        &gateway,
        gateway.delete_webhook(&request.parts(), &uuid).await,
    )
}

async fn not_found() -> HttpAnswer {
    HttpAnswer::error(404, "NOT_FOUND", "no such resource")
}

/// The answer to `result`, logging a server-side failure with its causes:
/// the client is told only "try again", the operator needs the reason.
fn settle<T, E>(gateway: &Gateway, result: Result<T, E>) -> HttpAnswer
where
    T: ToHttpAnswer,
    E: ToHttpAnswer + std::error::Error,
{
    let answer = gateway.answer(&result);
    if let Err(error) = &result
        && answer.status >= 500
    {
        let mut causes = Vec::new();
        let mut source = error.source();
        while let Some(cause) = source {
            causes.push(cause.to_string());
            source = cause.source();
        }
        tracing::error!(error = %error, causes = ?causes, "request failed");
    }
    answer
}
