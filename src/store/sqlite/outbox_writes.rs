//! The webhook outbox's hot writes on the writer of events' connection
//! (rusqlite), each run as a [`write_task`](super::write_task) inside a
//! group's transaction: a page dispatched, deliveries leased, an attempt
//! finished. [`super::webhooks`] queues them and says what each promises;
//! this file is their SQL.
//!
//! The group's transaction began `IMMEDIATE` and the writer holds its turn
//! at the write gate: what these read cannot change before they write,
//! whichever connection or process tries, as in the `BEGIN IMMEDIATE`
//! transactions they replace. Statements are prepared once per connection
//! (`prepare_cached`) and bound row by row: on the thread that owns the
//! connection a statement costs no trip between threads, so a page needs
//! neither multi-row statements nor JSON taken apart by SQLite.

use rusqlite::{Connection, OptionalExtension as _, params};
use time::OffsetDateTime;

use crate::records::webhook::{AttemptRecord, Delivery, LeasedDelivery, WebhookChange, WebhookId};
use crate::store::error::StoreError;
use crate::store::feed::FeedCursor;
use crate::store::sql::malformed;
use crate::store::sql::webhook_records::{
    ChangeColumns, KEPT_ATTEMPTS, NextColumns, count, duration_column, leased_from,
};

use super::columns::{RowColumns, from_micros, json_text, micros, opt_micros, uuid_text};
use super::statement_errors::failed;

/// Moves the dispatcher's cursor from `from` to `to` and records
/// `deliveries` (numbered in the order given, each only while its webhook
/// exists and its id is not recorded yet), marking the page's queue heads.
/// `false` (nothing written) if the cursor is no longer at `from`.
pub(super) fn dispatch(
    connection: &Connection,
    from: &FeedCursor,
    to: &FeedCursor,
    deliveries: &[Delivery],
) -> Result<bool, StoreError> {
    const ACTION: &str = "dispatch webhook deliveries";
    let moved = connection
        .prepare_cached(
            "UPDATE webhook_dispatch SET feed_cursor = ?1 WHERE id = 1 AND feed_cursor = ?2",
        )
        .and_then(|mut statement| statement.execute(params![to.as_str(), from.as_str()]))
        .map_err(failed(ACTION))?;
    if moved == 0 {
        // Another dispatcher passed this page first.
        return Ok(false);
    }
    // Every number drawn below is larger (AUTOINCREMENT).
    let numbered_before: i64 = connection
        .prepare_cached("SELECT COALESCE(MAX(number), 0) FROM webhook_deliveries")
        .and_then(|mut statement| statement.query_row([], |row| row.get(0)))
        .map_err(failed(ACTION))?;
    // A delivery goes in only while its webhook exists (a delete takes its
    // turn at the write gate, so it is wholly before or after this), and
    // only if its id is not recorded yet (`WebhookStore::dispatch` says
    // why). `WHERE` also tells SQLite's parser the `ON CONFLICT` is an
    // upsert's, not a join's.
    let mut insert = connection
        .prepare_cached(
            "INSERT INTO webhook_deliveries
                 (id, webhook_id, event_uuid, contact_key, body, created_at, state,
                  next_attempt_at)
             SELECT ?1, ?2, ?3, ?4, ?5, ?6, 'pending', ?6
             WHERE EXISTS (SELECT 1 FROM webhooks WHERE id = ?2)
             ON CONFLICT (id) DO NOTHING",
        )
        .map_err(failed(ACTION))?;
    for delivery in deliveries {
        insert
            .execute(params![
                uuid_text(delivery.id.0),
                uuid_text(delivery.webhook_id.0),
                uuid_text(delivery.event_uuid),
                delivery.contact_key.as_str(),
                delivery.body.as_str(),
                micros(delivery.created_at)?,
            ])
            .map_err(failed(ACTION))?;
    }
    // The page's heads: each delivery with no earlier one of its contact to
    // its webhook pending, in this page or before it (the migration 0009
    // says why heads are marked). Once all the rows are in, so that a
    // contact's second delivery in the page sees its first.
    connection
        .prepare_cached(
            "UPDATE webhook_deliveries AS d SET head = 1
             WHERE d.number > ?1
               AND NOT EXISTS (
                   SELECT 1 FROM webhook_deliveries e
                   WHERE e.webhook_id = d.webhook_id AND e.contact_key = d.contact_key
                     AND e.state = 'pending' AND e.number < d.number)",
        )
        .and_then(|mut statement| statement.execute([numbered_before]))
        .map_err(failed(ACTION))?;
    Ok(true)
}

