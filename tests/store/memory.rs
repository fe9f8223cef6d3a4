//! The in-memory stores keep the storage contract, concurrency included.
#![cfg(feature = "test-util")]

use std::sync::Arc;

use conversion_gateway::conformance;
use conversion_gateway::{
    MemoryAccountStore, MemoryApiKeyStore, MemoryClientRegistry, MemoryEventSink, MemoryTokenStore,
    MemoryWebhookStore,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_token_store_keeps_the_contract() {
    conformance::check_token_store(Arc::new(MemoryTokenStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_client_registry_keeps_the_contract() {
    conformance::check_client_registry(Arc::new(MemoryClientRegistry::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_account_store_keeps_the_contract() {
    conformance::check_account_store(Arc::new(MemoryAccountStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_api_key_store_keeps_the_contract() {
    conformance::check_api_key_store(Arc::new(MemoryApiKeyStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_event_sink_keeps_the_contract() {
    conformance::check_event_sink(Arc::new(MemoryEventSink::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_event_feed_keeps_the_contract() {
    let sink = Arc::new(MemoryEventSink::new());
    conformance::check_event_feed(sink.clone(), sink).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_webhook_store_keeps_the_contract() {
    let store = Arc::new(MemoryWebhookStore::new());
    conformance::check_webhook_store(store.clone()).await;
    // Again on the same store: the checks leave nothing due behind them.
    conformance::check_webhook_store(store).await;
}
