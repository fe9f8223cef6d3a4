//! Our sign-in form on the dialog: session expiry, the throttle through
//! the pages, the bound on password checks, and a host without
//! `ConnectInfo`.

use std::sync::Arc;
use std::time::Duration;

use conversion_gateway::HashingLimit;
use conversion_gateway::ThrottleLimits;

use crate::{LoginLimits, PEER, Reply, Server};

/// Asserts a sign-in page refused with `status` and `Retry-After: seconds`,
/// whose notice says `text`.
#[track_caller]
fn assert_refused_sign_in(reply: &Reply, status: u16, seconds: &str, text: &str) {
    assert_eq!(reply.status.as_u16(), status, "{}", reply.text());
    assert_eq!(
        reply.header("retry-after"),
        Some(seconds),
        "{:?}",
        reply.headers
    );
    assert_eq!(
        reply.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let html = reply.text();
    assert!(html.contains(text), "{text:?} not in {html}");
    assert!(reply.cookie("cg_session").is_none(), "no session");
    assert_eq!(reply.header("cache-control"), Some("no-store"));
}

#[tokio::test]
async fn a_session_expires_after_10_minutes() {
    let server = Server::new().await;
    let uri = format!("/auth/dialog?{}", server.dialog_query());
    let session = server.sign_in().await;
    let consent = server.get(&uri, &session).await;
    assert!(
        consent.text().contains("Allow access?"),
        "{}",
        consent.text()
    );
    server.clock.advance(time::Duration::minutes(11));
    let page = server.get(&uri, &session).await;
    assert!(page.text().contains("Sign in"), "{}", page.text());
}

#[tokio::test]
async fn five_wrong_passwords_throttle_the_account_from_that_address_until_the_window_passes() {
    let server = Server::new().await;
    let email = server.demo.email.clone();
    for attempt in 1..=5 {
        let reply = server.try_sign_in(Some(PEER), &email, "wrong").await;
        assert_eq!(reply.status, 400, "attempt {attempt}: {}", reply.text());
    }
    let reply = server.try_sign_in(Some(PEER), &email, "wrong").await;
    assert_refused_sign_in(&reply, 429, "900", "try again in 15 minutes");
    // The right password does not get through the lock either, and a
    // refused attempt does not prolong it.
    server.clock.advance(time::Duration::minutes(10));
    let reply = server
        .try_sign_in(Some(PEER), &email, &server.demo.password)
        .await;
    assert_refused_sign_in(&reply, 429, "300", "try again in 5 minutes");
    server.clock.advance(time::Duration::seconds(299));
    let reply = server.try_sign_in(Some(PEER), &email, "wrong").await;
    assert_refused_sign_in(&reply, 429, "1", "try again in 1 second");

    server.clock.advance(time::Duration::seconds(1));
    let reply = server
        .try_sign_in(Some(PEER), &email, &server.demo.password)
        .await;
    assert_eq!(reply.status, 303, "{}", reply.text());
    assert!(reply.cookie("cg_session").is_some());
}

#[tokio::test]
async fn unknown_emails_are_throttled_by_address() {
    let server = Server::new().await;
    for n in 0..20 {
        let reply = server
            .try_sign_in(Some(PEER), &format!("nobody{n}@example.com"), "guess")
            .await;
        assert_eq!(reply.status, 400, "attempt {n}: {}", reply.text());
    }
    let reply = server
        .try_sign_in(Some(PEER), "nobody20@example.com", "guess")
        .await;
    assert_refused_sign_in(&reply, 429, "900", "Too many failed sign-in attempts");
    // Another address is not affected, and IPv6 addresses work the same.
    let reply = server
        .try_sign_in(Some("[2001:db8::1]:40000"), "nobody20@example.com", "guess")
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    server.clock.advance(time::Duration::minutes(15));
    let reply = server
        .try_sign_in(Some(PEER), "nobody21@example.com", "guess")
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
}

#[tokio::test]
async fn a_locked_account_stays_locked_through_a_flood_of_other_sign_ins() {
    let server = Server::with_limits(LoginLimits {
        throttle: ThrottleLimits {
            max_tracked: 60,
            ..ThrottleLimits::default()
        },
        ..LoginLimits::recommended()
    })
    .await;
    let email = server.demo.email.clone();
    for host in 1..=4 {
        for _ in 0..5 {
            let address = format!("203.0.113.{host}:40000");
            let reply = server.try_sign_in(Some(&address), &email, "wrong").await;
            assert_eq!(reply.status, 400, "{}", reply.text());
        }
    }
    // 100 failed sign-ins for other e-mails from other addresses: 300
    // keys through counters that hold 60.
    for n in 0..100 {
        let address = format!("10.0.{}.{}:40000", n / 250, n % 250 + 1);
        let reply = server
            .try_sign_in(Some(&address), &format!("x{n}@example.com"), "guess")
            .await;
        assert_eq!(reply.status, 400, "flood {n}: {}", reply.text());
    }
    server.clock.advance(time::Duration::minutes(5));
    let owner = server
        .try_sign_in(Some("198.51.100.7:41000"), &email, &server.demo.password)
        .await;
    assert_refused_sign_in(&owner, 429, "600", "try again in 10 minutes");
    server.clock.advance(time::Duration::minutes(10));
    let owner = server
        .try_sign_in(Some("198.51.100.7:41000"), &email, &server.demo.password)
        .await;
    assert_eq!(owner.status, 303, "{}", owner.text());
}

#[tokio::test]
async fn a_sign_in_that_finds_every_counter_locked_is_refused_with_retry_after() {
    let server = Server::with_limits(LoginLimits {
        throttle: ThrottleLimits {
            per_account_and_address: 1,
            per_account: 1,
            per_address: 1,
            max_tracked: 6,
            ..ThrottleLimits::default()
        },
        ..LoginLimits::recommended()
    })
    .await;
    for (email, address) in [
        ("a@example.com", "203.0.113.1:40000"),
        ("b@example.com", "203.0.113.2:40000"),
    ] {
        let reply = server.try_sign_in(Some(address), email, "guess").await;
        assert_eq!(reply.status, 400, "{}", reply.text());
    }
    server.clock.advance(time::Duration::minutes(1));
    // Its keys are new and every one held is locked: refused before the
    // store and Argon2, like a locked account, until the first lock ends.
    let reply = server
        .try_sign_in(Some(PEER), &server.demo.email, &server.demo.password)
        .await;
    assert_refused_sign_in(&reply, 429, "840", "try again in 14 minutes");
    server.clock.advance(time::Duration::minutes(14));
    let reply = server
        .try_sign_in(Some(PEER), &server.demo.email, &server.demo.password)
        .await;
    assert_eq!(reply.status, 303, "{}", reply.text());
}

/// A server whose password checks take turns on one slot, which the test
/// can hold, waiting at most 50 ms for it.
async fn server_with_one_hashing_slot() -> (Server, Arc<tokio::sync::Semaphore>) {
    let slot = Arc::new(tokio::sync::Semaphore::new(1));
    let limits = LoginLimits {
        hashing: HashingLimit::new(slot.clone(), Duration::from_millis(50)),
        ..LoginLimits::recommended()
    };
    (Server::with_limits(limits).await, slot)
}

#[tokio::test]
async fn sign_ins_beyond_the_password_check_bound_are_refused_as_busy_and_not_counted() {
    let (server, slot) = server_with_one_hashing_slot().await;
    let email = server.demo.email.clone();
    let held = slot.clone().try_acquire_owned().expect("the one slot");
    for _ in 0..8 {
        let reply = server
            .try_sign_in(Some(PEER), &email, &server.demo.password)
            .await;
        assert_refused_sign_in(&reply, 503, "1", "The service is busy");
    }
    drop(held);
    // The refused attempts were never checked, so they did not count as
    // failures: five more wrong passwords are still allowed.
    for attempt in 1..=5 {
        let reply = server.try_sign_in(Some(PEER), &email, "wrong").await;
        assert_eq!(reply.status, 400, "attempt {attempt}: {}", reply.text());
    }
    let reply = server
        .try_sign_in(Some("198.51.100.7:41000"), &email, &server.demo.password)
        .await;
    assert_eq!(reply.status, 303, "{}", reply.text());
    assert_eq!(
        slot.available_permits(),
        1,
        "every check gave its slot back"
    );
}

#[tokio::test]
async fn a_throttled_sign_in_does_not_wait_for_a_password_check() {
    let (server, slot) = server_with_one_hashing_slot().await;
    let email = server.demo.email.clone();
    for _ in 0..5 {
        server.try_sign_in(Some(PEER), &email, "wrong").await;
    }
    // With the only slot taken, an attempt that reached Argon2 would be
    // answered 503 busy: 429 shows it was refused before.
    let _held = slot.clone().try_acquire_owned().expect("the one slot");
    let reply = server.try_sign_in(Some(PEER), &email, "wrong").await;
    assert_refused_sign_in(&reply, 429, "900", "Too many failed sign-in attempts");
}

#[tokio::test]
async fn a_sign_in_without_the_client_address_is_refused_not_throttled_with_others() {
    let server = Server::new().await;
    // No ConnectInfo: a wiring mistake of the host, answered with the
    // service's JSON error.
    let reply = server
        .try_sign_in(None, &server.demo.email, &server.demo.password)
        .await;
    assert_eq!(reply.status, 500, "{}", reply.text());
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert!(
        reply.text().contains("INTERNAL_SERVER_ERROR"),
        "{}",
        reply.text()
    );
    assert!(reply.cookie("cg_session").is_none());
}
