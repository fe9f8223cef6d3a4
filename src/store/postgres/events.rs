//! [`EventSink`] on PostgreSQL: an idempotency key is claimed with
//! `INSERT ... ON CONFLICT DO UPDATE ... WHERE expired` in the same
//! transaction as its events, and the events go in as one `UNNEST`
//! statement. With group commit (the default), concurrent `record` calls
//! share transactions.

use std::sync::Arc;
use std::time::Duration;

use sqlx::Connection as _;
use sqlx::Postgres;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, PgPool};
use tokio::sync::{Mutex, mpsc};
use uuid::Uuid;

use crate::records::event::{EventSubmission, RecordOutcome};
use crate::store::error::StoreError;
use crate::store::sql::group_commit::{Job, RECORD, answer, answer_error};
use crate::store::sql::records::{channel_to_text, replay_or_reuse};
use crate::store::sql::{TimedOut, backend, fails_on_data, insert_failed, lost_connection};

use super::columns::Columns;

/// Records one submission on `conn`, which is inside a transaction (or a
/// savepoint) that the caller commits: the claim and the events stand or
/// fall together.
async fn record_in(
    conn: &mut PgConnection,
    submission: &EventSubmission,
    existing: Existing,
) -> Result<RecordOutcome, StoreError> {
    if let Some(claim) = &submission.idempotency {
        let event_uuids = own_uuids(submission);
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
            return match replay_or_reuse(&Columns::new(row, RECORD), claim)? {
                // The claim lists this submission's own fresh uuids: it is
                // this submission's first attempt, committed before its
                // connection was lost.
                RecordOutcome::Replayed { event_uuids, .. }
                    if existing == Existing::Skip && event_uuids == own_uuids(submission) =>
                {
                    Ok(RecordOutcome::Recorded)
                }
                outcome => Ok(outcome),
            };
        }
    }
    insert_events(conn, &[submission], existing).await?;
    Ok(RecordOutcome::Recorded)
}

/// The uuids of a submission's events, in order.
fn own_uuids(submission: &EventSubmission) -> Vec<Uuid> {
    submission.events.iter().map(|e| e.event_uuid).collect()
}

/// What an insert does with an event whose uuid is already stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Existing {
    /// Refuse the statement: a duplicate uuid is an error.
    Refuse,
    /// Skip the event: on a retry after a lost connection, the first
    /// attempt may have committed it (the uuid is this submission's own,
    /// freshly drawn, so the stored event is this one).
    Skip,
}

/// Inserts the events of `submissions` (not their claims) as one statement:
/// it stores every event or, on a duplicate uuid, none (or, with
/// [`Existing::Skip`], every event not already stored).
async fn insert_events(
    conn: &mut PgConnection,
    submissions: &[&EventSubmission],
    existing: Existing,
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
            payloads.push(event.payload.as_str());
            channels.push(channel_to_text(&event.channel)?);
            batches.push(submission.batch_uuid);
        }
    }
    // The payload and the channel are stored as the JSON text they are
    // (`text`, migration 10): PostgreSQL neither builds a `jsonb` tree of
    // each (a quarter of its time under an intake flood) nor parses them
    // again as `json` (a tenth), both measured side by side
    // (benches/intake_load/NOTES.md). The store wrote them and checks them
    // when it reads them back.
    //
    // The arrays are unnested in the select list, which PostgreSQL steps
    // through together, row by row (a `ProjectSet`); `FROM UNNEST(...)`
    // would first copy every row into a tuplestore and read it back. Both
    // measured under a flood, side by side: the backends' CPU an event 1 to
    // 2 µs lower this way (benches/intake_load/NOTES.md).
    macro_rules! insert {
        () => {
            "INSERT INTO events
                 (event_uuid, account_id, received_at, event_type, event_family,
                  conversion_identifier, email, payload, channel, batch_uuid)
             SELECT UNNEST($1::uuid[]), UNNEST($2::uuid[]), UNNEST($3::timestamptz[]),
                    UNNEST($4::text[]), UNNEST($5::text[]), UNNEST($6::text[]),
                    UNNEST($7::text[]), UNNEST($8::text[]), UNNEST($9::text[]),
                    UNNEST($10::uuid[])"
        };
    }
    const INSERT: &str = insert!();
    const INSERT_SKIPPING: &str = concat!(insert!(), " ON CONFLICT (event_uuid) DO NOTHING");
    sqlx::query(match existing {
        Existing::Refuse => INSERT,
        Existing::Skip => INSERT_SKIPPING,
    })
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

