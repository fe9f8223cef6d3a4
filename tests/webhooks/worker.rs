//! The delivery loop (`deliver_webhooks`): attempts run in parallel, a
//! receiver that hangs for its whole timeout delays no other webhook, and
//! under a flood the dispatcher steps once a poll.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use conversion_gateway::{
    EventFeed, FeedCursor, FeedPage, RetrySchedule, StoreError, Stores, WebhookWorker,
    deliver_webhooks,
};

use crate::support::Hooks;

#[tokio::test(start_paused = true)]
async fn a_hanging_receiver_delays_no_other_webhook() {
    let t = Hooks::new().await;
    t.register("https://slow.example.com/in").await;
    t.register("https://fast.example.com/in").await;
    t.receiver.clear();
    t.receiver
        .delay("https://slow.example.com/in", Duration::from_secs(5));
    for n in 0..20 {
        t.convert(&format!("lead{n}@example.com"), "signup").await;
    }
    let worker = tokio::spawn(deliver_webhooks(
        Arc::clone(&t.f.gateway),
        WebhookWorker::default(),
    ));
    // Within a second, every delivery to the fast receiver is made, while
    // the slow one holds at most its share of attempts.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let fast = t.receiver.bodies_to("https://fast.example.com/in").len();
    let slow = t.receiver.bodies_to("https://slow.example.com/in").len();
    assert_eq!(fast, 20);
    assert!(
        slow <= 2 * WebhookWorker::default().max_in_flight_per_webhook,
        "{slow}"
    );
    // Given time, the slow one gets all of its deliveries too.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        t.receiver.bodies_to("https://slow.example.com/in").len(),
        20
    );
    assert_eq!(t.gateway().webhook_backlog().await.unwrap(), 0);
    worker.abort();
}

/// A feed under a flood: every step finds one more event after the last
/// (as events keep committing while the dispatcher writes its cursor).
#[derive(Default)]
struct Flooded {
    skips: AtomicUsize,
}

#[async_trait::async_trait]
impl EventFeed for Flooded {
    async fn read_after(&self, cursor: &FeedCursor, limit: usize) -> Result<FeedPage, StoreError> {
        unreachable!("no webhook wants conversions: read_after({cursor:?}, {limit})")
    }

    async fn skip_after(
        &self,
        _cursor: &FeedCursor,
        _limit: usize,
    ) -> Result<(FeedCursor, usize), StoreError> {
        let step = self.skips.fetch_add(1, Ordering::SeqCst) + 1;
        Ok((FeedCursor::new(format!("mem:{step}")), 1))
    }
}

#[tokio::test(start_paused = true)]
async fn under_a_flood_the_dispatcher_steps_once_a_poll_not_after_every_event() {
    let feed = Arc::new(Flooded::default());
    let mut stores = Stores::in_memory();
    stores.feed = feed.clone();
    let t = Hooks::on(stores, RetrySchedule::default()).await;
    let worker = tokio::spawn(deliver_webhooks(
        Arc::clone(&t.f.gateway),
        WebhookWorker::default(),
    ));
    // Four polls of 250 ms and the first, at once.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    worker.abort();
    let steps = feed.skips.load(Ordering::SeqCst);
    assert!(
        (4..=5).contains(&steps),
        "one step a poll, each passing what waits then; {steps} steps"
    );
}
