//! The SQLite store keeps the storage contract, concurrency included, keeps
//! what it acknowledged across a restart, and reports a dead backend as
//! `StoreError::Backend`.
#![cfg(all(feature = "test-util", feature = "sqlite"))]

use std::path::PathBuf;
use std::sync::Arc;

use conversion_gateway::conformance;
use conversion_gateway::{
    AccessToken, AccessTokenRecord, AccountId, ClientId, EventFeed, EventPayload, EventSink,
    EventSubmission, FeedCursor, Grant, GrantId, IntakeChannel, OsRandom, RecordOutcome,
    RecordedEvent, RefreshState, RefreshToken, RefreshTokenRecord, Rotation, SecretHasher,
    SqliteStore, StoreError, TokenStore, random_uuid,
};
use time::macros::datetime;

/// A fresh directory under the system's temporary directory, removed when
/// dropped.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new() -> Self {
        let path = std::env::temp_dir().join(format!(
            "cg-sqlite-test-{}",
            random_uuid(&OsRandom).simple()
        ));
        std::fs::create_dir_all(&path).expect("create a temporary directory");
        Self(path)
    }

    pub(crate) fn file(&self) -> PathBuf {
        self.0.join("gateway.db")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) async fn file_store(dir: &TempDir) -> Arc<SqliteStore> {
    Arc::new(
        SqliteStore::open(dir.file())
            .await
            .expect("open the SQLite store"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_token_store_keeps_the_contract() {
    let dir = TempDir::new();
    conformance::check_token_store(file_store(&dir).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_client_registry_keeps_the_contract() {
    let dir = TempDir::new();
    conformance::check_client_registry(file_store(&dir).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_account_store_keeps_the_contract() {
    let dir = TempDir::new();
    conformance::check_account_store(file_store(&dir).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_api_key_store_keeps_the_contract() {
    let dir = TempDir::new();
    conformance::check_api_key_store(file_store(&dir).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_event_sink_keeps_the_contract() {
    let dir = TempDir::new();
    conformance::check_event_sink(file_store(&dir).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_event_feed_keeps_the_contract() {
    let dir = TempDir::new();
    let store = file_store(&dir).await;
    conformance::check_event_feed(store.clone(), store).await;
    // Two stores on one file stand for two processes writing at once.
    let (first, second) = (file_store(&dir).await, file_store(&dir).await);
    conformance::check_event_feed(first, second).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_webhook_store_keeps_the_contract() {
    let dir = TempDir::new();
    let store = file_store(&dir).await;
    conformance::check_webhook_store(store.clone()).await;
    // Again on the same file, as a store opened anew.
    drop(store);
    conformance::check_webhook_store(file_store(&dir).await).await;
    let temporary = SqliteStore::open_temporary().await.expect("open");
    conformance::check_webhook_store(Arc::new(temporary)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_temporary_sqlite_store_keeps_the_contract() {
    let store = Arc::new(SqliteStore::open_temporary().await.expect("open"));
    conformance::check_token_store(store.clone()).await;
    conformance::check_client_registry(store.clone()).await;
    conformance::check_account_store(store.clone()).await;
    conformance::check_api_key_store(store.clone()).await;
    conformance::check_event_sink(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_on_one_file_keep_the_contract_together() {
    // Two stores on one file stand for two processes: atomicity must come
    // from SQLite's locks, not from the one writer connection of a store.
    let dir = TempDir::new();
    let first = file_store(&dir).await;
    let second = file_store(&dir).await;
    let (a, b) = tokio::join!(
        conformance::check_token_store(first.clone()),
        conformance::check_token_store(second.clone()),
    );
    let ((), ()) = (a, b);
    conformance::check_api_key_store(first).await;
    conformance::check_event_sink(second).await;
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

fn access_token(grant: &Grant) -> AccessTokenRecord {
    AccessTokenRecord {
        hash: AccessToken::generate(&OsRandom).hash(&SecretHasher::new([3; 32])),
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
        hash: RefreshToken::generate(&OsRandom).hash(&SecretHasher::new([3; 32])),
        grant_id: grant.id,
        client_id: grant.client_id.clone(),
        account_id: grant.account_id,
        issued_at: datetime!(2026-03-01 12:00:00.25 UTC),
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
        conversion_identifier: format!("restart-{n}"),
        email: format!("lead{n}@example.com"),
        payload: serde_json::json!({
            "conversion_identifier": format!("restart-{n}"),
            "email": format!("lead{n}@example.com"),
            "cf_score": 1.5,
            "tags": ["x"],
        })
        .into(),
        channel: IntakeChannel::ApiKey,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokens_and_events_survive_a_restart() {
    let dir = TempDir::new();
    let store = file_store(&dir).await;
    let grant = grant();
    store.insert_grant(&grant).await.expect("insert_grant");
    let tokens: Vec<_> = (0..10).map(|_| access_token(&grant)).collect();
    for token in &tokens {
        store.insert_access_token(token).await.expect("insert");
    }
    let account = AccountId(random_uuid(&OsRandom));
    let events: Vec<_> = (0..10).map(|n| event(account, n)).collect();
    for event in &events {
        let submission = EventSubmission {
            events: vec![event.clone()],
            batch_uuid: None,
            idempotency: None,
        };
        assert_eq!(
            store.record(&submission).await.expect("record"),
            RecordOutcome::Recorded
        );
    }
    store.close().await;
    drop(store);

    let reopened = file_store(&dir).await;
    assert_eq!(
        reopened.find_grant(grant.id).await.expect("find"),
        Some(grant)
    );
    for token in &tokens {
        assert_eq!(
            reopened.find_access_token(&token.hash).await.expect("find"),
            Some(token.clone()),
            "an acknowledged token is kept across a restart"
        );
    }
    for event in &events {
        assert_eq!(
            reopened.find_event(event.event_uuid).await.expect("find"),
            Some(event.clone()),
            "an acknowledged event is kept across a restart"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_submission_does_not_fail_its_group() {
    let dir = TempDir::new();
    let store = file_store(&dir).await;
    let account = AccountId(random_uuid(&OsRandom));
    let existing = event(account, 0);
    let single = |event: RecordedEvent| EventSubmission {
        events: vec![event],
        batch_uuid: None,
        idempotency: None,
    };
    store
        .record(&single(existing.clone()))
        .await
        .expect("record");
    // Every other submission repeats a recorded uuid: those fail, and the
    // ones committed in the same group must still be recorded.
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
}

/// Refreshes during a flood of events: a rotation refused for its own
/// data fails alone (its token still active, a typed `Duplicate`), and
/// neither it nor the events beside it hold the others back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rotations_written_among_a_flood_of_events_each_keep_their_own_outcome() {
    let dir = TempDir::new();
    let store = file_store(&dir).await;
    let grant = grant();
    store.insert_grant(&grant).await.expect("insert_grant");
    let taken_access = access_token(&grant);
    store
        .insert_access_token(&taken_access)
        .await
        .expect("insert_access_token");
    // Even tokens rotate; odd ones meet an access token already stored.
    let tokens: Vec<_> = (0..8).map(|_| refresh_token(&grant)).collect();
    for token in &tokens {
        store
            .insert_refresh_token(token)
            .await
            .expect("insert_refresh_token");
    }
    let at = datetime!(2026-03-01 13:00:00 UTC);
    let rotations: Vec<_> = tokens
        .iter()
        .enumerate()
        .map(|(n, token)| {
            let store = store.clone();
            let old = token.hash;
            let successor = RefreshTokenRecord {
                predecessor: Some(old),
                ..refresh_token(&grant)
            };
            let access = if n % 2 == 0 {
                access_token(&grant)
            } else {
                taken_access.clone()
            };
            tokio::spawn(async move {
                let outcome = store
                    .rotate_refresh_token(&old, &successor, &access, at)
                    .await;
                (outcome, successor, access)
            })
        })
        .collect();
    let account = AccountId(random_uuid(&OsRandom));
    let floods: Vec<_> = (0..64)
        .map(|n| {
            let store = store.clone();
            let submission = EventSubmission {
                events: vec![event(account, n)],
                batch_uuid: None,
                idempotency: None,
            };
            tokio::spawn(async move { (store.record(&submission).await, submission) })
        })
        .collect();
    let unknown = refresh_token(&grant);
    assert_eq!(
        store
            .rotate_refresh_token(
                &unknown.hash,
                &refresh_token(&grant),
                &access_token(&grant),
                at
            )
            .await
            .expect("rotate an unknown token"),
        Rotation::NotFound
    );

    let state = |hash| {
        let store = store.clone();
        async move {
            store
                .find_refresh_token(&hash)
                .await
                .expect("find_refresh_token")
                .map(|token| token.state)
        }
    };
    for (n, (task, token)) in rotations.into_iter().zip(&tokens).enumerate() {
        let (outcome, successor, access) = task.await.expect("task");
        if n % 2 == 0 {
            assert_eq!(outcome.expect("rotate"), Rotation::Rotated);
            assert!(
                matches!(state(token.hash).await, Some(RefreshState::Rotated { successor: s, .. }) if s == successor.hash),
                "a rotated token names its successor"
            );
            assert_eq!(state(successor.hash).await, Some(RefreshState::Active));
            assert!(
                store
                    .find_access_token(&access.hash)
                    .await
                    .expect("find_access_token")
                    .is_some(),
                "a rotation stores its access token"
            );
        } else {
            assert!(
                matches!(
                    outcome,
                    Err(StoreError::Duplicate {
                        what: "access token"
                    })
                ),
                "an access token already stored is a duplicate, got {outcome:?}"
            );
            assert_eq!(
                state(token.hash).await,
                Some(RefreshState::Active),
                "a refused rotation leaves its token active"
            );
            assert_eq!(state(successor.hash).await, None, "and stores no successor");
        }
    }
    for task in floods {
        let (outcome, submission) = task.await.expect("task");
        assert_eq!(outcome.expect("record"), RecordOutcome::Recorded);
        assert!(
            store
                .find_event(submission.events[0].event_uuid)
                .await
                .expect("find_event")
                .is_some()
        );
    }
    assert_eq!(
        store
            .find_grant(grant.id)
            .await
            .expect("find_grant")
            .and_then(|grant| grant.last_refreshed_at),
        Some(at),
        "a rotation marks its grant refreshed"
    );

    // Committed, not only visible: a reopened store has the rotations.
    store.close().await;
    drop(store);
    let reopened = file_store(&dir).await;
    let rotated = reopened
        .find_refresh_token(&tokens[0].hash)
        .await
        .expect("find_refresh_token")
        .map(|token| token.state);
    assert!(
        matches!(rotated, Some(RefreshState::Rotated { .. })),
        "a rotation is kept across a restart, got {rotated:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_batch_leaves_none_of_its_events_and_its_group_is_recorded() {
    let dir = TempDir::new();
    let store = file_store(&dir).await;
    let account = AccountId(random_uuid(&OsRandom));
    let existing = event(account, 0);
    store
        .record(&EventSubmission {
            events: vec![existing.clone()],
            batch_uuid: None,
            idempotency: None,
        })
        .await
        .expect("record");
    // Odd submissions are batches whose second event repeats a recorded
    // uuid: each fails whole, its first event included, while the single
    // events queued beside them in the same groups are recorded.
    let submissions: Vec<_> = (1..=64)
        .map(|n| EventSubmission {
            events: if n % 2 == 1 {
                vec![event(account, n), existing.clone()]
            } else {
                vec![event(account, n)]
            },
            batch_uuid: (n % 2 == 1).then(|| random_uuid(&OsRandom)),
            idempotency: None,
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
    for (task, submission) in tasks.into_iter().zip(&submissions) {
        let outcome = task.await.expect("task");
        let first = &submission.events[0];
        let stored = store.find_event(first.event_uuid).await.expect("find");
        if submission.batch_uuid.is_some() {
            assert!(
                matches!(outcome, Err(StoreError::Duplicate { what: "event" })),
                "a batch repeating a uuid is a duplicate, got {outcome:?}"
            );
            assert_eq!(stored, None, "a refused batch keeps none of its events");
        } else {
            assert_eq!(outcome.expect("record"), RecordOutcome::Recorded);
            assert_eq!(stored, Some(first.clone()));
        }
    }
    // The refused batches' rows were rolled back inside groups that went
    // on: the feed's positions (rowids) have no gap for them, so passing
    // the feed by counts exactly the events that reading it gives.
    let page = store
        .read_after(&FeedCursor::start(), 1000)
        .await
        .expect("read_after");
    assert_eq!(page.events.len(), 33, "the first event and 32 single ones");
    for limit in [1, 16, 33, 1000] {
        let read = store
            .read_after(&FeedCursor::start(), limit)
            .await
            .expect("read_after");
        assert_eq!(
            store
                .skip_after(&FeedCursor::start(), limit)
                .await
                .expect("skip_after"),
            (read.next, read.events.len()),
            "skip_after passes what read_after reads, limit {limit}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_temporary_store_is_removed_when_dropped() {
    let store = SqliteStore::open_temporary().await.expect("open");
    let path = store.path().to_path_buf();
    assert!(path.is_file(), "{path:?}");
    let clone = store.clone();
    drop(store);
    assert!(path.is_file(), "a clone keeps the database");
    drop(clone);
    assert!(!path.exists(), "{path:?} is removed with the last clone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_closed_store_fails_with_backend_errors() {
    let dir = TempDir::new();
    let store = file_store(&dir).await;
    store.close().await;
    let grant = grant();
    assert!(matches!(
        store.insert_grant(&grant).await,
        Err(StoreError::Backend { .. })
    ));
    assert!(matches!(
        store.find_grant(grant.id).await,
        Err(StoreError::Backend { .. })
    ));
    let submission = EventSubmission {
        events: vec![event(grant.account_id, 0)],
        batch_uuid: None,
        idempotency: None,
    };
    assert!(matches!(
        store.record(&submission).await,
        Err(StoreError::Backend { .. })
    ));
    let token = refresh_token(&grant);
    assert!(matches!(
        store
            .rotate_refresh_token(
                &token.hash,
                &refresh_token(&grant),
                &access_token(&grant),
                datetime!(2026-03-01 13:00:00 UTC),
            )
            .await,
        Err(StoreError::Backend {
            action: "rotate a refresh token",
            ..
        })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unopenable_file_is_a_backend_error() {
    let dir = TempDir::new();
    let result = SqliteStore::open(dir.0.join("missing-directory").join("gateway.db")).await;
    assert!(
        matches!(result, Err(StoreError::Backend { .. })),
        "{result:?}"
    );

    let not_a_database = dir.0.join("not-a-database.db");
    std::fs::write(&not_a_database, vec![b'x'; 4096]).expect("write");
    let result = SqliteStore::open(&not_a_database).await;
    assert!(
        matches!(result, Err(StoreError::Backend { .. })),
        "{result:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn opening_twice_applies_the_migrations_once() {
    let dir = TempDir::new();
    let (first, second) =
        tokio::join!(SqliteStore::open(dir.file()), SqliteStore::open(dir.file()));
    first.expect("first open");
    second.expect("second open");
    let third = file_store(&dir).await;
    let grant = grant();
    third.insert_grant(&grant).await.expect("insert_grant");
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_database_and_its_log_are_readable_by_the_owner_only() {
    use std::os::unix::fs::PermissionsExt as _;

    let dir = TempDir::new();
    let store = file_store(&dir).await;
    // A write creates the write-ahead log and the shared-memory file.
    store.insert_grant(&grant()).await.expect("insert_grant");
    for suffix in ["", "-wal", "-shm"] {
        let mut path = dir.file().into_os_string();
        path.push(suffix);
        let mode = std::fs::metadata(&path)
            .unwrap_or_else(|error| panic!("{path:?}: {error}"))
            .permissions()
            .mode();
        assert_eq!(
            mode & 0o777,
            0o600,
            "{path:?} has mode {:o}, readable by others",
            mode & 0o777
        );
    }
}

/// An event's payload reads back with the text it was recorded with,
/// member order and spacing included, not re-serialised.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_payload_reads_back_byte_for_byte() {
    let dir = TempDir::new();
    let store = file_store(&dir).await;
    let mut event = event(AccountId(random_uuid(&OsRandom)), 1);
    event.payload = EventPayload::from_json_text(
        r#"{"tags": ["x"], "email": "lead1@example.com", "conversion_identifier": "lite-1"}"#
            .to_owned(),
    )
    .expect("JSON");
    let submission = EventSubmission {
        events: vec![event.clone()],
        batch_uuid: None,
        idempotency: None,
    };
    store.record(&submission).await.expect("record");
    let read = store
        .find_event(event.event_uuid)
        .await
        .expect("find")
        .expect("the event");
    assert_eq!(read.payload.as_str(), event.payload.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_log_is_checkpointed_into_the_database_while_events_keep_coming() {
    // SQLite's own checkpoint would run inside a commit of the writer of
    // events once the log passed 1,000 pages; the store leaves it to a
    // thread of its own, nudged every 1,000 events, and the writer's own
    // only past 10,000 pages (`checkpointer.rs`). These events make a few
    // hundred pages of log: only that thread can have copied them into the
    // database file.
    let dir = TempDir::new();
    let store = file_store(&dir).await;
    let size = || std::fs::metadata(dir.file()).expect("the file").len();
    let empty = size();
    let account = AccountId(random_uuid(&OsRandom));
    let record = |first: usize, each: usize| {
        let writers: Vec<_> = (0..16)
            .map(|writer| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    for n in 0..each {
                        let submission = EventSubmission {
                            events: vec![event(account, first + writer * 1_000 + n)],
                            batch_uuid: None,
                            idempotency: None,
                        };
                        store.record(&submission).await.expect("record");
                    }
                })
            })
            .collect();
        async move {
            for writer in writers {
                writer.await.expect("a writer");
            }
        }
    };

    // 480 events: not yet a checkpoint's worth (one per commit would be
    // as many syncs of the database file as of the log).
    record(0, 30).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(size(), empty, "checkpointed before 1,000 events");

    record(100_000, 120).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while size() < empty + 512 * 1024 {
        assert!(
            std::time::Instant::now() < deadline,
            "the database file is still {} bytes ({empty} empty): nothing was checkpointed",
            size()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
