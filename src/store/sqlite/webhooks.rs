//! [`WebhookStore`] on SQLite: webhooks, the dispatcher's cursor, the
//! outbox of deliveries and the last attempts of each webhook.
//!
//! Every write goes through the sqlx writer, in its turn at the write gate.
//! What reads before it writes (inserting a webhook, the cursor's
//! compare-and-set with its deliveries, a lease, an attempt with its
//! consequences, a deletion) runs in a `BEGIN IMMEDIATE` transaction, which
//! holds SQLite's write lock from its first statement: no other connection
//! or process writes between its read and its write, so a delivery is never
//! leased twice and a page is never dispatched twice. The uniqueness of a
//! URL is the `webhooks_url_unique` index's.

use async_trait::async_trait;
use time::OffsetDateTime;

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

use super::SqliteStore;
use super::columns::{Columns, json_text, micros, opt_micros, uuid_text};

#[async_trait]
impl WebhookStore for SqliteStore {
    async fn insert_webhook(&self, webhook: &Webhook) -> Result<WebhookWrite, StoreError> {
        const ACTION: &str = "insert a webhook";
        // The id is checked under the write lock, so that the only unique
        // violation the INSERT can meet is the URL's.
        let (_turn, mut tx) = self.write_transaction(ACTION).await?;
        let exists: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM webhooks WHERE id = ?)")
                .bind(uuid_text(webhook.id.0))
                .fetch_one(&mut *tx)
                .await
                .map_err(backend(ACTION))?;
        if exists {
            return Err(StoreError::Duplicate { what: "webhook" });
        }
        let statement = sqlx::query(
            "INSERT INTO webhooks
                 (id, account_id, client_id, event_type, url, event_identifiers,
                  include_relations, status, created_at, updated_at, secret_salt, failing_since)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(uuid_text(webhook.id.0))
        .bind(uuid_text(webhook.account_id.0))
        .bind(webhook.client_id.as_str())
        .bind(webhook.event_type.as_str())
        .bind(&webhook.url)
        .bind(identifiers_text(&webhook.event_identifiers)?)
        .bind(relations_text(&webhook.include_relations)?)
        .bind(webhook.status.as_str())
        .bind(micros(webhook.created_at)?)
        .bind(micros(webhook.updated_at)?)
        .bind(webhook.secret_salt.as_slice())
        .bind(opt_micros(webhook.failing_since)?);
        let written = url_write(insert_row(&mut *tx, statement, "webhook", ACTION).await)?;
        if written == WebhookWrite::Stored {
            tx.commit().await.map_err(backend(ACTION))?;
        }
        Ok(written)
    }

    async fn find_webhook(&self, id: WebhookId) -> Result<Option<Webhook>, StoreError> {
        let sql = format!("SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE id = ?");
        let statement = sqlx::query(&sql).bind(uuid_text(id.0));
        find_row(&self.reader, statement, "read a webhook", |c| {
            webhook_from(c)
        })
        .await
    }

    async fn list_webhooks(&self, account: Option<AccountId>) -> Result<Vec<Webhook>, StoreError> {
        const ACTION: &str = "list webhooks";
        // rowid is the registration order (the memory store's "oldest").
        let rows = match account {
            Some(account) => {
                let sql = format!(
                    "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE account_id = ? ORDER BY rowid"
                );
                sqlx::query(&sql)
                    .bind(uuid_text(account.0))
                    .fetch_all(&self.reader)
                    .await
            }
            None => {
                let sql = format!("SELECT {WEBHOOK_COLUMNS} FROM webhooks ORDER BY rowid");
                sqlx::query(&sql).fetch_all(&self.reader).await
            }
        }
        .map_err(backend(ACTION))?;
        rows.into_iter()
            .map(|row| webhook_from(&Columns::new(row, ACTION)))
            .collect()
    }

