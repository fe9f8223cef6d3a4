//! The stores keep the storage contract (the public conformance suite,
//! concurrency included): in memory (`memory`), on SQLite (`sqlite`) and on
//! PostgreSQL (`postgres`, under `cargo test --all-features`, which needs
//! `DATABASE_URL` and fails with start-up instructions without it); and
//! webhooks on both SQL stores across restarts and instances (`webhooks`).

mod memory;
mod model;
mod nats;
mod postgres;
mod sqlite;
mod webhooks;
