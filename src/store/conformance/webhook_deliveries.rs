//! The checks of [`WebhookStore`]'s deliveries one caller at a time: which
//! deliveries a lease takes and in what order, leases and retries in
//! time, attempts and their consequences on the delivery and its webhook,
//! the count of pending deliveries, the purge, and what deleting a webhook
//! takes with it.

use time::Duration;

use crate::records::webhook::{
    AttemptRecord, Delivery, DeliveryNext, DeliveryState, LeasedDelivery, WebhookChange,
    WebhookStatus,
};
use crate::store::webhooks::WebhookStore;

use super::fixtures::{base_time, new_account, new_delivery, new_url, new_webhook};
use super::webhooks::{
    ANY, KEPT, LEASE, NOTHING, at, attempt, dispatch, finish, found, ids, insert, latest_lease,
    lease, mine, remove, state_of,
};

/// A lease takes the first pending delivery of each contact to a webhook,
/// oldest due first (dispatch order among equals), and carries the
/// webhook's URL, salt and `failing_since` and the attempts so far; the
/// next delivery of a contact waits until the one before is delivered or
/// failed; a leased delivery is leased again only once its lease ended
/// before `now`; a retry waits for its time; at most `limit` are leased.
pub(super) async fn check_lease_order(store: &dyn WebhookStore) {
    let webhook = new_webhook(new_account(), &new_url());
    insert(store, &webhook).await;
    let a1 = new_delivery(&webhook, "a@example.com");
    let a2 = new_delivery(&webhook, "a@example.com");
    let b1 = new_delivery(&webhook, "b@example.com");
    dispatch(store, &[a1.clone(), a2.clone(), b1.clone()]).await;

    let leased = lease(store, at(0), &[&webhook]).await;
    assert_eq!(
        ids(&leased),
        [a1.id, b1.id],
        "the first delivery of each contact, in dispatch order"
    );
    assert_eq!(
        leased[0],
        LeasedDelivery {
            delivery: a1.clone(),
            url: webhook.url.clone(),
            secret_salt: webhook.secret_salt,
            failing_since: None,
            attempts: 0,
            leased_until: at(0) + LEASE,
        },
        "a leased delivery reads back as dispatched, with its webhook's URL and salt"
    );
    let leased = lease(store, at(1), &[&webhook]).await;
    assert_eq!(
        ids(&leased),
        NOTHING,
        "leased deliveries are not leased again, and a contact's next waits"
    );

    finish(
        store,
        &a1,
        at(2),
        DeliveryNext::Delivered,
        WebhookChange::Succeeded,
    )
    .await;
    let leased = lease(store, at(3), &[&webhook]).await;
    assert_eq!(
        ids(&leased),
        [a2.id],
        "a contact's next delivery once the one before is delivered"
    );
    // b1's lease runs until at(30): not ended at at(30) itself.
    let leased = lease(store, at(30), &[&webhook]).await;
    assert_eq!(ids(&leased), NOTHING, "a lease lasts until its end");
    let leased = lease(store, at(31), &[&webhook]).await;
    assert_eq!(
        ids(&leased),
        [b1.id],
        "a delivery whose lease ended is leased again"
    );

    finish(
        store,
        &a2,
        at(31),
        DeliveryNext::Delivered,
        WebhookChange::Succeeded,
    )
    .await;
    finish(
        store,
        &b1,
        at(32),
        DeliveryNext::RetryAt(at(100)),
        WebhookChange::Failing(at(32)),
    )
    .await;
    let leased = lease(store, at(99), &[&webhook]).await;
    assert_eq!(ids(&leased), NOTHING, "a retry waits for its time");
    let leased = lease(store, at(100), &[&webhook]).await;
    assert_eq!(ids(&leased), [b1.id], "a retry is due at its time");
    assert_eq!(leased[0].attempts, 1, "the attempts made so far");
    assert_eq!(leased[0].failing_since, Some(at(32)));
    remove(store, &[&webhook]).await;

    // Oldest due first, whatever the dispatch order; at most `limit`.
    let webhook = new_webhook(new_account(), &new_url());
    insert(store, &webhook).await;
    let (c1, e1) = (
        new_delivery(&webhook, "c@example.com"),
        new_delivery(&webhook, "e@example.com"),
    );
    let (c2, e2) = (
        new_delivery(&webhook, "c@example.com"),
        new_delivery(&webhook, "e@example.com"),
    );
    dispatch(store, &[c1.clone(), e1.clone(), c2.clone(), e2.clone()]).await;
    let retried = WebhookChange::Failing(at(0));
    finish(store, &c1, at(0), DeliveryNext::RetryAt(at(50)), retried).await;
    finish(store, &e1, at(0), DeliveryNext::RetryAt(at(40)), retried).await;
    let leased = lease(store, at(60), &[&webhook]).await;
    assert_eq!(
        ids(&leased),
        [e1.id, c1.id],
        "the delivery due first is leased first"
    );
    finish(
        store,
        &c1,
        at(61),
        DeliveryNext::Failed,
        WebhookChange::Succeeded,
    )
    .await;
    finish(
        store,
        &e1,
        at(61),
        DeliveryNext::Failed,
        WebhookChange::Succeeded,
    )
    .await;
    let first = store
        .lease_deliveries(at(62), at(62) + LEASE, 1, &[])
        .await
        .expect("lease_deliveries");
    assert_eq!(
        ids(&first),
        [c2.id],
        "a contact's next delivery once the one before failed; at most `limit`"
    );
    let second = store
        .lease_deliveries(at(62), at(62) + LEASE, 1, &[])
        .await
        .expect("lease_deliveries");
    assert_eq!(ids(&second), [e2.id]);
    let none = store
        .lease_deliveries(at(62), at(62) + LEASE, 0, &[])
        .await
        .expect("lease_deliveries");
    assert!(none.is_empty(), "a limit of 0 leases nothing: {none:?}");
    remove(store, &[&webhook]).await;
}

