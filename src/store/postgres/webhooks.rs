//! [`WebhookStore`] on PostgreSQL: webhooks, the dispatcher's cursor, the
//! outbox of deliveries and the last attempts of each webhook, shared by
//! every server instance on the database.
//!
//! Atomicity holds in the database, across instances:
//!
//! - a URL is unique per account and event type by the
//!   `webhooks_url_unique` index;
//! - a dispatch is a transaction that first moves the cursor with
//!   `UPDATE ... WHERE feed_cursor = $from` (a compare-and-set: a second
//!   dispatcher waits on the row lock, then finds the cursor moved and
//!   updates nothing), then records the page's deliveries; their numbers
//!   are drawn under that row lock, so they grow in commit order;
//! - a lease is one statement that locks the deliveries it chooses with
//!   `FOR UPDATE SKIP LOCKED` and sets their lease: a concurrent lease skips
//!   them, or, once this one has committed, re-checks them, finds them
//!   leased and leaves them;
//! - an attempt's consequences are one transaction that updates the
//!   delivery, marks the head of its contact's queue (waiting, in share
//!   mode on the cursor's row, for a dispatch under way), then updates the
//!   webhook (whose row lock queues the attempts of one webhook, so that
//!   the trim to the last ones counts them all), then records the attempt
//!   and trims;
//! - the head of each contact's queue, the only delivery of it a lease
//!   reads, is marked by the dispatch that records it when none of the
//!   contact's is pending before it, and otherwise by the attempt that
//!   ends the one before: a dispatch and such an attempt at once are
//!   ordered by the cursor's row, so one of them sees the other's work;
//! - the repair of queues an earlier release left without a head marks
//!   each queue's earliest pending delivery in one statement that skips
//!   locked rows, and so never waits for the writers above.
//!
//! Deleting a webhook locks its deliveries before its row, in the order an
//! attempt takes them, so the two never wait for each other in a cycle.
//! Before it deletes the row, it takes the dispatch cursor's row in share
//! mode and deletes the deliveries again: a dispatch that recorded some for
//! the webhook has committed by then, and one that comes after finds the
//! webhook gone.
//!
//! These arguments rest on READ COMMITTED, PostgreSQL's default isolation:
//! each statement sees what committed before it began, and a row waited
//! for is read again once its lock is released. Under a stricter
//! `default_transaction_isolation`, a delete that meets a dispatch fails
//! with a serialization error instead (a `StoreError::Backend`, which
//! changes nothing).

use async_trait::async_trait;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::account::AccountId;
use crate::records::webhook::{
    AttemptRecord, Delivery, DeliveryId, DeliveryNext, DeliveryState, LeasedDelivery, Webhook,
    WebhookChange, WebhookId, WebhookStatus,
};
use crate::store::error::StoreError;
use crate::store::feed::FeedCursor;
use crate::store::sql::page_runs::statement_runs;
use crate::store::sql::records::RecordColumns as _;
use crate::store::sql::webhook_records::{
    ChangeColumns, KEPT_ATTEMPTS, NextColumns, WEBHOOK_COLUMNS, attempt_from, count,
    delivery_state_from, duration_column, identifiers_text, leased_from, relations_text, url_write,
    webhook_from,
};
use crate::store::sql::{self, backend, find_row, insert_row, malformed};
use crate::store::webhooks::{WebhookStore, WebhookWrite};

use super::PgStore;
use super::columns::Columns;

