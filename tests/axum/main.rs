//! The library's axum module in-process, as every host serves it: the JSON
//! routes (`routes`), with the service's JSON answers for the errors of the
//! HTTP layer; the OpenAPI document of those routes (`openapi`); and
//! `examples/axum.rs`, the whole service in one file, as a
//! process (`example`).

// Stops the example with SIGINT, as Ctrl-C does.
#[cfg(unix)]
mod example;
mod openapi;
mod routes;
mod support;
