//! Deliveries, stepped on the manual clock: what is delivered to whom,
//! signed how, retried when, given up when, and in which order.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use conversion_gateway::{
    AccountId, AttemptRecord, Clock, DISPATCH_PAGE, Delivery, DeliveryId, DeliveryNext,
    DeliveryState, EventFeed, FeedCursor, FeedPage, LeasedDelivery, MemoryEventSink, RetrySchedule,
    SendOutcome, StoreError, Stores, Webhook, WebhookChange, WebhookId, WebhookStatus,
    WebhookStore, WebhookWrite,
};
use serde_json::json;
use time::OffsetDateTime;

use crate::support::{Hooks, header, signed_by, status};

const URL: &str = "https://hooks.example.com/in";

#[tokio::test]
async fn every_conversion_is_delivered_signed_in_the_real_services_shape() {
    let t = Hooks::new().await;
    let created = t.register(URL).await;
    let secret = created["secret"].as_str().unwrap().to_owned();
    t.receiver.clear();
    t.f.clock.advance(time::Duration::seconds(10));
    t.convert("Lead@Example.com", "newsletter-signup").await;

    let round = t.gateway().run_webhooks_once().await.unwrap();
    assert_eq!(round.events_dispatched, 1);
    assert_eq!(round.attempts.len(), 1);
    assert_eq!(round.attempts[0].next, DeliveryNext::Delivered);
    assert_eq!(round.attempts[0].change, WebhookChange::Succeeded);

    let sent = t.receiver.sent();
    assert_eq!(sent.len(), 1);
    let request = &sent[0];
    assert_eq!(request.url, URL);
    assert!(signed_by(request, &secret), "the signature verifies");
    let id = header(request, "webhook-id");
    let id = id.strip_prefix("msg_").expect("msg_ and the delivery's id");
    let id = uuid::Uuid::parse_str(id).expect("the delivery's uuid, simple form");
    let start = FeedCursor::start();
    let page = t.f.stores.feed.read_after(&start, 10).await.unwrap();
    let event = &page.events[0];
    let webhook = WebhookId(created["uuid"].as_str().unwrap().parse().unwrap());
    assert_eq!(
        DeliveryId(id),
        DeliveryId::of_event(webhook, event.event_uuid, event.received_at),
        "drawn from the webhook and the event"
    );
    assert_eq!(
        id.as_bytes()[..6],
        1_767_225_610_000_u64.to_be_bytes()[2..],
        "the millisecond the event was received, first"
    );
    assert_eq!(header(request, "webhook-timestamp"), "1767225610");
    assert_eq!(request.timeout, Duration::from_secs(5));
    let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
    assert_eq!(body["event_type"], "WEBHOOK.CONVERTED");
    assert_eq!(body["entity_type"], "CONTACT");
    assert_eq!(body["event_identifier"], "newsletter-signup");
    assert_eq!(body["timestamp"], "2026-01-01T00:00:10Z");
    assert_eq!(body["event_timestamp"], "2026-01-01T00:00:10Z");
    let contact = &body["contact"];
    assert_eq!(contact["email"], "lead@example.com");
    assert_eq!(contact["name"], "Ana Lima");
    assert_eq!(contact["tags"], json!(["lead", "webinar"]));
    assert_eq!(contact["cf_plan"], "gold");
    assert!(contact["uuid"].as_str().unwrap().len() == 36);
    assert!(
        contact.get("job_title").is_none(),
        "empty fields are left out"
    );

    // Nothing more to do.
    let round = t.gateway().run_webhooks_once().await.unwrap();
    assert_eq!(round.events_dispatched, 0);
    assert!(round.attempts.is_empty());
}

#[tokio::test]
async fn event_identifiers_filter_and_earlier_conversions_are_not_delivered() {
    let t = Hooks::new().await;
    t.convert("before@example.com", "demo").await;
    t.f.clock.advance(time::Duration::seconds(1));
    t.register_with(json!({ "event_identifiers": ["demo"] }))
        .await;
    let all = t.register("https://hooks.example.com/all").await;
    t.receiver.clear();
    t.convert("a@example.com", "demo").await;
    t.convert("b@example.com", "newsletter").await;
    t.gateway().run_webhooks_once().await.unwrap();
    let filtered = t.receiver.emails_to(URL);
    assert_eq!(filtered, ["a@example.com"]);
    let everything = t.receiver.emails_to(all["url"].as_str().unwrap());
    assert_eq!(everything, ["a@example.com", "b@example.com"]);
}

/// The memory feed, counting the events read back through it.
struct CountingFeed {
    inner: Arc<MemoryEventSink>,
    events_read: AtomicUsize,
}

