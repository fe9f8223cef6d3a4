//! [`EventSink`] on PostgreSQL: an idempotency key is claimed with
//! `INSERT ... ON CONFLICT DO UPDATE ... WHERE expired` in the same
//! transaction as its events, and the events go in as one `UNNEST`
//! statement. With group commit (the default), concurrent `record` calls
//! share transactions.

use async_trait::async_trait;
use sqlx::Connection as _;
use sqlx::postgres::{PgConnection, PgPool};
use time::OffsetDateTime;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::store::sql::group_commit::{Job, RECORD, answer};
use crate::store::sql::records::{channel_to_json, event_from, replay_or_reuse};
use crate::store::sql::{self, backend, find_row, insert_failed};
use crate::{EventSink, EventSubmission, RecordOutcome, RecordedEvent, StoreError};

use super::PgStore;
use super::columns::Columns;

/// Records one submission on `conn`, which is inside a transaction (or a
/// savepoint) that the caller commits: the claim and the events stand or
/// fall together.
async fn record_in(
    conn: &mut PgConnection,
    submission: &EventSubmission,
) -> Result<RecordOutcome, StoreError> {
    if let Some(claim) = &submission.idempotency {
        let event_uuids: Vec<Uuid> = submission.events.iter().map(|e| e.event_uuid).collect();
        // Claim the key, or find who holds it. A concurrent claimant of the
        // same key, on any connection, waits here for our COMMIT or
        // ROLLBACK, then sees our claim. An expired claim is taken over.
        let claimed = sqlx::query(
            "INSERT INTO idempotency_claims AS c
                 (account_id, scope, key, fingerprint, created_at, expires_at, event_uuids,
                  batch_uuid)
             VALUES ($1, $8, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (account_id, scope, key) DO UPDATE SET
                 fingerprint = EXCLUDED.fingerprint,
                 created_at = EXCLUDED.created_at,
                 expires_at = EXCLUDED.expires_at,
                 event_uuids = EXCLUDED.event_uuids,
                 batch_uuid = EXCLUDED.batch_uuid
             WHERE c.expires_at <= EXCLUDED.created_at
             RETURNING 1 AS claimed",
        )
        .bind(claim.account_id.0)
        .bind(&claim.key)
        .bind(claim.fingerprint.as_slice())
        .bind(claim.created_at)
        .bind(claim.expires_at)
        .bind(&event_uuids)
        .bind(submission.batch_uuid)
        .bind(claim.scope.to_stored())
        .fetch_optional(&mut *conn)
        .await
        .map_err(backend(RECORD))?;
        if claimed.is_none() {
            let row = sqlx::query(
                "SELECT fingerprint, event_uuids, batch_uuid FROM idempotency_claims
                 WHERE account_id = $1 AND key = $2 AND scope = $3",
            )
            .bind(claim.account_id.0)
            .bind(&claim.key)
            .bind(claim.scope.to_stored())
            .fetch_one(&mut *conn)
            .await
            .map_err(backend(RECORD))?;
            return replay_or_reuse(&Columns::new(row, RECORD), claim);
        }
    }
    insert_events(conn, &[submission]).await?;
    Ok(RecordOutcome::Recorded)
}

/// Inserts the events of `submissions` (not their claims) as one statement:
/// it stores every event or, on a duplicate uuid, none.
async fn insert_events(
    conn: &mut PgConnection,
    submissions: &[&EventSubmission],
) -> Result<(), StoreError> {
    let count: usize = submissions.iter().map(|s| s.events.len()).sum();
    if count == 0 {
        return Ok(());
    }
    // Column by column, for UNNEST: one statement, one round trip, whatever
    // the number of events.
    let mut uuids = Vec::with_capacity(count);
    let mut accounts = Vec::with_capacity(count);
    let mut received = Vec::with_capacity(count);
    let mut types = Vec::with_capacity(count);
    let mut families = Vec::with_capacity(count);
    let mut conversions = Vec::with_capacity(count);
    let mut emails = Vec::with_capacity(count);
    let mut payloads = Vec::with_capacity(count);
    let mut channels = Vec::with_capacity(count);
    let mut batches = Vec::with_capacity(count);
    for submission in submissions {
        for event in &submission.events {
            uuids.push(event.event_uuid);
            accounts.push(event.account_id.0);
            received.push(event.received_at);
            types.push(event.event_type.as_str());
            families.push(event.event_family.as_str());
            conversions.push(event.conversion_identifier.as_str());
            emails.push(event.email.as_str());
            payloads.push(&event.payload);
            channels.push(channel_to_json(&event.channel)?);
            batches.push(submission.batch_uuid);
        }
    }
    sqlx::query(
        "INSERT INTO events
             (event_uuid, account_id, received_at, event_type, event_family,
              conversion_identifier, email, payload, channel, batch_uuid)
         SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::timestamptz[], $4::text[],
                              $5::text[], $6::text[], $7::text[], $8::jsonb[], $9::jsonb[],
                              $10::uuid[])",
    )
    .bind(uuids)
    .bind(accounts)
    .bind(received)
    .bind(types)
    .bind(families)
    .bind(conversions)
    .bind(emails)
    .bind(payloads)
    .bind(channels)
    .bind(batches)
    .execute(&mut *conn)
    .await
    .map_err(insert_failed("event", RECORD))?;
    Ok(())
}

