//! Webhooks through the release binary, to real receivers on loopback:
//! registration with its validation call, signed deliveries (verified by
//! the Standard Webhooks reference library in Python), retries across a
//! receiver's outage, deliveries pending at a SIGKILL arriving after the
//! restart, the SSRF refusals, the operator's commands and metrics, and
//! two instances on one PostgreSQL sending each delivery once.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::admin::SharedStore;
use crate::support::{Launch, Server, conversion_body};

/// One request a receiver got.
#[derive(Clone, Debug)]
pub struct Received {
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl Received {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or("")
    }

    fn is_validation(&self) -> bool {
        self.json()["validation"] == true
    }
}

#[derive(Default)]
struct ReceiverState {
    received: Vec<Received>,
    /// The status answered; 200 when unset.
    status: Option<u16>,
}

/// A webhook receiver on a loopback port.
#[derive(Clone)]
pub struct Receiver {
    state: Arc<Mutex<ReceiverState>>,
    pub url: String,
}

async fn receive(
    State(state): State<Arc<Mutex<ReceiverState>>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let mut state = state.lock().unwrap();
    state.received.push(Received {
        headers: headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    value.to_str().unwrap_or("").to_owned(),
                )
            })
            .collect(),
        body: body.to_vec(),
    });
    StatusCode::from_u16(state.status.unwrap_or(200)).unwrap()
}

impl Receiver {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::on(listener)
    }

    /// A receiver on `listener` (to come back on the same port).
    pub fn on(listener: tokio::net::TcpListener) -> Self {
        let address: SocketAddr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(ReceiverState::default()));
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(receive))
            .with_state(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            state,
            url: format!("http://{address}/hook"),
        }
    }

    pub fn answer(&self, status: u16) {
        self.state.lock().unwrap().status = Some(status);
    }

    /// Every request but the validation calls.
    pub fn deliveries(&self) -> Vec<Received> {
        self.state
            .lock()
            .unwrap()
            .received
            .iter()
            .filter(|received| !received.is_validation())
            .cloned()
            .collect()
    }

    pub fn all(&self) -> Vec<Received> {
        self.state.lock().unwrap().received.clone()
    }

    /// Waits (at most `patience`) until `done` holds of the deliveries.
    pub async fn wait_until(
        &self,
        patience: Duration,
        done: impl Fn(&[Received]) -> bool,
    ) -> Vec<Received> {
        let started = Instant::now();
        loop {
            let deliveries = self.deliveries();
            if done(&deliveries) {
                return deliveries;
            }
            assert!(
                started.elapsed() < patience,
                "not delivered within {patience:?}: {} deliveries",
                deliveries.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The flags of a server that may call loopback receivers, retrying fast.
pub(crate) const FAST: [&str; 3] = [
    "--webhooks-allow-private",
    "--webhook-retry-schedule",
    "0s,1s,1s,1s,1s,1s,1s,1s",
];

/// Registers a webhook for `url` as the demo app: the answer.
pub(crate) async fn register(server: &Server, access: &str, url: &str) -> crate::support::Reply {
    server
        .client()
        .post_json(
            "/integrations/webhooks",
            Some(&format!("Bearer {access}")),
            &json!({
                "event_type": "WEBHOOK.CONVERTED",
                "entity_type": "CONTACT",
                "url": url,
                "http_method": "POST",
            }),
        )
        .await
}

/// Whether `received` carries a valid Standard Webhooks signature.
fn signed_by(received: &Received, secret: &str) -> bool {
    let key = STANDARD
        .decode(secret.strip_prefix("whsec_").unwrap())
        .unwrap();
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&key).unwrap();
    mac.update(received.header("webhook-id").as_bytes());
    mac.update(b".");
    mac.update(received.header("webhook-timestamp").as_bytes());
    mac.update(b".");
    mac.update(&received.body);
    let expected = format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()));
    received
        .header("webhook-signature")
        .split(' ')
        .any(|signature| signature == expected)
}

