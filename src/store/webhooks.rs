//! The storage contract of webhooks: registrations, the deliveries the
//! dispatcher materialises from the event feed, and their attempts.
//!
//! # Why deliveries are taken from the feed, with one persisted cursor
//!
//! A delivery must be durable from the moment its conversion is
//! acknowledged. Two designs give that: record the deliveries in the
//! transaction that records the event, or follow the event feed (which is
//! durable, ordered and at least once) with a persisted cursor. We follow
//! the feed, with one cursor for all webhooks, and materialise each page's
//! deliveries into an outbox *atomically with the cursor's advance*
//! ([`WebhookStore::dispatch`]):
//!
//! - intake stays as fast as it is: its hot path (recording a submission)
//!   gains no lookup of webhooks and no extra rows, and a store whose
//!   events go elsewhere (JetStream) loses nothing (SQLite's single writer
//!   runs the outbox's writes in its groups of events, after them, each in
//!   a savepoint of its own: they share a group's sync, not its rows);
//! - an event is acknowledged only once in the feed, so it reaches the
//!   outbox however the process dies: the cursor moves only with the
//!   deliveries of the page it passes;
//! - the outbox gives each delivery its own retry state, lease and
//!   attempts, which a cursor per webhook could not (one dead receiver
//!   would hold back every later conversion of its webhook);
//! - the dispatch is a compare-and-set on the cursor, so two instances
//!   reading the same page record its deliveries once.

use async_trait::async_trait;
use time::OffsetDateTime;

use crate::account::AccountId;
use crate::records::webhook::{
    AttemptRecord, Delivery, DeliveryId, DeliveryNext, LeasedDelivery, Webhook, WebhookChange,
    WebhookId, WebhookStatus,
};
use crate::store::error::StoreError;
use crate::store::feed::FeedCursor;

/// The most bytes of deliveries one statement of PostgreSQL's
/// [`WebhookStore::dispatch`] carries, 8 MiB: a larger page is recorded in
/// several statements, in its transaction (`store::sql::page_runs` says
/// why and how).
#[cfg_attr(
    not(any(feature = "postgres", feature = "test-util")),
    allow(dead_code)
)]
pub(crate) const DISPATCH_STATEMENT_BYTES: usize = 8 << 20;

/// What [`WebhookStore::update_webhook`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WebhookWrite {
    /// Stored.
    Stored,
    /// Refused: another webhook of the account has the same URL for the
    /// same event type. Nothing changed.
    DuplicateUrl,
    /// No such webhook. Nothing changed.
    NotFound,
}

/// Webhooks and their deliveries.
#[async_trait]
pub trait WebhookStore: Send + Sync {
    /// Stores a new webhook, *atomically* refusing it
    /// ([`WebhookWrite::DuplicateUrl`]) when a webhook of the same account
    /// has the same URL and event type, however many callers race.
    ///
    /// # Errors
    /// `Duplicate` if the id exists; `Backend` on failure.
    async fn insert_webhook(&self, webhook: &Webhook) -> Result<WebhookWrite, StoreError>;

    /// The webhook with this id.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn find_webhook(&self, id: WebhookId) -> Result<Option<Webhook>, StoreError>;

    /// The webhooks of `account`, oldest first (`None`: of every account,
    /// for operators).
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn list_webhooks(&self, account: Option<AccountId>) -> Result<Vec<Webhook>, StoreError>;

    /// Replaces a webhook's URL, event identifiers, relations and
    /// `updated_at` (not its status, salt or `failing_since`), refusing
    /// *atomically* a URL another webhook of the account has for the same
    /// event type.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn update_webhook(&self, webhook: &Webhook) -> Result<WebhookWrite, StoreError>;

