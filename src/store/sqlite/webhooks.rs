//! [`WebhookStore`] on SQLite: webhooks, the dispatcher's cursor, the
//! outbox of deliveries and the last attempts of each webhook.
//!
//! The outbox's hot writes (a page dispatched, deliveries leased, an
//! attempt finished), which a busy webhook makes several times a second,
//! ride in the writer of events' groups ([`outbox_writes`], queued as
//! [`write_task`](super::write_task)s): they share the group's one sync.
//! The rare writes (a webhook registered, changed, switched or deleted; the
//! purge; the repair of queue heads) go through the sqlx writer, in its
//! turn at the write gate. What reads before it writes runs under SQLite's
//! write lock from its first statement (the group's `BEGIN IMMEDIATE`, or a
//! `BEGIN IMMEDIATE` of its own): no other connection or process writes
//! between its read and its write, so a delivery is never leased twice and
//! a page is never dispatched twice. The uniqueness of a URL is the
//! `webhooks_url_unique` index's.

use async_trait::async_trait;
use time::OffsetDateTime;

use crate::account::AccountId;
use crate::records::webhook::{
    AttemptRecord, Delivery, DeliveryId, DeliveryNext, DeliveryState, LeasedDelivery, Webhook,
    WebhookChange, WebhookId, WebhookStatus,
};
use crate::store::error::StoreError;
use crate::store::feed::FeedCursor;
use crate::store::sql::webhook_records::{
    NextColumns, WEBHOOK_COLUMNS, attempt_from, count, delivery_state_from, identifiers_text,
    relations_text, url_write, webhook_from,
};
use crate::store::sql::{self, backend, find_row, insert_row, malformed};
use crate::store::webhooks::{WebhookStore, WebhookWrite};

use super::SqliteStore;
use super::columns::{Columns, micros, opt_micros, uuid_text};
use super::outbox_writes;

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
        let (from, to, deliveries) = (from.clone(), to.clone(), deliveries.to_vec());
        self.events
            .write("dispatch webhook deliveries", move |connection| {
                outbox_writes::dispatch(connection, &from, &to, &deliveries)
            })
            .await
    }

    async fn lease_deliveries(
        &self,
        now: OffsetDateTime,
        lease_until: OffsetDateTime,
        limit: usize,
        skip: &[WebhookId],
    ) -> Result<Vec<LeasedDelivery>, StoreError> {
        // Chosen and leased in one transaction under the write lock: no
        // other caller, in this process or another, can choose the same
        // deliveries in between.
        let skip = skip.to_vec();
        self.events
            .write("lease webhook deliveries", move |connection| {
                outbox_writes::lease(connection, now, lease_until, limit, &skip)
            })
            .await
    }

    async fn finish_attempt(
        &self,
        attempt: &AttemptRecord,
        leased_until: OffsetDateTime,
        next: DeliveryNext,
        change: WebhookChange,
    ) -> Result<WebhookChange, StoreError> {
        let next = NextColumns::new(next, attempt.at);
        let attempt = attempt.clone();
        self.events
            .write("record a webhook attempt", move |connection| {
                outbox_writes::finish_attempt(connection, &attempt, leased_until, next, change)
            })
            .await
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
