//! [`EventSink`] on SQLite. Recording goes through the group-commit writer
//! of events (`event_writer`); reads and the purge go through sqlx.

use async_trait::async_trait;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::records::event::{EventSubmission, IdempotencyClaim, RecordOutcome, RecordedEvent};
use crate::store::EventSink;
use crate::store::error::StoreError;
use crate::store::feed::position;
use crate::store::feed::{EventFeed, FeedCursor, FeedPage};
use crate::store::sql::records::{event_from, replay_or_reuse};
use crate::store::sql::{self, backend, find_row};

use super::SqliteStore;
use super::columns::{Columns, micros, uuid_text};

/// The feed on SQLite: an event's position is its rowid. SQLite admits one
/// writer at a time, across connections and processes, and a rowid is one
/// more than the largest committed when its transaction writes, so rowids
/// grow in commit order and no event can commit behind a consumer's cursor.
/// (A rowid is reused only if the row with the largest is deleted, and
/// events are never deleted.)
#[async_trait]
impl EventFeed for SqliteStore {
    async fn read_after(&self, cursor: &FeedCursor, limit: usize) -> Result<FeedPage, StoreError> {
        const ACTION: &str = "read the event feed";
        let after = i64::try_from(position(cursor, "sqlite")?).unwrap_or(i64::MAX);
        let rows = sqlx::query(
            "SELECT rowid AS position, event_uuid, account_id, received_at, event_type,
                    event_family, conversion_identifier, email, payload, channel
             FROM events WHERE rowid > ? ORDER BY rowid LIMIT ?",
        )
        .bind(after)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.reader)
        .await
        .map_err(backend(ACTION))?;
        let mut last = after;
        let mut events = Vec::with_capacity(rows.len());
        for row in rows {
            let columns = Columns::new(row, ACTION);
            last = columns.get("position")?;
            events.push(event_from(&columns)?);
        }
        let next = if events.is_empty() {
            cursor.clone()
        } else {
            FeedCursor::new(format!("sqlite:{last}"))
        };
        Ok(FeedPage::new(events, next))
    }

    async fn skip_after(
        &self,
        cursor: &FeedCursor,
        limit: usize,
    ) -> Result<(FeedCursor, usize), StoreError> {
        const ACTION: &str = "skip events of the feed";
        let after = i64::try_from(position(cursor, "sqlite")?).unwrap_or(i64::MAX);
        // Counted from the positions alone, without visiting the rows: the
        // largest rowid is one descent of the table's tree, where counting
        // the rows after the cursor reads every page they fill (about one
        // per four conversions), which under a flood was most of what the
        // webhook dispatcher cost while no webhook existed. The count is
        // exact because rowids have no gaps: each is one more than the
        // largest when its row is inserted, a rolled-back insert leaves no
        // number behind, and events are never deleted (the order above
        // already relies on that).
        let head: Option<i64> = sqlx::query_scalar("SELECT max(rowid) FROM events")
            .fetch_one(&self.reader)
            .await
            .map_err(backend(ACTION))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let last = head.unwrap_or(0).min(after.saturating_add(limit));
        if last <= after {
            return Ok((cursor.clone(), 0));
        }
        let passed = usize::try_from(last - after).unwrap_or(usize::MAX);
        Ok((FeedCursor::new(format!("sqlite:{last}")), passed))
    }
}

#[async_trait]
impl EventSink for SqliteStore {
    async fn ready(&self) -> Result<(), StoreError> {
        self.ping().await
    }

    async fn record(&self, submission: &EventSubmission) -> Result<RecordOutcome, StoreError> {
        self.events.record(submission).await
    }

    async fn check_claim(
        &self,
        claim: &IdempotencyClaim,
    ) -> Result<Option<RecordOutcome>, StoreError> {
        const ACTION: &str = "check an idempotency claim";
        let statement = sqlx::query(
            "SELECT fingerprint, event_uuids, batch_uuid FROM idempotency_claims
             WHERE account_id = ? AND scope = ? AND key = ? AND expires_at > ?",
        )
        .bind(uuid_text(claim.account_id.0))
        .bind(claim.scope.to_stored())
        .bind(&claim.key)
        .bind(micros(claim.created_at)?);
        find_row(&self.reader, statement, ACTION, |c| {
            replay_or_reuse(c, claim)
        })
        .await
    }

    async fn find_event(&self, event_uuid: Uuid) -> Result<Option<RecordedEvent>, StoreError> {
        let statement = sqlx::query(
            "SELECT event_uuid, account_id, received_at, event_type, event_family,
                    conversion_identifier, email, payload, channel
             FROM events WHERE event_uuid = ?",
        )
        .bind(uuid_text(event_uuid));
        find_row(&self.reader, statement, "read an event", event_from).await
    }

    async fn purge_expired_claims(
        &self,
        cutoff: OffsetDateTime,
        limit: usize,
    ) -> Result<usize, StoreError> {
        const PURGES: [&str; 1] = ["DELETE FROM idempotency_claims WHERE rowid IN
             (SELECT rowid FROM idempotency_claims WHERE expires_at < ?1 LIMIT ?2)"];
        let _turn = self.write_turn().await;
        sql::purge(
            &self.writer,
            &PURGES,
            micros(cutoff)?,
            limit,
            "purge expired idempotency claims",
        )
        .await
    }
}