    async fn update_webhook(&self, webhook: &Webhook) -> Result<WebhookWrite, StoreError> {
        const ACTION: &str = "update a webhook";
        // One statement: the unique index refuses a URL taken in the
        // account, whoever races.
        let _turn = self.write_turn().await;
        let done = sqlx::query(
            "UPDATE webhooks SET event_type = ?, url = ?, event_identifiers = ?,
                 include_relations = ?, updated_at = ?
             WHERE id = ?",
        )
        .bind(webhook.event_type.as_str())
        .bind(&webhook.url)
        .bind(identifiers_text(&webhook.event_identifiers)?)
        .bind(relations_text(&webhook.include_relations)?)
        .bind(micros(webhook.updated_at)?)
        .bind(uuid_text(webhook.id.0))
        .execute(&self.writer)
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
        let _turn = self.write_turn().await;
        let done = sqlx::query(
            "UPDATE webhooks SET status = ?1, updated_at = ?2,
                 failing_since = CASE WHEN ?1 = 'active' THEN NULL ELSE failing_since END
             WHERE id = ?3",
        )
        .bind(status.as_str())
        .bind(micros(at)?)
        .bind(uuid_text(id.0))
        .execute(&self.writer)
        .await
        .map_err(backend("switch a webhook"))?;
        Ok(done.rows_affected() > 0)
    }

    async fn delete_webhook(&self, id: WebhookId) -> Result<bool, StoreError> {
        const ACTION: &str = "delete a webhook";
        let (_turn, mut tx) = self.write_transaction(ACTION).await?;
        let done = sqlx::query("DELETE FROM webhooks WHERE id = ?")
            .bind(uuid_text(id.0))
            .execute(&mut *tx)
            .await
            .map_err(backend(ACTION))?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        for statement in [
            "DELETE FROM webhook_deliveries WHERE webhook_id = ?",
            "DELETE FROM webhook_attempts WHERE webhook_id = ?",
        ] {
            sqlx::query(statement)
                .bind(uuid_text(id.0))
                .execute(&mut *tx)
                .await
                .map_err(backend(ACTION))?;
        }
        tx.commit().await.map_err(backend(ACTION))?;
        Ok(true)
    }

