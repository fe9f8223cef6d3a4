//! The [`EventFeed`] checks: commit order, resuming from a cursor, foreign
//! cursors, and that no event is skipped while writers commit concurrently.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use uuid::Uuid;

use crate::account::AccountId;
use crate::random::{OsRandom, random_uuid};
use crate::records::event::{EventSubmission, RecordOutcome, RecordedEvent};
use crate::store::EventSink;
use crate::store::error::StoreError;
use crate::store::feed::{EventFeed, FeedCursor};

use super::fixtures::new_event;

/// How long the feed may take to show events already acknowledged (a
/// store may hold back events of transactions still running).
const SETTLE: StdDuration = StdDuration::from_secs(10);

/// Records `event` alone.
async fn record(sink: &dyn EventSink, event: RecordedEvent) {
    let submission = EventSubmission {
        events: vec![event],
        batch_uuid: None,
        idempotency: None,
    };
    assert_eq!(
        sink.record(&submission).await.expect("record"),
        RecordOutcome::Recorded
    );
}

/// Reads from `cursor` in pages of `limit` until the feed is empty; the
/// events of `account`, and the cursor at the end.
async fn drain(
    feed: &dyn EventFeed,
    mut cursor: FeedCursor,
    limit: usize,
    account: AccountId,
) -> (Vec<RecordedEvent>, FeedCursor) {
    let mut seen = Vec::new();
    loop {
        let page = feed.read_after(&cursor, limit).await.expect("read_after");
        assert!(
            page.events.len() <= limit,
            "read_after: at most `limit` events"
        );
        let empty = page.events.is_empty();
        if empty {
            assert_eq!(page.next, cursor, "an empty page keeps the cursor");
        }
        seen.extend(page.events.into_iter().filter(|e| e.account_id == account));
        cursor = page.next;
        if empty {
            return (seen, cursor);
        }
    }
}

