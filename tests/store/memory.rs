//! The in-memory stores keep the storage contract, concurrency included.
#![cfg(feature = "test-util")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use conversion_gateway::conformance;
use conversion_gateway::{
    AccountId, EventFeed, EventSink, EventSubmission, FeedCursor, FeedPage, IntakeChannel,
    MemoryAccountStore, MemoryApiKeyStore, MemoryClientRegistry, MemoryEventSink, MemoryTokenStore,
    MemoryWebhookStore, OsRandom, RecordedEvent, StoreError, random_uuid,
};
use time::macros::datetime;

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

/// A feed that implements `read_after` only (over the memory feed), so
/// that `skip_after` is the trait's default; it notes the largest page
/// asked for.
struct ReadOnlyFeed {
    inner: Arc<MemoryEventSink>,
    largest_read: AtomicUsize,
}

#[async_trait::async_trait]
impl EventFeed for ReadOnlyFeed {
    async fn read_after(&self, cursor: &FeedCursor, limit: usize) -> Result<FeedPage, StoreError> {
        self.largest_read.fetch_max(limit, Ordering::SeqCst);
        self.inner.read_after(cursor, limit).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_default_skip_after_keeps_the_contract() {
    let sink = Arc::new(MemoryEventSink::new());
    let feed = Arc::new(ReadOnlyFeed {
        inner: sink.clone(),
        largest_read: AtomicUsize::new(0),
    });
    conformance::check_event_feed(sink, feed).await;
}

#[tokio::test]
async fn the_default_skip_after_reads_a_large_limit_a_page_at_a_time() {
    let sink = Arc::new(MemoryEventSink::new());
    let account = AccountId(random_uuid(&OsRandom));
    for batch in 0..12 {
        let events = (0..100)
            .map(|n| lead(account, &format!("lead{batch}-{n}@example.com")))
            .collect();
        let submission = EventSubmission {
            events,
            batch_uuid: Some(random_uuid(&OsRandom)),
            idempotency: None,
        };
        sink.record(&submission).await.expect("record");
    }
    let feed = ReadOnlyFeed {
        inner: sink.clone(),
        largest_read: AtomicUsize::new(0),
    };
    let start = FeedCursor::start();
    for limit in [1, 500, 501, 1_150, 1_200, 100_000] {
        let read = sink.read_after(&start, limit).await.expect("read_after");
        assert_eq!(
            feed.skip_after(&start, limit).await.expect("skip_after"),
            (read.next, read.events.len()),
            "the default passes what one read of {limit} would"
        );
    }
    assert_eq!(
        feed.largest_read.load(Ordering::SeqCst),
        500,
        "never more than 500 events read at once"
    );
}

/// A typical event of `account` whose e-mail is `email`.
fn lead(account: AccountId, email: &str) -> RecordedEvent {
    RecordedEvent {
        event_uuid: random_uuid(&OsRandom),
        account_id: account,
        received_at: datetime!(2026-03-01 12:00 UTC),
        event_type: "CONVERSION".into(),
        event_family: "CDP".into(),
        conversion_identifier: "signup".into(),
        email: email.into(),
        payload: serde_json::json!({ "conversion_identifier": "signup", "email": email }).into(),
        channel: IntakeChannel::ApiKey,
    }
}

/// The bytes of text the memory sink keeps for `event`.
fn text_bytes(event: &RecordedEvent) -> usize {
    event.event_type.len()
        + event.event_family.len()
        + event.conversion_identifier.len()
        + event.email.len()
        + event.payload.as_str().len()
}

#[tokio::test]
async fn a_memory_sink_refuses_events_over_its_text_limit_and_records_nothing_of_their_batch() {
    let account = AccountId(random_uuid(&OsRandom));
    let small = lead(account, "a@example.com");
    let large = lead(account, "a-much-longer-address@example.com");
    let sink = MemoryEventSink::new().with_max_event_text(text_bytes(&small));
    let batch = EventSubmission {
        events: vec![small.clone(), large.clone()],
        batch_uuid: Some(random_uuid(&OsRandom)),
        idempotency: None,
    };
    let refused = sink.record(&batch).await.expect_err("one event too large");
    assert!(
        matches!(refused, StoreError::Rejected { .. }),
        "{refused:?}"
    );
    assert!(!refused.is_retryable());
    assert!(sink.is_empty(), "all or nothing");
    let alone = EventSubmission {
        events: vec![large.clone()],
        batch_uuid: None,
        idempotency: None,
    };
    assert!(matches!(
        sink.record(&alone).await,
        Err(StoreError::Rejected { .. })
    ));
    // An event of exactly the limit is kept.
    let fits = EventSubmission {
        events: vec![small.clone()],
        batch_uuid: None,
        idempotency: None,
    };
    sink.record(&fits).await.expect("within the limit");
    assert_eq!(
        sink.find_event(small.event_uuid).await.unwrap(),
        Some(small)
    );
    assert_eq!(sink.find_event(large.event_uuid).await.unwrap(), None);
    assert_eq!(sink.len(), 1);
}

#[tokio::test]
async fn a_memory_sinks_text_limit_cannot_exceed_its_32_bit_offsets() {
    // A limit over 4 GiB is the offsets' 4 GiB: an ordinary event still fits.
    let sink = MemoryEventSink::new().with_max_event_text(usize::MAX);
    let event = lead(AccountId(random_uuid(&OsRandom)), "a@example.com");
    let submission = EventSubmission {
        events: vec![event.clone()],
        batch_uuid: None,
        idempotency: None,
    };
    sink.record(&submission).await.expect("fits");
    assert_eq!(sink.len(), 1);
}
