//! The checks of [`WebhookStore`]'s dispatched pages: a contact's queue
//! growing across pages (and the repair of queue heads finding nothing to
//! mend in it), a full page and a page past one SQL statement leased as
//! dispatched, in order, and a page dispatched again, whose deliveries
//! recorded already are left out.

use crate::DISPATCH_PAGE;
use crate::records::webhook::{
    Delivery, DeliveryNext, DeliveryState, LeasedDelivery, WebhookChange,
};
use crate::store::webhooks::{DISPATCH_STATEMENT_BYTES, WebhookStore};

use super::fixtures::{new_account, new_delivery, new_url, new_webhook};
use super::webhooks::{LEASE, NOTHING, at, dispatch, finish, ids, insert, lease, remove, state_of};

/// A contact's queue to a webhook spans pages: a delivery dispatched while
/// an earlier one of its contact is pending waits for it to end, however
/// many are queued behind it and whatever their pages; one dispatched
/// once the queue has emptied is leased at once; a retry keeps its place
/// at the head; another contact's deliveries go on meanwhile.
pub(super) async fn check_queue_across_pages(store: &dyn WebhookStore) {
    let webhook = new_webhook(new_account(), &new_url());
    insert(store, &webhook).await;
    let first = new_delivery(&webhook, "q@example.com");
    dispatch(store, std::slice::from_ref(&first)).await;
    assert_eq!(ids(&lease(store, at(0), &[&webhook]).await), [first.id]);

    // Three pages while the first is out: the contact's queue grows behind
    // it, another contact's delivery is leased.
    let queued: Vec<Delivery> = (0..3)
        .map(|_| new_delivery(&webhook, "q@example.com"))
        .collect();
    let other = new_delivery(&webhook, "r@example.com");
    dispatch(store, &queued[..1]).await;
    dispatch(store, &[queued[1].clone(), other.clone()]).await;
    dispatch(store, &queued[2..]).await;
    // The repair of queues an earlier release wrote finds nothing to mend
    // in what this store wrote, and marks nothing leasable behind the
    // delivery out.
    assert_eq!(repair(store).await, 0, "nothing to repair");
    assert_eq!(
        ids(&lease(store, at(1), &[&webhook]).await),
        [other.id],
        "a contact's later pages wait for its delivery out; another contact's do not"
    );
    // Another webhook's queue of the same contact, deleted with its
    // webhook: this webhook's queue is left as it was.
    let deleted = new_webhook(new_account(), &new_url());
    insert(store, &deleted).await;
    dispatch(store, &[new_delivery(&deleted, "q@example.com")]).await;
    remove(store, &[&deleted]).await;

    finish(
        store,
        &first,
        at(2),
        DeliveryNext::RetryAt(at(10)),
        WebhookChange::Failing(at(2)),
    )
    .await;
    assert_eq!(repair(store).await, 0, "nothing to repair");
    assert_eq!(
        ids(&lease(store, at(9), &[&webhook]).await),
        NOTHING,
        "a delivery waiting for its retry still holds its contact's queue"
    );
    assert_eq!(
        ids(&lease(store, at(10), &[&webhook]).await),
        [first.id],
        "the retry, at its time, before the deliveries queued behind it"
    );
    let mut now = 11;
    let mut ended = first;
    for next in &queued {
        finish(
            store,
            &ended,
            at(now),
            DeliveryNext::Delivered,
            WebhookChange::Succeeded,
        )
        .await;
        assert_eq!(
            ids(&lease(store, at(now + 1), &[&webhook]).await),
            [next.id],
            "the next of the contact's queue, page after page, once the one before ended"
        );
        now += 2;
        ended = next.clone();
    }
    finish(
        store,
        &ended,
        at(now),
        DeliveryNext::Failed,
        WebhookChange::Succeeded,
    )
    .await;

    // The queue is empty: the contact's next delivery goes at once.
    let later = new_delivery(&webhook, "q@example.com");
    dispatch(store, std::slice::from_ref(&later)).await;
    assert_eq!(
        ids(&lease(store, at(now + 1), &[&webhook]).await),
        [later.id],
        "a delivery dispatched once its contact's queue is empty is leased at once"
    );
    remove(store, &[&webhook]).await;
}

/// [`WebhookStore::repair_queue_heads`], which has nothing to repair in
/// what the store itself wrote.
async fn repair(store: &dyn WebhookStore) -> usize {
    store
        .repair_queue_heads()
        .await
        .expect("repair_queue_heads")
}

