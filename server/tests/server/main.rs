//! The service through its binary and command line on loopback (`dialog`,
//! `account`, `process`, `connections`, `operating`, `rate_limits`,
//! `oauth2_client`, `introspection`, `webhooks`), its operator commands (`admin`), the
//! feed's consumer (`consumer`), and the dialog in headless Chromium
//! (`browser`). Cargo builds the binary for these tests
//! (`CARGO_BIN_EXE_conversion-gateway`); the library's router in-process is
//! tested in the library's `tests/axum`.

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
mod support;
mod webhooks;
