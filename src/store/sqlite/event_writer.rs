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
//!
//! The same groups carry the webhook outbox's writes ([`write_task`]), each
//! in a savepoint of its own after the group's events, answered after the
//! same COMMIT.
//!
//! [`write_task`]: super::write_task

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension as _, Transaction, TransactionBehavior, params};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::records::event::{EventSubmission, IdempotencyClaim, RecordOutcome, RecordedEvent};
use crate::store::error::StoreError;
use crate::store::sql::group_commit::{Answerer, GroupQueue, GroupWriterGone, Job, RECORD};
use crate::store::sql::records::{StoredClaim, channel_to_text};
use crate::store::sql::{fails_on_data, malformed};

use super::checkpointer::Checkpointer;
use super::columns::{from_micros, json_text, micros, uuid_text};
use super::connection::{Sync, open_connection};
use super::statement_errors::{failed, insert_failed};
use super::write_gate::WriteGate;
use super::write_task::{Task, WriteTask};

/// The most submissions and write tasks one group transaction takes.
const MAX_GROUP: usize = 256;

/// What the writer's queue carries: a `record` call, or another write to
/// run in the same group.
pub(super) enum Work {
    /// A `record` call.
    Record(Job),
    /// A write of the webhook outbox.
    Write(Box<dyn WriteTask>),
}

impl From<Job> for Work {
    fn from(job: Job) -> Self {
        Self::Record(job)
    }
}

/// The handle of a running writer: its queue, and the switch that closes
/// it.
#[derive(Clone, Debug)]
pub(super) struct EventWriter {
    /// Where `record` calls and write tasks queue.
    queue: GroupQueue<Work>,
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

    /// Runs `write` inside the next group's transaction, in a savepoint of
    /// its own, and answers what it returned once the group is committed.
    /// `action` names the failure if the writer has stopped.
    ///
    /// # Errors
    /// What `write` failed with (its writes rolled back, the group's
    /// others committed); the group's error if the group failed;
    /// [`StoreError::Backend`] if the store is closed (named by `action`
    /// if it was closed before this call; by the group's, "record events",
    /// if it was closed while the write waited in the queue).
    pub(super) async fn write<T, F>(&self, action: &'static str, write: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::backend(action, WriterClosed));
        }
        let (task, answer) = Task::boxed(write);
        self.queue.send(Work::Write(task), action).await?;
        answer
            .await
            .map_err(|_| StoreError::backend(action, GroupWriterGone))?
    }

    /// How many calls and write tasks wait, not yet taken by the thread.
    #[cfg(test)]
    pub(super) fn waiting(&self) -> usize {
        self.queue.waiting()
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
    fn run(mut self, mut queue: mpsc::Receiver<Work>) {
        let mut jobs = Vec::with_capacity(MAX_GROUP);
        let mut tasks: Vec<Box<dyn WriteTask>> = Vec::new();
        while let Some(first) = queue.blocking_recv() {
            let mut next = Some(first);
            while let Some(work) = next.take() {
                match work {
                    Work::Record(job) => jobs.push(job),
                    Work::Write(task) => tasks.push(task),
                }
                if jobs.len() + tasks.len() < MAX_GROUP {
                    next = queue.try_recv().ok();
                }
            }
            // Submissions per group, as PostgreSQL's writer counts them: a
            // group of the webhook outbox's writes alone is not one.
            if !jobs.is_empty() {
                crate::metrics::group_commit("sqlite", jobs.len(), queue.len());
            }
            let outcomes = {
                let _turn = self.gate.blocking_turn();
                self.record_group(&jobs, &mut tasks)
            };
            let group = outcomes.as_ref().map(|_| ()).map_err(StoreError::clone);
            for task in tasks.drain(..) {
                task.answer(group.clone());
            }
            self.answerer.answer(&mut jobs, outcomes);
        }
    }

    /// Records `jobs` and runs `tasks` (after the events, each in a
    /// savepoint of its own) in one write transaction. `Ok` holds each
    /// job's own outcome, all committed, and each task holds its own; `Err`
    /// means nothing was recorded.
    fn record_group(
        &mut self,
        jobs: &[Job],
        tasks: &mut [Box<dyn WriteTask>],
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
            .map_err(failed(RECORD))?;
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
        for task in tasks {
            run_task(&mut tx, task.as_mut())?;
        }
        // Only a committed submission is acknowledged.
        tx.commit().map_err(failed(RECORD))?;
        if let Some(checkpointer) = &mut self.checkpointer {
            // Events only: the outbox's rows (a delivery an event for each
            // webhook that wants it, and the leases and attempts) grow the
            // log between two checkpoints by as many again, and the
            // connections' own bound on the log still holds.
            checkpointer.committed(jobs.iter().map(|job| job.submission.events.len()).sum());
        }
        Ok(outcomes)
    }
}

