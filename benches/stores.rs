//! Throughput of the stores: conversion events recorded through each event
//! sink (memory, SQLite, PostgreSQL one commit per event, PostgreSQL with
//! group commit) at 1 and at 32 concurrent writers, access tokens
//! inserted then looked up, and the webhook dispatcher's pages of
//! [`DISPATCH_PAGE`] deliveries recorded with the cursor's move.
//!
//! Every recorded event is acknowledged only once durable (SQLite
//! `synchronous = FULL`, PostgreSQL `synchronous_commit` as the server has
//! it), so the numbers include the disk flushes. Throughput is printed as
//! `elem/s`: events (or tokens) per second.
//!
//! Needs a PostgreSQL server named by `DATABASE_URL`; it works in a schema
//! of its own, dropped at the end. Run with
//! `cargo bench --bench stores --all-features`.

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use conversion_gateway::{
    AccessToken, AccessTokenRecord, AccountId, ClientId, DISPATCH_PAGE, Delivery, DeliveryId,
    EventSink, EventSubmission, FeedCursor, Grant, GrantId, IntakeChannel, MemoryEventSink,
    MemoryTokenStore, MemoryWebhookStore, OsRandom, PgStore, PgStoreOptions, RecordOutcome,
    RecordedEvent, SecretHasher, SqliteStore, TokenStore, Webhook, WebhookEventType, WebhookId,
    WebhookStatus, WebhookStore, random_uuid, time_ordered_uuid,
};
use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use time::OffsetDateTime;
use tokio::runtime::Runtime;

const NO_DATABASE: &str = "\
DATABASE_URL is not set: the store benchmarks need a PostgreSQL server. Start one, e.g.
    docker run --rm -e POSTGRES_HOST_AUTH_METHOD=trust -e POSTGRES_DB=test -p 5432:5432 postgres:16
then
    export DATABASE_URL=postgres://postgres@127.0.0.1:5432/test";

/// The concurrent writer counts measured.
const WRITERS: [usize; 2] = [1, 32];

fn event(account: AccountId, n: u64) -> EventSubmission {
    EventSubmission {
        events: vec![RecordedEvent {
            event_uuid: random_uuid(&OsRandom),
            account_id: account,
            received_at: OffsetDateTime::now_utc(),
            event_type: "CONVERSION".into(),
            event_family: "CDP".into(),
            conversion_identifier: "newsletter-signup".into(),
            email: format!("lead{n}@example.com"),
            payload: serde_json::json!({
                "conversion_identifier": "newsletter-signup",
                "email": format!("lead{n}@example.com"),
                "name": "Lead Name",
                "tags": ["newsletter", "spring"],
                "traffic_source": "google",
                "cf_plan": "gold",
            })
            .into(),
            channel: IntakeChannel::ApiKey,
        }],
        batch_uuid: None,
        idempotency: None,
    }
}

