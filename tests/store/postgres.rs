//! The PostgreSQL store keeps the storage contract, concurrency included,
//! also between two connection pools (two server instances); keeps what it
//! acknowledged across a restart; and reports a dead backend as
//! `StoreError::Backend`.
//!
//! The tests need a PostgreSQL server, named by `DATABASE_URL`. Each test
//! works in a schema of its own, dropped at its end, so they run in
//! parallel and repeatedly against one database.
#![cfg(all(
    feature = "test-util",
    feature = "postgres",
    feature = "external-tests"
))]

use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use conversion_gateway::conformance;
use conversion_gateway::{
    AccessToken, AccessTokenRecord, AccountId, AuthorizationCode, ClientId, CodeRecord, CodeTake,
    EventFeed, EventPayload, EventSink, EventSubmission, FeedCursor, Grant, GrantId,
    IdempotencyClaim, IdempotencyScope, IntakeChannel, OsRandom, PgStore, PgStoreOptions,
    RecordOutcome, RecordedEvent, RefreshState, RefreshToken, RefreshTokenRecord, Rotation,
    SecretHasher, StoreError, TokenStore, random_uuid,
};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::silent_network::{SilentProxy, Trap};
use time::macros::datetime;

const NO_DATABASE: &str = "\
DATABASE_URL is not set: the PostgreSQL store tests need a server. Start one, e.g.
    docker run --rm -e POSTGRES_HOST_AUTH_METHOD=trust -e POSTGRES_DB=test -p 5432:5432 postgres:16
(or install your distribution's postgresql package and create a database `test`), then
    export DATABASE_URL=postgres://postgres@127.0.0.1:5432/test
and run the tests again.";

fn database_url() -> String {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => panic!("{NO_DATABASE}"),
    }
}

/// A schema of one test's own on the server at `DATABASE_URL`.
#[derive(Clone)]
pub(crate) struct TestSchema {
    url: String,
    name: String,
}

impl TestSchema {
    /// The schema's name, which is also its pools' `application_name`.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// A new pool whose connections work in this schema, as a separate
    /// server instance would have.
    pub(crate) async fn pool(&self) -> PgPool {
        PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(self.connect_options())
            .await
            .expect("connect to DATABASE_URL")
    }

    /// The address of the server at `DATABASE_URL`.
    fn server_addr(&self) -> std::net::SocketAddr {
        use std::net::ToSocketAddrs as _;
        let options = self.connect_options();
        (options.get_host(), options.get_port())
            .to_socket_addrs()
            .expect("resolve DATABASE_URL's host")
            .next()
            .expect("DATABASE_URL's host has an address")
    }

    /// A pool as [`TestSchema::pool`], whose connections go through
    /// `proxy` and wait at most `acquire` for a connection.
    async fn pool_through(&self, proxy: &SilentProxy, acquire: Duration) -> PgPool {
        let through = self
            .connect_options()
            .host(&proxy.addr().ip().to_string())
            .port(proxy.addr().port());
        PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(acquire)
            .connect_with(through)
            .await
            .expect("connect through the proxy")
    }

    fn connect_options(&self) -> PgConnectOptions {
        // Named after the schema, so that a test can find (and terminate)
        // its own backends in pg_stat_activity.
        PgConnectOptions::from_str(&self.url)
            .expect("DATABASE_URL must be a postgres:// address")
            .options([("search_path", self.name.as_str())])
            .application_name(&self.name)
    }

    async fn store_with(&self, options: PgStoreOptions) -> Arc<PgStore> {
        let store = PgStore::from_pool_with(self.pool().await, options)
            .await
            .expect("open the PostgreSQL store");
        Arc::new(store)
    }

    pub(crate) async fn store(&self) -> Arc<PgStore> {
        self.store_with(PgStoreOptions::default()).await
    }
}

/// Group commit with four writers, each writing a group of its own.
fn four_writers() -> PgStoreOptions {
    PgStoreOptions {
        group_writers: 4,
        ..PgStoreOptions::default()
    }
}

fn without_group_commit() -> PgStoreOptions {
    PgStoreOptions {
        group_commit: false,
        ..PgStoreOptions::default()
    }
}

/// Runs `test` in a fresh schema and drops the schema afterwards, whether
/// the test passed or not.
pub(crate) async fn in_schema<F, Fut>(test: F)
where
    F: FnOnce(TestSchema) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let url = database_url();
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(10))
        .connect(&url)
        .await
        .unwrap_or_else(|error| panic!("cannot connect to DATABASE_URL ({error}).\n{NO_DATABASE}"));
    let name = format!("cg_test_{}", random_uuid(&OsRandom).simple());
    sqlx::raw_sql(&format!("CREATE SCHEMA {name}"))
        .execute(&admin)
        .await
        .expect("create the test schema");
    let outcome = tokio::spawn(test(TestSchema {
        url,
        name: name.clone(),
    }))
    .await;
    // A test that failed may leave a backend holding locks in the schema
    // (a transaction a silent network left open): ended first, so that the
    // test fails rather than waits.
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
    )
    .bind(&name)
    .execute(&admin)
    .await
    .expect("end the test's backends");
    sqlx::raw_sql(&format!("DROP SCHEMA {name} CASCADE"))
        .execute(&admin)
        .await
        .expect("drop the test schema");
    admin.close().await;
    if let Err(error) = outcome {
        std::panic::resume_unwind(error.into_panic());
    }
}

/// A claim that expired and is being taken over by a request reusing its
/// key (its row locked, a new expiry written, not yet committed) is passed
/// by by the purge, which neither waits for it nor deletes it once it is
/// live again: the key's next retry is still a replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_purge_passes_a_claim_being_taken_over_and_keeps_it() {
    in_schema(|schema| async move {
        let store = schema.store().await;
        let other = schema.pool().await;
        let cutoff = datetime!(2026-03-02 00:00:00 UTC);
        let insert = "INSERT INTO idempotency_claims
                 (account_id, scope, key, fingerprint, created_at, expires_at, event_uuids)
             VALUES ($1, 'api_key:x', $2, '\\x00', $3, $4, '{}')";
        let account = random_uuid(&OsRandom);
        for key in ["taken-over", "expired"] {
            sqlx::query(insert)
                .bind(account)
                .bind(key)
                .bind(cutoff - time::Duration::days(2))
                .bind(cutoff - time::Duration::days(1))
                .execute(&other)
                .await
                .expect("an expired claim");
        }
        let mut taking_over = other.begin().await.expect("begin");
        sqlx::query("UPDATE idempotency_claims SET expires_at = $1 WHERE key = 'taken-over'")
            .bind(cutoff + time::Duration::days(1))
            .execute(&mut *taking_over)
            .await
            .expect("take the claim over");
        let purged = tokio::time::timeout(
            Duration::from_secs(30),
            store.purge_expired_claims(cutoff, 10),
        )
        .await
        .expect("the purge waited for the claim being taken over")
        .expect("purge");
        assert_eq!(purged, 1, "the other expired claim");
        taking_over.commit().await.expect("commit the take-over");
        assert_eq!(
            store.purge_expired_claims(cutoff, 10).await.expect("purge"),
            0
        );
        let left: Vec<String> = sqlx::query_scalar("SELECT key FROM idempotency_claims")
            .fetch_all(&other)
            .await
            .expect("the claims");
        assert_eq!(left, ["taken-over"], "the live claim is kept");
        other.close().await;
    })
    .await;
}

/// `url` with startup options that put its sessions in `schema` and add
/// `more` (already percent-encoded, `%20-c%20name%3Dvalue`).
fn url_in_schema(url: &str, schema: &str, more: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-c%20search_path%3D{schema}{more}")
}

/// What `SHOW backend_flush_after` answers on a connection of `store`'s.
async fn backend_flush_after(store: &PgStore) -> String {
    sqlx::query_scalar("SHOW backend_flush_after")
        .fetch_one(store.pool())
        .await
        .expect("show backend_flush_after")
}

/// The store's own pool asks PostgreSQL to write each session's data out
/// early, where nothing else set when (PostgreSQL's default, 0, is never).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stores_own_pool_writes_back_early() {
    in_schema(|schema| async move {
        let url = url_in_schema(&database_url(), schema.name(), "");
        let store = PgStore::connect(&url).await.expect("connect");
        assert_eq!(backend_flush_after(&store).await, "256kB");
        store.close().await;
    })
    .await;
}