/// A lease skips the webhooks in `skip` and inactive webhooks, and
/// deliveries not yet due; one contact's deliveries to two webhooks go
/// independently.
pub(super) async fn check_lease_eligibility(store: &dyn WebhookStore) {
    let account = new_account();
    let first = new_webhook(account, &new_url());
    let second = new_webhook(account, &new_url());
    insert(store, &first).await;
    insert(store, &second).await;
    let to_first = new_delivery(&first, "x@example.com");
    let to_second = new_delivery(&second, "x@example.com");
    let later = Delivery {
        created_at: at(10),
        ..new_delivery(&second, "y@example.com")
    };
    dispatch(store, &[to_first.clone(), to_second.clone(), later.clone()]).await;
    let both = [&first, &second];

    let leased = store
        .lease_deliveries(at(0), at(0) + LEASE, ANY, &[first.id])
        .await
        .expect("lease_deliveries");
    assert_eq!(
        ids(&mine(leased, &both)),
        [to_second.id],
        "a skipped webhook's deliveries are not leased; a contact is per webhook"
    );
    store
        .set_webhook_status(first.id, WebhookStatus::Inactive, at(1))
        .await
        .expect("set_webhook_status");
    let leased = lease(store, at(1), &both).await;
    assert_eq!(
        ids(&leased),
        NOTHING,
        "an inactive webhook's deliveries are not leased"
    );
    store
        .set_webhook_status(first.id, WebhookStatus::Active, at(2))
        .await
        .expect("set_webhook_status");
    let leased = lease(store, at(9), &both).await;
    assert_eq!(
        ids(&leased),
        [to_first.id],
        "switched on again, its deliveries are leased; one not due waits"
    );
    let leased = lease(store, at(10), &both).await;
    assert_eq!(
        ids(&leased),
        [later.id],
        "a delivery is due from its creation"
    );
    remove(store, &both).await;
}

