//! What whoever runs the service needs from it over HTTP: `GET /healthz`
//! (the process serves) and `GET /readyz` (every store answers, so a load
//! balancer routes around an instance whose database is gone).
//!
//! A router of their own, not routes inside [`router`](crate::axum::router):
//! a host that already answers `/healthz` would otherwise see axum panic
//! at start on the overlapping route.

use std::sync::Arc;

use ::axum::Router;
use ::axum::extract::State;
use http::Method;
use serde_json::json;
use tower_http::catch_panic::CatchPanicLayer;

use crate::answer::HttpAnswer;
use crate::axum::openapi;
use crate::axum::respond::panic_as_json;
use crate::axum::route_table::{self, Route};
use crate::gateway::Gateway;

/// `GET /healthz` and `GET /readyz` on `gateway`.
///
/// `/healthz` answers 200 `{"status":"ok"}` while the process serves.
/// `/readyz` answers 200 `{"status":"ready","stores":{...}}` when every
/// store answers ([`Gateway::readiness`]), else 503 with `Retry-After: 5`,
/// `"status":"unavailable"`, each store's state and the names of those
/// that `"failed"`. Never why a store failed: the cause may name a host,
/// and is logged for the operator instead (`tracing`, level warn). Neither
/// answer is cached.
///
/// Generic over the state `S` of the host's router, so that it merges into
/// it, as [`router`](crate::axum::router) does.
pub fn operations_router<S: Clone + Send + Sync + 'static>(gateway: Arc<Gateway>) -> Router<S> {
    route_table::build(routes())
        .layer(CatchPanicLayer::custom(panic_as_json))
        .with_state(gateway)
}

/// The method and path of every route [`operations_router`] serves (a
/// `GET` route also answers `HEAD`); the OpenAPI document lists them.
pub fn operations_routes() -> Vec<(Method, &'static str)> {
    route_table::listing(&routes())
}

/// The table [`operations_router`] is built from and [`operations_routes`]
/// lists.
fn routes() -> Vec<Route<Arc<Gateway>>> {
    vec![
        Route::new(Method::GET, HEALTHZ_PATH, healthz),
        Route::new(Method::GET, READYZ_PATH, readyz),
    ]
}

/// Whether the process serves.
const HEALTHZ_PATH: &str = "/healthz";

/// Whether every store answers.
const READYZ_PATH: &str = "/readyz";

/// The process is up and serving.
#[utoipa::path(
    get,
    path = HEALTHZ_PATH,
    tag = "operations",
    summary = "Liveness",
    responses(
        (status = 200, description = "The process serves. Never cached.",
            body = openapi::operating::Health),
    ),
)]
pub(super) async fn healthz() -> HttpAnswer {
    HttpAnswer::json(200, json!({ "status": "ok" })).with_header("cache-control", "no-store")
}

/// 200 when every store answers within its timeout, else 503 naming the
/// stores that did not.
#[utoipa::path(
    get,
    path = READYZ_PATH,
    tag = "operations",
    summary = "Readiness",
    description = "Whether every store answers within 2 s, for a load balancer. Never why a \
        store failed. Never cached.",
    responses(
        (status = 200, description = "Every store answered.", body = openapi::operating::Ready),
        (status = 503, description = "A store did not answer: route around this instance.",
            body = openapi::operating::NotReady),
    ),
)]
pub(super) async fn readyz(State(gateway): State<Arc<Gateway>>) -> HttpAnswer {
    let readiness = gateway.readiness().await;
    let stores: serde_json::Map<String, serde_json::Value> = readiness
        .stores
        .iter()
        .map(|(name, failure)| {
            let state = if failure.is_some() {
                "unavailable"
            } else {
                "ok"
            };
            ((*name).to_owned(), json!(state))
        })
        .collect();
    let answer = if readiness.is_ready() {
        HttpAnswer::json(200, json!({ "status": "ready", "stores": stores }))
    } else {
        for (name, failure) in &readiness.stores {
            if let Some(error) = failure {
                tracing::warn!(store = name, error = %error, "not ready");
            }
        }
        HttpAnswer::json(
            503,
            json!({ "status": "unavailable", "stores": stores, "failed": readiness.failed() }),
        )
        .with_header("retry-after", "5")
    };
    answer.with_header("cache-control", "no-store")
}
