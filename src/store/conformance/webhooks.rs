//! The checks of [`WebhookStore`]'s webhooks one caller at a time:
//! registration and the uniqueness of a URL, updates, switching and
//! deletion, and the dispatcher's compare-and-set; and the helpers every
//! webhook check uses (`webhook_deliveries.rs` checks the deliveries).
//!
//! Leases take whatever is due in the whole store, so each check leases
//! with a generous limit and looks at the deliveries of its own webhooks
//! ([`mine`]); and it deletes its webhooks at its end, so that nothing it
//! left is due in the next.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use time::{Duration, OffsetDateTime};

use crate::random::{OsRandom, random_uuid};
use crate::records::webhook::{
    AttemptRecord, Delivery, DeliveryId, DeliveryNext, DeliveryState, LeasedDelivery, Webhook,
    WebhookChange, WebhookId, WebhookRelation, WebhookStatus,
};
use crate::store::error::StoreError;
use crate::store::feed::FeedCursor;
use crate::store::webhooks::{WebhookStore, WebhookWrite};

use super::fixtures::{base_time, new_account, new_delivery, new_url, new_webhook};

/// How many attempts a store keeps per webhook.
pub(super) const KEPT: usize = 20;

/// A lease limit above anything a check has due.
pub(super) const ANY: usize = 1_000;

/// No delivery, to compare a lease that must take none with.
pub(super) const NOTHING: [DeliveryId; 0] = [];

/// How long the checks' leases last.
pub(super) const LEASE: Duration = Duration::seconds(30);

/// [`base_time`] plus `seconds`.
pub(super) fn at(seconds: i64) -> OffsetDateTime {
    base_time() + Duration::seconds(seconds)
}

/// A cursor no dispatcher wrote before.
pub(super) fn new_cursor() -> FeedCursor {
    FeedCursor::new(format!("suite:{}", random_uuid(&OsRandom).simple()))
}

/// Stores `webhook`, which must be stored.
pub(super) async fn insert(store: &dyn WebhookStore, webhook: &Webhook) {
    assert_eq!(
        store.insert_webhook(webhook).await.expect("insert_webhook"),
        WebhookWrite::Stored,
        "a webhook with a URL of its own is stored"
    );
}

/// Records `deliveries` from the dispatcher's current cursor to a new one.
pub(super) async fn dispatch(store: &dyn WebhookStore, deliveries: &[Delivery]) {
    let from = store.dispatch_cursor().await.expect("dispatch_cursor");
    assert!(
        store
            .dispatch(&from, &new_cursor(), deliveries)
            .await
            .expect("dispatch"),
        "a dispatch from the stored cursor records its deliveries"
    );
}

/// The deliveries to `webhooks` among `leased`, in the order leased.
pub(super) fn mine(leased: Vec<LeasedDelivery>, webhooks: &[&Webhook]) -> Vec<LeasedDelivery> {
    leased
        .into_iter()
        .filter(|leased| {
            webhooks
                .iter()
                .any(|webhook| webhook.id == leased.delivery.webhook_id)
        })
        .collect()
}

/// The ids of `leased`, in order.
pub(super) fn ids(leased: &[LeasedDelivery]) -> Vec<DeliveryId> {
    leased.iter().map(|leased| leased.delivery.id).collect()
}

/// The end of the latest lease [`lease`] took of each delivery, so that
/// [`finish`] records an attempt under it as its sender would. Shared by
/// every check (delivery ids are unique), as checks of several stores run
/// at once.
static LEASES: Mutex<BTreeMap<DeliveryId, OffsetDateTime>> = Mutex::new(BTreeMap::new());

/// Leases at `now`, for [`LEASE`], everything due, skipping nothing; the
/// deliveries to `webhooks`.
pub(super) async fn lease(
    store: &dyn WebhookStore,
    now: OffsetDateTime,
    webhooks: &[&Webhook],
) -> Vec<LeasedDelivery> {
    let leased = store
        .lease_deliveries(now, now + LEASE, ANY, &[])
        .await
        .expect("lease_deliveries");
    let mut leases = LEASES.lock().unwrap_or_else(PoisonError::into_inner);
    for taken in &leased {
        assert_eq!(taken.leased_until, now + LEASE, "a lease carries its end");
        leases.insert(taken.delivery.id, taken.leased_until);
    }
    drop(leases);
    mine(leased, webhooks)
}

