//! The OpenAPI document (`conversion_gateway::axum::openapi_document`):
//! committed at the repository's root and current, valid OpenAPI 3.1,
//! listing exactly the routes the routers serve, served at
//! `GET /openapi.json`, and true of the routers' real answers: every
//! status, content type and body the routes answer in the scenarios below
//! is the document's, validated against its schemas.
//!
//! `oas-3.1-schema.json` beside this file is the OpenAPI Initiative's JSON
//! Schema of OpenAPI 3.1 documents (id
//! `https://spec.openapis.org/oas/3.1/schema/2022-10-07`, Apache-2.0), as
//! `openapi-spec-validator` ships it.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request};
use conversion_gateway::axum::{
    OPENAPI_PATH, openapi_document, operations_router, operations_routes, router, router_routes,
};
use conversion_gateway::{
    Account, ClientRegistration, EventSink, EventSubmission, Gateway, GatewayConfig,
    IdempotencyClaim, Limit, OsRandom, OutgoingRequest, RecordOutcome, RecordedEvent, SecretHasher,
    SendOutcome, StoreError, Stores, WebhookOptions, WebhookTransport,
};
use conversion_gateway_testkit::basic;
use serde_json::{Value, json};
use tower::ServiceExt as _;

use crate::support::{BASE_URL, DEMO_REDIRECT_URI, Reply, conversion_body, encode, form, param};

/// The document as committed: pretty-printed, with a final newline.
fn document_text() -> String {
    let mut text = serde_json::to_string_pretty(&openapi_document()).expect("JSON");
    text.push('\n');
    text
}

#[test]
fn the_committed_document_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
    let current = document_text();
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != current {
        std::fs::write(&path, &current).expect("write openapi.json");
        panic!(
            "{} was stale and has been written anew from the code: review and commit it",
            path.display()
        );
    }
}

/// Every (method, path) the document lists.
fn documented(document: &Value) -> BTreeSet<(String, String)> {
    let mut operations = BTreeSet::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("a path item").keys() {
            if METHODS.contains(&method.as_str()) {
                operations.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    operations
}

/// The operations of a path item (OpenAPI 3.1 section 4.8.9).
const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Every (method, path) the routers serve, from their route tables.
fn served() -> BTreeSet<(String, String)> {
    router_routes()
        .into_iter()
        .chain(operations_routes())
        .map(|(method, path)| (method.to_string(), path.to_owned()))
        .collect()
}

#[test]
fn the_document_lists_exactly_the_routes_the_routers_serve() {
    let documented = documented(&openapi_document());
    let served = served();
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let not_served: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty() && not_served.is_empty(),
        "served but not in the document: {undocumented:?}; in the document but not served: \
         {not_served:?}"
    );
}

/// `path` with its parameters filled in.
fn concrete(path: &str) -> String {
    path.replace("{uuid}", "0193a1c2-0000-7000-8000-000000000000")
}

#[tokio::test]
async fn every_documented_operation_is_routed_and_no_other_method() {
    let app = Fixture::new().await.app;
    let document = openapi_document();
    let documented = documented(&document);
    for (path, _) in document["paths"].as_object().unwrap() {
        for method in [
            Method::GET,
            Method::HEAD,
            Method::POST,
            Method::PUT,
            Method::DELETE,
            Method::PATCH,
            Method::OPTIONS,
        ] {
            // RFC 9110 section 9.3.2: HEAD is answered wherever GET is,
            // and documents list GET alone.
            let listed = if method == Method::HEAD {
                "GET"
            } else {
                method.as_str()
            };
            let is_documented = documented.contains(&(listed.to_owned(), path.clone()));
            let request = Request::builder()
                .method(method.clone())
                .uri(concrete(path))
                .body(Body::empty())
                .unwrap();
            let reply = Reply::read(app.clone().oneshot(request).await.unwrap()).await;
            let fallback = reply.status == 405
                || (reply.status == 404 && reply.text().contains("no such resource"));
            assert_eq!(
                fallback, !is_documented,
                "{method} {path}: documented {is_documented}, answered {reply:?}"
            );
        }
    }
}

#[tokio::test]
async fn the_router_serves_the_document() {
    let fixture = Fixture::new().await;
    let reply = fixture
        .send(Request::get(OPENAPI_PATH).body(Body::empty()).unwrap())
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.header("content-type"), Some("application/json"));
    let served = reply.json();
    assert_eq!(served["openapi"], "3.1.0");
    assert_eq!(served, openapi_document());
    for (method, path) in router_routes().into_iter().chain(operations_routes()) {
        let operation = &served["paths"][path][method.as_str().to_lowercase()];
        assert!(
            operation.is_object(),
            "{method} {path} is not in the document"
        );
    }
}

