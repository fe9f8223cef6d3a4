//! Webhooks on the SQL stores, beyond the conformance suite: what was
//! registered, dispatched, leased and attempted is kept across a restart,
//! and two instances on one database (two SQLite stores on one file, two
//! PostgreSQL pools) leasing at once never lease one delivery twice.
#![cfg(feature = "test-util")]

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;

use conversion_gateway::{
    AccountId, AttemptRecord, ClientId, Delivery, DeliveryId, DeliveryNext, DeliveryState,
    FeedCursor, OsRandom, Webhook, WebhookChange, WebhookEventType, WebhookId, WebhookRelation,
    WebhookStatus, WebhookStore, WebhookWrite, random_uuid,
};
use time::macros::datetime;
use time::{Duration, OffsetDateTime};

/// The instant the scenarios start at.
fn start() -> OffsetDateTime {
    datetime!(2026-03-01 12:00:00 UTC)
}

/// The deliveries a release before the queue heads (SQLite's migration 9,
/// PostgreSQL's 11) left to one webhook, in dispatch order, as (contact,
/// state): `a` two pending, `b` one, `c` one delivered then one pending.
pub(crate) const QUEUES_AS_RELEASED: [(&str, &str); 5] = [
    ("a", "pending"),
    ("a", "pending"),
    ("b", "pending"),
    ("c", "delivered"),
    ("c", "pending"),
];

/// After the upgrade, `store` leases each contact's earliest pending
/// delivery of [`QUEUES_AS_RELEASED`] (stored as `ids` for `webhook`), the
/// delivered one passed, and a contact's next once the one before ended.
pub(crate) async fn check_queues_after_upgrade(
    store: &dyn WebhookStore,
    webhook: WebhookId,
    ids: &[DeliveryId],
) {
    let lease = |now: OffsetDateTime| async move {
        let leased = store
            .lease_deliveries(now, now + Duration::seconds(30), 10, &[])
            .await
            .expect("lease_deliveries");
        leased.iter().map(|l| l.delivery.id).collect::<Vec<_>>()
    };
    let now = start() + Duration::seconds(1);
    assert_eq!(
        lease(now).await,
        [ids[0], ids[2], ids[4]],
        "each contact's earliest pending delivery, the delivered one passed"
    );
    let attempt = AttemptRecord {
        delivery_id: ids[0],
        webhook_id: webhook,
        at: now,
        status: Some(200),
        error: None,
        duration_ms: 5,
    };
    store
        .finish_attempt(
            &attempt,
            now + Duration::seconds(30),
            DeliveryNext::Delivered,
            WebhookChange::Succeeded,
        )
        .await
        .expect("finish_attempt");
    assert_eq!(
        lease(now + Duration::seconds(1)).await,
        [ids[1]],
        "a contact's next delivery once the one before is delivered"
    );
}

/// Writes [`QUEUES_AS_RELEASED`] through `store` as this release does (a
/// webhook registered, the page dispatched, `c`'s first delivery leased
/// and delivered), then has `unmark` take every head mark away, leaving
/// the queues as a release before the marks writes them (it marks none,
/// and does not mark a contact's next delivery when it ends one).
/// Nothing is leased then; [`WebhookStore::repair_queue_heads`] marks one
/// delivery of each of the three queues, a second repair none, and the
/// queues then go as after an upgrade ([`check_queues_after_upgrade`]).
pub(crate) async fn check_queue_heads_repaired(
    store: &dyn WebhookStore,
    unmark: impl Future<Output = ()>,
) {
    let hook = registered(store).await;
    let page: Vec<Delivery> = QUEUES_AS_RELEASED
        .iter()
        .map(|(contact, _)| delivery(&hook, contact))
        .collect();
    let ids: Vec<DeliveryId> = page.iter().map(|delivery| delivery.id).collect();
    let from = store.dispatch_cursor().await.expect("dispatch_cursor");
    let to = FeedCursor::new("page-1");
    assert!(store.dispatch(&from, &to, &page).await.expect("dispatch"));
    // Leased until before the checks below lease again.
    let leased = store
        .lease_deliveries(start(), start() + Duration::milliseconds(500), 10, &[])
        .await
        .expect("lease_deliveries");
    let leased: Vec<DeliveryId> = leased.iter().map(|l| l.delivery.id).collect();
    assert_eq!(leased, [ids[0], ids[2], ids[3]], "each contact's first");
    let delivered = AttemptRecord {
        delivery_id: ids[3],
        webhook_id: hook.id,
        at: start(),
        status: Some(200),
        error: None,
        duration_ms: 5,
    };
    store
        .finish_attempt(
            &delivered,
            start() + Duration::milliseconds(500),
            DeliveryNext::Delivered,
            WebhookChange::Succeeded,
        )
        .await
        .expect("finish_attempt");

    unmark.await;
    let now = start() + Duration::seconds(1);
    let stuck = store
        .lease_deliveries(now, now + Duration::seconds(30), 10, &[])
        .await
        .expect("lease_deliveries");
    assert!(
        stuck.is_empty(),
        "queues whose heads are unmarked are never leased: {stuck:?}"
    );
    let repair = || async { store.repair_queue_heads().await.expect("repair") };
    assert_eq!(repair().await, 3, "one head for each of the three queues");
    assert_eq!(repair().await, 0, "nothing left to repair");
    check_queues_after_upgrade(store, hook.id, &ids).await;
}

