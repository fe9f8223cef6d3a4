//! The whole app as one router: the library's JSON routes
//! (`conversion_gateway::axum::router`: token, revocation and the three
//! event routes, with their body limits, CORS, JSON errors and their own
//! answer to panics) and operator's endpoints (`/healthz`, `/readyz`,
//! `/metrics`, the library's too), merged with the dialog's pages and the
//! account's page of connected applications, which get a JSON 500 for
//! panics here. The request log with request ids goes around all of it
//! (`conversion_gateway::axum::with_request_log`, in `main.rs`).

use std::sync::Arc;

use axum::Router;
use conversion_gateway::Gateway;
use conversion_gateway::axum::{
    PrometheusMetrics, metrics_router, operations_router, panic_as_json,
};
use tower_http::catch_panic::CatchPanicLayer;

use crate::account;
use crate::dialog::{self, DialogState};

/// Every route of the service on `gateway`, the dialog's with `dialog`,
/// and `/metrics` from `metrics` unless they have a listener of their own.
pub fn router(
    gateway: Arc<Gateway>,
    dialog: DialogState,
    metrics: Option<PrometheusMetrics>,
) -> Router {
    let router = dialog::routes(dialog.clone())
        .merge(account::routes(dialog))
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
