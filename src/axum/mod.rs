//! The service on [axum](https://docs.rs/axum) (feature `axum`): extractors,
//! responses, a bearer guard, and a router with every JSON route.
//!
//! ```no_run
//! use std::sync::Arc;
//! use conversion_gateway::{Gateway, GatewayConfig, SecretHasher, Stores};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! let gateway = Arc::new(Gateway::new(
//!     GatewayConfig::new("http://127.0.0.1:8080"),
//!     Stores::in_memory(),
//!     SecretHasher::new([7; 32]),
//! ));
//! let app = conversion_gateway::axum::router(gateway);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await
//! # }
//! ```
//!
//! [`router`] serves `POST /auth/token`, `POST /auth/revoke`,
//! `POST /platform/conversions` (with CORS, for website forms),
//! `POST /platform/events` and `POST /platform/events/batch`, and answers
//! everything else (unknown paths, wrong methods, oversized bodies,
//! timeouts) in the service's JSON error shape, since the real service's
//! clients fail on HTML or empty error bodies. The authorization dialog is
//! not in it: its pages are the host's (see `examples/server/`), built on
//! [`crate::Gateway::authorization_request`], `approve` and `deny`.
//!
//! A host's own routes use the same pieces: [`OAuthRequest`] and
//! [`EventRequest`] extract the [`crate::RequestParts`] with the route's
//! body limit, [`crate::HttpAnswer`] is an axum response, and [`Bearer`]
//! guards a route with an access token.

mod bearer;
mod cors;
mod extract;
mod operating;
#[cfg(feature = "prometheus")]
mod prometheus;
mod request_log;
mod respond;
mod router;
mod serve;

pub use bearer::Bearer;
pub use extract::{EventRequest, OAUTH_BODY_LIMIT, OAuthRequest};
pub use operating::operations_router;
#[cfg(feature = "prometheus")]
pub use prometheus::{METRICS_UPKEEP_EVERY, MetricsError, PrometheusMetrics, metrics_router};
pub use request_log::{REQUEST_ID_HEADER, RequestId, with_request_log};
pub use respond::{json_errors, panic_as_json, plain_errors_as_json};
pub use router::{REQUEST_TIMEOUT, router};
pub use serve::capacity::{fit_open_files, listen};
pub use serve::limits::ConnectionLimits;
pub use serve::{Drained, serve};

#[cfg(test)]
mod tests;
