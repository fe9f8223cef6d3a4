//! [`WebhookStore`] in memory: webhooks, the outbox of deliveries and
//! their attempts under one lock, so every operation is atomic.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Mutex;

use async_trait::async_trait;
use time::OffsetDateTime;

use super::lock;
use crate::account::AccountId;
use crate::records::webhook::{
    AttemptRecord, Delivery, DeliveryId, DeliveryNext, DeliveryState, LeasedDelivery, Webhook,
    WebhookChange, WebhookId, WebhookStatus,
};
use crate::store::error::StoreError;
use crate::store::feed::FeedCursor;
use crate::store::webhooks::{WebhookStore, WebhookWrite};

/// How many attempts are kept per webhook.
pub(crate) const KEPT_ATTEMPTS: usize = 20;

/// [`WebhookStore`] in memory.
#[derive(Default)]
pub struct MemoryWebhookStore {
    state: Mutex<State>,
}

impl MemoryWebhookStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

#[derive(Default)]
struct State {
    webhooks: BTreeMap<WebhookId, Webhook>,
    /// Registration order, for listing oldest first.
    order: Vec<WebhookId>,
    cursor: FeedCursor,
    /// Deliveries by their number (dispatch order).
    deliveries: BTreeMap<u64, Outboxed>,
    by_id: HashMap<DeliveryId, u64>,
    /// The pending deliveries of each contact to each webhook, by number:
    /// the first is the queue's head, the only one of them a lease may
    /// take (a delivery waits for the one before it).
    queues: HashMap<(WebhookId, String), BTreeSet<u64>>,
    /// The queues' heads by when they are due, then number: what a lease
    /// reads, so that it never walks a long queue.
    heads: BTreeSet<(OffsetDateTime, u64)>,
    next_number: u64,
    attempts: HashMap<WebhookId, VecDeque<AttemptRecord>>,
}

struct Outboxed {
    delivery: Delivery,
    state: DeliveryState,
    attempts: u32,
    next_attempt_at: OffsetDateTime,
    leased_until: Option<OffsetDateTime>,
    finished_at: Option<OffsetDateTime>,
}

impl State {
    /// Takes delivery `number`, which has ended, out of its queue, and
    /// makes the next of the queue (if any) its head.
    fn dequeue(&mut self, number: u64, due: OffsetDateTime) {
        self.heads.remove(&(due, number));
        let Some(outboxed) = self.deliveries.get(&number) else {
            return;
        };
        let key = (
            outboxed.delivery.webhook_id,
            outboxed.delivery.contact_key.clone(),
        );
        let Some(queue) = self.queues.get_mut(&key) else {
            return;
        };
        queue.remove(&number);
        match queue
            .first()
            .and_then(|next| self.deliveries.get(next).map(|o| (o, *next)))
        {
            Some((next, head)) => {
                self.heads.insert((next.next_attempt_at, head));
            }
            None => {
                self.queues.remove(&key);
            }
        }
    }

    fn url_taken(&self, webhook: &Webhook) -> bool {
        self.webhooks.values().any(|other| {
            other.id != webhook.id
                && other.account_id == webhook.account_id
                && other.event_type == webhook.event_type
                && other.url == webhook.url
        })
    }
}

#[async_trait]
impl WebhookStore for MemoryWebhookStore {
    async fn insert_webhook(&self, webhook: &Webhook) -> Result<WebhookWrite, StoreError> {
        let mut state = lock(&self.state);
        if state.webhooks.contains_key(&webhook.id) {
            return Err(StoreError::Duplicate { what: "webhook" });
        }
        if state.url_taken(webhook) {
            return Ok(WebhookWrite::DuplicateUrl);
        }
        state.webhooks.insert(webhook.id, webhook.clone());
        state.order.push(webhook.id);
        Ok(WebhookWrite::Stored)
    }

    async fn find_webhook(&self, id: WebhookId) -> Result<Option<Webhook>, StoreError> {
        Ok(lock(&self.state).webhooks.get(&id).cloned())
    }

    async fn list_webhooks(&self, account: Option<AccountId>) -> Result<Vec<Webhook>, StoreError> {
        let state = lock(&self.state);
        Ok(state
            .order
            .iter()
            .filter_map(|id| state.webhooks.get(id))
            .filter(|webhook| account.is_none_or(|account| webhook.account_id == account))
            .cloned()
            .collect())
    }