#[test]
fn the_document_is_valid_openapi_3_1() {
    let document = openapi_document();
    let schema: Value =
        serde_json::from_str(include_str!("oas-3.1-schema.json")).expect("the OAS 3.1 schema");
    let validator = jsonschema::validator_for(&schema).expect("the OAS 3.1 schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(&document)
        .map(|error| format!("{} at {}", error, error.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    // The check has teeth: a 3.0 document, or a response without its
    // required description, is refused.
    let mut older = document.clone();
    older["openapi"] = json!("3.0.3");
    assert!(!validator.is_valid(&older));
    let mut undescribed = document.clone();
    undescribed["paths"]["/healthz"]["get"]["responses"]["200"]
        .as_object_mut()
        .unwrap()
        .remove("description");
    assert!(!validator.is_valid(&undescribed));
    // That schema checks Schema Objects only for being objects: each must
    // also be JSON Schema 2020-12 (OpenAPI 3.1's dialect) that compiles,
    // its references resolved within the document.
    // Each example is valid against its own schema (Schemathesis's
    // examples phase sends them as they are).
    let mut examples = 0;
    for (name, schema) in document["components"]["schemas"].as_object().unwrap() {
        let validator = schema_validator(
            &document,
            &json!({ "$ref": format!("#/components/schemas/{name}") }),
        );
        for example in schema["examples"].as_array().into_iter().flatten() {
            let errors: Vec<String> = validator
                .iter_errors(example)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "the example of {name}: {errors:#?}");
            examples += 1;
        }
    }
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let content = &operation["requestBody"]["content"];
            for (media, body) in content.as_object().into_iter().flatten() {
                let Some(example) = body.get("example") else {
                    continue;
                };
                let validator = schema_validator(&document, &body["schema"]);
                let errors: Vec<String> = validator
                    .iter_errors(example)
                    .map(|e| e.to_string())
                    .collect();
                assert!(
                    errors.is_empty(),
                    "the {media} example of {method} {path}: {errors:#?}"
                );
                examples += 1;
            }
        }
    }
    assert!(
        examples >= 3,
        "both event routes and the webhook have examples"
    );
}