    async fn dispatch_cursor(&self) -> Result<FeedCursor, StoreError> {
        let text: String =
            sqlx::query_scalar("SELECT feed_cursor FROM webhook_dispatch WHERE id = 1")
                .fetch_one(&self.reader)
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
        let (_turn, mut tx) = self.write_transaction(ACTION).await?;
        let moved = sqlx::query(
            "UPDATE webhook_dispatch SET feed_cursor = ? WHERE id = 1 AND feed_cursor = ?",
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
        // Every number drawn below is larger (AUTOINCREMENT).
        let numbered_before: i64 =
            sqlx::query_scalar("SELECT COALESCE(MAX(number), 0) FROM webhook_deliveries")
                .fetch_one(&mut *tx)
                .await
                .map_err(backend(ACTION))?;
        // Runs bound the bytes of one statement, chunks its parameters.
        for run in statement_runs(deliveries) {
            for rows in run.chunks(ROWS_PER_INSERT) {
                insert_deliveries(&mut tx, rows, ACTION).await?;
            }
        }
        // The page's heads: each delivery with no earlier one of its
        // contact to its webhook pending, in this page or before it (the
        // migration 0009 says why heads are marked). Once all the runs are
        // in, so that a contact's second delivery in the page sees its
        // first.
        sqlx::query(
            "UPDATE webhook_deliveries AS d SET head = 1
             WHERE d.number > ?1
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
        let skip: Vec<String> = skip.iter().map(|id| uuid_text(id.0)).collect();
        // Chosen and leased under the write lock: no other caller, in this
        // process or another, can choose the same deliveries in between.
        let (_turn, mut tx) = self.write_transaction(ACTION).await?;
        let rows = sqlx::query(
            "SELECT d.number, d.id, d.webhook_id, d.event_uuid, d.contact_key, d.body,
                    d.created_at, d.attempts, w.url, w.secret_salt, w.failing_since
             FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
             WHERE d.state = 'pending' AND d.head = 1 AND d.next_attempt_at <= ?1
               AND (d.leased_until IS NULL OR d.leased_until < ?1)
               AND w.status = 'active'
               AND d.webhook_id NOT IN (SELECT value FROM json_each(?2))
             ORDER BY d.next_attempt_at, d.number
             LIMIT ?3",
        )
        .bind(micros(now)?)
        .bind(json_text(&skip)?)
        .bind(count(limit))
        .fetch_all(&mut *tx)
        .await
        .map_err(backend(ACTION))?;
        let mut numbers = Vec::with_capacity(rows.len());
        let mut leased = Vec::with_capacity(rows.len());
        for row in rows {
            let columns = Columns::new(row, ACTION);
            numbers.push(columns.get::<i64>("number")?);
            leased.push(leased_from(&columns, lease_until)?);
        }
        if leased.is_empty() {
            return Ok(leased);
        }
        sqlx::query(
            "UPDATE webhook_deliveries SET leased_until = ?
             WHERE number IN (SELECT value FROM json_each(?))",
        )
        .bind(micros(lease_until)?)
        .bind(json_text(&numbers)?)
        .execute(&mut *tx)
        .await
        .map_err(backend(ACTION))?;
        tx.commit().await.map_err(backend(ACTION))?;
        Ok(leased)
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
        let (_turn, mut tx) = self.write_transaction(ACTION).await?;
        let done = sqlx::query(
            "UPDATE webhook_deliveries SET attempts = attempts + 1, leased_until = NULL,
                 state = COALESCE(?, state), finished_at = COALESCE(?, finished_at),
                 next_attempt_at = COALESCE(?, next_attempt_at)
             WHERE id = ? AND state = 'pending'
               AND (leased_until IS NULL OR leased_until = ?)",
        )
        .bind(next.state)
        .bind(opt_micros(next.finished_at)?)
        .bind(opt_micros(next.next_attempt_at)?)
        .bind(uuid_text(attempt.delivery_id.0))
        .bind(micros(leased_until)?)
        .execute(&mut *tx)
        .await
        .map_err(backend(ACTION))?;
        if done.rows_affected() == 0 {
            // Deleted with its webhook while the attempt ran, or leased by
            // another sender once this one's lease ran out (and perhaps
            // ended by it): nothing to keep, the delivery is left as it is.
            return Ok(change.applied(None, attempt.at));
        }
        // The head of the delivery's queue (migration 0009): its contact's
        // earliest pending delivery to its webhook. That is the next one
        // once this one has ended, and this one still while it waits for a
        // retry, already marked.
        sqlx::query(
            "UPDATE webhook_deliveries SET head = 1 WHERE number = (
                 SELECT e.number FROM webhook_deliveries d JOIN webhook_deliveries e
                     ON e.webhook_id = d.webhook_id AND e.contact_key = d.contact_key
                 WHERE d.id = ? AND e.state = 'pending'
                 ORDER BY e.number LIMIT 1)",
        )
        .bind(uuid_text(attempt.delivery_id.0))
        .execute(&mut *tx)
        .await
        .map_err(backend(ACTION))?;
        let webhook = uuid_text(attempt.webhook_id.0);
        // Read under the write lock the transaction holds: the change is
        // made against what the attempts before this one left.
        let row = sqlx::query("SELECT failing_since FROM webhooks WHERE id = ?")
            .bind(webhook.clone())
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend(ACTION))?;
        let failing_since = match row {
            Some(row) => Columns::new(row, ACTION).optional_time("failing_since")?,
            None => None,
        };
        let (columns, applied) = ChangeColumns::new(change, failing_since, attempt.at);
        let change = match columns {
            ChangeColumns::ClearFailing => {
                sqlx::query("UPDATE webhooks SET failing_since = NULL WHERE id = ?")
            }
            ChangeColumns::Failing(since) => sqlx::query(
                "UPDATE webhooks SET failing_since = COALESCE(failing_since, ?) WHERE id = ?",
            )
            .bind(micros(since)?),
            ChangeColumns::SwitchOff(at) => {
                sqlx::query("UPDATE webhooks SET status = 'inactive', updated_at = ? WHERE id = ?")
                    .bind(micros(at)?)
            }
        };
        change
            .bind(webhook.clone())
            .execute(&mut *tx)
            .await
            .map_err(backend(ACTION))?;
        sqlx::query(
            "INSERT INTO webhook_attempts
                 (delivery_id, webhook_id, at, status, error, duration_ms)
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(uuid_text(attempt.delivery_id.0))
        .bind(webhook.clone())
        .bind(micros(attempt.at)?)
        .bind(attempt.status.map(i64::from))
        .bind(attempt.error.as_deref())
        .bind(duration_column(attempt))
        .execute(&mut *tx)
        .await
        .map_err(backend(ACTION))?;
        // Everything up to the first attempt past the kept ones goes.
        sqlx::query(
            "DELETE FROM webhook_attempts WHERE webhook_id = ?1 AND id <= (
                 SELECT id FROM webhook_attempts WHERE webhook_id = ?1
                 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
        )
        .bind(webhook)
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
             FROM webhook_attempts WHERE webhook_id = ? ORDER BY id DESC LIMIT ?",
        )
        .bind(uuid_text(webhook.0))
        .bind(count(limit))
        .fetch_all(&self.reader)
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
                .fetch_one(&self.reader)
                .await
                .map_err(backend(ACTION))?;
        u64::try_from(pending).map_err(|_| malformed(ACTION, "count"))
    }