/// An attempt recorded late, on a delivery another sender leased once
/// this one's lease had run out and ended first, changes nothing: the
/// delivery stays delivered with the one attempt counted, its webhook
/// is not marked failing, and the answer is the change as if nothing was
/// there.
pub(super) async fn check_late_attempt_on_an_ended_delivery(store: &dyn WebhookStore) {
    let webhook = new_webhook(new_account(), &new_url());
    insert(store, &webhook).await;
    let delivery = new_delivery(&webhook, "late@example.com");
    dispatch(store, std::slice::from_ref(&delivery)).await;
    assert_eq!(ids(&lease(store, at(0), &[&webhook]).await), [delivery.id]);
    // The first lease ran out: another sender leases it and delivers it.
    assert_eq!(
        ids(&lease(store, at(0) + LEASE + Duration::seconds(1), &[&webhook]).await),
        [delivery.id]
    );
    finish(
        store,
        &delivery,
        at(40),
        DeliveryNext::Delivered,
        WebhookChange::Succeeded,
    )
    .await;
    let late = store
        .finish_attempt(
            &attempt(&delivery, at(41), None),
            at(0) + LEASE,
            DeliveryNext::Failed,
            WebhookChange::SwitchOffIfFailingSince(at(41)),
        )
        .await
        .expect("finish_attempt");
    assert_eq!(late, WebhookChange::Failing(at(41)));
    assert_eq!(
        state_of(store, &delivery).await,
        Some((DeliveryState::Delivered, 1)),
        "a late attempt leaves the delivery as the one before ended it"
    );
    let kept = found(store, webhook.id).await;
    assert_eq!(
        (kept.status, kept.failing_since),
        (WebhookStatus::Active, None)
    );
    remove(store, &[&webhook]).await;
}

/// An attempt that outlived its lease, finished while another sender
/// holds the delivery under a lease of its own, changes nothing: the
/// delivery stays leased to the second sender (a third leases nothing
/// beside it), with its attempts and due time as they were, the attempt
/// is not kept, and the webhook is not marked failing. The second
/// sender's attempt is recorded as usual.
pub(super) async fn check_late_attempt_beside_a_live_lease(store: &dyn WebhookStore) {
    let webhook = new_webhook(new_account(), &new_url());
    insert(store, &webhook).await;
    let delivery = new_delivery(&webhook, "held@example.com");
    dispatch(store, std::slice::from_ref(&delivery)).await;
    let first = lease(store, at(0), &[&webhook]).await;
    assert_eq!(ids(&first), [delivery.id]);
    let second = lease(store, at(0) + LEASE + Duration::seconds(1), &[&webhook]).await;
    assert_eq!(ids(&second), [delivery.id], "the first lease ran out");
    assert_ne!(first[0].leased_until, second[0].leased_until);

    let late = store
        .finish_attempt(
            &attempt(&delivery, at(35), None),
            first[0].leased_until,
            DeliveryNext::RetryAt(at(36)),
            WebhookChange::Failing(at(35)),
        )
        .await
        .expect("finish_attempt");
    assert_eq!(
        late,
        WebhookChange::Failing(at(35)),
        "as applied to nothing"
    );
    assert_eq!(
        ids(&lease(store, at(40), &[&webhook]).await),
        NOTHING,
        "the second sender's lease stands: no third sender beside it"
    );
    assert_eq!(
        state_of(store, &delivery).await,
        Some((DeliveryState::Pending, 0)),
        "the late attempt is not counted"
    );
    let kept = store
        .recent_attempts(webhook.id, ANY)
        .await
        .expect("recent_attempts");
    assert!(kept.is_empty(), "nor kept: {kept:?}");
    assert_eq!(found(store, webhook.id).await.failing_since, None);

    let done = attempt(&delivery, at(45), Some(200));
    store
        .finish_attempt(
            &done,
            second[0].leased_until,
            DeliveryNext::Delivered,
            WebhookChange::Succeeded,
        )
        .await
        .expect("finish_attempt");
    assert_eq!(
        state_of(store, &delivery).await,
        Some((DeliveryState::Delivered, 1))
    );
    assert_eq!(
        store
            .recent_attempts(webhook.id, ANY)
            .await
            .expect("recent_attempts"),
        [done]
    );
    remove(store, &[&webhook]).await;
}

