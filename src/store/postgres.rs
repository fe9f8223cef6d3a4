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
//!
//! Recording events is durable before it is acknowledged: by default
//! concurrent `record` calls are grouped into shared transactions (group
//! commit, see [`PgStoreOptions::group_commit`]) so that 32 writers do not
//! wait for 32 disk flushes.
//!
//! Schema migrations ship with the crate and run on start, serialised by an
//! advisory lock so that instances starting together apply each one once.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::{Connection as _, Executor as _, Postgres};
use time::OffsetDateTime;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::store::sql::{
    self, GroupQueue, Job, Migration, RECORD, RecordColumns, access_from, account_from, answer,
    api_key_from, backend, channel_to_json, client_from, code_from, code_lookup, code_tombstone,
    event_from, find_row, grant_from, insert_failed, insert_row, refresh_from, replay_or_reuse,
    rotation_refused,
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
        sql: include_str!("../../migrations/postgres/0001_initial.sql"),
    },
    Migration {
        version: 2,
        sql: include_str!("../../migrations/postgres/0002_idempotency_scope.sql"),
    },
    Migration {
        version: 3,
        sql: include_str!("../../migrations/postgres/0003_purge_indexes.sql"),
    },
    Migration {
        version: 4,
        sql: include_str!("../../migrations/postgres/0004_adaptive_refresh.sql"),
    },
];

/// The advisory lock that serialises migrations ("cg-migra" in ASCII).
const MIGRATION_LOCK: i64 = 0x6367_2d6d_6967_7261;

/// The advisory-lock class under which an account's API keys are counted
/// ("cgak" in ASCII); the account is the second key.
const API_KEY_LOCK_CLASS: i32 = 0x6367_616b;

/// How a [`PgStore`] connects and records events.
#[derive(Clone, Debug)]
pub struct PgStoreOptions {
    /// Whether concurrent [`EventSink::record`] calls share transactions
    /// (group commit): a background task takes whatever calls have queued
    /// and stores them in one transaction, and answers each only after that
    /// COMMIT. Submissions without an idempotency key go in as one
    /// statement; if it fails, they are retried one by one, each in a
    /// savepoint of its own like every submission with a key, so one
    /// failing submission does not fail the others. Under many concurrent
    /// writers this replaces one disk flush per event by one per group.
    /// With `false`, each call is one transaction of its own. Default:
    /// `true`.
    pub group_commit: bool,
    /// The most submissions one group transaction takes. Default: 256.
    pub max_group_size: usize,
    /// The size of the pool [`PgStore::connect_with`] opens (not used by
    /// [`PgStore::from_pool_with`], whose pool is already made). Default: 16.
    pub max_connections: u32,
    /// How long a call waits for a connection, a new one's handshake
    /// included, before failing with [`StoreError::Backend`]; it is what
    /// makes a dead database fail fast. Not used by
    /// [`PgStore::from_pool_with`]. Default: 5 seconds.
    pub acquire_timeout: Duration,
}

