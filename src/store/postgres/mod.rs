//! Every storage trait on PostgreSQL, for hosts that run many stateless
//! server instances against one database (feature `postgres`).
//!
//! Atomicity holds in the database, not in the process, so it holds across
//! connections, pools and server instances:
//!
//! - taking a code is one conditional `UPDATE ... WHERE NOT taken
//!   RETURNING ...`: concurrent updaters queue on the row lock and re-check
//!   the condition, so one wins;
//! - rotating a refresh token is one statement whose `UPDATE ... WHERE
//!   rotated_at IS NULL` feeds the `INSERT` of the successor;
//! - revoking a grant is one `UPDATE` (tokens read `revoked` from their
//!   grant);
//! - the per-account API-key limit is counted and enforced in a transaction
//!   holding an advisory lock on the account;
//! - an idempotency key is claimed, per account and credential, with
//!   `INSERT ... ON CONFLICT DO UPDATE ... WHERE expired`, in the same
//!   transaction as the events.
//! - a webhook delivery is leased with `FOR UPDATE SKIP LOCKED`, and the
//!   dispatcher's cursor moves by compare-and-set with the deliveries of
//!   its page ([`webhooks`]).
//!
//! Recording events is durable before it is acknowledged: by default
//! concurrent `record` calls are grouped into shared transactions (group
//! commit, see [`PgStoreOptions::group_commit`]) so that 32 writers do not
//! wait for 32 disk flushes.
//!
//! Schema migrations ship with the crate and run on start, serialised by an
//! advisory lock so that instances starting together apply each one once.
//!
//! Layout: this file connects and migrates ([`PgStore`],
//! [`PgStoreOptions`]); [`columns`] reads PostgreSQL's native column types
//! into records; one file per group of traits implements them: [`tokens`]
//! ([`TokenStore`]: grants, codes, access and refresh tokens, their purge),
//! [`clients_accounts_keys`] ([`ClientRegistry`], [`AccountStore`],
//! [`ApiKeyStore`]), [`webhooks`] ([`WebhookStore`]: webhooks, the outbox
//! of deliveries, their attempts) and [`events`] ([`EventSink`], with the
//! group-commit writer). What PostgreSQL shares with SQLite (error mapping, records from
//! rows, the group-commit queue, the purge loop) is in [`crate::store::sql`].
//!
//! [`TokenStore`]: crate::TokenStore
//! [`ClientRegistry`]: crate::ClientRegistry
//! [`AccountStore`]: crate::AccountStore
//! [`ApiKeyStore`]: crate::ApiKeyStore
//! [`EventSink`]: crate::EventSink
//! [`WebhookStore`]: crate::WebhookStore

mod clients_accounts_keys;
mod columns;
mod event_sink;
mod events;
mod tokens;
mod webhooks;

use std::time::Duration;

use sqlx::Executor as _;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::store::error::StoreError;
use crate::store::sql::group_commit::GroupQueue;
use crate::store::sql::{Migration, backend};

use self::events::{WriteLimit, spawn_group_writers};

/// The schema, in order. Never edit a shipped migration: add the next one.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        sql: include_str!("../../../migrations/postgres/0001_initial.sql"),
    },
    Migration {
        version: 2,
        sql: include_str!("../../../migrations/postgres/0002_idempotency_scope.sql"),
    },
    Migration {
        version: 3,
        sql: include_str!("../../../migrations/postgres/0003_purge_indexes.sql"),
    },
    Migration {
        version: 4,
        sql: include_str!("../../../migrations/postgres/0004_adaptive_refresh.sql"),
    },
    Migration {
        version: 5,
        sql: include_str!("../../../migrations/postgres/0005_client_lifecycle.sql"),
    },
    Migration {
        version: 6,
        sql: include_str!("../../../migrations/postgres/0006_event_feed.sql"),
    },
    Migration {
        version: 7,
        sql: include_str!("../../../migrations/postgres/0007_event_json_text.sql"),
    },
    Migration {
        version: 8,
        sql: include_str!("../../../migrations/postgres/0008_drop_events_by_account.sql"),
    },
    Migration {
        version: 9,
        sql: include_str!("../../../migrations/postgres/0009_webhooks.sql"),
    },
    Migration {
        version: 10,
        sql: include_str!("../../../migrations/postgres/0010_event_text.sql"),
    },
    Migration {
        version: 11,
        sql: include_str!("../../../migrations/postgres/0011_webhook_queue_heads.sql"),
    },
];

