//! Every storage trait on SQLite: one embedded file, no server (feature
//! `sqlite`).
//!
//! The file is opened in WAL mode with `synchronous = FULL`, so that what a
//! method acknowledges has reached the disk, and with a busy timeout, so
//! that another process holding the write lock makes callers wait instead of
//! fail. Schema migrations ship with the crate and run on open.
//!
//! Atomicity: SQLite admits one writer at a time. Single-step operations are
//! one conditional statement (`UPDATE ... WHERE taken = 0 RETURNING ...`);
//! read-then-write operations run in `BEGIN IMMEDIATE` transactions, which
//! take the write lock before the first read, so no other connection or
//! process can write between the read and the write.
//!
//! Events are recorded with group commit: concurrent `record` calls queue
//! to one task that stores whatever has queued in one write transaction,
//! each submission in a savepoint of its own (so one failing submission
//! does not fail its neighbours), and answers each after the COMMIT. Many
//! writers then share one disk flush instead of waiting for one each.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{Connection as _, Executor as _, Sqlite, Transaction};
use time::OffsetDateTime;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::store::sql::{
    self, GroupQueue, Job, Migration, RECORD, RecordColumns, access_from, account_from, answer,
    api_key_from, backend, channel_to_json, client_from, code_from, code_lookup, code_tombstone,
    event_from, find_row, grant_from, insert_failed, insert_row, malformed, refresh_from,
    replay_or_reuse, rotation_refused,
};
use crate::{
    AccessTokenRecord, Account, AccountId, AccountStore, ApiKeyId, ApiKeyRecord, ApiKeyStore,
    Client, ClientId, ClientRegistry, CodeLookup, CodeRecord, CodeTake, EventSink, EventSubmission,
    Grant, GrantId, RecordOutcome, RecordedEvent, RefreshTokenRecord, Rotation, SecretHash,
    StoreError, TokenStore,
};

/// The schema, in order. Never edit a shipped migration: add the next one.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        sql: include_str!("../../migrations/sqlite/0001_initial.sql"),
    },
    Migration {
        version: 2,
        sql: include_str!("../../migrations/sqlite/0002_idempotency_scope.sql"),
    },
    Migration {
        version: 3,
        sql: include_str!("../../migrations/sqlite/0003_purge_indexes.sql"),
    },
    Migration {
        version: 4,
        sql: include_str!("../../migrations/sqlite/0004_adaptive_refresh.sql"),
    },
];

/// How long a statement waits for another process's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a caller waits for a pooled connection before failing.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections for reads; in WAL mode they run beside the writer.
const READERS: u32 = 4;

/// The most event submissions one group transaction takes.
const MAX_GROUP: usize = 256;

/// Every storage trait on one SQLite database.
///
/// Cloning is cheap and shares the connections and the group-commit writer
/// of events (a task on the tokio runtime the store was opened in). Wrap it
/// in an `Arc` and hand it out as each of the `Arc<dyn Trait>`s the service
/// takes.
///
/// Instants are kept as microseconds since the Unix epoch: anything finer is
/// truncated.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    /// The one connection that writes. SQLite admits a single writer at a
    /// time anyway; queueing writers on this pool is fairer and faster than
    /// letting them poll in SQLite's sleeping busy handler.
    writer: SqlitePool,
    /// The connections that only read.
    reader: SqlitePool,
    /// The queue to the group-commit writer of events.
    events: GroupQueue,
}

