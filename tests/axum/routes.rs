//! The JSON routes through the library's axum module
//! (`conversion_gateway::axum::router`) in-process, as every host serves
//! them: token, revocation, the three event routes, CORS, and the service's
//! JSON answers for the errors of the HTTP layer.

use std::io;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use conversion_gateway::{
    Account, ClientRegistration, FeedCursor, Gateway, GatewayConfig, OsRandom, SecretHasher, Stores,
};
use conversion_gateway_testkit::{DownStore, basic};
use serde_json::{Value, json};
use tower::ServiceExt as _;

use crate::support::{BASE_URL, DEMO_REDIRECT_URI, Reply, conversion_body, encode, form, param};

/// What the tests present: the app's credentials and the account's API key.
struct Credentials {
    client_id: String,
    client_secret: String,
    api_key: String,
}

/// The library's router on in-memory stores, with one app, one account
/// and its API key.
struct Routes {
    router: Router,
    gateway: Arc<Gateway>,
    account: Account,
    demo: Credentials,
}

impl Routes {
    async fn new() -> Self {
        Self::with_stores(Stores::in_memory()).await
    }

    async fn with_stores(stores: Stores) -> Self {
        let gateway = Arc::new(Gateway::new(
            GatewayConfig::new(BASE_URL),
            stores,
            SecretHasher::new([0x42; 32]),
        ));
        let (client, secret) = gateway
            .register_client(ClientRegistration::new("Demo App", [DEMO_REDIRECT_URI]))
            .await
            .expect("register the app");
        let mut account = Account::new("Demo Account", "demo@example.com", &OsRandom);
        account.custom_fields = vec!["plan".into(), "source".into()];
        gateway
            .create_account(&account)
            .await
            .expect("create the account");
        let (_, api_key) = gateway
            .issue_api_key(account.id, "demo")
            .await
            .expect("issue an API key");
        Self {
            router: conversion_gateway::axum::router(gateway.clone()),
            gateway,
            account,
            demo: Credentials {
                client_id: client.id.to_string(),
                client_secret: secret.expose().to_owned(),
                api_key: api_key.expose().to_owned(),
            },
        }
    }

