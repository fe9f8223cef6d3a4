//! The example server (`examples/server`) driven in-process through its
//! axum router: every route, the dialog's pages and their protection (CSRF,
//! sign-in throttling, the bound on password checks), every error of the
//! earlier issues as the HTTP client sees it, the logs, and a restart on the
//! same SQLite file.

// main.rs uses parts of the app (the key file, the recommended password
// cost) that not every test here does.
#[allow(dead_code)]
#[path = "../examples/server/app.rs"]
mod app;

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use app::{
    AppState, DEMO_REDIRECT_URI, DemoCredentials, HashingLimit, LoginLimits, Passwords, ServerKey,
};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, Request, StatusCode};
use base64::Engine as _;
use conversion_gateway::{
    EventSink, EventSubmission, Gateway, GatewayConfig, ManualClock, RecordOutcome, RecordedEvent,
    StoreError, Stores,
};
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use tower::ServiceExt as _;

const BASE_URL: &str = "http://gateway.test";

/// The address requests come from unless a test says otherwise (TEST-NET-1).
const PEER: &str = "192.0.2.1:50000";

fn peer(address: &str) -> SocketAddr {
    address.parse().expect("a socket address")
}

fn key() -> ServerKey {
    ServerKey::from_hex(&"42".repeat(32)).expect("64 hex digits")
}

/// The router on in-memory stores, with the demo data seeded.
struct Server {
    router: Router,
    demo: DemoCredentials,
    gateway: Arc<Gateway>,
    stores: Stores,
    clock: Arc<ManualClock>,
}

/// A response, read whole.
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// The JSON body; fails unless the answer says it is JSON.
    fn json(&self) -> Value {
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "status {}",
            self.status
        );
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    /// The HTML body; fails unless the answer says it is HTML.
    fn html(&self) -> &str {
        assert_eq!(
            self.header("content-type"),
            Some("text/html; charset=utf-8"),
            "status {}",
            self.status
        );
        std::str::from_utf8(&self.body).expect("UTF-8")
    }

    /// The value a `Set-Cookie` header gives cookie `name`.
    fn cookie(&self, name: &str) -> Option<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|value| value.to_str().ok())
            .filter_map(|value| value.split(';').next()?.split_once('='))
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.to_owned())
    }

    /// The value of the page's hidden input `name`.
    fn hidden(&self, name: &str) -> String {
        let marker = format!(r#"name="{name}" value=""#);
        let html = self.html();
        let start = html
            .find(&marker)
            .unwrap_or_else(|| panic!("no field {name} in {html}"))
            + marker.len();
        html[start..]
            .split('"')
            .next()
            .unwrap_or_default()
            .to_owned()
    }

    fn location(&self) -> &str {
        self.header("location").expect("a Location header")
    }

    /// `error_type` of a JSON error answer, checking its status.
    fn assert_error(&self, status: u16, error_type: &str) {
        assert_eq!(
            self.status.as_u16(),
            status,
            "{:?}",
            String::from_utf8_lossy(&self.body)
        );
        let body = self.json();
        assert_eq!(body["error_type"], error_type, "{body}");
        assert!(body["error_message"].is_string(), "{body}");
    }

    /// Asserts a validation answer, `{"errors": [...]}`, whose one error has
    /// this type.
    #[track_caller]
    fn assert_validation_error(&self, status: u16, error_type: &str) -> serde_json::Value {
        assert_eq!(
            self.status.as_u16(),
            status,
            "{:?}",
            String::from_utf8_lossy(&self.body)
        );
        let body = self.json();
        let errors = body["errors"].as_array().expect("an errors array");
        assert_eq!(errors.len(), 1, "{body}");
        assert_eq!(errors[0]["error_type"], error_type, "{body}");
        assert!(errors[0]["error_message"].is_string(), "{body}");
        errors[0].clone()
    }
}

fn encode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

fn form(fields: &[(&str, &str)]) -> String {
    let mut serializer = form_urlencoded::Serializer::new(String::new());
    serializer.extend_pairs(fields);
    serializer.finish()
}

/// The query parameter `name` of a URL.
fn param(url: &str, name: &str) -> Option<String> {
    let query = url.split_once('?')?.1;
    form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

fn basic(id: &str, secret: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{id}:{secret}"))
    )
}

fn conversion_body(email: &str) -> Value {
    json!({
        "event_type": "CONVERSION",
        "event_family": "CDP",
        "payload": { "conversion_identifier": "newsletter", "email": email, "cf_plan": "pro" },
    })
}

impl Server {
    async fn new() -> Self {
        Self::with_stores(Stores::in_memory(), &key()).await
    }

    async fn with_stores(stores: Stores, key: &ServerKey) -> Self {
        Self::with_limits(stores, key, LoginLimits::recommended()).await
    }

    async fn with_limits(stores: Stores, key: &ServerKey, limits: LoginLimits) -> Self {
        let gateway = Arc::new(Gateway::new(
            GatewayConfig::new(BASE_URL),
            stores.clone(),
            key.hasher(),
        ));
        // The cheapest Argon2 parameters keep the tests fast.
        let passwords = Passwords::new(8, 1);
        let demo = app::seed_demo(&gateway, &stores, key, &passwords)
            .await
            .expect("seed the demo data");
        let clock = Arc::new(ManualClock::at_epoch_of_tests());
        let state = AppState::new(gateway.clone(), key, passwords, limits, clock.clone());
        Self {
            router: app::router(state),
            demo,
            gateway,
            stores,
            clock,
        }
    }

    async fn send(&self, request: Request<Body>) -> Reply {
        self.send_from(peer(PEER), request).await
    }

    /// Sends `request` as if from `address`, as the accept loop tells the
    /// router.
    async fn send_from(&self, address: SocketAddr, mut request: Request<Body>) -> Reply {
        request.extensions_mut().insert(ConnectInfo(address));
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
        self.send(request.body(Body::empty()).unwrap()).await
    }

