//! The writer of events: a thread with a connection of its own (rusqlite)
//! that takes whatever `record` calls have queued, stores it in one write
//! transaction, and answers each after the COMMIT.
//!
//! Why a thread of its own rather than sqlx: sqlx runs each SQLite
//! connection on a worker thread and hands it every statement, so a group
//! cost a pool checkout and a trip between threads per statement. Profiled
//! under a 64-connection flood, those thread switches cost more CPU than
//! SQLite's own work. Here the statements of a group run one after the other
//! on the thread that owns the connection, prepared once and reused: one
//! wake-up per group.
//!
//! Within the group, a submission of one event without an idempotency key
//! (the common conversion) is one `INSERT`, which SQLite applies whole or
//! not at all; any other submission (a batch, a claim to check and write)
//! runs in a savepoint of its own. A submission refused for its own data (a
//! duplicate uuid, a value SQLite refuses) fails alone and its neighbours
//! are committed; a failure of the database itself (I/O, a full disk) fails
//! the whole group, with nothing committed.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension as _, Transaction, TransactionBehavior, params};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::records::event::{EventSubmission, IdempotencyClaim, RecordOutcome, RecordedEvent};
use crate::store::error::StoreError;
use crate::store::sql::group_commit::{Answerer, GroupQueue, Job, RECORD};
use crate::store::sql::records::{StoredClaim, channel_to_text};
use crate::store::sql::{fails_on_data, malformed, sqlite_refuses_data};

use super::checkpointer::Checkpointer;
use super::columns::{from_micros, json_text, micros, uuid_text};
use super::connection::{Sync, open_connection};
use super::write_gate::WriteGate;

/// The most submissions one group transaction takes.
const MAX_GROUP: usize = 256;

/// The handle of a running writer: its queue, and the switch that closes
/// it.
#[derive(Clone, Debug)]
pub(super) struct EventWriter {
    /// Where `record` calls queue.
    queue: GroupQueue,
    /// Set by [`EventWriter::close`]; the thread then closes its
    /// connection and refuses what comes.
    closed: Arc<AtomicBool>,
}

impl EventWriter {
    /// Opens a connection to the (migrated) database at `path` and starts
    /// the writer's thread, which takes its turns at `gate`. It answers
    /// from a task on the runtime this is called from if that is a
    /// multi-thread runtime, and from its own thread otherwise. The thread
    /// ends when the last clone of the handle is dropped, after answering
    /// what was queued.
    ///
    /// # Errors
    /// [`StoreError::Backend`] if the database cannot be opened or the
    /// thread cannot be started.
    pub(super) fn start(
        path: &Path,
        sync: Sync,
        busy_timeout: Duration,
        gate: WriteGate,
    ) -> Result<Self, StoreError> {
        const ACTION: &str = "open the SQLite writer of events";
        let connection = open_connection(path, sync, busy_timeout)
            .map_err(|error| StoreError::backend(ACTION, error))?;
        let checkpointer = Checkpointer::start(path, sync, busy_timeout)?;
        let (queue, jobs) = GroupQueue::new(MAX_GROUP * 4);
        let closed = Arc::new(AtomicBool::new(false));
        let writer = Writer {
            answerer: Answerer::on_current_runtime(),
            connection: Some(connection),
            checkpointer: Some(checkpointer),
            gate,
            closed: Arc::clone(&closed),
        };
        std::thread::Builder::new()
            .name("sqlite-events".into())
            .spawn(move || writer.run(jobs))
            .map_err(|error| StoreError::backend(ACTION, error))?;
        crate::metrics::register_group_commit("sqlite");
        Ok(Self { queue, closed })
    }

    /// Queues `submission` and waits for its outcome, after the COMMIT of
    /// its group.
    pub(super) async fn record(
        &self,
        submission: &EventSubmission,
    ) -> Result<RecordOutcome, StoreError> {
        self.queue.record(submission).await
    }

    /// Closes the writer's connection once the group in hand (if any) is
    /// committed: `gate` must be the writer's, held meanwhile by the caller
    /// so that no group is in hand. Later submissions fail with
    /// [`StoreError::Backend`].
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }
}

/// The writer's thread's state.
struct Writer {
    /// Answers each committed group from a task on the runtime.
    answerer: Answerer,
    /// The connection; `None` once closed.
    connection: Option<Connection>,
    /// Checkpoints the log off this thread; `None` once closed.
    checkpointer: Option<Checkpointer>,
    /// Turns at SQLite's write lock, shared with the store's sqlx writer.
    gate: WriteGate,
    /// Set when the store is closed.
    closed: Arc<AtomicBool>,
}