/// The advisory lock that serialises migrations ("cg-migra" in ASCII).
const MIGRATION_LOCK: i64 = 0x6367_2d6d_6967_7261;

/// How a [`PgStore`] connects and records events.
#[derive(Clone, Debug)]
pub struct PgStoreOptions {
    /// Whether concurrent [`EventSink::record`] calls share transactions
    /// (group commit): background writers take whatever calls have queued
    /// and store them in one transaction, and answer each only after that
    /// COMMIT. Submissions without an idempotency key go in as one
    /// statement (its own transaction when they are all the group holds);
    /// if it fails on the data, they go one by one, so one failing
    /// submission does not fail the others; each submission with a key
    /// claims it in a savepoint of its own. A group whose connection was
    /// lost (a backend terminated, a broken socket) is retried once on a
    /// fresh connection: its events' uuids are its own, so an event the
    /// first attempt committed is skipped, not stored twice. Under many
    /// concurrent writers this replaces a disk flush and a few round trips
    /// per event by one per group. With `false`, each call is one
    /// transaction of its own. Default: `true`.
    ///
    /// [`EventSink::record`]: crate::EventSink::record
    pub group_commit: bool,
    /// The most submissions one group transaction takes. Default: 256.
    pub max_group_size: usize,
    /// How many groups may be written at once, each by a writer that holds
    /// a connection of the pool while groups keep coming. With one writer,
    /// what queues while a group commits is the next group, so groups grow
    /// with the load; more writers write groups side by side (PostgreSQL
    /// then flushes their commits together) but each group is smaller.
    /// Never more than half the pool's connections, so the rest always
    /// serve tokens and reads. Default: 1, the fastest where the database
    /// shares the service's cores (measured with 1, 2 and 4 writers;
    /// benches/intake_load/NOTES.md); a database on a machine of its own,
    /// far from the service, may gain from 2.
    pub group_writers: usize,
    /// The size of the pool [`PgStore::connect_with`] opens (not used by
    /// [`PgStore::from_pool_with`], whose pool is already made). Default: 16.
    pub max_connections: u32,
    /// How long a call waits for a connection, a new one's handshake
    /// included, before failing with [`StoreError::Backend`]; it is what
    /// makes a dead database fail fast. A `record` call waits for it once,
    /// not once per group ahead of it: the calls queued while the group
    /// writer waited are refused with its group. Not used by
    /// [`PgStore::from_pool_with`]. Default: 5 seconds.
    pub acquire_timeout: Duration,
    /// How long one attempt at writing events (a group, or a `record` call
    /// without group commit) may take before its connection is given up
    /// as lost: a connection gone silent (a failover, a network partition)
    /// would otherwise hold the writer, and every call queued behind it,
    /// for as long as the operating system keeps the socket. A group given
    /// up is retried once on a fresh connection, which finds out what the
    /// first attempt committed (its events' uuids and claims are its own),
    /// so a call waits at most about twice this (plus a connection's
    /// acquire timeout) before its answer. It is answered
    /// [`StoreError::Backend`] when neither attempt got an answer; what the
    /// first one sent may then be stored all the same, as after any lost
    /// connection (an `Idempotency-Key` makes the client's retry safe).
    /// Without group commit, a call given up is not retried: it is answered
    /// [`StoreError::Backend`] at once. Each
    /// transaction also sets PostgreSQL's
    /// `idle_in_transaction_session_timeout` to this, so that one left open
    /// by a connection gone silent is rolled back and frees its
    /// idempotency keys for the retry. Keep it well above the slowest
    /// commit of a full group, and twice it under the HTTP layer's request
    /// timeout (30 s). Default: 10 seconds.
    pub write_timeout: Duration,
}