/// An active webhook of a new account, stored in `store`.
async fn registered(store: &dyn WebhookStore) -> Webhook {
    let hook = webhook(AccountId(random_uuid(&OsRandom)), WebhookStatus::Active);
    let written = store.insert_webhook(&hook).await.expect("insert_webhook");
    assert_eq!(written, WebhookWrite::Stored);
    hook
}

fn webhook(account: AccountId, status: WebhookStatus) -> Webhook {
    Webhook {
        id: WebhookId(random_uuid(&OsRandom)),
        account_id: account,
        client_id: ClientId::new("cgid_restart"),
        event_type: WebhookEventType::Converted,
        url: format!("https://hooks.example/{}", random_uuid(&OsRandom).simple()),
        event_identifiers: vec!["signup".into()],
        include_relations: vec![WebhookRelation::Company],
        status,
        // Microseconds survive both stores.
        created_at: datetime!(2026-03-01 11:00:00.123456 UTC),
        updated_at: datetime!(2026-03-01 11:30:00.5 UTC),
        secret_salt: random_uuid(&OsRandom).into_bytes(),
        failing_since: None,
    }
}

fn delivery(webhook: &Webhook, contact: &str) -> Delivery {
    Delivery {
        id: DeliveryId(random_uuid(&OsRandom)),
        webhook_id: webhook.id,
        event_uuid: random_uuid(&OsRandom),
        contact_key: contact.into(),
        body: format!(r#"{{"contact":{{"email":"{contact}"}}}}"#),
        created_at: start(),
    }
}

/// The contact whose delivery the trigger of [`check_failed_dispatch`]'s
/// callers refuses.
const REFUSED: &str = "refused";

/// A dispatch whose second delivery the database refuses (a trigger
/// `refuse` installed, on a delivery to [`REFUSED`]) fails, and changes
/// nothing: the cursor stays, the first delivery is not recorded. Once
/// `allow` has dropped the trigger, the same page goes in.
pub(crate) async fn check_failed_dispatch(
    store: &dyn WebhookStore,
    refuse: impl Future<Output = ()>,
    allow: impl Future<Output = ()>,
) {
    let hook = registered(store).await;
    let page = [delivery(&hook, "a"), delivery(&hook, REFUSED)];
    let from = store.dispatch_cursor().await.expect("cursor");
    refuse.await;
    let failed = store.dispatch(&from, &FeedCursor::new("past"), &page).await;
    assert!(
        failed.is_err(),
        "a refused delivery fails the dispatch: {failed:?}"
    );
    assert_eq!(
        store.dispatch_cursor().await.expect("cursor"),
        from,
        "a failed dispatch leaves the cursor"
    );
    assert_eq!(
        store
            .delivery_state(page[0].id)
            .await
            .expect("delivery_state"),
        None,
        "a failed dispatch records none of its deliveries"
    );
    allow.await;
    assert!(
        store
            .dispatch(&from, &FeedCursor::new("past"), &page)
            .await
            .expect("dispatch")
    );
    for delivery in &page {
        assert_eq!(
            store
                .delivery_state(delivery.id)
                .await
                .expect("delivery_state"),
            Some((DeliveryState::Pending, 0))
        );
    }
}

/// What [`write_before_restart`] wrote, to find after the restart.
pub(crate) struct Written {
    webhooks: Vec<Webhook>,
    cursor: FeedCursor,
    /// Leased until `start() + 60s`.
    leased: Delivery,
    /// Attempted once, retried at `start() + 120s`.
    retried: Delivery,
    attempt: AttemptRecord,
    /// Never leased.
    waiting: Delivery,
}

/// On a fresh store: registers two webhooks, dispatches three deliveries
/// from the feed's start, leases one and attempts another.
pub(crate) async fn write_before_restart(store: &dyn WebhookStore) -> Written {
    let cursor = store.dispatch_cursor().await.expect("dispatch_cursor");
    assert!(
        cursor.is_start(),
        "a new store's dispatcher is at the start"
    );
    let account = AccountId(random_uuid(&OsRandom));
    let active = webhook(account, WebhookStatus::Active);
    let off = Webhook {
        failing_since: Some(datetime!(2026-02-27 08:00:00.25 UTC)),
        ..webhook(account, WebhookStatus::Inactive)
    };
    for webhook in [&active, &off] {
        let written = store.insert_webhook(webhook).await.expect("insert_webhook");
        assert_eq!(written, WebhookWrite::Stored);
    }
    let (leased, retried, waiting) = (
        delivery(&active, "a@example.com"),
        delivery(&active, "b@example.com"),
        delivery(&active, "c@example.com"),
    );
    let to = FeedCursor::new("page-3");
    let page = [leased.clone(), retried.clone(), waiting.clone()];
    assert!(store.dispatch(&cursor, &to, &page).await.expect("dispatch"));
    let first = store
        .lease_deliveries(start(), start() + Duration::seconds(60), 2, &[])
        .await
        .expect("lease_deliveries");
    let first: Vec<_> = first.iter().map(|leased| leased.delivery.id).collect();
    assert_eq!(first, [leased.id, retried.id]);
    let attempt = AttemptRecord {
        delivery_id: retried.id,
        webhook_id: active.id,
        at: datetime!(2026-03-01 12:00:01.5 UTC),
        status: Some(502),
        error: Some("status 502".into()),
        duration_ms: 1_250,
    };
    store
        .finish_attempt(
            &attempt,
            start() + Duration::seconds(60),
            DeliveryNext::RetryAt(start() + Duration::seconds(120)),
            WebhookChange::Failing(attempt.at),
        )
        .await
        .expect("finish_attempt");
    let active = Webhook {
        failing_since: Some(attempt.at),
        ..active
    };
    Written {
        webhooks: vec![active, off],
        cursor: to,
        leased,
        retried,
        attempt,
        waiting,
    }
}

/// After a restart: everything [`write_before_restart`] wrote is there,
/// leases and retry times included.
pub(crate) async fn check_after_restart(store: &dyn WebhookStore, written: &Written) {
    let account = written.webhooks[0].account_id;
    assert_eq!(
        store.list_webhooks(Some(account)).await.expect("list"),
        written.webhooks,
        "webhooks are kept across a restart"
    );
    assert_eq!(
        store.dispatch_cursor().await.expect("dispatch_cursor"),
        written.cursor,
        "the dispatcher's cursor is kept"
    );
    let state = |delivery: &Delivery| {
        let id = delivery.id;
        async move { store.delivery_state(id).await.expect("delivery_state") }
    };
    assert_eq!(
        [
            state(&written.leased).await,
            state(&written.retried).await,
            state(&written.waiting).await,
        ],
        [
            Some((DeliveryState::Pending, 0)),
            Some((DeliveryState::Pending, 1)),
            Some((DeliveryState::Pending, 0)),
        ],
        "deliveries and their attempt counts are kept"
    );
    assert_eq!(store.pending_deliveries().await.expect("pending"), 3);
    assert_eq!(
        store
            .recent_attempts(written.webhooks[0].id, 10)
            .await
            .expect("recent_attempts"),
        std::slice::from_ref(&written.attempt),
        "attempts are kept"
    );
    let lease = |seconds: i64| async move {
        let now = start() + Duration::seconds(seconds);
        let leased = store
            .lease_deliveries(now, now + Duration::seconds(60), 10, &[])
            .await
            .expect("lease_deliveries");
        leased
            .into_iter()
            .map(|leased| leased.delivery)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        lease(30).await,
        std::slice::from_ref(&written.waiting),
        "a lease and a retry time are kept"
    );
    assert_eq!(lease(61).await, std::slice::from_ref(&written.leased));
    assert_eq!(
        lease(120).await,
        [written.waiting.clone(), written.retried.clone()],
        "a retry at its time, after what is due since before"
    );
}

/// Two instances on one database, `RACERS` callers between them leasing
/// at once: no delivery is leased twice, and none of a contact's second
/// deliveries before its first is delivered.
pub(crate) async fn race_two_instances(instances: [Arc<dyn WebhookStore>; 2]) {
    const RACERS: usize = 32;
    const CONTACTS: usize = 48;
    let hook = webhook(AccountId(random_uuid(&OsRandom)), WebhookStatus::Active);
    let written = instances[0].insert_webhook(&hook).await.expect("insert");
    assert_eq!(written, WebhookWrite::Stored);
    let rounds: Vec<Vec<Delivery>> = (0..2)
        .map(|_| {
            (0..CONTACTS)
                .map(|n| delivery(&hook, &format!("lead{n}@example.com")))
                .collect()
        })
        .collect();
    let from = instances[1].dispatch_cursor().await.expect("cursor");
    let to = FeedCursor::new(format!("race-{}", random_uuid(&OsRandom).simple()));
    let all = rounds.concat();
    assert!(
        instances[1]
            .dispatch(&from, &to, &all)
            .await
            .expect("dispatch")
    );
    for (round, expected) in rounds.iter().enumerate() {
        let now = start() + Duration::seconds(round as i64);
        let until = now + Duration::hours(1);
        let tasks: Vec<_> = (0..RACERS)
            .map(|i| {
                let store = instances[i % 2].clone();
                tokio::spawn(async move { store.lease_deliveries(now, until, 3, &[]).await })
            })
            .collect();
        let mut leased = Vec::new();
        for task in tasks {
            let got = task.await.expect("task").expect("lease_deliveries");
            leased.extend(got.into_iter().map(|leased| leased.delivery.id));
        }
        let rest = instances[round % 2]
            .lease_deliveries(now, until, 1_000, &[])
            .await
            .expect("lease_deliveries");
        leased.extend(rest.into_iter().map(|leased| leased.delivery.id));
        let unique: HashSet<_> = leased.iter().copied().collect();
        assert_eq!(
            unique.len(),
            leased.len(),
            "round {round}: a delivery was leased twice"
        );
        let want: HashSet<_> = expected.iter().map(|delivery| delivery.id).collect();
        assert_eq!(
            unique, want,
            "round {round}: each contact's first pending delivery, nothing else"
        );
        for delivery in expected {
            let attempt = AttemptRecord {
                delivery_id: delivery.id,
                webhook_id: hook.id,
                at: now,
                status: Some(200),
                error: None,
                duration_ms: 3,
            };
            instances[1]
                .finish_attempt(
                    &attempt,
                    until,
                    DeliveryNext::Delivered,
                    WebhookChange::Succeeded,
                )
                .await
                .expect("finish_attempt");
        }
    }
    assert!(instances[0].delete_webhook(hook.id).await.expect("delete"));
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use crate::sqlite::{TempDir, file_store};

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn webhooks_and_deliveries_survive_a_restart() {
        let dir = TempDir::new();
        let store = file_store(&dir).await;
        let written = write_before_restart(&*store).await;
        store.close().await;
        drop(store);
        let reopened = file_store(&dir).await;
        check_after_restart(&*reopened, &written).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_dispatch_the_database_refuses_changes_nothing() {
        use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};
        let dir = TempDir::new();
        let store = file_store(&dir).await;
        let other = SqlitePool::connect_with(SqliteConnectOptions::new().filename(dir.file()))
            .await
            .expect("the database file");
        let trigger = format!(
            "CREATE TRIGGER refuse BEFORE INSERT ON webhook_deliveries
             WHEN NEW.contact_key = '{REFUSED}'
             BEGIN SELECT RAISE(ABORT, 'refused'); END"
        );
        let refuse = async {
            sqlx::query(&trigger)
                .execute(&other)
                .await
                .expect("the trigger");
        };
        let allow = async {
            sqlx::query("DROP TRIGGER refuse")
                .execute(&other)
                .await
                .expect("dropped");
        };
        check_failed_dispatch(&*store, refuse, allow).await;
        other.close().await;
        store.close().await;
    }

    /// The migrations a release shipped before the queue heads (migration
    /// 9), in order.
    const SHIPPED_BEFORE_HEADS: [&str; 8] = [
        include_str!("../../migrations/sqlite/0001_initial.sql"),
        include_str!("../../migrations/sqlite/0002_idempotency_scope.sql"),
        include_str!("../../migrations/sqlite/0003_purge_indexes.sql"),
        include_str!("../../migrations/sqlite/0004_adaptive_refresh.sql"),
        include_str!("../../migrations/sqlite/0005_client_lifecycle.sql"),
        include_str!("../../migrations/sqlite/0006_event_feed.sql"),
        include_str!("../../migrations/sqlite/0007_drop_events_by_account.sql"),
        include_str!("../../migrations/sqlite/0008_webhooks.sql"),
    ];

    /// A database file as a release before migration 9 left it: its
    /// migrations applied and recorded as the store records them, one
    /// webhook and [`QUEUES_AS_RELEASED`]. Returns the webhook and the
    /// deliveries' ids, in that order.
    async fn queues_as_released(dir: &TempDir) -> (Webhook, Vec<DeliveryId>) {
        use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};
        let options = SqliteConnectOptions::new()
            .filename(dir.file())
            .create_if_missing(true);
        let pool = SqlitePool::connect_with(options)
            .await
            .expect("a new database file");
        sqlx::raw_sql(
            "CREATE TABLE schema_version (
                 version     INTEGER PRIMARY KEY NOT NULL,
                 applied_at  TEXT    NOT NULL DEFAULT CURRENT_TIMESTAMP
             )",
        )
        .execute(&pool)
        .await
        .expect("the version table");
        for (version, sql) in (1_i64..).zip(SHIPPED_BEFORE_HEADS) {
            sqlx::raw_sql(sql)
                .execute(&pool)
                .await
                .expect("a shipped migration");
            sqlx::query("INSERT INTO schema_version (version) VALUES (?)")
                .bind(version)
                .execute(&pool)
                .await
                .expect("its version");
        }
        let hook = webhook(AccountId(random_uuid(&OsRandom)), WebhookStatus::Active);
        let micros = |at: OffsetDateTime| {
            i64::try_from(at.unix_timestamp_nanos() / 1_000).expect("an instant in range")
        };
        sqlx::query(
            "INSERT INTO webhooks
                 (id, account_id, client_id, event_type, url, event_identifiers,
                  include_relations, status, created_at, updated_at, secret_salt)
             VALUES (?, ?, ?, 'WEBHOOK.CONVERTED', ?, '[]', '[]', 'active', ?, ?, ?)",
        )
        .bind(hook.id.0.hyphenated().to_string())
        .bind(hook.account_id.0.hyphenated().to_string())
        .bind(hook.client_id.as_str())
        .bind(&hook.url)
        .bind(micros(hook.created_at))
        .bind(micros(hook.updated_at))
        .bind(hook.secret_salt.as_slice())
        .execute(&pool)
        .await
        .expect("a webhook as released");
        let mut ids = Vec::new();
        for (contact, state) in QUEUES_AS_RELEASED {
            let id = DeliveryId(random_uuid(&OsRandom));
            let finished_at = (state == "delivered").then(|| micros(start()));
            sqlx::query(
                "INSERT INTO webhook_deliveries
                     (id, webhook_id, event_uuid, contact_key, body, created_at, state,
                      next_attempt_at, finished_at)
                 VALUES (?, ?, ?, ?, '{}', ?, ?, ?, ?)",
            )
            .bind(id.0.hyphenated().to_string())
            .bind(hook.id.0.hyphenated().to_string())
            .bind(random_uuid(&OsRandom).hyphenated().to_string())
            .bind(contact)
            .bind(micros(start()))
            .bind(state)
            .bind(micros(start()))
            .bind(finished_at)
            .execute(&pool)
            .await
            .expect("a delivery as released");
            ids.push(id);
        }
        pool.close().await;
        (hook, ids)
    }

    /// The upgrade marks the head of each contact's queue that a release
    /// before it left.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn queues_left_by_an_earlier_release_are_leased_in_order_after_the_upgrade() {
        let dir = TempDir::new();
        let (hook, ids) = queues_as_released(&dir).await;
        let store = file_store(&dir).await;
        check_queues_after_upgrade(&*store, hook.id, &ids).await;
    }

    /// A release before the marks run again on an upgraded file (a
    /// rollback, then the upgrade once more) leaves queues without heads;
    /// the repair makes them leasable.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn queues_an_earlier_release_wrote_after_the_upgrade_are_repaired() {
        use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};
        let dir = TempDir::new();
        let store = file_store(&dir).await;
        let unmark = async {
            // Another connection to the file, as the earlier release's
            // process would have.
            let options = SqliteConnectOptions::new().filename(dir.file());
            let pool = SqlitePool::connect_with(options)
                .await
                .expect("the database file");
            sqlx::query("UPDATE webhook_deliveries SET head = 0")
                .execute(&pool)
                .await
                .expect("unmark the heads");
            pool.close().await;
        };
        check_queue_heads_repaired(&*store, unmark).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn two_stores_on_one_file_never_lease_a_delivery_twice() {
        // Two stores on one file stand for two processes: the lease's
        // atomicity must come from SQLite's write lock.
        let dir = TempDir::new();
        let (first, second) = (file_store(&dir).await, file_store(&dir).await);
        race_two_instances([first, second]).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn dispatches_racing_deletes_leave_no_delivery_behind_its_webhook() {
        // A dispatch runs on the writer of events' connection, a delete on
        // sqlx's: within a store the write gate orders them, between two
        // stores on one file (two processes) only SQLite's write lock does.
        // Whichever comes first, no delivery may outlive its webhook: one
        // recorded after the delete would wait for ever, never leased nor
        // purged.
        let dir = TempDir::new();
        let (first, second) = (file_store(&dir).await, file_store(&dir).await);
        let stores: [Arc<dyn WebhookStore>; 2] = [first, second];
        for round in 0..40 {
            let (dispatcher, deleter) = (&stores[round % 2], &stores[(round / 2) % 2]);
            let hook = registered(&**deleter).await;
            let page: Vec<Delivery> = (0..20)
                .map(|n| delivery(&hook, &format!("lead{n}@example.com")))
                .collect();
            let from = dispatcher.dispatch_cursor().await.expect("cursor");
            let to = FeedCursor::new(format!("round-{round}"));
            let (dispatched, deleted) = tokio::join!(
                tokio::spawn({
                    let dispatcher = Arc::clone(dispatcher);
                    async move { dispatcher.dispatch(&from, &to, &page).await }
                }),
                tokio::spawn({
                    let deleter = Arc::clone(deleter);
                    async move { deleter.delete_webhook(hook.id).await }
                }),
            );
            assert!(
                dispatched.expect("task").expect("dispatch"),
                "round {round}"
            );
            assert!(deleted.expect("task").expect("delete"), "round {round}");
            for store in &stores {
                assert_eq!(
                    store.pending_deliveries().await.expect("pending"),
                    0,
                    "round {round}: a delivery outlived its webhook"
                );
            }
            assert_eq!(
                deliveries_stored(&dir).await,
                0,
                "round {round}: a delivery outlived its webhook"
            );
        }
    }

    /// How many deliveries the file holds, in any state.
    async fn deliveries_stored(dir: &TempDir) -> i64 {
        use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};
        let pool = SqlitePool::connect_with(SqliteConnectOptions::new().filename(dir.file()))
            .await
            .expect("open the file");
        let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM webhook_deliveries")
            .fetch_one(&pool)
            .await
            .expect("count the deliveries");
        pool.close().await;
        stored
    }
}

