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
//! to one task that stores whatever has queued in one write transaction
//! (the plain submissions' events in one multi-row `INSERT`, those with an
//! idempotency key each in a savepoint of its own, so one failing
//! submission does not fail its neighbours), and answers each after the
//! COMMIT. Many writers then share one disk flush and a few statements
//! instead of waiting for a flush and running statements each.
//!
//! Layout: this file opens the database (options, pools, migrations);
//! [`columns`] says how values are stored in SQLite's few column types;
//! one file per group of traits implements them: [`tokens`]
//! ([`TokenStore`]: grants, codes, access and refresh tokens, their purge),
//! [`clients_accounts_keys`] ([`ClientRegistry`], [`AccountStore`],
//! [`ApiKeyStore`]) and [`events`] ([`EventSink`], with the group-commit
//! writer). What SQLite shares with PostgreSQL (error mapping, records from
//! rows, the group-commit queue, the purge loop) is in [`crate::store::sql`].
//!
//! [`TokenStore`]: crate::TokenStore
//! [`ClientRegistry`]: crate::ClientRegistry
//! [`AccountStore`]: crate::AccountStore
//! [`ApiKeyStore`]: crate::ApiKeyStore
//! [`EventSink`]: crate::EventSink

mod clients_accounts_keys;
mod columns;
mod events;
mod tokens;

use std::path::Path;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Executor as _, Sqlite, Transaction};

use crate::StoreError;
use crate::store::sql::group_commit::GroupQueue;
use crate::store::sql::{Migration, backend};

use self::events::group_writer;

/// The schema, in order. Never edit a shipped migration: add the next one.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        sql: include_str!("../../../migrations/sqlite/0001_initial.sql"),
    },
    Migration {
        version: 2,
        sql: include_str!("../../../migrations/sqlite/0002_idempotency_scope.sql"),
    },
    Migration {
        version: 3,
        sql: include_str!("../../../migrations/sqlite/0003_purge_indexes.sql"),
    },
    Migration {
        version: 4,
        sql: include_str!("../../../migrations/sqlite/0004_adaptive_refresh.sql"),
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
        // No liveness ping before each use (sqlx's default): an SQLite
        // connection is a file in this process, not a socket that can die,
        // and the ping is one more trip to the database's thread per call.
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options.clone())
            .await
            .map_err(backend("open the SQLite database"))?;
        migrate(&writer).await?;
        let reader = SqlitePoolOptions::new()
            .max_connections(READERS)
            .test_before_acquire(false)
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
