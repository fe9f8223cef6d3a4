//! [`EventSink`] on SQLite, with group commit: concurrent `record` calls
//! queue to one writer task that stores whatever has queued in one write
//! transaction (the events of every submission without an idempotency key
//! in one multi-row `INSERT`, each submission with a key in a savepoint of
//! its own), and answers each after the COMMIT.

use async_trait::async_trait;
use sqlx::Connection as _;
use sqlx::sqlite::{SqliteConnection, SqlitePool};
use time::OffsetDateTime;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::store::sql::group_commit::{Job, RECORD, answer};
use crate::store::sql::records::{
    RecordColumns as _, channel_to_json, event_from, replay_or_reuse,
};
use crate::store::sql::{self, backend, fails_on_data, find_row, insert_failed};
use crate::{EventSink, EventSubmission, RecordOutcome, RecordedEvent, StoreError};

use super::SqliteStore;
use super::columns::{Columns, json_text, micros, uuid_text};

/// Records one submission on `conn`, which is inside a write transaction
/// (or a savepoint of one) that the caller commits, or rolls back on `Err`:
/// the claim and the events stand or fall together.
async fn record_in(
    conn: &mut SqliteConnection,
    submission: &EventSubmission,
) -> Result<RecordOutcome, StoreError> {
    if let Some(claim) = &submission.idempotency {
        let existing = sqlx::query(
            "SELECT fingerprint, expires_at, event_uuids, batch_uuid
             FROM idempotency_claims WHERE account_id = ? AND scope = ? AND key = ?",
        )
        .bind(uuid_text(claim.account_id.0))
        .bind(claim.scope.to_stored())
        .bind(&claim.key)
        .fetch_optional(&mut *conn)
        .await
        .map_err(backend(RECORD))?;
        if let Some(row) = existing {
            let c = Columns::new(row, RECORD);
            // A claim holds while it expires after the new claim is made.
            if c.time("expires_at")? > claim.created_at {
                return replay_or_reuse(&c, claim);
            }
        }
    }
    insert_events(conn, &[submission]).await?;
    if let Some(claim) = &submission.idempotency {
        let event_uuids: Vec<Uuid> = submission.events.iter().map(|e| e.event_uuid).collect();
        // An expired claim for the key is replaced.
        sqlx::query(
            "INSERT INTO idempotency_claims
                 (account_id, scope, key, fingerprint, created_at, expires_at, event_uuids,
                  batch_uuid)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (account_id, scope, key) DO UPDATE SET
                 fingerprint = excluded.fingerprint,
                 created_at = excluded.created_at,
                 expires_at = excluded.expires_at,
                 event_uuids = excluded.event_uuids,
                 batch_uuid = excluded.batch_uuid",
        )
        .bind(uuid_text(claim.account_id.0))
        .bind(claim.scope.to_stored())
        .bind(&claim.key)
        .bind(claim.fingerprint.as_slice())
        .bind(micros(claim.created_at)?)
        .bind(micros(claim.expires_at)?)
        .bind(json_text(&event_uuids)?)
        .bind(submission.batch_uuid.map(uuid_text))
        .execute(&mut *conn)
        .await
        .map_err(backend(RECORD))?;
    }
    Ok(RecordOutcome::Recorded)
}

/// The most events one `INSERT` statement carries: 10 values each, well
/// under SQLite's limit of 32,766 bound values per statement.
const EVENTS_PER_STATEMENT: usize = 256;