/// Each attempt is kept and counted; the last [`KEPT`] of each webhook
/// are kept, newest first, and reach the next lease's count.
pub(super) async fn check_attempts(store: &dyn WebhookStore) {
    let account = new_account();
    let webhook = new_webhook(account, &new_url());
    let neighbour = new_webhook(account, &new_url());
    insert(store, &webhook).await;
    insert(store, &neighbour).await;
    let delivery = new_delivery(&webhook, "a@example.com");
    let beside = new_delivery(&neighbour, "a@example.com");
    dispatch(store, &[delivery.clone(), beside.clone()]).await;

    let mut made = Vec::new();
    for n in 0..25_i64 {
        let record = AttemptRecord {
            duration_ms: if n == 24 { u64::from(u32::MAX) + 7 } else { 0 },
            ..attempt(&delivery, at(n), if n % 2 == 0 { Some(500) } else { None })
        };
        store
            .finish_attempt(
                &record,
                latest_lease(&delivery),
                DeliveryNext::RetryAt(at(n + 1)),
                WebhookChange::Failing(at(0)),
            )
            .await
            .expect("finish_attempt");
        made.push(record);
    }
    let kept = store
        .recent_attempts(webhook.id, ANY)
        .await
        .expect("recent_attempts");
    let newest: Vec<AttemptRecord> = made.iter().rev().take(KEPT).cloned().collect();
    assert_eq!(
        kept, newest,
        "the last 20 attempts are kept, newest first, as recorded"
    );
    let three = store
        .recent_attempts(webhook.id, 3)
        .await
        .expect("recent_attempts");
    assert_eq!(three, newest[..3], "at most `limit` attempts");
    assert_eq!(
        state_of(store, &delivery).await,
        Some((DeliveryState::Pending, 25)),
        "every attempt is counted"
    );

    let delivered = attempt(&beside, at(3), Some(204));
    store
        .finish_attempt(
            &delivered,
            latest_lease(&beside),
            DeliveryNext::Delivered,
            WebhookChange::Succeeded,
        )
        .await
        .expect("finish_attempt");
    assert_eq!(
        store
            .recent_attempts(neighbour.id, ANY)
            .await
            .expect("recent_attempts"),
        [delivered],
        "attempts are kept per webhook"
    );
    let still = store
        .recent_attempts(webhook.id, ANY)
        .await
        .expect("recent_attempts");
    assert_eq!(still.len(), KEPT, "another webhook's attempt trims nothing");

    let leased = lease(store, at(100), &[&webhook]).await;
    assert_eq!(ids(&leased), [delivery.id]);
    assert_eq!(
        leased[0].attempts, 25,
        "a lease reports the attempts so far"
    );
    remove(store, &[&webhook, &neighbour]).await;
}

