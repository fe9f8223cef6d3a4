//! The checks of the atomic operations under concurrency: [`RACERS`] tasks
//! at once take one code, redeem one code, rotate one refresh token,
//! create API keys against one account's limit, retry one request with
//! one idempotency key, register one URL or dispatch one page of the feed;
//! exactly one may win. And many callers leasing webhook deliveries at once
//! never share one.

use std::sync::Arc;

use time::Duration;
use uuid::Uuid;

use crate::account::AccountId;
use crate::random::{OsRandom, random_uuid};
use crate::records::api_key::ApiKeyRecord;
use crate::records::event::{EventSubmission, RecordOutcome};
use crate::records::webhook::{Delivery, DeliveryNext, WebhookChange};
use crate::store::webhooks::{WebhookStore, WebhookWrite};
use crate::store::{ApiKeyStore, CodeTake, EventSink, Rotation};

use super::fixtures::{
    RACERS, base_time, claim, hasher, new_access, new_account, new_code, new_delivery, new_event,
    new_grant, new_refresh, new_url, new_webhook,
};
use super::webhooks;

/// Of many callers taking one code at once, exactly one takes it; the
/// others learn its grant.
pub(super) async fn check_concurrent_code_take(store: Arc<dyn crate::store::TokenStore>) {
    let grant = new_grant();
    store.insert_grant(&grant).await.expect("insert_grant");
    let code = new_code(&grant);
    store.insert_code(&code).await.expect("insert_code");
    let tasks: Vec<_> = (0..RACERS)
        .map(|_| {
            let store = store.clone();
            let hash = code.hash;
            tokio::spawn(async move { store.take_code(&hash).await })
        })
        .collect();
    let mut taken = 0;
    for task in tasks {
        match task.await.expect("task").expect("take_code") {
            CodeTake::Taken(_) => taken += 1,
            CodeTake::AlreadyTaken { grant_id, .. } => assert_eq!(grant_id, grant.id),
            CodeTake::NotFound => panic!("a stored code must not be reported missing"),
        }
    }
    assert_eq!(taken, 1, "exactly one concurrent caller may take a code");
}

