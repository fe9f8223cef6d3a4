//! What the SQLite and PostgreSQL stores share: turning sqlx errors into
//! [`StoreError`]s, rows back into records, and the queue of the
//! group-commit writer.
//!
//! A column that cannot be turned back into its field (a hash of the wrong
//! length, a channel that is not JSON) means the database was written by
//! something else or damaged; it is reported as a backend failure, never a
//! panic, and never as "not found".

use sqlx::Database;
use sqlx::query::Query;
use time::OffsetDateTime;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::{
    AccessTokenRecord, Account, AccountId, ApiKeyId, ApiKeyRecord, Client, ClientId, CodeLookup,
    CodeRecord, CodeTake, EventSubmission, Grant, GrantId, IdempotencyClaim, IntakeChannel,
    PkceChallenge, RecordOutcome, RecordedEvent, RefreshPolicy, RefreshState, RefreshTokenRecord,
    Rotation, SecretHash, StoreError,
};

/// A stored value that does not decode into its record field.
#[derive(Debug, thiserror::Error)]
#[error("the stored {column} is malformed")]
struct MalformedColumn {
    /// The column's name.
    column: &'static str,
}

/// Maps a failed query: data the database refused is
/// [`StoreError::Rejected`], anything else [`StoreError::Backend`].
pub(crate) fn backend(action: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |error| {
        if is_data_error(&error) {
            StoreError::rejected(action, error)
        } else {
            StoreError::backend(action, error)
        }
    }
}

/// Maps a failed insert: a unique violation is [`StoreError::Duplicate`],
/// data the database refused [`StoreError::Rejected`], anything else
/// [`StoreError::Backend`].
pub(crate) fn insert_failed(
    what: &'static str,
    action: &'static str,
) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |error| {
        if is_unique_violation(&error) {
            StoreError::Duplicate { what }
        } else {
            backend(action)(error)
        }
    }
}

/// Whether the database refused a statement because of the values in it,
/// so that running it again cannot succeed: PostgreSQL's SQLSTATE class 22
/// (data exception: a U+0000 in text or JSONB, a value out of range) and
/// the integrity violations other than uniqueness (class 23); SQLite's
/// `SQLITE_TOOBIG`, `SQLITE_MISMATCH` and constraint failures other than
/// uniqueness. A connection lost, a timeout or a full disk is not one.
fn is_data_error(error: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = error else {
        return false;
    };
    match db.kind() {
        sqlx::error::ErrorKind::UniqueViolation => false,
        sqlx::error::ErrorKind::ForeignKeyViolation
        | sqlx::error::ErrorKind::NotNullViolation
        | sqlx::error::ErrorKind::CheckViolation => true,
        _ => db.code().is_some_and(|code| is_data_error_code(&code)),
    }
}

/// Whether a database's error code names a refusal of the data: a
/// five-character SQLSTATE (PostgreSQL) of class 22 or 23, or an SQLite
/// extended result code whose primary code is `SQLITE_TOOBIG` (18),
/// `SQLITE_CONSTRAINT` (19) or `SQLITE_MISMATCH` (20).
fn is_data_error_code(code: &str) -> bool {
    // A SQLSTATE is always five characters ("22021", "22P05", "23505").
    if code.len() == 5 {
        return code.starts_with("22") || (code.starts_with("23") && code != "23505");
    }
    // SQLite's extended codes have at most four digits; the low byte is the
    // primary code.
    code.parse::<i32>()
        .is_ok_and(|extended| matches!(extended & 0xff, 18..=20))
}

/// Whether the database refused a write because of a unique index.
fn is_unique_violation(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.is_unique_violation())
}

/// A malformed-column failure while reading `action`.
pub(crate) fn malformed(action: &'static str, column: &'static str) -> StoreError {
    StoreError::backend(action, MalformedColumn { column })
}

