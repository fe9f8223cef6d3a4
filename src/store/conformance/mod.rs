//! The storage conformance suite: async checks that any implementation of
//! the storage traits keeps its contract, the atomic operations under
//! concurrency included. Enabled by the `test-util` feature.
//!
//! Run it from a test of your own store, on a multi-threaded runtime (the
//! concurrency checks race calls against each other). Here on the crate's
//! memory store; a test of yours puts its own store in its place and
//! carries `#[tokio::test(flavor = "multi_thread", worker_threads = 4)]`:
//!
//! ```
//! use std::sync::Arc;
//!
//! use conversion_gateway::{MemoryTokenStore, conformance};
//!
//! # tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap().block_on(async {
//! let store = Arc::new(MemoryTokenStore::new());
//! conformance::check_token_store(store).await;
//! # });
//! ```
//!
//! Each check panics (fails the test) with a message naming the broken
//! clause. Every record it writes has fresh random identifiers, so the suite
//! can run repeatedly and in parallel against one shared database.
//! Timestamps are whole seconds: a store must round-trip at least that.
//!
//! # Layout
//!
//! This file holds the entry points, one per storage trait, each listing
//! the checks it runs. The checks live by concern in `src/store/conformance/`:
//! `tokens.rs`, `clients_accounts_keys.rs`, `events.rs`, `webhooks.rs` and
//! `webhook_deliveries.rs` and `webhook_pages.rs` check one caller at a time; `feed.rs` checks the feed; `purge.rs` checks
//! the purges; `concurrency.rs` races the atomic operations; `fixtures.rs`
//! makes the records they write.

mod clients_accounts_keys;
mod concurrency;
mod events;
mod feed;
mod fixtures;
mod purge;
mod tokens;
mod webhook_deliveries;
mod webhook_pages;
mod webhooks;

use std::sync::Arc;

use crate::account::AccountId;
use crate::random::{OsRandom, random_uuid};
use crate::store::webhooks::WebhookStore;
use crate::store::{AccountStore, ApiKeyStore, ClientRegistry, EventSink};

/// Checks every clause of [`crate::TokenStore`].
pub async fn check_token_store(store: Arc<dyn crate::store::TokenStore>) {
    tokens::check_grants(&*store).await;
    tokens::check_grant_listing(&*store).await;
    tokens::check_codes(&*store).await;
    tokens::check_access_tokens(&*store).await;
    tokens::check_refresh_tokens(&*store).await;
    tokens::check_successor_use(&*store).await;
    tokens::check_code_redemption(&*store).await;
    tokens::check_redemption_fails_whole(&*store).await;
    tokens::check_rotation_fails_whole(&*store).await;
    purge::check_purge(&*store).await;
    concurrency::check_concurrent_code_take(store.clone()).await;
    concurrency::check_concurrent_redemption(store.clone()).await;
    concurrency::check_concurrent_rotation(store).await;
}

/// Checks every clause of [`crate::ClientRegistry`].
pub async fn check_client_registry(registry: Arc<dyn ClientRegistry>) {
    clients_accounts_keys::check_clients(&*registry).await;
    clients_accounts_keys::check_client_lifecycle(&*registry).await;
}

/// Checks every clause of [`crate::AccountStore`].
pub async fn check_account_store(store: Arc<dyn AccountStore>) {
    clients_accounts_keys::check_accounts(&*store).await;
}

/// Checks every clause of [`crate::ApiKeyStore`], the per-account limit
/// under concurrency included.
pub async fn check_api_key_store(store: Arc<dyn ApiKeyStore>) {
    let (account, first) = clients_accounts_keys::check_api_keys(&*store).await;
    concurrency::check_concurrent_key_limit(store, account, &first).await;
}

/// Checks every clause of [`crate::EventFeed`], on the events `sink`
/// records: commit order, resuming, foreign cursors, and no event skipped
/// while writers commit concurrently.
pub async fn check_event_feed(
    sink: Arc<dyn EventSink>,
    feed: Arc<dyn crate::store::feed::EventFeed>,
) {
    feed::check_feed_order(&*sink, &*feed).await;
    feed::check_feed_under_concurrent_writers(sink, feed).await;
}

/// Checks every clause of [`crate::EventSink`]: durability of what it
/// acknowledges, all-or-nothing batches and idempotency keys, concurrent
/// retries included.
pub async fn check_event_sink(sink: Arc<dyn EventSink>) {
    let account = AccountId(random_uuid(&OsRandom));
    events::check_events(&*sink, account).await;
    purge::check_claim_purge(&*sink).await;
    concurrency::check_concurrent_idempotent_retries(sink, account).await;
}

/// Checks every clause of [`crate::WebhookStore`]: registration and the
/// uniqueness of a URL per account, updates, switching and deletion, the
/// dispatcher's compare-and-set, which deliveries a lease takes and in
/// what order (the first pending delivery of each contact to each active
/// webhook, oldest due first), leases and retries in time, attempts and
/// their consequences (the last 20 kept, `failing_since`, switch-off),
/// counts and the purge; and, with many callers at once, one URL, one
/// dispatch per page and no delivery leased twice.
///
/// Unlike the other checks, these lease whatever is due in the store and
/// count every pending delivery, and they move the dispatcher's one
/// cursor: run them on a store of their own, with no dispatcher, sender or
/// other run of them beside. They delete what they write, so they can run
/// again on the same store.
pub async fn check_webhook_store(store: Arc<dyn WebhookStore>) {
    webhooks::check_registration(&*store).await;
    webhooks::check_updates(&*store).await;
    webhooks::check_status_and_deletion(&*store).await;
    webhooks::check_dispatch(&*store).await;
    webhook_deliveries::check_lease_order(&*store).await;
    webhook_pages::check_queue_across_pages(&*store).await;
    webhook_pages::check_full_page_order(&*store).await;
    webhook_pages::check_page_past_one_statement(&*store).await;
    webhook_pages::check_page_dispatched_again(&*store).await;
    webhook_deliveries::check_lease_eligibility(&*store).await;
    webhook_deliveries::check_attempts(&*store).await;
    webhook_deliveries::check_late_attempt_on_an_ended_delivery(&*store).await;
    webhook_deliveries::check_late_attempt_beside_a_live_lease(&*store).await;
    webhook_deliveries::check_failing_and_switch_off(&*store).await;
    webhook_deliveries::check_switch_off_against_the_stored_failures(&*store).await;
    webhook_deliveries::check_pending_and_states(&*store).await;
    webhook_deliveries::check_delivery_purge(&*store).await;
    webhook_deliveries::check_deletion_takes_deliveries(&*store).await;
    concurrency::check_concurrent_webhook_registration(store.clone()).await;
    concurrency::check_concurrent_dispatch(store.clone()).await;
    concurrency::check_concurrent_leases(store).await;
}