/// How long one attempt at writing events may take, and the `BEGIN` that
/// has PostgreSQL end a transaction of it left open as long.
///
/// A connection can go silent without closing (a failover, a network
/// partition): without a limit, the writer would wait for its answer for
/// as long as the operating system keeps the socket (hours), and every
/// `record` call queued behind it with it. After the limit the connection
/// is given up as lost, and the group retried once on a fresh one, which
/// finds out what the first attempt committed. On the database's side, the
/// first attempt's transaction may be left open, holding its idempotency
/// keys' rows so that the retry (and every later request with those keys)
/// would wait for it; `idle_in_transaction_session_timeout`, set for each
/// transaction of the writer's, has PostgreSQL roll it back once it has
/// waited as long for a statement.
#[derive(Clone, Debug)]
pub(super) struct WriteLimit {
    /// How long an attempt may take before its connection is given up.
    timeout: Duration,
    /// `BEGIN`, and the transaction's idle limit.
    begin: String,
}

impl WriteLimit {
    /// Attempts that may each take `timeout` (PostgreSQL counts in whole
    /// milliseconds, at least one).
    pub(super) fn new(timeout: Duration) -> Self {
        let millis = timeout.as_millis().clamp(1, i32::MAX as u128);
        Self {
            timeout,
            begin: format!("BEGIN; SET LOCAL idle_in_transaction_session_timeout = {millis}"),
        }
    }

    /// Runs `attempt` within the limit; a late one fails as a lost
    /// connection would ([`lost_connection`]).
    async fn apply<T>(
        &self,
        attempt: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        tokio::time::timeout(self.timeout, attempt)
            .await
            .unwrap_or_else(|_| Err(StoreError::backend(RECORD, TimedOut)))
    }
}

/// Records one submission in a transaction of its own: one COMMIT per call.
pub(super) async fn record_alone(
    pool: &PgPool,
    submission: &EventSubmission,
    limit: &WriteLimit,
) -> Result<RecordOutcome, StoreError> {
    // A connection of its own, given back to the pool when dropped, or
    // closed if it failed or went silent.
    let mut connection = None;
    let outcomes = record_on(
        pool,
        &mut connection,
        &[submission],
        Existing::Refuse,
        limit,
    )
    .await;
    match outcomes {
        Ok(outcomes) => outcomes
            .into_iter()
            .next()
            .unwrap_or(Ok(RecordOutcome::Recorded)),
        Err(NotRecorded::NoConnection(error) | NotRecorded::Failed(error)) => Err(error),
    }
}

/// Starts `writers` group-commit writers (at most half the pool's
/// connections) on `pool`, sharing the queue `jobs`. With one, what queues
/// while it commits is its next group; with two or more, while one commits
/// its group the next gathers what has queued since, so that groups are
/// written side by side and PostgreSQL flushes their commits together.
pub(super) fn spawn_group_writers(
    pool: &PgPool,
    jobs: mpsc::Receiver<Job>,
    max: usize,
    writers: usize,
    limit: &WriteLimit,
) {
    crate::metrics::register_group_commit("postgres");
    let jobs = Arc::new(Mutex::new(jobs));
    // At most half the pool, so that a small pool always has connections
    // for tokens and reads while every writer is busy.
    let half_the_pool = usize::try_from(pool.options().get_max_connections() / 2).unwrap_or(1);
    for _ in 0..writers.min(half_the_pool).max(1) {
        // Each writer ends when the last clone of the store (the last
        // sender) is dropped, after answering what was queued.
        tokio::spawn(group_writer(
            pool.clone(),
            Arc::clone(&jobs),
            max,
            limit.clone(),
        ));
    }
}

/// How long a writer keeps its connection while no `record` call comes.
/// Under a flood the writer often empties the queue before the next call
/// arrives; giving the connection back at each such pause cost the next
/// group a pool checkout and the pool's liveness ping (a round trip), and
/// spread the groups over every connection of the pool. Measured with the
/// intake bench, 64 connections: PostgreSQL's p99 fell from 42 ms to 5 to
/// 20 ms (from run to run), and token refreshes' from 43 ms to 7 to 9 ms.
/// A store idle for longer holds no connection.
const KEEP_CONNECTION_IDLE: Duration = Duration::from_secs(1);

