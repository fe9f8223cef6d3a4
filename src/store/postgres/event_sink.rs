//! [`EventFeed`] and [`EventSink`] on [`PgStore`]: the feed read in commit
//! order, and events recorded alone or through the group writers of
//! `events.rs`, which know nothing of the store itself (so that `mod.rs`,
//! which starts them, and this file do not import each other).

use async_trait::async_trait;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::records::event::{EventSubmission, IdempotencyClaim, RecordOutcome, RecordedEvent};
use crate::store::EventSink;
use crate::store::error::StoreError;
use crate::store::feed::{EventFeed, FeedCursor, FeedPage, ForeignCursor};
use crate::store::sql::records::{event_from, replay_or_reuse};
use crate::store::sql::{self, backend, find_row};

use super::PgStore;
use super::columns::Columns;
use super::events::record_alone;

/// The feed on PostgreSQL: ordered by the id of the transaction that wrote
/// each event, then by its sequence number, and read only up to the oldest
/// transaction still running (`pg_snapshot_xmin`): every transaction below
/// it has committed or rolled back, and every new one gets a larger id, so
/// no event can ever commit behind a cursor. A transaction left open for
/// long (an idle session holding one) holds the feed back until it ends.
#[async_trait]
impl EventFeed for PgStore {
    async fn read_after(&self, cursor: &FeedCursor, limit: usize) -> Result<FeedPage, StoreError> {
        const ACTION: &str = "read the event feed";
        let (tx, seq) = pg_position(cursor)?;
        let rows = sqlx::query(
            "SELECT tx_id::text AS tx, feed_seq, event_uuid, account_id, received_at,
                    event_type, event_family, conversion_identifier, email, payload, channel
             FROM events
             WHERE (tx_id, feed_seq) > ($1::text::xid8, $2)
               AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
             ORDER BY tx_id, feed_seq
             LIMIT $3",
        )
        .bind(tx.to_string())
        .bind(seq)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(backend(ACTION))?;
        let (mut last_tx, mut last_seq) = (tx, seq);
        let mut events = Vec::with_capacity(rows.len());
        for row in rows {
            let columns = Columns::new(row, ACTION);
            last_tx = columns
                .get::<String>("tx")?
                .parse()
                .map_err(|_| sql::malformed(ACTION, "tx_id"))?;
            last_seq = columns.get("feed_seq")?;
            events.push(event_from(&columns)?);
        }
        let next = if events.is_empty() {
            cursor.clone()
        } else {
            FeedCursor::new(format!("pg:{last_tx}:{last_seq}"))
        };
        Ok(FeedPage::new(events, next))
    }

    async fn skip_after(
        &self,
        cursor: &FeedCursor,
        limit: usize,
    ) -> Result<(FeedCursor, usize), StoreError> {
        const ACTION: &str = "skip events of the feed";
        let (tx, seq) = pg_position(cursor)?;
        // The page's positions only, the same rows `read_after` would read:
        // the last one and how many. The outer `ORDER BY` names the page's
        // columns qualified: a bare `tx_id` there would be the output column
        // `tx_id::text` (an `ORDER BY` name is matched against the output
        // columns first), sorted as text, so that `9999` came after `10003`
        // and a page across a power of ten ended at the wrong row.
        let last: Option<(String, i64, i64)> = sqlx::query_as(
            "WITH page AS (
                 SELECT tx_id, feed_seq FROM events
                 WHERE (tx_id, feed_seq) > ($1::text::xid8, $2)
                   AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
                 ORDER BY tx_id, feed_seq
                 LIMIT $3)
             SELECT page.tx_id::text AS last_tx, page.feed_seq, (SELECT count(*) FROM page)
             FROM page ORDER BY page.tx_id DESC, page.feed_seq DESC LIMIT 1",
        )
        .bind(tx.to_string())
        .bind(seq)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_optional(&self.pool)
        .await
        .map_err(backend(ACTION))?;
        Ok(match last {
            Some((last_tx, last_seq, skipped)) => (
                FeedCursor::new(format!("pg:{last_tx}:{last_seq}")),
                usize::try_from(skipped).unwrap_or(0),
            ),
            None => (cursor.clone(), 0),
        })
    }
}

/// The transaction id and sequence number in a cursor `pg:TX:SEQ`; the
/// start is `(0, 0)`.
fn pg_position(cursor: &FeedCursor) -> Result<(u64, i64), StoreError> {
    if cursor.is_start() {
        return Ok((0, 0));
    }
    cursor
        .as_str()
        .strip_prefix("pg:")
        .and_then(|rest| rest.split_once(':'))
        .and_then(|(tx, seq)| Some((tx.parse().ok()?, seq.parse().ok()?)))
        .ok_or_else(|| StoreError::rejected("read the event feed", ForeignCursor))
}

#[async_trait]
impl EventSink for PgStore {
    async fn ready(&self) -> Result<(), StoreError> {
        self.ping().await
    }

    async fn record(&self, submission: &EventSubmission) -> Result<RecordOutcome, StoreError> {
        match &self.group {
            Some(queue) => queue.record(submission).await,
            None => record_alone(&self.pool, submission, &self.write_limit).await,
        }
    }

    async fn check_claim(
        &self,
        claim: &IdempotencyClaim,
    ) -> Result<Option<RecordOutcome>, StoreError> {
        const ACTION: &str = "check an idempotency claim";
        let statement = sqlx::query(
            "SELECT fingerprint, event_uuids, batch_uuid FROM idempotency_claims
             WHERE account_id = $1 AND scope = $2 AND key = $3 AND expires_at > $4",
        )
        .bind(claim.account_id.0)
        .bind(claim.scope.to_stored())
        .bind(&claim.key)
        .bind(claim.created_at);
        find_row(&self.pool, statement, ACTION, |c| replay_or_reuse(c, claim)).await
    }

    async fn find_event(&self, event_uuid: Uuid) -> Result<Option<RecordedEvent>, StoreError> {
        let statement = sqlx::query(
            "SELECT event_uuid, account_id, received_at, event_type, event_family,
                    conversion_identifier, email, payload, channel
             FROM events WHERE event_uuid = $1",
        )
        .bind(event_uuid);
        find_row(&self.pool, statement, "read an event", event_from).await
    }

    async fn purge_expired_claims(
        &self,
        cutoff: OffsetDateTime,
        limit: usize,
    ) -> Result<usize, StoreError> {
        // An expired claim can come back to life: a request reusing its
        // key takes it over (`ON CONFLICT DO UPDATE`) with a new expiry.
        // Had the DELETE waited for such a row, PostgreSQL would have
        // checked the row's new version against the DELETE's conditions
        // only, not the subquery's `expires_at`, and deleted a live claim
        // (its key's next retry recorded twice). So the subquery locks the
        // claims it picks (`FOR UPDATE`: a take-over then waits for the
        // purge, and finds the key free), and passes by those another
        // transaction holds (`SKIP LOCKED`: being taken over, or purged by
        // another instance, so that purges beside each other take different
        // rows and a batch that deletes nothing means none is left to take).
        const PURGES: [&str; 1] = [
            "DELETE FROM idempotency_claims WHERE (account_id, scope, key) IN
                 (SELECT account_id, scope, key FROM idempotency_claims
                  WHERE expires_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)",
        ];
        let action = "purge expired idempotency claims";
        sql::purge(&self.pool, &PURGES, cutoff, limit, action).await
    }
}