/// The end of the latest lease [`lease`] took of `delivery`; for one it
/// never leased, any time (a delivery without a lease takes any
/// attempt, as a retry's state is set here without a sender).
pub(super) fn latest_lease(delivery: &Delivery) -> OffsetDateTime {
    let leases = LEASES.lock().unwrap_or_else(PoisonError::into_inner);
    leases.get(&delivery.id).copied().unwrap_or_else(base_time)
}

/// An attempt at `delivery` made at `at`, answered `status`.
pub(super) fn attempt(
    delivery: &Delivery,
    at: OffsetDateTime,
    status: Option<u16>,
) -> AttemptRecord {
    AttemptRecord {
        delivery_id: delivery.id,
        webhook_id: delivery.webhook_id,
        at,
        status,
        error: match status {
            Some(200..=299) => None,
            Some(code) => Some(format!("status {code}")),
            None => Some("timeout".into()),
        },
        duration_ms: 125,
    }
}

/// Records an attempt at `delivery` at `at`, under its latest lease,
/// followed by `next` and `change`.
pub(super) async fn finish(
    store: &dyn WebhookStore,
    delivery: &Delivery,
    at: OffsetDateTime,
    next: DeliveryNext,
    change: WebhookChange,
) {
    let status = match next {
        DeliveryNext::Delivered => Some(200),
        DeliveryNext::Failed => Some(410),
        DeliveryNext::RetryAt(_) => Some(503),
    };
    store
        .finish_attempt(
            &attempt(delivery, at, status),
            latest_lease(delivery),
            next,
            change,
        )
        .await
        .expect("finish_attempt");
}

/// The stored webhook `id`, which must exist.
pub(super) async fn found(store: &dyn WebhookStore, id: WebhookId) -> Webhook {
    store
        .find_webhook(id)
        .await
        .expect("find_webhook")
        .expect("the webhook is stored")
}

/// The state and attempt count of `delivery`.
pub(super) async fn state_of(
    store: &dyn WebhookStore,
    delivery: &Delivery,
) -> Option<(DeliveryState, u32)> {
    store
        .delivery_state(delivery.id)
        .await
        .expect("delivery_state")
}

/// Deletes the checks' webhooks (and so their deliveries and attempts).
pub(super) async fn remove(store: &dyn WebhookStore, webhooks: &[&Webhook]) {
    for webhook in webhooks {
        store
            .delete_webhook(webhook.id)
            .await
            .expect("delete_webhook");
    }
}

/// A webhook reads back as stored; an id stored before is `Duplicate`; a
/// URL is unique per account (the same URL in another account is stored);
/// webhooks are listed per account and for all, in registration order.
/// (One event type exists, so a URL taken under another type is not
/// checked.)
pub(super) async fn check_registration(store: &dyn WebhookStore) {
    let (account, other_account) = (new_account(), new_account());
    let url = new_url();
    let first = new_webhook(account, &url);
    insert(store, &first).await;
    assert_eq!(
        store.find_webhook(first.id).await.expect("find_webhook"),
        Some(first.clone()),
        "a webhook reads back as inserted"
    );
    let again = store.insert_webhook(&first).await;
    assert!(
        matches!(again, Err(StoreError::Duplicate { .. })),
        "inserting a stored id is Duplicate, got {again:?}"
    );
    let same_url = new_webhook(account, &url);
    assert_eq!(
        store
            .insert_webhook(&same_url)
            .await
            .expect("insert_webhook"),
        WebhookWrite::DuplicateUrl,
        "an account's URL is refused for a second webhook of the same event type"
    );
    let refused = store.find_webhook(same_url.id).await.expect("find_webhook");
    assert_eq!(refused, None, "a refused webhook is not stored");
    let elsewhere = new_webhook(other_account, &url);
    insert(store, &elsewhere).await;
    // Every optional field in its other form: no identifiers, both
    // relations, switched off, failing.
    let second = Webhook {
        event_identifiers: Vec::new(),
        include_relations: vec![WebhookRelation::ContactFunnel, WebhookRelation::Company],
        status: WebhookStatus::Inactive,
        created_at: at(1),
        updated_at: at(2),
        failing_since: Some(at(3)),
        ..new_webhook(account, &new_url())
    };
    insert(store, &second).await;
    assert_eq!(
        found(store, second.id).await,
        second,
        "every field reads back"
    );

    let listed = store.list_webhooks(Some(account)).await.expect("list");
    assert_eq!(
        listed,
        vec![first.clone(), second.clone()],
        "an account's webhooks, oldest first"
    );
    let listed = store
        .list_webhooks(Some(other_account))
        .await
        .expect("list");
    assert_eq!(listed, vec![elsewhere.clone()]);
    let all = store.list_webhooks(None).await.expect("list");
    let position = |webhook: &Webhook| all.iter().position(|listed| listed == webhook);
    let positions = [position(&first), position(&elsewhere), position(&second)];
    assert!(
        positions.iter().all(Option::is_some) && positions.is_sorted(),
        "every account's webhooks, oldest first: {positions:?}"
    );
    let none = store
        .list_webhooks(Some(new_account()))
        .await
        .expect("list");
    assert!(none.is_empty(), "an account without webhooks: {none:?}");
    remove(store, &[&first, &elsewhere, &second]).await;
}

