//! A receiver in memory and a gateway that delivers to it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use conversion_gateway::{
    Gateway, HttpAnswer, OutgoingRequest, RequestParts, RetrySchedule, SecretHasher, SeededRandom,
    SendOutcome, Stores, WebhookOptions, WebhookTransport, WebhookView,
};
use conversion_gateway_testkit::Fixture;
use conversion_gateway_testkit::conversion_body;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

/// Answers every POST as told, per URL (200 by default), after an
/// optional delay, and keeps what it was sent.
#[derive(Default)]
pub struct Receiver {
    sent: Mutex<Vec<OutgoingRequest>>,
    answers: Mutex<HashMap<String, VecDeque<SendOutcome>>>,
    delays: Mutex<HashMap<String, Duration>>,
}

pub fn status(status: u16) -> SendOutcome {
    SendOutcome::Answered {
        status,
        retry_after: None,
    }
}

impl Receiver {
    /// The next answers to `url`, in order; then 200 again.
    pub fn answer(&self, url: &str, outcomes: impl IntoIterator<Item = SendOutcome>) {
        self.answers
            .lock()
            .unwrap()
            .entry(url.to_owned())
            .or_default()
            .extend(outcomes);
    }

    /// Drops the answers still queued for `url`: 200 from now on.
    pub fn forget_answers(&self, url: &str) {
        self.answers.lock().unwrap().remove(url);
    }

    /// Every answer to `url` takes `delay` (tokio's time).
    pub fn delay(&self, url: &str, delay: Duration) {
        self.delays.lock().unwrap().insert(url.to_owned(), delay);
    }

    /// What was sent, in order.
    pub fn sent(&self) -> Vec<OutgoingRequest> {
        self.sent.lock().unwrap().clone()
    }

    /// What was sent to `url`, as JSON bodies, in order.
    pub fn bodies_to(&self, url: &str) -> Vec<Value> {
        self.sent()
            .iter()
            .filter(|request| request.url == url)
            .map(|request| serde_json::from_slice(&request.body).unwrap())
            .collect()
    }

    /// The contacts' e-mails of the deliveries sent to `url`, in order.
    pub fn emails_to(&self, url: &str) -> Vec<String> {
        self.bodies_to(url)
            .iter()
            .map(|body| body["contact"]["email"].as_str().unwrap().to_owned())
            .collect()
    }

    pub fn clear(&self) {
        self.sent.lock().unwrap().clear();
    }
}

#[async_trait]
impl WebhookTransport for Receiver {
    async fn post(&self, request: &OutgoingRequest) -> SendOutcome {
        self.sent.lock().unwrap().push(request.clone());
        let delay = self.delays.lock().unwrap().get(&request.url).copied();
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        self.answers
            .lock()
            .unwrap()
            .get_mut(&request.url)
            .and_then(VecDeque::pop_front)
            .unwrap_or_else(|| status(200))
    }
}

const ACCESS_FOR_WEEKS: time::Duration = time::Duration::days(60);

/// The fixture's service with webhooks delivered to a [`Receiver`].
pub struct Hooks {
    pub f: Fixture,
    pub receiver: Arc<Receiver>,
    pub access: String,
}

impl Hooks {
    pub async fn new() -> Self {
        Self::with_schedule(RetrySchedule::default()).await
    }

    pub async fn with_schedule(schedule: RetrySchedule) -> Self {
        Self::on(Stores::in_memory(), schedule).await
    }

    pub async fn on(stores: Stores, schedule: RetrySchedule) -> Self {
        // Tokens that outlive the weeks these tests run over.
        let mut f = Fixture::with_stores(stores.clone(), |config| {
            config.access_token_lifetime = ACCESS_FOR_WEEKS;
        })
        .await;
        let receiver = Arc::new(Receiver::default());
        let gateway = Gateway::new(f.config.clone(), stores, SecretHasher::new([42; 32]))
            .with_clock(f.clock.clone())
            .with_random(Arc::new(SeededRandom::new(77)))
            .with_webhooks(WebhookOptions {
                transport: receiver.clone(),
                retry_schedule: schedule,
                ..WebhookOptions::default()
            });
        f.gateway = Arc::new(gateway);
        let (access, _) = f.tokens().await;
        Self {
            f,
            receiver,
            access,
        }
    }

    pub fn gateway(&self) -> &Gateway {
        &self.f.gateway
    }

