//! The JetStream event sink against the NATS server of `NATS_URL`: the
//! feed contract, acknowledgement, idempotency by message id, batches as
//! one message, and outages answered fast. Each test uses a stream of its
//! own, deleted at the end.
#![cfg(all(feature = "nats", feature = "external-tests"))]

use std::sync::Arc;
use std::time::{Duration, Instant};

use conversion_gateway::{
    AccountId, ClientId, EventFeed, EventSink, EventSubmission, FeedCursor, IdempotencyClaim,
    IdempotencyScope, IntakeChannel, NatsEventSink, NatsOptions, OsRandom, RecordOutcome,
    RecordedEvent, StoreError, conformance, random_uuid,
};
use time::macros::datetime;

const NO_NATS: &str = "NATS_URL is not set: the JetStream sink's tests need a NATS server with JetStream. Start one, e.g.
    docker run --rm -p 4222:4222 nats:2 -js
(or install nats-server and run `nats-server -js`), then
    export NATS_URL=nats://127.0.0.1:4222";

fn nats_url() -> String {
    match std::env::var("NATS_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => panic!("{NO_NATS}"),
    }
}

/// A sink on a stream of its own; the stream is deleted when the test
/// calls `done`.
struct TestStream {
    sink: Arc<NatsEventSink>,
    name: String,
}

impl TestStream {
    async fn new() -> Self {
        Self::with_window(NatsOptions::default().duplicate_window).await
    }

    /// A stream whose duplicate window is `window`.
    async fn with_window(window: Duration) -> Self {
        let id = random_uuid(&OsRandom).simple().to_string();
        let mut options = NatsOptions::default();
        options.duplicate_window = window;
        options.stream = format!("CG_TEST_{id}");
        options.subject_prefix = format!("cgtest{id}");
        let name = options.stream.clone();
        let sink = NatsEventSink::connect(&nats_url(), options)
            .await
            .expect("connect to NATS JetStream");
        Self {
            sink: Arc::new(sink),
            name,
        }
    }

    async fn done(self) {
        let client = async_nats::connect(nats_url()).await.expect("connect");
        let _ = async_nats::jetstream::new(client)
            .delete_stream(&self.name)
            .await;
    }
}

fn event(account: AccountId, n: usize) -> RecordedEvent {
    RecordedEvent {
        event_uuid: random_uuid(&OsRandom),
        account_id: account,
        received_at: datetime!(2026-03-01 12:00:00.123456 UTC),
        event_type: "CONVERSION".into(),
        event_family: "CDP".into(),
        conversion_identifier: format!("js-{n}"),
        email: format!("lead{n}@example.com"),
        payload: serde_json::json!({"conversion_identifier": format!("js-{n}"), "email": format!("lead{n}@example.com")}).into(),
        channel: IntakeChannel::Bearer {
            client_id: ClientId::new("cgid_js"),
        },
    }
}

/// Records one submission of each size in `sizes` (a batch when over one
/// event), numbering the events on: every event recorded, in order.
async fn record_sizes(
    sink: &NatsEventSink,
    account: AccountId,
    sizes: impl IntoIterator<Item = usize>,
) -> Vec<RecordedEvent> {
    let mut events = Vec::new();
    for size in sizes {
        let submission = EventSubmission {
            events: (events.len()..events.len() + size)
                .map(|n| event(account, n))
                .collect(),
            batch_uuid: (size > 1).then(|| random_uuid(&OsRandom)),
            idempotency: None,
        };
        sink.record(&submission).await.unwrap();
        events.extend(submission.events);
    }
    events
}

fn claim(account: AccountId, key: &str, fingerprint: u8) -> IdempotencyClaim {
    let now = datetime!(2026-03-01 12:00 UTC);
    IdempotencyClaim {
        account_id: account,
        scope: IdempotencyScope::Client(ClientId::new("cgid_js")),
        key: key.into(),
        fingerprint: [fingerprint; 32],
        created_at: now,
        expires_at: now + time::Duration::hours(24),
    }
}

/// [`claim`] of `key`, made `generation` days (retentions) later.
fn claim_in_generation(
    account: AccountId,
    key: &str,
    generation: i64,
    fingerprint: u8,
) -> IdempotencyClaim {
    let mut claim = claim(account, key, fingerprint);
    let shift = time::Duration::hours(24 * generation);
    claim.created_at += shift;
    claim.expires_at += shift;
    claim
}