/// `failing_since` is set by the first failure of a run and kept by the
/// next ones, cleared by a success; a switch-off makes the webhook
/// inactive at the attempt's time (its deliveries then wait), keeping
/// `failing_since` until it is switched on again.
pub(super) async fn check_failing_and_switch_off(store: &dyn WebhookStore) {
    let webhook = new_webhook(new_account(), &new_url());
    insert(store, &webhook).await;
    let (a, b, c) = (
        new_delivery(&webhook, "a@example.com"),
        new_delivery(&webhook, "b@example.com"),
        new_delivery(&webhook, "c@example.com"),
    );
    dispatch(store, &[a.clone(), b.clone()]).await;

    finish(
        store,
        &a,
        at(1),
        DeliveryNext::RetryAt(at(60)),
        WebhookChange::Failing(at(1)),
    )
    .await;
    assert_eq!(found(store, webhook.id).await.failing_since, Some(at(1)));
    finish(
        store,
        &a,
        at(2),
        DeliveryNext::RetryAt(at(60)),
        WebhookChange::Failing(at(2)),
    )
    .await;
    assert_eq!(
        found(store, webhook.id).await.failing_since,
        Some(at(1)),
        "failing_since is the first failure's time"
    );
    let leased = lease(store, at(60), &[&webhook]).await;
    let failing: Vec<_> = leased.iter().map(|leased| leased.failing_since).collect();
    assert_eq!(
        failing,
        [Some(at(1)), Some(at(1))],
        "a lease carries the webhook's failing_since"
    );
    finish(
        store,
        &a,
        at(61),
        DeliveryNext::Delivered,
        WebhookChange::Succeeded,
    )
    .await;
    assert_eq!(
        found(store, webhook.id).await.failing_since,
        None,
        "a success clears failing_since"
    );
    assert_eq!(
        state_of(store, &a).await,
        Some((DeliveryState::Delivered, 3))
    );

    finish(
        store,
        &b,
        at(70),
        DeliveryNext::RetryAt(at(80)),
        WebhookChange::Failing(at(70)),
    )
    .await;
    dispatch(store, std::slice::from_ref(&c)).await;
    finish(
        store,
        &b,
        at(80),
        DeliveryNext::Failed,
        WebhookChange::SwitchOff,
    )
    .await;
    let off = found(store, webhook.id).await;
    assert_eq!(
        (off.status, off.updated_at, off.failing_since),
        (WebhookStatus::Inactive, at(80), Some(at(70))),
        "a switch-off makes the webhook inactive at the attempt's time"
    );
    assert_eq!(state_of(store, &b).await, Some((DeliveryState::Failed, 2)));
    let leased = lease(store, at(90), &[&webhook]).await;
    assert_eq!(
        ids(&leased),
        NOTHING,
        "a switched-off webhook's deliveries wait"
    );
    store
        .set_webhook_status(webhook.id, WebhookStatus::Active, at(91))
        .await
        .expect("set_webhook_status");
    assert_eq!(found(store, webhook.id).await.failing_since, None);
    let leased = lease(store, at(92), &[&webhook]).await;
    assert_eq!(ids(&leased), [c.id], "switched on, they are leased again");
    remove(store, &[&webhook]).await;
}

/// Pending deliveries are counted until they end; a delivery's state
/// follows its attempts; an attempt at a delivery that is gone is
/// accepted and kept nowhere.
pub(super) async fn check_pending_and_states(store: &dyn WebhookStore) {
    let webhook = new_webhook(new_account(), &new_url());
    insert(store, &webhook).await;
    let before = store.pending_deliveries().await.expect("pending");
    let page = [
        new_delivery(&webhook, "a@example.com"),
        new_delivery(&webhook, "b@example.com"),
        new_delivery(&webhook, "c@example.com"),
    ];
    dispatch(store, &page).await;
    let pending = || async move { store.pending_deliveries().await.expect("pending") };
    assert_eq!(pending().await, before + 3);
    finish(
        store,
        &page[0],
        at(1),
        DeliveryNext::Delivered,
        WebhookChange::Succeeded,
    )
    .await;
    assert_eq!(pending().await, before + 2, "a delivered delivery ends");
    finish(
        store,
        &page[1],
        at(1),
        DeliveryNext::Failed,
        WebhookChange::Succeeded,
    )
    .await;
    assert_eq!(pending().await, before + 1, "a failed delivery ends");
    finish(
        store,
        &page[2],
        at(1),
        DeliveryNext::RetryAt(at(9)),
        WebhookChange::Succeeded,
    )
    .await;
    assert_eq!(pending().await, before + 1, "a retried delivery is pending");
    let states = [
        state_of(store, &page[0]).await,
        state_of(store, &page[1]).await,
        state_of(store, &page[2]).await,
    ];
    assert_eq!(
        states,
        [
            Some((DeliveryState::Delivered, 1)),
            Some((DeliveryState::Failed, 1)),
            Some((DeliveryState::Pending, 1)),
        ]
    );
    let unknown = new_delivery(&webhook, "z@example.com");
    assert_eq!(state_of(store, &unknown).await, None);
    store
        .finish_attempt(
            &attempt(&unknown, at(2), Some(200)),
            latest_lease(&unknown),
            DeliveryNext::Delivered,
            WebhookChange::Succeeded,
        )
        .await
        .expect("an attempt at a delivery that is gone is accepted");
    let kept = store
        .recent_attempts(webhook.id, ANY)
        .await
        .expect("recent_attempts");
    assert_eq!(
        kept.len(),
        3,
        "an attempt at no delivery is not kept: {kept:?}"
    );
    remove(store, &[&webhook]).await;
    assert_eq!(pending().await, before, "a deleted webhook's deliveries go");
}