impl SqliteStore {
    /// Opens (creating it if missing) the database file at `path` and brings
    /// its schema up to date.
    ///
    /// A new file is created readable and writable by its owner only (mode
    /// `0600` on Unix, whatever the umask): it holds contacts' personal data
    /// and the hashes of every credential. SQLite gives its write-ahead log
    /// and shared-memory files the database file's mode. An existing file's
    /// mode is left as it is; checking it is the host's call.
    ///
    /// # Errors
    /// [`StoreError::Backend`] if the file cannot be opened or created, is
    /// not an SQLite database, or the migrations fail.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref();
        create_private(path)
            .map_err(|error| StoreError::backend("create the SQLite database file", error))?;
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: a commit is on disk (the WAL is synced) before it is
            // acknowledged, so an acknowledged event survives a power cut,
            // not only a restart of the process.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT);
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options.clone())
            .await
            .map_err(backend("open the SQLite database"))?;
        migrate(&writer).await?;
        let reader = SqlitePoolOptions::new()
            .max_connections(READERS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await
            .map_err(backend("open the SQLite database"))?;
        Ok(Self::new(writer, reader))
    }

    /// A fresh database in memory, gone when the store is dropped: for tests
    /// and for hosts that keep nothing across restarts.
    ///
    /// # Errors
    /// [`StoreError::Backend`] if SQLite cannot start or the migrations fail.
    pub async fn open_in_memory() -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::new().in_memory(true);
        // One connection that never closes: an in-memory database lives
        // exactly as long as its connection.
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await
            .map_err(backend("open an in-memory SQLite database"))?;
        migrate(&pool).await?;
        Ok(Self::new(pool.clone(), pool))
    }

    /// A store on migrated pools, with its group-commit writer started.
    fn new(writer: SqlitePool, reader: SqlitePool) -> Self {
        let (events, jobs) = GroupQueue::new(MAX_GROUP * 4);
        // The writer task ends when the last clone of the store (the last
        // sender) is dropped, after answering what was queued.
        tokio::spawn(group_writer(writer.clone(), jobs, MAX_GROUP));
        Self {
            writer,
            reader,
            events,
        }
    }

    /// Closes every connection, waiting for the ones in use to come back.
    /// Calls made afterwards, through any clone, fail with
    /// [`StoreError::Backend`].
    pub async fn close(&self) {
        self.writer.close().await;
        self.reader.close().await;
    }

    /// A write transaction that holds SQLite's write lock from its first
    /// statement (`BEGIN IMMEDIATE`): what it reads cannot change before it
    /// writes, whichever connection or process tries.
    async fn write_transaction(
        &self,
        action: &'static str,
    ) -> Result<Transaction<'static, Sqlite>, StoreError> {
        self.writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(backend(action))
    }
}

/// Creates the database file, empty and private to its owner, if it does
/// not exist; SQLite then opens it as a new database. An existing file is
/// left alone.
fn create_private(path: &Path) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(_) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(error),
    }
}

/// Applies the migrations this database has not seen, in one transaction.
async fn migrate(pool: &SqlitePool) -> Result<(), StoreError> {
    const ACTION: &str = "migrate the SQLite schema";
    // BEGIN IMMEDIATE: two processes opening a new file at once must not
    // both apply the first migration.
    let mut tx = pool
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(backend(ACTION))?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS schema_version (
             version     INTEGER PRIMARY KEY NOT NULL,
             applied_at  TEXT    NOT NULL DEFAULT CURRENT_TIMESTAMP
         )",
    )
    .execute(&mut *tx)
    .await
    .map_err(backend(ACTION))?;
    let current: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM schema_version")
        .fetch_one(&mut *tx)
        .await
        .map_err(backend(ACTION))?;
    for migration in MIGRATIONS.iter().filter(|m| m.version > current) {
        // A plain string runs as a simple query, which may hold several
        // statements. (`sqlx::raw_sql` would too, but its future defeats
        // rustc's `Send` inference at a caller's `tokio::spawn`.)
        (&mut *tx)
            .execute(migration.sql)
            .await
            .map_err(backend(ACTION))?;
        sqlx::query("INSERT INTO schema_version (version) VALUES (?)")
            .bind(migration.version)
            .execute(&mut *tx)
            .await
            .map_err(backend(ACTION))?;
    }
    tx.commit().await.map_err(backend(ACTION))
}