/// A page of [`DISPATCH_PAGE`] deliveries (one a conversion of a full
/// page of the feed; a page holds more when several webhooks want a
/// conversion), to two webhooks in turn, all due at once, is leased in
/// the order it was dispatched (the lease's order among equals is the
/// deliveries' numbers), and each delivery reads back as dispatched:
/// contact keys and bodies holding quotes, backslashes, tabs, line breaks
/// and characters outside ASCII included.
pub(super) async fn check_full_page_order(store: &dyn WebhookStore) {
    let account = new_account();
    let (first, second) = (
        new_webhook(account, &new_url()),
        new_webhook(account, &new_url()),
    );
    insert(store, &first).await;
    insert(store, &second).await;
    let page: Vec<Delivery> = (0..DISPATCH_PAGE)
        .map(|n| {
            let webhook = if n % 2 == 0 { &first } else { &second };
            let mut delivery = new_delivery(webhook, &format!("{n}.\"zoë\"\\\n😀@example.com"));
            delivery.body = format!("{{\"n\":{n},\"text\":\"\\\"\ttab\\\\ é 😀 \u{2028}\n\"}}");
            delivery
        })
        .collect();
    dispatch(store, &page).await;
    let leased = lease(store, at(0), &[&first, &second]).await;
    assert_leased_as_dispatched(leased, &page, "a full page");
    remove(store, &[&first, &second]).await;
}

/// A page dispatched again, as where the dispatcher's cursor was set back
/// over pages it had passed: the deliveries already recorded (one
/// delivered since, one pending) are left out, not recorded twice and
/// not refused, and so is a delivery given twice in one page; the new
/// one is recorded behind them and the cursor moves.
pub(super) async fn check_page_dispatched_again(store: &dyn WebhookStore) {
    let webhook = new_webhook(new_account(), &new_url());
    insert(store, &webhook).await;
    let a1 = new_delivery(&webhook, "a@example.com");
    let b1 = new_delivery(&webhook, "b@example.com");
    dispatch(store, &[a1.clone(), b1.clone()]).await;
    assert_eq!(ids(&lease(store, at(0), &[&webhook]).await), [a1.id, b1.id]);
    finish(
        store,
        &a1,
        at(1),
        DeliveryNext::Delivered,
        WebhookChange::Succeeded,
    )
    .await;

    let a2 = new_delivery(&webhook, "a@example.com");
    let mut a1_again = a1.clone();
    a1_again.created_at = at(2);
    dispatch(store, &[a1_again, b1.clone(), a2.clone(), a2.clone()]).await;
    assert_eq!(
        state_of(store, &a1).await,
        Some((DeliveryState::Delivered, 1)),
        "a delivery recorded already is left as it is"
    );
    assert_eq!(
        ids(&lease(store, at(2) + LEASE, &[&webhook]).await),
        [b1.id, a2.id],
        "each delivery once: the pending one where it was, the new one behind it"
    );
    remove(store, &[&webhook]).await;
}

/// A page larger than a SQL store's statement carries (two and a half
/// times [`DISPATCH_STATEMENT_BYTES`], in bodies of 256 KiB, past the
/// intake's largest) is recorded whole, each delivery as dispatched, and
/// leased in the order it was dispatched: PostgreSQL records it in three
/// statements, SQLite row by row. (Where a page is cut is tested in
/// `store::sql::page_runs`; that a store cuts at all would take a page
/// past 1 GB to show, too large for a test.)
pub(super) async fn check_page_past_one_statement(store: &dyn WebhookStore) {
    const BODY: usize = 256 << 10;
    let webhook = new_webhook(new_account(), &new_url());
    insert(store, &webhook).await;
    let count = DISPATCH_STATEMENT_BYTES * 5 / 2 / BODY;
    let page: Vec<Delivery> = (0..count)
        .map(|n| {
            let mut delivery = new_delivery(&webhook, &format!("lead{n}@example.com"));
            let text = format!("{{\"n\":{n},\"pad\":\"");
            delivery.body = format!("{text}{}\"}}", "é".repeat((BODY - text.len() - 2) / 2));
            delivery
        })
        .collect();
    dispatch(store, &page).await;
    let leased = lease(store, at(0), &[&webhook]).await;
    assert_leased_as_dispatched(leased, &page, "a page past one statement");
    remove(store, &[&webhook]).await;
}

/// Panics unless `leased` is `page`, delivery for delivery and in order,
/// naming the first difference.
fn assert_leased_as_dispatched(leased: Vec<LeasedDelivery>, page: &[Delivery], what: &str) {
    let leased: Vec<Delivery> = leased.into_iter().map(|l| l.delivery).collect();
    assert_eq!(leased.len(), page.len(), "{what}: every delivery is leased");
    if let Some(at) = (0..page.len()).find(|&n| leased[n] != page[n]) {
        panic!(
            "{what} is leased in the order it was dispatched, as dispatched; the first \
             difference is at {at}: leased {}, dispatched {}",
            shown(&leased[at]),
            shown(&page[at])
        );
    }
}

/// `delivery` for a failure message: whole, or with a long body by its
/// length.
fn shown(delivery: &Delivery) -> String {
    if delivery.body.len() <= 512 {
        format!("{delivery:?}")
    } else {
        format!(
            "{:?} (contact {:?}, a body of {} bytes)",
            delivery.id,
            delivery.contact_key,
            delivery.body.len()
        )
    }
}