/// An update replaces the URL, identifiers, relations and `updated_at`,
/// and nothing else; it refuses a URL another webhook of the account has,
/// whatever account the caller names, but not the webhook's own nor
/// another account's; an unknown webhook is `NotFound`.
pub(super) async fn check_updates(store: &dyn WebhookStore) {
    let (account, other_account) = (new_account(), new_account());
    let (url_a, url_b) = (new_url(), new_url());
    let a = new_webhook(account, &url_a);
    let b = new_webhook(account, &url_b);
    let other = new_webhook(other_account, &new_url());
    for webhook in [&a, &b, &other] {
        insert(store, webhook).await;
    }

    let onto_a = Webhook {
        url: url_a.clone(),
        updated_at: at(60),
        ..b.clone()
    };
    assert_eq!(
        store.update_webhook(&onto_a).await.expect("update_webhook"),
        WebhookWrite::DuplicateUrl,
        "an update may not take a URL another webhook of the account has"
    );
    assert_eq!(
        found(store, b.id).await,
        b,
        "a refused update changes nothing"
    );
    let moved = Webhook {
        account_id: new_account(),
        ..onto_a.clone()
    };
    assert_eq!(
        store.update_webhook(&moved).await.expect("update_webhook"),
        WebhookWrite::DuplicateUrl,
        "a URL is unique in the webhook's stored account, whatever account an update names"
    );
    let unchanged = Webhook {
        updated_at: at(61),
        ..b.clone()
    };
    assert_eq!(
        store
            .update_webhook(&unchanged)
            .await
            .expect("update_webhook"),
        WebhookWrite::Stored,
        "a webhook's own URL is not a duplicate of itself"
    );

    let new_b = new_url();
    let update = Webhook {
        url: new_b.clone(),
        event_identifiers: vec!["renewal".into()],
        include_relations: vec![WebhookRelation::ContactFunnel],
        updated_at: at(120),
        // Not replaced by an update:
        status: WebhookStatus::Inactive,
        secret_salt: [0; 16],
        failing_since: Some(at(5)),
        created_at: at(999),
        ..b.clone()
    };
    assert_eq!(
        store.update_webhook(&update).await.expect("update_webhook"),
        WebhookWrite::Stored
    );
    let expected = Webhook {
        url: new_b,
        event_identifiers: vec!["renewal".into()],
        include_relations: vec![WebhookRelation::ContactFunnel],
        updated_at: at(120),
        ..b.clone()
    };
    assert_eq!(
        found(store, b.id).await,
        expected,
        "an update replaces the URL, identifiers, relations and updated_at only"
    );

    let onto_a_elsewhere = Webhook {
        url: url_a.clone(),
        ..other.clone()
    };
    assert_eq!(
        store
            .update_webhook(&onto_a_elsewhere)
            .await
            .expect("update_webhook"),
        WebhookWrite::Stored,
        "another account's URL is free"
    );
    assert_eq!(
        store
            .update_webhook(&new_webhook(account, &new_url()))
            .await
            .expect("update_webhook"),
        WebhookWrite::NotFound
    );
    remove(store, &[&a, &b, &other]).await;
}

