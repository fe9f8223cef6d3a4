//! The library's axum module in-process, as every host serves it: the JSON
//! routes (`routes`), with the service's JSON answers for the errors of the
//! HTTP layer.

mod routes;
mod support;
