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
//! to one thread with a connection of its own ([`event_writer`]), which
//! stores whatever has queued in one write transaction (a batch or a
//! submission with an idempotency key in a savepoint of its own, so one
//! failing submission does not fail its neighbours) and answers each after
//! the COMMIT. Many writers then share one disk flush instead of waiting
//! for one each. The webhook outbox's frequent writes and the OAuth flow's
//! writes (grants, codes, tokens) ride in the same groups ([`write_task`],
//! [`outbox_writes`], [`token_writes`]). That thread and the sqlx
//! connection that writes everything else take turns at SQLite's write
//! lock through a fair [`write_gate`].
//!
//! Layout: this file opens the database (options, pools, migrations);
//! [`columns`] says how values are stored in SQLite's few column types;
//! one file per group of traits implements them: [`tokens`]
//! ([`TokenStore`]: grants, codes, access and refresh tokens, their purge;
//! the tokens' writes on the writer's connection in [`token_writes`]),
//! [`clients_accounts_keys`] ([`ClientRegistry`], [`AccountStore`],
//! [`ApiKeyStore`]), [`webhooks`] ([`WebhookStore`]: webhooks, the outbox
//! of deliveries, their attempts; the outbox's SQL on the writer's
//! connection in [`outbox_writes`]) and [`events`] ([`EventSink`]), whose
//! writer is [`event_writer`], and whose write-ahead log is copied back
//! into the database file by the [`checkpointer`]'s thread; what a failed
//! statement on those threads' connections is, in [`statement_errors`].
//! What SQLite shares with
//! PostgreSQL (error mapping, records from rows, the group-commit queue,
//! the purge loop) is in [`crate::store::sql`].
//!
//! [`TokenStore`]: crate::TokenStore
//! [`ClientRegistry`]: crate::ClientRegistry
//! [`AccountStore`]: crate::AccountStore
//! [`ApiKeyStore`]: crate::ApiKeyStore
//! [`EventSink`]: crate::EventSink
//! [`WebhookStore`]: crate::WebhookStore

mod checkpointer;
mod clients_accounts_keys;
mod columns;
mod connection;
mod event_writer;
mod events;
mod outbox_writes;
mod statement_errors;
mod temporary;
mod token_writes;
mod tokens;
mod webhooks;
mod write_gate;
mod write_task;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Executor as _, Sqlite, Transaction};

use crate::store::error::StoreError;
use crate::store::sql::{Migration, backend};

use self::connection::Sync;
use self::event_writer::EventWriter;
use self::temporary::TemporaryFile;
use self::write_gate::{Turn, WriteGate};

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
    Migration {
        version: 5,
        sql: include_str!("../../../migrations/sqlite/0005_client_lifecycle.sql"),
    },
    Migration {
        version: 6,
        sql: include_str!("../../../migrations/sqlite/0006_event_feed.sql"),
    },
    Migration {
        version: 7,
        sql: include_str!("../../../migrations/sqlite/0007_drop_events_by_account.sql"),
    },
    Migration {
        version: 8,
        sql: include_str!("../../../migrations/sqlite/0008_webhooks.sql"),
    },
    Migration {
        version: 9,
        sql: include_str!("../../../migrations/sqlite/0009_webhook_queue_heads.sql"),
    },
];

/// How long a statement waits for another process's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a readiness check waits for the database.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a caller waits for a pooled connection before failing.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections for reads; in WAL mode they run beside the writer.
const READERS: u32 = 4;