/// A validator of `schema`, whose `$ref`s point into `document`.
fn schema_validator(document: &Value, schema: &Value) -> jsonschema::Validator {
    let mut root = schema.clone();
    root["components"] = document["components"].clone();
    root["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
    jsonschema::options()
        .should_validate_formats(true)
        .build(&root)
        .unwrap_or_else(|error| panic!("{schema} does not compile: {error}"))
}

// --- Real answers against the document --------------------------------------

/// Accepts every webhook's validation call, so registrations succeed.
struct AcceptAll;

#[async_trait]
impl WebhookTransport for AcceptAll {
    async fn post(&self, _: &OutgoingRequest) -> SendOutcome {
        SendOutcome::Answered {
            status: 200,
            retry_after: None,
        }
    }
}

/// The routers merged, on in-memory stores with one app, one account and
/// its API key; one event per contact a day, so the lead limit is met.
struct Fixture {
    app: Router,
    gateway: Arc<Gateway>,
    account: Account,
    client_id: String,
    client_secret: String,
    api_key: String,
}

impl Fixture {
    async fn new() -> Self {
        Self::with_stores(Stores::in_memory()).await
    }

    async fn with_stores(stores: Stores) -> Self {
        let mut config = GatewayConfig::new(BASE_URL);
        config.rate_limits.per_lead = Some(Limit::new(1, time::Duration::days(1)));
        let options = WebhookOptions {
            transport: Arc::new(AcceptAll),
            allow_private: true,
            ..WebhookOptions::default()
        };
        let gateway = Arc::new(
            Gateway::new(config, stores, SecretHasher::new([0x17; 32])).with_webhooks(options),
        );
        let (client, secret) = gateway
            .register_client(ClientRegistration::new("Demo App", [DEMO_REDIRECT_URI]))
            .await
            .expect("register the app");
        let account = Account::new("Demo Account", "demo@example.com", &OsRandom);
        gateway.create_account(&account).await.expect("an account");
        let (_, api_key) = gateway
            .issue_api_key(account.id, "demo")
            .await
            .expect("an API key");
        Self {
            app: router(gateway.clone()).merge(operations_router(gateway.clone())),
            gateway,
            account,
            client_id: client.id.to_string(),
            client_secret: secret.expose().to_owned(),
            api_key: api_key.expose().to_owned(),
        }
    }

    async fn send(&self, request: Request<Body>) -> Reply {
        Reply::read(self.app.clone().oneshot(request).await.unwrap()).await
    }

    /// A fresh code for the app.
    async fn code(&self) -> String {
        let query = format!(
            "client_id={}&redirect_uri={}",
            self.client_id,
            encode(DEMO_REDIRECT_URI)
        );
        let request = self.gateway.authorization_request(&query).await.unwrap();
        let approval = self
            .gateway
            .approve(&request, self.account.id)
            .await
            .unwrap();
        param(approval.location(), "code").expect("a code")
    }
}

/// Sends requests to a fixture and checks each answer against the
/// document.
struct Checker {
    fixture: Fixture,
    document: Value,
    /// The (method, path, status) seen, for the coverage check.
    seen: BTreeSet<(String, String, u16)>,
}

impl Checker {
    async fn new(fixture: Fixture) -> Self {
        Self {
            fixture,
            document: openapi_document(),
            seen: BTreeSet::new(),
        }
    }

    /// Sends `method` to `uri` (of the documented `path`) with `headers`
    /// and `body`, checks the answer against the document, and returns it.
    async fn call(
        &mut self,
        method: Method,
        path: &str,
        uri: &str,
        headers: &[(&str, &str)],
        body: impl Into<Body>,
    ) -> Reply {
        let mut request = Request::builder().method(method.clone()).uri(uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let reply = self.fixture.send(request.body(body.into()).unwrap()).await;
        self.check(&method, path, &reply);
        reply
    }

    /// `call` with a JSON body and an optional `Authorization`.
    async fn json(
        &mut self,
        method: Method,
        path: &str,
        uri: &str,
        authorization: Option<&str>,
        body: &Value,
    ) -> Reply {
        let mut headers = vec![("content-type", "application/json")];
        if let Some(authorization) = authorization {
            headers.push(("authorization", authorization));
        }
        self.call(method, path, uri, &headers, body.to_string())
            .await
    }

    #[track_caller]
    fn check(&mut self, method: &Method, path: &str, reply: &Reply) {
        let status = reply.status.as_u16();
        self.seen
            .insert((method.to_string(), path.to_owned(), status));
        let operation = &self.document["paths"][path][method.as_str().to_lowercase()];
        assert!(operation.is_object(), "{method} {path} is not documented");
        let response = &operation["responses"][status.to_string()];
        assert!(
            response.is_object(),
            "{method} {path} answered {status}, which the document does not list: {reply:?}"
        );
        let response = self.resolve(response);
        for (name, _) in response["headers"].as_object().into_iter().flatten() {
            // The headers the service sends with every such answer; the
            // others (a challenge, a replay's mark) only with some.
            let always = name.starts_with("Access-Control")
                || name.starts_with("RateLimit")
                || name == "Vary"
                || name == "Retry-After";
            assert!(
                !always || reply.header(name).is_some(),
                "{method} {path} {status} lacks {name}: {reply:?}"
            );
        }
        let content = &response["content"];
        if reply.body.is_empty() {
            assert!(
                content.is_null(),
                "{method} {path} {status} answered no body, the document has {content}"
            );
            return;
        }
        let media_type = reply
            .header("content-type")
            .unwrap_or_default()
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned();
        let schema = &content[&media_type]["schema"];
        assert!(
            schema.is_object(),
            "{method} {path} {status} answered {media_type}, which the document does not list: \
             {content}"
        );
        let body = reply.json();
        let validator = schema_validator(&self.document, schema);
        let errors: Vec<String> = validator
            .iter_errors(&body)
            .map(|error| format!("{error} at {}", error.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{method} {path} {status}: {body} does not match {schema}: {errors:#?}"
        );
    }

    /// `value`, or what its `$ref` points to.
    fn resolve<'a>(&'a self, value: &'a Value) -> &'a Value {
        match value["$ref"].as_str() {
            Some(reference) => self
                .document
                .pointer(reference.trim_start_matches('#'))
                .expect("a resolvable $ref"),
            None => value,
        }
    }
}

const TOKEN: &str = "/auth/token";
const REVOKE: &str = "/auth/revoke";
const INTROSPECT: &str = "/auth/introspect";
const CONVERSIONS: &str = "/platform/conversions";
const EVENTS: &str = "/platform/events";
const BATCH: &str = "/platform/events/batch";
const WEBHOOKS: &str = "/integrations/webhooks";
const WEBHOOK: &str = "/integrations/webhooks/{uuid}";

#[tokio::test]
async fn oauth_answers_match_the_document() {
    let mut c = Checker::new(Fixture::new().await).await;
    let (id, secret) = (c.fixture.client_id.clone(), c.fixture.client_secret.clone());
    let code = c.fixture.code().await;
    let exchange = json!({ "client_id": id, "client_secret": secret, "code": code });
    let tokens = c
        .json(Method::POST, TOKEN, TOKEN, None, &exchange)
        .await
        .json();
    assert!(tokens["access_token"].is_string(), "{tokens}");
    // Used twice: 401 with a Bearer invalid_grant challenge.
    c.json(Method::POST, TOKEN, TOKEN, None, &exchange).await;
    let basic_auth = basic(&id, &secret);
    let form_headers = [
        ("content-type", "application/x-www-form-urlencoded"),
        ("authorization", basic_auth.as_str()),
    ];
    let code = c.fixture.code().await;
    let body = form(&[("grant_type", "authorization_code"), ("code", &code)]);
    c.call(Method::POST, TOKEN, TOKEN, &form_headers, body)
        .await;
    // The code in the query string, Basic, no body.
    let code = c.fixture.code().await;
    let uri = format!("{TOKEN}?code={code}");
    let reply = c
        .call(
            Method::POST,
            TOKEN,
            &uri,
            &[("authorization", &basic_auth)],
            "",
        )
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let refresh = tokens["refresh_token"].as_str().unwrap();
    let body = json!({ "client_id": id, "client_secret": secret, "refresh_token": refresh });
    c.json(Method::POST, TOKEN, TOKEN, None, &body).await;
    for body in [
        json!({ "client_id": id, "code": "x" }),
        json!({ "client_id": id, "client_secret": secret, "code": 7 }),
        json!({ "client_id": id, "client_secret": secret, "grant_type": "password" }),
        json!({ "client_id": id, "client_secret": secret, "code": "x", "refresh_token": "y" }),
        json!({ "client_id": id, "client_secret": "cgcs_wrong", "code": "x" }),
        json!({ "client_id": id, "client_secret": secret, "refresh_token": "cgrt_unknown" }),
    ] {
        c.json(Method::POST, TOKEN, TOKEN, None, &body).await;
    }
    let json_headers = [("content-type", "application/json")];
    c.call(Method::POST, TOKEN, TOKEN, &json_headers, "{").await;
    c.call(
        Method::POST,
        TOKEN,
        TOKEN,
        &[("content-type", "text/plain")],
        "code=x",
    )
    .await;
    c.call(
        Method::POST,
        TOKEN,
        TOKEN,
        &[("authorization", "Basic !!!")],
        "",
    )
    .await;
    c.call(
        Method::POST,
        TOKEN,
        TOKEN,
        &json_headers,
        vec![b' '; 17 * 1024],
    )
    .await;
    let form_only = [("content-type", "application/x-www-form-urlencoded")];
    let reply = c
        .call(
            Method::POST,
            REVOKE,
            REVOKE,
            &form_only,
            vec![b'a'; 17 * 1024],
        )
        .await;
    assert_eq!(reply.status, 413, "{reply:?}");
    c.call(Method::POST, TOKEN, TOKEN, &form_only, "code=a&code=b")
        .await;

    // Introspection: active, inactive, refused.
    let xml = [("content-type", "text/xml")];
    c.call(Method::POST, INTROSPECT, INTROSPECT, &xml, "<a/>")
        .await;
    let access = tokens["access_token"].as_str().unwrap();
    for token in [access, refresh, "cgat_unknown"] {
        let body = form(&[("token", token)]);
        c.call(Method::POST, INTROSPECT, INTROSPECT, &form_headers, body)
            .await;
    }
    let body = form(&[("token", access)]);
    c.call(
        Method::POST,
        INTROSPECT,
        INTROSPECT,
        &form_only,
        body.clone(),
    )
    .await;
    c.call(Method::POST, INTROSPECT, INTROSPECT, &form_headers, "")
        .await;

    // Revocation: by bearer, refused without credentials, a missing token.
    let fresh = c.fixture.code().await;
    let exchange = json!({ "client_id": id, "client_secret": secret, "code": fresh });
    let other = c
        .json(Method::POST, TOKEN, TOKEN, None, &exchange)
        .await
        .json();
    let bearer = format!("Bearer {}", other["access_token"].as_str().unwrap());
    let with_bearer = [
        ("content-type", "application/x-www-form-urlencoded"),
        ("authorization", bearer.as_str()),
    ];
    let body = form(&[("token", other["refresh_token"].as_str().unwrap())]);
    let reply = c
        .call(Method::POST, REVOKE, REVOKE, &with_bearer, body.clone())
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    c.call(Method::POST, REVOKE, REVOKE, &form_only, body).await;
    c.call(Method::POST, REVOKE, REVOKE, &form_headers, "")
        .await;
    c.call(
        Method::POST,
        REVOKE,
        REVOKE,
        &[("content-type", "text/xml")],
        "<a/>",
    )
    .await;
    let body = json!({ "token": access, "token_type_hint": "access_token" });
    c.call(
        Method::POST,
        REVOKE,
        REVOKE,
        &[
            ("content-type", "application/json"),
            ("authorization", &basic_auth),
        ],
        body.to_string(),
    )
    .await;

    let metadata = "/.well-known/oauth-authorization-server";
    c.call(Method::GET, metadata, metadata, &[], Body::empty())
        .await;

    for status in [200, 400, 401, 413, 415] {
        for path in [TOKEN, REVOKE, INTROSPECT] {
            if path == INTROSPECT && status == 413 {
                continue;
            }
            assert!(
                c.seen
                    .contains(&("POST".to_owned(), path.to_owned(), status)),
                "no scenario answered POST {path} with {status}"
            );
        }
    }
}

#[tokio::test]
async fn intake_answers_match_the_document() {
    let mut c = Checker::new(Fixture::new().await).await;
    let key = c.fixture.api_key.clone();
    let uri = format!("{CONVERSIONS}?api_key={key}");
    let event = conversion_body("ana@example.com");
    let json_only = [("content-type", "application/json")];
    let with_key = [
        ("content-type", "application/json"),
        ("idempotency-key", "k-1"),
    ];
    c.call(
        Method::POST,
        CONVERSIONS,
        &uri,
        &with_key,
        event.to_string(),
    )
    .await;
    // A replay, over the lead's limit: answered from the record.
    let reply = c
        .call(
            Method::POST,
            CONVERSIONS,
            &uri,
            &with_key,
            event.to_string(),
        )
        .await;
    assert_eq!(reply.header("idempotent-replayed"), Some("true"));
    // The same key, another body; then the lead's limit.
    let other = conversion_body("bo@example.com");
    c.call(
        Method::POST,
        CONVERSIONS,
        &uri,
        &with_key,
        other.to_string(),
    )
    .await;
    let reply = c.json(Method::POST, CONVERSIONS, &uri, None, &event).await;
    assert_eq!(reply.status, 429, "{reply:?}");
    let beacon = [("content-type", "text/plain;charset=UTF-8")];
    c.call(Method::POST, CONVERSIONS, &uri, &beacon, other.to_string())
        .await;
    let mut wrong = conversion_body("cy@example.com");
    wrong["event_type"] = json!("SALE");
    wrong["payload"]["tags"] = json!(["A", "a", "a"]);
    wrong["payload"]["email"] = json!("nope");
    c.json(Method::POST, CONVERSIONS, &uri, None, &wrong).await;
    c.call(Method::POST, CONVERSIONS, &uri, &json_only, "[")
        .await;
    let bad_key = [
        ("content-type", "application/json"),
        ("idempotency-key", ""),
    ];
    c.call(Method::POST, CONVERSIONS, &uri, &bad_key, "{}")
        .await;
    c.json(Method::POST, CONVERSIONS, CONVERSIONS, None, &event)
        .await;
    let bad_query = format!("{CONVERSIONS}?api_key=a&api_key=b");
    c.json(Method::POST, CONVERSIONS, &bad_query, None, &event)
        .await;
    c.call(
        Method::POST,
        CONVERSIONS,
        &uri,
        &[("content-type", "text/html")],
        "<p>",
    )
    .await;
    c.call(
        Method::POST,
        CONVERSIONS,
        &uri,
        &json_only,
        vec![b' '; 201 * 1024],
    )
    .await;
    let preflight = [
        ("origin", "https://shop.example"),
        ("access-control-request-method", "POST"),
    ];
    c.call(
        Method::OPTIONS,
        CONVERSIONS,
        &uri,
        &preflight,
        Body::empty(),
    )
    .await;

    // Bearer routes.
    let (id, secret) = (c.fixture.client_id.clone(), c.fixture.client_secret.clone());
    let code = c.fixture.code().await;
    let exchange = json!({ "client_id": id, "client_secret": secret, "code": code });
    let tokens = c
        .json(Method::POST, TOKEN, TOKEN, None, &exchange)
        .await
        .json();
    let bearer = format!("Bearer {}", tokens["access_token"].as_str().unwrap());
    let auth = Some(bearer.as_str());
    c.json(
        Method::POST,
        EVENTS,
        EVENTS,
        auth,
        &conversion_body("di@example.com"),
    )
    .await;
    c.json(Method::POST, EVENTS, EVENTS, None, &event).await;
    c.json(Method::POST, EVENTS, EVENTS, Some("Bearer cgat_x"), &event)
        .await;
    let text = [
        ("content-type", "text/plain"),
        ("authorization", bearer.as_str()),
    ];
    c.call(Method::POST, EVENTS, EVENTS, &text, event.to_string())
        .await;
    let batch = json!([
        conversion_body("ed@example.com"),
        conversion_body("fa@example.com")
    ]);
    c.json(Method::POST, BATCH, BATCH, auth, &batch).await;
    c.json(Method::POST, BATCH, BATCH, auth, &json!([])).await;
    c.json(
        Method::POST,
        BATCH,
        BATCH,
        auth,
        &json!([{ "event_type": 1 }]),
    )
    .await;
    c.json(Method::POST, BATCH, BATCH, auth, &event).await;

    for status in [200, 400, 401, 409, 413, 415, 429] {
        assert!(
            c.seen
                .contains(&("POST".to_owned(), CONVERSIONS.to_owned(), status)),
            "no scenario answered POST {CONVERSIONS} with {status}"
        );
    }
}

/// An event store that is down, and says so when asked if it is ready.
struct Unready;

fn down<T>() -> Result<T, StoreError> {
    Err(StoreError::backend(
        "reach the database",
        std::io::Error::other("down"),
    ))
}

#[async_trait]
impl EventSink for Unready {
    async fn record(&self, _: &EventSubmission) -> Result<RecordOutcome, StoreError> {
        down()
    }
    async fn check_claim(&self, _: &IdempotencyClaim) -> Result<Option<RecordOutcome>, StoreError> {
        down()
    }
    async fn find_event(&self, _: uuid::Uuid) -> Result<Option<RecordedEvent>, StoreError> {
        down()
    }
    async fn purge_expired_claims(
        &self,
        _: time::OffsetDateTime,
        _: usize,
    ) -> Result<usize, StoreError> {
        down()
    }
    async fn ready(&self) -> Result<(), StoreError> {
        down()
    }
}

#[tokio::test]
async fn a_failing_store_answers_as_documented() {
    let stores = Stores {
        events: Arc::new(Unready),
        ..Stores::in_memory()
    };
    let mut c = Checker::new(Fixture::with_stores(stores).await).await;
    let uri = format!("{CONVERSIONS}?api_key={}", c.fixture.api_key);
    let reply = c
        .json(
            Method::POST,
            CONVERSIONS,
            &uri,
            None,
            &conversion_body("a@example.com"),
        )
        .await;
    assert_eq!(reply.status, 503, "{reply:?}");
    let reply = c
        .call(Method::GET, "/readyz", "/readyz", &[], Body::empty())
        .await;
    assert_eq!(reply.status, 503, "{reply:?}");
}

#[tokio::test]
async fn webhook_and_operations_answers_match_the_document() {
    let mut c = Checker::new(Fixture::new().await).await;
    let (id, secret) = (c.fixture.client_id.clone(), c.fixture.client_secret.clone());
    let code = c.fixture.code().await;
    let exchange = json!({ "client_id": id, "client_secret": secret, "code": code });
    let tokens = c
        .json(Method::POST, TOKEN, TOKEN, None, &exchange)
        .await
        .json();
    let bearer = format!("Bearer {}", tokens["access_token"].as_str().unwrap());
    let auth = Some(bearer.as_str());
    let registration = json!({
        "event_type": "WEBHOOK.CONVERTED", "entity_type": "CONTACT",
        "url": "http://127.0.0.1:9/hook", "http_method": "POST",
        "event_identifiers": ["newsletter"], "include_relations": ["COMPANY"],
    });
    let created = c
        .json(Method::POST, WEBHOOKS, WEBHOOKS, auth, &registration)
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    let uuid = created.json()["uuid"].as_str().unwrap().to_owned();
    let one = format!("{WEBHOOKS}/{uuid}");
    // The same URL again; a body full of problems; not JSON; no token.
    c.json(Method::POST, WEBHOOKS, WEBHOOKS, auth, &registration)
        .await;
    let wrong = json!({ "event_type": "WEBHOOK.MARKED_OPPORTUNITY", "url": 5,
        "event_identifiers": [""], "include_relations": ["X"] });
    c.json(Method::POST, WEBHOOKS, WEBHOOKS, auth, &wrong).await;
    let text = [
        ("content-type", "text/plain"),
        ("authorization", bearer.as_str()),
    ];
    c.call(Method::POST, WEBHOOKS, WEBHOOKS, &text, "{}").await;
    c.json(Method::POST, WEBHOOKS, WEBHOOKS, None, &registration)
        .await;
    let authorization = [("authorization", bearer.as_str())];
    c.call(
        Method::GET,
        WEBHOOKS,
        WEBHOOKS,
        &authorization,
        Body::empty(),
    )
    .await;
    c.call(Method::GET, WEBHOOKS, WEBHOOKS, &[], Body::empty())
        .await;
    c.call(Method::GET, WEBHOOK, &one, &authorization, Body::empty())
        .await;
    let unknown = concrete(WEBHOOK);
    c.call(
        Method::GET,
        WEBHOOK,
        &unknown,
        &authorization,
        Body::empty(),
    )
    .await;
    let change = json!({ "status": "inactive", "event_identifiers": null });
    let reply = c.json(Method::PUT, WEBHOOK, &one, auth, &change).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    c.json(
        Method::PUT,
        WEBHOOK,
        &one,
        auth,
        &json!({ "status": "paused" }),
    )
    .await;
    c.json(Method::PUT, WEBHOOK, &unknown, auth, &change).await;
    c.call(Method::DELETE, WEBHOOK, &one, &authorization, Body::empty())
        .await;
    c.call(Method::DELETE, WEBHOOK, &one, &authorization, Body::empty())
        .await;
    c.call(Method::DELETE, WEBHOOK, &one, &[], Body::empty())
        .await;

    for path in ["/healthz", "/readyz", OPENAPI_PATH] {
        c.call(Method::GET, path, path, &[], Body::empty()).await;
    }
}