impl Default for PgStoreOptions {
    fn default() -> Self {
        Self {
            group_commit: true,
            max_group_size: 256,
            max_connections: 16,
            acquire_timeout: Duration::from_secs(5),
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
    /// # Errors
    /// As [`PgStore::connect`].
    pub async fn connect_with(url: &str, options: PgStoreOptions) -> Result<Self, StoreError> {
        let connect: PgConnectOptions = url
            .parse()
            .map_err(backend("parse the PostgreSQL address"))?;
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect)
            .await
            .map_err(backend("connect to PostgreSQL"))?;
        Self::from_pool_with(pool, options).await
    }

    /// A store on a pool the host made (its size, timeouts and
    /// `search_path` are kept), with the default [`PgStoreOptions`]; brings
    /// the schema up to date.
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
    /// `group_commit` and `max_group_size` apply).
    ///
    /// # Errors
    /// [`StoreError::Backend`] if the migrations fail.
    pub async fn from_pool_with(pool: PgPool, options: PgStoreOptions) -> Result<Self, StoreError> {
        migrate(&pool).await?;
        let group = options.group_commit.then(|| {
            let max = options.max_group_size.max(1);
            let (queue, jobs) = GroupQueue::new(max.saturating_mul(4));
            // The writer ends when the last clone of the store (the last
            // sender) is dropped, after answering what was queued.
            tokio::spawn(group_writer(pool.clone(), jobs, max));
            queue
        });
        Ok(Self { pool, group })
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
}

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

/// A row of PostgreSQL, whose columns all have native types (UUID,
/// TIMESTAMPTZ, BYTEA, arrays, JSONB) that sqlx decodes as the values
/// themselves.
type Columns = sql::Columns<PgRow>;

impl RecordColumns for Columns {
    fn action(&self) -> &'static str {
        self.action
    }

    fn uuid(&self, column: &'static str) -> Result<Uuid, StoreError> {
        self.get(column)
    }

    fn optional_uuid(&self, column: &'static str) -> Result<Option<Uuid>, StoreError> {
        self.get(column)
    }

    fn uuids(&self, column: &'static str) -> Result<Vec<Uuid>, StoreError> {
        self.get(column)
    }

    fn time(&self, column: &'static str) -> Result<OffsetDateTime, StoreError> {
        self.get(column)
    }

    fn optional_time(&self, column: &'static str) -> Result<Option<OffsetDateTime>, StoreError> {
        self.get(column)
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
        self.get(column)
    }

    fn json(&self, column: &'static str) -> Result<serde_json::Value, StoreError> {
        self.get(column)
    }
}

/// A statement with its arguments bound.
type Statement<'q> = sql::Statement<'q, Postgres>;

/// Binds an access token's `hash, grant_id, client_id, account_id,
/// issued_at, expires_at`, in that order, after what `statement` has bound.
fn bind_access<'q>(statement: Statement<'q>, token: &'q AccessTokenRecord) -> Statement<'q> {
    statement
        .bind(token.hash.as_bytes().as_slice())
        .bind(token.grant_id.0)
        .bind(token.client_id.as_str())
        .bind(token.account_id.0)
        .bind(token.issued_at)
        .bind(token.expires_at)
}

/// Binds a refresh token's `hash, grant_id, client_id, account_id,
/// issued_at, expires_at, predecessor`, in that order, after what
/// `statement` has bound.
fn bind_refresh<'q>(statement: Statement<'q>, token: &'q RefreshTokenRecord) -> Statement<'q> {
    statement
        .bind(token.hash.as_bytes().as_slice())
        .bind(token.grant_id.0)
        .bind(token.client_id.as_str())
        .bind(token.account_id.0)
        .bind(token.issued_at)
        .bind(token.expires_at)
        .bind(
            token
                .predecessor
                .as_ref()
                .map(|hash| hash.as_bytes().as_slice()),
        )
}

#[async_trait]
impl TokenStore for PgStore {
    async fn insert_grant(&self, grant: &Grant) -> Result<(), StoreError> {
        let statement = sqlx::query(
            "INSERT INTO grants (id, client_id, account_id, created_at, revoked_at)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(grant.id.0)
        .bind(grant.client_id.as_str())
        .bind(grant.account_id.0)
        .bind(grant.created_at)
        .bind(grant.revoked_at);
        insert_row(&self.pool, statement, "grant", "insert a grant").await
    }

    async fn find_grant(&self, id: GrantId) -> Result<Option<Grant>, StoreError> {
        let statement = sqlx::query(
            "SELECT id, client_id, account_id, created_at, revoked_at FROM grants WHERE id = $1",
        )
        .bind(id.0);
        find_row(&self.pool, statement, "read a grant", grant_from).await
    }

    async fn revoke_grant(&self, id: GrantId, at: OffsetDateTime) -> Result<bool, StoreError> {
        // One statement; COALESCE keeps the first revocation time.
        let done =
            sqlx::query("UPDATE grants SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2")
                .bind(at)
                .bind(id.0)
                .execute(&self.pool)
                .await
                .map_err(backend("revoke a grant"))?;
        Ok(done.rows_affected() > 0)
    }

    async fn insert_code(&self, code: &CodeRecord) -> Result<(), StoreError> {
        let statement = sqlx::query(
            "INSERT INTO authorization_codes
                 (hash, grant_id, client_id, account_id, redirect_uri, pkce_challenge,
                  issued_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(code.hash.as_bytes().as_slice())
        .bind(code.grant_id.0)
        .bind(code.client_id.as_str())
        .bind(code.account_id.0)
        .bind(&code.redirect_uri)
        .bind(code.pkce.as_ref().map(|pkce| pkce.challenge.as_str()))
        .bind(code.issued_at)
        .bind(code.expires_at);
        let action = "insert an authorization code";
        insert_row(&self.pool, statement, "authorization code", action).await
    }

    async fn take_code(&self, hash: &SecretHash) -> Result<CodeTake, StoreError> {
        const ACTION: &str = "take an authorization code";
        // One conditional statement. A concurrent caller, on any connection
        // or server, waits for the row lock, then re-checks `NOT taken` on
        // the committed row and matches nothing.
        let take = sqlx::query(
            "UPDATE authorization_codes SET taken = TRUE
             WHERE hash = $1 AND NOT taken
             RETURNING grant_id, client_id, account_id, redirect_uri, pkce_challenge,
                       issued_at, expires_at",
        )
        .bind(hash.as_bytes().as_slice());
        if let Some(code) = find_row(&self.pool, take, ACTION, |c| code_from(c, *hash)).await? {
            return Ok(CodeTake::Taken(code));
        }
        self.code_tombstone(hash, ACTION).await
    }

    async fn find_code(&self, hash: &SecretHash) -> Result<CodeLookup, StoreError> {
        let statement = sqlx::query(
            "SELECT grant_id, client_id, account_id, redirect_uri, pkce_challenge,
                    issued_at, expires_at, taken
             FROM authorization_codes WHERE hash = $1",
        )
        .bind(hash.as_bytes().as_slice());
        let action = "read an authorization code";
        Ok(
            find_row(&self.pool, statement, action, |c| code_lookup(c, *hash))
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
        // One statement, so one implicit transaction: the tokens are
        // inserted only from the row the UPDATE marked, and a failure of any
        // part (a duplicate hash, a lost connection) undoes every part.
        // Concurrent callers queue on the code's row lock and re-check
        // `NOT taken` on the committed row: one wins.
        let redeem = sqlx::query(
            "WITH taken AS (
                 UPDATE authorization_codes SET taken = TRUE
                 WHERE hash = $1 AND NOT taken
                 RETURNING grant_id, client_id, account_id, redirect_uri, pkce_challenge,
                           issued_at, expires_at
             ), refresh AS (
                 INSERT INTO refresh_tokens
                     (hash, grant_id, client_id, account_id, issued_at, expires_at, predecessor)
                 SELECT $2, $3, $4, $5, $6, $7, $8 FROM taken
             ), access AS (
                 INSERT INTO access_tokens
                     (hash, grant_id, client_id, account_id, issued_at, expires_at)
                 SELECT $9, $10, $11, $12, $13, $14 FROM taken
             )
             SELECT * FROM taken",
        )
        .bind(hash.as_bytes().as_slice());
        let redeem = bind_access(bind_refresh(redeem, refresh), access);
        let taken = redeem
            .fetch_optional(&self.pool)
            .await
            .map_err(insert_failed("token", ACTION))?;
        match taken {
            Some(row) => Ok(CodeTake::Taken(code_from(
                &Columns::new(row, ACTION),
                *hash,
            )?)),
            None => self.code_tombstone(hash, ACTION).await,
        }
    }

    async fn insert_access_token(&self, token: &AccessTokenRecord) -> Result<(), StoreError> {
        let statement = bind_access(
            sqlx::query(
                "INSERT INTO access_tokens
                     (hash, grant_id, client_id, account_id, issued_at, expires_at)
                 VALUES ($1, $2, $3, $4, $5, $6)",
            ),
            token,
        );
        let action = "insert an access token";
        insert_row(&self.pool, statement, "access token", action).await
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
             WHERE a.hash = $1",
        )
        .bind(hash.as_bytes().as_slice());
        let action = "read an access token";
        find_row(&self.pool, statement, action, |c| access_from(c, *hash)).await
    }

    async fn insert_refresh_token(&self, token: &RefreshTokenRecord) -> Result<(), StoreError> {
        let statement = bind_refresh(
            sqlx::query(
                "INSERT INTO refresh_tokens
                     (hash, grant_id, client_id, account_id, issued_at, expires_at, predecessor)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            ),
            token,
        );
        let action = "insert a refresh token";
        insert_row(&self.pool, statement, "refresh token", action).await
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
             WHERE r.hash = $1",
        )
        .bind(hash.as_bytes().as_slice());
        let action = "read a refresh token";
        find_row(&self.pool, statement, action, |c| refresh_from(c, *hash)).await
    }

    async fn rotate_refresh_token(
        &self,
        old: &SecretHash,
        successor: &RefreshTokenRecord,
        access: &AccessTokenRecord,
        at: OffsetDateTime,
    ) -> Result<Rotation, StoreError> {
        const ACTION: &str = "rotate a refresh token";
        // A token that is inserted while we look can make the conditional
        // statement match nothing and the look-up then find it active; the
        // statement is simply tried again.
        for _ in 0..3 {
            // One statement: the successor and the access token are inserted
            // only from the row the UPDATE marked, the UPDATE marks only an
            // active token of a live grant, and a failure of any part undoes
            // every part. Concurrent callers queue on the row lock and
            // re-check `rotated_at IS NULL` on the committed row: one wins.
            let rotate = sqlx::query(
                "WITH rotated AS (
                     UPDATE refresh_tokens r SET rotated_at = $2, successor = $3
                     WHERE r.hash = $1 AND r.rotated_at IS NULL
                       AND EXISTS (SELECT 1 FROM grants g
                                   WHERE g.id = r.grant_id AND g.revoked_at IS NULL)
                     RETURNING r.hash
                 ), successor AS (
                     INSERT INTO refresh_tokens
                         (hash, grant_id, client_id, account_id, issued_at, expires_at,
                          predecessor)
                     SELECT $3, $4, $5, $6, $7, $8, $9 FROM rotated
                 )
                 INSERT INTO access_tokens
                     (hash, grant_id, client_id, account_id, issued_at, expires_at)
                 SELECT $10, $11, $12, $13, $14, $15 FROM rotated",
            )
            .bind(old.as_bytes().as_slice())
            .bind(at);
            let rotated = bind_access(bind_refresh(rotate, successor), access)
                .execute(&self.pool)
                .await
                .map_err(insert_failed("token", ACTION))?;
            if rotated.rows_affected() == 1 {
                return Ok(Rotation::Rotated);
            }
            let current = sqlx::query(
                "SELECT r.rotated_at, r.successor,
                        (g.id IS NULL OR g.revoked_at IS NOT NULL) AS revoked
                 FROM refresh_tokens r LEFT JOIN grants g ON g.id = r.grant_id
                 WHERE r.hash = $1",
            )
            .bind(old.as_bytes().as_slice());
            match find_row(&self.pool, current, ACTION, rotation_refused).await? {
                None => return Ok(Rotation::NotFound),
                Some(Some(refused)) => return Ok(refused),
                // Active after all: try again.
                Some(None) => {}
            }
        }
        Err(StoreError::backend(ACTION, RotationContended))
    }