    async fn update_webhook(&self, webhook: &Webhook) -> Result<WebhookWrite, StoreError> {
        let mut state = lock(&self.state);
        let Some(stored) = state.webhooks.get(&webhook.id) else {
            return Ok(WebhookWrite::NotFound);
        };
        // Unique in the stored account, which an update does not change:
        // an `account_id` the caller changed must not let a taken URL in.
        let changed = Webhook {
            account_id: stored.account_id,
            ..webhook.clone()
        };
        if state.url_taken(&changed) {
            return Ok(WebhookWrite::DuplicateUrl);
        }
        if let Some(stored) = state.webhooks.get_mut(&webhook.id) {
            stored.event_type = webhook.event_type;
            stored.url.clone_from(&webhook.url);
            stored
                .event_identifiers
                .clone_from(&webhook.event_identifiers);
            stored
                .include_relations
                .clone_from(&webhook.include_relations);
            stored.updated_at = webhook.updated_at;
        }
        Ok(WebhookWrite::Stored)
    }

    async fn set_webhook_status(
        &self,
        id: WebhookId,
        status: WebhookStatus,
        at: OffsetDateTime,
    ) -> Result<bool, StoreError> {
        let mut state = lock(&self.state);
        let Some(webhook) = state.webhooks.get_mut(&id) else {
            return Ok(false);
        };
        webhook.status = status;
        webhook.updated_at = at;
        if status == WebhookStatus::Active {
            webhook.failing_since = None;
        }
        Ok(true)
    }

    async fn delete_webhook(&self, id: WebhookId) -> Result<bool, StoreError> {
        let mut state = lock(&self.state);
        if state.webhooks.remove(&id).is_none() {
            return Ok(false);
        }
        state.order.retain(|kept| *kept != id);
        state.attempts.remove(&id);
        let gone: Vec<u64> = state
            .deliveries
            .iter()
            .filter(|(_, outboxed)| outboxed.delivery.webhook_id == id)
            .map(|(number, _)| *number)
            .collect();
        for number in gone {
            if let Some(outboxed) = state.deliveries.remove(&number) {
                state.by_id.remove(&outboxed.delivery.id);
            }
        }
        state.queues.retain(|(webhook, _), _| *webhook != id);
        let State {
            heads, deliveries, ..
        } = &mut *state;
        heads.retain(|(_, number)| deliveries.contains_key(number));
        Ok(true)
    }

    async fn dispatch_cursor(&self) -> Result<FeedCursor, StoreError> {
        Ok(lock(&self.state).cursor.clone())
    }

    async fn dispatch(
        &self,
        from: &FeedCursor,
        to: &FeedCursor,
        deliveries: &[Delivery],
    ) -> Result<bool, StoreError> {
        let mut state = lock(&self.state);
        if state.cursor != *from {
            return Ok(false);
        }
        for delivery in deliveries {
            if !state.webhooks.contains_key(&delivery.webhook_id)
                || state.by_id.contains_key(&delivery.id)
            {
                continue;
            }
            let number = state.next_number;
            state.next_number += 1;
            state.by_id.insert(delivery.id, number);
            let queue = state
                .queues
                .entry((delivery.webhook_id, delivery.contact_key.clone()))
                .or_default();
            queue.insert(number);
            if queue.len() == 1 {
                // None of its contact's before it: the head of its queue.
                state.heads.insert((delivery.created_at, number));
            }
            state.deliveries.insert(
                number,
                Outboxed {
                    delivery: delivery.clone(),
                    state: DeliveryState::Pending,
                    attempts: 0,
                    next_attempt_at: delivery.created_at,
                    leased_until: None,
                    finished_at: None,
                },
            );
        }
        state.cursor = to.clone();
        Ok(true)
    }

    async fn lease_deliveries(
        &self,
        now: OffsetDateTime,
        lease_until: OffsetDateTime,
        limit: usize,
        skip: &[WebhookId],
    ) -> Result<Vec<LeasedDelivery>, StoreError> {
        let mut state = lock(&self.state);
        // The heads of the queues, oldest due first (dispatch order among
        // equals), those due by `now` only.
        let mut due: Vec<u64> = Vec::new();
        for &(at, number) in &state.heads {
            if at > now || due.len() >= limit {
                break;
            }
            let Some(outboxed) = state.deliveries.get(&number) else {
                continue;
            };
            let Some(webhook) = state.webhooks.get(&outboxed.delivery.webhook_id) else {
                continue;
            };
            let free = outboxed.leased_until.is_none_or(|until| until < now);
            if webhook.status == WebhookStatus::Active && !skip.contains(&webhook.id) && free {
                due.push(number);
            }
        }
        let mut leased = Vec::with_capacity(due.len());
        for number in due {
            let Some(outboxed) = state.deliveries.get_mut(&number) else {
                continue;
            };
            outboxed.leased_until = Some(lease_until);
            let delivery = outboxed.delivery.clone();
            let attempts = outboxed.attempts;
            if let Some(webhook) = state.webhooks.get(&delivery.webhook_id) {
                leased.push(LeasedDelivery {
                    url: webhook.url.clone(),
                    secret_salt: webhook.secret_salt,
                    failing_since: webhook.failing_since,
                    delivery,
                    attempts,
                    leased_until: lease_until,
                });
            }
        }
        Ok(leased)
    }

