//! Every JSON route of the service as one axum router.

use std::sync::Arc;
use std::time::Duration;

use ::axum::Router;
use ::axum::extract::{Path, State};
use ::axum::response::{IntoResponse as _, Response};
use ::axum::routing::{get, post};
use http::StatusCode;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::TimeoutLayer;

use crate::answer::{HttpAnswer, ToHttpAnswer};
use crate::axum::cors;
use crate::axum::extract::{EventRequest, OAuthRequest};
use crate::axum::respond::{panic_as_json, plain_errors_as_json};
use crate::gateway::Gateway;
use crate::oauth::metadata::{INTROSPECTION_PATH, METADATA_PATH, REVOCATION_PATH, TOKEN_PATH};

/// The webhook routes' collection: `GET` lists, `POST` registers;
/// `{WEBHOOKS_PATH}/{uuid}` reads, replaces and deletes one.
pub const WEBHOOKS_PATH: &str = "/integrations/webhooks";

/// How long one request may take before it is answered 503 with
/// `Retry-After`; it also bounds how long a graceful shutdown waits.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The token, revocation, introspection, metadata, event and webhook
/// routes, on `gateway`.
///
/// Generic over the state `S` of the host's router, so that it merges into
/// it (`host_routes.merge(router(gateway))`). A failure the client is told
/// only "503" about is logged (`tracing`, level error) with its causes.
pub fn router<S: Clone + Send + Sync + 'static>(gateway: Arc<Gateway>) -> Router<S> {
    Router::new()
        .route(TOKEN_PATH, post(token))
        .route(REVOCATION_PATH, post(revoke))
        .route(INTROSPECTION_PATH, post(introspect))
        .route(METADATA_PATH, get(metadata))
        // The one route browsers call: it answers CORS (see `cors`).
        .route(
            "/platform/conversions",
            post(conversion).options(cors::preflight),
        )
        .route("/platform/events", post(event))
        .route("/platform/events/batch", post(batch))
        .route(WEBHOOKS_PATH, get(list_webhooks).post(create_webhook))
        .route(
            "/integrations/webhooks/{uuid}",
            get(show_webhook).put(update_webhook).delete(delete_webhook),
        )
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
                .layer(TimeoutLayer::with_status_code(
                    StatusCode::SERVICE_UNAVAILABLE,
                    REQUEST_TIMEOUT,
                )),
        )
        .with_state(gateway)
}

/// The state of the routes: the gateway itself.
type Shared = State<Arc<Gateway>>;

async fn token(State(gateway): Shared, request: OAuthRequest) -> HttpAnswer {
    settle(&gateway, gateway.token(&request.parts()).await)
}

async fn revoke(State(gateway): Shared, request: OAuthRequest) -> HttpAnswer {
    settle(&gateway, gateway.revoke(&request.parts()).await)
}

async fn introspect(State(gateway): Shared, request: OAuthRequest) -> HttpAnswer {
    settle(&gateway, gateway.introspect(&request.parts()).await)
}

async fn metadata(State(gateway): Shared) -> HttpAnswer {
    gateway.answer(gateway.metadata())
}

async fn conversion(State(gateway): Shared, request: Result<EventRequest, HttpAnswer>) -> Response {
    // A refused body (413) carries the CORS headers too.
    let answer = match request {
        Ok(request) => settle(&gateway, gateway.record_conversion(&request.parts()).await),
        Err(refusal) => refusal,
    };
    cors::allow(answer.into_response())
}

async fn event(State(gateway): Shared, request: EventRequest) -> HttpAnswer {
    settle(&gateway, gateway.record_event(&request.parts()).await)
}

async fn batch(State(gateway): Shared, request: EventRequest) -> HttpAnswer {
    settle(&gateway, gateway.record_event_batch(&request.parts()).await)
}

async fn create_webhook(State(gateway): Shared, request: OAuthRequest) -> HttpAnswer {
    settle(&gateway, gateway.create_webhook(&request.parts()).await)
}

async fn list_webhooks(State(gateway): Shared, request: OAuthRequest) -> HttpAnswer {
    settle(&gateway, gateway.list_webhooks(&request.parts()).await)
}

async fn show_webhook(
    State(gateway): Shared,
    Path(uuid): Path<String>,
    request: OAuthRequest,
) -> HttpAnswer {
    settle(
        &gateway,
        gateway.show_webhook(&request.parts(), &uuid).await,
    )
}

async fn update_webhook(
    State(gateway): Shared,
    Path(uuid): Path<String>,
    request: OAuthRequest,
) -> HttpAnswer {
    settle(
        &gateway,
        gateway.update_webhook(&request.parts(), &uuid).await,
    )
}

async fn delete_webhook(
    State(gateway): Shared,
    Path(uuid): Path<String>,
    request: OAuthRequest,
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