/// A `backend_flush_after` the address sets is kept, 0 included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_back_setting_of_the_operators_is_kept() {
    in_schema(|schema| async move {
        for (setting, shown) in [("0", "0"), ("64", "512kB")] {
            let more = format!("%20-c%20backend_flush_after%3D{setting}");
            let url = url_in_schema(&database_url(), schema.name(), &more);
            let store = PgStore::connect(&url).await.expect("connect");
            assert_eq!(backend_flush_after(&store).await, shown);
            store.close().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_token_store_keeps_the_contract() {
    in_schema(|schema| async move {
        conformance::check_token_store(schema.store().await).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_client_registry_keeps_the_contract() {
    in_schema(|schema| async move {
        conformance::check_client_registry(schema.store().await).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_account_store_keeps_the_contract() {
    in_schema(|schema| async move {
        conformance::check_account_store(schema.store().await).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_api_key_store_keeps_the_contract() {
    in_schema(|schema| async move {
        conformance::check_api_key_store(schema.store().await).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_event_sink_keeps_the_contract_with_group_commit() {
    in_schema(|schema| async move {
        conformance::check_event_sink(schema.store().await).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_event_feed_keeps_the_contract() {
    in_schema(|schema| async move {
        // Group commit with one writer (the default), and with four, which
        // commit groups side by side, out of the order their rows were
        // numbered in.
        let store = schema.store().await;
        conformance::check_event_feed(store.clone(), store).await;
        let four = schema.store_with(four_writers()).await;
        conformance::check_event_feed(four.clone(), four).await;
        let per_call = schema.store_with(without_group_commit()).await;
        conformance::check_event_feed(per_call.clone(), per_call).await;
    })
    .await;
}

/// The feed's positions compare as numbers wherever they are sorted: a page
/// whose transaction ids cross a power of ten (9, 10, 11) ends at its
/// largest one in `skip_after` as in `read_after`. Real ids reach such a
/// boundary only now and then (CI once met it at 99,999 and 100,000), so
/// the test sets them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn feed_positions_across_a_power_of_ten_sort_as_numbers() {
    in_schema(|schema| async move {
        let store = schema.store_with(without_group_commit()).await;
        let account = AccountId(random_uuid(&OsRandom));
        for n in 0..3 {
            let outcome = store.record(&single(event(account, n))).await;
            assert!(matches!(outcome, Ok(RecordOutcome::Recorded)));
        }
        // Ids far below any running transaction's, in the order the events
        // were numbered: 9, 10, 11.
        let pool = schema.pool().await;
        sqlx::query(
            "UPDATE events SET tx_id = (8 + rank)::text::xid8
             FROM (SELECT feed_seq AS seq, rank() OVER (ORDER BY feed_seq) AS rank
                   FROM events) AS numbered
             WHERE events.feed_seq = numbered.seq",
        )
        .execute(&pool)
        .await
        .expect("set the events' transaction ids");
        let page = store
            .read_after(&FeedCursor::start(), 3)
            .await
            .expect("read_after");
        let read: Vec<_> = page
            .events
            .iter()
            .map(|e| e.conversion_identifier.clone())
            .collect();
        assert_eq!(
            read,
            ["pg-0", "pg-1", "pg-2"],
            "in the order of the ids as numbers"
        );
        assert!(page.next.as_str().starts_with("pg:11:"), "{:?}", page.next);
        let skipped = store
            .skip_after(&FeedCursor::start(), 3)
            .await
            .expect("skip_after");
        assert_eq!(
            skipped,
            (page.next.clone(), 3),
            "skip_after ends where read_after does"
        );
        // From the middle, across the boundary.
        let first = store
            .read_after(&FeedCursor::start(), 1)
            .await
            .expect("read");
        let rest = store.skip_after(&first.next, 5).await.expect("skip_after");
        assert_eq!(rest, (page.next, 2));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_event_sink_keeps_the_contract_with_four_group_writers() {
    in_schema(|schema| async move {
        conformance::check_event_sink(schema.store_with(four_writers()).await).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_event_sink_keeps_the_contract_one_commit_per_call() {
    in_schema(|schema| async move {
        conformance::check_event_sink(schema.store_with(without_group_commit()).await).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_webhook_store_keeps_the_contract() {
    in_schema(|schema| async move {
        conformance::check_webhook_store(schema.store().await).await;
        // Again, through a second pool on the same schema.
        conformance::check_webhook_store(schema.store().await).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_keep_the_contract_together() {
    in_schema(|schema| async move {
        let first = schema.store().await;
        let second = schema.store_with(without_group_commit()).await;
        tokio::join!(
            conformance::check_token_store(first.clone()),
            conformance::check_token_store(second.clone()),
            conformance::check_api_key_store(first.clone()),
            conformance::check_api_key_store(second.clone()),
            conformance::check_event_sink(first),
            conformance::check_event_sink(second),
        );
    })
    .await;
}

fn hasher() -> SecretHasher {
    SecretHasher::new([5; 32])
}

fn grant() -> Grant {
    Grant {
        id: GrantId(random_uuid(&OsRandom)),
        client_id: ClientId::generate(&OsRandom),
        account_id: AccountId(random_uuid(&OsRandom)),
        created_at: datetime!(2026-03-01 12:00:00 UTC),
        revoked_at: None,
        last_refreshed_at: None,
    }
}

fn code(grant: &Grant) -> CodeRecord {
    CodeRecord {
        hash: AuthorizationCode::generate(&OsRandom).hash(&hasher()),
        grant_id: grant.id,
        client_id: grant.client_id.clone(),
        account_id: grant.account_id,
        redirect_uri: "https://app.example/cb".into(),
        pkce: None,
        issued_at: datetime!(2026-03-01 12:00:00 UTC),
        expires_at: datetime!(2026-03-01 12:10:00 UTC),
    }
}

fn access_token(grant: &Grant) -> AccessTokenRecord {
    AccessTokenRecord {
        hash: AccessToken::generate(&OsRandom).hash(&hasher()),
        grant_id: grant.id,
        client_id: grant.client_id.clone(),
        account_id: grant.account_id,
        issued_at: datetime!(2026-03-01 12:00:00.25 UTC),
        expires_at: datetime!(2026-03-02 12:00:00.25 UTC),
        revoked: false,
    }
}

fn refresh_token(grant: &Grant) -> RefreshTokenRecord {
    RefreshTokenRecord {
        hash: RefreshToken::generate(&OsRandom).hash(&hasher()),
        grant_id: grant.id,
        client_id: grant.client_id.clone(),
        account_id: grant.account_id,
        issued_at: datetime!(2026-03-01 12:00:00 UTC),
        expires_at: None,
        predecessor: None,
        state: RefreshState::Active,
        revoked: false,
    }
}

fn event(account: AccountId, n: usize) -> RecordedEvent {
    RecordedEvent {
        event_uuid: random_uuid(&OsRandom),
        account_id: account,
        received_at: datetime!(2026-03-01 12:00:00.123456 UTC),
        event_type: "CONVERSION".into(),
        event_family: "CDP".into(),
        conversion_identifier: format!("pg-{n}"),
        email: format!("lead{n}@example.com"),
        payload: serde_json::json!({
            "conversion_identifier": format!("pg-{n}"),
            "email": format!("lead{n}@example.com"),
            "cf_score": 1.5,
            "tags": ["x", "y"],
            "nested": {"b": 1, "a": [true, null]},
        })
        .into(),
        channel: IntakeChannel::Bearer {
            client_id: ClientId::new("cgid_pg"),
        },
    }
}

fn single(event: RecordedEvent) -> EventSubmission {
    EventSubmission {
        events: vec![event],
        batch_uuid: None,
        idempotency: None,
    }
}

/// How many tasks race in the two-instance checks.
const RACERS: usize = 32;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_pools_racing_on_one_code_let_exactly_one_take_it() {
    in_schema(|schema| async move {
        let instances = [schema.store().await, schema.store().await];
        let grant = grant();
        instances[0]
            .insert_grant(&grant)
            .await
            .expect("insert_grant");
        for round in 0..5 {
            let code = code(&grant);
            instances[round % 2]
                .insert_code(&code)
                .await
                .expect("insert_code");
            let tasks: Vec<_> = (0..RACERS)
                .map(|i| {
                    let store = instances[i % 2].clone();
                    let hash = code.hash;
                    tokio::spawn(async move { store.take_code(&hash).await })
                })
                .collect();
            let mut taken = 0;
            for task in tasks {
                match task.await.expect("task").expect("take_code") {
                    CodeTake::Taken(record) => {
                        assert_eq!(record, code);
                        taken += 1;
                    }
                    CodeTake::AlreadyTaken { grant_id, .. } => assert_eq!(grant_id, grant.id),
                    other => panic!("unexpected {other:?}"),
                }
            }
            assert_eq!(taken, 1, "exactly one server instance may take a code");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_pools_racing_on_one_refresh_token_let_exactly_one_rotate_it() {
    in_schema(|schema| async move {
        let instances = [schema.store().await, schema.store().await];
        let grant = grant();
        instances[0]
            .insert_grant(&grant)
            .await
            .expect("insert_grant");
        for round in 0..5 {
            let token = refresh_token(&grant);
            instances[round % 2]
                .insert_refresh_token(&token)
                .await
                .expect("insert_refresh_token");
            let successors: Vec<_> = (0..RACERS).map(|_| refresh_token(&grant)).collect();
            let tasks: Vec<_> = successors
                .iter()
                .cloned()
                .enumerate()
                .map(|(i, successor)| {
                    let store = instances[i % 2].clone();
                    let old = token.hash;
                    let at = datetime!(2026-03-01 13:00:00 UTC);
                    let access = access_token(&grant);
                    tokio::spawn(async move {
                        store
                            .rotate_refresh_token(&old, &successor, &access, at)
                            .await
                    })
                })
                .collect();
            let mut winners = Vec::new();
            let mut named = Vec::new();
            for (task, successor) in tasks.into_iter().zip(&successors) {
                match task.await.expect("task").expect("rotate") {
                    Rotation::Rotated => winners.push(successor.hash),
                    Rotation::AlreadyRotated { successor, .. } => named.push(successor),
                    other => panic!("unexpected {other:?}"),
                }
            }
            assert_eq!(winners.len(), 1, "exactly one server instance may rotate");
            assert!(named.iter().all(|hash| *hash == winners[0]), "{named:?}");
            let mut stored = 0;
            for successor in &successors {
                if instances[1]
                    .find_refresh_token(&successor.hash)
                    .await
                    .expect("find")
                    .is_some()
                {
                    stored += 1;
                }
            }
            assert_eq!(stored, 1, "only the winner's successor is stored");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_pools_racing_with_one_idempotency_key_record_once() {
    in_schema(|schema| async move {
        let instances = [
            schema.store().await,
            schema.store_with(without_group_commit()).await,
        ];
        let account = AccountId(random_uuid(&OsRandom));
        let key = format!("race-{}", random_uuid(&OsRandom));
        let submissions: Vec<_> = (0..RACERS)
            .map(|n| EventSubmission {
                events: vec![event(account, n)],
                batch_uuid: None,
                idempotency: Some(IdempotencyClaim {
                    account_id: account,
                    scope: IdempotencyScope::Client(ClientId::new("cgid_race")),
                    key: key.clone(),
                    fingerprint: [4; 32],
                    created_at: datetime!(2026-03-01 12:00:00 UTC),
                    expires_at: datetime!(2026-03-02 12:00:00 UTC),
                }),
            })
            .collect();
        let tasks: Vec<_> = submissions
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, submission)| {
                let store = instances[i % 2].clone();
                tokio::spawn(async move { store.record(&submission).await })
            })
            .collect();
        let mut recorded = Vec::new();
        let mut replayed = Vec::new();
        for (task, submission) in tasks.into_iter().zip(&submissions) {
            match task.await.expect("task").expect("record") {
                RecordOutcome::Recorded => recorded.push(submission.events[0].event_uuid),
                RecordOutcome::Replayed { event_uuids, .. } => replayed.push(event_uuids),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(recorded.len(), 1, "exactly one instance may record");
        assert!(
            replayed.iter().all(|uuids| uuids == &recorded),
            "{replayed:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_submission_does_not_fail_its_group() {
    in_schema(|schema| async move {
        let store = schema.store().await;
        let account = AccountId(random_uuid(&OsRandom));
        let existing = event(account, 0);
        store
            .record(&single(existing.clone()))
            .await
            .expect("record");
        // Every other submission repeats a recorded uuid: those fail, and
        // the ones queued beside them in a group must still be recorded.
        let submissions: Vec<_> = (0..64)
            .map(|n| {
                if n % 2 == 0 {
                    single(existing.clone())
                } else {
                    EventSubmission {
                        events: vec![event(account, n), event(account, n + 1000)],
                        batch_uuid: Some(random_uuid(&OsRandom)),
                        idempotency: None,
                    }
                }
            })
            .collect();
        let tasks: Vec<_> = submissions
            .iter()
            .cloned()
            .map(|submission| {
                let store = store.clone();
                tokio::spawn(async move { store.record(&submission).await })
            })
            .collect();
        for (n, (task, submission)) in tasks.into_iter().zip(&submissions).enumerate() {
            let outcome = task.await.expect("task");
            if n % 2 == 0 {
                assert!(
                    matches!(outcome, Err(StoreError::Duplicate { what: "event" })),
                    "a repeated uuid is a duplicate, got {outcome:?}"
                );
            } else {
                assert_eq!(outcome.expect("record"), RecordOutcome::Recorded);
                for event in &submission.events {
                    assert_eq!(
                        store.find_event(event.event_uuid).await.expect("find"),
                        Some(event.clone())
                    );
                }
            }
        }
    })
    .await;
}

/// A submission whose key, `key`, is claimed in the scope
/// [`HELD_SCOPE`], with one event.
fn keyed(account: AccountId, key: &str, n: usize) -> EventSubmission {
    EventSubmission {
        idempotency: Some(IdempotencyClaim {
            account_id: account,
            scope: IdempotencyScope::Client(ClientId::new("cgid_pg")),
            key: key.into(),
            fingerprint: [7; 32],
            created_at: datetime!(2026-03-01 12:00 UTC),
            expires_at: datetime!(2026-03-02 12:00 UTC),
        }),
        ..single(event(account, n))
    }
}

/// The stored scope of [`keyed`]'s claims.
const HELD_SCOPE: &str = "client:cgid_pg";

/// Claims `key` in a transaction of another instance (`pool`), left open:
/// the store's claim of the same key waits for it.
async fn hold_a_claim(
    pool: &PgPool,
    account: AccountId,
    key: &str,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut tx = pool.begin().await.expect("begin");
    sqlx::query(
        "INSERT INTO idempotency_claims
             (account_id, scope, key, fingerprint, created_at, expires_at, event_uuids)
         VALUES ($1, $2, $3, '\\x00', '2026-03-01 12:00Z', '2026-03-02 12:00Z', '{}')",
    )
    .bind(account.0)
    .bind(HELD_SCOPE)
    .bind(key)
    .execute(&mut *tx)
    .await
    .expect("hold the claim");
    tx
}

/// Waits until one of the schema's backends waits for a lock: a claim of
/// the store's queued behind [`hold_a_claim`].
async fn until_a_claim_waits(pool: &PgPool, schema: &str) {
    for _ in 0..1000 {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE application_name = $1 AND wait_event_type = 'Lock'",
        )
        .bind(schema)
        .fetch_one(pool)
        .await
        .expect("read pg_stat_activity");
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no claim of the store's waited for the held one");
}

/// Holds `store`'s group writer: another instance holds the claim of `w`
/// (the transaction returned), and the store's submission claiming it
/// (the task returned) waits for it, so that what is recorded next queues
/// behind it, to be written as one group once `w` is let go.
async fn hold_the_writer(
    schema: &TestSchema,
    store: &Arc<PgStore>,
    other: &PgPool,
    account: AccountId,
) -> (
    sqlx::Transaction<'static, sqlx::Postgres>,
    tokio::task::JoinHandle<Result<RecordOutcome, StoreError>>,
) {
    let holding = hold_a_claim(other, account, "w").await;
    let first = tokio::spawn({
        let store = Arc::clone(store);
        async move { store.record(&keyed(account, "w", 0)).await }
    });
    until_a_claim_waits(other, schema.name()).await;
    (holding, first)
}

/// Queues `submissions` on `store` in their order, then waits for each
/// one's outcome: held behind a group, they are written as one group.
async fn queue_in_order<F>(record: F) -> F::Output
where
    F: Future,
{
    let mut record = std::pin::pin!(record);
    // One poll queues every submission (each `record` sends its job, to a
    // queue with room, before it first waits), in the join's order.
    std::future::poll_fn(|cx| {
        assert!(record.as_mut().poll(cx).is_pending(), "held behind a group");
        std::task::Poll::Ready(())
    })
    .await;
    record.await
}

/// Two groups that claim the same two keys in opposite orders would each
/// wait for the other, and PostgreSQL would end one with a deadlock
/// (`40P01`), answering every submission in it 503. Another instance
/// holds the claim of `a` and then claims `b`, while the store's group
/// queued `b` before `a`: the group claims `a` first, so the other
/// instance takes `b` without waiting, and once it rolls back, both of
/// the group's submissions are recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_claims_its_keys_in_one_order_and_never_deadlocks() {
    in_schema(|schema| async move {
        let store = schema.store().await;
        let other = schema.pool().await;
        let account = AccountId(random_uuid(&OsRandom));
        // The writer is held on `w` while `b` and `a` queue behind it.
        let mut holding_a = hold_a_claim(&other, account, "a").await;
        let (holding_w, first) = hold_the_writer(&schema, &store, &other, account).await;
        let (b, a) = (keyed(account, "b", 1), keyed(account, "a", 2));
        let group = queue_in_order(async {
            let both = tokio::join!(store.record(&b), store.record(&a));
            both
        });
        let other_side = async {
            holding_w.rollback().await.expect("let `w` go");
            assert_eq!(
                first.await.expect("task").expect("record `w`"),
                RecordOutcome::Recorded
            );
            until_a_claim_waits(&other, schema.name()).await;
            // The group waits for `a`. Had it claimed `b` first, this
            // would wait for the group: a deadlock.
            sqlx::query(
                "INSERT INTO idempotency_claims
                     (account_id, scope, key, fingerprint, created_at, expires_at, event_uuids)
                 VALUES ($1, $2, 'b', '\\x00', '2026-03-01 12:00Z', '2026-03-02 12:00Z', '{}')",
            )
            .bind(account.0)
            .bind(HELD_SCOPE)
            .execute(&mut *holding_a)
            .await
            .expect("`b` is free: the group has not claimed it before `a`");
            holding_a.rollback().await.expect("let `a` and `b` go");
        };
        let ((recorded_b, recorded_a), ()) = tokio::join!(group, other_side);
        for (outcome, submission) in [(recorded_b, &b), (recorded_a, &a)] {
            assert_eq!(outcome.expect("no deadlock"), RecordOutcome::Recorded);
            let event = &submission.events[0];
            assert_eq!(
                store.find_event(event.event_uuid).await.expect("find"),
                Some(event.clone())
            );
        }
        other.close().await;
    })
    .await;
}

/// A group's outcomes reach their own submissions, whatever the order its
/// keys are claimed in: queued `b` then `a`, claimed `a` then `b`, the
/// submission reusing `a`'s key with another body is refused and the one
/// with the new key `b` recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_answers_each_submission_its_own_outcome() {
    in_schema(|schema| async move {
        let store = schema.store().await;
        let other = schema.pool().await;
        let account = AccountId(random_uuid(&OsRandom));
        assert_eq!(
            store
                .record(&keyed(account, "a", 1))
                .await
                .expect("claim `a`"),
            RecordOutcome::Recorded
        );
        let (holding_w, first) = hold_the_writer(&schema, &store, &other, account).await;
        let b = keyed(account, "b", 2);
        let mut reused = keyed(account, "a", 3);
        if let Some(claim) = reused.idempotency.as_mut() {
            claim.fingerprint = [9; 32];
        }
        let group = queue_in_order(async { tokio::join!(store.record(&b), store.record(&reused)) });
        let release = async {
            holding_w.rollback().await.expect("let `w` go");
        };
        let ((b_outcome, reused_outcome), ()) = tokio::join!(group, release);
        first.await.expect("task").expect("record `w`");
        assert_eq!(b_outcome.expect("record `b`"), RecordOutcome::Recorded);
        assert_eq!(
            reused_outcome.expect("record `a` again"),
            RecordOutcome::KeyReused
        );
        other.close().await;
    })
    .await;
}

/// When a group's one-statement insert fails on one submission's data,
/// its submissions go one by one, each its own transaction. Should one of
/// those then fail on the database's side (here a trigger raising
/// `disk_full`), the ones committed before it are answered recorded, not
/// with its error (their clients would send them again), and the ones
/// after it are not tried: they are answered with its error, unstored.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_failing_one_by_one_answers_what_it_committed_as_recorded() {
    in_schema(|schema| async move {
        let store = schema.store().await;
        let other = schema.pool().await;
        sqlx::raw_sql(
            "CREATE FUNCTION disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF NEW.email = 'full@example.com' THEN
                     RAISE EXCEPTION 'no room' USING ERRCODE = 'disk_full';
                 END IF;
                 RETURN NEW;
             END $$;
             CREATE TRIGGER disk_full BEFORE INSERT ON events
                 FOR EACH ROW EXECUTE FUNCTION disk_full();",
        )
        .execute(&other)
        .await
        .expect("the trigger");
        let account = AccountId(random_uuid(&OsRandom));
        let (holding_w, first) = hold_the_writer(&schema, &store, &other, account).await;
        let good = single(event(account, 1));
        let mut refused = single(event(account, 2));
        refused.events[0].email = "nul\u{0}@example.com".into();
        let mut failing = single(event(account, 3));
        failing.events[0].email = "full@example.com".into();
        let after = single(event(account, 4));
        let group = queue_in_order(async {
            tokio::join!(
                store.record(&good),
                store.record(&refused),
                store.record(&failing),
                store.record(&after)
            )
        });
        let release = async {
            holding_w.rollback().await.expect("let `w` go");
        };
        let ((good_outcome, refused_outcome, failing_outcome, after_outcome), ()) =
            tokio::join!(group, release);
        first.await.expect("task").expect("record `w`");
        assert_eq!(
            good_outcome.expect("committed before the failure"),
            RecordOutcome::Recorded
        );
        assert_eq!(
            store
                .find_event(good.events[0].event_uuid)
                .await
                .expect("find"),
            Some(good.events[0].clone())
        );
        assert!(
            matches!(refused_outcome, Err(StoreError::Rejected { .. })),
            "{refused_outcome:?}"
        );
        for (outcome, submission) in [(failing_outcome, &failing), (after_outcome, &after)] {
            match outcome {
                Err(error @ StoreError::Backend { .. }) => {
                    assert!(error.is_retryable(), "{error:?}");
                }
                other => panic!("the trigger's failure is the database's, got {other:?}"),
            }
            assert_eq!(
                store
                    .find_event(submission.events[0].event_uuid)
                    .await
                    .expect("find"),
                None
            );
        }
        other.close().await;
    })
    .await;
}

/// A store whose connections go through `proxy`, each write attempt
/// limited to a second, with group commit or without.
async fn behind(schema: &TestSchema, proxy: &SilentProxy, group_commit: bool) -> Arc<PgStore> {
    let pool = schema.pool_through(proxy, Duration::from_secs(2)).await;
    let options = PgStoreOptions {
        group_commit,
        write_timeout: Duration::from_secs(1),
        ..PgStoreOptions::default()
    };
    Arc::new(
        PgStore::from_pool_with(pool, options)
            .await
            .expect("open the store"),
    )
}

/// How long a test lets a write take before it calls it hung: well past
/// two attempts of a second and a connection's acquire timeout.
const HUNG: Duration = Duration::from_secs(20);

/// An insert PostgreSQL committed, whose answer the network then lost: the
/// write gives its connection up after its time limit and tries again on
/// a fresh one, which finds the event stored. The call is answered
/// recorded, and the event is stored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_whose_answer_is_lost_is_tried_again_and_recorded_once() {
    in_schema(|schema| async move {
        let proxy = SilentProxy::start(schema.server_addr()).await;
        for group_commit in [true, false] {
            let store = behind(&schema, &proxy, group_commit).await;
            let account = AccountId(random_uuid(&OsRandom));
            let mut lost = single(event(account, 0));
            lost.events[0].email = "answer-lost@example.com".into();
            proxy.set(Trap::DeliverThenSilence(b"answer-lost@example.com"));
            let outcome = tokio::time::timeout(HUNG, store.record(&lost))
                .await
                .expect("the write gave up its silent connection");
            assert!(proxy.sprung(), "the insert went through the proxy");
            if group_commit {
                assert_eq!(outcome.expect("tried again"), RecordOutcome::Recorded);
            } else {
                // Without group commit the call is not tried again: it
                // is answered retryable, and the insert stands.
                let error = outcome.expect_err("the answer was lost");
                assert!(error.is_retryable(), "{error:?}");
            }
            assert_eq!(
                store
                    .find_event(lost.events[0].event_uuid)
                    .await
                    .expect("find"),
                Some(lost.events[0].clone())
            );
            let next = single(event(account, 1));
            assert_eq!(
                store.record(&next).await.expect("the store writes on"),
                RecordOutcome::Recorded
            );
        }
    })
    .await;
}

/// A group that fell back to one insert at a time, one of which was
/// committed and its answer then lost (the connection broken right after
/// the insert reached the server, or silent after it), is tried again
/// whole on a fresh connection, skipping what is stored: that submission
/// is answered recorded, not with the lost connection's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_one_by_one_whose_answer_is_lost_is_tried_again() {
    for trap in [
        Trap::DeliverThenClose(b"one-by-one-lost@example.com"),
        Trap::DeliverThenSilence(b"one-by-one-lost@example.com"),
    ] {
        a_group_one_by_one_loses_an_answer(trap).await;
    }
}

async fn a_group_one_by_one_loses_an_answer(trap: Trap) {
    in_schema(|schema| async move {
        let proxy = SilentProxy::start(schema.server_addr()).await;
        let store = behind(&schema, &proxy, true).await;
        let other = schema.pool().await;
        let account = AccountId(random_uuid(&OsRandom));
        let (holding_w, first) = hold_the_writer(&schema, &store, &other, account).await;
        let good = single(event(account, 1));
        let mut refused = single(event(account, 2));
        refused.events[0].email = "nul\u{0}@example.com".into();
        let mut lost = single(event(account, 3));
        lost.events[0].email = "one-by-one-lost@example.com".into();
        // The group's insert, refused for the U+0000, carries it first.
        proxy.set_after(trap, 1);
        let group = queue_in_order(async {
            tokio::join!(
                store.record(&good),
                store.record(&refused),
                store.record(&lost)
            )
        });
        let release = async {
            holding_w.rollback().await.expect("let `w` go");
        };
        let ((good_outcome, refused_outcome, lost_outcome), ()) =
            tokio::time::timeout(HUNG, async { tokio::join!(group, release) })
                .await
                .expect("the write gave up its silent connection");
        first.await.expect("task").expect("record `w`");
        assert!(proxy.sprung(), "the lone insert went through the proxy");
        assert!(
            matches!(refused_outcome, Err(StoreError::Rejected { .. })),
            "{refused_outcome:?}"
        );
        for (outcome, submission) in [(good_outcome, &good), (lost_outcome, &lost)] {
            assert_eq!(outcome.expect("tried again"), RecordOutcome::Recorded);
            assert_eq!(
                store
                    .find_event(submission.events[0].event_uuid)
                    .await
                    .expect("find"),
                Some(submission.events[0].clone())
            );
        }
        other.close().await;
    })
    .await;
}

/// A transaction whose COMMIT the network swallowed is left open on the
/// server, holding its idempotency key's row. The writer gives its
/// connection up after its time limit; PostgreSQL rolls the open
/// transaction back once it has idled as long
/// (`idle_in_transaction_session_timeout`), so the retry, and the key's
/// later requests, do not wait for it: the event is recorded once, and a
/// retry of the request is a replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transaction_left_open_by_a_silent_network_frees_its_key() {
    in_schema(|schema| async move {
        let proxy = SilentProxy::start(schema.server_addr()).await;
        let store = behind(&schema, &proxy, true).await;
        let account = AccountId(random_uuid(&OsRandom));
        let submission = keyed(account, "swallowed", 0);
        proxy.set(Trap::Swallow(b"COMMIT"));
        let outcome = tokio::time::timeout(HUNG, store.record(&submission))
            .await
            .expect("the write gave up its silent connection");
        assert!(proxy.sprung(), "the COMMIT went through the proxy");
        assert_eq!(outcome.expect("tried again"), RecordOutcome::Recorded);
        let event = &submission.events[0];
        assert_eq!(
            store.find_event(event.event_uuid).await.expect("find"),
            Some(event.clone())
        );
        let mut again = keyed(account, "swallowed", 1);
        again.events = submission.events.clone();
        match store.record(&again).await.expect("the key is free to read") {
            RecordOutcome::Replayed { event_uuids, .. } => {
                assert_eq!(event_uuids, [event.event_uuid]);
            }
            other => panic!("a retry of the request is a replay, got {other:?}"),
        }
    })
    .await;
}

/// When every connection goes silent, a write is answered with a
/// retryable error after its attempts' time limits, not held for as long
/// as the sockets stay open. With group commit, the writer's connection,
/// kept from the write before, goes silent under its group, and the retry
/// finds no connection; without, the connection goes silent once the
/// insert is sent (the pool's liveness ping, before, would catch a
/// connection silent already), and the next call gets a fresh one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_on_a_silent_network_is_refused_in_bounded_time() {
    in_schema(|schema| async move {
        for group_commit in [true, false] {
            let proxy = SilentProxy::start(schema.server_addr()).await;
            let store = behind(&schema, &proxy, group_commit).await;
            let account = AccountId(random_uuid(&OsRandom));
            store
                .record(&single(event(account, 0)))
                .await
                .expect("a connection in use before the silence");
            let mut unanswered = single(event(account, 1));
            unanswered.events[0].email = "unanswered@example.com".into();
            if group_commit {
                proxy.silence_all();
            } else {
                proxy.set(Trap::Swallow(b"unanswered@example.com"));
            }
            let outcome = tokio::time::timeout(HUNG, store.record(&unanswered))
                .await
                .expect("the write gave up its silent connection");
            let error = outcome.expect_err("nothing gets through");
            assert!(error.is_retryable(), "{error:?}");
            if !group_commit {
                assert!(proxy.sprung(), "the insert went through the proxy");
                assert_eq!(
                    store
                        .record(&single(event(account, 2)))
                        .await
                        .expect("record"),
                    RecordOutcome::Recorded,
                    "the silent connection is not used again"
                );
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn data_the_database_refuses_is_rejected_not_a_retryable_outage() {
    in_schema(|schema| async move {
        for store in [
            schema.store().await,
            schema.store_with(without_group_commit()).await,
        ] {
            let account = AccountId(random_uuid(&OsRandom));
            // PostgreSQL's text cannot hold U+0000. The validator refuses
            // such events before they reach a store; a store that meets
            // one anyway must not answer "retry later" forever.
            let mut in_email = event(account, 0);
            in_email.email = "nul\u{0}@example.com".into();
            let mut in_name = event(account, 1);
            in_name.conversion_identifier = "nul\u{0}".into();
            let good = event(account, 2);
            let submissions = [single(in_email), single(in_name), single(good.clone())];
            let tasks: Vec<_> = submissions
                .iter()
                .cloned()
                .map(|submission| {
                    let store = store.clone();
                    tokio::spawn(async move { store.record(&submission).await })
                })
                .collect();
            let mut outcomes = Vec::new();
            for task in tasks {
                outcomes.push(task.await.expect("task"));
            }
            for outcome in &outcomes[..2] {
                match outcome {
                    Err(error @ StoreError::Rejected { .. }) => {
                        // Not retryable, hence answered 422 without
                        // Retry-After (src/answer.rs tests that mapping).
                        assert!(!error.is_retryable(), "{error:?}");
                    }
                    other => panic!("a U+0000 must be Rejected, got {other:?}"),
                }
            }
            assert_eq!(
                outcomes[2].as_ref().expect("the good neighbour records"),
                &RecordOutcome::Recorded
            );
            assert_eq!(
                store.find_event(good.event_uuid).await.expect("find"),
                Some(good)
            );
            // The payload is JSON text (`text`, migration 10): an escaped
            // U+0000 in it, which `jsonb` refused, is kept as written.
            let mut in_payload = event(account, 3);
            let mut payload = in_payload.payload.to_value();
            payload["name"] = "x\u{0}y".into();
            in_payload.payload = payload.into();
            let text = in_payload.payload.as_str().to_owned();
            assert!(text.contains("\\u0000"), "{text}");
            store
                .record(&single(in_payload.clone()))
                .await
                .expect("an escaped U+0000 in the payload is stored");
            let stored = store.find_event(in_payload.event_uuid).await.expect("find");
            assert_eq!(stored, Some(in_payload));
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokens_and_events_survive_a_restart() {
    in_schema(|schema| async move {
        let store = schema.store().await;
        let grant = grant();
        store.insert_grant(&grant).await.expect("insert_grant");
        let tokens: Vec<_> = (0..10).map(|_| access_token(&grant)).collect();
        for token in &tokens {
            store.insert_access_token(token).await.expect("insert");
        }
        let account = AccountId(random_uuid(&OsRandom));
        let events: Vec<_> = (0..10).map(|n| event(account, n)).collect();
        let tasks: Vec<_> = events
            .iter()
            .cloned()
            .map(|event| {
                let store = store.clone();
                tokio::spawn(async move { store.record(&single(event)).await })
            })
            .collect();
        for task in tasks {
            assert_eq!(
                task.await.expect("task").expect("record"),
                RecordOutcome::Recorded
            );
        }
        store.close().await;
        drop(store);

        // A new pool on the same database: a restarted server instance.
        let restarted = schema.store().await;
        assert_eq!(
            restarted.find_grant(grant.id).await.expect("find"),
            Some(grant)
        );
        for token in &tokens {
            assert_eq!(
                restarted
                    .find_access_token(&token.hash)
                    .await
                    .expect("find"),
                Some(token.clone()),
                "an acknowledged token is kept across a restart"
            );
        }
        for event in &events {
            assert_eq!(
                restarted.find_event(event.event_uuid).await.expect("find"),
                Some(event.clone()),
                "an acknowledged event is kept across a restart"
            );
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instances_starting_together_migrate_once() {
    in_schema(|schema| async move {
        let (a, b, c) = tokio::join!(schema.store(), schema.store(), schema.store());
        let grant = grant();
        a.insert_grant(&grant).await.expect("insert_grant");
        let outcome = b.find_grant(grant.id).await.expect("find");
        assert!(outcome.is_some(), "{outcome:?}");
        let outcome = c.find_grant(grant.id).await.expect("find");
        assert!(outcome.is_some(), "{outcome:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unreachable_database_is_a_backend_error() {
    // Port 1 on the loopback: nothing listens, connections are refused.
    let options = PgStoreOptions {
        acquire_timeout: Duration::from_millis(500),
        ..PgStoreOptions::default()
    };
    let result = PgStore::connect_with("postgres://postgres@127.0.0.1:1/test", options).await;
    assert!(
        matches!(result, Err(StoreError::Backend { .. })),
        "got {result:?}"
    );

    let result = PgStore::connect("not a postgres address").await;
    assert!(
        matches!(result, Err(StoreError::Backend { .. })),
        "{result:?}"
    );

    // A lazily connecting pool fails on first use, in the migrations.
    let lazy = PgPoolOptions::new()
        .acquire_timeout(Duration::from_millis(500))
        .connect_lazy("postgres://postgres@127.0.0.1:1/test")
        .expect("a lazy pool");
    let result = PgStore::from_pool(lazy).await;
    assert!(
        matches!(result, Err(StoreError::Backend { .. })),
        "{result:?}"
    );
}

/// Connections of the store's pool in use (not idle).
fn connections_in_use(store: &PgStore) -> usize {
    usize::try_from(store.pool().size()).expect("a pool size") - store.pool().num_idle()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_group_writer_keeps_its_connection_through_short_pauses_not_through_close() {
    in_schema(|schema| async move {
        let store = schema.store().await;
        let account = AccountId(random_uuid(&OsRandom));
        for n in 0..2 {
            let outcome = store.record(&single(event(account, n))).await;
            assert_eq!(outcome.expect("recorded"), RecordOutcome::Recorded);
            // Between groups the writer keeps its connection: the next
            // group needs no checkout and no liveness ping.
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert_eq!(connections_in_use(&store), 1, "after group {n}");
        }
        // A pause longer than the writer keeps it: the connection is back.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(connections_in_use(&store), 0);
        // Busy again, then closed: `close` waits for every connection, and
        // the writer gives its own back at once, not after the pause.
        let outcome = store.record(&single(event(account, 2))).await;
        assert_eq!(outcome.expect("recorded"), RecordOutcome::Recorded);
        assert_eq!(connections_in_use(&store), 1);
        tokio::time::timeout(Duration::from_millis(500), store.close())
            .await
            .expect("close took the writer's connection back at once");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_closed_pool_is_a_backend_error_never_a_panic() {
    in_schema(|schema| async move {
        for options in [PgStoreOptions::default(), without_group_commit()] {
            let store = schema.store_with(options).await;
            store.close().await;
            let grant = grant();
            assert!(matches!(
                store.insert_grant(&grant).await,
                Err(StoreError::Backend { .. })
            ));
            assert!(matches!(
                store.take_code(&code(&grant).hash).await,
                Err(StoreError::Backend { .. })
            ));
            let outcome = store.record(&single(event(grant.account_id, 0))).await;
            assert!(
                matches!(outcome, Err(StoreError::Backend { .. })),
                "got {outcome:?}"
            );
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_default_refresh_policy_serves_both_kinds_of_client() {
    use conversion_gateway_testkit::refresh_scenarios::{SCENARIOS, scenario};
    // A schema per scenario: every fixture registers the same seeded apps.
    for n in 0..SCENARIOS {
        in_schema(move |schema| async move {
            let store = schema.store().await;
            let stores = conversion_gateway::Stores::sharing(store);
            scenario(
                n,
                conversion_gateway_testkit::Fixture::with_stores(stores, |_| {}).await,
            )
            .await;
        })
        .await;
    }
}

/// Transient connection loss: the store's backends are terminated every
/// 0.3 s while 64 writers record 10,000 events (one in ten with an
/// `Idempotency-Key`). A group whose connection died is retried once on a
/// fresh connection, so refusals stay within a handful, and every event
/// acknowledged is stored, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_backends_during_a_burst_cost_no_acknowledged_event_and_few_refusals() {
    const EVENTS: usize = 10_000;
    const WRITERS: usize = 64;
    /// "A handful": without the retry, about 1.2% were refused.
    const MAX_REFUSALS: usize = 10;
    in_schema(|schema| async move {
        let store = schema.store().await;
        let account = AccountId(random_uuid(&OsRandom));
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .connect(&schema.url)
            .await
            .expect("an admin connection");
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let killer = {
            let (admin, done, name) = (admin.clone(), done.clone(), schema.name.clone());
            tokio::spawn(async move {
                let mut killed = 0;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    let terminated: Vec<bool> = sqlx::query_scalar(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                         WHERE application_name = $1",
                    )
                    .bind(&name)
                    .fetch_all(&admin)
                    .await
                    .expect("terminate the store's backends");
                    killed += terminated.len();
                }
                killed
            })
        };
        let writers: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let store = store.clone();
                tokio::spawn(async move {
                    let (mut acknowledged, mut refused) = (Vec::new(), 0);
                    for n in (writer..EVENTS).step_by(WRITERS) {
                        let event = event(account, n);
                        let mut submission = single(event.clone());
                        if n % 10 == 0 {
                            submission.idempotency = Some(IdempotencyClaim {
                                account_id: account,
                                scope: IdempotencyScope::Client(ClientId::new("cgid_pg")),
                                key: format!("burst-{n}"),
                                fingerprint: [n as u8; 32],
                                created_at: datetime!(2026-03-01 12:00 UTC),
                                expires_at: datetime!(2026-03-02 12:00 UTC),
                            });
                        }
                        match store.record(&submission).await {
                            Ok(outcome) => {
                                assert_eq!(outcome, RecordOutcome::Recorded, "event {n}");
                                acknowledged.push(event.event_uuid);
                            }
                            Err(error) => {
                                assert!(
                                    matches!(error, StoreError::Backend { .. }),
                                    "only the backend may fail, got {error:?}"
                                );
                                refused += 1;
                            }
                        }
                    }
                    (acknowledged, refused)
                })
            })
            .collect();
        let (mut acknowledged, mut refused) = (Vec::new(), 0);
        for writer in writers {
            let (uuids, refusals) = writer.await.expect("a writer");
            acknowledged.extend(uuids);
            refused += refusals;
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let killed = killer.await.expect("the killer");
        assert!(killed > 0, "no backend was terminated during the burst");

        let stored: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM {}.events WHERE event_uuid = ANY($1)",
            schema.name
        ))
        .bind(&acknowledged)
        .fetch_one(&admin)
        .await
        .expect("count the stored events");
        assert_eq!(
            stored as usize,
            acknowledged.len(),
            "every acknowledged event is stored ({killed} backends terminated)"
        );
        assert_eq!(acknowledged.len() + refused, EVENTS);
        assert!(
            refused <= MAX_REFUSALS,
            "{refused} of {EVENTS} refused with {killed} backends terminated"
        );
        admin.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_feed_waits_for_a_transaction_that_numbered_its_event_earlier() {
    in_schema(|schema| async move {
        let store = schema.store().await;
        let account = AccountId(random_uuid(&OsRandom));
        let early = event(account, 1);
        let late = event(account, 2);
        // A writer draws its sequence number and holds its transaction open.
        let pool = schema.pool().await;
        let mut held = pool.begin().await.expect("begin");
        sqlx::query(
            "INSERT INTO events (event_uuid, account_id, received_at, event_type, event_family,
                                 conversion_identifier, email, payload, channel)
             VALUES ($1, $2, now(), 'CONVERSION', 'CDP', 'held', 'held@example.com',
                     '{}'::jsonb, '{\"kind\":\"api_key\"}'::jsonb)",
        )
        .bind(early.event_uuid)
        .bind(account.0)
        .execute(&mut *held)
        .await
        .expect("insert in the held transaction");
        // Another commits an event numbered after it.
        let submission = EventSubmission {
            events: vec![late.clone()],
            batch_uuid: None,
            idempotency: None,
        };
        assert_eq!(
            store.record(&submission).await.unwrap(),
            RecordOutcome::Recorded
        );
        let page = store.read_after(&FeedCursor::start(), 10).await.unwrap();
        assert!(
            page.events.is_empty(),
            "the later event waits while an earlier-numbered one may still commit: {:?}",
            page.events
        );
        held.commit().await.expect("commit");
        let order: Vec<_> = read_feed_until(&store, page.next, 2)
            .await
            .iter()
            .map(|e| e.event_uuid)
            .collect();
        assert_eq!(
            order,
            [early.event_uuid, late.event_uuid],
            "both now, the held transaction's first (by transaction id)"
        );
        pool.close().await;
    })
    .await;
}

/// The feed's events after `cursor`, read on from each page's cursor until
/// at least `count` have come (10 s at most). The feed shows an event once
/// every transaction older than its own has ended, on the whole server: a
/// test running beside this one on the same server may hold an event back
/// for a moment, behind its own open transaction.
async fn read_feed_until(
    store: &PgStore,
    mut cursor: FeedCursor,
    count: usize,
) -> Vec<RecordedEvent> {
    let mut events = Vec::new();
    for _ in 0..500 {
        let page = store.read_after(&cursor, 10).await.expect("read the feed");
        events.extend(page.events);
        cursor = page.next;
        if events.len() >= count {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    events
}

/// The migrations as they shipped, in order: `SHIPPED[..n]` is the schema
/// a release that ran migrations 1 to `n` left behind.
const SHIPPED: [&str; 10] = [
    include_str!("../../migrations/postgres/0001_initial.sql"),
    include_str!("../../migrations/postgres/0002_idempotency_scope.sql"),
    include_str!("../../migrations/postgres/0003_purge_indexes.sql"),
    include_str!("../../migrations/postgres/0004_adaptive_refresh.sql"),
    include_str!("../../migrations/postgres/0005_client_lifecycle.sql"),
    include_str!("../../migrations/postgres/0006_event_feed.sql"),
    include_str!("../../migrations/postgres/0007_event_json_text.sql"),
    include_str!("../../migrations/postgres/0008_drop_events_by_account.sql"),
    include_str!("../../migrations/postgres/0009_webhooks.sql"),
    include_str!("../../migrations/postgres/0010_event_text.sql"),
];

/// Brings the empty schema of `pool` to what a release that ran the first
/// `migrations` of [`SHIPPED`] left, its versions recorded as the store
/// records them.
async fn migrated_as_shipped(pool: &PgPool, migrations: usize) {
    sqlx::raw_sql(
        "CREATE TABLE schema_version (
             version     BIGINT      PRIMARY KEY,
             applied_at  TIMESTAMPTZ NOT NULL DEFAULT now()
         )",
    )
    .execute(pool)
    .await
    .expect("the version table");
    for (version, sql) in (1_i64..).zip(&SHIPPED[..migrations]) {
        sqlx::raw_sql(sql)
            .execute(pool)
            .await
            .expect("a shipped migration");
        sqlx::query("INSERT INTO schema_version (version) VALUES ($1)")
            .bind(version)
            .execute(pool)
            .await
            .expect("its version");
    }
}

/// Stores `event` as a release before migration 10 did, its payload and
/// channel cast to `column_type` (`jsonb` before migration 7, `json` after).
async fn insert_as_released(pool: &PgPool, event: &RecordedEvent, column_type: &str) {
    sqlx::query(&format!(
        "INSERT INTO events
             (event_uuid, account_id, received_at, event_type, event_family,
              conversion_identifier, email, payload, channel)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8::{column_type}, $9::{column_type})"
    ))
    .bind(event.event_uuid)
    .bind(event.account_id.0)
    .bind(event.received_at)
    .bind(&event.event_type)
    .bind(&event.event_family)
    .bind(&event.conversion_identifier)
    .bind(&event.email)
    .bind(event.payload.as_str())
    .bind(serde_json::to_string(&event.channel).expect("the channel's JSON"))
    .execute(pool)
    .await
    .expect("an event as an earlier release stored it");
}

/// The types of the events' `payload` and `channel` columns in `schema`.
async fn event_json_column_types(pool: &PgPool, schema: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT data_type::text FROM information_schema.columns
         WHERE table_schema = $1 AND table_name = 'events'
           AND column_name IN ('payload', 'channel')",
    )
    .bind(schema)
    .fetch_all(pool)
    .await
    .expect("the column types")
}

/// An event whose payload's members are in no sorted order, with spaces:
/// the text a validator might write, which a round trip through a `Value`
/// (or `jsonb`) would change.
fn event_with_unsorted_payload(account: AccountId, n: usize) -> RecordedEvent {
    let mut event = event(account, n);
    event.payload = EventPayload::from_json_text(format!(
        r#"{{"tags": ["x"], "email": "lead{n}@example.com", "conversion_identifier": "pg-{n}"}}"#
    ))
    .expect("JSON");
    event
}

/// An upgrade loses nothing: events stored as `jsonb` before migration 7
/// read back as the same events after it (their payload's members in
/// `jsonb`'s order, an equal object), and events recorded after it keep
/// their payload's text byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_stored_as_jsonb_read_back_the_same_after_the_upgrade() {
    in_schema(|schema| async move {
        let pool = schema.pool().await;
        migrated_as_shipped(&pool, 6).await;
        let account = AccountId(random_uuid(&OsRandom));
        let before = event(account, 0);
        insert_as_released(&pool, &before, "jsonb").await;

        let store = PgStore::from_pool_with(pool.clone(), PgStoreOptions::default())
            .await
            .expect("open the store: migrations 7 to 10");
        let read = store
            .find_event(before.event_uuid)
            .await
            .expect("find")
            .expect("the event stored before the upgrade");
        assert_eq!(read, before);
        assert_ne!(
            read.payload.as_str(),
            before.payload.as_str(),
            "jsonb reordered the members; the test must show equality despite that"
        );

        let after = event_with_unsorted_payload(account, 1);
        store.record(&single(after.clone())).await.expect("record");
        let read = store
            .find_event(after.event_uuid)
            .await
            .expect("find")
            .expect("the event recorded after the upgrade");
        assert_eq!(read.payload.as_str(), after.payload.as_str());
        assert_eq!(
            event_json_column_types(&pool, &schema.name).await,
            ["text", "text"]
        );
    })
    .await;
}

/// Migration 10 keeps every event as it was: a payload stored as `json`
/// (which keeps its text) reads back byte for byte, from `find_event` and
/// from the feed, beside an event recorded after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_stored_as_json_read_back_byte_for_byte_after_the_upgrade() {
    in_schema(|schema| async move {
        let pool = schema.pool().await;
        migrated_as_shipped(&pool, 9).await;
        assert_eq!(
            event_json_column_types(&pool, &schema.name).await,
            ["json", "json"]
        );
        let account = AccountId(random_uuid(&OsRandom));
        let before = event_with_unsorted_payload(account, 0);
        insert_as_released(&pool, &before, "json").await;

        let store = PgStore::from_pool_with(pool.clone(), PgStoreOptions::default())
            .await
            .expect("open the store: migration 10");
        assert_eq!(
            event_json_column_types(&pool, &schema.name).await,
            ["text", "text"]
        );
        let after = event_with_unsorted_payload(account, 1);
        store.record(&single(after.clone())).await.expect("record");
        for event in [&before, &after] {
            let read = store
                .find_event(event.event_uuid)
                .await
                .expect("find")
                .expect("the event");
            assert_eq!(&read, event);
            assert_eq!(read.payload.as_str(), event.payload.as_str());
        }
        let events = read_feed_until(&store, FeedCursor::start(), 2).await;
        let payloads: Vec<&str> = events.iter().map(|e| e.payload.as_str()).collect();
        assert_eq!(payloads, [before.payload.as_str(), after.payload.as_str()]);
    })
    .await;
}

/// PostgreSQL no longer checks that a payload or a channel is JSON
/// (migration 10): the store does, reading them back. A row whose text is
/// not JSON is reported as malformed, naming the column, not read as an
/// event.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_event_whose_stored_json_is_not_json_reads_as_malformed() {
    in_schema(|schema| async move {
        let store = schema.store().await;
        let pool = schema.pool().await;
        let account = AccountId(random_uuid(&OsRandom));
        for (n, column) in [(0, "payload"), (1, "channel")] {
            let event = event(account, n);
            store.record(&single(event.clone())).await.expect("record");
            sqlx::query(&format!(
                "UPDATE events SET {column} = '{{\"cut\": ' WHERE event_uuid = $1"
            ))
            .bind(event.event_uuid)
            .execute(&pool)
            .await
            .expect("damage the row");
            let error = store
                .find_event(event.event_uuid)
                .await
                .expect_err("a damaged row is not an event");
            let StoreError::Backend { action, source } = &error else {
                panic!("a damaged row is a backend failure: {error:?}");
            };
            assert_eq!(*action, "read an event");
            assert_eq!(
                source.to_string(),
                format!("the stored {column} is malformed")
            );
        }
    })
    .await;
}

/// A schema of its own, for the long-lived tests: a restart closes the
/// store's pool and connects again, as a restarted server instance would.
struct SchemaStores {
    schema: TestSchema,
    store: Arc<PgStore>,
}

impl SchemaStores {
    async fn admin(url: &str) -> PgPool {
        PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(10))
            .connect(url)
            .await
            .unwrap_or_else(|error| {
                panic!("cannot connect to DATABASE_URL ({error}).\n{NO_DATABASE}")
            })
    }
}

#[async_trait::async_trait]
impl conversion_gateway_testkit::restartable::Restartable for SchemaStores {
    const NAME: &'static str = "postgres";

    async fn start() -> Self {
        let url = database_url();
        let admin = Self::admin(&url).await;
        let name = format!("cg_test_{}", random_uuid(&OsRandom).simple());
        sqlx::raw_sql(&format!("CREATE SCHEMA {name}"))
            .execute(&admin)
            .await
            .expect("create the test schema");
        admin.close().await;
        let schema = TestSchema { url, name };
        let store = schema.store().await;
        Self { schema, store }
    }

    fn stores(&self) -> conversion_gateway::Stores {
        conversion_gateway::Stores::sharing(self.store.clone())
    }

    async fn restart(&mut self) {
        self.store.close().await;
        self.store = self.schema.store().await;
    }

    async fn stop(self) {
        self.store.close().await;
        let admin = Self::admin(&self.schema.url).await;
        sqlx::raw_sql(&format!("DROP SCHEMA {} CASCADE", self.schema.name))
            .execute(&admin)
            .await
            .expect("drop the test schema");
        admin.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_client_stays_connected_for_35_days_on_postgres() {
    conversion_gateway_testkit::official_client::the_official_client_stays_connected::<SchemaStores>()
        .await;
}

#[test]
fn model_lifecycle_on_postgres() {
    conversion_gateway_testkit::model::model_lifecycle::<SchemaStores>(
        32,
        60,
        "proptest-regressions/model_lifecycle_on_postgres.txt",
    );
}

#[test]
fn model_idempotency_on_postgres() {
    conversion_gateway_testkit::model::model_idempotency::<SchemaStores>(
        24,
        40,
        "proptest-regressions/model_idempotency_on_postgres.txt",
    );
}

/// The upgrade to migration 11 marks the head of each contact's queue that
/// a release before it left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queues_left_by_an_earlier_release_are_leased_in_order_after_the_upgrade() {
    use crate::webhooks::{QUEUES_AS_RELEASED, check_queues_after_upgrade};
    use conversion_gateway::{DeliveryId, WebhookId};
    in_schema(|schema| async move {
        let pool = schema.pool().await;
        migrated_as_shipped(&pool, 10).await;
        let start = datetime!(2026-03-01 12:00:00 UTC);
        let webhook = WebhookId(random_uuid(&OsRandom));
        sqlx::query(
            "INSERT INTO webhooks
                 (id, account_id, client_id, event_type, url, event_identifiers,
                  include_relations, status, created_at, updated_at, secret_salt)
             VALUES ($1, $2, 'cgid_upgrade', 'WEBHOOK.CONVERTED', 'https://hooks.example/up',
                     '[]', '[]', 'active', $3, $3, $4)",
        )
        .bind(webhook.0)
        .bind(random_uuid(&OsRandom))
        .bind(start)
        .bind(random_uuid(&OsRandom).into_bytes().to_vec())
        .execute(&pool)
        .await
        .expect("a webhook as released");
        let mut ids = Vec::new();
        for (contact, state) in QUEUES_AS_RELEASED {
            let id = DeliveryId(random_uuid(&OsRandom));
            sqlx::query(
                "INSERT INTO webhook_deliveries
                     (id, webhook_id, event_uuid, contact_key, body, created_at, state,
                      next_attempt_at, finished_at)
                 VALUES ($1, $2, $3, $4, '{}', $5, $6, $5, $7)",
            )
            .bind(id.0)
            .bind(webhook.0)
            .bind(random_uuid(&OsRandom))
            .bind(contact)
            .bind(start)
            .bind(state)
            .bind((state == "delivered").then_some(start))
            .execute(&pool)
            .await
            .expect("a delivery as released");
            ids.push(id);
        }
        let store = PgStore::from_pool_with(pool.clone(), PgStoreOptions::default())
            .await
            .expect("open the store: migration 11");
        check_queues_after_upgrade(&store, webhook, &ids).await;
    })
    .await;
}