/// A hash read back from a 32-byte binary column.
fn hash_from_column(
    bytes: Vec<u8>,
    action: &'static str,
    column: &'static str,
) -> Result<SecretHash, StoreError> {
    let bytes: [u8; 32] = bytes.try_into().map_err(|_| malformed(action, column))?;
    Ok(SecretHash::from_bytes(bytes))
}

/// An idempotency fingerprint read back from a 32-byte binary column.
fn fingerprint_from_column(bytes: Vec<u8>, action: &'static str) -> Result<[u8; 32], StoreError> {
    bytes
        .try_into()
        .map_err(|_| malformed(action, "fingerprint"))
}

/// The channel of an event as stored: its serde JSON form, so that a
/// channel added later needs no migration.
pub(crate) fn channel_to_json(channel: &IntakeChannel) -> Result<serde_json::Value, StoreError> {
    serde_json::to_value(channel)
        .map_err(|error| StoreError::backend("encode an event channel", error))
}

/// A schema migration: applied once, in order of `version`, by the store
/// that ships it.
pub(crate) struct Migration {
    /// Its number, recorded in `schema_version` once applied.
    pub(crate) version: i64,
    /// The statements.
    pub(crate) sql: &'static str,
}

/// The channel of an event read back from its JSON form.
fn channel_from_json(
    value: serde_json::Value,
    action: &'static str,
) -> Result<IntakeChannel, StoreError> {
    serde_json::from_value(value).map_err(|_| malformed(action, "events.channel"))
}

/// One row, and what the caller was doing, to name in any failure. Each
/// store implements [`RecordColumns`] for it on its own row type.
pub(crate) struct Columns<R> {
    /// The row.
    row: R,
    /// What the caller was doing.
    pub(crate) action: &'static str,
}

impl<R: sqlx::Row> Columns<R> {
    /// `row`, read on behalf of `action`.
    pub(crate) fn new(row: R, action: &'static str) -> Self {
        Self { row, action }
    }

    /// The column as sqlx decodes it.
    pub(crate) fn get<'r, T>(&'r self, column: &'static str) -> Result<T, StoreError>
    where
        T: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        &'static str: sqlx::ColumnIndex<R>,
    {
        self.row.try_get(column).map_err(backend(self.action))
    }
}

/// A statement of `DB` with its arguments bound.
pub(crate) type Statement<'q, DB> = Query<'q, DB, <DB as Database>::Arguments<'q>>;

/// Runs `statement`, which inserts one `what`: a unique violation is
/// [`StoreError::Duplicate`].
pub(crate) async fn insert_row<'c, 'q, DB, E>(
    executor: E,
    statement: Statement<'q, DB>,
    what: &'static str,
    action: &'static str,
) -> Result<(), StoreError>
where
    DB: Database,
    E: sqlx::Executor<'c, Database = DB>,
    <DB as Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
{
    statement
        .execute(executor)
        .await
        .map_err(insert_failed(what, action))?;
    Ok(())
}

/// Runs `statement` and puts the row it finds, if any, together with
/// `record`.
pub(crate) async fn find_row<'c, 'q, DB, E, T>(
    executor: E,
    statement: Statement<'q, DB>,
    action: &'static str,
    record: impl FnOnce(&Columns<DB::Row>) -> Result<T, StoreError>,
) -> Result<Option<T>, StoreError>
where
    DB: Database,
    E: sqlx::Executor<'c, Database = DB>,
    <DB as Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
{
    statement
        .fetch_optional(executor)
        .await
        .map_err(backend(action))?
        .map(|row| record(&Columns::new(row, action)))
        .transpose()
}