/// Inserts the events of `submissions` (not their claims) with one
/// multi-row `INSERT` per [`EVENTS_PER_STATEMENT`] events, on `conn`, which
/// is inside a write transaction. SQLite undoes a failing statement's own
/// rows and nothing else, so with one statement this stores every event or
/// none; with several, the caller wraps them in a savepoint.
async fn insert_events(
    conn: &mut SqliteConnection,
    submissions: &[&EventSubmission],
) -> Result<(), StoreError> {
    let rows = submissions
        .iter()
        .flat_map(|submission| {
            let batch_uuid = submission.batch_uuid;
            submission
                .events
                .iter()
                .map(move |event| (event, batch_uuid))
        })
        .collect::<Vec<_>>();
    for chunk in rows.chunks(EVENTS_PER_STATEMENT) {
        let mut sql = String::from(
            "INSERT INTO events
                 (event_uuid, account_id, received_at, event_type, event_family,
                  conversion_identifier, email, payload, channel, batch_uuid)
             VALUES ",
        );
        for index in 0..chunk.len() {
            if index > 0 {
                sql.push(',');
            }
            sql.push_str("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
        }
        let mut statement = sqlx::query(&sql);
        for (event, batch_uuid) in chunk {
            statement = statement
                .bind(uuid_text(event.event_uuid))
                .bind(uuid_text(event.account_id.0))
                .bind(micros(event.received_at)?)
                .bind(event.event_type.as_str())
                .bind(event.event_family.as_str())
                .bind(event.conversion_identifier.as_str())
                .bind(event.email.as_str())
                .bind(event.payload.as_str())
                .bind(json_text(&channel_to_json(&event.channel)?)?)
                .bind(batch_uuid.map(uuid_text));
        }
        statement
            .execute(&mut *conn)
            .await
            .map_err(insert_failed("event", RECORD))?;
    }
    Ok(())
}

/// Records one submission in a write transaction of its own.
async fn record_alone(
    pool: &SqlitePool,
    submission: &EventSubmission,
) -> Result<RecordOutcome, StoreError> {
    // The claim is checked and written, and the events inserted, under one
    // write lock: concurrent retries with one key record once.
    let mut tx = pool
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(backend(RECORD))?;
    let outcome = record_in(&mut tx, submission).await?;
    // Only a committed submission is acknowledged.
    tx.commit().await.map_err(backend(RECORD))?;
    Ok(outcome)
}

/// The group-commit writer: takes whatever `record` calls have queued (up
/// to `max`), records them in one write transaction, and answers each after
/// the COMMIT.
pub(super) async fn group_writer(pool: SqlitePool, mut queue: mpsc::Receiver<Job>, max: usize) {
    let mut jobs = Vec::with_capacity(max);
    while queue.recv_many(&mut jobs, max).await > 0 {
        // How many events the group holds, if no submission of it has an
        // idempotency key.
        let plain_events = jobs.iter().try_fold(0, |sum, job| {
            let submission = &job.submission;
            submission
                .idempotency
                .is_none()
                .then(|| sum + submission.events.len())
        });
        let outcomes = match (jobs.as_slice(), plain_events) {
            // The common case under load: only plain submissions, few
            // enough for one statement, which is its own transaction.
            (_, Some(events)) if events <= EVENTS_PER_STATEMENT => record_plain(&pool, &jobs).await,
            // Alone, a submission needs no savepoint.
            ([job], _) => vec![record_alone(&pool, &job.submission).await],
            _ => record_group(&pool, &jobs)
                .await
                .unwrap_or_else(|error| vec![Err(error); jobs.len()]),
        };
        answer(&mut jobs, outcomes);
    }
}

/// Records jobs that hold no idempotency key and, together, at most
/// [`EVENTS_PER_STATEMENT`] events: one `INSERT`, outside any explicit
/// transaction, so that SQLite commits it (and syncs it) on its own, in
/// one call to the database's thread instead of five. Should it fail on
/// the data, each job goes alone in a statement of its own, so that one
/// bad submission fails alone.
async fn record_plain(pool: &SqlitePool, jobs: &[Job]) -> Vec<Result<RecordOutcome, StoreError>> {
    let submissions: Vec<&EventSubmission> = jobs.iter().map(|job| &job.submission).collect();
    let mut conn = match pool.acquire().await {
        Ok(conn) => conn,
        Err(error) => return vec![Err(backend(RECORD)(error)); jobs.len()],
    };
    match insert_events(&mut conn, &submissions).await {
        Ok(()) => vec![Ok(RecordOutcome::Recorded); jobs.len()],
        Err(error) if jobs.len() > 1 && fails_on_data(&error) => {
            let mut outcomes = Vec::with_capacity(jobs.len());
            for submission in submissions {
                let outcome = insert_events(&mut conn, &[submission]).await;
                outcomes.push(outcome.map(|()| RecordOutcome::Recorded));
            }
            outcomes
        }
        Err(error) => vec![Err(error); jobs.len()],
    }
}

/// Records a group of jobs in one write transaction. `Ok` holds each job's
/// own outcome, all committed; `Err` means the transaction failed and
/// nothing was recorded.
///
/// Submissions without an idempotency key (the common case) go in
/// together, a few statements for the whole group; should those fail on
/// the data (a duplicate uuid, a value SQLite refuses), they are undone and
/// the submissions go one by one, so that one bad submission fails alone.
/// Submissions with a key each read and write their claim in a savepoint
/// of their own.
async fn record_group(
    pool: &SqlitePool,
    jobs: &[Job],
) -> Result<Vec<Result<RecordOutcome, StoreError>>, StoreError> {
    let mut tx = pool
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(backend(RECORD))?;
    let plain: Vec<&EventSubmission> = jobs
        .iter()
        .map(|job| &job.submission)
        .filter(|submission| submission.idempotency.is_none())
        .collect();
    let mut plain_recorded = plain.is_empty();
    if !plain_recorded {
        let mut savepoint = tx.begin().await.map_err(backend(RECORD))?;
        match insert_events(&mut savepoint, &plain).await {
            Ok(()) => {
                savepoint.commit().await.map_err(backend(RECORD))?;
                plain_recorded = true;
            }
            // Refused for its data: one of the submissions is at fault.
            Err(error) if fails_on_data(&error) => {
                savepoint.rollback().await.map_err(backend(RECORD))?;
            }
            // The database failed: so does the group, nothing committed.
            Err(error) => return Err(error),
        }
    }

    let mut outcomes = Vec::with_capacity(jobs.len());
    for job in jobs {
        let submission = &job.submission;
        if submission.idempotency.is_none() {
            outcomes.push(if plain_recorded {
                Ok(RecordOutcome::Recorded)
            } else {
                // One statement: all of this submission's events, or none.
                insert_events(&mut tx, &[submission])
                    .await
                    .map(|()| RecordOutcome::Recorded)
            });
            continue;
        }
        // A failing submission rolls back to its savepoint: its neighbours'
        // work stands.
        let mut savepoint = tx.begin().await.map_err(backend(RECORD))?;
        let outcome = record_in(&mut savepoint, submission).await;
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
impl EventSink for SqliteStore {
    async fn record(&self, submission: &EventSubmission) -> Result<RecordOutcome, StoreError> {
        self.events.record(submission).await
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
