//! The axum adapter in-process: the extractors' limits, the bearer guard,
//! the router's own JSON answers.

use std::sync::Arc;

use ::axum::Router;
use ::axum::body::{Body, to_bytes};
use ::axum::routing::get;
use http::{Request, StatusCode};
use serde_json::{Value, json};
use tower::ServiceExt as _;

use super::*;
use crate::account::Account;
use crate::clock::ManualClock;
use crate::config::GatewayConfig;
use crate::gateway::{Gateway, Stores};
use crate::oauth::client::ClientRegistration;
use crate::random::SeededRandom;
use crate::request::RequestParts;
use crate::secret::SecretHasher;

fn gateway(clock: Arc<ManualClock>) -> Arc<Gateway> {
    gateway_on(Stores::in_memory(), clock)
}

fn gateway_on(stores: Stores, clock: Arc<ManualClock>) -> Arc<Gateway> {
    Arc::new(
        Gateway::new(
            GatewayConfig::new("https://api.example"),
            stores,
            SecretHasher::new([5; 32]),
        )
        .with_clock(clock)
        .with_random(Arc::new(SeededRandom::new(5))),
    )
}

/// An access token of a fresh grant, and the account it acts for.
async fn access_token(gateway: &Gateway) -> (String, Account) {
    let account = Account::new("Acme", "owner@acme.example", &SeededRandom::new(6));
    gateway.create_account(&account).await.unwrap();
    let (app, secret) = gateway
        .register_client(ClientRegistration::new("App", ["https://app.example/cb"]))
        .await
        .unwrap();
    let query = format!("client_id={}&redirect_uri=https://app.example/cb", app.id);
    let request = gateway.authorization_request(&query).await.unwrap();
    let approval = gateway.approve(&request, account.id).await.unwrap();
    let body = json!({
        "client_id": app.id, "client_secret": secret.expose(), "code": approval.code().expose(),
    })
    .to_string();
    let tokens = gateway
        .token(&RequestParts {
            content_type: Some("application/json"),
            body: body.as_bytes(),
            ..RequestParts::default()
        })
        .await
        .unwrap();
    (tokens.access_token.expose().to_owned(), account)
}

async fn send(app: Router, request: Request<Body>) -> (StatusCode, http::HeaderMap, Value) {
    let response = app.oneshot(request).await.unwrap();
    let (head, body) = response.into_parts();
    let bytes = to_bytes(body, usize::MAX).await.unwrap();
    let json = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| panic!("not JSON: {:?}", String::from_utf8_lossy(&bytes)))
    };
    (head.status, head.headers, json)
}

fn post(path: &str, content_type: &str, body: impl Into<Body>) -> Request<Body> {
    Request::post(path)
        .header("content-type", content_type)
        .body(body.into())
        .unwrap()
}