/// The purge deletes at most `limit` deliveries that ended before the
/// cutoff, oldest dispatched first, never a pending one, and leaves the
/// webhook's last attempts.
pub(super) async fn check_delivery_purge(store: &dyn WebhookStore) {
    // Long before the other checks' instants, so that only this check's
    // deliveries end before its cutoffs.
    let era = base_time() - Duration::days(400);
    let when = |seconds: i64| era + Duration::seconds(seconds);
    let webhook = new_webhook(new_account(), &new_url());
    insert(store, &webhook).await;
    let page: Vec<Delivery> = ["a", "b", "c", "d"]
        .iter()
        .map(|contact| new_delivery(&webhook, &format!("{contact}@example.com")))
        .collect();
    dispatch(store, &page).await;
    let change = WebhookChange::Succeeded;
    finish(store, &page[0], when(10), DeliveryNext::Delivered, change).await;
    finish(store, &page[1], when(20), DeliveryNext::Failed, change).await;
    finish(
        store,
        &page[2],
        when(30),
        DeliveryNext::RetryAt(when(90)),
        change,
    )
    .await;
    finish(store, &page[3], when(40), DeliveryNext::Delivered, change).await;

    let purged = store.purge_deliveries(when(20), ANY).await.expect("purge");
    assert_eq!(purged, 1, "only deliveries that ended before the cutoff");
    assert_eq!(state_of(store, &page[0]).await, None);
    assert!(
        state_of(store, &page[1]).await.is_some(),
        "ended at the cutoff"
    );
    let none = store.purge_deliveries(when(41), 0).await.expect("purge");
    assert_eq!(none, 0, "a limit of 0 purges nothing");
    let one = store.purge_deliveries(when(41), 1).await.expect("purge");
    assert_eq!(one, 1, "at most `limit`");
    assert_eq!(
        state_of(store, &page[1]).await,
        None,
        "oldest dispatched first"
    );
    assert!(state_of(store, &page[3]).await.is_some());
    let rest = store.purge_deliveries(when(41), ANY).await.expect("purge");
    assert_eq!(rest, 1);
    assert_eq!(
        state_of(store, &page[2]).await,
        Some((DeliveryState::Pending, 1)),
        "a pending delivery is never purged"
    );
    let kept = store
        .recent_attempts(webhook.id, ANY)
        .await
        .expect("recent_attempts");
    assert_eq!(kept.len(), 4, "the last attempts stay: {kept:?}");
    remove(store, &[&webhook]).await;
}

