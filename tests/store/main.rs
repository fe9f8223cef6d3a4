//! The stores keep the storage contract (the public conformance suite,
//! concurrency included): in memory (`memory`), on SQLite (`sqlite`) and on
//! PostgreSQL (`postgres`, under `cargo test --all-features`, which needs
//! `DATABASE_URL` and fails with start-up instructions without it); and
//! webhooks on both SQL stores across restarts and instances (`webhooks`).
//! PostgreSQL's tests reach it through a proxy that can go silent
//! (`silent_network`).

mod memory;
mod model;
mod nats;
mod postgres;
mod silent_network;
mod sqlite;
mod webhooks;
