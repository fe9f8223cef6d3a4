//! The dialog in-process, for what the binary cannot show: a clock the
//! test moves (session expiry, the end of a throttle window), a password
//! check slot the test holds, client addresses beyond loopback, and a host
//! that forgets `ConnectInfo`. Everything else is tested through the binary
//! (tests/server). Run with `cargo test --examples`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, Request, StatusCode};
use conversion_gateway::{Gateway, GatewayConfig, ManualClock, Stores};
use http_body_util::BodyExt as _;
use tower::ServiceExt as _;

use crate::demo::{DEMO_REDIRECT_URI, DemoCredentials, seed_demo};
use crate::dialog::{DialogState, LoginLimits};
use crate::key_file::ServerKey;
use crate::passwords::{HashingLimit, Passwords};
use crate::throttle::ThrottleLimits;

/// The address requests come from unless a test says otherwise (TEST-NET-1).
const PEER: &str = "192.0.2.1:50000";

/// The app on in-memory stores with the demo data, on a manual clock.
struct Server {
    router: Router,
    demo: DemoCredentials,
    clock: Arc<ManualClock>,
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn cookie(&self, name: &str) -> Option<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|value| value.to_str().ok())
            .filter_map(|value| value.split(';').next()?.split_once('='))
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.to_owned())
    }

    fn hidden(&self, name: &str) -> String {
        conversion_gateway_testkit::hidden(&self.text(), name)
    }
}

fn form(fields: &[(&str, &str)]) -> String {
    let mut serializer = form_urlencoded::Serializer::new(String::new());
    serializer.extend_pairs(fields);
    serializer.finish()
}

impl Server {
    async fn new() -> Self {
        Self::with_limits(LoginLimits::recommended()).await
    }

    async fn with_limits(limits: LoginLimits) -> Self {
        let key = ServerKey::from_hex(&"42".repeat(32)).expect("64 hex digits");
        let stores = Stores::in_memory();
        let gateway = Arc::new(Gateway::new(
            GatewayConfig::new("http://gateway.test"),
            stores.clone(),
            key.hasher(),
        ));
        // The cheapest Argon2 parameters keep the tests fast.
        let passwords = Passwords::new(8, 1);
        let demo = seed_demo(&gateway, &stores, &key, &passwords)
            .await
            .expect("seed the demo data");
        let clock = Arc::new(ManualClock::at_epoch_of_tests());
        let dialog = DialogState::new(gateway.clone(), &key, passwords, limits, clock.clone());
        Self {
            router: crate::app::router(gateway, dialog, None),
            demo,
            clock,
        }
    }

    /// Sends `request` as if from `address` (`None`: without the address,
    /// as a host that forgot `ConnectInfo` would).
    async fn send_from(&self, address: Option<&str>, mut request: Request<Body>) -> Reply {
        if let Some(address) = address {
            let address: SocketAddr = address.parse().expect("a socket address");
            request.extensions_mut().insert(ConnectInfo(address));
        }
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("the router is infallible");
        let (head, body) = response.into_parts();
        let body = body.collect().await.expect("a readable body").to_bytes();
        Reply {
            status: head.status,
            headers: head.headers,
            body,
        }
    }

    async fn get(&self, uri: &str, cookies: &str) -> Reply {
        let mut request = Request::get(uri);
        if !cookies.is_empty() {
            request = request.header("cookie", cookies);
        }
        self.send_from(Some(PEER), request.body(Body::empty()).unwrap())
            .await
    }

    fn dialog_query(&self) -> String {
        let redirect: String =
            form_urlencoded::byte_serialize(DEMO_REDIRECT_URI.as_bytes()).collect();
        format!("client_id={}&redirect_uri={redirect}", self.demo.client_id)
    }

    /// Opens the sign-in page and posts `email` and `password` from
    /// `address`: the answer to the login form.
    async fn try_sign_in(&self, address: Option<&str>, email: &str, password: &str) -> Reply {
        let query = self.dialog_query();
        let page = self.get(&format!("/auth/dialog?{query}"), "").await;
        let nonce = page.cookie("cg_login").expect("a login nonce cookie");
        let fields = [
            ("action", "login"),
            ("query", query.as_str()),
            ("csrf", &page.hidden("csrf")),
            ("email", email),
            ("password", password),
        ];
        let request = Request::post("/auth/dialog")
            .header("content-type", "application/x-www-form-urlencoded")
            .header("cookie", format!("cg_login={nonce}"))
            .body(Body::from(form(&fields)))
            .unwrap();
        self.send_from(address, request).await
    }

    /// Signs in as the demo account: the session cookie, as a `Cookie`
    /// header value.
    async fn sign_in(&self) -> String {
        let reply = self
            .try_sign_in(Some(PEER), &self.demo.email, &self.demo.password)
            .await;
        assert_eq!(reply.status, 303, "{}", reply.text());
        format!("cg_session={}", reply.cookie("cg_session").unwrap())
    }
}

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