/// Records one submission in a transaction of its own: one COMMIT per call.
async fn record_alone(
    pool: &PgPool,
    submission: &EventSubmission,
) -> Result<RecordOutcome, StoreError> {
    if submission.idempotency.is_none() {
        // Without a claim the events are one statement, atomic and durable
        // at its own implicit COMMIT: no BEGIN round trip needed.
        let mut conn = pool.acquire().await.map_err(backend(RECORD))?;
        insert_events(&mut conn, &[submission]).await?;
        return Ok(RecordOutcome::Recorded);
    }
    let mut tx = pool.begin().await.map_err(backend(RECORD))?;
    let outcome = record_in(&mut tx, submission).await?;
    // Only a committed submission is acknowledged.
    tx.commit().await.map_err(backend(RECORD))?;
    Ok(outcome)
}

/// The group-commit writer: takes whatever `record` calls have queued (up
/// to `max`), records them in one transaction, and answers each after the
/// COMMIT.
pub(super) async fn group_writer(pool: PgPool, mut queue: mpsc::Receiver<Job>, max: usize) {
    let mut jobs = Vec::with_capacity(max);
    while queue.recv_many(&mut jobs, max).await > 0 {
        let outcomes = match jobs.as_slice() {
            // Alone, a submission needs no savepoint.
            [job] => vec![record_alone(&pool, &job.submission).await],
            _ => record_group(&pool, &jobs)
                .await
                .unwrap_or_else(|error| vec![Err(error); jobs.len()]),
        };
        answer(&mut jobs, outcomes);
    }
}

/// Records a group of jobs in one transaction. `Ok` holds each job's own
/// outcome, all committed; `Err` means the transaction failed and nothing
/// was recorded.
async fn record_group(
    pool: &PgPool,
    jobs: &[Job],
) -> Result<Vec<Result<RecordOutcome, StoreError>>, StoreError> {
    let mut tx = pool.begin().await.map_err(backend(RECORD))?;

    // The common case first: submissions without an idempotency key, all in
    // one statement. Should it fail (one duplicate uuid fails it), it is
    // rolled back and they go one by one below.
    let plain: Vec<&EventSubmission> = jobs
        .iter()
        .map(|job| &job.submission)
        .filter(|submission| submission.idempotency.is_none())
        .collect();
    let mut plain_recorded = false;
    if plain.len() > 1 {
        let mut savepoint = tx.begin().await.map_err(backend(RECORD))?;
        plain_recorded = insert_events(&mut savepoint, &plain).await.is_ok();
        if plain_recorded {
            savepoint.commit().await
        } else {
            savepoint.rollback().await
        }
        .map_err(backend(RECORD))?;
    }

    let mut outcomes = Vec::with_capacity(jobs.len());
    for job in jobs {
        if plain_recorded && job.submission.idempotency.is_none() {
            outcomes.push(Ok(RecordOutcome::Recorded));
            continue;
        }
        // A failing submission rolls back to its savepoint: its neighbours'
        // work stands.
        let mut savepoint = tx.begin().await.map_err(backend(RECORD))?;
        let outcome = record_in(&mut savepoint, &job.submission).await;
        match outcome {
            Ok(_) => savepoint.commit().await,
            Err(_) => savepoint.rollback().await,
        }
        .map_err(backend(RECORD))?;
        outcomes.push(outcome);
    }
    tx.commit().await.map_err(backend(RECORD))?;
    Ok(outcomes)
}

#[async_trait]
impl EventSink for PgStore {
    async fn record(&self, submission: &EventSubmission) -> Result<RecordOutcome, StoreError> {
        match &self.group {
            Some(queue) => queue.record(submission).await,
            None => record_alone(&self.pool, submission).await,
        }
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
        const PURGES: [&str; 1] = [
            "DELETE FROM idempotency_claims WHERE (account_id, scope, key) IN
                 (SELECT account_id, scope, key FROM idempotency_claims
                  WHERE expires_at < $1 LIMIT $2)",
        ];
        let action = "purge expired idempotency claims";
        sql::purge(&self.pool, &PURGES, cutoff, limit, action).await
    }
}
