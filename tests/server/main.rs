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
mod browser;
mod connections;
mod consumer;
mod dialog;
mod events_nats;
mod introspection;
mod oauth2_client;
mod operating;
mod process;
mod proxy;
mod rate_limits;
mod routes;
mod support;