pub(crate) fn email_of(received: &Received) -> String {
    received.json()["contact"]["email"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversion_is_delivered_signed_in_the_real_services_shape() {
    let receiver = Receiver::start().await;
    let server = Launch::memory(&FAST).start();
    let (access, _) = server.tokens().await;
    let created = register(&server, &access, &receiver.url).await;
    assert_eq!(created.status, 201, "{}", created.text());
    let created = created.json();
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert_eq!(receiver.all().len(), 1, "the validation call");
    assert!(signed_by(&receiver.all()[0], &secret));

    let reply = server
        .convert(&server.demo.api_key, &conversion_body("lead@example.com"))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let deliveries = receiver
        .wait_until(Duration::from_secs(10), |d| !d.is_empty())
        .await;
    let delivery = &deliveries[0];
    assert!(signed_by(delivery, &secret), "{delivery:?}");
    assert_eq!(delivery.header("content-type"), "application/json");
    assert!(delivery.header("webhook-id").starts_with("msg_"));
    let body = delivery.json();
    assert_eq!(body["event_type"], "WEBHOOK.CONVERTED");
    assert_eq!(body["entity_type"], "CONTACT");
    assert_eq!(body["contact"]["email"], "lead@example.com");
    assert!(body["timestamp"].is_string() && body["event_timestamp"].is_string());

    // The webhook shows the attempt; the list shows no secret.
    let uuid = created["uuid"].as_str().unwrap();
    let shown = server
        .client()
        .send(
            server
                .client()
                .request(
                    reqwest::Method::GET,
                    &format!("/integrations/webhooks/{uuid}"),
                )
                .bearer_auth(&access),
        )
        .await;
    assert_eq!(shown.status, 200);
    let attempts = shown.json()["last_attempts"].as_array().unwrap().clone();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["status"], 200);
    let listed = server
        .client()
        .send(
            server
                .client()
                .request(reqwest::Method::GET, "/integrations/webhooks")
                .bearer_auth(&access),
        )
        .await;
    assert_eq!(listed.status, 200);
    assert!(!listed.text().contains("whsec_"));
    assert!(
        !server.logs().contains(&secret[6..]),
        "no secret in the logs"
    );

    // Metrics: the attempt by outcome, its latency, the backlog.
    let metrics = server.client().get("/metrics", "").await.text();
    assert!(
        metrics.contains("cg_webhook_attempts_total{outcome=\"delivered\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("cg_webhook_attempt_seconds"));
    assert!(metrics.contains("cg_webhook_backlog"));
}

/// The Standard Webhooks reference library (Python) verifies a delivery.
/// Needs Python with `standardwebhooks`: the second test command only.
#[cfg(feature = "external-tests")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standardwebhooks_library_verifies_deliveries() {
    let receiver = Receiver::start().await;
    let server = Launch::memory(&FAST).start();
    let (access, _) = server.tokens().await;
    let created = register(&server, &access, &receiver.url).await.json();
    let secret = created["secret"].as_str().unwrap().to_owned();
    server
        .convert(&server.demo.api_key, &conversion_body("lead@example.com"))
        .await;
    let delivery = receiver
        .wait_until(Duration::from_secs(10), |d| !d.is_empty())
        .await
        .remove(0);
    let verify = |secret: &str, body: &[u8]| {
        let dir = conversion_gateway_testkit::TempDir::new("standardwebhooks");
        let body_file = dir.path("body.json");
        std::fs::write(&body_file, body).unwrap();
        let headers = json!({
            "webhook-id": delivery.header("webhook-id"),
            "webhook-timestamp": delivery.header("webhook-timestamp"),
            "webhook-signature": delivery.header("webhook-signature"),
        });
        std::process::Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/server/clients/standardwebhooks_verify.py"
            ))
            .arg(secret)
            .arg(headers.to_string())
            .arg(&body_file)
            .output()
            .expect("python3 (the standardwebhooks verifier needs it)")
    };
    let output = verify(&secret, &delivery.body);
    assert!(
        output.status.success(),
        "standardwebhooks refused a delivery. It needs Python 3 with the \
         package: pip install standardwebhooks\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let verified: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(verified["contact"]["email"], "lead@example.com");
    // A forged body, or another secret, is refused.
    let mut forged = delivery.body.clone();
    forged.extend_from_slice(b" ");
    assert!(!verify(&secret, &forged).status.success());
    let other = format!("whsec_{}", STANDARD.encode([7u8; 32]));
    assert!(!verify(&other, &delivery.body).status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_outage_is_ridden_out_with_retries_under_one_id() {
    let receiver = Receiver::start().await;
    let server = Launch::memory(&FAST).start();
    let (access, _) = server.tokens().await;
    assert_eq!(register(&server, &access, &receiver.url).await.status, 201);
    receiver.answer(503);
    server
        .convert(&server.demo.api_key, &conversion_body("lead@example.com"))
        .await;
    receiver
        .wait_until(Duration::from_secs(10), |d| d.len() >= 3)
        .await;
    receiver.answer(200);
    let before = receiver.deliveries().len();
    let deliveries = receiver
        .wait_until(Duration::from_secs(10), |d| d.len() > before)
        .await;
    let ids: HashSet<&str> = deliveries.iter().map(|d| d.header("webhook-id")).collect();
    assert_eq!(ids.len(), 1, "one delivery, retried under its id");
    // Delivered: no more attempts.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(receiver.deliveries().len(), before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_pending_at_a_sigkill_all_arrive_after_the_restart() {
    let receiver = Receiver::start().await;
    let store = SharedStore::sqlite("webhooks-sigkill");
    let server = store.start_server_with(&FAST);
    let (access, _) = server.tokens().await;
    assert_eq!(register(&server, &access, &receiver.url).await.status, 201);
    receiver.answer(500);
    let emails: Vec<String> = (0..10).map(|n| format!("lead{n}@example.com")).collect();
    for email in &emails {
        let reply = server
            .convert(&server.demo.api_key, &conversion_body(email))
            .await;
        assert_eq!(reply.status, 200);
    }
    receiver
        .wait_until(Duration::from_secs(10), |d| !d.is_empty())
        .await;
    server.kill();
    drop(server);
    receiver.answer(200);
    let server = store.start_server_with(&FAST);
    // A delivery in the middle of an attempt at the kill keeps its lease
    // (30 s) and goes out when it ends; the others at their next retry.
    let deliveries = receiver
        .wait_until(Duration::from_secs(60), |deliveries| {
            let delivered: HashSet<String> = deliveries.iter().map(email_of).collect();
            emails.iter().all(|email| delivered.contains(email))
        })
        .await;
    assert!(!deliveries.is_empty());
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_destinations_are_refused_without_the_flag() {
    let receiver = Receiver::start().await;
    let server = Launch::memory(&[]).start();
    let (access, _) = server.tokens().await;
    let https_receiver = receiver.url.replace("http://", "https://");
    for url in [
        receiver.url.as_str(),
        https_receiver.as_str(),
        "https://localhost/hook",
        "https://[::1]/hook",
        "https://10.0.0.1/hook",
        "https://169.254.169.254/latest/meta-data/",
        "https://[::ffff:127.0.0.1]/hook",
    ] {
        let reply = register(&server, &access, url).await;
        assert_eq!(reply.status, 400, "{url}: {}", reply.text());
        assert_eq!(reply.json()["errors"][0]["path"], "$.url", "{url}");
    }
    assert!(receiver.all().is_empty(), "nothing was called");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validation_call_that_fails_answers_401_and_creates_nothing() {
    let receiver = Receiver::start().await;
    receiver.answer(500);
    let server = Launch::memory(&FAST).start();
    let (access, _) = server.tokens().await;
    let reply = register(&server, &access, &receiver.url).await;
    assert_eq!(reply.status, 401, "{}", reply.text());
    // A closed port too.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let reply = register(&server, &access, &format!("http://{closed}/hook")).await;
    assert_eq!(reply.status, 401, "{}", reply.text());
    let listed = server
        .client()
        .send(
            server
                .client()
                .request(reqwest::Method::GET, "/integrations/webhooks")
                .bearer_auth(&access),
        )
        .await;
    assert_eq!(listed.json()["webhooks"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_list_disable_and_enable_webhooks() {
    let receiver = Receiver::start().await;
    let store = SharedStore::sqlite("webhooks-admin");
    let server = store.start_server_with(&FAST);
    let (access, _) = server.tokens().await;
    let created = register(&server, &access, &receiver.url).await.json();
    let uuid = created["uuid"].as_str().unwrap().to_owned();
    let listed = store.admin(&["webhook", "list"]).json();
    assert_eq!(listed["webhooks"][0]["uuid"], uuid);
    assert_eq!(listed["webhooks"][0]["status"], "active");
    assert!(listed["webhooks"][0].get("secret").is_none());
    assert!(listed["pending_deliveries"].is_number());
    let off = store.admin(&["webhook", "disable", "--id", &uuid]).json();
    assert_eq!(off, json!({ "uuid": uuid, "status": "inactive" }));
    // Off: a conversion is not delivered.
    server
        .convert(&server.demo.api_key, &conversion_body("lead@example.com"))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(receiver.deliveries().is_empty());
    let on = store.admin(&["webhook", "enable", "--id", &uuid]).json();
    assert_eq!(on, json!({ "uuid": uuid, "status": "active" }));
    server
        .convert(&server.demo.api_key, &conversion_body("after@example.com"))
        .await;
    let deliveries = receiver
        .wait_until(Duration::from_secs(10), |d| !d.is_empty())
        .await;
    assert_eq!(email_of(&deliveries[0]), "after@example.com");
    let missing = store.admin(&[
        "webhook",
        "enable",
        "--id",
        "00000000-0000-0000-0000-000000000000",
    ]);
    assert!(!missing.status.success());
}

#[test]
fn a_bad_retry_schedule_is_refused_at_start() {
    let (status, stderr) = Launch::memory(&["--webhook-retry-schedule", "5x"]).fail();
    assert!(!status.success());
    assert!(stderr.contains("--webhook-retry-schedule"), "{stderr}");
}

/// Two instances on one PostgreSQL database: every delivery is sent, and
/// by one of them only.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_postgresql_send_each_delivery_once() {
    let Some(store) = crate::admin::postgres::store("webhooks-two").await else {
        return;
    };
    let receiver = Receiver::start().await;
    let first = store.start_server_with(&FAST);
    let second = store.start_server_with(&FAST);
    let (access, _) = first.tokens().await;
    assert_eq!(register(&first, &access, &receiver.url).await.status, 201);
    let emails: Vec<String> = (0..40).map(|n| format!("lead{n}@example.com")).collect();
    for (n, email) in emails.iter().enumerate() {
        let server = if n % 2 == 0 { &first } else { &second };
        let reply = server
            .convert(&server.demo.api_key, &conversion_body(email))
            .await;
        assert_eq!(reply.status, 200);
    }
    receiver
        .wait_until(Duration::from_secs(20), |d| d.len() >= emails.len())
        .await;
    // Give a duplicate time to show.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let deliveries = receiver.deliveries();
    let ids: HashSet<&str> = deliveries.iter().map(|d| d.header("webhook-id")).collect();
    assert_eq!(deliveries.len(), emails.len(), "each sent once");
    assert_eq!(ids.len(), emails.len());
    let delivered: HashSet<String> = deliveries.iter().map(email_of).collect();
    assert_eq!(delivered, emails.iter().cloned().collect());
}