/// Of many callers rotating one refresh token at once, exactly one
/// rotates it; the others learn the winner's successor, and only the
/// winner's tokens are stored.
pub(super) async fn check_concurrent_rotation(store: Arc<dyn crate::store::TokenStore>) {
    let grant = new_grant();
    store.insert_grant(&grant).await.expect("insert_grant");
    let token = new_refresh(&grant);
    store
        .insert_refresh_token(&token)
        .await
        .expect("insert_refresh_token");
    let successors: Vec<_> = (0..RACERS)
        .map(|_| (new_refresh(&grant), new_access(&grant)))
        .collect();
    let tasks: Vec<_> = successors
        .iter()
        .cloned()
        .map(|(successor, access)| {
            let store = store.clone();
            let old = token.hash;
            tokio::spawn(async move {
                store
                    .rotate_refresh_token(&old, &successor, &access, base_time())
                    .await
            })
        })
        .collect();
    let mut winners = Vec::new();
    let mut named = Vec::new();
    for (task, (successor, _)) in tasks.into_iter().zip(&successors) {
        match task.await.expect("task").expect("rotate_refresh_token") {
            Rotation::Rotated => winners.push(successor.hash),
            Rotation::AlreadyRotated { successor, .. } => named.push(successor),
            other => panic!("unexpected rotation result {other:?}"),
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "exactly one concurrent caller may rotate a refresh token"
    );
    assert!(
        named.iter().all(|hash| *hash == winners[0]),
        "losers must learn the winner's successor"
    );
    let mut live = 0;
    let mut access_tokens = 0;
    for (successor, access) in &successors {
        if store
            .find_refresh_token(&successor.hash)
            .await
            .expect("find")
            .is_some()
        {
            live += 1;
        }
        if store
            .find_access_token(&access.hash)
            .await
            .expect("find")
            .is_some()
        {
            access_tokens += 1;
        }
    }
    assert_eq!(live, 1, "only the winner's successor may be stored");
    assert_eq!(
        access_tokens, 1,
        "only the winner's access token may be stored"
    );
}

/// Of many callers redeeming one code at once, exactly one redeems it,
/// and only the winner's two tokens are stored.
pub(super) async fn check_concurrent_redemption(store: Arc<dyn crate::store::TokenStore>) {
    let grant = new_grant();
    store.insert_grant(&grant).await.expect("insert_grant");
    let code = new_code(&grant);
    store.insert_code(&code).await.expect("insert_code");
    let tokens: Vec<_> = (0..RACERS)
        .map(|_| (new_refresh(&grant), new_access(&grant)))
        .collect();
    let tasks: Vec<_> = tokens
        .iter()
        .cloned()
        .map(|(refresh, access)| {
            let store = store.clone();
            let hash = code.hash;
            tokio::spawn(async move { store.redeem_code(&hash, &refresh, &access).await })
        })
        .collect();
    let mut taken = 0;
    for task in tasks {
        match task.await.expect("task").expect("redeem_code") {
            CodeTake::Taken(_) => taken += 1,
            CodeTake::AlreadyTaken { grant_id, .. } => assert_eq!(grant_id, grant.id),
            other => panic!("unexpected redemption result {other:?}"),
        }
    }
    assert_eq!(taken, 1, "exactly one concurrent caller may redeem a code");
    let mut stored = 0;
    for (refresh, access) in &tokens {
        let has_refresh = store
            .find_refresh_token(&refresh.hash)
            .await
            .expect("find")
            .is_some();
        let has_access = store
            .find_access_token(&access.hash)
            .await
            .expect("find")
            .is_some();
        assert_eq!(
            has_refresh, has_access,
            "a redemption stores both of its tokens or neither"
        );
        stored += usize::from(has_refresh);
    }
    assert_eq!(stored, 1, "only the winner's tokens may be stored");
}

/// The per-account limit of API keys holds when many keys are created at
/// once: `account` holds `first`, and of the racers only four more fit
/// under a limit of five. The keys are then listed oldest first.
pub(super) async fn check_concurrent_key_limit(
    store: Arc<dyn ApiKeyStore>,
    account: AccountId,
    first: &ApiKeyRecord,
) {
    let tasks: Vec<_> = (0..RACERS)
        .map(|i| {
            let store = store.clone();
            let at = base_time() + Duration::seconds(i as i64 + 1);
            let (record, _) =
                ApiKeyRecord::issue(account, format!("key {i}"), at, &OsRandom, &hasher());
            tokio::spawn(async move { store.insert_api_key(&record, 5).await })
        })
        .collect();
    let mut stored = 1;
    for task in tasks {
        if task.await.expect("task").expect("insert_api_key") {
            stored += 1;
        }
    }
    assert_eq!(stored, 5, "an account may not exceed max_per_account keys");
    let listed = store.list_api_keys(account).await.expect("list_api_keys");
    assert_eq!(listed.len(), 5);
    assert_eq!(listed[0], *first, "keys are listed oldest first");
    assert!(
        listed
            .windows(2)
            .all(|w| w[0].created_at <= w[1].created_at)
    );
    assert!(
        store
            .list_api_keys(AccountId(random_uuid(&OsRandom)))
            .await
            .expect("list")
            .is_empty()
    );
}

/// Of many retries of one request under one idempotency key at once,
/// exactly one records; the others are answered with its event uuid.
pub(super) async fn check_concurrent_idempotent_retries(
    sink: Arc<dyn EventSink>,
    account: AccountId,
) {
    let key: Arc<str> = format!(
        "race-{}",
        Uuid::from_bytes(random_uuid(&OsRandom).into_bytes())
    )
    .into();
    let submissions: Vec<_> = (0..RACERS)
        .map(|n| EventSubmission {
            events: vec![new_event(account, 100 + n)],
            batch_uuid: None,
            idempotency: Some(claim(account, &key, 9, base_time())),
        })
        .collect();
    let tasks: Vec<_> = submissions
        .iter()
        .cloned()
        .map(|submission| {
            let sink = sink.clone();
            tokio::spawn(async move { sink.record(&submission).await })
        })
        .collect();
    let mut recorded = Vec::new();
    let mut replayed = Vec::new();
    for (task, submission) in tasks.into_iter().zip(&submissions) {
        match task.await.expect("task").expect("record") {
            RecordOutcome::Recorded => recorded.push(submission.events[0].event_uuid),
            RecordOutcome::Replayed { event_uuids, .. } => replayed.push(event_uuids),
            RecordOutcome::KeyReused => panic!("same fingerprint must not be KeyReused"),
        }
    }
    assert_eq!(recorded.len(), 1, "exactly one concurrent retry may record");
    assert!(
        replayed.iter().all(|uuids| uuids == &recorded),
        "retries must answer the first event_uuid"
    );
}

/// Of many webhooks registered at once with one account's URL, exactly
/// one is stored; the others are refused as [`WebhookWrite::DuplicateUrl`].
pub(super) async fn check_concurrent_webhook_registration(store: Arc<dyn WebhookStore>) {
    let account = new_account();
    let url = new_url();
    let tasks: Vec<_> = (0..RACERS)
        .map(|_| {
            let store = store.clone();
            let webhook = new_webhook(account, &url);
            tokio::spawn(async move { store.insert_webhook(&webhook).await })
        })
        .collect();
    let mut stored = 0;
    for task in tasks {
        match task.await.expect("task").expect("insert_webhook") {
            WebhookWrite::Stored => stored += 1,
            WebhookWrite::DuplicateUrl => {}
            other => panic!("unexpected insert result {other:?}"),
        }
    }
    assert_eq!(stored, 1, "exactly one concurrent caller may take a URL");
    let listed = store.list_webhooks(Some(account)).await.expect("list");
    assert_eq!(listed.len(), 1, "one webhook per URL: {listed:?}");
    webhooks::remove(&*store, &[&listed[0]]).await;
}

/// Of many dispatchers passing one page at once (each with deliveries of
/// its own), exactly one records its deliveries and moves the cursor.
pub(super) async fn check_concurrent_dispatch(store: Arc<dyn WebhookStore>) {
    let webhook = new_webhook(new_account(), &new_url());
    webhooks::insert(&*store, &webhook).await;
    let from = store.dispatch_cursor().await.expect("dispatch_cursor");
    let pages: Vec<_> = (0..RACERS)
        .map(|n| {
            let delivery = new_delivery(&webhook, &format!("lead{n}@example.com"));
            (webhooks::new_cursor(), delivery)
        })
        .collect();
    let tasks: Vec<_> = pages
        .iter()
        .cloned()
        .map(|(to, delivery)| {
            let store = store.clone();
            let from = from.clone();
            tokio::spawn(async move { store.dispatch(&from, &to, &[delivery]).await })
        })
        .collect();
    let mut winners = Vec::new();
    for (task, page) in tasks.into_iter().zip(&pages) {
        if task.await.expect("task").expect("dispatch") {
            winners.push(page);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one dispatcher may pass a page");
    let (to, _) = winners[0];
    assert_eq!(store.dispatch_cursor().await.expect("cursor"), *to);
    for (cursor, delivery) in &pages {
        let recorded = store
            .delivery_state(delivery.id)
            .await
            .expect("delivery_state")
            .is_some();
        assert_eq!(
            recorded,
            cursor == to,
            "only the winner's deliveries are recorded"
        );
    }
    webhooks::remove(&*store, &[&webhook]).await;
}

/// Many callers leasing at once never get the same delivery, nor two
/// deliveries of one contact to one webhook: in each of four rounds, the
/// leases take the first pending delivery of each of 16 contacts, each
/// once, and the next round's only once those are delivered.
pub(super) async fn check_concurrent_leases(store: Arc<dyn WebhookStore>) {
    const CONTACTS: usize = 16;
    const ROUNDS: usize = 4;
    let webhook = new_webhook(new_account(), &new_url());
    webhooks::insert(&*store, &webhook).await;
    let rounds: Vec<Vec<Delivery>> = (0..ROUNDS)
        .map(|_| {
            (0..CONTACTS)
                .map(|n| new_delivery(&webhook, &format!("lead{n}@example.com")))
                .collect()
        })
        .collect();
    webhooks::dispatch(&*store, &rounds.concat()).await;
    for (round, expected) in rounds.iter().enumerate() {
        let now = webhooks::at(round as i64);
        let until = now + Duration::hours(1);
        let tasks: Vec<_> = (0..RACERS)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move { store.lease_deliveries(now, until, 2, &[]).await })
            })
            .collect();
        let mut leased = Vec::new();
        for task in tasks {
            leased.extend(task.await.expect("task").expect("lease_deliveries"));
        }
        // What a racer skipped while another held it and then left is
        // leased now.
        leased.extend(
            store
                .lease_deliveries(now, until, 1_000, &[])
                .await
                .expect("lease_deliveries"),
        );
        let leased = webhooks::mine(leased, &[&webhook]);
        let mut got = webhooks::ids(&leased);
        got.sort();
        let mut want: Vec<_> = expected.iter().map(|delivery| delivery.id).collect();
        want.sort();
        assert_eq!(
            got, want,
            "round {round}: each contact's first pending delivery, leased exactly once"
        );
        let finishes: Vec<_> = expected
            .iter()
            .cloned()
            .map(|delivery| {
                let store = store.clone();
                tokio::spawn(async move {
                    let attempt = webhooks::attempt(&delivery, now, Some(200));
                    store
                        .finish_attempt(
                            &attempt,
                            until,
                            DeliveryNext::Delivered,
                            WebhookChange::Succeeded,
                        )
                        .await
                })
            })
            .collect();
        for finish in finishes {
            finish.await.expect("task").expect("finish_attempt");
        }
    }
    let attempts = store
        .recent_attempts(webhook.id, 1_000)
        .await
        .expect("recent_attempts");
    assert_eq!(
        attempts.len(),
        20,
        "the last 20 attempts are kept, whoever records them at once"
    );
    webhooks::remove(&*store, &[&webhook]).await;
}
