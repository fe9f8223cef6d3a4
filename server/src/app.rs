//! The whole app as one router: the library's JSON routes
//! (`conversion_gateway::axum::router`: token, revocation and the three
//! event routes, with their body limits, CORS, JSON errors and their own
//! answer to panics), its pages (the dialog and the account's page of
//! connected applications), which get a JSON 500 for panics here, and its
//! operator's endpoints (`/healthz`, `/readyz`, `/metrics`). The request log
//! with request ids goes around all of it
//! (`conversion_gateway::axum::with_request_log`, in `main.rs`).

use std::sync::Arc;

use axum::Router;
use conversion_gateway::axum::pages::{self, PagesState};
use conversion_gateway::axum::{
    PrometheusMetrics, metrics_router, operations_router, panic_as_json,
};
use conversion_gateway::{
    Argon2Passwords, Argon2Verifier, Gateway, HashingLimit, PageFlows, ServerKey, SignInMethod,
    SystemClock, ThrottleLimits,
};
use tower_http::catch_panic::CatchPanicLayer;

/// Every route of the service on `gateway`, the pages with `pages`, and
/// `/metrics` from `metrics` unless they have a listener of their own.
pub fn router(
    gateway: Arc<Gateway>,
    pages: PagesState,
    metrics: Option<PrometheusMetrics>,
) -> Router {
    let router = pages::routes(pages)
        // Only on the routes merged so far: the library's routes answer
        // their own panics, and each layer axum puts on a route costs every
        // request through it another boxed copy of the route.
        .layer(CatchPanicLayer::custom(panic_as_json))
        .merge(conversion_gateway::axum::router(gateway.clone()))
        .merge(operations_router(gateway));
    match metrics {
        Some(metrics) => router.merge(metrics_router(metrics)),
        None => router,
    }
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