/// Events read back whole, in the order they were recorded one after the
/// other; a cursor resumes after what it has read; a foreign one is
/// refused.
pub(super) async fn check_feed_order(sink: &dyn EventSink, feed: &dyn EventFeed) {
    let account = AccountId(random_uuid(&OsRandom));
    let (_, before) = drain(feed, FeedCursor::start(), 500, account).await;
    let events: Vec<_> = (0..5).map(|n| new_event(account, n)).collect();
    for event in &events {
        record(sink, event.clone()).await;
    }
    let mut read = Vec::new();
    let mut cursor = before.clone();
    let deadline = std::time::Instant::now() + SETTLE;
    while read.len() < events.len() {
        let (more, next) = drain(feed, cursor, 2, account).await;
        read.extend(more);
        cursor = next;
        assert!(
            std::time::Instant::now() < deadline,
            "the feed never showed every event: {} of {}",
            read.len(),
            events.len()
        );
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    assert_eq!(
        read, events,
        "the feed gives every event whole, in commit order"
    );

    // Resuming from a cursor in the middle gives what follows it (again).
    let first = feed.read_after(&before, 1).await.expect("read_after");
    let (rest, _) = drain(feed, first.next.clone(), 2, account).await;
    let resumed: Vec<_> = first
        .events
        .iter()
        .filter(|e| e.account_id == account)
        .chain(rest.iter())
        .cloned()
        .collect();
    assert!(
        resumed.ends_with(&events[events.len() - rest.len()..]),
        "a resumed read continues after its cursor"
    );
    assert!(!rest.is_empty() || first.events.len() == 1);

    // Skipping passes what reading passes: the same cursor after the same
    // events (settled: every event before ours is visible once ours are).
    for limit in 1..=events.len() {
        let page = feed.read_after(&before, limit).await.expect("read_after");
        let skipped = feed.skip_after(&before, limit).await.expect("skip_after");
        assert_eq!(
            skipped,
            (page.next.clone(), page.events.len()),
            "skip_after passes the events read_after reads, limit {limit}"
        );
        assert_eq!(skipped.1, limit, "at least our events follow the cursor");
    }
    let (_, end) = drain(feed, before.clone(), 500, account).await;
    assert_eq!(
        feed.skip_after(&end, 10).await.expect("skip_after"),
        (end.clone(), 0),
        "nothing to skip at the end: the cursor stays"
    );
    // Passing by, without counting: where reading everything ends.
    let (passed_to, passed) = feed.pass_by(&before, 100_000).await.expect("pass_by");
    assert_eq!(passed_to, end, "pass_by ends where reading everything does");
    assert!(passed >= 1, "pass_by counts what it passed: {passed}");
    assert_eq!(
        feed.pass_by(&end, 100_000).await.expect("pass_by"),
        (end.clone(), 0),
        "nothing to pass at the end: the cursor stays"
    );
    let foreign = feed
        .pass_by(&FeedCursor::new("someone-else:cursor"), 10)
        .await;
    assert!(
        matches!(foreign, Err(StoreError::Rejected { .. })),
        "pass_by: a cursor the store did not write is Rejected, got {foreign:?}"
    );
    let foreign = feed
        .skip_after(&FeedCursor::new("someone-else:cursor"), 10)
        .await;
    assert!(
        matches!(foreign, Err(StoreError::Rejected { .. })),
        "skip_after: a cursor the store did not write is Rejected, got {foreign:?}"
    );

    let foreign = feed
        .read_after(&FeedCursor::new("someone-else:cursor"), 10)
        .await;
    assert!(
        matches!(foreign, Err(StoreError::Rejected { .. })),
        "read_after: a cursor the store did not write is Rejected, got {foreign:?}"
    );
}

/// Writers commit while a reader follows the feed with one cursor: every
/// acknowledged event shows up, none twice in one pass.
pub(super) async fn check_feed_under_concurrent_writers(
    sink: Arc<dyn EventSink>,
    feed: Arc<dyn EventFeed>,
) {
    const WRITERS: usize = 16;
    const EACH: usize = 40;
    let account = AccountId(random_uuid(&OsRandom));
    let (_, start) = drain(&*feed, FeedCursor::start(), 500, account).await;
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let sink = sink.clone();
            tokio::spawn(async move {
                let mut acknowledged = Vec::with_capacity(EACH);
                for n in 0..EACH {
                    let event = new_event(account, w * EACH + n);
                    acknowledged.push(event.event_uuid);
                    record(&*sink, event).await;
                }
                acknowledged
            })
        })
        .collect();
    let reader = {
        let (feed, start) = (feed.clone(), start.clone());
        tokio::spawn(async move {
            let mut seen: Vec<Uuid> = Vec::new();
            let mut cursor = start;
            let deadline = std::time::Instant::now() + SETTLE * 3;
            while seen.len() < WRITERS * EACH && std::time::Instant::now() < deadline {
                let page = feed.read_after(&cursor, 7).await.expect("read_after");
                seen.extend(
                    page.events
                        .iter()
                        .filter(|e| e.account_id == account)
                        .map(|e| e.event_uuid),
                );
                if page.events.is_empty() {
                    tokio::time::sleep(StdDuration::from_millis(2)).await;
                }
                cursor = page.next;
            }
            seen
        })
    };
    // A consumer that passes events by with `skip_after` while they
    // commit; each of its steps is read again once the writers are done.
    let skipper = {
        let feed = feed.clone();
        tokio::spawn(async move {
            let mut steps = Vec::new();
            let (mut cursor, mut skipped) = (start, 0);
            let deadline = std::time::Instant::now() + SETTLE * 3;
            while skipped < WRITERS * EACH && std::time::Instant::now() < deadline {
                let (next, passed) = feed.skip_after(&cursor, 5).await.expect("skip_after");
                assert!(passed <= 5, "skip_after: at most `limit` events");
                if passed == 0 {
                    assert_eq!(next, cursor, "nothing passed keeps the cursor");
                    tokio::time::sleep(StdDuration::from_millis(2)).await;
                    continue;
                }
                skipped += passed;
                steps.push((cursor, passed, next.clone()));
                cursor = next;
            }
            (steps, skipped)
        })
    };
    let mut acknowledged = HashSet::new();
    for writer in writers {
        acknowledged.extend(writer.await.expect("a writer"));
    }
    let (steps, skipped) = skipper.await.expect("the skipper");
    assert!(
        skipped >= acknowledged.len(),
        "skip_after passed {skipped} events of at least {}",
        acknowledged.len()
    );
    // Were an event to commit behind a skip's cursor, reading the step
    // again would give it, and stop short of that cursor.
    for (from, passed, next) in &steps {
        let page = feed.read_after(from, *passed).await.expect("read_after");
        assert_eq!(
            (&page.next, page.events.len()),
            (next, *passed),
            "a step of skip_after, read again, passes the same events"
        );
    }
    let seen = reader.await.expect("the reader");
    let distinct: HashSet<_> = seen.iter().copied().collect();
    assert_eq!(distinct.len(), seen.len(), "no event twice in one pass");
    let missing: Vec<_> = acknowledged.difference(&distinct).collect();
    assert!(
        missing.is_empty(),
        "the feed skipped {} acknowledged events (committed behind the cursor): {missing:?}",
        missing.len()
    );
}