/// An instant as stored: microseconds since the Unix epoch.
fn micros(at: OffsetDateTime) -> Result<i64, StoreError> {
    i64::try_from((at - OffsetDateTime::UNIX_EPOCH).whole_microseconds())
        .map_err(|error| StoreError::backend("encode an instant", error))
}

/// An optional instant as stored.
fn opt_micros(at: Option<OffsetDateTime>) -> Result<Option<i64>, StoreError> {
    at.map(micros).transpose()
}

/// A uuid as stored: hyphenated text.
fn uuid_text(id: Uuid) -> String {
    id.hyphenated().to_string()
}

/// A list of strings as stored: a JSON array in a TEXT column.
fn json_text<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|error| StoreError::backend("encode a list", error))
}

/// An instant read back from microseconds since the Unix epoch, if
/// `OffsetDateTime` can hold it.
fn from_micros(micros: i64) -> Option<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(micros) * 1000).ok()
}

/// A row of SQLite, whose columns hold uuids as hyphenated text, instants
/// as integer microseconds, hashes as BLOBs, and lists and JSON values as
/// JSON text.
type Columns = sql::Columns<SqliteRow>;

impl Columns {
    /// A uuid from the hyphenated text stored in `column`.
    fn parse_uuid(&self, column: &'static str, text: &str) -> Result<Uuid, StoreError> {
        Uuid::parse_str(text).map_err(|_| malformed(self.action, column))
    }

    /// An instant from the microseconds stored in `column`.
    fn instant(&self, column: &'static str, micros: i64) -> Result<OffsetDateTime, StoreError> {
        from_micros(micros).ok_or_else(|| malformed(self.action, column))
    }

    /// A value from the JSON text stored in `column`.
    fn parse_json<T: serde::de::DeserializeOwned>(
        &self,
        column: &'static str,
    ) -> Result<T, StoreError> {
        let text: String = self.get(column)?;
        serde_json::from_str(&text).map_err(|_| malformed(self.action, column))
    }
}

impl RecordColumns for Columns {
    fn action(&self) -> &'static str {
        self.action
    }

    fn uuid(&self, column: &'static str) -> Result<Uuid, StoreError> {
        self.parse_uuid(column, &self.get::<String>(column)?)
    }

    fn optional_uuid(&self, column: &'static str) -> Result<Option<Uuid>, StoreError> {
        self.get::<Option<String>>(column)?
            .map(|text| self.parse_uuid(column, &text))
            .transpose()
    }

    fn uuids(&self, column: &'static str) -> Result<Vec<Uuid>, StoreError> {
        self.parse_json(column)
    }

    fn time(&self, column: &'static str) -> Result<OffsetDateTime, StoreError> {
        self.instant(column, self.get(column)?)
    }

    fn optional_time(&self, column: &'static str) -> Result<Option<OffsetDateTime>, StoreError> {
        self.get::<Option<i64>>(column)?
            .map(|micros| self.instant(column, micros))
            .transpose()
    }

    fn text(&self, column: &'static str) -> Result<String, StoreError> {
        self.get(column)
    }

    fn optional_text(&self, column: &'static str) -> Result<Option<String>, StoreError> {
        self.get(column)
    }

    fn flag(&self, column: &'static str) -> Result<bool, StoreError> {
        self.get(column)
    }

    fn bytes(&self, column: &'static str) -> Result<Vec<u8>, StoreError> {
        self.get(column)
    }

    fn optional_bytes(&self, column: &'static str) -> Result<Option<Vec<u8>>, StoreError> {
        self.get(column)
    }

    fn strings(&self, column: &'static str) -> Result<Vec<String>, StoreError> {
        self.parse_json(column)
    }

    fn json(&self, column: &'static str) -> Result<serde_json::Value, StoreError> {
        self.parse_json(column)
    }
}