    async fn finish_attempt(
        &self,
        attempt: &AttemptRecord,
        leased_until: OffsetDateTime,
        next: DeliveryNext,
        change: WebhookChange,
    ) -> Result<WebhookChange, StoreError> {
        let mut state = lock(&self.state);
        let held = |number: &u64| {
            state.deliveries.get(number).is_some_and(|outboxed| {
                outboxed.state == DeliveryState::Pending
                    && outboxed
                        .leased_until
                        .is_none_or(|until| until == leased_until)
            })
        };
        let Some(number) = state.by_id.get(&attempt.delivery_id).copied().filter(held) else {
            // Deleted with its webhook while the attempt ran, or leased by
            // another sender once this one's lease ran out (and perhaps
            // ended by it): nothing to keep, the delivery is left as it is.
            return Ok(change.applied(None, attempt.at));
        };
        if let Some(outboxed) = state.deliveries.get_mut(&number) {
            outboxed.attempts += 1;
            outboxed.leased_until = None;
            let due = outboxed.next_attempt_at;
            match next {
                DeliveryNext::Delivered | DeliveryNext::Failed => {
                    outboxed.state = if next == DeliveryNext::Delivered {
                        DeliveryState::Delivered
                    } else {
                        DeliveryState::Failed
                    };
                    outboxed.finished_at = Some(attempt.at);
                    state.dequeue(number, due);
                }
                DeliveryNext::RetryAt(at) => {
                    outboxed.next_attempt_at = at;
                    // Still its queue's head, due later.
                    if state.heads.remove(&(due, number)) {
                        state.heads.insert((at, number));
                    }
                }
            }
        }
        let failing_since =
            (state.webhooks.get(&attempt.webhook_id)).and_then(|webhook| webhook.failing_since);
        let applied = change.applied(failing_since, attempt.at);
        if let Some(webhook) = state.webhooks.get_mut(&attempt.webhook_id) {
            match applied {
                WebhookChange::Succeeded => webhook.failing_since = None,
                WebhookChange::Failing(since) | WebhookChange::SwitchOffIfFailingSince(since) => {
                    webhook.failing_since.get_or_insert(since);
                }
                WebhookChange::SwitchOff => {
                    webhook.status = WebhookStatus::Inactive;
                    webhook.updated_at = attempt.at;
                }
            }
        }
        let kept = state.attempts.entry(attempt.webhook_id).or_default();
        kept.push_front(attempt.clone());
        kept.truncate(KEPT_ATTEMPTS);
        Ok(applied)
    }

    async fn recent_attempts(
        &self,
        webhook: WebhookId,
        limit: usize,
    ) -> Result<Vec<AttemptRecord>, StoreError> {
        let state = lock(&self.state);
        Ok(state
            .attempts
            .get(&webhook)
            .map(|kept| kept.iter().take(limit).cloned().collect())
            .unwrap_or_default())
    }

    async fn pending_deliveries(&self) -> Result<u64, StoreError> {
        let state = lock(&self.state);
        Ok(state
            .deliveries
            .values()
            .filter(|outboxed| outboxed.state == DeliveryState::Pending)
            .count() as u64)
    }

    async fn delivery_state(
        &self,
        id: DeliveryId,
    ) -> Result<Option<(DeliveryState, u32)>, StoreError> {
        let state = lock(&self.state);
        Ok(state
            .by_id
            .get(&id)
            .and_then(|number| state.deliveries.get(number))
            .map(|outboxed| (outboxed.state, outboxed.attempts)))
    }

    async fn purge_deliveries(
        &self,
        cutoff: OffsetDateTime,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let mut state = lock(&self.state);
        let ended: Vec<u64> = state
            .deliveries
            .iter()
            .filter(|(_, outboxed)| outboxed.finished_at.is_some_and(|at| at < cutoff))
            .map(|(number, _)| *number)
            .take(limit)
            .collect();
        for number in &ended {
            if let Some(outboxed) = state.deliveries.remove(number) {
                state.by_id.remove(&outboxed.delivery.id);
            }
        }
        Ok(ended.len())
    }

    async fn repair_queue_heads(&self) -> Result<usize, StoreError> {
        // Nothing to repair: only this store's own methods write its
        // queues, and each keeps every queue's first delivery among the
        // heads (`State::dequeue`, `dispatch`). Nothing outlives the
        // process to be written by another release.
        Ok(0)
    }
}