/// Event `n`, submitted under [`claim_in_generation`].
fn keyed_in_generation(
    account: AccountId,
    key: &str,
    generation: i64,
    fingerprint: u8,
    n: usize,
) -> EventSubmission {
    EventSubmission {
        events: vec![event(account, n)],
        batch_uuid: None,
        idempotency: Some(claim_in_generation(account, key, generation, fingerprint)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_jetstream_feed_keeps_the_contract() {
    let stream = TestStream::new().await;
    conformance::check_event_feed(stream.sink.clone(), stream.sink.clone()).await;
    stream.done().await;
}

#[tokio::test]
async fn a_batch_is_one_message_read_back_event_by_event() {
    let stream = TestStream::new().await;
    let account = AccountId(random_uuid(&OsRandom));
    let batch = EventSubmission {
        events: (0..3).map(|n| event(account, n)).collect(),
        batch_uuid: Some(random_uuid(&OsRandom)),
        idempotency: None,
    };
    assert_eq!(
        stream.sink.record(&batch).await.unwrap(),
        RecordOutcome::Recorded
    );
    let page = stream
        .sink
        .read_after(&FeedCursor::start(), 2)
        .await
        .unwrap();
    assert_eq!(
        page.events,
        batch.events[..2],
        "whole, in order, at most the limit"
    );
    let rest = stream.sink.read_after(&page.next, 10).await.unwrap();
    assert_eq!(rest.events, batch.events[2..], "the rest of the message");
    let none = stream.sink.read_after(&rest.next, 10).await.unwrap();
    assert!(none.events.is_empty());
    assert_eq!(none.next, rest.next);
    // Published again (a retry after a lost acknowledgement): refused as a
    // duplicate, not stored twice.
    let again = stream.sink.record(&batch).await;
    assert!(
        matches!(again, Err(StoreError::Duplicate { what: "event" })),
        "{again:?}"
    );
    assert!(
        stream
            .sink
            .read_after(&rest.next, 10)
            .await
            .unwrap()
            .events
            .is_empty()
    );
    stream.done().await;
}

/// Skipping reads the messages' headers only (the `Cg-Events` count) and
/// passes exactly what reading passes, inside a batch's message too.
#[tokio::test]
async fn skipping_passes_batches_event_by_event_as_reading_does() {
    let stream = TestStream::new().await;
    let account = AccountId(random_uuid(&OsRandom));
    let events = record_sizes(&stream.sink, account, [1, 3, 1, 4]).await;
    let all = stream
        .sink
        .read_after(&FeedCursor::start(), 100)
        .await
        .unwrap();
    assert_eq!(all.events, events, "every event, in order");
    for from in 0..events.len() {
        let start = FeedCursor::start();
        let cursor = stream.sink.read_after(&start, from).await.unwrap().next;
        for limit in 0..=events.len() - from + 1 {
            let read = stream.sink.read_after(&cursor, limit).await.unwrap();
            assert_eq!(
                read.events,
                events[from..(from + limit).min(events.len())],
                "read {limit} after {from}"
            );
            let skipped = stream.sink.skip_after(&cursor, limit).await.unwrap();
            assert_eq!(
                skipped,
                (read.next, read.events.len()),
                "skip {limit} after {from}"
            );
        }
    }
    stream.done().await;
}

/// Passing by jumps to the end of the stream in two requests, whatever
/// the limit, and counts the messages it moved past; inside the last
/// message it counts the events left there.
#[tokio::test]
async fn passing_by_jumps_to_the_end_and_counts_messages() {
    let stream = TestStream::new().await;
    let account = AccountId(random_uuid(&OsRandom));
    let start = FeedCursor::start();
    assert_eq!(
        stream.sink.pass_by(&start, 10).await.unwrap(),
        (start.clone(), 0),
        "an empty stream"
    );
    record_sizes(&stream.sink, account, [2, 1, 3]).await;
    let all = stream.sink.read_after(&start, 100).await.unwrap();
    assert_eq!(all.events.len(), 6);
    assert_eq!(
        stream.sink.pass_by(&start, 1).await.unwrap(),
        (all.next.clone(), 3),
        "three messages, to the end, past the limit"
    );
    let one = stream.sink.read_after(&start, 1).await.unwrap();
    assert_eq!(
        stream.sink.pass_by(&one.next, 100).await.unwrap(),
        (all.next.clone(), 2),
        "from inside the first message: two messages on"
    );
    let four = stream.sink.read_after(&start, 4).await.unwrap();
    assert_eq!(
        stream.sink.pass_by(&four.next, 100).await.unwrap(),
        (all.next.clone(), 2),
        "inside the last message: the two events left in it"
    );
    assert_eq!(
        stream.sink.pass_by(&all.next, 100).await.unwrap(),
        (all.next.clone(), 0)
    );
    stream.done().await;
}

/// A message without the `Cg-Events` header (written before the sink set
/// it) is counted from its body when skipped, and read as any other.
#[tokio::test]
async fn a_message_without_its_count_is_counted_from_its_body() {
    let stream = TestStream::new().await;
    let account = AccountId(random_uuid(&OsRandom));
    let old: Vec<RecordedEvent> = (0..2).map(|n| event(account, n)).collect();
    let client = async_nats::connect(nats_url()).await.expect("connect");
    let subject = format!(
        "cgtest{}.{}",
        &stream.name["CG_TEST_".len()..],
        account.0.simple()
    );
    let body = serde_json::json!({ "batch_uuid": null, "events": old });
    async_nats::jetstream::new(client)
        .publish(subject, serde_json::to_vec(&body).unwrap().into())
        .await
        .expect("publish")
        .await
        .expect("stored");
    // A cursor inside it while it is the stream's last message: its body
    // tells that one event is left.
    let start = FeedCursor::start();
    let first = stream.sink.read_after(&start, 1).await.unwrap();
    assert_eq!(first.events, old[..1]);
    let rest = stream.sink.read_after(&first.next, 10).await.unwrap();
    assert_eq!(rest.events, old[1..]);
    assert_eq!(
        stream.sink.skip_after(&first.next, 10).await.unwrap(),
        (rest.next.clone(), 1)
    );
    let none = stream.sink.skip_after(&rest.next, 10).await.unwrap();
    assert_eq!(none, (rest.next, 0));
    let new = EventSubmission {
        events: vec![event(account, 2)],
        batch_uuid: None,
        idempotency: None,
    };
    stream.sink.record(&new).await.unwrap();
    let read = stream
        .sink
        .read_after(&FeedCursor::start(), 10)
        .await
        .unwrap();
    assert_eq!(read.events[..2], old);
    assert_eq!(read.events[2..], new.events);
    for limit in 1..=4 {
        let read = stream
            .sink
            .read_after(&FeedCursor::start(), limit)
            .await
            .unwrap();
        assert_eq!(
            stream
                .sink
                .skip_after(&FeedCursor::start(), limit)
                .await
                .unwrap(),
            (read.next, read.events.len()),
            "limit {limit}"
        );
    }
    stream.done().await;
}

/// One call reads past what one fetch asks for (256 messages), and stops
/// at its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_read_spans_several_fetches() {
    let stream = TestStream::new().await;
    let account = AccountId(random_uuid(&OsRandom));
    let events = record_sizes(&stream.sink, account, [1; 600]).await;
    let page = stream
        .sink
        .read_after(&FeedCursor::start(), 550)
        .await
        .unwrap();
    assert_eq!(page.events, events[..550]);
    let rest = stream.sink.read_after(&page.next, 1000).await.unwrap();
    assert_eq!(rest.events, events[550..]);
    assert_eq!(
        stream
            .sink
            .skip_after(&FeedCursor::start(), 1000)
            .await
            .unwrap(),
        (rest.next, 600)
    );
    stream.done().await;
}

/// A key whose claim expired by its own time (the retention it carries)
/// is free, as on the other stores, even while JetStream's duplicate
/// window, counted from when it stored the first message, still holds the
/// message id: the new request is recorded, under an id of the claim's
/// next generation; its retries replay it, another body is refused, and
/// once that claim expires too, a third generation is recorded.
#[tokio::test]
async fn an_expired_key_is_recorded_again_within_the_duplicate_window() {
    let stream = TestStream::new().await;
    let account = AccountId(random_uuid(&OsRandom));
    let in_generation =
        |generation, fingerprint| claim_in_generation(account, "renewed", generation, fingerprint);
    let submission = |generation, fingerprint, n| {
        keyed_in_generation(account, "renewed", generation, fingerprint, n)
    };
    let first = submission(0, 1, 1);
    assert_eq!(
        stream.sink.record(&first).await.unwrap(),
        RecordOutcome::Recorded
    );
    // Made as the first claim expires, with another body.
    let second = submission(1, 2, 2);
    assert_eq!(
        stream.sink.record(&second).await.unwrap(),
        RecordOutcome::Recorded,
        "an expired key is free"
    );
    let replay = |recorded: &EventSubmission| RecordOutcome::Replayed {
        event_uuids: vec![recorded.events[0].event_uuid],
        batch_uuid: None,
    };
    assert_eq!(
        stream.sink.record(&submission(1, 2, 3)).await.unwrap(),
        replay(&second),
        "a retry of the new request replays it"
    );
    assert_eq!(
        stream.sink.record(&submission(1, 3, 4)).await.unwrap(),
        RecordOutcome::KeyReused,
        "the new claim holds against another body"
    );
    assert_eq!(
        stream.sink.check_claim(&in_generation(1, 2)).await.unwrap(),
        Some(replay(&second))
    );
    let third = submission(2, 5, 5);
    assert_eq!(
        stream.sink.record(&third).await.unwrap(),
        RecordOutcome::Recorded,
        "and expires in its turn"
    );
    assert_eq!(
        stream.sink.record(&submission(2, 5, 6)).await.unwrap(),
        replay(&third)
    );
    let page = stream
        .sink
        .read_after(&FeedCursor::start(), 10)
        .await
        .unwrap();
    let recorded: Vec<_> = [&first, &second, &third]
        .iter()
        .map(|submission| submission.events[0].clone())
        .collect();
    assert_eq!(page.events, recorded, "one message per generation");
    stream.done().await;
}

/// A key's claim that cannot be read (here its stream was deleted under
/// the sink) is a backend failure, never taken for a key with no claim:
/// `check_claim` and a keyed `record` fail, retryable.
#[tokio::test]
async fn a_claim_that_cannot_be_read_is_a_backend_error() {
    let stream = TestStream::new().await;
    let account = AccountId(random_uuid(&OsRandom));
    let client = async_nats::connect(nats_url()).await.expect("connect");
    async_nats::jetstream::new(client)
        .delete_stream(&stream.name)
        .await
        .expect("delete the stream");
    let checked = stream
        .sink
        .check_claim(&claim(account, "unreadable", 1))
        .await;
    assert!(
        matches!(&checked, Err(StoreError::Backend { .. })),
        "{checked:?}"
    );
    let recorded = stream
        .sink
        .record(&keyed_in_generation(account, "unreadable", 0, 1, 1))
        .await;
    match recorded {
        Err(error @ StoreError::Backend { .. }) => assert!(error.is_retryable(), "{error:?}"),
        other => panic!("a keyed record without its stream is a backend error, got {other:?}"),
    }
    stream.done().await;
}

/// A key's claims are answered by the latest, whatever JetStream's
/// duplicate window still holds: once the first claim's message id has
/// left the window, a request under a later, live claim is still a retry
/// of that claim (replayed, or refused with another body), never recorded
/// beside it.
#[tokio::test]
async fn a_later_claim_holds_after_the_first_id_leaves_the_window() {
    let window = Duration::from_secs(2);
    let stream = TestStream::with_window(window).await;
    let account = AccountId(random_uuid(&OsRandom));
    let submission = |generation, fingerprint, n| {
        keyed_in_generation(account, "outlived", generation, fingerprint, n)
    };
    assert_eq!(
        stream.sink.record(&submission(0, 1, 1)).await.unwrap(),
        RecordOutcome::Recorded
    );
    let second = submission(1, 2, 2);
    assert_eq!(
        stream.sink.record(&second).await.unwrap(),
        RecordOutcome::Recorded
    );
    // Both message ids leave the window; the second claim is live.
    tokio::time::sleep(window + Duration::from_millis(500)).await;
    let mut retry = submission(1, 2, 3);
    retry.idempotency.as_mut().unwrap().created_at += time::Duration::hours(1);
    assert_eq!(
        stream.sink.record(&retry).await.unwrap(),
        RecordOutcome::Replayed {
            event_uuids: vec![second.events[0].event_uuid],
            batch_uuid: None,
        },
        "a retry of the live claim replays it"
    );
    assert_eq!(
        stream.sink.record(&submission(1, 9, 4)).await.unwrap(),
        RecordOutcome::KeyReused,
        "and another body is refused"
    );
    let page = stream
        .sink
        .read_after(&FeedCursor::start(), 10)
        .await
        .unwrap();
    assert_eq!(page.events.len(), 2, "nothing recorded beside the claims");
    stream.done().await;
}

#[tokio::test]
async fn an_idempotency_key_replays_its_first_uuids_and_refuses_another_body() {
    let stream = TestStream::new().await;
    let account = AccountId(random_uuid(&OsRandom));
    let first = EventSubmission {
        events: vec![event(account, 1), event(account, 2)],
        batch_uuid: Some(random_uuid(&OsRandom)),
        idempotency: Some(claim(account, "retry-1", 7)),
    };
    assert_eq!(
        stream.sink.record(&first).await.unwrap(),
        RecordOutcome::Recorded
    );
    let replayed = RecordOutcome::Replayed {
        event_uuids: first.events.iter().map(|e| e.event_uuid).collect(),
        batch_uuid: first.batch_uuid,
    };
    let retry = EventSubmission {
        events: vec![event(account, 3), event(account, 4)],
        batch_uuid: Some(random_uuid(&OsRandom)),
        idempotency: Some(claim(account, "retry-1", 7)),
    };
    assert_eq!(stream.sink.record(&retry).await.unwrap(), replayed);
    let other_body = EventSubmission {
        idempotency: Some(claim(account, "retry-1", 8)),
        ..retry.clone()
    };
    assert_eq!(
        stream.sink.record(&other_body).await.unwrap(),
        RecordOutcome::KeyReused
    );
    assert_eq!(
        stream
            .sink
            .check_claim(&claim(account, "retry-1", 7))
            .await
            .unwrap(),
        Some(replayed)
    );
    assert_eq!(
        stream
            .sink
            .check_claim(&claim(account, "retry-1", 8))
            .await
            .unwrap(),
        Some(RecordOutcome::KeyReused)
    );
    assert_eq!(
        stream
            .sink
            .check_claim(&claim(account, "never", 7))
            .await
            .unwrap(),
        None
    );
    // Only the first submission's events are in the stream.
    let page = stream
        .sink
        .read_after(&FeedCursor::start(), 10)
        .await
        .unwrap();
    assert_eq!(page.events, first.events);
    // Another account's key of the same name is its own.
    let elsewhere = AccountId(random_uuid(&OsRandom));
    let theirs = EventSubmission {
        events: vec![event(elsewhere, 5)],
        batch_uuid: None,
        idempotency: Some(claim(elsewhere, "retry-1", 7)),
    };
    assert_eq!(
        stream.sink.record(&theirs).await.unwrap(),
        RecordOutcome::Recorded
    );
    stream.done().await;
}

#[tokio::test]
async fn an_unreachable_server_fails_fast_with_a_backend_error() {
    let mut options = NatsOptions::default();
    options.timeout = Duration::from_millis(500);
    let started = Instant::now();
    // Nothing listens on port 1.
    let outcome = NatsEventSink::connect("nats://127.0.0.1:1", options).await;
    assert!(
        matches!(outcome, Err(StoreError::Backend { .. })),
        "{outcome:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn events_are_not_looked_up_by_uuid() {
    let stream = TestStream::new().await;
    let found = stream.sink.find_event(random_uuid(&OsRandom)).await;
    assert!(
        matches!(found, Err(StoreError::Backend { .. })),
        "{found:?}"
    );
    assert_eq!(
        stream
            .sink
            .purge_expired_claims(datetime!(2026-03-01 12:00 UTC), 10)
            .await
            .unwrap(),
        0
    );
    stream.done().await;
}