#[async_trait]
impl TokenStore for SqliteStore {
    async fn insert_grant(&self, grant: &Grant) -> Result<(), StoreError> {
        let statement = sqlx::query(
            "INSERT INTO grants (id, client_id, account_id, created_at, revoked_at)
             VALUES (?, ?, ?, ?, ?)",
        )
        .bind(uuid_text(grant.id.0))
        .bind(grant.client_id.as_str())
        .bind(uuid_text(grant.account_id.0))
        .bind(micros(grant.created_at)?)
        .bind(opt_micros(grant.revoked_at)?);
        insert_row(&self.writer, statement, "grant", "insert a grant").await
    }

    async fn find_grant(&self, id: GrantId) -> Result<Option<Grant>, StoreError> {
        let statement = sqlx::query(
            "SELECT id, client_id, account_id, created_at, revoked_at FROM grants WHERE id = ?",
        )
        .bind(uuid_text(id.0));
        find_row(&self.reader, statement, "read a grant", grant_from).await
    }

    async fn revoke_grant(&self, id: GrantId, at: OffsetDateTime) -> Result<bool, StoreError> {
        // One statement; COALESCE keeps the first revocation time.
        let done =
            sqlx::query("UPDATE grants SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?")
                .bind(micros(at)?)
                .bind(uuid_text(id.0))
                .execute(&self.writer)
                .await
                .map_err(backend("revoke a grant"))?;
        Ok(done.rows_affected() > 0)
    }