    async fn send(&self, request: Request<Body>) -> Reply {
        let response = self.router.clone().oneshot(request).await;
        Reply::read(response.expect("the router is infallible")).await
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

    async fn post_json(&self, uri: &str, authorization: Option<&str>, body: &Value) -> Reply {
        let mut headers = vec![("content-type", "application/json")];
        if let Some(authorization) = authorization {
            headers.push(("authorization", authorization));
        }
        self.post(uri, &headers, body.to_string()).await
    }

    /// A code for the app, approved for the account (what the dialog does
    /// once the user allows).
    async fn code(&self) -> String {
        let query = format!(
            "client_id={}&redirect_uri={}",
            self.demo.client_id,
            encode(DEMO_REDIRECT_URI)
        );
        let request = self
            .gateway
            .authorization_request(&query)
            .await
            .expect("a valid authorization request");
        let approval = self
            .gateway
            .approve(&request, self.account.id)
            .await
            .expect("approved");
        let code = param(approval.location(), "code").expect("a code in the redirect");
        assert_eq!(code, approval.code().expose());
        code
    }

    /// A fresh code exchanged with JSON: (access token, refresh token).
    async fn tokens(&self) -> (String, String) {
        let code = self.code().await;
        let body = json!({ "client_id": self.demo.client_id, "client_secret": self.demo.client_secret, "code": code });
        let reply = self.post_json("/auth/token", None, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
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

/// A log sink for one test: what is logged on this thread.
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
    /// Collects every event logged on this thread while the guard lives
    /// (a `#[tokio::test]` runs every task on its one thread).
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
async fn a_code_is_exchanged_for_tokens_with_json() {
    let server = Routes::new().await;
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
    let server = Routes::new().await;
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
    let server = Routes::new().await;
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
    let server = Routes::new().await;
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
    let server = Routes::new().await;
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
    let server = Routes::new().await;
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

#[tokio::test]
async fn bearer_routes_record_events_and_batches() {
    let server = Routes::new().await;
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
    assert!(body["event_batch_uuid"].is_string(), "{body:?}");
    assert_eq!(body["events"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn bearer_routes_refuse_a_missing_or_unknown_token_with_a_challenge() {
    let server = Routes::new().await;
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
    let server = Routes::new().await;
    let reply = server
        .convert(&server.demo.api_key, &conversion_body("ana@example.com"))
        .await;
    assert_eq!(reply.status, 200);
    assert!(reply.json()["event_uuid"].is_string(), "{reply:?}");

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

/// An `Idempotency-Key` the client sent but that is not one visible-ASCII
/// text (UTF-8 bytes, or the header twice) is refused, not taken for no
/// key: each retry would be recorded again.
#[tokio::test]
async fn an_idempotency_key_that_is_not_one_text_is_400_and_records_nothing() {
    let stores = Stores::in_memory();
    let server = Routes::with_stores(stores.clone()).await;
    let uri = format!("/platform/conversions?api_key={}", server.demo.api_key);
    let body = conversion_body("bo@example.com").to_string();
    let keys: [&[&[u8]]; 2] = [&["cl\u{e9}".as_bytes()], &[b"retry-1", b"retry-2"]];
    for keys in keys {
        let mut request = Request::post(&uri).header("content-type", "application/json");
        for key in keys {
            request = request.header("idempotency-key", *key);
        }
        let reply = server
            .send(request.body(Body::from(body.clone())).unwrap())
            .await;
        reply.assert_error(400, "INVALID_IDEMPOTENCY_KEY");
    }
    let start = FeedCursor::start();
    let page = stores.feed.read_after(&start, 10).await.unwrap();
    assert!(page.events.is_empty(), "nothing recorded");
}

#[tokio::test]
async fn conversions_refuse_a_missing_or_wrong_api_key() {
    let server = Routes::new().await;
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
    let server = Routes::new().await;
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
    let server = Routes::new().await;
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
    let server = Routes::new().await;
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

#[tokio::test]
async fn unknown_paths_are_404_json() {
    let server = Routes::new().await;
    server.get("/nope", "").await.assert_error(404, "NOT_FOUND");
    server
        .post("/platform/unknown", &[], "{}")
        .await
        .assert_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn wrong_methods_are_405_json_with_allow() {
    let server = Routes::new().await;
    for route in [
        "/auth/token",
        "/auth/revoke",
        "/platform/conversions",
        "/platform/events",
    ] {
        let reply = server.get(route, "").await;
        reply.assert_error(405, "METHOD_NOT_ALLOWED");
        // RFC 9110 section 10.2.1: the methods the route answers; the
        // conversion route also answers CORS preflights.
        let allowed = if route == "/platform/conversions" {
            "POST,OPTIONS"
        } else {
            "POST"
        };
        assert_eq!(reply.header("allow"), Some(allowed), "{route}");
    }
    // The dialog's wrong methods: `dialog.rs`, through the binary.
}

#[tokio::test]
async fn bodies_over_0_2_mb_are_413_json_on_every_event_route() {
    let server = Routes::new().await;
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
    let server = Routes::new().await;
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
    let server = Routes::new().await;
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
    let html = [("content-type", "text/html")];
    server
        .post(&conversion, &html, body.clone())
        .await
        .assert_error(415, "UNSUPPORTED_MEDIA_TYPE");
    // A beacon's text/plain is the conversion route's only other type.
    let beacon = server
        .post(
            &conversion,
            &[("content-type", "text/plain;charset=UTF-8")],
            body,
        )
        .await;
    assert_eq!(beacon.status, 200, "{:?}", beacon.text());
    server
        .post("/auth/token", &[("content-type", "text/plain")], "code=x")
        .await
        .assert_error(415, "UNSUPPORTED_MEDIA_TYPE");
}

#[tokio::test]
async fn a_failing_store_is_503_json_and_its_cause_is_logged() {
    let stores = Stores {
        events: Arc::new(DownStore),
        ..Stores::in_memory()
    };
    let server = Routes::with_stores(stores).await;
    let logs = Logs::default();
    let _guard = logs.capture();
    let reply = server
        .convert(&server.demo.api_key, &conversion_body("a@example.com"))
        .await;
    reply.assert_error(503, "SERVICE_UNAVAILABLE");
    assert_eq!(reply.header("retry-after"), Some("1"));
    let body = reply.json().to_string();
    assert!(!body.contains("db.internal"), "internal detail in {body}");
    let logs = logs.text();
    assert!(
        logs.contains("connection refused to db.internal:5432"),
        "{logs}"
    );
    assert!(logs.contains("ERROR"), "{logs}");
}