    async fn delivery_state(
        &self,
        id: DeliveryId,
    ) -> Result<Option<(DeliveryState, u32)>, StoreError> {
        let statement = sqlx::query("SELECT state, attempts FROM webhook_deliveries WHERE id = ?")
            .bind(uuid_text(id.0));
        find_row(&self.reader, statement, "read a webhook delivery", |c| {
            delivery_state_from(c)
        })
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
             (SELECT number FROM webhook_deliveries WHERE finished_at < ?1
              ORDER BY number LIMIT ?2)"];
        let _turn = self.write_turn().await;
        sql::purge(
            &self.writer,
            &PURGES,
            micros(cutoff)?,
            limit,
            "purge webhook deliveries",
        )
        .await
    }

    async fn repair_queue_heads(&self) -> Result<usize, StoreError> {
        const ACTION: &str = "repair webhook delivery queues";
        // Each queue's earliest pending delivery, by one pass over the
        // pending deliveries' contact index (MIN per group reads its
        // entries in order, no probe per delivery), marked where a
        // previous release left it unmarked (migration 0009). One
        // statement at the write gate: nothing writes between its read and
        // its marks.
        let _turn = self.write_turn().await;
        let done = sqlx::query(
            "UPDATE webhook_deliveries SET head = 1
             WHERE head = 0 AND number IN (
                 SELECT MIN(number) FROM webhook_deliveries WHERE state = 'pending'
                 GROUP BY webhook_id, contact_key)",
        )
        .execute(&self.writer)
        .await
        .map_err(backend(ACTION))?;
        usize::try_from(done.rows_affected()).map_err(|_| malformed(ACTION, "count"))
    }
}

/// The most deliveries one INSERT of [`WebhookStore::dispatch`] binds
/// (7 parameters each, far below SQLite's 32,766): a page of 500 is four
/// statements, each a trip to sqlx's thread made at the write gate.
const ROWS_PER_INSERT: usize = 128;

/// Records `rows` (at most [`ROWS_PER_INSERT`]) in one statement, in
/// `tx`, numbered in the order given.
///
/// Each row's values are bound as parameters, so SQLite parses nothing
/// but the statement (a page written as one JSON text and taken apart with
/// `json_each` cost SQLite about a tenth of the service's CPU under an
/// intake flood with a webhook: every body escaped into the text and
/// unescaped again). The rows go in by their place in the page
/// (`ORDER BY`), so the numbers (AUTOINCREMENT) follow the order given. A
/// delivery goes in only while its webhook exists (writers take turns at
/// the write gate, so a delete is wholly before or after this), and only
/// if its id is not recorded yet ([`WebhookStore::dispatch`] says why).
async fn insert_deliveries(
    tx: &mut sqlx::SqliteConnection,
    rows: &[Delivery],
    action: &'static str,
) -> Result<(), StoreError> {
    let values = vec!["(?, ?, ?, ?, ?, ?, ?)"; rows.len()].join(", ");
    let sql = format!(
        "INSERT INTO webhook_deliveries
             (id, webhook_id, event_uuid, contact_key, body, created_at, state,
              next_attempt_at)
         SELECT page.column2, page.column3, page.column4, page.column5, page.column6,
                page.column7, 'pending', page.column7
         FROM (VALUES {values}) AS page
         WHERE EXISTS (SELECT 1 FROM webhooks WHERE id = page.column3)
         ORDER BY page.column1
         ON CONFLICT (id) DO NOTHING"
    );
    let mut statement = sqlx::query(&sql);
    for (place, delivery) in (0_i64..).zip(rows) {
        statement = statement
            .bind(place)
            .bind(uuid_text(delivery.id.0))
            .bind(uuid_text(delivery.webhook_id.0))
            .bind(uuid_text(delivery.event_uuid))
            .bind(delivery.contact_key.as_str())
            .bind(delivery.body.as_str())
            .bind(micros(delivery.created_at)?);
    }
    insert_row(&mut *tx, statement, "webhook delivery", action).await
}