impl Writer {
    /// Takes whatever has queued, up to [`MAX_GROUP`], records it, answers
    /// it; until every sender is gone.
    fn run(mut self, mut queue: mpsc::Receiver<Job>) {
        let mut jobs = Vec::with_capacity(MAX_GROUP);
        while let Some(first) = queue.blocking_recv() {
            jobs.push(first);
            while jobs.len() < MAX_GROUP {
                match queue.try_recv() {
                    Ok(job) => jobs.push(job),
                    Err(_) => break,
                }
            }
            crate::metrics::group_commit("sqlite", jobs.len(), queue.len());
            let outcomes = {
                let _turn = self.gate.blocking_turn();
                self.record_group(&jobs)
            };
            self.answerer.answer(&mut jobs, outcomes);
        }
    }

    /// Records `jobs` in one write transaction. `Ok` holds each job's own
    /// outcome, all committed; `Err` means nothing was recorded.
    fn record_group(
        &mut self,
        jobs: &[Job],
    ) -> Result<Vec<Result<RecordOutcome, StoreError>>, StoreError> {
        if self.closed.load(Ordering::Acquire) {
            // Dropping the connection closes it (the last connection to the
            // file to close checkpoints the WAL); dropping the checkpointer
            // ends its thread, which closes its own.
            self.checkpointer = None;
            self.connection = None;
        }
        let Some(connection) = self.connection.as_mut() else {
            return Err(StoreError::backend(RECORD, WriterClosed));
        };
        // IMMEDIATE: the write lock from the start, so that the claims read
        // below cannot change before they are written.
        let mut tx = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(failed)?;
        let mut outcomes = Vec::with_capacity(jobs.len());
        for job in jobs {
            let outcome = record_submission(&mut tx, &job.submission);
            match outcome {
                // The database failed: so does the group. Dropping `tx`
                // rolls it back.
                Err(error) if !fails_on_data(&error) => return Err(error),
                outcome => outcomes.push(outcome),
            }
        }
        // Only a committed submission is acknowledged.
        tx.commit().map_err(failed)?;
        if let Some(checkpointer) = &mut self.checkpointer {
            checkpointer.committed(jobs.iter().map(|job| job.submission.events.len()).sum());
        }
        Ok(outcomes)
    }
}

/// Records one submission inside the group's transaction: all of it, or
/// (on `Err`) none of it.
fn record_submission(
    tx: &mut Transaction<'_>,
    submission: &EventSubmission,
) -> Result<RecordOutcome, StoreError> {
    if let ([event], None) = (submission.events.as_slice(), &submission.idempotency) {
        // One statement: SQLite undoes a failing statement's own row.
        insert_event(tx, event, submission.batch_uuid)?;
        return Ok(RecordOutcome::Recorded);
    }
    let savepoint = tx.savepoint().map_err(failed)?;
    // On `Err`, dropping the savepoint rolls back to it: this
    // submission's rows go, its neighbours' stay.
    let outcome = record_in(&savepoint, submission)?;
    savepoint.commit().map_err(failed)?;
    Ok(outcome)
}

/// Records `submission` on `connection`, which is inside a transaction the
/// caller commits, or rolls back on `Err`: the claim and the events stand
/// or fall together.
fn record_in(
    connection: &Connection,
    submission: &EventSubmission,
) -> Result<RecordOutcome, StoreError> {
    if let Some(claim) = &submission.idempotency
        && let Some((expires_at, stored)) = live_claim(connection, claim)?
        // A claim holds while it expires after the new claim is made.
        && expires_at > micros(claim.created_at)?
    {
        return Ok(stored.outcome_for(claim));
    }
    for event in &submission.events {
        insert_event(connection, event, submission.batch_uuid)?;
    }
    if let Some(claim) = &submission.idempotency {
        write_claim(connection, claim, submission)?;
    }
    Ok(RecordOutcome::Recorded)
}

/// Inserts one event.
fn insert_event(
    connection: &Connection,
    event: &RecordedEvent,
    batch_uuid: Option<Uuid>,
) -> Result<(), StoreError> {
    let mut statement = connection
        .prepare_cached(
            "INSERT INTO events
                 (event_uuid, account_id, received_at, event_type, event_family,
                  conversion_identifier, email, payload, channel, batch_uuid)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )
        .map_err(failed)?;
    statement
        .execute(params![
            uuid_text(event.event_uuid),
            uuid_text(event.account_id.0),
            micros(event.received_at)?,
            event.event_type.as_str(),
            event.event_family.as_str(),
            event.conversion_identifier.as_str(),
            event.email.as_str(),
            event.payload.as_str(),
            channel_to_text(&event.channel)?,
            batch_uuid.map(uuid_text),
        ])
        .map_err(insert_failed)?;
    Ok(())
}