    fn authorization(&self, token: &str) -> String {
        format!("Bearer {token}")
    }

    /// A JSON request's parts: `body` under `authorization`.
    fn json_parts<'r>(authorization: &'r str, body: &'r str) -> RequestParts<'r> {
        RequestParts {
            query: "",
            content_type: Some("application/json"),
            authorization: Some(authorization),
            idempotency_key: None,
            body: body.as_bytes(),
        }
    }

    /// A webhook request of the fixture's app, answered as HTTP.
    pub async fn call(
        &self,
        method: &str,
        path_id: Option<&str>,
        body: Option<Value>,
    ) -> HttpAnswer {
        self.call_as(&self.access.clone(), method, path_id, body)
            .await
    }

    pub async fn call_as(
        &self,
        token: &str,
        method: &str,
        path_id: Option<&str>,
        body: Option<Value>,
    ) -> HttpAnswer {
        let authorization = self.authorization(token);
        let bytes = body.map(|body| body.to_string()).unwrap_or_default();
        let parts = Self::json_parts(&authorization, &bytes);
        let gateway = self.gateway();
        match (method, path_id) {
            ("POST", None) => gateway.answer(gateway.create_webhook(&parts).await),
            ("GET", None) => gateway.answer(gateway.list_webhooks(&parts).await),
            ("GET", Some(id)) => gateway.answer(gateway.show_webhook(&parts, id).await),
            ("PUT", Some(id)) => gateway.answer(gateway.update_webhook(&parts, id).await),
            ("DELETE", Some(id)) => gateway.answer(gateway.delete_webhook(&parts, id).await),
            _ => panic!("no such route in these tests"),
        }
    }

    /// `PUT /integrations/webhooks/{uuid}` with `body` through the
    /// `Gateway`, as a host's Rust code calls it: the webhook it returns.
    pub async fn update(&self, uuid: &str, body: &Value) -> WebhookView {
        let authorization = self.authorization(&self.access);
        let bytes = body.to_string();
        let parts = Self::json_parts(&authorization, &bytes);
        self.gateway()
            .update_webhook(&parts, uuid)
            .await
            .expect("the webhook is updated")
    }

    /// Registers a webhook for `url` (all conversions), answered 201.
    pub async fn register(&self, url: &str) -> Value {
        self.register_with(json!({ "url": url })).await
    }

    /// Registers a webhook with the standard fields and `extra`.
    pub async fn register_with(&self, extra: Value) -> Value {
        let mut body = webhook_body("https://hooks.example.com/in");
        for (name, value) in extra.as_object().unwrap() {
            body[name] = value.clone();
        }
        let answer = self.call("POST", None, Some(body)).await;
        assert_eq!(answer.status, 201, "{:?}", answer.json_body());
        answer.json_body().unwrap().clone()
    }

    /// Records a conversion of `email` named `identifier` through the
    /// bearer route.
    pub async fn convert(&self, email: &str, identifier: &str) {
        let mut body = conversion_body(email);
        body["payload"]["conversion_identifier"] = identifier.into();
        let bytes = body.to_string();
        let authorization = self.authorization(&self.access);
        let parts = Self::json_parts(&authorization, &bytes);
        self.gateway()
            .record_event(&parts)
            .await
            .expect("the conversion is recorded");
    }
}

/// A valid registration body for `url`.
pub fn webhook_body(url: &str) -> Value {
    json!({
        "event_type": "WEBHOOK.CONVERTED",
        "entity_type": "CONTACT",
        "url": url,
        "http_method": "POST",
    })
}

/// Whether `request` carries a valid Standard Webhooks signature under
/// `secret` (`whsec_...`), computed here from the specification, not with
/// the crate's code.
pub fn signed_by(request: &OutgoingRequest, secret: &str) -> bool {
    let header = |name: &str| {
        request
            .headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    let key = STANDARD
        .decode(secret.strip_prefix("whsec_").unwrap())
        .unwrap();
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&key).unwrap();
    mac.update(header("webhook-id").as_bytes());
    mac.update(b".");
    mac.update(header("webhook-timestamp").as_bytes());
    mac.update(b".");
    mac.update(&request.body);
    let expected = format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()));
    header("webhook-signature")
        .split(' ')
        .any(|signature| signature == expected)
}

/// The value of header `name` of `request`.
pub fn header(request: &OutgoingRequest, name: &str) -> String {
    request
        .headers
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_default()
}