/// One group-commit writer: takes whatever `record` calls have queued (up
/// to `max`), records them, and answers each after the COMMIT. While
/// groups keep coming it keeps its connection, so a group costs no pool
/// checkout (and no liveness ping); after [`KEEP_CONNECTION_IDLE`] without
/// one, or when the pool is closed, the connection goes back to the pool.
/// A group whose connection was lost, or that took longer than `limit`, is
/// retried once on a fresh connection.
async fn group_writer(
    pool: PgPool,
    jobs: Arc<Mutex<mpsc::Receiver<Job>>>,
    max: usize,
    limit: WriteLimit,
) {
    let mut taken = Vec::with_capacity(max);
    let mut connection: Option<PoolConnection<Postgres>> = None;
    loop {
        // The lock is held while waiting, so one writer at a time gathers
        // a group; the others are writing theirs, and a writer that waits
        // for another to finish gathering gives its connection back first.
        let mut queue = match jobs.try_lock() {
            Ok(queue) => queue,
            Err(_) => {
                connection = None;
                jobs.lock().await
            }
        };
        if queue.is_empty() && connection.is_some() {
            // `recv_many` is cancel-safe: a job is either taken or left
            // queued for the wait below.
            tokio::select! {
                _ = queue.recv_many(&mut taken, max) => {}
                () = tokio::time::sleep(KEEP_CONNECTION_IDLE) => connection = None,
                // `close` waits for every connection to come back.
                () = pool.close_event() => connection = None,
            }
        }
        if taken.is_empty() && queue.recv_many(&mut taken, max).await == 0 {
            break;
        }
        crate::metrics::group_commit("postgres", taken.len(), queue.len());
        drop(queue);
        let submissions: Vec<&EventSubmission> = taken.iter().map(|job| &job.submission).collect();
        let mut outcomes = record_on(
            &pool,
            &mut connection,
            &submissions,
            Existing::Refuse,
            &limit,
        )
        .await;
        if matches!(&outcomes, Err(NotRecorded::Failed(error)) if lost_connection(error)) {
            // Safe to run again: the events' uuids are this group's own
            // (an event stored by the first attempt is skipped), and a
            // claim stored by it lists exactly those uuids.
            outcomes =
                record_on(&pool, &mut connection, &submissions, Existing::Skip, &limit).await;
        }
        drop(submissions);
        match outcomes {
            Ok(outcomes) => answer(&mut taken, outcomes),
            Err(NotRecorded::Failed(error)) => answer_error(&mut taken, &error),
            Err(NotRecorded::NoConnection(error)) => {
                answer_error(&mut taken, &error);
                refuse_queued(&jobs, &error);
            }
        }
    }
}

/// Why a group was not recorded.
enum NotRecorded {
    /// The pool gave no connection within its acquire timeout: the
    /// database is down or refuses connections.
    NoConnection(StoreError),
    /// The group's statements failed: its connection was lost, or the
    /// database refused them.
    Failed(StoreError),
}

/// Answers `error` to every call queued now, when the writer could not get
/// a connection ([`NotRecorded::NoConnection`]): they queued while its
/// group waited out the pool's acquire timeout, and each group after it
/// would wait as long again, so that a burst larger than one group would
/// wait a timeout per group ahead of it. Refused at once, no call
/// waits much more than one timeout; the next call tries the database
/// again. A writer busy gathering a group (another writer holds the queue)
/// is left to try the database itself.
fn refuse_queued(jobs: &Mutex<mpsc::Receiver<Job>>, error: &StoreError) {
    let Ok(mut queue) = jobs.try_lock() else {
        return;
    };
    let mut refused = Vec::with_capacity(queue.len());
    while let Ok(job) = queue.try_recv() {
        refused.push(job);
    }
    drop(queue);
    answer_error(&mut refused, error);
}

/// Records `submissions` on `connection` (a group writer's, kept between
/// groups, or one call's own) within `limit`, opening one if there is
/// none; a connection that failed or went silent is closed, not reused.
async fn record_on(
    pool: &PgPool,
    connection: &mut Option<PoolConnection<Postgres>>,
    submissions: &[&EventSubmission],
    existing: Existing,
    limit: &WriteLimit,
) -> Result<Vec<Result<RecordOutcome, StoreError>>, NotRecorded> {
    let conn = match connection {
        Some(conn) => conn,
        None => {
            let acquired = pool.acquire().await.map_err(backend(RECORD));
            connection.insert(acquired.map_err(NotRecorded::NoConnection)?)
        }
    };
    let outcomes = limit
        .apply(record_group(conn, submissions, existing, limit))
        .await;
    if outcomes.as_ref().is_err_and(lost_connection)
        && let Some(mut broken) = connection.take()
    {
        broken.close_on_drop();
    }
    outcomes.map_err(NotRecorded::Failed)
}