/// Switching off keeps `failing_since`, switching on clears it, both set
/// `updated_at`; deleting answers whether the webhook existed and frees
/// its URL.
pub(super) async fn check_status_and_deletion(store: &dyn WebhookStore) {
    let account = new_account();
    let url = new_url();
    let webhook = Webhook {
        failing_since: Some(at(1)),
        ..new_webhook(account, &url)
    };
    insert(store, &webhook).await;
    let switched = store
        .set_webhook_status(webhook.id, WebhookStatus::Inactive, at(10))
        .await
        .expect("set_webhook_status");
    assert!(switched, "switching a stored webhook answers true");
    let off = found(store, webhook.id).await;
    assert_eq!(
        (off.status, off.updated_at, off.failing_since),
        (WebhookStatus::Inactive, at(10), Some(at(1))),
        "switching off sets the status and updated_at, and keeps failing_since"
    );
    store
        .set_webhook_status(webhook.id, WebhookStatus::Active, at(20))
        .await
        .expect("set_webhook_status");
    let on = found(store, webhook.id).await;
    assert_eq!(
        (on.status, on.updated_at, on.failing_since),
        (WebhookStatus::Active, at(20), None),
        "switching on clears failing_since"
    );
    let unknown = store
        .set_webhook_status(
            WebhookId(random_uuid(&OsRandom)),
            WebhookStatus::Active,
            at(20),
        )
        .await
        .expect("set_webhook_status");
    assert!(!unknown, "switching an unknown webhook answers false");

    assert!(store.delete_webhook(webhook.id).await.expect("delete"));
    let gone = store.find_webhook(webhook.id).await.expect("find_webhook");
    assert_eq!(gone, None, "a deleted webhook is gone");
    assert!(
        !store.delete_webhook(webhook.id).await.expect("delete"),
        "deleting twice answers false"
    );
    let listed = store.list_webhooks(Some(account)).await.expect("list");
    assert!(
        listed.is_empty(),
        "a deleted webhook is not listed: {listed:?}"
    );
    let successor = new_webhook(account, &url);
    insert(store, &successor).await;
    remove(store, &[&successor]).await;
}

/// A dispatch records its deliveries and moves the cursor; one from a
/// cursor that moved on records nothing and answers false; a page without
/// deliveries moves the cursor too. (A dispatch that fails changes
/// nothing: each SQL store's own tests make one fail.)
pub(super) async fn check_dispatch(store: &dyn WebhookStore) {
    let webhook = new_webhook(new_account(), &new_url());
    insert(store, &webhook).await;
    let pending = store.pending_deliveries().await.expect("pending");
    let page = [
        new_delivery(&webhook, "a@example.com"),
        new_delivery(&webhook, "b@example.com"),
    ];
    let from = store.dispatch_cursor().await.expect("dispatch_cursor");
    let to = new_cursor();
    assert!(
        store.dispatch(&from, &to, &page).await.expect("dispatch"),
        "a dispatch from the stored cursor succeeds"
    );
    assert_eq!(store.dispatch_cursor().await.expect("cursor"), to);
    for delivery in &page {
        assert_eq!(
            state_of(store, delivery).await,
            Some((DeliveryState::Pending, 0)),
            "a dispatched delivery is pending, never attempted"
        );
    }
    assert_eq!(
        store.pending_deliveries().await.expect("pending"),
        pending + 2
    );

    let late = [new_delivery(&webhook, "c@example.com")];
    let replayed = store
        .dispatch(&from, &new_cursor(), &late)
        .await
        .expect("dispatch");
    assert!(
        !replayed,
        "a dispatch from a cursor that moved on answers false"
    );
    assert_eq!(
        store.dispatch_cursor().await.expect("cursor"),
        to,
        "a refused dispatch leaves the cursor"
    );
    assert_eq!(
        state_of(store, &late[0]).await,
        None,
        "a refused dispatch records nothing"
    );

    let empty = new_cursor();
    assert!(store.dispatch(&to, &empty, &[]).await.expect("dispatch"));
    assert_eq!(
        store.dispatch_cursor().await.expect("cursor"),
        empty,
        "a page without deliveries moves the cursor"
    );

    // A webhook deleted after the dispatcher listed it gets nothing: its
    // delivery would wait for ever, never leased nor purged.
    let gone = new_webhook(new_account(), &new_url());
    insert(store, &gone).await;
    assert!(store.delete_webhook(gone.id).await.expect("delete"));
    let orphan = new_delivery(&gone, "e@example.com");
    let kept = new_delivery(&webhook, "e@example.com");
    let pending = store.pending_deliveries().await.expect("pending");
    dispatch(store, &[orphan.clone(), kept.clone()]).await;
    assert_eq!(
        state_of(store, &orphan).await,
        None,
        "a delivery to a deleted webhook is left out"
    );
    assert_eq!(
        state_of(store, &kept).await,
        Some((DeliveryState::Pending, 0)),
        "the rest of the page is recorded"
    );
    assert_eq!(
        store.pending_deliveries().await.expect("pending"),
        pending + 1
    );
    remove(store, &[&webhook]).await;
}
