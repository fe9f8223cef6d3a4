//! The reference server (`examples/server`): its JSON routes as the
//! library's axum module serves them in-process (`routes`), and the server
//! itself through its binary and command line on loopback (`dialog`,
//! `process`, `connections`, `oauth2_client`) and its operator commands (`admin`), and
//! the dialog in headless Chromium (`browser`). The binary is the one
//! `cargo test` builds into `target/<profile>/examples/`; the internals
//! only reachable in-process (the throttle's arithmetic, the accept loop,
//! clock-driven expiry) are the example's own unit tests
//! (`cargo test --examples`).

mod account;
mod admin;
// Needs Chromium and ChromeDriver: the second test command only.
#[cfg(feature = "external-tests")]
mod browser;
mod connections;
mod consumer;
mod dialog;
// Needs NATS with JetStream: the second test command only.
#[cfg(feature = "external-tests")]
mod events_nats;
mod introspection;
mod oauth2_client;
mod operating;
mod process;
// A TCP proxy that cuts connections, for the NATS and PostgreSQL outages.
#[cfg(any(feature = "external-tests", feature = "postgres"))]
mod proxy;
mod rate_limits;
mod routes;
mod support;