/// Deleting a webhook deletes its deliveries, leased or ended, and its
/// attempts, and no other webhook's; an attempt that ends after it is
/// accepted and kept nowhere.
pub(super) async fn check_deletion_takes_deliveries(store: &dyn WebhookStore) {
    let account = new_account();
    let webhook = new_webhook(account, &new_url());
    let neighbour = new_webhook(account, &new_url());
    insert(store, &webhook).await;
    insert(store, &neighbour).await;
    let (ended, leased, beside) = (
        new_delivery(&webhook, "a@example.com"),
        new_delivery(&webhook, "b@example.com"),
        new_delivery(&neighbour, "a@example.com"),
    );
    dispatch(store, &[ended.clone(), leased.clone(), beside.clone()]).await;
    finish(
        store,
        &ended,
        at(1),
        DeliveryNext::Delivered,
        WebhookChange::Succeeded,
    )
    .await;
    let taken = lease(store, at(2), &[&webhook]).await;
    assert_eq!(ids(&taken), [leased.id]);
    let before = store.pending_deliveries().await.expect("pending");

    assert!(store.delete_webhook(webhook.id).await.expect("delete"));
    assert_eq!(state_of(store, &ended).await, None, "ended deliveries go");
    assert_eq!(state_of(store, &leased).await, None, "leased deliveries go");
    assert_eq!(
        store.pending_deliveries().await.expect("pending"),
        before - 1
    );
    let attempts = store
        .recent_attempts(webhook.id, ANY)
        .await
        .expect("recent_attempts");
    assert!(attempts.is_empty(), "its attempts go: {attempts:?}");
    store
        .finish_attempt(
            &attempt(&leased, at(3), Some(200)),
            latest_lease(&leased),
            DeliveryNext::Delivered,
            WebhookChange::Succeeded,
        )
        .await
        .expect("an attempt that ends after its webhook's deletion is accepted");
    let attempts = store
        .recent_attempts(webhook.id, ANY)
        .await
        .expect("recent_attempts");
    assert!(attempts.is_empty(), "and kept nowhere: {attempts:?}");
    assert_eq!(
        state_of(store, &beside).await,
        Some((DeliveryState::Pending, 0)),
        "another webhook's deliveries stay"
    );
    remove(store, &[&neighbour]).await;
}

/// A switch-off for failing too long is made against `failing_since` as
/// stored when the attempt is recorded, not as the lease read it: after a
/// success beside it, the failure is the first of a new run (and
/// `failing_since` its time, not the old run's); a cutoff before the
/// stored `failing_since` switches nothing off; one at or after it does.
/// The change made is answered.
pub(super) async fn check_switch_off_against_the_stored_failures(store: &dyn WebhookStore) {
    let webhook = new_webhook(new_account(), &new_url());
    insert(store, &webhook).await;
    let (a, b) = (
        new_delivery(&webhook, "a@example.com"),
        new_delivery(&webhook, "b@example.com"),
    );
    dispatch(store, &[a.clone(), b.clone()]).await;
    let finished = |delivery: &Delivery, seconds: i64, change: WebhookChange| {
        let record = attempt(delivery, at(seconds), Some(500));
        let next = DeliveryNext::RetryAt(at(seconds + 1000));
        let leased_until = latest_lease(delivery);
        async move {
            store
                .finish_attempt(&record, leased_until, next, change)
                .await
                .expect("finish_attempt")
        }
    };
    assert_eq!(
        finished(&a, 1, WebhookChange::Failing(at(1))).await,
        WebhookChange::Failing(at(1))
    );
    let leased = lease(store, at(2), &[&webhook]).await;
    assert_eq!(leased[0].failing_since, Some(at(1)));
    assert_eq!(
        finished(&b, 3, WebhookChange::Succeeded).await,
        WebhookChange::Succeeded
    );
    // The lease said failing since 1: the cutoff of five days is past it.
    assert_eq!(
        finished(&b, 4, WebhookChange::SwitchOffIfFailingSince(at(1))).await,
        WebhookChange::Failing(at(4)),
        "a success since: the failure starts a new run"
    );
    let kept = found(store, webhook.id).await;
    assert_eq!(
        (kept.status, kept.failing_since),
        (WebhookStatus::Active, Some(at(4)))
    );
    assert_eq!(
        finished(&b, 5, WebhookChange::SwitchOffIfFailingSince(at(3))).await,
        WebhookChange::Failing(at(5)),
        "failing since after the cutoff: not switched off"
    );
    assert_eq!(found(store, webhook.id).await.failing_since, Some(at(4)));
    assert_eq!(
        finished(&b, 6, WebhookChange::SwitchOffIfFailingSince(at(4))).await,
        WebhookChange::SwitchOff
    );
    let off = found(store, webhook.id).await;
    assert_eq!(
        (off.status, off.updated_at, off.failing_since),
        (WebhookStatus::Inactive, at(6), Some(at(4)))
    );
    remove(store, &[&webhook]).await;
}
