//! The service on [axum](https://docs.rs/axum) (feature `axum`): extractors,
//! responses, a bearer guard, a router with every JSON route, the
//! operator's routes, the request log, and the accept loop that serves them.
//!
//! ```no_run
//! use std::sync::Arc;
//! use conversion_gateway::axum::{
//!     ConnectionLimits, fit_open_files, listen, operations_router, router, serve, shutdown_signal,
//!     with_request_log,
//! };
//! use conversion_gateway::{Gateway, GatewayConfig, PURGE_EVERY, SecretHasher, StoreUrl, purge_every};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = "sqlite:gateway.db".parse::<StoreUrl>()?.open().await?;
//! let config = GatewayConfig::new("http://127.0.0.1:8080");
//! let gateway = Arc::new(Gateway::new(config, store.stores(), SecretHasher::new([7; 32])));
//! let purge = tokio::spawn(purge_every(gateway.clone(), PURGE_EVERY));
//! let app = router(gateway.clone()).merge(operations_router(gateway));
//! let limits = fit_open_files(ConnectionLimits::default());
//! let listener = listen("127.0.0.1:8080", &limits).await?;
//! serve(listener, with_request_log(app), limits, shutdown_signal()).await;
//! purge.abort();
//! store.close().await;
//! # Ok(())
//! # }
//! ```
//!
//! [`router`] serves `POST /auth/token`, `POST /auth/revoke`,
//! `POST /platform/conversions` (with CORS, for website forms),
//! `POST /platform/events` and `POST /platform/events/batch`, the webhook
//! routes, and `GET /openapi.json`: the OpenAPI 3.1 document of every JSON
//! route ([`openapi_document`], also in the repository as `openapi.json`,
//! its routes those of [`router_routes`] and [`operations_routes`]); it answers
//! everything else (unknown paths, wrong methods, oversized bodies,
//! timeouts) in the service's JSON error shape, since the real service's
//! clients fail on HTML or empty error bodies. The authorization dialog and
//! the account page are in [`pages::routes`], with HTML a host can replace
//! ([`pages::Templates`]) and a sign-in it can swap for its own
//! ([`crate::HostSignIn`]).
//!
//! A host's own routes use the same pieces: [`OAuthRequest`] and
//! [`EventRequest`] extract the [`crate::RequestParts`] with the route's
//! body limit, [`crate::HttpAnswer`] is an axum response, and [`Bearer`]
//! guards a route with an access token.
//!
//! What every host runs around them:
//!
//! - [`operations_router`]: `GET /healthz` and `GET /readyz`, for a load
//!   balancer; with feature `prometheus`, `metrics_router` serves
//!   `GET /metrics` from a `PrometheusMetrics` recorder, whose `upkeep`
//!   task the host spawns;
//! - [`with_request_log`]: a request id on every answer and one log line
//!   per request (never its query string, which may carry a key);
//! - [`serve`] (with [`ConnectionLimits`], [`fit_open_files`] and
//!   [`listen`]): the accept loop, for the bounds axum's own `serve` lacks:
//!   a connection cap that sheds idle connections first, first-byte and
//!   header timeouts, and a graceful drain with a deadline. It hands each
//!   request the client's address as `ConnectInfo<SocketAddr>`;
//!   [`shutdown_signal`] starts the drain on Ctrl-C or SIGTERM.

mod bearer;
mod cors;
mod extract;
mod openapi;
mod operating;
pub mod pages;
#[cfg(feature = "prometheus")]
mod prometheus;
mod request_log;
mod request_timeout;
mod respond;
mod route_table;
mod router;
mod serve;

pub use bearer::Bearer;
pub use extract::{
    EventRequest, LimitedRequest, OAUTH_BODY_LIMIT, OAuthRequest, WEBHOOK_BODY_LIMIT,
    WebhookRequest,
};
pub use openapi::{OPENAPI_PATH, openapi_document};
pub use operating::{operations_router, operations_routes};
#[cfg(feature = "prometheus")]
pub use prometheus::{METRICS_UPKEEP_EVERY, MetricsError, PrometheusMetrics, metrics_router};
pub use request_log::{REQUEST_ID_HEADER, RequestId, with_request_log};
pub use respond::{json_errors, panic_as_json, plain_errors_as_json};
pub use router::{REQUEST_TIMEOUT, WEBHOOKS_PATH, router, router_routes};
pub use serve::capacity::{fit_open_files, listen};
pub use serve::limits::ConnectionLimits;
pub use serve::signal::shutdown_signal;
pub use serve::{Drained, serve};

#[cfg(test)]
mod tests;