    async fn post(&self, uri: &str, headers: &[(&str, &str)], body: impl Into<Body>) -> Reply {
        let mut request = Request::post(uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.send(request.body(body.into()).unwrap()).await
    }

    async fn post_form(&self, uri: &str, cookies: &str, fields: &[(&str, &str)]) -> Reply {
        let mut headers = vec![("content-type", "application/x-www-form-urlencoded")];
        if !cookies.is_empty() {
            headers.push(("cookie", cookies));
        }
        self.post(uri, &headers, form(fields)).await
    }

    async fn post_json(&self, uri: &str, authorization: Option<&str>, body: &Value) -> Reply {
        let mut headers = vec![("content-type", "application/json")];
        if let Some(authorization) = authorization {
            headers.push(("authorization", authorization));
        }
        self.post(uri, &headers, body.to_string()).await
    }

    fn dialog_query(&self, extra: &str) -> String {
        format!(
            "client_id={}&redirect_uri={}{extra}",
            self.demo.client_id,
            encode(DEMO_REDIRECT_URI)
        )
    }

    /// Opens the sign-in page and signs in as the demo account: the session
    /// cookie, as a `Cookie` header value.
    async fn sign_in(&self, query: &str) -> String {
        let page = self.get(&format!("/auth/dialog?{query}"), "").await;
        assert_eq!(page.status, 200, "{}", page.html());
        let nonce = page.cookie("cg_login").expect("a login nonce cookie");
        let reply = self
            .post_form(
                "/auth/dialog",
                &format!("cg_login={nonce}"),
                &[
                    ("action", "login"),
                    ("query", query),
                    ("csrf", &page.hidden("csrf")),
                    ("email", &self.demo.email),
                    ("password", &self.demo.password),
                ],
            )
            .await;
        assert_eq!(
            reply.status,
            303,
            "{:?}",
            String::from_utf8_lossy(&reply.body)
        );
        assert_eq!(reply.location(), format!("/auth/dialog?{query}"));
        format!(
            "cg_session={}",
            reply.cookie("cg_session").expect("a session cookie")
        )
    }

    /// Opens the sign-in page and posts `email` and `password` from
    /// `address`: the answer to the login form.
    async fn try_sign_in(&self, address: &str, email: &str, password: &str) -> Reply {
        let query = self.dialog_query("");
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
        self.send_from(peer(address), request).await
    }

    /// Signs in, answers the consent screen, and returns the answer.
    async fn decide(&self, query: &str, decision: &str) -> Reply {
        let session = self.sign_in(query).await;
        let consent = self.get(&format!("/auth/dialog?{query}"), &session).await;
        assert!(consent.html().contains("Allow access?"));
        let fields = [
            ("action", "consent"),
            ("query", query),
            ("csrf", &consent.hidden("csrf")),
            ("decision", decision),
        ];
        self.post_form("/auth/dialog", &session, &fields).await
    }

    async fn code(&self) -> String {
        let reply = self.decide(&self.dialog_query(""), "allow").await;
        assert_eq!(reply.status, 302);
        param(reply.location(), "code").expect("a code")
    }

    /// A fresh code exchanged with JSON: (access token, refresh token).
    async fn tokens(&self) -> (String, String) {
        let code = self.code().await;
        let body = json!({ "client_id": self.demo.client_id, "client_secret": self.demo.client_secret, "code": code });
        let reply = self.post_json("/auth/token", None, &body).await;
        assert_eq!(reply.status, 200);
        let tokens = reply.json();
        (
            tokens["access_token"].as_str().unwrap().to_owned(),
            tokens["refresh_token"].as_str().unwrap().to_owned(),
        )
    }

    async fn refresh(&self, refresh_token: &str) -> Reply {
        let body = json!({
            "client_id": self.demo.client_id, "client_secret": self.demo.client_secret, "refresh_token": refresh_token,
        });
        self.post_json("/auth/token", None, &body).await
    }

    async fn convert(&self, api_key: &str, body: &Value) -> Reply {
        self.post_json(
            &format!("/platform/conversions?api_key={api_key}"),
            None,
            body,
        )
        .await
    }
}

fn assert_dialog_headers(reply: &Reply) {
    assert_eq!(reply.header("cache-control"), Some("no-store"));
    assert_eq!(reply.header("x-frame-options"), Some("DENY"));
    let policy = reply.header("content-security-policy").expect("a CSP");
    for directive in [
        "default-src 'none'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "style-src 'sha256-",
    ] {
        assert!(policy.contains(directive), "{policy}");
    }
    assert!(!policy.contains("unsafe"), "{policy}");
    assert!(
        !policy.contains("script-src"),
        "no script is allowed: {policy}"
    );
}

// --- the dialog ------------------------------------------------------------

#[tokio::test]
async fn the_dialog_shows_a_sign_in_page_naming_the_app() {
    let server = Server::new().await;
    let reply = server
        .get(
            &format!("/auth/dialog?{}", server.dialog_query("&state=s1")),
            "",
        )
        .await;
    assert_eq!(reply.status, 200);
    let html = reply.html();
    assert!(
        html.contains("<strong>Demo App</strong> wants to access your account"),
        "{html}"
    );
    assert!(html.contains(r#"type="password""#));
    assert!(html.contains(r#"name="viewport""#), "readable on a phone");
    assert!(!html.contains("<script"));
    assert_eq!(
        reply.hidden("query"),
        server.dialog_query("&state=s1").replace('&', "&amp;")
    );
    assert!(!reply.hidden("csrf").is_empty());
    assert_dialog_headers(&reply);
    let cookie = reply.header("set-cookie").expect("a login nonce cookie");
    assert!(cookie.starts_with("cg_login="), "{cookie}");
    for attribute in [
        "HttpOnly",
        "SameSite=Lax",
        "Path=/auth/dialog",
        "Max-Age=600",
    ] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "the base URL is plain http");
}

#[tokio::test]
async fn signing_in_and_allowing_redirects_with_a_code_and_the_state() {
    let server = Server::new().await;
    let query = server.dialog_query("&state=xyz%20123&response_type=code");
    let session = server.sign_in(&query).await;
    let consent = server.get(&format!("/auth/dialog?{query}"), &session).await;
    assert_eq!(consent.status, 200);
    let html = consent.html();
    assert!(
        html.contains(
            "<strong>Demo App</strong> asks to access the account <strong>Demo Account</strong>"
        ),
        "{html}"
    );
    assert!(html.contains(r#"value="allow""#) && html.contains(r#"value="deny""#));
    assert_dialog_headers(&consent);
    // Browsers check the consent form's redirect against form-action.
    let policy = consent.header("content-security-policy").unwrap();
    assert!(
        policy.contains("form-action 'self' http://127.0.0.1:9;"),
        "{policy}"
    );

    let fields = [
        ("action", "consent"),
        ("query", query.as_str()),
        ("csrf", &consent.hidden("csrf")),
        ("decision", "allow"),
    ];
    let reply = server.post_form("/auth/dialog", &session, &fields).await;
    assert_eq!(reply.status, 302);
    assert_eq!(reply.header("cache-control"), Some("no-store"));
    let location = reply.location();
    assert!(
        location.starts_with("http://127.0.0.1:9/callback?code=cgac_"),
        "{location}"
    );
    assert_eq!(param(location, "state").as_deref(), Some("xyz 123"));
}

#[tokio::test]
async fn denying_redirects_with_access_denied_and_the_state() {
    let server = Server::new().await;
    let reply = server
        .decide(&server.dialog_query("&state=abc"), "deny")
        .await;
    assert_eq!(reply.status, 302);
    let location = reply.location();
    assert!(
        location.starts_with("http://127.0.0.1:9/callback?error=access_denied"),
        "{location}"
    );
    assert_eq!(param(location, "state").as_deref(), Some("abc"));
    assert_eq!(param(location, "code"), None);
}

#[tokio::test]
async fn a_wrong_password_or_unknown_email_shows_a_clear_message_and_no_session() {
    let server = Server::new().await;
    let query = server.dialog_query("");
    let page = server.get(&format!("/auth/dialog?{query}"), "").await;
    let nonce = format!("cg_login={}", page.cookie("cg_login").unwrap());
    for (email, password) in [
        (server.demo.email.as_str(), "not-the-password"),
        ("nobody@example.com", "whatever"),
    ] {
        let fields = [
            ("action", "login"),
            ("query", &query),
            ("csrf", &page.hidden("csrf")),
            ("email", email),
            ("password", password),
        ];
        let reply = server.post_form("/auth/dialog", &nonce, &fields).await;
        assert_eq!(reply.status, 400);
        assert!(
            reply.html().contains("The e-mail or the password is wrong"),
            "{}",
            reply.html()
        );
        assert!(
            reply
                .html()
                .contains(&format!(r#"name="email" type="email" value="{email}""#)),
            "the e-mail is kept"
        );
        assert_eq!(reply.cookie("cg_session"), None);
        assert_dialog_headers(&reply);
    }
}

#[tokio::test]
async fn a_login_without_its_csrf_token_or_nonce_cookie_is_refused() {
    let server = Server::new().await;
    let query = server.dialog_query("");
    let page = server.get(&format!("/auth/dialog?{query}"), "").await;
    let nonce = format!("cg_login={}", page.cookie("cg_login").unwrap());
    let csrf = page.hidden("csrf");
    // No token, a forged one, and the right one without the cookie it is bound to.
    for (cookies, token) in [
        (nonce.as_str(), ""),
        (nonce.as_str(), "forged"),
        ("", csrf.as_str()),
    ] {
        let fields = [
            ("action", "login"),
            ("query", query.as_str()),
            ("csrf", token),
            ("email", server.demo.email.as_str()),
            ("password", server.demo.password.as_str()),
        ];
        let reply = server.post_form("/auth/dialog", cookies, &fields).await;
        assert_eq!(reply.status, 403);
        assert!(reply.html().contains("Form expired"));
        assert_eq!(reply.cookie("cg_session"), None);
    }
    // A token made for another dialog request does not carry over.
    let other = server.dialog_query("&state=other");
    let fields = [
        ("action", "login"),
        ("query", &other),
        ("csrf", &csrf),
        ("email", &server.demo.email),
        ("password", &server.demo.password),
    ];
    assert_eq!(
        server
            .post_form("/auth/dialog", &nonce, &fields)
            .await
            .status,
        403
    );
}

#[tokio::test]
async fn a_consent_with_a_forged_or_foreign_csrf_token_is_refused() {
    let server = Server::new().await;
    let query = server.dialog_query("&state=one");
    let session = server.sign_in(&query).await;
    let consent = server.get(&format!("/auth/dialog?{query}"), &session).await;
    let csrf = consent.hidden("csrf");
    let forged = [
        ("action", "consent"),
        ("query", query.as_str()),
        ("csrf", "forged"),
        ("decision", "allow"),
    ];
    let reply = server.post_form("/auth/dialog", &session, &forged).await;
    assert_eq!(reply.status, 403);
    assert_eq!(reply.header("location"), None);
    // The token of one request does not approve another (another state).
    let other = server.dialog_query("&state=two");
    let foreign = [
        ("action", "consent"),
        ("query", other.as_str()),
        ("csrf", &csrf),
        ("decision", "allow"),
    ];
    assert_eq!(
        server
            .post_form("/auth/dialog", &session, &foreign)
            .await
            .status,
        403
    );
    // Nor with another browser's session.
    let other_session = server.sign_in(&query).await;
    let fields = [
        ("action", "consent"),
        ("query", query.as_str()),
        ("csrf", &csrf),
        ("decision", "allow"),
    ];
    assert_eq!(
        server
            .post_form("/auth/dialog", &other_session, &fields)
            .await
            .status,
        403
    );
}

#[tokio::test]
async fn a_consent_without_a_session_asks_to_sign_in_again() {
    let server = Server::new().await;
    let query = server.dialog_query("");
    let fields = [
        ("action", "consent"),
        ("query", query.as_str()),
        ("csrf", "x"),
        ("decision", "allow"),
    ];
    let reply = server.post_form("/auth/dialog", "", &fields).await;
    assert_eq!(reply.status, 400);
    assert!(reply.html().contains("Your sign-in expired"));
    assert_eq!(reply.header("location"), None);
}

#[tokio::test]
async fn a_tampered_or_expired_session_is_not_trusted() {
    let server = Server::new().await;
    let query = server.dialog_query("");
    let uri = format!("/auth/dialog?{query}");
    let session = server.sign_in(&query).await;
    assert!(
        server
            .get(&uri, &session)
            .await
            .html()
            .contains("Allow access?")
    );

    let (_, rest) = session.split_once('|').unwrap();
    let other_account = format!("cg_session={}|{rest}", uuid::Uuid::nil());
    for cookie in [
        other_account,
        format!("{session}x"),
        "cg_session=a|1|n|b".to_owned(),
    ] {
        assert!(
            server.get(&uri, &cookie).await.html().contains("Sign in"),
            "{cookie}"
        );
    }
    server.clock.advance(time::Duration::minutes(11));
    assert!(
        server.get(&uri, &session).await.html().contains("Sign in"),
        "expired after 10 minutes"
    );
}

#[tokio::test]
async fn switching_account_ends_the_session() {
    let server = Server::new().await;
    let query = server.dialog_query("");
    let session = server.sign_in(&query).await;
    let consent = server.get(&format!("/auth/dialog?{query}"), &session).await;
    let fields = [
        ("action", "switch"),
        ("query", query.as_str()),
        ("csrf", &consent.hidden("csrf")),
    ];
    let reply = server.post_form("/auth/dialog", &session, &fields).await;
    assert_eq!(reply.status, 303);
    assert_eq!(reply.cookie("cg_session").as_deref(), Some(""));
    assert!(reply.header("set-cookie").unwrap().contains("Max-Age=0"));
}

#[tokio::test]
async fn an_unknown_app_gets_an_html_page_and_no_redirect() {
    let server = Server::new().await;
    let reply = server
        .get(
            &format!(
                "/auth/dialog?client_id=nope&redirect_uri={}",
                encode(DEMO_REDIRECT_URI)
            ),
            "",
        )
        .await;
    assert_eq!(reply.status, 400);
    assert!(reply.html().contains("Unknown application"));
    assert!(
        reply
            .html()
            .contains("No application is registered with this client_id")
    );
    assert_eq!(reply.header("location"), None);
    assert_dialog_headers(&reply);
}

#[tokio::test]
async fn an_unregistered_redirect_uri_gets_an_html_page_and_no_redirect() {
    let server = Server::new().await;
    let query = format!(
        "client_id={}&redirect_uri={}",
        server.demo.client_id,
        encode("https://evil.example/cb")
    );
    let reply = server.get(&format!("/auth/dialog?{query}"), "").await;
    assert_eq!(reply.status, 400);
    assert!(reply.html().contains("Unregistered return address"));
    assert!(
        !reply.html().contains("evil.example"),
        "the untrusted address is not shown as a link"
    );
    assert_eq!(reply.header("location"), None);
}

#[tokio::test]
async fn a_missing_client_id_or_redirect_uri_gets_an_html_page() {
    let server = Server::new().await;
    for uri in [
        "/auth/dialog",
        &format!("/auth/dialog?client_id={}", server.demo.client_id),
    ] {
        let reply = server.get(uri, "").await;
        assert_eq!(reply.status, 400);
        assert!(reply.html().contains("Incomplete link"), "{uri}");
    }
}

#[tokio::test]
async fn an_unsupported_response_type_is_sent_back_to_the_app() {
    let server = Server::new().await;
    let reply = server
        .get(
            &format!(
                "/auth/dialog?{}",
                server.dialog_query("&response_type=token&state=s")
            ),
            "",
        )
        .await;
    assert_eq!(reply.status, 302);
    assert_eq!(
        param(reply.location(), "error").as_deref(),
        Some("unsupported_response_type")
    );
    assert_eq!(param(reply.location(), "state").as_deref(), Some("s"));
    assert_eq!(reply.header("cache-control"), Some("no-store"));
}

#[tokio::test]
async fn the_legacy_redirect_url_parameter_opens_the_dialog() {
    let server = Server::new().await;
    // The official Ruby client sends it, not percent-encoded.
    let query = format!(
        "client_id={}&redirect_url={DEMO_REDIRECT_URI}",
        server.demo.client_id
    );
    let reply = server.decide(&query, "allow").await;
    assert_eq!(reply.status, 302);
    assert!(
        reply
            .location()
            .starts_with("http://127.0.0.1:9/callback?code=cgac_")
    );
}

#[tokio::test]
async fn names_on_the_pages_are_escaped() {
    let server = Server::new().await;
    let (client, _) = server
        .gateway
        .register_client(conversion_gateway::ClientRegistration::new(
            r#"<script>alert("x")</script> & Co"#,
            ["https://app.example/cb"],
        ))
        .await
        .unwrap();
    let query = format!(
        "client_id={}&redirect_uri={}",
        client.id,
        encode("https://app.example/cb")
    );
    let reply = server.get(&format!("/auth/dialog?{query}"), "").await;
    let html = reply.html();
    assert!(
        html.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; Co"),
        "{html}"
    );
    assert!(!html.contains("<script"));
}

#[tokio::test]
async fn the_dialog_form_takes_only_form_bodies() {
    let server = Server::new().await;
    let reply = server
        .post_json("/auth/dialog", None, &json!({"action": "login"}))
        .await;
    assert_eq!(reply.status, 415);
    assert!(reply.html().contains("Unsupported form"));
}

// --- sign-in throttling and the bound on password checks ------------------

/// Asserts a sign-in page refused with `status` and `Retry-After: seconds`,
/// whose notice says `text`.
#[track_caller]
fn assert_refused_sign_in(reply: &Reply, status: u16, seconds: &str, text: &str) {
    assert_eq!(
        reply.status.as_u16(),
        status,
        "{:?}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(
        reply.header("retry-after"),
        Some(seconds),
        "{:?}",
        reply.headers
    );
    let html = reply.html();
    assert!(html.contains(text), "{text:?} not in {html}");
    assert!(reply.cookie("cg_session").is_none(), "no session");
    assert_dialog_headers(reply);
}

#[tokio::test]
async fn five_wrong_passwords_throttle_the_account_from_that_address_until_the_window_passes() {
    let server = Server::new().await;
    let email = server.demo.email.clone();
    for attempt in 1..=5 {
        let reply = server.try_sign_in(PEER, &email, "wrong").await;
        assert_eq!(reply.status, 400, "attempt {attempt}: {}", reply.html());
    }
    let reply = server.try_sign_in(PEER, &email, "wrong").await;
    assert_refused_sign_in(&reply, 429, "900", "try again in 15 minutes");
    // The right password does not get through the lock either, and a
    // refused attempt does not prolong it.
    server.clock.advance(time::Duration::minutes(10));
    let reply = server
        .try_sign_in(PEER, &email, &server.demo.password)
        .await;
    assert_refused_sign_in(&reply, 429, "300", "try again in 5 minutes");
    server.clock.advance(time::Duration::seconds(299));
    let reply = server.try_sign_in(PEER, &email, "wrong").await;
    assert_refused_sign_in(&reply, 429, "1", "try again in 1 second");

    server.clock.advance(time::Duration::seconds(1));
    let reply = server
        .try_sign_in(PEER, &email, &server.demo.password)
        .await;
    assert_eq!(
        reply.status,
        303,
        "{:?}",
        String::from_utf8_lossy(&reply.body)
    );
    assert!(reply.cookie("cg_session").is_some());
}

#[tokio::test]
async fn the_owner_signs_in_from_another_address_while_one_address_is_throttled() {
    let server = Server::new().await;
    let email = server.demo.email.clone();
    for _ in 0..30 {
        server.try_sign_in(PEER, &email, "guess").await;
    }
    let reply = server.try_sign_in(PEER, &email, "guess").await;
    assert_eq!(reply.status, 429);
    let reply = server
        .try_sign_in("198.51.100.7:41000", &email, &server.demo.password)
        .await;
    assert_eq!(
        reply.status,
        303,
        "{:?}",
        String::from_utf8_lossy(&reply.body)
    );
}

#[tokio::test]
async fn unknown_emails_are_throttled_by_address() {
    let server = Server::new().await;
    for n in 0..20 {
        let reply = server
            .try_sign_in(PEER, &format!("nobody{n}@example.com"), "guess")
            .await;
        assert_eq!(reply.status, 400, "attempt {n}: {}", reply.html());
    }
    let reply = server
        .try_sign_in(PEER, "nobody20@example.com", "guess")
        .await;
    assert_refused_sign_in(&reply, 429, "900", "Too many failed sign-in attempts");
    // Another address is not affected, and IPv6 addresses work the same.
    let reply = server
        .try_sign_in("[2001:db8::1]:40000", "nobody20@example.com", "guess")
        .await;
    assert_eq!(reply.status, 400, "{}", reply.html());
    server.clock.advance(time::Duration::minutes(15));
    let reply = server
        .try_sign_in(PEER, "nobody21@example.com", "guess")
        .await;
    assert_eq!(reply.status, 400, "{}", reply.html());
}

/// A server whose password checks take turns on one slot, which the test
/// can hold, waiting at most 50 ms for it.
async fn server_with_one_hashing_slot() -> (Server, Arc<tokio::sync::Semaphore>) {
    let slot = Arc::new(tokio::sync::Semaphore::new(1));
    let limits = LoginLimits {
        hashing: HashingLimit::new(slot.clone(), Duration::from_millis(50)),
        ..LoginLimits::recommended()
    };
    let server = Server::with_limits(Stores::in_memory(), &key(), limits).await;
    (server, slot)
}

#[tokio::test]
async fn sign_ins_beyond_the_password_check_bound_are_refused_as_busy_and_not_counted() {
    let (server, slot) = server_with_one_hashing_slot().await;
    let email = server.demo.email.clone();
    let held = slot.clone().try_acquire_owned().expect("the one slot");
    for _ in 0..8 {
        let reply = server
            .try_sign_in(PEER, &email, &server.demo.password)
            .await;
        assert_refused_sign_in(&reply, 503, "1", "The service is busy");
    }
    drop(held);
    // The refused attempts were never checked, so they did not count as
    // failures: five more wrong passwords are still allowed.
    for attempt in 1..=5 {
        let reply = server.try_sign_in(PEER, &email, "wrong").await;
        assert_eq!(reply.status, 400, "attempt {attempt}: {}", reply.html());
    }
    let reply = server
        .try_sign_in("198.51.100.7:41000", &email, &server.demo.password)
        .await;
    assert_eq!(
        reply.status,
        303,
        "{:?}",
        String::from_utf8_lossy(&reply.body)
    );
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
        server.try_sign_in(PEER, &email, "wrong").await;
    }
    // With the only slot taken, an attempt that reached Argon2 would be
    // answered 503 busy: 429 shows it was refused before.
    let _held = slot.clone().try_acquire_owned().expect("the one slot");
    let reply = server.try_sign_in(PEER, &email, "wrong").await;
    assert_refused_sign_in(&reply, 429, "900", "Too many failed sign-in attempts");
}

#[tokio::test]
async fn a_sign_in_without_the_client_address_is_refused_not_throttled_with_others() {
    let server = Server::new().await;
    let query = server.dialog_query("");
    let page = server.get(&format!("/auth/dialog?{query}"), "").await;
    let nonce = page.cookie("cg_login").unwrap();
    let fields = [
        ("action", "login"),
        ("query", query.as_str()),
        ("csrf", &page.hidden("csrf")),
        ("email", &server.demo.email),
        ("password", &server.demo.password),
    ];
    // Straight to the router, with no ConnectInfo: a wiring mistake of the
    // host, answered with the service's JSON error.
    let request = Request::post("/auth/dialog")
        .header("content-type", "application/x-www-form-urlencoded")
        .header("cookie", format!("cg_login={nonce}"))
        .body(Body::from(form(&fields)))
        .unwrap();
    let response = server.router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), 500);
}

// --- the token endpoint and revocation -------------------------------------

#[tokio::test]
async fn a_code_is_exchanged_for_tokens_with_json() {
    let server = Server::new().await;
    let code = server.code().await;
    let body = json!({ "client_id": server.demo.client_id, "client_secret": server.demo.client_secret, "code": code });
    let reply = server.post_json("/auth/token", None, &body).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("cache-control"), Some("no-store"));
    let tokens = reply.json();
    assert!(
        tokens["access_token"]
            .as_str()
            .unwrap()
            .starts_with("cgat_")
    );
    assert!(
        tokens["refresh_token"]
            .as_str()
            .unwrap()
            .starts_with("cgrt_")
    );
    assert_eq!(tokens["expires_in"], 86_400);
    assert_eq!(tokens["token_type"], "Bearer");
    // A code is used once.
    server
        .post_json("/auth/token", None, &body)
        .await
        .assert_error(401, "EXPIRED_CODE_GRANT");
}

#[tokio::test]
async fn a_code_is_exchanged_with_a_form_and_basic_auth() {
    let server = Server::new().await;
    let code = server.code().await;
    let body = form(&[
        ("grant_type", "authorization_code"),
        ("code", &code),
        ("redirect_uri", DEMO_REDIRECT_URI),
    ]);
    let authorization = basic(&server.demo.client_id, &server.demo.client_secret);
    let headers = [
        ("content-type", "application/x-www-form-urlencoded"),
        ("authorization", authorization.as_str()),
    ];
    let reply = server.post("/auth/token", &headers, body).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["token_type"], "Bearer");
}

#[tokio::test]
async fn bad_client_credentials_and_missing_fields_are_json_errors() {
    let server = Server::new().await;
    let code = server.code().await;
    let body =
        json!({ "client_id": server.demo.client_id, "client_secret": "cgcs_wrong", "code": code });
    server
        .post_json("/auth/token", None, &body)
        .await
        .assert_error(401, "ACCESS_DENIED");
    let body = json!({ "client_id": server.demo.client_id, "code": code });
    let reply = server.post_json("/auth/token", None, &body).await;
    reply.assert_error(400, "CANNOT_BE_NULL");
    assert_eq!(reply.json()["path"], "body.client_secret");
    server
        .post("/auth/token", &[("content-type", "application/json")], "{")
        .await
        .assert_error(400, "BAD_REQUEST");
}

#[tokio::test]
async fn a_refresh_returns_new_tokens() {
    let server = Server::new().await;
    let (_, refresh_token) = server.tokens().await;
    let reply = server.refresh(&refresh_token).await;
    assert_eq!(reply.status, 200);
    let tokens = reply.json();
    assert!(
        tokens["access_token"]
            .as_str()
            .unwrap()
            .starts_with("cgat_")
    );
    assert_eq!(tokens["expires_in"], 86_400);
}

#[tokio::test]
async fn revoking_answers_an_empty_object_and_ends_the_grant() {
    let server = Server::new().await;
    let (access_token, refresh_token) = server.tokens().await;
    let bearer = format!("Bearer {access_token}");
    let headers = [
        ("content-type", "application/x-www-form-urlencoded"),
        ("authorization", bearer.as_str()),
    ];
    let body = form(&[
        ("token", &refresh_token),
        ("token_type_hint", "refresh_token"),
    ]);
    let reply = server.post("/auth/revoke", &headers, body).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json(), json!({}));

    let reply = server.refresh(&refresh_token).await;
    reply.assert_error(401, "INVALID_REFRESH_TOKEN");
    let challenge = reply.header("www-authenticate").unwrap();
    assert!(
        challenge.starts_with(r#"Bearer realm="http://gateway.test/", error="invalid_grant""#),
        "{challenge}"
    );
    let reply = server
        .post_json(
            "/platform/events",
            Some(&bearer),
            &conversion_body("a@example.com"),
        )
        .await;
    reply.assert_error(401, "UNAUTHORIZED");
    assert!(
        reply
            .header("www-authenticate")
            .unwrap()
            .contains(r#"error="invalid_token""#)
    );
}

#[tokio::test]
async fn a_revocation_without_credentials_is_refused() {
    let server = Server::new().await;
    let (_, refresh_token) = server.tokens().await;
    let headers = [("content-type", "application/x-www-form-urlencoded")];
    let reply = server
        .post("/auth/revoke", &headers, form(&[("token", &refresh_token)]))
        .await;
    reply.assert_error(401, "UNAUTHORIZED");
    assert_eq!(
        server.refresh(&refresh_token).await.status,
        200,
        "nothing was revoked"
    );
}

// --- intake ------------------------------------------------------------------

#[tokio::test]
async fn bearer_routes_record_events_and_batches() {
    let server = Server::new().await;
    let (access_token, _) = server.tokens().await;
    let bearer = format!("Bearer {access_token}");
    let reply = server
        .post_json(
            "/platform/events",
            Some(&bearer),
            &conversion_body("ana@example.com"),
        )
        .await;
    assert_eq!(reply.status, 200);
    assert!(
        reply.json()["event_uuid"]
            .as_str()
            .unwrap()
            .parse::<uuid::Uuid>()
            .is_ok()
    );

    let batch = json!([
        conversion_body("ana@example.com"),
        conversion_body("bo@example.com")
    ]);
    let reply = server
        .post_json("/platform/events/batch", Some(&bearer), &batch)
        .await;
    assert_eq!(reply.status, 200);
    let body = reply.json();
    assert!(body["event_batch_uuid"].is_string());
    assert_eq!(body["events"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn bearer_routes_refuse_a_missing_or_unknown_token_with_a_challenge() {
    let server = Server::new().await;
    for route in ["/platform/events", "/platform/events/batch"] {
        for authorization in [None, Some("Bearer cgat_unknown")] {
            let reply = server
                .post_json(route, authorization, &conversion_body("a@example.com"))
                .await;
            reply.assert_error(401, "UNAUTHORIZED");
            let challenge = reply.header("www-authenticate").unwrap();
            assert!(
                challenge.starts_with(r#"Bearer realm="http://gateway.test/""#),
                "{challenge}"
            );
        }
    }
}

#[tokio::test]
async fn conversions_are_accepted_with_the_api_key_and_retries_replayed() {
    let server = Server::new().await;
    let reply = server
        .convert(&server.demo.api_key, &conversion_body("ana@example.com"))
        .await;
    assert_eq!(reply.status, 200);
    assert!(reply.json()["event_uuid"].is_string());

    let uri = format!("/platform/conversions?api_key={}", server.demo.api_key);
    let headers = [
        ("content-type", "application/json"),
        ("idempotency-key", "retry-1"),
    ];
    let body = conversion_body("bo@example.com").to_string();
    let first = server.post(&uri, &headers, body.clone()).await;
    let second = server.post(&uri, &headers, body).await;
    assert_eq!(first.json()["event_uuid"], second.json()["event_uuid"]);
    assert_eq!(second.header("idempotent-replayed"), Some("true"));
}

#[tokio::test]
async fn conversions_refuse_a_missing_or_wrong_api_key() {
    let server = Server::new().await;
    server
        .convert("cgak_wrong", &conversion_body("a@example.com"))
        .await
        .assert_error(401, "UNAUTHORIZED");
    let reply = server
        .post_json(
            "/platform/conversions",
            None,
            &conversion_body("a@example.com"),
        )
        .await;
    reply.assert_error(401, "UNAUTHORIZED");
}

#[tokio::test]
async fn an_unaccepted_event_type_is_400_invalid_option() {
    let server = Server::new().await;
    let mut body = conversion_body("a@example.com");
    body["event_type"] = json!("SALE");
    let reply = server.convert(&server.demo.api_key, &body).await;
    assert_eq!(reply.status, 400);
    let error = &reply.json()["errors"][0];
    assert_eq!(error["error_type"], "INVALID_OPTION");
    assert_eq!(error["path"], "$.event_type");
    assert_eq!(
        error["validation_rules"]["valid_options"],
        json!(["CONVERSION"])
    );
}

// --- CORS --------------------------------------------------------------------

fn preflight(uri: &str) -> Request<Body> {
    Request::options(uri)
        .header("origin", "https://shop.example")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type")
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn the_conversion_route_answers_cors_preflights_and_posts() {
    let server = Server::new().await;
    let reply = server
        .send(preflight("/platform/conversions?api_key=x"))
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("access-control-allow-origin"), Some("*"));
    assert!(
        reply
            .header("access-control-allow-methods")
            .unwrap()
            .contains("POST")
    );
    assert!(
        reply
            .header("access-control-allow-headers")
            .unwrap()
            .contains("content-type")
    );

    let uri = format!("/platform/conversions?api_key={}", server.demo.api_key);
    let origin = [
        ("content-type", "application/json"),
        ("origin", "https://shop.example"),
    ];
    let reply = server
        .post(&uri, &origin, conversion_body("a@example.com").to_string())
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("access-control-allow-origin"), Some("*"));
    // Errors too, so a website's script can read why.
    let reply = server
        .post("/platform/conversions?api_key=x", &origin, "{}")
        .await;
    assert_eq!(reply.status, 401);
    assert_eq!(reply.header("access-control-allow-origin"), Some("*"));
}

#[tokio::test]
async fn the_other_routes_do_not_answer_cors() {
    let server = Server::new().await;
    for route in [
        "/platform/events",
        "/platform/events/batch",
        "/auth/token",
        "/auth/revoke",
    ] {
        let reply = server.send(preflight(route)).await;
        reply.assert_error(405, "METHOD_NOT_ALLOWED");
        assert_eq!(reply.header("access-control-allow-origin"), None, "{route}");
        let origin = [
            ("content-type", "application/json"),
            ("origin", "https://shop.example"),
        ];
        let reply = server.post(route, &origin, "{}").await;
        assert_eq!(reply.header("access-control-allow-origin"), None, "{route}");
    }
}

// --- errors of the HTTP layer -----------------------------------------------

#[tokio::test]
async fn unknown_paths_are_404_json() {
    let server = Server::new().await;
    server.get("/nope", "").await.assert_error(404, "NOT_FOUND");
    server
        .post("/platform/unknown", &[], "{}")
        .await
        .assert_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn wrong_methods_are_405_json_with_allow() {
    let server = Server::new().await;
    for route in [
        "/auth/token",
        "/auth/revoke",
        "/platform/conversions",
        "/platform/events",
    ] {
        let reply = server.get(route, "").await;
        reply.assert_error(405, "METHOD_NOT_ALLOWED");
        assert_eq!(reply.header("allow"), Some("POST"), "{route}");
    }
    let reply = server
        .send(Request::delete("/auth/dialog").body(Body::empty()).unwrap())
        .await;
    reply.assert_error(405, "METHOD_NOT_ALLOWED");
}

#[tokio::test]
async fn bodies_over_0_2_mb_are_413_json_on_every_event_route() {
    let server = Server::new().await;
    let (access_token, _) = server.tokens().await;
    let bearer = format!("Bearer {access_token}");
    let conversion = format!("/platform/conversions?api_key={}", server.demo.api_key);
    let too_large = vec![b' '; 200 * 1024 + 1];
    for route in [
        conversion.as_str(),
        "/platform/events",
        "/platform/events/batch",
    ] {
        let headers = [
            ("content-type", "application/json"),
            ("authorization", bearer.as_str()),
        ];
        // Streamed (no Content-Length), then announced by Content-Length;
        // either way the body is the validator's own, as if it had seen it.
        let error = server
            .post(route, &headers, too_large.clone())
            .await
            .assert_validation_error(413, "BODY_TOO_LARGE");
        assert_eq!(error["path"], "$");
        assert_eq!(error["validation_rules"]["max_bytes"], 200 * 1024);
        let length = too_large.len().to_string();
        let announced = [headers[0], headers[1], ("content-length", length.as_str())];
        server
            .post(route, &announced, too_large.clone())
            .await
            .assert_validation_error(413, "BODY_TOO_LARGE");
    }
}

#[tokio::test]
async fn a_body_of_exactly_0_2_mb_is_accepted() {
    let server = Server::new().await;
    let mut body = conversion_body("a@example.com").to_string().into_bytes();
    body.resize(200 * 1024, b' ');
    let reply = server
        .post(
            &format!("/platform/conversions?api_key={}", server.demo.api_key),
            &[("content-type", "application/json")],
            body,
        )
        .await;
    assert_eq!(
        reply.status,
        200,
        "{:?}",
        String::from_utf8_lossy(&reply.body)
    );
}

#[tokio::test]
async fn wrong_content_types_are_415_json() {
    let server = Server::new().await;
    let (access_token, _) = server.tokens().await;
    let bearer = format!("Bearer {access_token}");
    let text = [
        ("content-type", "text/plain"),
        ("authorization", bearer.as_str()),
    ];
    let body = conversion_body("a@example.com").to_string();
    server
        .post("/platform/events", &text, body.clone())
        .await
        .assert_error(415, "UNSUPPORTED_MEDIA_TYPE");
    let conversion = format!("/platform/conversions?api_key={}", server.demo.api_key);
    server
        .post(&conversion, &text, body)
        .await
        .assert_error(415, "UNSUPPORTED_MEDIA_TYPE");
    server
        .post("/auth/token", &[("content-type", "text/plain")], "code=x")
        .await
        .assert_error(415, "UNSUPPORTED_MEDIA_TYPE");
}

/// An event sink whose backend is down.
struct BrokenEvents;

#[async_trait::async_trait]
impl EventSink for BrokenEvents {
    async fn record(&self, _: &EventSubmission) -> Result<RecordOutcome, StoreError> {
        Err(StoreError::backend(
            "insert an event",
            io::Error::other("disk unplugged"),
        ))
    }

    async fn find_event(&self, _: uuid::Uuid) -> Result<Option<RecordedEvent>, StoreError> {
        Err(StoreError::backend(
            "find an event",
            io::Error::other("disk unplugged"),
        ))
    }

    async fn purge_expired_claims(
        &self,
        _: time::OffsetDateTime,
        _: usize,
    ) -> Result<usize, StoreError> {
        Err(StoreError::backend(
            "purge claims",
            io::Error::other("disk unplugged"),
        ))
    }
}

/// A log sink for one test: what the server logs on this thread.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Collects every event logged on this thread while the guard lives.
    fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let logs = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || logs.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::TRACE)
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test]
async fn a_failing_store_is_503_json_and_its_cause_is_logged() {
    let stores = Stores {
        events: Arc::new(BrokenEvents),
        ..Stores::in_memory()
    };
    let server = Server::with_stores(stores, &key()).await;
    let logs = Logs::default();
    let _guard = logs.capture();
    let reply = server
        .convert(&server.demo.api_key, &conversion_body("a@example.com"))
        .await;
    reply.assert_error(503, "SERVICE_UNAVAILABLE");
    assert_eq!(reply.header("retry-after"), Some("1"));
    assert!(
        !reply.json().to_string().contains("disk"),
        "no internal detail in the answer"
    );
    let logs = logs.text();
    assert!(logs.contains("disk unplugged"), "{logs}");
    assert!(logs.contains("status=503"), "{logs}");
}

#[tokio::test]
async fn logs_name_method_path_status_and_never_a_secret() {
    let server = Server::new().await;
    let logs = Logs::default();
    let _guard = logs.capture();
    let query = server.dialog_query("");
    let _ = server.sign_in(&query).await;
    let code = server.code().await;
    // One production client sends the code in the query string.
    let secret = form(&[
        ("client_id", &server.demo.client_id),
        ("client_secret", &server.demo.client_secret),
    ]);
    let reply = server
        .post(
            &format!("/auth/token?code={code}"),
            &[("content-type", "application/x-www-form-urlencoded")],
            secret,
        )
        .await;
    assert_eq!(reply.status, 200);
    let tokens = reply.json();
    let access_token = tokens["access_token"].as_str().unwrap();
    let refresh_token = tokens["refresh_token"].as_str().unwrap();
    let bearer = format!("Bearer {access_token}");
    server
        .post_json(
            "/platform/events",
            Some(&bearer),
            &conversion_body("a@example.com"),
        )
        .await;
    server.refresh(refresh_token).await;
    server
        .convert(&server.demo.api_key, &conversion_body("a@example.com"))
        .await;
    server
        .convert("cgak_guessed", &conversion_body("a@example.com"))
        .await;

    let logs = logs.text();
    assert!(
        logs.contains("method=POST path=\"/platform/conversions\" status=200 latency_ms="),
        "{logs}"
    );
    assert!(logs.contains("path=\"/auth/token\" status=200"), "{logs}");
    assert!(
        logs.contains("method=GET path=\"/auth/dialog\" status=200"),
        "{logs}"
    );
    for secret in [
        server.demo.api_key.as_str(),
        "cgak_guessed",
        "api_key",
        server.demo.client_secret.as_str(),
        server.demo.password.as_str(),
        code.as_str(),
        access_token,
        refresh_token,
        "cg_session",
    ] {
        assert!(!logs.contains(secret), "{secret} in {logs}");
    }
}

// --- restart -------------------------------------------------------------------

/// A directory for one test's files, removed when dropped.
#[cfg(feature = "sqlite")]
struct TempDir(std::path::PathBuf);

#[cfg(feature = "sqlite")]
impl TempDir {
    fn new(name: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let path = std::env::temp_dir().join(format!("cg-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }
}

#[cfg(feature = "sqlite")]
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(feature = "sqlite")]
async fn sqlite_stores(path: &std::path::Path) -> (Arc<conversion_gateway::SqliteStore>, Stores) {
    let store = Arc::new(
        conversion_gateway::SqliteStore::open(path)
            .await
            .expect("open SQLite"),
    );
    let stores = Stores {
        tokens: store.clone(),
        clients: store.clone(),
        accounts: store.clone(),
        api_keys: store.clone(),
        events: store.clone(),
    };
    (store, stores)
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_restart_on_the_same_sqlite_file_keeps_the_demo_credentials_and_tokens() {
    let dir = TempDir::new("restart");
    let database = dir.0.join("gateway.db");
    let key_path = dir.0.join("gateway.db.key");

    let (key, created) = ServerKey::load_or_create(&key_path).expect("create the key file");
    assert!(created);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&key_path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the key file is its owner's only");
    }
    let (store, stores) = sqlite_stores(&database).await;
    let first = Server::with_stores(stores, &key).await;
    let (access_token, refresh_token) = first.tokens().await;
    let demo = first.demo.clone();
    drop(first);
    store.close().await;

    let (key, created) = ServerKey::load_or_create(&key_path).expect("read the key file");
    assert!(!created);
    let (store, stores) = sqlite_stores(&database).await;
    let second = Server::with_stores(stores, &key).await;
    assert_eq!(second.demo, demo, "the same demo credentials");
    assert_eq!(demo.email, "demo@example.com");
    assert_eq!(demo.redirect_uri, DEMO_REDIRECT_URI);
    assert_eq!(demo.base_url, BASE_URL);

    let bearer = format!("Bearer {access_token}");
    let reply = second
        .post_json(
            "/platform/events",
            Some(&bearer),
            &conversion_body("a@example.com"),
        )
        .await;
    assert_eq!(reply.status, 200, "the access token survived the restart");
    assert_eq!(
        second.refresh(&refresh_token).await.status,
        200,
        "and the refresh token"
    );
    assert_eq!(
        second
            .convert(&demo.api_key, &conversion_body("a@example.com"))
            .await
            .status,
        200
    );
    let _ = second.sign_in(&second.dialog_query("")).await;
    // Seeding again adds nothing: one account, one API key.
    let account = second
        .gateway
        .find_account_by_email(&demo.email)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        second
            .stores
            .api_keys
            .list_api_keys(account.id)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(account.custom_fields, ["plan", "source"]);
    store.close().await;
}

#[tokio::test]
async fn the_demo_data_is_derived_from_the_key() {
    let stores = Stores::in_memory();
    let first = Server::with_stores(stores.clone(), &key()).await;
    // Seeding again on the same store finds what is there.
    let again = Server::with_stores(stores, &key()).await;
    assert_eq!(first.demo, again.demo);
    // Another key makes other credentials, and refuses a store seeded with the first.
    let other_key = ServerKey::from_hex(&"17".repeat(32)).unwrap();
    let other = Server::with_stores(Stores::in_memory(), &other_key).await;
    assert_ne!(other.demo.client_secret, first.demo.client_secret);
    assert_ne!(other.demo.password, first.demo.password);
    let gateway = Gateway::new(
        GatewayConfig::new(BASE_URL),
        first.stores.clone(),
        other_key.hasher(),
    );
    let error = app::seed_demo(&gateway, &first.stores, &other_key, &Passwords::new(8, 1))
        .await
        .unwrap_err();
    assert!(matches!(error, app::SeedError::OtherKey), "{error}");
}