#[async_trait]
impl WebhookStore for PgStore {
    async fn insert_webhook(&self, webhook: &Webhook) -> Result<WebhookWrite, StoreError> {
        const ACTION: &str = "insert a webhook";
        // ON CONFLICT (id): a taken id is checked before the other unique
        // indexes and inserts nothing, so the only violation left to raise
        // is the URL's.
        let done = sqlx::query(
            "INSERT INTO webhooks
                 (id, account_id, client_id, event_type, url, event_identifiers,
                  include_relations, status, created_at, updated_at, secret_salt, failing_since)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(webhook.id.0)
        .bind(webhook.account_id.0)
        .bind(webhook.client_id.as_str())
        .bind(webhook.event_type.as_str())
        .bind(&webhook.url)
        .bind(identifiers_text(&webhook.event_identifiers)?)
        .bind(relations_text(&webhook.include_relations)?)
        .bind(webhook.status.as_str())
        .bind(webhook.created_at)
        .bind(webhook.updated_at)
        .bind(webhook.secret_salt.as_slice())
        .bind(webhook.failing_since)
        .execute(&self.pool)
        .await
        .map_err(sql::insert_failed("webhook", ACTION));
        match done {
            Ok(done) if done.rows_affected() == 0 => Err(StoreError::Duplicate { what: "webhook" }),
            Ok(_) => Ok(WebhookWrite::Stored),
            Err(error) => url_write(Err(error)),
        }
    }

    async fn find_webhook(&self, id: WebhookId) -> Result<Option<Webhook>, StoreError> {
        let sql = format!("SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE id = $1");
        let statement = sqlx::query(&sql).bind(id.0);
        find_row(&self.pool, statement, "read a webhook", webhook_from).await
    }

    async fn list_webhooks(&self, account: Option<AccountId>) -> Result<Vec<Webhook>, StoreError> {
        const ACTION: &str = "list webhooks";
        // seq is the registration order (the memory store's "oldest").
        let sql = format!(
            "SELECT {WEBHOOK_COLUMNS} FROM webhooks
             WHERE $1::uuid IS NULL OR account_id = $1 ORDER BY seq"
        );
        sqlx::query(&sql)
            .bind(account.map(|account| account.0))
            .fetch_all(&self.pool)
            .await
            .map_err(backend(ACTION))?
            .into_iter()
            .map(|row| webhook_from(&Columns::new(row, ACTION)))
            .collect()
    }

    async fn update_webhook(&self, webhook: &Webhook) -> Result<WebhookWrite, StoreError> {
        const ACTION: &str = "update a webhook";
        // One statement: the unique index refuses a URL taken in the
        // account, whichever instance races.
        let done = sqlx::query(
            "UPDATE webhooks SET event_type = $1, url = $2, event_identifiers = $3,
                 include_relations = $4, updated_at = $5
             WHERE id = $6",
        )
        .bind(webhook.event_type.as_str())
        .bind(&webhook.url)
        .bind(identifiers_text(&webhook.event_identifiers)?)
        .bind(relations_text(&webhook.include_relations)?)
        .bind(webhook.updated_at)
        .bind(webhook.id.0)
        .execute(&self.pool)
        .await
        .map_err(sql::insert_failed("webhook", ACTION));
        match done {
            Ok(done) if done.rows_affected() == 0 => Ok(WebhookWrite::NotFound),
            Ok(_) => Ok(WebhookWrite::Stored),
            Err(error) => url_write(Err(error)),
        }
    }

    async fn set_webhook_status(
        &self,
        id: WebhookId,
        status: WebhookStatus,
        at: OffsetDateTime,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE webhooks SET status = $1, updated_at = $2,
                 failing_since = CASE WHEN $3 THEN NULL ELSE failing_since END
             WHERE id = $4",
        )
        .bind(status.as_str())
        .bind(at)
        .bind(status == WebhookStatus::Active)
        .bind(id.0)
        .execute(&self.pool)
        .await
        .map_err(backend("switch a webhook"))?;
        Ok(done.rows_affected() > 0)
    }