/// The stored claim of `claim`'s key, expired or not, with when it expires
/// (in microseconds).
fn live_claim(
    connection: &Connection,
    claim: &IdempotencyClaim,
) -> Result<Option<(i64, StoredClaim)>, StoreError> {
    let mut statement = connection
        .prepare_cached(
            "SELECT fingerprint, expires_at, event_uuids, batch_uuid
             FROM idempotency_claims WHERE account_id = ?1 AND scope = ?2 AND key = ?3",
        )
        .map_err(failed)?;
    let row = statement
        .query_row(
            params![
                uuid_text(claim.account_id.0),
                claim.scope.to_stored(),
                &claim.key
            ],
            |row| {
                Ok((
                    row.get::<_, Vec<u8>>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, Option<String>>(3)?,
                ))
            },
        )
        .optional()
        .map_err(failed)?;
    let Some((fingerprint, expires_at, event_uuids, batch_uuid)) = row else {
        return Ok(None);
    };
    // Checked like every stored instant, though only compared here.
    from_micros(expires_at).ok_or_else(|| malformed(RECORD, "expires_at"))?;
    let event_uuids: Vec<Uuid> =
        serde_json::from_str(&event_uuids).map_err(|_| malformed(RECORD, "event_uuids"))?;
    let batch_uuid = batch_uuid
        .map(|text| Uuid::parse_str(&text).map_err(|_| malformed(RECORD, "batch_uuid")))
        .transpose()?;
    let stored = StoredClaim::new(fingerprint, event_uuids, batch_uuid, RECORD)?;
    Ok(Some((expires_at, stored)))
}

/// Writes `claim` for `submission`'s events, replacing an expired claim of
/// the same key.
fn write_claim(
    connection: &Connection,
    claim: &IdempotencyClaim,
    submission: &EventSubmission,
) -> Result<(), StoreError> {
    let event_uuids: Vec<Uuid> = submission.events.iter().map(|e| e.event_uuid).collect();
    let mut statement = connection
        .prepare_cached(
            "INSERT INTO idempotency_claims
                 (account_id, scope, key, fingerprint, created_at, expires_at, event_uuids,
                  batch_uuid)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (account_id, scope, key) DO UPDATE SET
                 fingerprint = excluded.fingerprint,
                 created_at = excluded.created_at,
                 expires_at = excluded.expires_at,
                 event_uuids = excluded.event_uuids,
                 batch_uuid = excluded.batch_uuid",
        )
        .map_err(failed)?;
    statement
        .execute(params![
            uuid_text(claim.account_id.0),
            claim.scope.to_stored(),
            &claim.key,
            claim.fingerprint.as_slice(),
            micros(claim.created_at)?,
            micros(claim.expires_at)?,
            json_text(&event_uuids)?,
            submission.batch_uuid.map(uuid_text),
        ])
        .map_err(failed)?;
    Ok(())
}

/// A failed statement: data SQLite refused is [`StoreError::Rejected`],
/// anything else [`StoreError::Backend`].
fn failed(error: rusqlite::Error) -> StoreError {
    match sqlite_code(&error) {
        Some(code) if sqlite_refuses_data(code) => StoreError::rejected(RECORD, error),
        _ => StoreError::backend(RECORD, error),
    }
}

/// A failed insert of an event: a uuid already stored is
/// [`StoreError::Duplicate`]; otherwise as [`failed`].
fn insert_failed(error: rusqlite::Error) -> StoreError {
    // SQLITE_CONSTRAINT_PRIMARYKEY and SQLITE_CONSTRAINT_UNIQUE.
    const UNIQUE: [i32; 2] = [1555, 2067];
    match sqlite_code(&error) {
        Some(code) if UNIQUE.contains(&code) => StoreError::Duplicate { what: "event" },
        _ => failed(error),
    }
}

/// SQLite's extended result code of a failed statement.
fn sqlite_code(error: &rusqlite::Error) -> Option<i32> {
    match error {
        rusqlite::Error::SqliteFailure(failure, _) => Some(failure.extended_code),
        _ => None,
    }
}

/// The store was closed.
#[derive(Debug, thiserror::Error)]
#[error("the SQLite store is closed")]
struct WriterClosed;