    async fn insert_code(&self, code: &CodeRecord) -> Result<(), StoreError> {
        let statement = sqlx::query(
            "INSERT INTO authorization_codes
                 (hash, grant_id, client_id, account_id, redirect_uri, pkce_challenge,
                  issued_at, expires_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(code.hash.as_bytes().as_slice())
        .bind(uuid_text(code.grant_id.0))
        .bind(code.client_id.as_str())
        .bind(uuid_text(code.account_id.0))
        .bind(&code.redirect_uri)
        .bind(code.pkce.as_ref().map(|pkce| pkce.challenge.as_str()))
        .bind(micros(code.issued_at)?)
        .bind(micros(code.expires_at)?);
        let action = "insert an authorization code";
        insert_row(&self.writer, statement, "authorization code", action).await
    }

    async fn take_code(&self, hash: &SecretHash) -> Result<CodeTake, StoreError> {
        const ACTION: &str = "take an authorization code";
        // One conditional statement: of any number of callers, only the one
        // whose UPDATE finds `taken = 0` gets the row back.
        let take = sqlx::query(
            "UPDATE authorization_codes SET taken = 1
             WHERE hash = ? AND taken = 0
             RETURNING grant_id, client_id, account_id, redirect_uri, pkce_challenge,
                       issued_at, expires_at",
        )
        .bind(hash.as_bytes().as_slice());
        if let Some(code) = find_row(&self.writer, take, ACTION, |c| code_from(c, *hash)).await? {
            return Ok(CodeTake::Taken(code));
        }
        // Codes are never untaken, so a row found now is a tombstone (or,
        // if the purge deleted it meanwhile, none is found).
        let tombstone =
            sqlx::query("SELECT grant_id, client_id FROM authorization_codes WHERE hash = ?")
                .bind(hash.as_bytes().as_slice());
        Ok(find_row(&self.writer, tombstone, ACTION, code_tombstone)
            .await?
            .unwrap_or(CodeTake::NotFound))
    }

    async fn find_code(&self, hash: &SecretHash) -> Result<CodeLookup, StoreError> {
        let statement = sqlx::query(
            "SELECT grant_id, client_id, account_id, redirect_uri, pkce_challenge,
                    issued_at, expires_at, taken
             FROM authorization_codes WHERE hash = ?",
        )
        .bind(hash.as_bytes().as_slice());
        let action = "read an authorization code";
        Ok(
            find_row(&self.reader, statement, action, |c| code_lookup(c, *hash))
                .await?
                .unwrap_or(CodeLookup::NotFound),
        )
    }

    async fn redeem_code(
        &self,
        hash: &SecretHash,
        refresh: &RefreshTokenRecord,
        access: &AccessTokenRecord,
    ) -> Result<CodeTake, StoreError> {
        const ACTION: &str = "redeem an authorization code";
        // One write transaction: the code is marked and both tokens stored,
        // or (on any error, when `tx` is dropped unfinished) rolled back.
        let mut tx = self.write_transaction(ACTION).await?;
        let take = sqlx::query(
            "UPDATE authorization_codes SET taken = 1
             WHERE hash = ? AND taken = 0
             RETURNING grant_id, client_id, account_id, redirect_uri, pkce_challenge,
                       issued_at, expires_at",
        )
        .bind(hash.as_bytes().as_slice());
        let Some(code) = find_row(&mut *tx, take, ACTION, |c| code_from(c, *hash)).await? else {
            let tombstone =
                sqlx::query("SELECT grant_id, client_id FROM authorization_codes WHERE hash = ?")
                    .bind(hash.as_bytes().as_slice());
            return Ok(find_row(&mut *tx, tombstone, ACTION, code_tombstone)
                .await?
                .unwrap_or(CodeTake::NotFound));
        };
        insert_refresh(&mut *tx, refresh, ACTION).await?;
        insert_access(&mut *tx, access, ACTION).await?;
        tx.commit().await.map_err(backend(ACTION))?;
        Ok(CodeTake::Taken(code))
    }

    async fn insert_access_token(&self, token: &AccessTokenRecord) -> Result<(), StoreError> {
        insert_access(&self.writer, token, "insert an access token").await
    }

    async fn find_access_token(
        &self,
        hash: &SecretHash,
    ) -> Result<Option<AccessTokenRecord>, StoreError> {
        // `revoked` comes from the grant, so revoking the grant revokes every
        // token at once, those inserted later included. A token whose grant
        // is unknown cannot be traced to a live authorization: revoked.
        let statement = sqlx::query(
            "SELECT a.grant_id, a.client_id, a.account_id, a.issued_at, a.expires_at,
                    (g.id IS NULL OR g.revoked_at IS NOT NULL) AS revoked
             FROM access_tokens a LEFT JOIN grants g ON g.id = a.grant_id
             WHERE a.hash = ?",
        )
        .bind(hash.as_bytes().as_slice());
        let action = "read an access token";
        find_row(&self.reader, statement, action, |c| access_from(c, *hash)).await
    }

    async fn insert_refresh_token(&self, token: &RefreshTokenRecord) -> Result<(), StoreError> {
        insert_refresh(&self.writer, token, "insert a refresh token").await
    }

    async fn find_refresh_token(
        &self,
        hash: &SecretHash,
    ) -> Result<Option<RefreshTokenRecord>, StoreError> {
        let statement = sqlx::query(
            "SELECT r.grant_id, r.client_id, r.account_id, r.issued_at, r.expires_at,
                    r.predecessor, r.rotated_at, r.successor,
                    s.rotated_at AS successor_used_at,
                    (g.id IS NULL OR g.revoked_at IS NOT NULL) AS revoked
             FROM refresh_tokens r
             LEFT JOIN grants g ON g.id = r.grant_id
             LEFT JOIN refresh_tokens s ON s.hash = r.successor
             WHERE r.hash = ?",
        )
        .bind(hash.as_bytes().as_slice());
        let action = "read a refresh token";
        find_row(&self.reader, statement, action, |c| refresh_from(c, *hash)).await
    }

    async fn rotate_refresh_token(
        &self,
        old: &SecretHash,
        successor: &RefreshTokenRecord,
        access: &AccessTokenRecord,
        at: OffsetDateTime,
    ) -> Result<Rotation, StoreError> {
        const ACTION: &str = "rotate a refresh token";
        // The write lock is held from the read below to the commit, so of
        // any number of callers only one can see the token active.
        let mut tx = self.write_transaction(ACTION).await?;
        let current = sqlx::query(
            "SELECT r.rotated_at, r.successor,
                    (g.id IS NULL OR g.revoked_at IS NOT NULL) AS revoked
             FROM refresh_tokens r LEFT JOIN grants g ON g.id = r.grant_id
             WHERE r.hash = ?",
        )
        .bind(old.as_bytes().as_slice())
        .fetch_optional(&mut *tx)
        .await
        .map_err(backend(ACTION))?;
        let Some(row) = current else {
            return Ok(Rotation::NotFound);
        };
        if let Some(refused) = rotation_refused(&Columns::new(row, ACTION))? {
            return Ok(refused);
        }
        sqlx::query("UPDATE refresh_tokens SET rotated_at = ?, successor = ? WHERE hash = ?")
            .bind(micros(at)?)
            .bind(successor.hash.as_bytes().as_slice())
            .bind(old.as_bytes().as_slice())
            .execute(&mut *tx)
            .await
            .map_err(backend(ACTION))?;
        // On failure the transaction is dropped and rolled back: the old
        // token stays active and neither new token is stored.
        insert_refresh(&mut *tx, successor, ACTION).await?;
        insert_access(&mut *tx, access, ACTION).await?;
        tx.commit().await.map_err(backend(ACTION))?;
        Ok(Rotation::Rotated)
    }

    async fn purge_expired(
        &self,
        cutoff: OffsetDateTime,
        limit: usize,
    ) -> Result<usize, StoreError> {
        // Each DELETE is a transaction of its own, of at most `limit` rows:
        // the write lock is held for one short statement at a time.
        const PURGES: [&str; 5] = [
            "DELETE FROM authorization_codes WHERE rowid IN
                 (SELECT rowid FROM authorization_codes WHERE expires_at < ?1 LIMIT ?2)",
            "DELETE FROM access_tokens WHERE rowid IN
                 (SELECT rowid FROM access_tokens WHERE expires_at < ?1 LIMIT ?2)",
            "DELETE FROM refresh_tokens WHERE rowid IN
                 (SELECT rowid FROM refresh_tokens WHERE rotated_at < ?1 LIMIT ?2)",
            "DELETE FROM refresh_tokens WHERE rowid IN
                 (SELECT rowid FROM refresh_tokens WHERE expires_at < ?1 LIMIT ?2)",
            "DELETE FROM refresh_tokens WHERE rowid IN
                 (SELECT r.rowid FROM grants g JOIN refresh_tokens r ON r.grant_id = g.id
                  WHERE g.revoked_at < ?1 LIMIT ?2)",
        ];
        sql::purge(
            &self.writer,
            &PURGES,
            micros(cutoff)?,
            limit,
            "purge expired tokens",
        )
        .await
    }
}

/// Inserts an access token.
async fn insert_access<'e, E>(
    executor: E,
    token: &AccessTokenRecord,
    action: &'static str,
) -> Result<(), StoreError>
where
    E: sqlx::Executor<'e, Database = Sqlite>,
{
    let statement = sqlx::query(
        "INSERT INTO access_tokens (hash, grant_id, client_id, account_id, issued_at, expires_at)
         VALUES (?, ?, ?, ?, ?, ?)",
    )
    .bind(token.hash.as_bytes().as_slice())
    .bind(uuid_text(token.grant_id.0))
    .bind(token.client_id.as_str())
    .bind(uuid_text(token.account_id.0))
    .bind(micros(token.issued_at)?)
    .bind(micros(token.expires_at)?);
    insert_row(executor, statement, "access token", action).await
}

/// Inserts a refresh token as active, whatever its `state` says.
async fn insert_refresh<'e, E>(
    executor: E,
    token: &RefreshTokenRecord,
    action: &'static str,
) -> Result<(), StoreError>
where
    E: sqlx::Executor<'e, Database = Sqlite>,
{
    let statement = sqlx::query(
        "INSERT INTO refresh_tokens
             (hash, grant_id, client_id, account_id, issued_at, expires_at, predecessor)
         VALUES (?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(token.hash.as_bytes().as_slice())
    .bind(uuid_text(token.grant_id.0))
    .bind(token.client_id.as_str())
    .bind(uuid_text(token.account_id.0))
    .bind(micros(token.issued_at)?)
    .bind(opt_micros(token.expires_at)?)
    .bind(
        token
            .predecessor
            .as_ref()
            .map(|hash| hash.as_bytes().as_slice()),
    );
    insert_row(executor, statement, "refresh token", action).await
}

#[async_trait]
impl ClientRegistry for SqliteStore {
    async fn register_client(&self, client: &Client) -> Result<(), StoreError> {
        let statement = sqlx::query(
            "INSERT INTO clients
                 (id, name, secret_hash, redirect_uris, require_pkce, refresh_policy)
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(client.id.as_str())
        .bind(&client.name)
        .bind(client.secret_hash.as_bytes().as_slice())
        .bind(json_text(&client.redirect_uris)?)
        .bind(client.require_pkce)
        .bind(client.refresh_policy.map(|policy| policy.to_stored()));
        insert_row(&self.writer, statement, "client", "register a client").await
    }

    async fn find_client(&self, id: &ClientId) -> Result<Option<Client>, StoreError> {
        let statement = sqlx::query(
            "SELECT id, name, secret_hash, redirect_uris, require_pkce, refresh_policy
             FROM clients WHERE id = ?",
        )
        .bind(id.as_str());
        find_row(&self.reader, statement, "read a client", client_from).await
    }
}

#[async_trait]
impl AccountStore for SqliteStore {
    async fn insert_account(&self, account: &Account) -> Result<(), StoreError> {
        // The primary key and the UNIQUE e-mail both answer `Duplicate`.
        let statement = sqlx::query(
            "INSERT INTO accounts (id, name, email, password_hash, custom_fields)
             VALUES (?, ?, ?, ?, ?)",
        )
        .bind(uuid_text(account.id.0))
        .bind(&account.name)
        .bind(&account.email)
        .bind(account.password_hash.as_deref())
        .bind(json_text(&account.custom_fields)?);
        insert_row(&self.writer, statement, "account", "insert an account").await
    }

    async fn find_account(&self, id: AccountId) -> Result<Option<Account>, StoreError> {
        let statement = sqlx::query(
            "SELECT id, name, email, password_hash, custom_fields FROM accounts WHERE id = ?",
        )
        .bind(uuid_text(id.0));
        find_row(&self.reader, statement, "read an account", |c| {
            account_from(c)
        })
        .await
    }

    async fn find_account_by_email(&self, email: &str) -> Result<Option<Account>, StoreError> {
        let statement = sqlx::query(
            "SELECT id, name, email, password_hash, custom_fields FROM accounts WHERE email = ?",
        )
        .bind(email);
        find_row(&self.reader, statement, "read an account", |c| {
            account_from(c)
        })
        .await
    }
}

#[async_trait]
impl ApiKeyStore for SqliteStore {
    async fn insert_api_key(
        &self,
        key: &ApiKeyRecord,
        max_per_account: usize,
    ) -> Result<bool, StoreError> {
        const ACTION: &str = "insert an api key";
        // Count and insert under the write lock: two callers cannot both see
        // room for the last key.
        let mut tx = self.write_transaction(ACTION).await?;
        let exists: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM api_keys WHERE id = ? OR hash = ?)")
                .bind(uuid_text(key.id.0))
                .bind(key.hash.as_bytes().as_slice())
                .fetch_one(&mut *tx)
                .await
                .map_err(backend(ACTION))?;
        if exists {
            return Err(StoreError::Duplicate { what: "api key" });
        }
        let held: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM api_keys WHERE account_id = ?")
            .bind(uuid_text(key.account_id.0))
            .fetch_one(&mut *tx)
            .await
            .map_err(backend(ACTION))?;
        if usize::try_from(held).unwrap_or(usize::MAX) >= max_per_account {
            return Ok(false);
        }
        let statement = sqlx::query(
            "INSERT INTO api_keys (id, account_id, hash, label, active, created_at)
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(uuid_text(key.id.0))
        .bind(uuid_text(key.account_id.0))
        .bind(key.hash.as_bytes().as_slice())
        .bind(&key.label)
        .bind(key.active)
        .bind(micros(key.created_at)?);
        insert_row(&mut *tx, statement, "api key", ACTION).await?;
        tx.commit().await.map_err(backend(ACTION))?;
        Ok(true)
    }

    async fn find_api_key(&self, hash: &SecretHash) -> Result<Option<ApiKeyRecord>, StoreError> {
        let statement = sqlx::query(
            "SELECT id, account_id, hash, label, active, created_at FROM api_keys WHERE hash = ?",
        )
        .bind(hash.as_bytes().as_slice());
        find_row(&self.reader, statement, "read an api key", |c| {
            api_key_from(c)
        })
        .await
    }

    async fn set_api_key_active(&self, id: ApiKeyId, active: bool) -> Result<bool, StoreError> {
        let done = sqlx::query("UPDATE api_keys SET active = ? WHERE id = ?")
            .bind(active)
            .bind(uuid_text(id.0))
            .execute(&self.writer)
            .await
            .map_err(backend("switch an api key"))?;
        Ok(done.rows_affected() > 0)
    }

    async fn list_api_keys(&self, account: AccountId) -> Result<Vec<ApiKeyRecord>, StoreError> {
        // rowid breaks ties between keys created in the same microsecond:
        // insertion order.
        sqlx::query(
            "SELECT id, account_id, hash, label, active, created_at FROM api_keys
             WHERE account_id = ? ORDER BY created_at, rowid",
        )
        .bind(uuid_text(account.0))
        .fetch_all(&self.reader)
        .await
        .map_err(backend("list api keys"))?
        .into_iter()
        .map(|row| api_key_from(&Columns::new(row, "read an api key")))
        .collect()
    }
}

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
    let batch_uuid = submission.batch_uuid.map(uuid_text);
    for event in &submission.events {
        sqlx::query(
            "INSERT INTO events
                 (event_uuid, account_id, received_at, event_type, event_family,
                  conversion_identifier, email, payload, channel, batch_uuid)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(uuid_text(event.event_uuid))
        .bind(uuid_text(event.account_id.0))
        .bind(micros(event.received_at)?)
        .bind(&event.event_type)
        .bind(&event.event_family)
        .bind(&event.conversion_identifier)
        .bind(&event.email)
        .bind(json_text(&event.payload)?)
        .bind(json_text(&channel_to_json(&event.channel)?)?)
        .bind(batch_uuid.as_deref())
        .execute(&mut *conn)
        .await
        // The caller rolls back the events before it: all or nothing.
        .map_err(insert_failed("event", RECORD))?;
    }
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
        .bind(batch_uuid.as_deref())
        .execute(&mut *conn)
        .await
        .map_err(backend(RECORD))?;
    }
    Ok(RecordOutcome::Recorded)
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
async fn group_writer(pool: SqlitePool, mut queue: mpsc::Receiver<Job>, max: usize) {
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

/// Records each job in a savepoint of one write transaction. `Ok` holds
/// each job's own outcome, all committed; `Err` means the transaction
/// failed and nothing was recorded.
async fn record_group(
    pool: &SqlitePool,
    jobs: &[Job],
) -> Result<Vec<Result<RecordOutcome, StoreError>>, StoreError> {
    let mut tx = pool
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(backend(RECORD))?;
    let mut outcomes = Vec::with_capacity(jobs.len());
    for job in jobs {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_round_trip_through_microseconds() {
        let at = time::macros::datetime!(2026-03-01 12:00:00.123456 UTC);
        let stored = micros(at).unwrap();
        assert_eq!(stored, 1_772_366_400_123_456);
        assert_eq!(from_micros(stored), Some(at));
    }
}
