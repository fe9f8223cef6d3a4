//! The whole app as one router: the library's JSON routes
//! (`conversion_gateway::axum::router`: token, revocation and the three
//! event routes, with their body limits, CORS and JSON errors) merged with
//! the dialog's pages and the account's page of connected applications,
//! under a request log and a JSON 500 for panics.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse as _, Response};
use conversion_gateway::{Gateway, HttpAnswer};
use tower_http::catch_panic::CatchPanicLayer;

use crate::account;
use crate::dialog::{self, DialogState};

/// Every route of the service on `gateway`, the dialog's with `dialog`.
pub fn router(gateway: Arc<Gateway>, dialog: DialogState) -> Router {
    dialog::routes(dialog.clone())
        .merge(account::routes(dialog))
        .merge(conversion_gateway::axum::router(gateway))
        // The library's routes answer their own panics; this covers the
        // dialog's.
        .layer(CatchPanicLayer::custom(|_panic| {
            HttpAnswer::error(
                500,
                "INTERNAL_SERVER_ERROR",
                "the service failed to answer this request",
            )
            .into_response()
        }))
        .layer(middleware::from_fn(log_request))
}

/// One log line per request: method, path, status and latency. The path
/// only: the query string carries `api_key` on /platform/conversions and may
/// carry a `code` on /auth/token, and keys in logs are a leak waiting to
/// happen.
async fn log_request(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16();
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    if status >= 500 {
        tracing::warn!(%method, path, status, latency_ms, "request");
    } else {
        tracing::info!(%method, path, status, latency_ms, "request");
    }
    response
}