/// Records `total` single-event submissions through `sink` from `writers`
/// concurrent tasks; the time from the first to the last acknowledgement.
async fn record_events(sink: Arc<dyn EventSink>, total: u64, writers: usize) -> Duration {
    let account = AccountId(random_uuid(&OsRandom));
    let writers = writers as u64;
    // Built before the clock starts: the bench measures the store.
    let shares: Vec<Vec<EventSubmission>> = (0..writers)
        .map(|w| {
            let share = total / writers + u64::from(w < total % writers);
            (0..share).map(|n| event(account, n)).collect()
        })
        .collect();
    let start = Instant::now();
    let tasks: Vec<_> = shares
        .into_iter()
        .map(|share| {
            let sink = sink.clone();
            tokio::spawn(async move {
                for submission in share {
                    let outcome = sink.record(&submission).await.expect("record");
                    assert_eq!(outcome, RecordOutcome::Recorded);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("writer");
    }
    start.elapsed()
}

/// Inserts `total` access tokens and looks each one up.
async fn insert_and_find_tokens(store: Arc<dyn TokenStore>, grant: &Grant, total: u64) -> Duration {
    let hasher = SecretHasher::new([9; 32]);
    let now = OffsetDateTime::now_utc();
    let tokens: Vec<_> = (0..total)
        .map(|_| AccessTokenRecord {
            hash: AccessToken::generate(&OsRandom).hash(&hasher),
            grant_id: grant.id,
            client_id: grant.client_id.clone(),
            account_id: grant.account_id,
            issued_at: now,
            expires_at: now + time::Duration::days(1),
            revoked: false,
        })
        .collect();
    let start = Instant::now();
    for token in &tokens {
        store.insert_access_token(token).await.expect("insert");
        let found = store.find_access_token(&token.hash).await.expect("find");
        assert!(found.is_some_and(|found| !found.revoked));
    }
    start.elapsed()
}

/// The PostgreSQL schema the bench works in, and pools on it.
struct BenchSchema {
    admin: PgPool,
    url: String,
    name: String,
}

impl BenchSchema {
    async fn create(url: String) -> Self {
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(10))
            .connect(&url)
            .await
            .unwrap_or_else(|error| {
                panic!("cannot connect to DATABASE_URL ({error}).\n{NO_DATABASE}")
            });
        let name = format!("cg_bench_{}", random_uuid(&OsRandom).simple());
        sqlx::query(&format!("CREATE SCHEMA {name}"))
            .execute(&admin)
            .await
            .expect("create the bench schema");
        Self { admin, url, name }
    }

    async fn store(&self, connections: u32, group_commit: bool) -> Arc<PgStore> {
        let options = PgConnectOptions::from_str(&self.url)
            .expect("DATABASE_URL must be a postgres:// address")
            .options([("search_path", self.name.as_str())]);
        let pool = PgPoolOptions::new()
            .max_connections(connections)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options)
            .await
            .expect("connect to DATABASE_URL");
        let options = PgStoreOptions {
            group_commit,
            ..PgStoreOptions::default()
        };
        Arc::new(
            PgStore::from_pool_with(pool, options)
                .await
                .expect("open the PostgreSQL store"),
        )
    }

    async fn drop_schema(self) {
        sqlx::query(&format!("DROP SCHEMA {} CASCADE", self.name))
            .execute(&self.admin)
            .await
            .expect("drop the bench schema");
        self.admin.close().await;
    }
}

fn main() {
    let url = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => panic!("{NO_DATABASE}"),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let dir = std::env::temp_dir().join(format!("cg-bench-{}", random_uuid(&OsRandom).simple()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let schema = runtime.block_on(BenchSchema::create(url));

    let mut criterion = Criterion::default().configure_from_args();
    bench_events(&mut criterion, &runtime, &schema, dir.join("events.db"));
    bench_tokens(&mut criterion, &runtime, &schema, dir.join("tokens.db"));
    bench_dispatch(&mut criterion, &runtime, &schema, dir.join("webhooks.db"));
    criterion.final_summary();

    runtime.block_on(schema.drop_schema());
    let _ = std::fs::remove_dir_all(&dir);
}

fn bench_events(criterion: &mut Criterion, runtime: &Runtime, schema: &BenchSchema, file: PathBuf) {
    let sinks: Vec<(&str, Arc<dyn EventSink>)> = runtime.block_on(async {
        vec![
            (
                "memory",
                Arc::new(MemoryEventSink::new()) as Arc<dyn EventSink>,
            ),
            (
                "sqlite",
                Arc::new(SqliteStore::open(&file).await.expect("open SQLite")),
            ),
            // One connection per writer, so the baseline is not held back
            // by the pool.
            ("postgres_commit_per_event", schema.store(33, false).await),
            ("postgres_group_commit", schema.store(8, true).await),
        ]
    });
    let mut group = criterion.benchmark_group("record_event");
    group.throughput(Throughput::Elements(1));
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    for writers in WRITERS {
        for (name, sink) in &sinks {
            group.bench_with_input(BenchmarkId::new(*name, writers), &writers, |b, &writers| {
                b.iter_custom(|iters| {
                    runtime.block_on(record_events(sink.clone(), iters, writers))
                });
            });
        }
    }
    group.finish();
}

fn bench_tokens(criterion: &mut Criterion, runtime: &Runtime, schema: &BenchSchema, file: PathBuf) {
    let grant = Grant {
        id: GrantId(random_uuid(&OsRandom)),
        client_id: ClientId::generate(&OsRandom),
        account_id: AccountId(random_uuid(&OsRandom)),
        created_at: OffsetDateTime::now_utc(),
        revoked_at: None,
        last_refreshed_at: None,
    };
    let stores: Vec<(&str, Arc<dyn TokenStore>)> = runtime.block_on(async {
        let stores: Vec<(&str, Arc<dyn TokenStore>)> = vec![
            ("memory", Arc::new(MemoryTokenStore::new())),
            (
                "sqlite",
                Arc::new(SqliteStore::open(&file).await.expect("open SQLite")),
            ),
            ("postgres", schema.store(4, false).await),
        ];
        for (_, store) in &stores {
            store.insert_grant(&grant).await.expect("insert_grant");
        }
        stores
    });
    let mut group = criterion.benchmark_group("access_token_insert_then_find");
    group.throughput(Throughput::Elements(1));
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    for (name, store) in &stores {
        group.bench_function(*name, |b| {
            b.iter_custom(|iters| {
                runtime.block_on(insert_and_find_tokens(store.clone(), &grant, iters))
            });
        });
    }
    group.finish();
}

fn bench_dispatch(
    criterion: &mut Criterion,
    runtime: &Runtime,
    schema: &BenchSchema,
    file: PathBuf,
) {
    let now = OffsetDateTime::now_utc();
    let webhook = Webhook {
        id: WebhookId(random_uuid(&OsRandom)),
        account_id: AccountId(random_uuid(&OsRandom)),
        client_id: ClientId::generate(&OsRandom),
        event_type: WebhookEventType::Converted,
        url: "https://hooks.example.com/conversions".into(),
        event_identifiers: Vec::new(),
        include_relations: Vec::new(),
        status: WebhookStatus::Active,
        created_at: now,
        updated_at: now,
        secret_salt: random_uuid(&OsRandom).into_bytes(),
        failing_since: None,
    };
    let stores: Vec<(&str, Arc<dyn WebhookStore>)> = runtime.block_on(async {
        let stores: Vec<(&str, Arc<dyn WebhookStore>)> = vec![
            ("memory", Arc::new(MemoryWebhookStore::new())),
            (
                "sqlite",
                Arc::new(SqliteStore::open(&file).await.expect("open SQLite")),
            ),
            ("postgres", schema.store(4, false).await),
        ];
        for (_, store) in &stores {
            store
                .insert_webhook(&webhook)
                .await
                .expect("insert_webhook");
        }
        stores
    });
    let mut group = criterion.benchmark_group("webhook_dispatch_page");
    group.throughput(Throughput::Elements(
        u64::try_from(DISPATCH_PAGE).expect("a page's size fits in u64"),
    ));
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    for (name, store) in &stores {
        group.bench_function(*name, |b| {
            b.iter_custom(|iters| runtime.block_on(dispatch_pages(&**store, &webhook, iters)));
        });
    }
    group.finish();
}

/// Dispatches `pages` pages of [`DISPATCH_PAGE`] deliveries to `webhook`,
/// each from the stored cursor to a new one, as the dispatcher does; the
/// time taken, the pages' building left out.
async fn dispatch_pages(store: &dyn WebhookStore, webhook: &Webhook, pages: u64) -> Duration {
    let mut taken = Duration::ZERO;
    for _ in 0..pages {
        let page: Vec<Delivery> = (0..DISPATCH_PAGE)
            .map(|n| {
                let event_uuid = random_uuid(&OsRandom);
                // Ids drawn as the dispatcher draws them.
                Delivery {
                    id: DeliveryId(time_ordered_uuid(OffsetDateTime::now_utc(), &OsRandom)),
                    webhook_id: webhook.id,
                    event_uuid,
                    contact_key: format!("lead{n}@example.com"),
                    body: format!(
                        r#"{{"event_type":"WEBHOOK.CONVERTED","event_uuid":"{event_uuid}","contact":{{"email":"lead{n}@example.com"}}}}"#
                    ),
                    created_at: OffsetDateTime::now_utc(),
                }
            })
            .collect();
        let to = FeedCursor::new(random_uuid(&OsRandom).to_string());
        let start = Instant::now();
        let from = store.dispatch_cursor().await.expect("dispatch_cursor");
        let moved = store.dispatch(&from, &to, &page).await.expect("dispatch");
        taken += start.elapsed();
        assert!(moved, "the bench is the only dispatcher");
    }
    taken
}