    /// Switches a webhook on or off at `at` (switching on clears
    /// `failing_since`). Returns whether it exists.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn set_webhook_status(
        &self,
        id: WebhookId,
        status: WebhookStatus,
        at: OffsetDateTime,
    ) -> Result<bool, StoreError>;

    /// Deletes a webhook with its deliveries and attempts. Returns whether
    /// it existed.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn delete_webhook(&self, id: WebhookId) -> Result<bool, StoreError>;

    /// Where the dispatcher is in the event feed ([`FeedCursor::start`]
    /// before its first dispatch).
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn dispatch_cursor(&self) -> Result<FeedCursor, StoreError>;

    /// Records `deliveries` and moves the dispatcher's cursor from `from`
    /// to `to`, *atomically*: both or neither. Only when the stored cursor
    /// is still `from` (a compare-and-set): otherwise another dispatcher
    /// passed this page first, nothing is recorded and the answer is
    /// `false`. Deliveries are numbered in the order given, after every
    /// delivery recorded before, and that number orders the deliveries of
    /// one contact to one webhook. A delivery to a webhook deleted since
    /// the caller listed it is left out (else it would wait for ever), and
    /// so is a delivery whose id is recorded already, or earlier in
    /// `deliveries`: it is that delivery (the dispatcher draws an id from
    /// the webhook and the event, [`DeliveryId::of_event`]), met again
    /// where the feed is read again from an earlier cursor (one an operator
    /// set back, a feed replayed), which must not stop the dispatcher.
    /// `deliveries` may be of any number and size: a store that bounds
    /// what one statement carries records them in several, in one
    /// transaction (PostgreSQL, at 8 MiB of text a statement; SQLite binds
    /// them row by row).
    ///
    /// # Errors
    /// `Backend` on failure (then nothing changed).
    async fn dispatch(
        &self,
        from: &FeedCursor,
        to: &FeedCursor,
        deliveries: &[Delivery],
    ) -> Result<bool, StoreError>;

    /// Leases at most `limit` deliveries to this caller until
    /// `lease_until`, *atomically*: no delivery is leased to two callers
    /// at once (across processes, for shared databases). A delivery is
    /// leased only when it is pending, due (its next attempt at or before
    /// `now`), not leased (or its lease ended before `now`), its webhook is
    /// active and not in `skip`, and it is the first pending delivery of
    /// its contact to its webhook (so one contact's deliveries go in
    /// order). Oldest due first.
    ///
    /// # Errors
    /// `Backend` on failure (then nothing is leased).
    async fn lease_deliveries(
        &self,
        now: OffsetDateTime,
        lease_until: OffsetDateTime,
        limit: usize,
        skip: &[WebhookId],
    ) -> Result<Vec<LeasedDelivery>, StoreError>;

    /// Records an attempt made under the lease that ends at
    /// `leased_until` ([`LeasedDelivery::leased_until`]) and what follows
    /// it, *atomically*: the attempt is kept, the delivery's attempt count
    /// grows by one, it becomes `next` (its lease ends), and its webhook
    /// takes `change` as [`WebhookChange::applied`] makes it against the
    /// webhook's `failing_since` read in the same atomic step. Keeps at
    /// most the last 20 attempts of each webhook. Returns the change made
    /// (`change` applied; as applied to no `failing_since` when nothing is
    /// recorded).
    ///
    /// Nothing is recorded for a delivery that is gone (deleted with its
    /// webhook while the attempt ran), no longer pending (another sender
    /// leased it once this attempt's lease ran out, and ended it first: a
    /// late attempt never turns a delivered delivery into a failed one),
    /// or leased again (it has a lease, and that lease does not end at
    /// `leased_until`: another sender holds it, and a late attempt must
    /// not end that lease, so that a third sender could lease the delivery
    /// while the second still sends it). A delivery with no lease (its
    /// holder finished it, and it waits for a retry) takes the attempt.
    ///
    /// # Errors
    /// `Backend` on failure (then nothing changed; the lease runs out and
    /// the delivery is attempted again).
    async fn finish_attempt(
        &self,
        attempt: &AttemptRecord,
        leased_until: OffsetDateTime,
        next: DeliveryNext,
        change: WebhookChange,
    ) -> Result<WebhookChange, StoreError>;

    /// The last `limit` attempts to a webhook, newest first.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn recent_attempts(
        &self,
        webhook: WebhookId,
        limit: usize,
    ) -> Result<Vec<AttemptRecord>, StoreError>;

    /// How many deliveries are pending, over every webhook.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn pending_deliveries(&self) -> Result<u64, StoreError>;

    /// The state and attempt count of a delivery, for tests and operators.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn delivery_state(
        &self,
        id: DeliveryId,
    ) -> Result<Option<(crate::records::webhook::DeliveryState, u32)>, StoreError>;

    /// Deletes at most `limit` deliveries that ended (delivered or failed)
    /// before `cutoff`, with their attempts beyond the last ones kept per
    /// webhook, and returns how many deliveries it deleted.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn purge_deliveries(
        &self,
        cutoff: OffsetDateTime,
        limit: usize,
    ) -> Result<usize, StoreError>;

    /// Makes every contact's earliest pending delivery to a webhook
    /// leasable again where a writer that did not keep the store's own
    /// record of it left it unmarked, and returns how many it repaired.
    ///
    /// The SQL stores mark the first pending delivery of each (webhook,
    /// contact) queue as its head, and a lease reads the heads alone, so
    /// that it never walks a long queue. A release before the marks
    /// (SQLite's migration 9, PostgreSQL's 11) records deliveries without
    /// them and does not mark a queue's next delivery when it ends one: an
    /// instance of it still running beside this release (a rolling
    /// upgrade on PostgreSQL), or run again on an upgraded database (a
    /// rollback, then the upgrade once more), leaves queues whose first
    /// delivery no lease of this release takes, for ever. This heals them;
    /// on a store that only this release wrote, it changes nothing and
    /// returns 0. [`Gateway::purge_expired`](crate::Gateway::purge_expired)
    /// calls it, so the periodic purge heals such queues within one
    /// interval, and at start-up.
    ///
    /// It never marks a delivery that is not its queue's earliest pending
    /// one: deliveries are numbered in dispatch order and a pending one
    /// only ever ends, so the earliest pending delivery it reads stays the
    /// earliest until it ends, whatever runs beside it.
    ///
    /// # Errors
    /// `Backend` on failure; the next call carries on.
    async fn repair_queue_heads(&self) -> Result<usize, StoreError>;
}
