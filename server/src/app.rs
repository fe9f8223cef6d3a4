//! The whole app as one router: the library's JSON routes
//! (`conversion_gateway::axum::router`: token, revocation and the three
//! event routes, with their body limits, CORS, JSON errors and their own
//! answer to panics) merged with the library's pages (the dialog and the
//! account's page of connected applications) and the operator's endpoints (`/healthz`,
//! `/readyz`, `/metrics`), which get a JSON 500 for panics here; and the
//! request log with request ids around all of it.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use conversion_gateway::Gateway;
use conversion_gateway::axum::panic_as_json;
use tower::{Layer as _, Service};
use tower_http::catch_panic::CatchPanicLayer;

use axum::http::HeaderValue;
use metrics_exporter_prometheus::PrometheusHandle;

use conversion_gateway::axum::pages::{self, PagesState};
use conversion_gateway::{
    Argon2Passwords, Argon2Verifier, HashingLimit, PageFlows, ServerKey, SignInMethod, SystemClock,
    ThrottleLimits,
};

use crate::operating;

/// Every route of the service on `gateway`, the dialog's with `dialog`,
/// and `/metrics` from `metrics` unless they have a listener of their own.
/// Serve it [`logged`].
pub fn router(
    gateway: Arc<Gateway>,
    dialog: PagesState,
    metrics: Option<PrometheusHandle>,
) -> Router {
    pages::routes(dialog)
        .merge(operating::routes(gateway.clone(), metrics))
        // Only on the routes merged so far: the library's routes answer
        // their own panics, and each layer axum puts on a route costs every
        // request through it another boxed copy of the route.
        .layer(CatchPanicLayer::custom(panic_as_json))
        .merge(conversion_gateway::axum::router(gateway))
}

/// The dialog's and the account's pages on `gateway`: our sign-in form,
/// its passwords checked by `passwords` (one check per core at a time) and
/// its failures throttled with the library's defaults, sessions and CSRF
/// tokens keyed from `key`.
pub fn pages(gateway: Arc<Gateway>, key: &ServerKey, passwords: Argon2Passwords) -> PagesState {
    let sign_in = SignInMethod::form(
        Argon2Verifier::new(passwords, HashingLimit::per_core()),
        ThrottleLimits::default(),
    );
    PagesState::new(PageFlows::new(gateway, key, sign_in, Arc::new(SystemClock)))
}

/// `router` under the request log ([`log_request`]), which wraps the router
/// as a whole: laid with `Router::layer`, it would wrap each route instead,
/// at the cost of another boxed copy of the route for every request.
pub fn logged(
    router: Router,
) -> impl Service<Request, Response = Response, Error = Infallible, Future: Send + 'static>
+ Clone
+ Send
+ Sync
+ 'static {
    middleware::from_fn(log_request).layer(router)
}

/// One log line per request: its id, method, path, status and latency;
/// the id also goes back in `X-Request-Id`, so that a client's report can
/// be found in the log (a client-sent id is kept if it is well-formed).
/// The path only: the query string carries `api_key` on
/// /platform/conversions and may carry a `code` on /auth/token, and keys in
/// logs are a leak waiting to happen.
async fn log_request(request: Request, next: Next) -> Response {
    let request_id = operating::request_id(&request);
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let started = Instant::now();
    let mut response = next.run(request).await;
    let status = response.status().as_u16();
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    if status >= 500 {
        tracing::warn!(request_id, %method, path, status, latency_ms, "request");
    } else {
        tracing::info!(request_id, %method, path, status, latency_ms, "request");
    }
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(operating::REQUEST_ID, value);
    }
    response
}