/// Every storage trait on one SQLite database.
///
/// Cloning is cheap and shares the connections and the writer of events (a
/// thread of its own, ended when the last clone is dropped). Wrap it
/// in an `Arc` and hand it out as each of the `Arc<dyn Trait>`s the service
/// takes.
///
/// Instants are kept as microseconds since the Unix epoch: anything finer is
/// truncated.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    /// The one sqlx connection that writes (everything but events). Every
    /// use holds a turn at `gate` first ([`SqliteStore::write_turn`]).
    writer: SqlitePool,
    /// The connections that only read.
    reader: SqlitePool,
    /// Turns at SQLite's write lock for `writer` and the writer of events.
    gate: WriteGate,
    /// The writer of events.
    events: EventWriter,
    /// The database file.
    path: Arc<Path>,
    /// The database file of [`SqliteStore::open_temporary`], removed when
    /// the last clone is dropped.
    _temporary: Option<Arc<TemporaryFile>>,
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
        Self::open_file(path, Sync::Full, None).await
    }

    /// A fresh, private database that is gone when the store is dropped:
    /// for tests and for hosts that keep nothing across restarts.
    ///
    /// It is a file in the system's temporary directory (the writer of
    /// events needs a connection of its own to the same database, which an
    /// SQLite in-memory database does not allow), not synced to disk
    /// (`synchronous = OFF`: nothing in it outlives the process anyway),
    /// and removed with its write-ahead log when the last clone of the
    /// store is dropped.
    ///
    /// # Errors
    /// [`StoreError::Backend`] if the file cannot be created or SQLite
    /// cannot open it.
    pub async fn open_temporary() -> Result<Self, StoreError> {
        let file = TemporaryFile::create()
            .map_err(|error| StoreError::backend("create a temporary SQLite database", error))?;
        let path = file.path().to_path_buf();
        Self::open_file(&path, Sync::Off, Some(Arc::new(file))).await
    }

    /// A fresh database that is gone when the store is dropped; now
    /// [`SqliteStore::open_temporary`].
    ///
    /// # Errors
    /// As [`SqliteStore::open_temporary`].
    #[deprecated(
        since = "0.1.0",
        note = "a private temporary file now: use `SqliteStore::open_temporary`"
    )]
    pub async fn open_in_memory() -> Result<Self, StoreError> {
        Self::open_temporary().await
    }

    /// Opens the existing file at `path`, brings its schema up to date and
    /// starts the writer of events.
    async fn open_file(
        path: &Path,
        sync: Sync,
        temporary: Option<Arc<TemporaryFile>>,
    ) -> Result<Self, StoreError> {
        let synchronous = match sync {
            // FULL: a commit is on disk (the WAL is synced) before it is
            // acknowledged, so an acknowledged event survives a power cut,
            // not only a restart of the process.
            Sync::Full => SqliteSynchronous::Full,
            Sync::Off => SqliteSynchronous::Off,
        };
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(synchronous)
            // The log is checkpointed by a thread of its own
            // ([`checkpointer`]); these connections, like the writer of
            // events', checkpoint it only past the bound.
            .pragma(
                "wal_autocheckpoint",
                connection::WAL_PAGES_BOUND.to_string(),
            )
            .busy_timeout(BUSY_TIMEOUT);
        // No liveness ping before each use (sqlx's default): an SQLite
        // connection is a file in this process, not a socket that can die,
        // and the ping is one more trip to the database's thread per call.
        let writer = connect(1, &options).await?;
        migrate(&writer).await?;
        let reader = connect(READERS, &options).await?;
        let gate = WriteGate::default();
        let events = EventWriter::start(path, sync, BUSY_TIMEOUT, gate.clone())?;
        Ok(Self {
            path: Arc::from(path),
            writer,
            reader,
            gate,
            events,
            _temporary: temporary,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Closes every connection, waiting for the ones in use to come back.
    /// Calls made afterwards, through any clone, fail with
    /// [`StoreError::Backend`].
    pub async fn close(&self) {
        // With the turn, no group of events is being written: the writer
        // of events closes its connection before its next group.
        let turn = self.write_turn().await;
        self.events.close();
        drop(turn);
        self.writer.close().await;
        self.reader.close().await;
    }

    /// A round trip to the database (`SELECT 1` on a reading connection)
    /// within [`READY_TIMEOUT`], for [`crate::Gateway::readiness`].
    async fn ping(&self) -> Result<(), StoreError> {
        const ACTION: &str = "check that the SQLite database answers";
        let ping = sqlx::query("SELECT 1").execute(&self.reader);
        tokio::time::timeout(READY_TIMEOUT, ping)
            .await
            .map_err(|_| StoreError::backend(ACTION, crate::store::sql::TimedOut))?
            .map_err(backend(ACTION))?;
        Ok(())
    }

    /// Waits for this store's turn to write through `writer` (see
    /// [`write_gate`]).
    async fn write_turn(&self) -> Turn {
        self.gate.turn().await
    }

    /// A write transaction that holds SQLite's write lock from its first
    /// statement (`BEGIN IMMEDIATE`): what it reads cannot change before it
    /// writes, whichever connection or process tries.
    /// It comes with the turn at the gate it holds: keep both until the
    /// transaction ends.
    async fn write_transaction(
        &self,
        action: &'static str,
    ) -> Result<(Turn, Transaction<'static, Sqlite>), StoreError> {
        let turn = self.write_turn().await;
        let tx = self
            .writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(backend(action))?;
        Ok((turn, tx))
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

/// Opens a pool of `connections` connections on `options`. Two stores opening a new file at once can
/// both hold a read lock and both want the write lock (to write the header
/// and switch to WAL): SQLite then answers one of them "database is locked"
/// at once, without waiting in the busy handler, since waiting could never
/// end (the documentation of `sqlite3_busy_handler`). That one tries again
/// after a pause; no new attempt starts once [`BUSY_TIMEOUT`] has passed
/// since the first (an attempt may itself wait up to that long in the busy
/// handler).
async fn connect(
    connections: u32,
    options: &SqliteConnectOptions,
) -> Result<SqlitePool, StoreError> {
    let pool = SqlitePoolOptions::new()
        .max_connections(connections)
        .test_before_acquire(false)
        .acquire_timeout(ACQUIRE_TIMEOUT);
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        match pool.clone().connect_with(options.clone()).await {
            Err(error) if is_busy(&error) && std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            result => return result.map_err(backend("open the SQLite database")),
        }
    }
}

/// Whether SQLite refused for a lock another connection holds: the primary
/// code (the low byte of the extended one) is `SQLITE_BUSY` (5) or
/// `SQLITE_LOCKED` (6).
fn is_busy(error: &sqlx::Error) -> bool {
    matches!(
        error,
        sqlx::Error::Database(db)
            if db.code().and_then(|code| code.parse::<i32>().ok())
                .is_some_and(|code| matches!(code & 0xff, 5 | 6))
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `PRAGMA synchronous` of the connection `pool` hands out: 0 OFF,
    /// 1 NORMAL, 2 FULL.
    async fn synchronous(pool: &SqlitePool) -> i64 {
        sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(pool)
            .await
            .expect("the connection's setting")
    }

    /// A file store syncs every commit it acknowledges (a power cut
    /// keeps it); a temporary one, which nothing outlives, syncs none.
    #[tokio::test]
    async fn a_file_store_syncs_its_commits_and_a_temporary_one_does_not() {
        let dir = conversion_gateway_testkit::TempDir::new("synchronous");
        let store = SqliteStore::open(dir.path("gateway.db")).await.unwrap();
        assert_eq!(synchronous(&store.writer).await, 2, "FULL");
        store.close().await;

        let temporary = SqliteStore::open_temporary().await.unwrap();
        assert_eq!(synchronous(&temporary.writer).await, 0, "OFF");
    }
}