/// Records a group of submissions on `conn`. `Ok` holds each submission's
/// own outcome, in the group's order: each `Ok` one is committed, each
/// `Err` one is not. `Err` means nothing was recorded (or, for a lost
/// connection, that it is unknown whether a COMMIT happened).
///
/// Submissions without an idempotency key (the common case) go in as one
/// `INSERT`, which is its own transaction when they are all there is.
/// Should it fail on the data (a value PostgreSQL refuses), they go one by
/// one, so that a bad submission fails alone. Submissions with a key each
/// claim it in a savepoint of their own, in one transaction with the rest,
/// in the order of [`in_claim_order`].
async fn record_group(
    conn: &mut PgConnection,
    submissions: &[&EventSubmission],
    existing: Existing,
    limit: &WriteLimit,
) -> Result<Vec<Result<RecordOutcome, StoreError>>, StoreError> {
    let plain: Vec<&EventSubmission> = submissions
        .iter()
        .copied()
        .filter(|submission| submission.idempotency.is_none())
        .collect();
    if plain.len() == submissions.len() {
        // One statement, atomic and durable at its own implicit COMMIT: no
        // BEGIN round trip needed.
        return match insert_events(conn, &plain, existing).await {
            Ok(()) => Ok(vec![Ok(RecordOutcome::Recorded); plain.len()]),
            Err(error) if plain.len() > 1 && fails_on_data(&error) => {
                let mut outcomes = Vec::with_capacity(plain.len());
                for submission in &plain {
                    let outcome = insert_events(conn, &[submission], existing).await;
                    match outcome {
                        Err(error) if lost_connection(&error) => {
                            // Whether this one committed is unknown: the
                            // group is retried, skipping what is stored.
                            return Err(error);
                        }
                        Err(error) if !fails_on_data(&error) => {
                            // Each insert here is its own transaction: the
                            // ones before this are committed and answered
                            // so (an error would have their clients send
                            // them again), this one and the rest are not.
                            outcomes.resize(plain.len(), Err(error));
                            return Ok(outcomes);
                        }
                        outcome => outcomes.push(outcome.map(|()| RecordOutcome::Recorded)),
                    }
                }
                Ok(outcomes)
            }
            Err(error) => Err(error),
        };
    }

    let mut tx = conn
        .begin_with(limit.begin.clone())
        .await
        .map_err(backend(RECORD))?;
    // The plain submissions first, in one statement. Should it fail on the
    // data, it is rolled back and they go one by one below.
    let mut plain_recorded = false;
    if !plain.is_empty() {
        let mut savepoint = tx.begin().await.map_err(backend(RECORD))?;
        match insert_events(&mut savepoint, &plain, existing).await {
            Ok(()) => {
                savepoint.commit().await.map_err(backend(RECORD))?;
                plain_recorded = true;
            }
            Err(error) if fails_on_data(&error) => {
                savepoint.rollback().await.map_err(backend(RECORD))?;
            }
            Err(error) => return Err(error),
        }
    }
    let alone = submissions.len() == 1;
    // Each outcome beside its submission's place in the group.
    let mut outcomes = Vec::with_capacity(submissions.len());
    for index in in_claim_order(submissions) {
        let submission = submissions[index];
        if plain_recorded && submission.idempotency.is_none() {
            outcomes.push((index, Ok(RecordOutcome::Recorded)));
            continue;
        }
        if alone {
            // Alone, a submission needs no savepoint: its failure is the
            // transaction's.
            let outcome = record_in(&mut tx, submission, existing).await?;
            outcomes.push((index, Ok(outcome)));
            continue;
        }
        // A failing submission rolls back to its savepoint: its neighbours'
        // work stands.
        let mut savepoint = tx.begin().await.map_err(backend(RECORD))?;
        let outcome = record_in(&mut savepoint, submission, existing).await;
        match &outcome {
            Ok(_) => savepoint.commit().await.map_err(backend(RECORD))?,
            Err(error) if fails_on_data(error) => {
                savepoint.rollback().await.map_err(backend(RECORD))?;
            }
            // The connection or the database failed: so does the group.
            Err(error) => return Err(error.clone()),
        }
        outcomes.push((index, outcome));
    }
    // Only a committed submission is acknowledged.
    tx.commit().await.map_err(backend(RECORD))?;
    outcomes.sort_unstable_by_key(|&(index, _)| index);
    Ok(outcomes.into_iter().map(|(_, outcome)| outcome).collect())
}

/// The order in which a group's submissions are recorded: those without a
/// key first, as they came, then those with a key by account, scope and
/// key (as they came among equal keys, so that a key's first submission
/// claims it and a retry in the same group replays it).
///
/// A claim locks its key's row until the group commits, so two groups
/// (of two writers, or of two instances) that claimed the same two keys
/// in opposite orders would each wait for the other, and PostgreSQL would
/// end one of them with a deadlock (`40P01`), failing every submission in
/// it. Claimed in one order everywhere, a group only ever waits for one
/// that holds keys ordered before its own, which never waits back.
fn in_claim_order(submissions: &[&EventSubmission]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..submissions.len()).collect();
    order.sort_by_cached_key(|&index| {
        submissions[index].idempotency.as_ref().map(|claim| {
            (
                claim.account_id.0,
                claim.scope.to_stored(),
                claim.key.clone(),
            )
        })
    });
    order
}