/// Runs `task` in a savepoint of the group's transaction `tx`: released if
/// it succeeds, rolled back if it fails. `Err` only if the transaction
/// itself is gone (SQLite rolls it back on some I/O errors and a full
/// disk, and later statements would each commit alone) or a savepoint
/// cannot be taken or ended: the group fails.
fn run_task(tx: &mut Transaction<'_>, task: &mut dyn WriteTask) -> Result<(), StoreError> {
    let mut savepoint = tx.savepoint().map_err(failed(RECORD))?;
    match task.run(&savepoint) {
        Ok(()) => savepoint.commit().map_err(failed(RECORD)),
        // The group's events are answered a failure of the database, whatever
        // the task's own error said of its data.
        Err(error) if savepoint.is_autocommit() => Err(StoreError::backend(RECORD, error)),
        Err(_) => {
            // The task answers its own error; its rows go (ROLLBACK TO),
            // the group's others stay, and the savepoint ends (RELEASE).
            savepoint.rollback().map_err(failed(RECORD))?;
            savepoint.commit().map_err(failed(RECORD))
        }
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
    let savepoint = tx.savepoint().map_err(failed(RECORD))?;
    // On `Err`, dropping the savepoint rolls back to it: this
    // submission's rows go, its neighbours' stay.
    let outcome = record_in(&savepoint, submission)?;
    savepoint.commit().map_err(failed(RECORD))?;
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
        .map_err(failed(RECORD))?;
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
        .map_err(insert_failed("event", RECORD))?;
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
        .map_err(failed(RECORD))?;
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
        .map_err(failed(RECORD))?;
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
        .map_err(failed(RECORD))?;
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
        .map_err(failed(RECORD))?;
    Ok(())
}

/// The store was closed.
#[derive(Debug, thiserror::Error)]
#[error("the SQLite store is closed")]
struct WriterClosed;

#[cfg(test)]
mod tests {
    use std::future::Future;

    use serde_json::json;
    use time::macros::datetime;
    use tokio::task::JoinHandle;

    use super::*;
    use crate::account::AccountId;
    use crate::records::event::{EventPayload, IntakeChannel};
    use crate::store::EventSink as _;
    use crate::store::sqlite::SqliteStore;

    /// A one-event submission of event `n`.
    fn submission(n: u128) -> EventSubmission {
        let event = RecordedEvent {
            event_uuid: Uuid::from_u128(n),
            account_id: AccountId(Uuid::from_u128(7)),
            received_at: datetime!(2026-03-01 12:00:00 UTC),
            event_type: "CONVERSION".to_owned(),
            event_family: "CDP".to_owned(),
            conversion_identifier: format!("signup-{n}"),
            email: "ana@example.com".to_owned(),
            payload: EventPayload::from_value(&json!({"n": n.to_string()})),
            channel: IntakeChannel::ApiKey,
        };
        EventSubmission {
            events: vec![event],
            batch_uuid: None,
            idempotency: None,
        }
    }

    /// How many events with uuid `n` `connection` sees.
    fn events_seen(connection: &Connection, n: u128) -> Result<i64, StoreError> {
        connection
            .query_row(
                "SELECT COUNT(*) FROM events WHERE event_uuid = ?1",
                [uuid_text(Uuid::from_u128(n))],
                |row| row.get(0),
            )
            .map_err(failed(RECORD))
    }

    /// A store with a table `scratch (note)` for the tasks to write.
    async fn store_with_scratch() -> SqliteStore {
        let store = SqliteStore::open_temporary().await.expect("a store");
        sqlx::query("CREATE TABLE scratch (note TEXT NOT NULL)")
            .execute(&store.writer)
            .await
            .expect("the scratch table");
        store
    }

    /// The notes in `scratch`, in the order written.
    async fn notes(store: &SqliteStore) -> Vec<String> {
        sqlx::query_scalar("SELECT note FROM scratch ORDER BY rowid")
            .fetch_all(&store.reader)
            .await
            .expect("the notes")
    }

    /// Writes `note` into `scratch`.
    fn write_note(connection: &Connection, note: &str) -> Result<(), StoreError> {
        connection
            .execute("INSERT INTO scratch (note) VALUES (?1)", [note])
            .map_err(failed(RECORD))?;
        Ok(())
    }

    /// Runs each of `calls` as one group of the writer: the writer is held
    /// inside a group of its own until all of them wait in its queue, in
    /// the order given.
    async fn in_one_group(store: &SqliteStore, calls: Vec<Call>) -> Vec<Answer> {
        let (running, is_running) = std::sync::mpsc::channel::<()>();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (hold, held) = Task::boxed(move |_| {
            running.send(()).expect("the test waits");
            released.recv().expect("released");
            Ok(())
        });
        let queue = &store.events.queue;
        queue.send(Work::Write(hold), "hold").await.expect("queued");
        // The thread runs the held group's task: whatever queues now waits
        // for the next group.
        tokio::task::block_in_place(|| is_running.recv()).expect("the hold runs");
        let mut handles: Vec<JoinHandle<Answer>> = Vec::new();
        for (queued, call) in calls.into_iter().enumerate() {
            handles.push(tokio::spawn(call));
            until(|| store.events.waiting() == queued + 1).await;
        }
        release.send(()).expect("the hold waits");
        held.await.expect("answered").expect("the held group");
        let mut answers = Vec::new();
        for handle in handles {
            answers.push(handle.await.expect("joined"));
        }
        answers
    }

    /// Waits until `done` holds; fails the test after ten seconds.
    async fn until(done: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(tokio::time::Instant::now() < deadline, "never came to pass");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// What a call in a group answered: an event's outcome, or a task's.
    #[derive(Debug)]
    enum Answer {
        Event(Result<RecordOutcome, StoreError>),
        Task(Result<i64, StoreError>),
    }

    /// A call to run in a group: it answers what it got.
    type Call = std::pin::Pin<Box<dyn Future<Output = Answer> + Send>>;

    /// Recording event `n` through `store`'s sink.
    fn record_call(store: &SqliteStore, n: u128) -> Call {
        let sink = store.clone();
        Box::pin(async move { Answer::Event(sink.record(&submission(n)).await) })
    }

    /// Running `write` as a task of `store`'s writer.
    fn write_call<F>(store: &SqliteStore, write: F) -> Call
    where
        F: FnOnce(&Connection) -> Result<i64, StoreError> + Send + 'static,
    {
        let writer = store.events.clone();
        Box::pin(async move { Answer::Task(writer.write("write", write).await) })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failing_write_is_rolled_back_alone_and_its_group_committed() {
        let store = store_with_scratch().await;
        let calls = vec![
            record_call(&store, 1),
            write_call(&store, |c| {
                write_note(c, "rolled back")?;
                Err(StoreError::Duplicate { what: "note" })
            }),
            write_call(&store, |c| {
                write_note(c, "kept")?;
                // The group's event, not yet committed: the same
                // transaction.
                events_seen(c, 1)
            }),
            record_call(&store, 2),
        ];
        let answers = in_one_group(&store, calls).await;
        assert!(
            matches!(
                answers.as_slice(),
                [
                    Answer::Event(Ok(RecordOutcome::Recorded)),
                    Answer::Task(Err(StoreError::Duplicate { what: "note" })),
                    Answer::Task(Ok(1)),
                    Answer::Event(Ok(RecordOutcome::Recorded)),
                ]
            ),
            "{answers:?}"
        );
        assert_eq!(notes(&store).await, ["kept"]);
        for n in [1, 2] {
            let uuid = Uuid::from_u128(n);
            assert!(store.find_event(uuid).await.expect("find").is_some());
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_that_ends_the_transaction_fails_its_whole_group() {
        let store = store_with_scratch().await;
        let calls = vec![
            record_call(&store, 1),
            write_call(&store, |c| {
                write_note(c, "written first")?;
                Ok(0)
            }),
            write_call(&store, |c| {
                write_note(c, "gone")?;
                // As SQLite does on some I/O errors and a full disk: the
                // whole transaction is gone, and what follows would commit
                // alone.
                c.execute_batch("ROLLBACK").map_err(failed(RECORD))?;
                Err(StoreError::Duplicate { what: "note" })
            }),
        ];
        let answers = in_one_group(&store, calls).await;
        // Each, the write that succeeded before it included, is answered a
        // failure of the database that ended the transaction, not the
        // task's own word on its data.
        for answer in &answers {
            assert!(
                matches!(
                    answer,
                    Answer::Event(Err(StoreError::Backend { action: RECORD, source }))
                        | Answer::Task(Err(StoreError::Backend { action: RECORD, source }))
                        if source.to_string().contains("note")
                ),
                "{answers:?}"
            );
        }
        assert!(notes(&store).await.is_empty());
        let uuid = Uuid::from_u128(1);
        assert_eq!(store.find_event(uuid).await.expect("find"), None);
        // The writer goes on with the next group.
        assert_eq!(
            store.record(&submission(1)).await.expect("recorded"),
            RecordOutcome::Recorded
        );
        let note = store.events.write("note", |c| write_note(c, "next"));
        note.await.expect("written");
        assert_eq!(notes(&store).await, ["next"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_group_takes_at_most_max_group_calls_events_and_writes_together() {
        let store = store_with_scratch().await;
        // What each write saw committed before it, read on a connection of
        // its own: the writes of one group see none of their group's notes.
        let reader = Connection::open(store.path()).expect("a reading connection");
        let reader = Arc::new(std::sync::Mutex::new(reader));
        let committed_notes = move |_: &Connection| {
            let reader = reader.lock().expect("the reader");
            reader
                .query_row("SELECT COUNT(*) FROM scratch", [], |row| {
                    row.get::<_, i64>(0)
                })
                .map_err(failed(RECORD))
        };
        let mut calls = vec![record_call(&store, 1)];
        for _ in 0..MAX_GROUP + 40 {
            let seen = committed_notes.clone();
            calls.push(write_call(&store, move |c| {
                write_note(c, "n")?;
                seen(c)
            }));
        }
        let answers = in_one_group(&store, calls).await;
        let seen: Vec<i64> = answers
            .iter()
            .filter_map(|answer| match answer {
                Answer::Task(seen) => Some(*seen.as_ref().expect("written")),
                Answer::Event(recorded) => {
                    assert!(matches!(recorded, Ok(RecordOutcome::Recorded)));
                    None
                }
            })
            .collect();
        // The event and the first MAX_GROUP - 1 writes in one group; the
        // rest in the next, after its COMMIT.
        let first = MAX_GROUP - 1;
        assert!(seen[..first].iter().all(|&n| n == 0), "{seen:?}");
        let committed = i64::try_from(first).expect("small");
        assert!(seen[first..].iter().all(|&n| n == committed), "{seen:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_that_panics_fails_alone_and_the_writer_goes_on() {
        let store = store_with_scratch().await;
        let calls = vec![
            record_call(&store, 1),
            write_call(&store, |c| {
                write_note(c, "rolled back")?;
                panic!("a bug in a write");
            }),
            write_call(&store, |c| {
                write_note(c, "kept")?;
                Ok(0)
            }),
        ];
        let answers = in_one_group(&store, calls).await;
        assert!(
            matches!(
                answers.as_slice(),
                [
                    Answer::Event(Ok(RecordOutcome::Recorded)),
                    Answer::Task(Err(StoreError::Backend { source, .. })),
                    Answer::Task(Ok(0)),
                ] if source.to_string().contains("panicked")
            ),
            "{answers:?}"
        );
        assert_eq!(notes(&store).await, ["kept"]);
        assert_eq!(
            store.record(&submission(2)).await.expect("recorded"),
            RecordOutcome::Recorded
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_after_the_store_is_closed_fails() {
        let store = store_with_scratch().await;
        store.close().await;
        let written = store.events.write("note", |c| write_note(c, "late"));
        // Named by the write's own action: the store was closed before it.
        assert!(matches!(
            written.await,
            Err(StoreError::Backend { action: "note", .. })
        ));
    }
}