/// Leases up to `limit` due queue heads of active webhooks not in `skip`
/// until `lease_until`, in due order.
pub(super) fn lease(
    connection: &Connection,
    now: OffsetDateTime,
    lease_until: OffsetDateTime,
    limit: usize,
    skip: &[WebhookId],
) -> Result<Vec<LeasedDelivery>, StoreError> {
    const ACTION: &str = "lease webhook deliveries";
    let skip: Vec<String> = skip.iter().map(|id| uuid_text(id.0)).collect();
    let mut select = connection
        .prepare_cached(
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
        .map_err(failed(ACTION))?;
    let mut rows = select
        .query(params![micros(now)?, json_text(&skip)?, count(limit)])
        .map_err(failed(ACTION))?;
    let mut leased = Vec::new();
    let mut numbers = Vec::new();
    while let Some(row) = rows.next().map_err(failed(ACTION))? {
        let columns = RowColumns::new(row, ACTION);
        numbers.push(columns.get::<i64>("number")?);
        leased.push(leased_from(&columns, lease_until)?);
    }
    let mut mark = connection
        .prepare_cached("UPDATE webhook_deliveries SET leased_until = ?1 WHERE number = ?2")
        .map_err(failed(ACTION))?;
    let until = micros(lease_until)?;
    for number in &numbers {
        mark.execute(params![until, number])
            .map_err(failed(ACTION))?;
    }
    Ok(leased)
}

/// Records `attempt` on its delivery, if the delivery is still pending
/// under the lease `leased_until` (or none), with its consequences: the
/// delivery ended or rescheduled (`next`), its queue's next head marked,
/// the webhook's `change` applied against what the attempts before left,
/// the attempt kept among its webhook's last [`KEPT_ATTEMPTS`]. The change
/// applied.
pub(super) fn finish_attempt(
    connection: &Connection,
    attempt: &AttemptRecord,
    leased_until: OffsetDateTime,
    next: NextColumns,
    change: WebhookChange,
) -> Result<WebhookChange, StoreError> {
    const ACTION: &str = "record a webhook attempt";
    let delivery = uuid_text(attempt.delivery_id.0);
    let finished_at = opt_micros(next.finished_at)?;
    let next_attempt_at = opt_micros(next.next_attempt_at)?;
    let lease = micros(leased_until)?;
    let at = micros(attempt.at)?;
    let updated = connection
        .prepare_cached(
            "UPDATE webhook_deliveries SET attempts = attempts + 1, leased_until = NULL,
                 state = COALESCE(?1, state), finished_at = COALESCE(?2, finished_at),
                 next_attempt_at = COALESCE(?3, next_attempt_at)
             WHERE id = ?4 AND state = 'pending'
               AND (leased_until IS NULL OR leased_until = ?5)",
        )
        .and_then(|mut statement| {
            statement.execute(params![
                next.state,
                finished_at,
                next_attempt_at,
                delivery,
                lease,
            ])
        })
        .map_err(failed(ACTION))?;
    if updated == 0 {
        // Deleted with its webhook while the attempt ran, or leased by
        // another sender once this one's lease ran out (and perhaps ended
        // by it): nothing to keep, the delivery is left as it is.
        return Ok(change.applied(None, attempt.at));
    }
    // The head of the delivery's queue (migration 0009): its contact's
    // earliest pending delivery to its webhook. That is the next one once
    // this one has ended, and this one still while it waits for a retry,
    // already marked.
    connection
        .prepare_cached(
            "UPDATE webhook_deliveries SET head = 1 WHERE number = (
                 SELECT e.number FROM webhook_deliveries d JOIN webhook_deliveries e
                     ON e.webhook_id = d.webhook_id AND e.contact_key = d.contact_key
                 WHERE d.id = ?1 AND e.state = 'pending'
                 ORDER BY e.number LIMIT 1)",
        )
        .and_then(|mut statement| statement.execute([&delivery]))
        .map_err(failed(ACTION))?;
    let webhook = uuid_text(attempt.webhook_id.0);
    // Read under the write lock the group holds: the change is made against
    // what the attempts before this one left.
    let failing_since: Option<i64> = connection
        .prepare_cached("SELECT failing_since FROM webhooks WHERE id = ?1")
        .and_then(|mut statement| statement.query_row([&webhook], |row| row.get(0)).optional())
        .map_err(failed(ACTION))?
        .flatten();
    let failing_since = failing_since
        .map(|micros| from_micros(micros).ok_or_else(|| malformed(ACTION, "failing_since")))
        .transpose()?;
    let (columns, applied) = ChangeColumns::new(change, failing_since, attempt.at);
    let changed = match columns {
        ChangeColumns::ClearFailing => connection
            .prepare_cached("UPDATE webhooks SET failing_since = NULL WHERE id = ?1")
            .and_then(|mut statement| statement.execute([&webhook])),
        ChangeColumns::Failing(since) => {
            let since = micros(since)?;
            connection
                .prepare_cached(
                    "UPDATE webhooks SET failing_since = COALESCE(failing_since, ?1)
                     WHERE id = ?2",
                )
                .and_then(|mut statement| statement.execute(params![since, webhook]))
        }
        ChangeColumns::SwitchOff(at) => {
            let at = micros(at)?;
            connection
                .prepare_cached(
                    "UPDATE webhooks SET status = 'inactive', updated_at = ?1 WHERE id = ?2",
                )
                .and_then(|mut statement| statement.execute(params![at, webhook]))
        }
    };
    changed.map_err(failed(ACTION))?;
    connection
        .prepare_cached(
            "INSERT INTO webhook_attempts
                 (delivery_id, webhook_id, at, status, error, duration_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .and_then(|mut statement| {
            statement.execute(params![
                delivery,
                webhook,
                at,
                attempt.status.map(i64::from),
                attempt.error.as_deref(),
                duration_column(attempt),
            ])
        })
        .map_err(failed(ACTION))?;
    // Everything up to the first attempt past the kept ones goes.
    connection
        .prepare_cached(
            "DELETE FROM webhook_attempts WHERE webhook_id = ?1 AND id <= (
                 SELECT id FROM webhook_attempts WHERE webhook_id = ?1
                 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
        )
        .and_then(|mut statement| statement.execute(params![webhook, count(KEPT_ATTEMPTS)]))
        .map_err(failed(ACTION))?;
    Ok(applied)
}