    async fn delete_webhook(&self, id: WebhookId) -> Result<bool, StoreError> {
        const ACTION: &str = "delete a webhook";
        let mut tx = self.pool.begin().await.map_err(backend(ACTION))?;
        // The deliveries first, as many as there are, without holding up
        // the dispatchers; locking them before the webhook's row is the
        // order an attempt locks them in.
        delete_deliveries_of(&mut tx, id, ACTION).await?;
        // Then the dispatch cursor's row, in share mode. A dispatch holds
        // it (its `UPDATE`) from before it records a page until it
        // commits, so this waits for a dispatch under way, and the
        // statements below, each with a snapshot of its own (READ
        // COMMITTED), see every delivery it recorded and delete them too.
        // A dispatch that comes later waits for this to commit, then finds
        // the webhook gone and records nothing for it. Deletes share the
        // lock, so they do not queue behind each other.
        sqlx::query("SELECT 1 FROM webhook_dispatch WHERE id = 1 FOR SHARE")
            .execute(&mut *tx)
            .await
            .map_err(backend(ACTION))?;
        delete_deliveries_of(&mut tx, id, ACTION).await?;
        let done = sqlx::query("DELETE FROM webhooks WHERE id = $1")
            .bind(id.0)
            .execute(&mut *tx)
            .await
            .map_err(backend(ACTION))?;
        if done.rows_affected() == 0 {
            // No such webhook: dropping the transaction rolls it back.
            return Ok(false);
        }
        sqlx::query("DELETE FROM webhook_attempts WHERE webhook_id = $1")
            .bind(id.0)
            .execute(&mut *tx)
            .await
            .map_err(backend(ACTION))?;
        tx.commit().await.map_err(backend(ACTION))?;
        Ok(true)
    }

    async fn dispatch_cursor(&self) -> Result<FeedCursor, StoreError> {
        let text: String =
            sqlx::query_scalar("SELECT feed_cursor FROM webhook_dispatch WHERE id = 1")
                .fetch_one(&self.pool)
                .await
                .map_err(backend("read the webhook dispatch cursor"))?;
        Ok(FeedCursor::new(text))
    }

    async fn dispatch(
        &self,
        from: &FeedCursor,
        to: &FeedCursor,
        deliveries: &[Delivery],
    ) -> Result<bool, StoreError> {
        const ACTION: &str = "dispatch webhook deliveries";
        let mut tx = self.pool.begin().await.map_err(backend(ACTION))?;
        // First, so that the row lock serialises dispatchers before any
        // delivery is numbered.
        let moved = sqlx::query(
            "UPDATE webhook_dispatch SET feed_cursor = $1 WHERE id = 1 AND feed_cursor = $2",
        )
        .bind(to.as_str())
        .bind(from.as_str())
        .execute(&mut *tx)
        .await
        .map_err(backend(ACTION))?;
        if moved.rows_affected() == 0 {
            // Another dispatcher passed this page first; dropping the
            // transaction rolls it back.
            return Ok(false);
        }
        // Numbers are drawn under the cursor's lock only: every one drawn
        // below is larger.
        let numbered_before: i64 =
            sqlx::query_scalar("SELECT COALESCE(MAX(number), 0) FROM webhook_deliveries")
                .fetch_one(&mut *tx)
                .await
                .map_err(backend(ACTION))?;
        // A run at a time, in order: each draws its numbers after the
        // run before.
        for run in statement_runs(deliveries) {
            insert_deliveries(&mut tx, run, ACTION).await?;
        }
        // The page's heads: each delivery with no earlier one of its
        // contact to its webhook pending, in this page or before it
        // (migration 0011 says why heads are marked). An attempt that ends
        // an earlier one meanwhile marks its successor itself once this
        // commits (`finish_attempt`).
        sqlx::query(
            "UPDATE webhook_deliveries AS d SET head = true
             WHERE d.number > $1
               AND NOT EXISTS (
                   SELECT 1 FROM webhook_deliveries e
                   WHERE e.webhook_id = d.webhook_id AND e.contact_key = d.contact_key
                     AND e.state = 'pending' AND e.number < d.number)",
        )
        .bind(numbered_before)
        .execute(&mut *tx)
        .await
        .map_err(backend(ACTION))?;
        tx.commit().await.map_err(backend(ACTION))?;
        Ok(true)
    }