#[async_trait::async_trait]
impl EventFeed for CountingFeed {
    async fn read_after(&self, cursor: &FeedCursor, limit: usize) -> Result<FeedPage, StoreError> {
        let page = self.inner.read_after(cursor, limit).await?;
        self.events_read
            .fetch_add(page.events.len(), Ordering::SeqCst);
        Ok(page)
    }

    async fn skip_after(
        &self,
        cursor: &FeedCursor,
        limit: usize,
    ) -> Result<(FeedCursor, usize), StoreError> {
        self.inner.skip_after(cursor, limit).await
    }
}

/// The service on memory stores whose feed counts the events read back.
async fn hooks_counting_reads() -> (Hooks, Arc<CountingFeed>) {
    let events = Arc::new(MemoryEventSink::new());
    let feed = Arc::new(CountingFeed {
        inner: events.clone(),
        events_read: AtomicUsize::new(0),
    });
    let mut stores = Stores::in_memory();
    stores.events = events;
    stores.feed = feed.clone();
    (Hooks::on(stores, RetrySchedule::default()).await, feed)
}

#[tokio::test]
async fn without_a_webhook_the_dispatcher_passes_conversions_by_unread() {
    let (t, feed) = hooks_counting_reads().await;
    for n in 0..3 {
        t.convert(&format!("early{n}@example.com"), "demo").await;
    }
    let round = t.gateway().run_webhooks_once().await.unwrap();
    assert_eq!(round.events_dispatched, 3, "passed");
    assert_eq!(feed.events_read.load(Ordering::SeqCst), 0, "unread");
    assert!(round.attempts.is_empty());

    // Once a webhook is registered, the conversions after it are read and
    // delivered; those passed by stay passed by.
    t.f.clock.advance(time::Duration::seconds(1));
    t.register(URL).await;
    t.receiver.clear();
    t.convert("later@example.com", "demo").await;
    let round = t.gateway().run_webhooks_once().await.unwrap();
    assert_eq!(round.events_dispatched, 1);
    assert_eq!(feed.events_read.load(Ordering::SeqCst), 1);
    let delivered = t.receiver.emails_to(URL);
    assert_eq!(delivered, ["later@example.com"]);
}

#[tokio::test]
async fn with_every_webhook_switched_off_the_dispatcher_passes_conversions_by_unread() {
    let (t, feed) = hooks_counting_reads().await;
    let created = t.register(URL).await;
    let id = WebhookId(created["uuid"].as_str().unwrap().parse().unwrap());
    assert!(
        t.gateway()
            .set_webhook_status(id, WebhookStatus::Inactive)
            .await
            .unwrap()
    );
    t.receiver.clear();
    t.f.clock.advance(time::Duration::seconds(1));
    for n in 0..3 {
        t.convert(&format!("while-off{n}@example.com"), "demo")
            .await;
    }
    let round = t.gateway().run_webhooks_once().await.unwrap();
    assert_eq!(round.events_dispatched, 3, "passed");
    assert_eq!(
        feed.events_read.load(Ordering::SeqCst),
        0,
        "no active webhook wants them: unread"
    );
    assert!(t.receiver.sent().is_empty());
}

/// A webhook store (the memory one in these tests), counting the
/// dispatcher's writes and the most deliveries one lease asked for.
struct CountingWebhooks {
    inner: Arc<dyn WebhookStore>,
    dispatches: AtomicUsize,
    largest_lease: AtomicUsize,
}

impl CountingWebhooks {
    /// `inner`, nothing counted yet.
    fn around(inner: Arc<dyn WebhookStore>) -> Self {
        Self {
            inner,
            dispatches: AtomicUsize::new(0),
            largest_lease: AtomicUsize::new(0),
        }
    }
}

#[async_trait::async_trait]
impl WebhookStore for CountingWebhooks {
    async fn insert_webhook(&self, webhook: &Webhook) -> Result<WebhookWrite, StoreError> {
        self.inner.insert_webhook(webhook).await
    }

    async fn find_webhook(&self, id: WebhookId) -> Result<Option<Webhook>, StoreError> {
        self.inner.find_webhook(id).await
    }

    async fn list_webhooks(&self, account: Option<AccountId>) -> Result<Vec<Webhook>, StoreError> {
        self.inner.list_webhooks(account).await
    }

    async fn update_webhook(&self, webhook: &Webhook) -> Result<WebhookWrite, StoreError> {
        self.inner.update_webhook(webhook).await
    }

    async fn set_webhook_status(
        &self,
        id: WebhookId,
        status: WebhookStatus,
        at: OffsetDateTime,
    ) -> Result<bool, StoreError> {
        self.inner.set_webhook_status(id, status, at).await
    }

    async fn delete_webhook(&self, id: WebhookId) -> Result<bool, StoreError> {
        self.inner.delete_webhook(id).await
    }

    async fn dispatch_cursor(&self) -> Result<FeedCursor, StoreError> {
        self.inner.dispatch_cursor().await
    }