#[cfg(all(feature = "postgres", feature = "external-tests"))]
mod postgres {
    use super::*;
    use crate::postgres::in_schema;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn webhooks_and_deliveries_survive_a_restart() {
        in_schema(|schema| async move {
            let store = schema.store().await;
            let written = write_before_restart(&*store).await;
            store.close().await;
            drop(store);
            // A new pool on the same database: a restarted server instance.
            let restarted = schema.store().await;
            check_after_restart(&*restarted, &written).await;
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_dispatch_the_database_refuses_changes_nothing() {
        in_schema(|schema| async move {
            let store = schema.store().await;
            let other = schema.pool().await;
            let refuse = async {
                sqlx::raw_sql(&format!(
                    "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
                     BEGIN
                         IF NEW.contact_key = '{REFUSED}' THEN RAISE EXCEPTION 'refused'; END IF;
                         RETURN NEW;
                     END $$;
                     CREATE TRIGGER refuse BEFORE INSERT ON webhook_deliveries
                         FOR EACH ROW EXECUTE FUNCTION refuse()"
                ))
                .execute(&other)
                .await
                .expect("the trigger");
            };
            let allow = async {
                sqlx::query("DROP TRIGGER refuse ON webhook_deliveries")
                    .execute(&other)
                    .await
                    .expect("dropped");
            };
            check_failed_dispatch(&*store, refuse, allow).await;
            other.close().await;
        })
        .await;
    }

    /// How long a staged interleaving waits for a step (generous: the CI
    /// machine may be busy).
    const STEP: std::time::Duration = std::time::Duration::from_secs(30);

    /// Whether a backend of `schema`'s pools waits for a lock in a
    /// statement that starts with `statement`.
    async fn waits_for_a_lock(watcher: &sqlx::PgPool, schema: &str, statement: &str) -> bool {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE application_name = $1 AND wait_event_type = 'Lock'
               AND starts_with(query, $2)",
        )
        .bind(schema)
        .bind(statement)
        .fetch_one(watcher)
        .await
        .expect("read pg_stat_activity");
        waiting > 0
    }

    /// Waits until `done` or until a backend of `schema` waits for a lock
    /// in a statement starting with `statement`; panics naming `step`
    /// after [`STEP`].
    async fn until_settled(
        watcher: &sqlx::PgPool,
        schema: &str,
        statement: &str,
        done: impl Fn() -> bool,
        step: &str,
    ) {
        let deadline = tokio::time::Instant::now() + STEP;
        while !done() && !waits_for_a_lock(watcher, schema, statement).await {
            assert!(tokio::time::Instant::now() < deadline, "{step}");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// The result of `task`, which must end within [`STEP`].
    async fn finished<T>(task: tokio::task::JoinHandle<T>, what: &str) -> T {
        tokio::time::timeout(STEP, task)
            .await
            .unwrap_or_else(|_| panic!("{what} did not end"))
            .expect("task")
    }

    /// `store.dispatch` of `page` from the stored cursor, on a task of
    /// its own.
    fn dispatching(
        store: &Arc<dyn WebhookStore>,
        page: Vec<Delivery>,
    ) -> tokio::task::JoinHandle<bool> {
        let store = store.clone();
        tokio::spawn(async move {
            let from = store.dispatch_cursor().await.expect("cursor");
            let to = FeedCursor::new("past-the-page");
            store.dispatch(&from, &to, &page).await.expect("dispatch")
        })
    }

    /// `store.delete_webhook(id)` on a task of its own.
    fn deleting(store: &Arc<dyn WebhookStore>, id: WebhookId) -> tokio::task::JoinHandle<bool> {
        let store = store.clone();
        tokio::spawn(async move { store.delete_webhook(id).await.expect("delete_webhook") })
    }

    /// A webhook stored in `store`, and a page of 50 deliveries for it.
    async fn webhook_and_page(store: &dyn WebhookStore) -> (Webhook, Vec<Delivery>) {
        let hook = registered(store).await;
        let page = (0..50)
            .map(|n| delivery(&hook, &format!("lead{n}@example.com")))
            .collect();
        (hook, page)
    }

    /// No delivery is pending, and none is stored at all.
    async fn no_delivery_left(store: &dyn WebhookStore, watcher: &sqlx::PgPool) {
        assert_eq!(
            store
                .pending_deliveries()
                .await
                .expect("pending_deliveries"),
            0,
            "a delivery outlived its webhook"
        );
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM webhook_deliveries")
            .fetch_one(watcher)
            .await
            .expect("count the deliveries");
        assert_eq!(left, 0, "a delivery outlived its webhook");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_delivery_dispatched_while_the_one_before_it_ends_is_leased_next() {
        // The interleaving that would leave a contact's queue without a
        // head, its deliveries pending for ever: an attempt ends the
        // contact's delivery and finds no next one to mark, while a
        // dispatch records that next one and, seeing the first still
        // pending, does not mark it either; then both commit.
        in_schema(|schema| async move {
            let store: Arc<dyn WebhookStore> = schema.store().await;
            let hook = registered(&*store).await;
            let (first, next) = (
                delivery(&hook, "q@example.com"),
                delivery(&hook, "q@example.com"),
            );
            let from = store.dispatch_cursor().await.expect("cursor");
            let to = FeedCursor::new("first-page");
            assert!(
                store
                    .dispatch(&from, &to, std::slice::from_ref(&first))
                    .await
                    .expect("dispatch")
            );
            let now = start();
            let leased = store
                .lease_deliveries(now, now + Duration::seconds(30), 10, &[])
                .await
                .expect("lease");
            assert_eq!(leased.len(), 1, "the first delivery is out");
            // The webhook's row held, as another attempt of the webhook
            // holds it: the attempt below stops there, after it has ended
            // the first delivery and marked (or failed to mark) the next.
            let watcher = schema.pool().await;
            let mut other_attempt = watcher.begin().await.expect("begin");
            sqlx::query("SELECT 1 FROM webhooks WHERE id = $1 FOR NO KEY UPDATE")
                .bind(hook.id.0)
                .execute(&mut *other_attempt)
                .await
                .expect("lock the webhook's row");
            let attempt = {
                let store = store.clone();
                let record = AttemptRecord {
                    delivery_id: first.id,
                    webhook_id: hook.id,
                    at: now + Duration::seconds(1),
                    status: Some(200),
                    error: None,
                    duration_ms: 5,
                };
                tokio::spawn(async move {
                    store
                        .finish_attempt(
                            &record,
                            now + Duration::seconds(30),
                            DeliveryNext::Delivered,
                            WebhookChange::Succeeded,
                        )
                        .await
                        .expect("finish_attempt");
                })
            };
            let step = "the attempt never reached the webhook's row";
            let statement = "SELECT failing_since FROM webhooks";
            until_settled(&watcher, schema.name(), statement, || false, step).await;
            // The next delivery dispatched now: it either completes while
            // the attempt is held, or waits for the attempt to commit.
            let dispatch = dispatching(&store, vec![next.clone()]);
            let step = "the dispatch neither completed nor waited";
            let statement = "UPDATE webhook_dispatch";
            let ended = || dispatch.is_finished();
            until_settled(&watcher, schema.name(), statement, ended, step).await;
            other_attempt
                .commit()
                .await
                .expect("release the webhook's row");
            finished(attempt, "the attempt").await;
            assert!(finished(dispatch, "the dispatch").await);
            let later = now + Duration::seconds(2);
            let leased = store
                .lease_deliveries(later, later + Duration::seconds(30), 10, &[])
                .await
                .expect("lease");
            let leased: Vec<DeliveryId> = leased.iter().map(|l| l.delivery.id).collect();
            assert_eq!(
                leased,
                [next.id],
                "the contact's next delivery heads its queue"
            );
            watcher.close().await;
        })
        .await;
    }

    /// An instance of a release before the marks, running beside this one
    /// (a rolling upgrade) or again after it (a rollback), leaves queues
    /// without heads; the repair makes them leasable.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn queues_an_earlier_release_wrote_beside_this_one_are_repaired() {
        in_schema(|schema| async move {
            let store = schema.store().await;
            let earlier_release = schema.pool().await;
            let unmark = async {
                sqlx::query("UPDATE webhook_deliveries SET head = false")
                    .execute(&earlier_release)
                    .await
                    .expect("unmark the heads");
            };
            check_queue_heads_repaired(&*store, unmark).await;
            earlier_release.close().await;
        })
        .await;
    }

    /// The repair skips a delivery another transaction has locked (a
    /// deletion of its webhook takes them all) instead of waiting for it,
    /// and marks it at a later repair.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn the_repair_passes_a_locked_delivery_by_and_marks_it_later() {
        in_schema(|schema| async move {
            let store: Arc<dyn WebhookStore> = schema.store().await;
            let hook = registered(&*store).await;
            let (locked, free) = (delivery(&hook, "a"), delivery(&hook, "b"));
            let from = store.dispatch_cursor().await.expect("cursor");
            let page = [locked.clone(), free.clone()];
            assert!(
                store
                    .dispatch(&from, &FeedCursor::new("page-1"), &page)
                    .await
                    .expect("dispatch")
            );
            let watcher = schema.pool().await;
            sqlx::query("UPDATE webhook_deliveries SET head = false")
                .execute(&watcher)
                .await
                .expect("unmark the heads");
            let mut holder = watcher.begin().await.expect("begin");
            sqlx::query("SELECT 1 FROM webhook_deliveries WHERE id = $1 FOR UPDATE")
                .bind(locked.id.0)
                .execute(&mut *holder)
                .await
                .expect("lock a delivery");
            let repaired = tokio::time::timeout(STEP, store.repair_queue_heads())
                .await
                .expect("the repair waited for a locked delivery")
                .expect("repair");
            assert_eq!(
                repaired, 1,
                "the free queue's head, the locked one passed by"
            );
            holder.rollback().await.expect("release the delivery");
            assert_eq!(store.repair_queue_heads().await.expect("repair"), 1);
            let now = start();
            let leased = store
                .lease_deliveries(now, now + Duration::seconds(30), 10, &[])
                .await
                .expect("lease");
            let leased: HashSet<DeliveryId> = leased.iter().map(|l| l.delivery.id).collect();
            assert_eq!(leased, HashSet::from([locked.id, free.id]));
            watcher.close().await;
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_page_dispatched_while_its_webhook_is_deleted_is_not_left_behind() {
        // The interleaving that would leave a dispatched page without its
        // webhook, pending for ever: the delete removes the deliveries it
        // can see, a dispatch records and commits a page for the webhook,
        // then the delete removes the webhook.
        in_schema(|schema| async move {
            let store: Arc<dyn WebhookStore> = schema.store().await;
            let (hook, page) = webhook_and_page(&*store).await;
            // The webhook's row held as an attempt being recorded holds it
            // (`UPDATE webhooks SET failing_since ...`): the delete stops at
            // it, after the deliveries and before the webhook.
            let watcher = schema.pool().await;
            let mut attempt = watcher.begin().await.expect("begin");
            sqlx::query("SELECT 1 FROM webhooks WHERE id = $1 FOR NO KEY UPDATE")
                .bind(hook.id.0)
                .execute(&mut *attempt)
                .await
                .expect("lock the webhook's row");
            let delete = deleting(&store, hook.id);
            let step = "the delete never reached the webhook's row";
            let statement = "DELETE FROM webhooks";
            until_settled(&watcher, schema.name(), statement, || false, step).await;
            // A dispatch of a page for the webhook, now: it either completes
            // before the delete does, or waits for it.
            let dispatch = dispatching(&store, page);
            let step = "the dispatch neither completed nor waited";
            let statement = "UPDATE webhook_dispatch";
            let ended = || dispatch.is_finished();
            until_settled(&watcher, schema.name(), statement, ended, step).await;
            attempt.commit().await.expect("release the webhook's row");
            assert!(finished(delete, "the delete").await);
            assert!(finished(dispatch, "the dispatch").await);
            no_delivery_left(&*store, &watcher).await;
            watcher.close().await;
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_webhook_deleted_while_a_page_is_dispatched_takes_the_page_with_it() {
        // The other order: the dispatch has moved the cursor and is
        // recording its page when the delete starts.
        in_schema(|schema| async move {
            let store: Arc<dyn WebhookStore> = schema.store().await;
            let (hook, page) = webhook_and_page(&*store).await;
            // The webhooks table held whole: the dispatch's insert, which
            // reads it, waits with the cursor moved and the page not yet
            // recorded.
            let watcher = schema.pool().await;
            let mut holder = watcher.begin().await.expect("begin");
            sqlx::query("LOCK TABLE webhooks IN ACCESS EXCLUSIVE MODE")
                .execute(&mut *holder)
                .await
                .expect("lock the webhooks table");
            let dispatch = dispatching(&store, page);
            let step = "the dispatch never reached its insert";
            let statement = "INSERT INTO webhook_deliveries";
            until_settled(&watcher, schema.name(), statement, || false, step).await;
            // The delete, now: it waits, for the dispatch or for the table.
            let delete = deleting(&store, hook.id);
            let step = "the delete never waited";
            let statement = "SELECT 1 FROM webhook_dispatch";
            let ended = || delete.is_finished();
            until_settled(&watcher, schema.name(), statement, ended, step).await;
            holder.commit().await.expect("release the webhooks table");
            assert!(finished(dispatch, "the dispatch").await);
            assert!(finished(delete, "the delete").await);
            no_delivery_left(&*store, &watcher).await;
            watcher.close().await;
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn two_pools_leasing_at_once_never_lease_a_delivery_twice() {
        in_schema(|schema| async move {
            for _ in 0..3 {
                let instances: [Arc<dyn WebhookStore>; 2] =
                    [schema.store().await, schema.store().await];
                race_two_instances(instances).await;
            }
        })
        .await;
    }
}