#[tokio::test]
async fn the_bearer_guard_lets_valid_tokens_through_and_challenges_the_rest() {
    let clock = Arc::new(ManualClock::at_epoch_of_tests());
    let gateway = gateway(clock.clone());
    let (token, account) = access_token(&gateway).await;
    let app = || {
        Router::new()
            .route(
                "/me",
                get(|Bearer(caller): Bearer| async move { caller.account_id.to_string() }),
            )
            .with_state(gateway.clone())
    };
    let me = |authorization: Option<String>| {
        let mut request = Request::get("/me");
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        request.body(Body::empty()).unwrap()
    };

    let response = app()
        .oneshot(me(Some(format!("Bearer {token}"))))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = to_bytes(response.into_body(), 1024).await.unwrap();
    assert_eq!(body, account.id.to_string());

    let (status, headers, body) = send(app(), me(None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["error_type"], "UNAUTHORIZED");
    let challenge = headers["www-authenticate"].to_str().unwrap();
    assert!(
        challenge.starts_with("Bearer realm=\"https://api.example/\", error=\"invalid_request\""),
        "{challenge}"
    );

    let (status, headers, _) = send(app(), me(Some("Bearer cgat_forged".into()))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let challenge = headers["www-authenticate"].to_str().unwrap();
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");

    clock.advance(time::Duration::seconds(86_400));
    let (status, headers, _) = send(app(), me(Some(format!("Bearer {token}")))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let challenge = headers["www-authenticate"].to_str().unwrap();
    assert!(challenge.contains("error=\"expired_token\""), "{challenge}");
}

#[tokio::test]
async fn oversized_bodies_are_refused_with_their_route_s_413() {
    let gateway = gateway(Arc::new(ManualClock::at_epoch_of_tests()));
    let limit = gateway.config().conversion_limits.max_body_bytes;

    let big = vec![b' '; limit + 1];
    let (status, _, body) = send(
        router(gateway.clone()),
        post("/platform/events", "application/json", big),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    let expected =
        crate::intake::validator::errors::ValidationErrors::body_too_large(limit).to_body();
    assert_eq!(body, expected, "the validator's own 413 body");

    // At the limit, the body reaches the core (which wants a bearer token).
    let at_limit = vec![b' '; limit];
    let (status, _, body) = send(
        router(gateway.clone()),
        post("/platform/events", "application/json", at_limit),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");

    let big = vec![b'a'; OAUTH_BODY_LIMIT + 1];
    let (status, _, body) = send(
        router(gateway.clone()),
        post("/auth/token", "application/x-www-form-urlencoded", big),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(body["error_type"], "BODY_TOO_LARGE");
    let at_limit = vec![b'a'; OAUTH_BODY_LIMIT];
    let (status, _, body) = send(
        router(gateway),
        post("/auth/token", "application/x-www-form-urlencoded", at_limit),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

/// The largest registration the rules accept, with every character
/// escaped at its longest: 100 identifiers of 255 astral characters, each
/// written as a surrogate pair, and a URL of the longest length accepted,
/// every byte of it escaped.
fn largest_valid_registration() -> String {
    use crate::webhooks::destination::MAX_URL_LEN;
    use crate::webhooks::registration::{MAX_EVENT_IDENTIFIERS, MAX_IDENTIFIER_LEN};
    let identifier = format!("\"{}\"", "\\ud83d\\ude00".repeat(MAX_IDENTIFIER_LEN));
    let identifiers = vec![identifier; MAX_EVENT_IDENTIFIERS].join(",");
    let base = "https://hooks.example/";
    let url = format!(
        "{}{}",
        base.chars()
            .map(|c| format!("\\u{:04x}", u32::from(c)))
            .collect::<String>(),
        "\\u0061".repeat(MAX_URL_LEN - base.len())
    );
    format!(
        "{{\"event_type\":\"WEBHOOK.CONVERTED\",\"entity_type\":\"CONTACT\",\
         \"http_method\":\"POST\",\"include_relations\":[\"COMPANY\",\"CONTACT_FUNNEL\"],\
         \"url\":\"{url}\",\"event_identifiers\":[{identifiers}]}}"
    )
}

#[tokio::test]
async fn webhook_routes_read_the_largest_valid_registration_and_refuse_more() {
    let gateway = gateway(Arc::new(ManualClock::at_epoch_of_tests()));
    let largest = largest_valid_registration();
    let parsed: serde_json::Value = serde_json::from_str(&largest).expect("valid JSON");
    assert_eq!(parsed["url"].as_str().map(str::len), Some(2048));
    assert!(largest.len() <= WEBHOOK_BODY_LIMIT, "{}", largest.len());
    assert!(largest.len() > OAUTH_BODY_LIMIT, "{}", largest.len());
    // Read whole: the core then asks for a bearer token.
    let (status, _, body) = send(
        router(gateway.clone()),
        post(
            "/integrations/webhooks",
            "application/json",
            largest.into_bytes(),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let big = vec![b' '; WEBHOOK_BODY_LIMIT + 1];
    let (status, _, body) = send(
        router(gateway),
        post("/integrations/webhooks", "application/json", big),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(body["error_type"], "BODY_TOO_LARGE");
}

#[tokio::test]
async fn the_router_answers_unknown_paths_and_methods_in_json() {
    let gateway = gateway(Arc::new(ManualClock::at_epoch_of_tests()));
    let (status, _, body) = send(
        router(gateway.clone()),
        Request::get("/nope").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        body,
        json!({"error_type": "NOT_FOUND", "error_message": "no such resource"})
    );

    let (status, headers, body) = send(
        router(gateway.clone()),
        Request::get("/auth/token").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(body["error_type"], "METHOD_NOT_ALLOWED");
    assert_eq!(headers["allow"], "POST");
    assert_eq!(headers["content-type"], "application/json");
}

#[tokio::test]
async fn only_the_conversion_route_answers_cors() {
    let gateway = gateway(Arc::new(ManualClock::at_epoch_of_tests()));
    let preflight = |path: &str| {
        Request::options(path)
            .header("origin", "https://shop.example")
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "content-type")
            .body(Body::empty())
            .unwrap()
    };
    let response = router::<()>(gateway.clone())
        .oneshot(preflight("/platform/conversions"))
        .await
        .unwrap();
    assert_eq!(response.headers()["access-control-allow-origin"], "*");
    for path in ["/platform/events", "/auth/token"] {
        let response = router::<()>(gateway.clone())
            .oneshot(preflight(path))
            .await
            .unwrap();
        assert!(
            response
                .headers()
                .get("access-control-allow-origin")
                .is_none(),
            "{path}: {:?}",
            response.headers()
        );
    }
}

#[tokio::test]
async fn json_errors_rewrites_plain_error_answers_and_keeps_the_rest() {
    let app = Router::new()
        .route(
            "/busy",
            get(|| async { (StatusCode::SERVICE_UNAVAILABLE, "try later") }),
        )
        .route(
            "/page",
            get(|| async {
                (
                    StatusCode::FORBIDDEN,
                    [("content-type", "text/html; charset=utf-8")],
                    "<p>no</p>",
                )
            }),
        )
        .layer(::axum::middleware::from_fn(json_errors));
    let (status, headers, body) = send(
        app.clone(),
        Request::get("/busy").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["error_type"], "SERVICE_UNAVAILABLE");
    assert_eq!(headers["retry-after"], "1");
    let response = app
        .oneshot(Request::get("/page").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let body = to_bytes(response.into_body(), 1024).await.unwrap();
    assert_eq!(body, "<p>no</p>", "HTML pages are the host's and stay");
}

/// An event sink that fails as a bug or a stuck database would: `record`
/// panics, or never returns; `ready` fails.
struct BrokenSink {
    hangs: bool,
}

#[async_trait::async_trait]
impl crate::store::EventSink for BrokenSink {
    async fn ready(&self) -> Result<(), crate::store::error::StoreError> {
        Err(crate::store::error::StoreError::backend(
            "ping",
            std::io::Error::other("db.internal:5432 refused the connection"),
        ))
    }

    async fn record(
        &self,
        _: &crate::records::event::EventSubmission,
    ) -> Result<crate::records::event::RecordOutcome, crate::store::error::StoreError> {
        if self.hangs {
            std::future::pending().await
        } else {
            panic!("a bug in the event sink")
        }
    }

    async fn check_claim(
        &self,
        _: &crate::records::event::IdempotencyClaim,
    ) -> Result<Option<crate::records::event::RecordOutcome>, crate::store::error::StoreError> {
        Ok(None)
    }

    async fn find_event(
        &self,
        _: uuid::Uuid,
    ) -> Result<Option<crate::records::event::RecordedEvent>, crate::store::error::StoreError> {
        Ok(None)
    }

    async fn purge_expired_claims(
        &self,
        _: time::OffsetDateTime,
        _: usize,
    ) -> Result<usize, crate::store::error::StoreError> {
        Ok(0)
    }
}

/// A bearer-authenticated event, sent to the router of a gateway whose
/// event sink is `sink`.
async fn send_event_to(sink: BrokenSink) -> (StatusCode, http::HeaderMap, Value) {
    let mut stores = Stores::in_memory();
    stores.events = Arc::new(sink);
    let gateway = gateway_on(stores, Arc::new(ManualClock::at_epoch_of_tests()));
    let (token, _) = access_token(&gateway).await;
    let request = Request::post("/platform/events")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .body(Body::from(
            &include_bytes!("../../benches/data/typical.json")[..],
        ))
        .unwrap();
    send(router(gateway), request).await
}

#[tokio::test]
async fn a_panic_behind_the_router_is_answered_with_a_json_500() {
    let (status, headers, body) = send_event_to(BrokenSink { hangs: false }).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(body["error_type"], "INTERNAL_SERVER_ERROR");
}

// Paused time: the runtime skips ahead to the timeout once every task waits.
#[tokio::test(start_paused = true)]
async fn a_request_that_outlasts_the_timeout_is_answered_with_a_json_503() {
    let started = tokio::time::Instant::now();
    // Without the router's timeout the request would never be answered.
    let (status, headers, body) = tokio::time::timeout(
        REQUEST_TIMEOUT * 2,
        send_event_to(BrokenSink { hangs: true }),
    )
    .await
    .expect("answered within the router's timeout");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(body["error_type"], "SERVICE_UNAVAILABLE");
    assert_eq!(headers["retry-after"], "1");
    assert!(started.elapsed() >= REQUEST_TIMEOUT);
}

#[tokio::test]
async fn healthz_answers_while_the_process_serves() {
    let gateway = gateway(Arc::new(ManualClock::at_epoch_of_tests()));
    let request = Request::get("/healthz").body(Body::empty()).unwrap();
    let (status, headers, body) = send(operations_router(gateway), request).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({ "status": "ok" }));
    assert_eq!(headers["cache-control"], "no-store");
}

#[tokio::test]
async fn readyz_names_every_store_when_all_answer() {
    let gateway = gateway(Arc::new(ManualClock::at_epoch_of_tests()));
    let request = Request::get("/readyz").body(Body::empty()).unwrap();
    let (status, headers, body) = send(operations_router(gateway), request).await;
    assert_eq!(status, StatusCode::OK);
    let stores = json!({
        "tokens": "ok", "clients": "ok", "accounts": "ok", "api_keys": "ok", "events": "ok",
    });
    assert_eq!(body, json!({ "status": "ready", "stores": stores }));
    assert_eq!(headers["cache-control"], "no-store");
}

#[tokio::test]
async fn readyz_names_the_store_that_fails_but_never_why() {
    let mut stores = Stores::in_memory();
    stores.events = Arc::new(BrokenSink { hangs: false });
    let gateway = gateway_on(stores, Arc::new(ManualClock::at_epoch_of_tests()));
    let request = Request::get("/readyz").body(Body::empty()).unwrap();
    let (status, headers, body) = send(operations_router(gateway), request).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["status"], "unavailable");
    assert_eq!(body["failed"], json!(["events"]));
    assert_eq!(body["stores"]["events"], "unavailable");
    assert_eq!(body["stores"]["tokens"], "ok");
    assert_eq!(headers["retry-after"], "5");
    assert!(!body.to_string().contains("db.internal"), "{body}");
}