    async fn dispatch(
        &self,
        from: &FeedCursor,
        to: &FeedCursor,
        deliveries: &[Delivery],
    ) -> Result<bool, StoreError> {
        self.dispatches.fetch_add(1, Ordering::SeqCst);
        self.inner.dispatch(from, to, deliveries).await
    }

    async fn lease_deliveries(
        &self,
        now: OffsetDateTime,
        lease_until: OffsetDateTime,
        limit: usize,
        skip: &[WebhookId],
    ) -> Result<Vec<LeasedDelivery>, StoreError> {
        self.largest_lease.fetch_max(limit, Ordering::SeqCst);
        self.inner
            .lease_deliveries(now, lease_until, limit, skip)
            .await
    }

    async fn finish_attempt(
        &self,
        attempt: &AttemptRecord,
        leased_until: OffsetDateTime,
        next: DeliveryNext,
        change: WebhookChange,
    ) -> Result<WebhookChange, StoreError> {
        self.inner
            .finish_attempt(attempt, leased_until, next, change)
            .await
    }

    async fn recent_attempts(
        &self,
        webhook: WebhookId,
        limit: usize,
    ) -> Result<Vec<AttemptRecord>, StoreError> {
        self.inner.recent_attempts(webhook, limit).await
    }

    async fn pending_deliveries(&self) -> Result<u64, StoreError> {
        self.inner.pending_deliveries().await
    }

    async fn delivery_state(
        &self,
        id: DeliveryId,
    ) -> Result<Option<(DeliveryState, u32)>, StoreError> {
        self.inner.delivery_state(id).await
    }

    async fn purge_deliveries(
        &self,
        cutoff: OffsetDateTime,
        limit: usize,
    ) -> Result<usize, StoreError> {
        self.inner.purge_deliveries(cutoff, limit).await
    }

    async fn repair_queue_heads(&self) -> Result<usize, StoreError> {
        self.inner.repair_queue_heads().await
    }
}

