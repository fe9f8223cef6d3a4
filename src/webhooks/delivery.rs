//! Deliveries, one step at a time: the dispatcher turns the event feed
//! into deliveries (one per conversion and matching webhook), and the
//! sender attempts the deliveries that are due. Both are `Gateway`
//! methods over the injected clock, random source and transport, so tests
//! drive them deterministically; `crate::tasks::deliver_webhooks` runs
//! them in a loop, with attempts in parallel.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::time::Instant;

use crate::account::AccountId;
use crate::gateway::Gateway;
use crate::records::webhook::{
    AttemptRecord, Delivery, DeliveryId, DeliveryNext, LeasedDelivery, Webhook, WebhookChange,
    WebhookEventType, WebhookId, WebhookStatus,
};
use crate::store::error::StoreError;
use crate::webhooks::payload::{body_at, delivery_body};
use crate::webhooks::retry::after_attempt;
use crate::webhooks::signing::WebhookSecret;
use crate::webhooks::transport::{OutgoingRequest, SendOutcome};

/// Events read from the feed per dispatch step.
pub const DISPATCH_PAGE: usize = 500;

/// Events passed by per dispatch step while no webhook wants conversions.
/// Such a step reads only positions, so its cost hardly grows with the
/// count, and one write of the cursor serves them all: at 40,000
/// conversions a second, steps of [`DISPATCH_PAGE`] would write the cursor
/// 80 times a second, each write taking the SQLite store's write lock from
/// the writer of events.
pub const SKIP_PAGE: usize = 100_000;

/// What one attempt came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptReport {
    /// The delivery attempted.
    pub delivery_id: DeliveryId,
    /// The webhook it went to.
    pub webhook_id: WebhookId,
    /// What the receiver did.
    pub outcome: SendOutcome,
    /// What becomes of the delivery.
    pub next: DeliveryNext,
    /// What becomes of the webhook.
    pub change: WebhookChange,
}

/// What [`Gateway::run_webhooks_once`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WebhookRound {
    /// Events the dispatcher passed.
    pub events_dispatched: usize,
    /// The attempts made.
    pub attempts: Vec<AttemptReport>,
}

impl Gateway {
    /// One step of the dispatcher: reads at most `page` events after its
    /// cursor and records their deliveries with the cursor's advance, in one
    /// atomic step. Returns how many events it passed (0: none waiting, or
    /// another dispatcher passed them first). While no active webhook wants
    /// conversions it reads none, and passes up to `page` or [`SKIP_PAGE`],
    /// whichever is larger, by their positions alone
    /// ([`EventFeed::pass_by`](crate::EventFeed::pass_by): a feed that can jump to its end, the
    /// JetStream sink's, passes everything, and counts messages).
    ///
    /// A conversion goes to every active `WEBHOOK.CONVERTED` webhook of its
    /// account that was registered by the time the conversion was received
    /// and whose `event_identifiers` name it (or are empty).
    ///
    /// # Errors
    /// The store's; nothing was recorded, and the next step reads the same
    /// events again.
    pub async fn dispatch_webhook_deliveries(&self, page: usize) -> Result<usize, StoreError> {
        let from = self.stores.webhooks.dispatch_cursor().await?;
        if !self.any_webhook_wants_conversions().await? {
            let (next, passed) = self.stores.feed.pass_by(&from, page.max(SKIP_PAGE)).await?;
            // Asked again after the feed was read, as the path below lists
            // webhooks after reading the events: a webhook registered in
            // between is not passed by.
            if passed == 0 || !self.any_webhook_wants_conversions().await? {
                let moved = passed > 0 && self.stores.webhooks.dispatch(&from, &next, &[]).await?;
                return Ok(if moved { passed } else { 0 });
            }
        }
        let read = self.stores.feed.read_after(&from, page.max(1)).await?;
        if read.events.is_empty() {
            return Ok(0);
        }
        let now = self.clock.now();
        let mut webhooks: HashMap<AccountId, Vec<Webhook>> = HashMap::new();
        let mut deliveries = Vec::new();
        for event in &read.events {
            let listed = match webhooks.entry(event.account_id) {
                Entry::Occupied(listed) => listed.into_mut(),
                Entry::Vacant(slot) => slot.insert(
                    self.stores
                        .webhooks
                        .list_webhooks(Some(event.account_id))
                        .await?,
                ),
            };
            let matching = listed.iter().filter(|webhook| {
                webhook.status == WebhookStatus::Active
                    && webhook.event_type == WebhookEventType::Converted
                    && webhook.created_at <= event.received_at
                    && webhook.wants(&event.conversion_identifier)
            });
            let mut body = None;
            for webhook in matching {
                let body = body.get_or_insert_with(|| delivery_body(event, &self.hasher));
                deliveries.push(Delivery {
                    // The same if this page is dispatched again.
                    id: DeliveryId::of_event(webhook.id, event.event_uuid, event.received_at),
                    webhook_id: webhook.id,
                    event_uuid: event.event_uuid,
                    contact_key: event.email.to_ascii_lowercase(),
                    body: body.clone(),
                    created_at: now,
                });
            }
        }
        let passed = self
            .stores
            .webhooks
            .dispatch(&from, &read.next, &deliveries)
            .await?;
        Ok(if passed { read.events.len() } else { 0 })
    }