    async fn lease_deliveries(
        &self,
        now: OffsetDateTime,
        lease_until: OffsetDateTime,
        limit: usize,
        skip: &[WebhookId],
    ) -> Result<Vec<LeasedDelivery>, StoreError> {
        const ACTION: &str = "lease webhook deliveries";
        let skip: Vec<Uuid> = skip.iter().map(|id| id.0).collect();
        // SKIP LOCKED: a delivery another instance is leasing right now is
        // not waited for but left to it. One it leased and committed since
        // this statement's snapshot is re-checked when locked (READ
        // COMMITTED), found leased, and left too.
        let rows = sqlx::query(
            "WITH chosen AS (
                 SELECT d.number FROM webhook_deliveries d
                 JOIN webhooks w ON w.id = d.webhook_id
                 WHERE d.state = 'pending' AND d.head AND d.next_attempt_at <= $1
                   AND (d.leased_until IS NULL OR d.leased_until < $1)
                   AND w.status = 'active'
                   AND NOT (d.webhook_id = ANY($3))
                 ORDER BY d.next_attempt_at, d.number
                 LIMIT $4
                 FOR UPDATE OF d SKIP LOCKED
             )
             UPDATE webhook_deliveries d SET leased_until = $2
             FROM chosen, webhooks w
             WHERE d.number = chosen.number AND w.id = d.webhook_id
             RETURNING d.number, d.next_attempt_at, d.id, d.webhook_id, d.event_uuid,
                       d.contact_key, d.body, d.created_at, d.attempts,
                       w.url, w.secret_salt, w.failing_since",
        )
        .bind(now)
        .bind(lease_until)
        .bind(&skip)
        .bind(count(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(backend(ACTION))?;
        // RETURNING comes in no promised order: oldest due first again.
        let mut leased = Vec::with_capacity(rows.len());
        for row in rows {
            let columns = Columns::new(row, ACTION);
            let due = columns.time("next_attempt_at")?;
            let number = columns.integer("number")?;
            leased.push(((due, number), leased_from(&columns, lease_until)?));
        }
        leased.sort_by_key(|(order, _)| *order);
        Ok(leased.into_iter().map(|(_, delivery)| delivery).collect())
    }

    async fn finish_attempt(
        &self,
        attempt: &AttemptRecord,
        leased_until: OffsetDateTime,
        next: DeliveryNext,
        change: WebhookChange,
    ) -> Result<WebhookChange, StoreError> {
        const ACTION: &str = "record a webhook attempt";
        let next = NextColumns::new(next, attempt.at);
        let mut tx = self.pool.begin().await.map_err(backend(ACTION))?;
        let done = sqlx::query(
            "UPDATE webhook_deliveries SET attempts = attempts + 1, leased_until = NULL,
                 state = COALESCE($1, state), finished_at = COALESCE($2, finished_at),
                 next_attempt_at = COALESCE($3, next_attempt_at)
             WHERE id = $4 AND state = 'pending'
               AND (leased_until IS NULL OR leased_until = $5)",
        )
        .bind(next.state)
        .bind(next.finished_at)
        .bind(next.next_attempt_at)
        .bind(attempt.delivery_id.0)
        .bind(leased_until)
        .execute(&mut *tx)
        .await
        .map_err(backend(ACTION))?;
        if done.rows_affected() == 0 {
            // Deleted with its webhook while the attempt ran, or leased by
            // another sender once this one's lease ran out (and perhaps
            // ended by it): nothing to keep, the delivery is left as it is.
            return Ok(change.applied(None, attempt.at));
        }
        // The head of the delivery's queue (migration 0011): its contact's
        // earliest pending delivery to its webhook. That is the next one
        // once this one has ended, and this one still while it waits for a
        // retry, already marked. A dispatch under way may be recording
        // that next one, having found this one pending and so not marked
        // it: the cursor's row in share mode waits for such a dispatch to
        // commit, so that the statement below sees its deliveries, and
        // makes a later dispatch wait for this commit, so that it finds
        // this one ended. Share locks do not wait for each other, so
        // attempts do not queue behind each other here.
        sqlx::query("SELECT 1 FROM webhook_dispatch WHERE id = 1 FOR SHARE")
            .execute(&mut *tx)
            .await
            .map_err(backend(ACTION))?;
        // SKIP LOCKED: a pending delivery that is not a head is locked by
        // nothing but a deletion of its webhook, which takes all of the
        // webhook's deliveries, and may hold the next one while it waits
        // for this one: waiting for it would close a cycle.
        sqlx::query(
            "UPDATE webhook_deliveries SET head = true WHERE number = (
                 SELECT e.number FROM webhook_deliveries d JOIN webhook_deliveries e
                     ON e.webhook_id = d.webhook_id AND e.contact_key = d.contact_key
                 WHERE d.id = $1 AND e.state = 'pending'
                 ORDER BY e.number LIMIT 1
                 FOR UPDATE OF e SKIP LOCKED)",
        )
        .bind(attempt.delivery_id.0)
        .execute(&mut *tx)
        .await
        .map_err(backend(ACTION))?;
        // The webhook's row locked, even for a change that writes nothing,
        // in the mode the UPDATE below takes (`NO KEY UPDATE`, so it
        // conflicts with nothing the UPDATE alone did not): the lock queues the
        // attempts of one webhook until this one commits, so that each
        // reads the `failing_since` the one before left (the change is made
        // against it) and the trim below sees every attempt before it.
        let failing_since: Option<Option<OffsetDateTime>> = sqlx::query_scalar(
            "SELECT failing_since FROM webhooks WHERE id = $1 FOR NO KEY UPDATE",
        )
        .bind(attempt.webhook_id.0)
        .fetch_optional(&mut *tx)
        .await
        .map_err(backend(ACTION))?;
        let (columns, applied) = ChangeColumns::new(change, failing_since.flatten(), attempt.at);
        let change = match columns {
            ChangeColumns::ClearFailing => {
                sqlx::query("UPDATE webhooks SET failing_since = NULL WHERE id = $1")
                    .bind(attempt.webhook_id.0)
            }
            ChangeColumns::Failing(since) => sqlx::query(
                "UPDATE webhooks SET failing_since = COALESCE(failing_since, $2) WHERE id = $1",
            )
            .bind(attempt.webhook_id.0)
            .bind(since),
            ChangeColumns::SwitchOff(at) => sqlx::query(
                "UPDATE webhooks SET status = 'inactive', updated_at = $2 WHERE id = $1",
            )
            .bind(attempt.webhook_id.0)
            .bind(at),
        };
        change.execute(&mut *tx).await.map_err(backend(ACTION))?;
        sqlx::query(
            "INSERT INTO webhook_attempts
                 (delivery_id, webhook_id, at, status, error, duration_ms)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(attempt.delivery_id.0)
        .bind(attempt.webhook_id.0)
        .bind(attempt.at)
        .bind(attempt.status.map(i64::from))
        .bind(attempt.error.as_deref())
        .bind(duration_column(attempt))
        .execute(&mut *tx)
        .await
        .map_err(backend(ACTION))?;
        // Everything up to the first attempt past the kept ones goes.
        sqlx::query(
            "DELETE FROM webhook_attempts WHERE webhook_id = $1 AND id <= (
                 SELECT id FROM webhook_attempts WHERE webhook_id = $1
                 ORDER BY id DESC LIMIT 1 OFFSET $2)",
        )
        .bind(attempt.webhook_id.0)
        .bind(count(KEPT_ATTEMPTS))
        .execute(&mut *tx)
        .await
        .map_err(backend(ACTION))?;
        tx.commit().await.map_err(backend(ACTION))?;
        Ok(applied)
    }