/// `run_webhooks_once` attempts what it leased one after the other: it
/// leases no more than it can attempt, each taking up to the 5 s timeout,
/// within the 30 s lease (five), so that no lease runs out while its
/// delivery waits its turn, and another sender sends it too.
#[tokio::test]
async fn one_round_leases_no_more_than_it_can_attempt_within_the_lease() {
    let mut stores = Stores::in_memory();
    let webhooks = Arc::new(CountingWebhooks::around(stores.webhooks.clone()));
    stores.webhooks = webhooks.clone();
    let t = Hooks::on(stores, RetrySchedule::default()).await;
    t.register(URL).await;
    t.receiver.clear();
    for n in 0..12 {
        t.convert(&format!("lead{n}@example.com"), "signup").await;
    }
    let round = t.gateway().run_webhooks_once().await.unwrap();
    assert_eq!(
        round.attempts.len(),
        12,
        "every delivery, over three leases"
    );
    assert_eq!(webhooks.largest_lease.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn a_dispatch_step_with_nothing_to_pass_writes_nothing() {
    let mut stores = Stores::in_memory();
    let webhooks = Arc::new(CountingWebhooks::around(stores.webhooks.clone()));
    stores.webhooks = webhooks.clone();
    let t = Hooks::on(stores, RetrySchedule::default()).await;
    let gateway = t.gateway();
    // One dispatch step: the events it passed, and the writes so far.
    let step = async || {
        let passed = gateway
            .dispatch_webhook_deliveries(DISPATCH_PAGE)
            .await
            .unwrap();
        (passed, webhooks.dispatches.load(Ordering::SeqCst))
    };

    // No webhook, nothing recorded: the step neither reads nor writes (the
    // SQLite store's write lock belongs to the writer of events).
    assert_eq!(step().await, (0, 0));
    // Conversions passed by: one write for all of them, then none.
    t.convert("a@example.com", "demo").await;
    t.convert("b@example.com", "demo").await;
    assert_eq!(step().await, (2, 1));
    assert_eq!(step().await, (0, 1));
    // A webhook and nothing new: no write either.
    t.register(URL).await;
    assert_eq!(step().await, (0, 1));
}

/// The memory feed, with a webhook registered (by another instance, say)
/// right after the dispatcher's first pass over positions.
struct RegisteringFeed {
    inner: Arc<MemoryEventSink>,
    webhooks: Arc<dyn WebhookStore>,
    registered_after_skip: Mutex<Option<Webhook>>,
}

#[async_trait::async_trait]
impl EventFeed for RegisteringFeed {
    async fn read_after(&self, cursor: &FeedCursor, limit: usize) -> Result<FeedPage, StoreError> {
        self.inner.read_after(cursor, limit).await
    }

    async fn skip_after(
        &self,
        cursor: &FeedCursor,
        limit: usize,
    ) -> Result<(FeedCursor, usize), StoreError> {
        let skipped = self.inner.skip_after(cursor, limit).await?;
        let webhook = self.registered_after_skip.lock().unwrap().take();
        if let Some(webhook) = webhook {
            self.webhooks.insert_webhook(&webhook).await?;
        }
        Ok(skipped)
    }
}

#[tokio::test]
async fn a_webhook_registered_while_the_dispatcher_skips_gets_the_conversions() {
    let events = Arc::new(MemoryEventSink::new());
    let mut stores = Stores::in_memory();
    let feed = Arc::new(RegisteringFeed {
        inner: events.clone(),
        webhooks: stores.webhooks.clone(),
        registered_after_skip: Mutex::new(None),
    });
    stores.events = events;
    stores.feed = feed.clone();
    let t = Hooks::on(stores.clone(), RetrySchedule::default()).await;
    // A webhook registered before the conversions, held back from the
    // store until the dispatcher has passed over their positions once.
    let created = t.register(URL).await;
    let id = WebhookId(created["uuid"].as_str().unwrap().parse().unwrap());
    let webhook = stores.webhooks.find_webhook(id).await.unwrap().unwrap();
    assert!(stores.webhooks.delete_webhook(id).await.unwrap());
    *feed.registered_after_skip.lock().unwrap() = Some(webhook);
    t.receiver.clear();
    t.f.clock.advance(time::Duration::seconds(1));
    for n in 0..3 {
        t.convert(&format!("raced{n}@example.com"), "demo").await;
    }

    let round = t.gateway().run_webhooks_once().await.unwrap();
    assert_eq!(round.events_dispatched, 3);
    assert!(
        feed.registered_after_skip.lock().unwrap().is_none(),
        "the webhook came in after the skip"
    );
    assert_eq!(
        t.receiver.emails_to(URL),
        [
            "raced0@example.com",
            "raced1@example.com",
            "raced2@example.com"
        ],
        "asked again after the skip, the dispatcher read and delivered them"
    );
}

#[tokio::test]
async fn without_a_webhook_one_step_passes_more_than_a_page_by() {
    let t = Hooks::new().await;
    for n in 0..5 {
        t.convert(&format!("early{n}@example.com"), "demo").await;
    }
    let gateway = t.gateway();
    assert_eq!(
        gateway.dispatch_webhook_deliveries(2).await.unwrap(),
        5,
        "positions only: one step (one write of the cursor) for all five"
    );
    assert_eq!(gateway.dispatch_webhook_deliveries(2).await.unwrap(), 0);

    // Once a webhook wants conversions, a step reads one page.
    t.f.clock.advance(time::Duration::seconds(1));
    t.register(URL).await;
    for n in 0..5 {
        t.convert(&format!("later{n}@example.com"), "demo").await;
    }
    assert_eq!(gateway.dispatch_webhook_deliveries(2).await.unwrap(), 2);
    assert_eq!(gateway.dispatch_webhook_deliveries(2).await.unwrap(), 2);
    assert_eq!(gateway.dispatch_webhook_deliveries(2).await.unwrap(), 1);
}

#[tokio::test]
async fn a_batch_is_one_delivery_per_contact() {
    let t = Hooks::new().await;
    t.register(URL).await;
    t.receiver.clear();
    let batch = json!([
        conversion_gateway_testkit::conversion_body("one@example.com"),
        conversion_gateway_testkit::conversion_body("two@example.com"),
        conversion_gateway_testkit::conversion_body("three@example.com"),
    ])
    .to_string();
    let authorization = format!("Bearer {}", t.access);
    t.gateway()
        .record_event_batch(&conversion_gateway::RequestParts {
            content_type: Some("application/json"),
            authorization: Some(&authorization),
            body: batch.as_bytes(),
            ..Default::default()
        })
        .await
        .unwrap();
    t.gateway().run_webhooks_once().await.unwrap();
    let emails = t.receiver.emails_to(URL);
    assert_eq!(
        emails,
        ["one@example.com", "two@example.com", "three@example.com"]
    );
    let ids: std::collections::HashSet<String> = t
        .receiver
        .sent()
        .iter()
        .map(|request| header(request, "webhook-id"))
        .collect();
    assert_eq!(ids.len(), 3, "each delivery has its own id");
}

#[tokio::test]
async fn failures_are_retried_on_the_schedule_with_the_same_id_then_given_up() {
    let schedule: RetrySchedule = "0s,5s,5m".parse().unwrap();
    let t = Hooks::with_schedule(schedule).await;
    t.register(URL).await;
    t.receiver.clear();
    t.receiver
        .answer(URL, [status(500), SendOutcome::TimedOut, status(503)]);
    t.convert("lead@example.com", "signup").await;

    let first = t.gateway().run_webhooks_once().await.unwrap();
    assert_eq!(first.attempts.len(), 1);
    let DeliveryNext::RetryAt(at) = first.attempts[0].next else {
        panic!("{:?}", first.attempts[0].next);
    };
    // 5 s, within the 10 % jitter.
    let wait = at - t.f.clock.now();
    assert!(
        wait >= time::Duration::milliseconds(4500) && wait <= time::Duration::milliseconds(5500),
        "{wait}"
    );
    // Not yet due.
    t.f.clock.advance(time::Duration::seconds(4));
    assert!(
        t.gateway()
            .run_webhooks_once()
            .await
            .unwrap()
            .attempts
            .is_empty()
    );
    t.f.clock.advance(time::Duration::seconds(2));
    let second = t.gateway().run_webhooks_once().await.unwrap();
    assert_eq!(second.attempts.len(), 1);
    assert!(matches!(second.attempts[0].next, DeliveryNext::RetryAt(_)));
    t.f.clock.advance(time::Duration::minutes(6));
    let third = t.gateway().run_webhooks_once().await.unwrap();
    assert_eq!(
        third.attempts[0].next,
        DeliveryNext::Failed,
        "the schedule's last attempt"
    );
    t.f.clock.advance(time::Duration::days(1));
    assert!(
        t.gateway()
            .run_webhooks_once()
            .await
            .unwrap()
            .attempts
            .is_empty()
    );

    let sent = t.receiver.sent();
    assert_eq!(sent.len(), 3);
    let id = header(&sent[0], "webhook-id");
    assert!(
        sent.iter()
            .all(|request| header(request, "webhook-id") == id)
    );
    let state =
        t.f.stores
            .webhooks
            .delivery_state(first.attempts[0].delivery_id)
            .await
            .unwrap();
    assert_eq!(state, Some((DeliveryState::Failed, 3)));

    // The webhook shows its last attempts, newest first, without bodies.
    let uuid = t.gateway().all_webhooks().await.unwrap()[0].id.to_string();
    let shown = t.call("GET", Some(&uuid), None).await;
    let attempts = shown.json_body().unwrap()["last_attempts"]
        .as_array()
        .unwrap()
        .clone();
    let statuses: Vec<serde_json::Value> = attempts.iter().map(|a| a["status"].clone()).collect();
    assert_eq!(statuses, [json!(503), json!(null), json!(500)]);
    assert_eq!(attempts[1]["error"], "timeout");
    assert_eq!(attempts[2]["error"], "status 500");
    assert!(
        attempts
            .iter()
            .all(|a| a["at"].is_string() && a.get("body").is_none())
    );
}

#[tokio::test]
async fn retries_of_deliveries_that_failed_together_are_spread_over_the_jitter() {
    let schedule: RetrySchedule = "0s,100s".parse().unwrap();
    let t = Hooks::with_schedule(schedule).await;
    t.register(URL).await;
    t.receiver.clear();
    t.receiver.answer(URL, (0..20).map(|_| status(500)));
    for n in 0..20 {
        t.convert(&format!("lead{n}@example.com"), "signup").await;
    }
    let round = t.gateway().run_webhooks_once().await.unwrap();
    let now = t.f.clock.now();
    let waits: Vec<f64> = round
        .attempts
        .iter()
        .map(|attempt| match attempt.next {
            DeliveryNext::RetryAt(at) => (at - now).as_seconds_f64(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(waits.len(), 20);
    // 100 s plus or minus 10 %, drawn for each: some sooner, some later,
    // so that the receiver is not hit by all twenty at once again.
    assert!(
        waits.iter().all(|wait| (90.0..110.0).contains(wait)),
        "{waits:?}"
    );
    assert!(waits.iter().any(|wait| *wait < 99.0), "{waits:?}");
    assert!(waits.iter().any(|wait| *wait > 101.0), "{waits:?}");
}

#[tokio::test]
async fn retry_after_is_honoured() {
    let t = Hooks::new().await;
    t.register(URL).await;
    t.receiver.answer(
        URL,
        [SendOutcome::Answered {
            status: 429,
            retry_after: Some("120".into()),
        }],
    );
    t.convert("lead@example.com", "signup").await;
    let round = t.gateway().run_webhooks_once().await.unwrap();
    assert_eq!(
        round.attempts[0].next,
        DeliveryNext::RetryAt(t.f.clock.now() + time::Duration::seconds(120))
    );
    t.f.clock.advance(time::Duration::seconds(60));
    assert!(
        t.gateway()
            .run_webhooks_once()
            .await
            .unwrap()
            .attempts
            .is_empty()
    );
    t.f.clock.advance(time::Duration::seconds(61));
    let round = t.gateway().run_webhooks_once().await.unwrap();
    assert_eq!(round.attempts[0].next, DeliveryNext::Delivered);
}

#[tokio::test]
async fn gone_switches_the_webhook_off_and_later_conversions_wait_for_it() {
    let t = Hooks::new().await;
    let created = t.register(URL).await;
    let uuid = created["uuid"].as_str().unwrap().to_owned();
    t.receiver.answer(URL, [status(410)]);
    t.convert("lead@example.com", "signup").await;
    let round = t.gateway().run_webhooks_once().await.unwrap();
    assert_eq!(round.attempts[0].next, DeliveryNext::Failed);
    assert_eq!(round.attempts[0].change, WebhookChange::SwitchOff);
    let shown = t.call("GET", Some(&uuid), None).await;
    assert_eq!(shown.json_body().unwrap()["status"], "inactive");
    // Switched off: new conversions are not delivered to it.
    t.convert("later@example.com", "signup").await;
    let round = t.gateway().run_webhooks_once().await.unwrap();
    assert_eq!(round.events_dispatched, 1);
    assert!(round.attempts.is_empty());
}

#[tokio::test]
async fn a_webhook_failing_for_five_days_in_a_row_is_switched_off_and_its_deliveries_wait() {
    let t = Hooks::new().await;
    let created = t.register(URL).await;
    let uuid = created["uuid"].as_str().unwrap().to_owned();
    let id = conversion_gateway::WebhookId(uuid.parse().unwrap());
    t.receiver.answer(URL, (0..200).map(|_| status(500)));
    let mut switched_at = None;
    // A conversion a day, each retried on the default schedule.
    for day in 0..7 {
        t.convert(&format!("day{day}@example.com"), "signup").await;
        for _ in 0..48 {
            let round = t.gateway().run_webhooks_once().await.unwrap();
            if switched_at.is_none()
                && round
                    .attempts
                    .iter()
                    .any(|a| a.change == WebhookChange::SwitchOff)
            {
                switched_at = Some(t.f.clock.now());
            }
            t.f.clock.advance(time::Duration::minutes(30));
        }
    }
    let switched_at = switched_at.expect("switched off");
    let first_failure = conversion_gateway::ManualClock::at_epoch_of_tests().now();
    let failing_for = switched_at - first_failure;
    assert!(
        failing_for >= time::Duration::days(5) && failing_for < time::Duration::days(6),
        "{failing_for}"
    );
    let webhook = t.f.stores.webhooks.find_webhook(id).await.unwrap().unwrap();
    assert_eq!(webhook.status, WebhookStatus::Inactive);
    // Nothing is attempted while it is off; switched back on, the
    // deliveries still pending go out, and a success clears its failures.
    let before = t.receiver.sent().len();
    t.f.clock.advance(time::Duration::days(1));
    t.gateway().run_webhooks_once().await.unwrap();
    assert_eq!(t.receiver.sent().len(), before);
    assert!(t.gateway().webhook_backlog().await.unwrap() > 0);
    t.receiver.forget_answers(URL);
    t.gateway()
        .set_webhook_status(id, WebhookStatus::Active)
        .await
        .unwrap();
    for _ in 0..400 {
        t.gateway().run_webhooks_once().await.unwrap();
        if t.gateway().webhook_backlog().await.unwrap() == 0 {
            break;
        }
        t.f.clock.advance(time::Duration::hours(1));
    }
    assert_eq!(t.gateway().webhook_backlog().await.unwrap(), 0);
    let webhook = t.f.stores.webhooks.find_webhook(id).await.unwrap().unwrap();
    assert_eq!(webhook.failing_since, None);
    assert_eq!(webhook.status, WebhookStatus::Active);
}

/// Two deliveries leased together while the webhook had been failing for
/// five days: the first succeeds, so the second's failure, decided on the
/// lease's stale `failing_since`, neither switches the webhook off nor
/// brings the old failures back. Its failures start again at it.
#[tokio::test]
async fn a_failure_leased_beside_a_success_does_not_switch_the_webhook_off() {
    let t = Hooks::with_schedule("0s,30d".parse().unwrap()).await;
    let created = t.register(URL).await;
    let id = conversion_gateway::WebhookId(created["uuid"].as_str().unwrap().parse().unwrap());
    t.receiver.answer(URL, [status(500)]);
    t.convert("a@example.com", "signup").await;
    let failed_at = t.f.clock.now();
    let round = t.gateway().run_webhooks_once().await.unwrap();
    assert_eq!(round.attempts[0].change, WebhookChange::Failing(failed_at));

    t.f.clock
        .advance(time::Duration::days(5) + time::Duration::minutes(1));
    t.convert("b@example.com", "signup").await;
    t.convert("c@example.com", "signup").await;
    t.receiver.answer(URL, [status(200), status(500)]);
    let round = t.gateway().run_webhooks_once().await.unwrap();
    let now = t.f.clock.now();
    let changes: Vec<WebhookChange> = round.attempts.iter().map(|a| a.change).collect();
    assert_eq!(
        changes,
        [WebhookChange::Succeeded, WebhookChange::Failing(now)],
        "the failure after the success is the first of a new run"
    );
    let webhook = t.f.stores.webhooks.find_webhook(id).await.unwrap().unwrap();
    assert_eq!(webhook.status, WebhookStatus::Active);
    assert_eq!(webhook.failing_since, Some(now));
}

#[tokio::test]
async fn one_contacts_deliveries_keep_their_order_while_others_pass() {
    let t = Hooks::new().await;
    t.register(URL).await;
    t.receiver.clear();
    // The first delivery of a@ fails and waits for its retry.
    t.receiver.answer(URL, [status(500)]);
    t.convert("a@example.com", "first").await;
    t.convert("a@example.com", "second").await;
    t.convert("b@example.com", "other").await;
    let round = t.gateway().run_webhooks_once().await.unwrap();
    let sent = contacts_and_identifiers(&t);
    assert_eq!(
        sent,
        [
            ("a@example.com".into(), "first".into()),
            ("b@example.com".into(), "other".into())
        ],
        "a@'s second waits behind its first; b@ is not held up"
    );
    assert_eq!(round.attempts.len(), 2);
    t.f.clock.advance(time::Duration::seconds(6));
    t.gateway().run_webhooks_once().await.unwrap();
    t.gateway().run_webhooks_once().await.unwrap();
    let order: Vec<String> = t
        .receiver
        .bodies_to(URL)
        .iter()
        .filter(|b| b["contact"]["email"] == "a@example.com")
        .map(|b| b["event_identifier"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(order, ["first", "first", "second"]);
}

#[tokio::test]
async fn a_deleted_webhook_takes_its_pending_deliveries_with_it() {
    let t = Hooks::new().await;
    let created = t.register(URL).await;
    t.receiver.answer(URL, [status(500)]);
    t.convert("lead@example.com", "signup").await;
    t.gateway().run_webhooks_once().await.unwrap();
    assert_eq!(t.gateway().webhook_backlog().await.unwrap(), 1);
    let uuid = created["uuid"].as_str().unwrap();
    assert_eq!(t.call("DELETE", Some(uuid), None).await.status, 204);
    assert_eq!(t.gateway().webhook_backlog().await.unwrap(), 0);
    t.f.clock.advance(time::Duration::hours(1));
    assert!(
        t.gateway()
            .run_webhooks_once()
            .await
            .unwrap()
            .attempts
            .is_empty()
    );
}

#[tokio::test]
async fn the_purge_deletes_ended_deliveries_past_the_retention() {
    let t = Hooks::new().await;
    t.register(URL).await;
    t.convert("lead@example.com", "signup").await;
    let round = t.gateway().run_webhooks_once().await.unwrap();
    let id = round.attempts[0].delivery_id;
    let report = t.gateway().purge_expired().await.unwrap();
    assert_eq!(report.webhook_deliveries, 0, "not past the retention yet");
    t.f.clock.advance(time::Duration::days(8));
    let report = t.gateway().purge_expired().await.unwrap();
    assert_eq!(report.webhook_deliveries, 1);
    assert_eq!(t.f.stores.webhooks.delivery_state(id).await.unwrap(), None);
}

/// A gateway on an SQLite store in a file of its own (in a directory
/// named after `name`, removed when the first value is dropped), with
/// [`URL`] registered and the receiver cleared: the directory, the file,
/// the store and the fixture.
#[cfg(feature = "sqlite")]
async fn registered_on_a_sqlite_file(
    name: &str,
) -> (
    conversion_gateway_testkit::TempDir,
    std::path::PathBuf,
    Arc<conversion_gateway::SqliteStore>,
    Hooks,
) {
    let dir = conversion_gateway_testkit::TempDir::new(name);
    let file = dir.path("gateway.db");
    let store = Arc::new(
        conversion_gateway::SqliteStore::open(&file)
            .await
            .expect("a SQLite store"),
    );
    let t = Hooks::on(Stores::sharing(store.clone()), RetrySchedule::default()).await;
    t.register(URL).await;
    t.receiver.clear();
    (dir, file, store, t)
}

/// A store that forgets a page's dispatch, its leases and attempts (a
/// backup restored, a failover to a replica that missed the last commits)
/// while the receiver remembers: the page is dispatched and sent again
/// under the same `webhook-id`s, so the receiver knows the deliveries it
/// already took.
#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_dispatched_again_by_a_store_that_forgot_it_keeps_its_delivery_ids() {
    use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};
    let (_dir, file, store, t) = registered_on_a_sqlite_file("forgot-dispatch").await;
    t.convert("a@example.com", "first").await;
    t.convert("b@example.com", "first").await;
    let before = store.dispatch_cursor().await.unwrap();
    let round = t.gateway().run_webhooks_once().await.unwrap();
    assert_eq!(round.attempts.len(), 2);
    let ids = |t: &Hooks| -> Vec<String> {
        let sent = t.receiver.sent();
        sent.iter().map(|r| header(r, "webhook-id")).collect()
    };
    let first = ids(&t);

    // The cursor set back alone (an operator's mistake): the page is
    // dispatched again, its deliveries are the ones recorded, delivered
    // already, and nothing is sent or refused.
    let lost = SqlitePool::connect_with(SqliteConnectOptions::new().filename(&file))
        .await
        .expect("the database file");
    let set_back = sqlx::query("UPDATE webhook_dispatch SET feed_cursor = ?");
    set_back
        .bind(before.as_str())
        .execute(&lost)
        .await
        .expect("the cursor set back");
    t.receiver.clear();
    let round = t.gateway().run_webhooks_once().await.unwrap();
    assert_eq!(round.events_dispatched, 2, "passed again");
    assert!(round.attempts.is_empty(), "{:?}", round.attempts);
    assert_eq!(t.f.stores.webhooks.pending_deliveries().await.unwrap(), 0);

    // The copy restored was taken before the dispatch.
    for statement in [
        "DELETE FROM webhook_attempts",
        "DELETE FROM webhook_deliveries",
    ] {
        sqlx::query(statement)
            .execute(&lost)
            .await
            .expect(statement);
    }
    sqlx::query("UPDATE webhook_dispatch SET feed_cursor = ?")
        .bind(before.as_str())
        .execute(&lost)
        .await
        .expect("the cursor as it was");
    lost.close().await;
    t.receiver.clear();
    t.f.clock.advance(time::Duration::minutes(1));

    let round = t.gateway().run_webhooks_once().await.unwrap();
    assert_eq!(round.events_dispatched, 2, "dispatched again");
    let again = ids(&t);
    assert_eq!(again, first);
    assert_ne!(again[0], again[1], "one id a delivery");
    store.close().await;
}

/// On the default store, queues an earlier release left without their
/// head marks (it ran on the upgraded file after a rollback) are never
/// attempted until the periodic purge repairs them; then they go, each
/// contact's in order.
#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_purge_repairs_queues_an_earlier_release_left_and_they_are_delivered() {
    use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};
    let (_dir, file, store, t) = registered_on_a_sqlite_file("repair").await;
    t.convert("a@example.com", "first").await;
    t.convert("a@example.com", "second").await;
    t.convert("b@example.com", "first").await;
    let dispatched = t
        .gateway()
        .dispatch_webhook_deliveries(DISPATCH_PAGE)
        .await
        .unwrap();
    assert_eq!(dispatched, 3);
    let earlier_release = SqlitePool::connect_with(SqliteConnectOptions::new().filename(&file))
        .await
        .expect("the database file");
    sqlx::query("UPDATE webhook_deliveries SET head = 0")
        .execute(&earlier_release)
        .await
        .expect("unmark the heads");
    earlier_release.close().await;

    let round = t.gateway().run_webhooks_once().await.unwrap();
    assert!(
        round.attempts.is_empty(),
        "nothing leasable before the repair"
    );
    let report = t.gateway().purge_expired().await.unwrap();
    assert_eq!(report.queue_heads_repaired, 2, "a@'s queue and b@'s");
    assert_eq!(
        t.gateway()
            .purge_expired()
            .await
            .unwrap()
            .queue_heads_repaired,
        0
    );
    for _ in 0..2 {
        t.gateway().run_webhooks_once().await.unwrap();
    }
    let sent = contacts_and_identifiers(&t);
    assert_eq!(
        sent,
        [
            ("a@example.com".into(), "first".into()),
            ("b@example.com".into(), "first".into()),
            ("a@example.com".into(), "second".into()),
        ]
    );
    store.close().await;
}

#[tokio::test]
async fn a_gateway_without_a_transport_registers_nothing() {
    let f = conversion_gateway_testkit::Fixture::new().await;
    let (access, _) = f.tokens().await;
    let body = crate::support::webhook_body(URL).to_string();
    let authorization = format!("Bearer {access}");
    let answer = f.gateway.answer(
        f.gateway
            .create_webhook(&conversion_gateway::RequestParts {
                content_type: Some("application/json"),
                authorization: Some(&authorization),
                body: body.as_bytes(),
                ..Default::default()
            })
            .await,
    );
    assert_eq!(answer.status, 401);
}

/// Each delivery `t`'s receiver got at [`URL`], in order: its contact's
/// e-mail and its conversion identifier.
fn contacts_and_identifiers(t: &Hooks) -> Vec<(String, String)> {
    t.receiver
        .bodies_to(URL)
        .iter()
        .map(|b| {
            (
                b["contact"]["email"].as_str().unwrap().to_owned(),
                b["event_identifier"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}