    async fn purge_expired(
        &self,
        cutoff: OffsetDateTime,
        limit: usize,
    ) -> Result<usize, StoreError> {
        // Each DELETE is a transaction of its own, of at most `limit` rows,
        // found through the purge indexes: locks are held one short
        // statement at a time.
        const PURGES: [&str; 5] = [
            "DELETE FROM authorization_codes WHERE hash IN
                 (SELECT hash FROM authorization_codes WHERE expires_at < $1 LIMIT $2)",
            "DELETE FROM access_tokens WHERE hash IN
                 (SELECT hash FROM access_tokens WHERE expires_at < $1 LIMIT $2)",
            "DELETE FROM refresh_tokens WHERE hash IN
                 (SELECT hash FROM refresh_tokens WHERE rotated_at < $1 LIMIT $2)",
            "DELETE FROM refresh_tokens WHERE hash IN
                 (SELECT hash FROM refresh_tokens WHERE expires_at < $1 LIMIT $2)",
            "DELETE FROM refresh_tokens WHERE hash IN
                 (SELECT r.hash FROM grants g JOIN refresh_tokens r ON r.grant_id = g.id
                  WHERE g.revoked_at < $1 LIMIT $2)",
        ];
        sql::purge(&self.pool, &PURGES, cutoff, limit, "purge expired tokens").await
    }
}

impl PgStore {
    /// What a code the caller could not take tells of it: its tombstone, or
    /// nothing if it never existed (or the purge deleted it meanwhile).
    async fn code_tombstone(
        &self,
        hash: &SecretHash,
        action: &'static str,
    ) -> Result<CodeTake, StoreError> {
        let tombstone =
            sqlx::query("SELECT grant_id, client_id FROM authorization_codes WHERE hash = $1")
                .bind(hash.as_bytes().as_slice());
        Ok(find_row(&self.pool, tombstone, action, code_tombstone)
            .await?
            .unwrap_or(CodeTake::NotFound))
    }
}

#[async_trait]
impl ClientRegistry for PgStore {
    async fn register_client(&self, client: &Client) -> Result<(), StoreError> {
        let statement = sqlx::query(
            "INSERT INTO clients
                 (id, name, secret_hash, redirect_uris, require_pkce, refresh_policy)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(client.id.as_str())
        .bind(&client.name)
        .bind(client.secret_hash.as_bytes().as_slice())
        .bind(&client.redirect_uris)
        .bind(client.require_pkce)
        .bind(client.refresh_policy.map(|policy| policy.to_stored()));
        insert_row(&self.pool, statement, "client", "register a client").await
    }

    async fn find_client(&self, id: &ClientId) -> Result<Option<Client>, StoreError> {
        let statement = sqlx::query(
            "SELECT id, name, secret_hash, redirect_uris, require_pkce, refresh_policy
             FROM clients WHERE id = $1",
        )
        .bind(id.as_str());
        find_row(&self.pool, statement, "read a client", client_from).await
    }
}

#[async_trait]
impl AccountStore for PgStore {
    async fn insert_account(&self, account: &Account) -> Result<(), StoreError> {
        // The primary key and the UNIQUE e-mail both answer `Duplicate`.
        let statement = sqlx::query(
            "INSERT INTO accounts (id, name, email, password_hash, custom_fields)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(account.id.0)
        .bind(&account.name)
        .bind(&account.email)
        .bind(account.password_hash.as_deref())
        .bind(&account.custom_fields);
        insert_row(&self.pool, statement, "account", "insert an account").await
    }

    async fn find_account(&self, id: AccountId) -> Result<Option<Account>, StoreError> {
        let statement = sqlx::query(
            "SELECT id, name, email, password_hash, custom_fields FROM accounts WHERE id = $1",
        )
        .bind(id.0);
        find_row(&self.pool, statement, "read an account", |c| {
            account_from(c)
        })
        .await
    }

    async fn find_account_by_email(&self, email: &str) -> Result<Option<Account>, StoreError> {
        let statement = sqlx::query(
            "SELECT id, name, email, password_hash, custom_fields FROM accounts WHERE email = $1",
        )
        .bind(email);
        find_row(&self.pool, statement, "read an account", |c| {
            account_from(c)
        })
        .await
    }
}

/// The second key of an account's advisory lock: its uuid folded to 32
/// bits. Two accounts that fold alike only queue behind each other.
fn account_lock_key(account: AccountId) -> i32 {
    let bytes = account.0.as_bytes();
    let mut folded = [0u8; 4];
    for (i, byte) in bytes.iter().enumerate() {
        folded[i % 4] ^= byte;
    }
    i32::from_be_bytes(folded)
}

#[async_trait]
impl ApiKeyStore for PgStore {
    async fn insert_api_key(
        &self,
        key: &ApiKeyRecord,
        max_per_account: usize,
    ) -> Result<bool, StoreError> {
        const ACTION: &str = "insert an api key";
        let mut tx = self.pool.begin().await.map_err(backend(ACTION))?;
        // Count and insert while holding the account's lock, released at
        // COMMIT: a concurrent caller, on any server, counts after us.
        sqlx::query("SELECT pg_advisory_xact_lock($1, $2)")
            .bind(API_KEY_LOCK_CLASS)
            .bind(account_lock_key(key.account_id))
            .execute(&mut *tx)
            .await
            .map_err(backend(ACTION))?;
        let row = sqlx::query(
            "SELECT EXISTS (SELECT 1 FROM api_keys WHERE id = $1 OR hash = $2) AS duplicate,
                    (SELECT count(*) FROM api_keys WHERE account_id = $3) AS held",
        )
        .bind(key.id.0)
        .bind(key.hash.as_bytes().as_slice())
        .bind(key.account_id.0)
        .fetch_one(&mut *tx)
        .await
        .map_err(backend(ACTION))?;
        let c = Columns::new(row, ACTION);
        if c.flag("duplicate")? {
            return Err(StoreError::Duplicate { what: "api key" });
        }
        let held: i64 = c.get("held")?;
        if usize::try_from(held).unwrap_or(usize::MAX) >= max_per_account {
            return Ok(false);
        }
        let statement = sqlx::query(
            "INSERT INTO api_keys (id, account_id, hash, label, active, created_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(key.id.0)
        .bind(key.account_id.0)
        .bind(key.hash.as_bytes().as_slice())
        .bind(&key.label)
        .bind(key.active)
        .bind(key.created_at);
        insert_row(&mut *tx, statement, "api key", ACTION).await?;
        tx.commit().await.map_err(backend(ACTION))?;
        Ok(true)
    }

    async fn find_api_key(&self, hash: &SecretHash) -> Result<Option<ApiKeyRecord>, StoreError> {
        let statement = sqlx::query(
            "SELECT id, account_id, hash, label, active, created_at FROM api_keys WHERE hash = $1",
        )
        .bind(hash.as_bytes().as_slice());
        find_row(&self.pool, statement, "read an api key", |c| {
            api_key_from(c)
        })
        .await
    }

    async fn set_api_key_active(&self, id: ApiKeyId, active: bool) -> Result<bool, StoreError> {
        let done = sqlx::query("UPDATE api_keys SET active = $1 WHERE id = $2")
            .bind(active)
            .bind(id.0)
            .execute(&self.pool)
            .await
            .map_err(backend("switch an api key"))?;
        Ok(done.rows_affected() > 0)
    }

    async fn list_api_keys(&self, account: AccountId) -> Result<Vec<ApiKeyRecord>, StoreError> {
        // seq breaks ties between keys created in the same microsecond:
        // insertion order.
        sqlx::query(
            "SELECT id, account_id, hash, label, active, created_at FROM api_keys
             WHERE account_id = $1 ORDER BY created_at, seq",
        )
        .bind(account.0)
        .fetch_all(&self.pool)
        .await
        .map_err(backend("list api keys"))?
        .into_iter()
        .map(|row| api_key_from(&Columns::new(row, "read an api key")))
        .collect()
    }
}

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
async fn group_writer(pool: PgPool, mut queue: mpsc::Receiver<Job>, max: usize) {
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

/// A refresh token stayed active and unrotatable through every attempt:
/// something keeps changing it under the store.
#[derive(Debug, thiserror::Error)]
#[error("the refresh token kept changing while it was being rotated")]
struct RotationContended;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_lock_keys_fold_the_whole_uuid() {
        let a = AccountId(Uuid::from_bytes([1; 16]));
        let b = AccountId(Uuid::from_bytes([
            1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2,
        ]));
        assert_ne!(account_lock_key(a), account_lock_key(b));
        assert_eq!(account_lock_key(a), 0);
    }
}