    async fn recent_attempts(
        &self,
        webhook: WebhookId,
        limit: usize,
    ) -> Result<Vec<AttemptRecord>, StoreError> {
        const ACTION: &str = "read webhook attempts";
        sqlx::query(
            "SELECT delivery_id, webhook_id, at, status, error, duration_ms
             FROM webhook_attempts WHERE webhook_id = $1 ORDER BY id DESC LIMIT $2",
        )
        .bind(webhook.0)
        .bind(count(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(backend(ACTION))?
        .into_iter()
        .map(|row| attempt_from(&Columns::new(row, ACTION)))
        .collect()
    }

    async fn pending_deliveries(&self) -> Result<u64, StoreError> {
        const ACTION: &str = "count pending webhook deliveries";
        let pending: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM webhook_deliveries WHERE state = 'pending'")
                .fetch_one(&self.pool)
                .await
                .map_err(backend(ACTION))?;
        u64::try_from(pending).map_err(|_| malformed(ACTION, "count"))
    }

    async fn delivery_state(
        &self,
        id: DeliveryId,
    ) -> Result<Option<(DeliveryState, u32)>, StoreError> {
        let statement =
            sqlx::query("SELECT state, attempts FROM webhook_deliveries WHERE id = $1").bind(id.0);
        find_row(
            &self.pool,
            statement,
            "read a webhook delivery",
            delivery_state_from,
        )
        .await
    }

    async fn purge_deliveries(
        &self,
        cutoff: OffsetDateTime,
        limit: usize,
    ) -> Result<usize, StoreError> {
        // Ended deliveries in dispatch order. Their attempts stay: only the
        // last ones of each webhook are kept anyway.
        const PURGES: [&str; 1] = ["DELETE FROM webhook_deliveries WHERE number IN
             (SELECT number FROM webhook_deliveries WHERE finished_at < $1
              ORDER BY number LIMIT $2)"];
        sql::purge(
            &self.pool,
            &PURGES,
            cutoff,
            limit,
            "purge webhook deliveries",
        )
        .await
    }

    async fn repair_queue_heads(&self) -> Result<usize, StoreError> {
        const ACTION: &str = "repair webhook delivery queues";
        // Each queue's earliest pending delivery, by one pass over the
        // pending deliveries' contact index, marked where an instance of a
        // previous release left it unmarked (migration 0011): one that ran
        // beside this release, or before it again after a rollback.
        //
        // Safe beside every other writer (READ COMMITTED): deliveries are
        // numbered in commit order under the cursor's lock, so none
        // committed later comes before a queue's earliest pending one, and
        // a pending delivery only ever ends; so the earliest this reads
        // stays its queue's earliest until it ends, and the lock's re-check
        // of `state` on the row's newest version leaves it alone if it
        // ended meanwhile. The marks of this release's dispatches and
        // attempts commit with what they mark, so this never sees a queue
        // of theirs half-marked. SKIP LOCKED: a delivery locked right now
        // (its webhook being deleted, its queue's mark being set by an
        // attempt) is left to that writer or to the next repair, and this
        // never waits in a cycle with a delete locking many deliveries.
        let done = sqlx::query(
            "WITH unmarked AS (
                 SELECT d.number FROM webhook_deliveries d
                 WHERE NOT d.head AND d.state = 'pending' AND d.number IN (
                     SELECT MIN(number) FROM webhook_deliveries WHERE state = 'pending'
                     GROUP BY webhook_id, contact_key)
                 FOR UPDATE OF d SKIP LOCKED
             )
             UPDATE webhook_deliveries d SET head = true
             FROM unmarked WHERE d.number = unmarked.number",
        )
        .execute(&self.pool)
        .await
        .map_err(backend(ACTION))?;
        usize::try_from(done.rows_affected()).map_err(|_| malformed(ACTION, "count"))
    }
}

/// Deletes the deliveries of webhook `id`, in `tx`.
async fn delete_deliveries_of(
    tx: &mut sqlx::PgConnection,
    id: WebhookId,
    action: &'static str,
) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM webhook_deliveries WHERE webhook_id = $1")
        .bind(id.0)
        .execute(&mut *tx)
        .await
        .map_err(backend(action))?;
    Ok(())
}

/// Records a run of a page's `deliveries` (cut by
/// [`statement_runs`]) in one statement, numbered in the order given,
/// inside the dispatch's transaction.
///
/// The numbers are drawn from the table's sequence (the BIGSERIAL
/// `number`'s, migration 0009, resolved through the `search_path` as the
/// table is) and sorted before they are handed out (`array_agg(... ORDER
/// BY ...)`), since the order in which PostgreSQL evaluates `nextval`
/// across the rows of one statement is not promised; a delivery's number
/// is then the one at its place in the page.
/// Drawn under the dispatch cursor's row lock, they are larger than any
/// number of a dispatch committed before. A delivery whose webhook is gone,
/// or whose id is recorded already ([`WebhookStore::dispatch`] says why),
/// is left out; its number is a gap, as a rolled-back one would be.
async fn insert_deliveries(
    tx: &mut sqlx::PgConnection,
    deliveries: &[Delivery],
    action: &'static str,
) -> Result<(), StoreError> {
    if deliveries.is_empty() {
        return Ok(());
    }
    let mut ids = Vec::with_capacity(deliveries.len());
    let mut webhook_ids = Vec::with_capacity(deliveries.len());
    let mut event_uuids = Vec::with_capacity(deliveries.len());
    let mut contact_keys = Vec::with_capacity(deliveries.len());
    let mut bodies = Vec::with_capacity(deliveries.len());
    let mut created_ats = Vec::with_capacity(deliveries.len());
    for delivery in deliveries {
        ids.push(delivery.id.0);
        webhook_ids.push(delivery.webhook_id.0);
        event_uuids.push(delivery.event_uuid);
        contact_keys.push(delivery.contact_key.as_str());
        bodies.push(delivery.body.as_str());
        created_ats.push(delivery.created_at);
    }
    let statement = sqlx::query(
        // The arrays are stepped through together, row by row, in the
        // select list; the join keeps a delivery only while its webhook
        // exists. A delete of the webhook cannot run between this and the
        // commit: it waits for the cursor's row lock this transaction holds
        // (`delete_webhook`).
        "INSERT INTO webhook_deliveries
             (number, id, webhook_id, event_uuid, contact_key, body, created_at, state,
              next_attempt_at)
         SELECT page.number, page.id, page.webhook_id, page.event_uuid, page.contact_key,
                page.body, page.created_at, 'pending', page.created_at
         FROM (SELECT UNNEST((SELECT array_agg(drawn.number ORDER BY drawn.number)
                              FROM (SELECT nextval('webhook_deliveries_number_seq') AS number
                                    FROM generate_series(1, cardinality($1::uuid[]))) AS drawn))
                          AS number,
                      UNNEST($1::uuid[]) AS id, UNNEST($2::uuid[]) AS webhook_id,
                      UNNEST($3::uuid[]) AS event_uuid, UNNEST($4::text[]) AS contact_key,
                      UNNEST($5::text[]) AS body, UNNEST($6::timestamptz[]) AS created_at)
              AS page
         JOIN webhooks ON webhooks.id = page.webhook_id
         ON CONFLICT (id) DO NOTHING",
    )
    .bind(ids)
    .bind(webhook_ids)
    .bind(event_uuids)
    .bind(contact_keys)
    .bind(bodies)
    .bind(created_ats);
    insert_row(&mut *tx, statement, "webhook delivery", action).await
}