impl Default for PgStoreOptions {
    fn default() -> Self {
        Self {
            group_commit: true,
            max_group_size: 256,
            group_writers: 1,
            max_connections: 16,
            acquire_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
        }
    }
}

/// Every storage trait on one PostgreSQL database.
///
/// Cloning is cheap and shares the pool (and the group-commit writer).
/// The tables live in the first schema of the connections' `search_path`:
/// a host sharing a database with other software gives the store a schema
/// of its own (`PgConnectOptions::options([("search_path", "gateway")])`).
///
/// Instants are kept as `TIMESTAMPTZ`: anything finer than a microsecond
/// is truncated.
///
/// The crate turns on no TLS backend of sqlx. A host whose database
/// requires TLS adds, in its own manifest, `sqlx = { version = "0.8",
/// features = ["tls-rustls-ring-webpki"] }` (Cargo unifies the features)
/// and `?sslmode=require` to the address.
#[derive(Clone)]
pub struct PgStore {
    pool: PgPool,
    /// The queue to the group-commit writer, when it is on.
    group: Option<GroupQueue>,
    /// How long writing events may take (without group commit).
    write_limit: WriteLimit,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the pool's own Debug: its connect options hold the password.
        f.debug_struct("PgStore")
            .field("connections", &self.pool.size())
            .field("group_commit", &self.group.is_some())
            .finish()
    }
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user@host:port/db`)
    /// with the default [`PgStoreOptions`], and brings its schema up to date.
    ///
    /// # Errors
    /// [`StoreError::Backend`] if the address does not parse, the database
    /// cannot be reached within the acquire timeout, or the migrations fail.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, PgStoreOptions::default()).await
    }

    /// Connects to the database at `url` with `options`, and brings its
    /// schema up to date.
    ///
    /// Each connection of the pool has PostgreSQL start writing its data
    /// out after every 256 kB (`backend_flush_after`), unless the server,
    /// the database, the role or `url` sets it otherwise: under a long
    /// flood this keeps the kernel from holding hundreds of MB for one
    /// write-back that stalls every commit behind it.
    ///
    /// # Errors
    /// As [`PgStore::connect`].
    pub async fn connect_with(url: &str, options: PgStoreOptions) -> Result<Self, StoreError> {
        let connect: PgConnectOptions = url
            .parse()
            .map_err(backend("parse the PostgreSQL address"))?;
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .after_connect(|connection, _| Box::pin(write_back_early(connection)))
            .connect_with(connect)
            .await
            .map_err(backend("connect to PostgreSQL"))?;
        Self::from_pool_with(pool, options).await
    }

    /// A store on a pool the host made (its size, timeouts and
    /// `search_path` are kept), with the default [`PgStoreOptions`]; brings
    /// the schema up to date. Its connections are used as the host made
    /// them: a host that wants the write-back hint of
    /// [`PgStore::connect_with`] sets `backend_flush_after` in its own
    /// connect options.
    ///
    /// Give the pool an acquire timeout of a few seconds, so that a dead
    /// database fails fast. Must be called inside a tokio runtime (the
    /// group-commit writer is a task on it).
    ///
    /// # Errors
    /// [`StoreError::Backend`] if the migrations fail.
    pub async fn from_pool(pool: PgPool) -> Result<Self, StoreError> {
        Self::from_pool_with(pool, PgStoreOptions::default()).await
    }

    /// As [`PgStore::from_pool`], with `options` (of which only
    /// `group_commit`, `max_group_size`, `group_writers` and
    /// `write_timeout` apply).
    ///
    /// # Errors
    /// [`StoreError::Backend`] if the migrations fail.
    pub async fn from_pool_with(pool: PgPool, options: PgStoreOptions) -> Result<Self, StoreError> {
        migrate(&pool).await?;
        let write_limit = WriteLimit::new(options.write_timeout);
        let group = options.group_commit.then(|| {
            let max = options.max_group_size.max(1);
            let (queue, jobs) = GroupQueue::new(max.saturating_mul(4));
            spawn_group_writers(&pool, jobs, max, options.group_writers, &write_limit);
            queue
        });
        Ok(Self {
            pool,
            group,
            write_limit,
        })
    }

    /// The pool, for the host's own health checks.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Closes every connection, waiting for the ones in use to come back.
    /// Calls made afterwards, through any clone, fail with
    /// [`StoreError::Backend`].
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// A round trip to the database (`SELECT 1`, a connection taken from
    /// the pool or made) within [`READY_TIMEOUT`], for
    /// [`crate::Gateway::readiness`].
    async fn ping(&self) -> Result<(), StoreError> {
        const ACTION: &str = "check that PostgreSQL answers";
        let ping = sqlx::query("SELECT 1").execute(&self.pool);
        tokio::time::timeout(READY_TIMEOUT, ping)
            .await
            .map_err(|_| StoreError::backend(ACTION, crate::store::sql::TimedOut))?
            .map_err(backend(ACTION))?;
        Ok(())
    }
}

/// The data a session may leave to the kernel's write-back before
/// PostgreSQL asks the kernel to start writing it (`backend_flush_after`,
/// which PostgreSQL leaves at 0, never, by default).
const WRITE_BACK_AFTER: &str = "256kB";

/// Sets `backend_flush_after` to [`WRITE_BACK_AFTER`] for `connection`'s
/// session, unless the server's configuration, the database, the role or
/// the address set it: a setting of the operator's is kept, even 0.
///
/// Why: the events table only grows, and under a long flood the writer's
/// session evicts a full page from the small shared buffers for nearly
/// every new one. Left to the kernel, those pages pile up in its page
/// cache (hundreds of MB) until its write-back or a checkpoint's `fsync`
/// takes them all at once, and every commit's log flush waits behind them.
/// PostgreSQL's documentation says the setting limits that dirty data and
/// the stalls at a checkpoint's `fsync` or a large write-back, and that it
/// may cost where a working set larger than the shared buffers is served
/// from the page cache, whose pages are then written out more often: the
/// table's pages are written out once, full. Measured on a 2-core VM
/// with PostgreSQL 15's stock settings (server/benches/intake_load/NOTES.md,
/// "the write-back hint"), two pairs of 60 s floods: as many requests a
/// second, the dirty cache held near 130 MB instead of climbing to 650,
/// and the pauses (about one every 17 s, at each checkpoint) mostly 34 to
/// 55 ms instead of 91 to 257 ms; one of 311 ms remained, so this shortens
/// the pauses without bounding them.
async fn write_back_early(connection: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query(
        "SELECT set_config('backend_flush_after', $1, false)
         FROM pg_settings WHERE name = 'backend_flush_after' AND source = 'default'",
    )
    .bind(WRITE_BACK_AFTER)
    .execute(connection)
    .await
    .map(|_| ())
}

/// How long a readiness check waits for the database.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// Applies the migrations this database has not seen, in one transaction.
async fn migrate(pool: &PgPool) -> Result<(), StoreError> {
    const ACTION: &str = "migrate the PostgreSQL schema";
    let mut tx = pool.begin().await.map_err(backend(ACTION))?;
    // Instances starting together queue here; each sees the versions the
    // ones before it applied.
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await
        .map_err(backend(ACTION))?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS schema_version (
             version     BIGINT      PRIMARY KEY,
             applied_at  TIMESTAMPTZ NOT NULL DEFAULT now()
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
        sqlx::query("INSERT INTO schema_version (version) VALUES ($1)")
            .bind(migration.version)
            .execute(&mut *tx)
            .await
            .map_err(backend(ACTION))?;
    }
    tx.commit().await.map_err(backend(ACTION))
}