    /// Whether any webhook could be sent a conversion: without one, the
    /// dispatcher passes the feed's events by without reading them (which
    /// cost the SQL stores a fifth of their conversions per second in the
    /// intake bench).
    async fn any_webhook_wants_conversions(&self) -> Result<bool, StoreError> {
        let webhooks = self.stores.webhooks.list_webhooks(None).await?;
        Ok(webhooks.iter().any(|webhook| {
            webhook.status == WebhookStatus::Active
                && webhook.event_type == WebhookEventType::Converted
        }))
    }

    /// Leases at most `limit` due deliveries to this gateway for
    /// [`crate::WebhookOptions::lease`], leaving out the webhooks in `skip`
    /// (those the caller has enough attempts in flight to).
    ///
    /// # Errors
    /// The store's.
    pub async fn lease_webhook_deliveries(
        &self,
        limit: usize,
        skip: &[WebhookId],
    ) -> Result<Vec<LeasedDelivery>, StoreError> {
        let now = self.clock.now();
        self.stores
            .webhooks
            .lease_deliveries(now, now + self.webhooks.lease, limit, skip)
            .await
    }

    /// Attempts a leased delivery: signs it, POSTs it, and records what
    /// came of it (the attempt, the delivery's next state, its webhook's
    /// failures) in one step.
    ///
    /// # Errors
    /// The store's, when the attempt could not be recorded: the lease runs
    /// out and the delivery is attempted again (at least once).
    pub async fn attempt_webhook_delivery(
        &self,
        leased: &LeasedDelivery,
    ) -> Result<AttemptReport, StoreError> {
        let delivery = &leased.delivery;
        let secret = WebhookSecret::derive(&self.hasher, delivery.webhook_id, &leased.secret_salt);
        let at = self.clock.now();
        let body = body_at(&delivery.body, at);
        let id = delivery.id.header_value();
        let request = OutgoingRequest {
            url: leased.url.clone(),
            headers: secret.headers(&id, at.unix_timestamp(), &body),
            body,
            timeout: self.webhooks.attempt_timeout,
        };
        let started = Instant::now();
        let outcome = self.webhooks.transport.post(&request).await;
        let elapsed = started.elapsed();
        let finished = self.clock.now();
        let (next, change) = after_attempt(
            &outcome,
            leased.attempts,
            finished,
            leased.failing_since,
            &self.webhooks.retry_schedule,
            self.jitter(),
        );
        let attempt = AttemptRecord {
            delivery_id: delivery.id,
            webhook_id: delivery.webhook_id,
            at,
            status: outcome.status(),
            error: outcome.error(),
            duration_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        };
        // What the store made of `change`: a switch-off for failing too
        // long only if the webhook still is.
        let change = self
            .stores
            .webhooks
            .finish_attempt(&attempt, leased.leased_until, next, change)
            .await?;
        let label = match next {
            DeliveryNext::Delivered => "delivered",
            DeliveryNext::RetryAt(_) => "retrying",
            DeliveryNext::Failed => "failed",
        };
        crate::metrics::webhook_attempt(label, elapsed.as_secs_f64());
        if change == WebhookChange::SwitchOff {
            crate::metrics::webhook_switched_off();
        }
        Ok(AttemptReport {
            delivery_id: delivery.id,
            webhook_id: delivery.webhook_id,
            outcome,
            next,
            change,
        })
    }

    /// Dispatches every waiting event, then attempts every due delivery,
    /// one after the other: for tests and for hosts that deliver from a
    /// cron job. A service runs `crate::tasks::deliver_webhooks`, which
    /// makes attempts in parallel.
    ///
    /// # Errors
    /// The store's.
    pub async fn run_webhooks_once(&self) -> Result<WebhookRound, StoreError> {
        let mut round = WebhookRound::default();
        loop {
            let passed = self.dispatch_webhook_deliveries(DISPATCH_PAGE).await?;
            if passed == 0 {
                break;
            }
            round.events_dispatched += passed;
        }
        loop {
            let leased = self
                .lease_webhook_deliveries(self.one_after_the_other(), &[])
                .await?;
            if leased.is_empty() {
                break;
            }
            for delivery in &leased {
                round
                    .attempts
                    .push(self.attempt_webhook_delivery(delivery).await?);
            }
        }
        Ok(round)
    }

    /// How many deliveries [`Gateway::run_webhooks_once`] leases at a
    /// time: as many as it can attempt one after the other, each up to
    /// [`WebhookOptions::attempt_timeout`](crate::WebhookOptions::attempt_timeout),
    /// within one lease, less one for the store's own work; at least one,
    /// at most 100. With the defaults (30 s, 5 s), five. More would let the
    /// last ones' leases run out while they wait their turn: another
    /// sender (a second cron run, another host) would lease and send them
    /// too.
    fn one_after_the_other(&self) -> usize {
        let timeout = self.webhooks.attempt_timeout.as_millis().max(1);
        let fit = self.webhooks.lease.as_millis() / timeout;
        usize::try_from(fit)
            .unwrap_or(usize::MAX)
            .saturating_sub(1)
            .clamp(1, 100)
    }

    /// How many deliveries are pending.
    ///
    /// # Errors
    /// The store's.
    pub async fn webhook_backlog(&self) -> Result<u64, StoreError> {
        self.stores.webhooks.pending_deliveries().await
    }

    /// A draw from `[0, 1)` for a retry's jitter.
    fn jitter(&self) -> f64 {
        let mut bytes = [0u8; 8];
        self.random.fill_bytes(&mut bytes);
        // 53 bits: every value exactly representable.
        #[allow(clippy::cast_precision_loss)]
        let draw = (u64::from_le_bytes(bytes) >> 11) as f64;
        draw / (1u64 << 53) as f64
    }
}
