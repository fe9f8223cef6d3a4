//! Weeks in the life of clients, on the in-memory and SQLite stores (the
//! PostgreSQL store runs the same in `postgres.rs`):
//!
//! - the official client's pattern (its first refresh token forever, one
//!   refresh a day, a restart and a purge every day) for 35 days;
//! - the model-based tests of the token lifecycle and of idempotent intake:
//!   random operations, time jumps, purges and restarts, every answer
//!   compared with a reference model. `cargo test -- model` runs them all;
//!   `PROPTEST_CASES=5000 cargo test --release -- model` runs more.

use conversion_gateway_testkit::restartable::{MemoryStores, SqliteFile};
use conversion_gateway_testkit::{model, official_client};

#[tokio::test]
async fn the_official_client_stays_connected_for_35_days_on_memory() {
    official_client::the_official_client_stays_connected::<MemoryStores>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_client_stays_connected_for_35_days_on_sqlite() {
    official_client::the_official_client_stays_connected::<SqliteFile>().await;
}

#[test]
fn model_lifecycle_on_memory() {
    model::model_lifecycle::<MemoryStores>(
        256,
        60,
        "proptest-regressions/model_lifecycle_on_memory.txt",
    );
}

#[test]
fn model_lifecycle_on_sqlite() {
    model::model_lifecycle::<SqliteFile>(
        48,
        60,
        "proptest-regressions/model_lifecycle_on_sqlite.txt",
    );
}

#[test]
fn model_idempotency_on_memory() {
    model::model_idempotency::<MemoryStores>(
        128,
        40,
        "proptest-regressions/model_idempotency_on_memory.txt",
    );
}

#[test]
fn model_idempotency_on_sqlite() {
    model::model_idempotency::<SqliteFile>(
        32,
        40,
        "proptest-regressions/model_idempotency_on_sqlite.txt",
    );
}
