//! [`EventSink`] on SQLite. Recording goes through the group-commit writer
//! of events (`event_writer`); reads and the purge go through sqlx.

use async_trait::async_trait;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::store::sql::records::{event_from, replay_or_reuse};
use crate::store::sql::{self, find_row};
use crate::{
    EventSink, EventSubmission, IdempotencyClaim, RecordOutcome, RecordedEvent, StoreError,
};

use super::SqliteStore;
use super::columns::{micros, uuid_text};

#[async_trait]
impl EventSink for SqliteStore {
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