/// The columns of one row, read as the values records are made of.
///
/// Each store implements it for its own column types (PostgreSQL: native
/// UUID, TIMESTAMPTZ, BYTEA, arrays and JSONB; SQLite: uuids as text,
/// instants as integer microseconds, hashes as BLOBs, lists and JSON as
/// text), so that each record below is put together once for both. Every
/// failure is a [`StoreError::Backend`] naming [`RecordColumns::action`].
pub(crate) trait RecordColumns {
    /// What the caller was doing, named in every failure.
    fn action(&self) -> &'static str;
    /// A uuid.
    fn uuid(&self, column: &'static str) -> Result<Uuid, StoreError>;
    /// A uuid or NULL.
    fn optional_uuid(&self, column: &'static str) -> Result<Option<Uuid>, StoreError>;
    /// A list of uuids.
    fn uuids(&self, column: &'static str) -> Result<Vec<Uuid>, StoreError>;
    /// An instant.
    fn time(&self, column: &'static str) -> Result<OffsetDateTime, StoreError>;
    /// An instant or NULL.
    fn optional_time(&self, column: &'static str) -> Result<Option<OffsetDateTime>, StoreError>;
    /// Text.
    fn text(&self, column: &'static str) -> Result<String, StoreError>;
    /// Text or NULL.
    fn optional_text(&self, column: &'static str) -> Result<Option<String>, StoreError>;
    /// A boolean.
    fn flag(&self, column: &'static str) -> Result<bool, StoreError>;
    /// Bytes.
    fn bytes(&self, column: &'static str) -> Result<Vec<u8>, StoreError>;
    /// Bytes or NULL.
    fn optional_bytes(&self, column: &'static str) -> Result<Option<Vec<u8>>, StoreError>;
    /// A list of strings.
    fn strings(&self, column: &'static str) -> Result<Vec<String>, StoreError>;
    /// A JSON value.
    fn json(&self, column: &'static str) -> Result<serde_json::Value, StoreError>;

    /// A [`SecretHash`] from a 32-byte binary column.
    fn hash(&self, column: &'static str) -> Result<SecretHash, StoreError> {
        hash_from_column(self.bytes(column)?, self.action(), column)
    }
}

/// A grant from its `grants` row.
pub(crate) fn grant_from(c: &impl RecordColumns) -> Result<Grant, StoreError> {
    Ok(Grant {
        id: GrantId(c.uuid("id")?),
        client_id: ClientId::new(c.text("client_id")?),
        account_id: AccountId(c.uuid("account_id")?),
        created_at: c.time("created_at")?,
        revoked_at: c.optional_time("revoked_at")?,
    })
}

/// The authorization code hashed to `hash`, from the columns its take
/// returns.
pub(crate) fn code_from(
    c: &impl RecordColumns,
    hash: SecretHash,
) -> Result<CodeRecord, StoreError> {
    Ok(CodeRecord {
        hash,
        grant_id: GrantId(c.uuid("grant_id")?),
        client_id: ClientId::new(c.text("client_id")?),
        account_id: AccountId(c.uuid("account_id")?),
        redirect_uri: c.text("redirect_uri")?,
        pkce: c
            .optional_text("pkce_challenge")?
            .map(|challenge| PkceChallenge { challenge }),
        issued_at: c.time("issued_at")?,
        expires_at: c.time("expires_at")?,
    })
}

/// A code as [`crate::TokenStore::find_code`] reports it, from its row
/// (the columns of [`code_from`] and `taken`).
pub(crate) fn code_lookup(
    c: &impl RecordColumns,
    hash: SecretHash,
) -> Result<CodeLookup, StoreError> {
    Ok(if c.flag("taken")? {
        CodeLookup::Used {
            grant_id: GrantId(c.uuid("grant_id")?),
            client_id: ClientId::new(c.text("client_id")?),
        }
    } else {
        CodeLookup::Unused(code_from(c, hash)?)
    })
}

/// What a code found already taken (its tombstone) tells of it.
pub(crate) fn code_tombstone(c: &impl RecordColumns) -> Result<CodeTake, StoreError> {
    Ok(CodeTake::AlreadyTaken {
        grant_id: GrantId(c.uuid("grant_id")?),
        client_id: ClientId::new(c.text("client_id")?),
    })
}

/// The access token hashed to `hash`, from its row joined with its grant's
/// `revoked`.
pub(crate) fn access_from(
    c: &impl RecordColumns,
    hash: SecretHash,
) -> Result<AccessTokenRecord, StoreError> {
    Ok(AccessTokenRecord {
        hash,
        grant_id: GrantId(c.uuid("grant_id")?),
        client_id: ClientId::new(c.text("client_id")?),
        account_id: AccountId(c.uuid("account_id")?),
        issued_at: c.time("issued_at")?,
        expires_at: c.time("expires_at")?,
        revoked: c.flag("revoked")?,
    })
}

/// The refresh token hashed to `hash`, from its row joined with its grant's
/// `revoked` and its successor's rotation time (`successor_used_at`).
pub(crate) fn refresh_from(
    c: &impl RecordColumns,
    hash: SecretHash,
) -> Result<RefreshTokenRecord, StoreError> {
    Ok(RefreshTokenRecord {
        hash,
        grant_id: GrantId(c.uuid("grant_id")?),
        client_id: ClientId::new(c.text("client_id")?),
        account_id: AccountId(c.uuid("account_id")?),
        issued_at: c.time("issued_at")?,
        expires_at: c.optional_time("expires_at")?,
        predecessor: c
            .optional_bytes("predecessor")?
            .map(|bytes| hash_from_column(bytes, c.action(), "predecessor"))
            .transpose()?,
        state: refresh_state(c, c.optional_time("successor_used_at")?)?,
        revoked: c.flag("revoked")?,
    })
}

/// A refresh token's state, from its `rotated_at` and `successor`, and when
/// that successor was used, as read by the caller.
fn refresh_state(
    c: &impl RecordColumns,
    successor_used_at: Option<OffsetDateTime>,
) -> Result<RefreshState, StoreError> {
    let at = c.optional_time("rotated_at")?;
    let successor = c.optional_bytes("successor")?;
    Ok(match (at, successor) {
        (Some(at), Some(successor)) => RefreshState::Rotated {
            at,
            successor: hash_from_column(successor, c.action(), "successor")?,
            successor_used_at,
        },
        // The table's CHECK keeps both set or both unset.
        (None, None) => RefreshState::Active,
        _ => return Err(malformed(c.action(), "successor")),
    })
}

/// Why the refresh token in this row (its `revoked`, `rotated_at` and
/// `successor`) cannot be rotated, or `None` if it is active.
pub(crate) fn rotation_refused(c: &impl RecordColumns) -> Result<Option<Rotation>, StoreError> {
    if c.flag("revoked")? {
        return Ok(Some(Rotation::Revoked));
    }
    Ok(match refresh_state(c, None)? {
        RefreshState::Rotated { at, successor, .. } => {
            Some(Rotation::AlreadyRotated { at, successor })
        }
        RefreshState::Active => None,
    })
}

/// A client from its `clients` row.
pub(crate) fn client_from(c: &impl RecordColumns) -> Result<Client, StoreError> {
    Ok(Client {
        id: ClientId::new(c.text("id")?),
        name: c.text("name")?,
        secret_hash: c.hash("secret_hash")?,
        redirect_uris: c.strings("redirect_uris")?,
        require_pkce: c.flag("require_pkce")?,
        refresh_policy: c
            .optional_text("refresh_policy")?
            .map(|text| {
                RefreshPolicy::from_stored(&text)
                    .ok_or_else(|| malformed(c.action(), "clients.refresh_policy"))
            })
            .transpose()?,
    })
}

/// An account from its `accounts` row.
pub(crate) fn account_from(c: &impl RecordColumns) -> Result<Account, StoreError> {
    Ok(Account {
        id: AccountId(c.uuid("id")?),
        name: c.text("name")?,
        email: c.text("email")?,
        password_hash: c.optional_text("password_hash")?,
        custom_fields: c.strings("custom_fields")?,
    })
}

/// An API key from its `api_keys` row.
pub(crate) fn api_key_from(c: &impl RecordColumns) -> Result<ApiKeyRecord, StoreError> {
    Ok(ApiKeyRecord {
        id: ApiKeyId(c.uuid("id")?),
        account_id: AccountId(c.uuid("account_id")?),
        hash: c.hash("hash")?,
        label: c.text("label")?,
        active: c.flag("active")?,
        created_at: c.time("created_at")?,
    })
}

/// An event from its `events` row.
pub(crate) fn event_from(c: &impl RecordColumns) -> Result<RecordedEvent, StoreError> {
    Ok(RecordedEvent {
        event_uuid: c.uuid("event_uuid")?,
        account_id: AccountId(c.uuid("account_id")?),
        received_at: c.time("received_at")?,
        event_type: c.text("event_type")?,
        event_family: c.text("event_family")?,
        conversion_identifier: c.text("conversion_identifier")?,
        email: c.text("email")?,
        payload: c.json("payload")?,
        channel: channel_from_json(c.json("channel")?, c.action())?,
    })
}

/// The outcome of `claim` against the live claim of its key in this row
/// (its `fingerprint`, `event_uuids` and `batch_uuid`): the first request's
/// identifiers if the fingerprints match, else [`RecordOutcome::KeyReused`].
pub(crate) fn replay_or_reuse(
    c: &impl RecordColumns,
    claim: &IdempotencyClaim,
) -> Result<RecordOutcome, StoreError> {
    let fingerprint = fingerprint_from_column(c.bytes("fingerprint")?, c.action())?;
    Ok(if fingerprint == claim.fingerprint {
        RecordOutcome::Replayed {
            event_uuids: c.uuids("event_uuids")?,
            batch_uuid: c.optional_uuid("batch_uuid")?,
        }
    } else {
        RecordOutcome::KeyReused
    })
}

/// The count of rows a statement changed, which sqlx reports on each
/// database's own result type.
pub(crate) trait RowsAffected {
    /// How many rows the statement inserted, updated or deleted.
    fn rows_affected(&self) -> u64;
}

#[cfg(feature = "sqlite")]
impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
    fn rows_affected(&self) -> u64 {
        self.rows_affected()
    }
}

#[cfg(feature = "postgres")]
impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows_affected(&self) -> u64 {
        self.rows_affected()
    }
}

/// Runs each of the purge `statements` in turn (the first parameter the
/// cutoff, the second how many rows it may still delete) until `limit`
/// rows are deleted in all; returns how many were.
///
/// Each statement is a transaction of its own: locks are held one short
/// statement at a time, never for the whole purge.
pub(crate) async fn purge<'c, DB, E, C>(
    executor: E,
    statements: &[&'static str],
    cutoff: C,
    limit: usize,
    action: &'static str,
) -> Result<usize, StoreError>
where
    DB: Database,
    DB::QueryResult: RowsAffected,
    E: sqlx::Executor<'c, Database = DB> + Copy,
    C: sqlx::Encode<'static, DB> + sqlx::Type<DB> + Copy + Send + 'static,
    i64: sqlx::Encode<'static, DB> + sqlx::Type<DB>,
    <DB as Database>::Arguments<'static>: sqlx::IntoArguments<'static, DB>,
{
    let mut deleted = 0;
    for statement in statements {
        let left = limit - deleted;
        if left == 0 {
            break;
        }
        let done = sqlx::query(statement)
            .bind(cutoff)
            .bind(i64::try_from(left).unwrap_or(i64::MAX))
            .execute(executor)
            .await
            .map_err(backend(action))?;
        deleted += usize::try_from(done.rows_affected())
            .unwrap_or(left)
            .min(left);
    }
    Ok(deleted)
}

/// What recording a submission does, named in its errors.
pub(crate) const RECORD: &str = "record events";

/// One `record` call waiting for the COMMIT of its group.
pub(crate) struct Job {
    /// What to record.
    pub(crate) submission: EventSubmission,
    /// Where the outcome goes, once committed.
    pub(crate) reply: oneshot::Sender<Result<RecordOutcome, StoreError>>,
}

/// The queue to a group-commit writer: a task that takes whatever `record`
/// calls have queued, stores them in one transaction and answers each after
/// the COMMIT, while the next group queues. Many writers then share one
/// disk flush instead of waiting for one each.
#[derive(Clone, Debug)]
pub(crate) struct GroupQueue(mpsc::Sender<Job>);

impl GroupQueue {
    /// A queue holding up to `capacity` waiting calls, and its receiving
    /// end for the writer task. The writer's receive ends when the last
    /// clone of the queue is dropped.
    pub(crate) fn new(capacity: usize) -> (Self, mpsc::Receiver<Job>) {
        let (sender, receiver) = mpsc::channel(capacity.max(1));
        (Self(sender), receiver)
    }

    /// Queues `submission` and waits for the writer's answer.
    pub(crate) async fn record(
        &self,
        submission: &EventSubmission,
    ) -> Result<RecordOutcome, StoreError> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            submission: submission.clone(),
            reply,
        };
        self.0
            .send(job)
            .await
            .map_err(|_| StoreError::backend(RECORD, GroupWriterGone))?;
        answer
            .await
            .map_err(|_| StoreError::backend(RECORD, GroupWriterGone))?
    }
}

/// Hands each job its outcome, emptying `jobs`.
pub(crate) fn answer(jobs: &mut Vec<Job>, outcomes: Vec<Result<RecordOutcome, StoreError>>) {
    for (job, outcome) in jobs.drain(..).zip(outcomes) {
        // A caller that gave up waiting has dropped its receiver; the
        // submission is recorded all the same, as it would be had the
        // caller been a moment slower to give up.
        let _ = job.reply.send(outcome);
    }
}

/// The group-commit writer task has stopped (its runtime shut down).
#[derive(Debug, thiserror::Error)]
#[error("the group-commit writer has stopped")]
struct GroupWriterGone;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_of_the_wrong_length_is_a_backend_error_not_a_panic() {
        let error = hash_from_column(vec![1; 31], "read a token", "hash").unwrap_err();
        assert!(matches!(error, StoreError::Backend { .. }));
        let source = std::error::Error::source(&error).expect("source");
        assert_eq!(source.to_string(), "the stored hash is malformed");
        assert_eq!(
            hash_from_column(vec![7; 32], "read a token", "hash").unwrap(),
            SecretHash::from_bytes([7; 32])
        );
    }

    #[test]
    fn channels_round_trip_through_json() {
        let channel = IntakeChannel::Bearer {
            client_id: crate::ClientId::new("cgid_x"),
        };
        let stored = channel_to_json(&channel).unwrap();
        assert_eq!(channel_from_json(stored, "read an event").unwrap(), channel);
        assert!(matches!(
            channel_from_json(
                serde_json::json!({"kind": "carrier_pigeon"}),
                "read an event"
            ),
            Err(StoreError::Backend { .. })
        ));
    }

    #[test]
    fn data_refusals_are_told_from_outages_by_their_codes() {
        // PostgreSQL: a U+0000 in text, in JSONB, a NOT NULL or CHECK.
        for code in ["22021", "22P05", "22001", "23502", "23514"] {
            assert!(is_data_error_code(code), "{code} refuses the data");
        }
        // PostgreSQL: uniqueness, a dropped connection, a serialisation
        // failure, a shutdown, a full disk.
        for code in ["23505", "08006", "40001", "57P01", "53100"] {
            assert!(!is_data_error_code(code), "{code} is not about the data");
        }
        // SQLite: TOOBIG, CONSTRAINT_CHECK (275), MISMATCH; against BUSY,
        // IOERR_FSYNC (1034), FULL.
        for code in ["18", "275", "20"] {
            assert!(is_data_error_code(code), "{code} refuses the data");
        }
        for code in ["5", "1034", "13"] {
            assert!(!is_data_error_code(code), "{code} is not about the data");
        }
    }

    #[test]
    fn failures_other_than_unique_violations_are_backend_errors() {
        let error = insert_failed("event", "record events")(sqlx::Error::PoolTimedOut);
        assert!(matches!(
            error,
            StoreError::Backend {
                action: "record events",
                ..
            }
        ));
    }
}
