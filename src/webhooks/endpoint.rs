//! `/integrations/webhooks`: an app registers, lists, reads, changes and
//! deletes its webhooks, bearer-authenticated (`../shared/COMPAT.md`,
//! "Webhooks"). An app sees only the webhooks it registered for the
//! account its token acts on; any other answers 404, as if it did not
//! exist.

use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

use crate::answer::{AnswerBody, AnswerContext, HttpAnswer, ToHttpAnswer};
use crate::gateway::Gateway;
use crate::oauth::bearer::BearerError;
use crate::oauth::decisions::Caller;
use crate::random::random_uuid;
use crate::records::webhook::{AttemptRecord, Webhook, WebhookId, WebhookStatus};
use crate::request::{MediaType, RequestParts, media_type};
use crate::store::error::StoreError;
use crate::store::webhooks::WebhookWrite;
use crate::webhooks::payload::body_at;
use crate::webhooks::registration::{WebhookFieldError, WebhookSpec, read_spec};
use crate::webhooks::signing::WebhookSecret;
use crate::webhooks::transport::{DestinationRefused, OutgoingRequest, SendOutcome};

/// How many of a webhook's last attempts `GET /integrations/webhooks/{uuid}`
/// shows.
pub const SHOWN_ATTEMPTS: usize = 10;

/// Why a webhook request was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// No valid bearer token (401).
    #[error(transparent)]
    Bearer(#[from] BearerError),
    /// A body that is not JSON by its `Content-Type` (415).
    #[error("the body must be application/json")]
    UnsupportedMediaType,
    /// The body's problems, every one (400).
    #[error("the webhook is invalid ({} problems)", .0.len())]
    Invalid(Vec<WebhookFieldError>),
    /// Another webhook of the account has this URL for this event type (400).
    #[error("a webhook with this url and event_type already exists")]
    DuplicateUrl,
    /// The account holds the most webhooks allowed (400).
    #[error("the account holds {0} webhooks, the most allowed")]
    TooMany(usize),
    /// The URL did not answer the validation call with 2xx in time (401,
    /// as the real service answers; nothing was created).
    #[error("the url did not answer the validation call with 2xx within {seconds} s ({reason})")]
    ValidationCallFailed {
        /// The attempt's timeout.
        seconds: u64,
        /// What came back instead.
        reason: String,
    },
    /// No webhook with this uuid is the caller's (404).
    #[error("no such webhook")]
    NotFound,
    /// The store failed (503).
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn errors_body(errors: &[WebhookFieldError]) -> Value {
    json!({ "errors": errors.iter().map(WebhookFieldError::to_json).collect::<Vec<_>>() })
}

impl ToHttpAnswer for WebhookError {
    fn to_http_answer(&self, context: &AnswerContext<'_>) -> HttpAnswer {
        let message = self.to_string();
        match self {
            WebhookError::Bearer(error) => error.to_http_answer(context),
            WebhookError::UnsupportedMediaType => {
                HttpAnswer::error(415, "UNSUPPORTED_MEDIA_TYPE", &message)
            }
            WebhookError::Invalid(errors) => HttpAnswer::json(400, errors_body(errors)),
            WebhookError::DuplicateUrl => HttpAnswer::json(
                400,
                json!({ "errors": [{
                    "error_type": "DUPLICATE_URL",
                    "error_message": message,
                    "path": "$.url",
                }] }),
            ),
            WebhookError::TooMany(max) => HttpAnswer::json(
                400,
                json!({ "errors": [{
                    "error_type": "TOO_MANY_WEBHOOKS",
                    "error_message": message,
                    "path": "$",
                    "validation_rules": { "max_items": max },
                }] }),
            ),
            WebhookError::ValidationCallFailed { .. } => {
                HttpAnswer::error(401, "UNAUTHORIZED", &message)
            }
            WebhookError::NotFound => HttpAnswer::error(404, "NOT_FOUND", &message),
            WebhookError::Store(error) => error.to_http_answer(context),
        }
    }
}

/// A webhook as answered: `uuid`, `event_type`, `entity_type`, `url`,
/// `http_method`, `event_identifiers`, `include_relations`, `status`,
/// `created_at`, `updated_at`. Never its secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookView(pub Webhook);

impl WebhookView {
    /// The JSON object.
    pub fn to_json(&self) -> Value {
        let webhook = &self.0;
        json!({
            "uuid": webhook.id,
            "event_type": webhook.event_type.as_str(),
            "entity_type": "CONTACT",
            "url": webhook.url,
            "http_method": "POST",
            "event_identifiers": webhook.event_identifiers,
            "include_relations": webhook.include_relations.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
            "status": webhook.status.as_str(),
            "created_at": rfc3339(webhook.created_at),
            "updated_at": rfc3339(webhook.updated_at),
        })
    }
}

/// `200` and the webhook.
impl ToHttpAnswer for WebhookView {
    fn to_http_answer(&self, _: &AnswerContext<'_>) -> HttpAnswer {
        HttpAnswer::json(200, self.to_json())
    }
}

/// A webhook just registered, with its secret: shown this once.
#[derive(Debug)]
pub struct WebhookCreated {
    /// The webhook.
    pub webhook: Webhook,
    /// Its signing secret.
    pub secret: WebhookSecret,
}

/// `201` and the webhook with `secret` (`whsec_...`).
impl ToHttpAnswer for WebhookCreated {
    fn to_http_answer(&self, _: &AnswerContext<'_>) -> HttpAnswer {
        let mut body = WebhookView(self.webhook.clone()).to_json();
        body["secret"] = self.secret.expose().into();
        HttpAnswer::json(201, body).with_header("cache-control", "no-store")
    }
}

/// The caller's webhooks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookList(pub Vec<Webhook>);

/// `200 {"webhooks": [...]}`.
impl ToHttpAnswer for WebhookList {
    fn to_http_answer(&self, _: &AnswerContext<'_>) -> HttpAnswer {
        let webhooks: Vec<Value> = self
            .0
            .iter()
            .map(|webhook| WebhookView(webhook.clone()).to_json())
            .collect();
        HttpAnswer::json(200, json!({ "webhooks": webhooks }))
    }
}

/// A webhook with its last attempts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookDetail {
    /// The webhook.
    pub webhook: Webhook,
    /// Its last attempts, newest first.
    pub attempts: Vec<AttemptRecord>,
}

/// `200`, the webhook and `last_attempts`: `[{"at", "status", "error",
/// "duration_ms"}]`, newest first, without bodies.
impl ToHttpAnswer for WebhookDetail {
    fn to_http_answer(&self, _: &AnswerContext<'_>) -> HttpAnswer {
        let mut body = WebhookView(self.webhook.clone()).to_json();
        body["last_attempts"] = self
            .attempts
            .iter()
            .map(|attempt| {
                json!({
                    "at": rfc3339(attempt.at),
                    "status": attempt.status,
                    "error": attempt.error,
                    "duration_ms": attempt.duration_ms,
                })
            })
            .collect::<Vec<_>>()
            .into();
        HttpAnswer::json(200, body)
    }
}

/// A webhook deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WebhookDeleted;

/// `204`, no body.
impl ToHttpAnswer for WebhookDeleted {
    fn to_http_answer(&self, _: &AnswerContext<'_>) -> HttpAnswer {
        HttpAnswer {
            status: 204,
            headers: Vec::new(),
            body: AnswerBody::Empty,
        }
    }
}

fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_default()
}

impl Gateway {
    /// `POST /integrations/webhooks`: registers a webhook of the calling
    /// app for its account, after a validation call to its URL answered
    /// 2xx. Answers `201` with the secret, shown once.
    ///
    /// # Errors
    /// [`WebhookError`]: the token, the body, a URL taken, the validation
    /// call, or the store.
    pub async fn create_webhook(
        &self,
        request: &RequestParts<'_>,
    ) -> Result<WebhookCreated, WebhookError> {
        let caller = self.authenticate_bearer(request.authorization).await?;
        let spec = self.webhook_spec(request, None)?;
        let existing = self
            .stores
            .webhooks
            .list_webhooks(Some(caller.account_id))
            .await?;
        let max = self.webhooks.max_per_account;
        if existing.len() >= max {
            return Err(WebhookError::TooMany(max));
        }
        if existing
            .iter()
            .any(|other| other.event_type == spec.event_type && other.url == spec.url)
        {
            return Err(WebhookError::DuplicateUrl);
        }
        let now = self.clock.now();
        let mut secret_salt = [0u8; 16];
        self.random.fill_bytes(&mut secret_salt);
        let webhook = Webhook {
            id: WebhookId(random_uuid(&*self.random)),
            account_id: caller.account_id,
            client_id: caller.client_id.clone(),
            event_type: spec.event_type,
            url: spec.url,
            event_identifiers: spec.event_identifiers,
            include_relations: spec.include_relations,
            status: WebhookStatus::Active,
            created_at: now,
            updated_at: now,
            secret_salt,
            failing_since: None,
        };
        let secret = WebhookSecret::derive(&self.hasher, webhook.id, &webhook.secret_salt);
        self.validation_call(&webhook, &secret).await?;
        match self.stores.webhooks.insert_webhook(&webhook).await? {
            WebhookWrite::Stored => Ok(WebhookCreated { webhook, secret }),
            WebhookWrite::DuplicateUrl => Err(WebhookError::DuplicateUrl),
            WebhookWrite::NotFound => Err(WebhookError::NotFound),
        }
    }

    /// `GET /integrations/webhooks`: the calling app's webhooks for its
    /// account, oldest first, without secrets.
    ///
    /// # Errors
    /// [`WebhookError`]: the token or the store.
    pub async fn list_webhooks(
        &self,
        request: &RequestParts<'_>,
    ) -> Result<WebhookList, WebhookError> {
        let caller = self.authenticate_bearer(request.authorization).await?;
        let webhooks = self
            .stores
            .webhooks
            .list_webhooks(Some(caller.account_id))
            .await?
            .into_iter()
            .filter(|webhook| webhook.client_id == caller.client_id)
            .collect();
        Ok(WebhookList(webhooks))
    }

    /// `GET /integrations/webhooks/{uuid}`: one of the caller's webhooks,
    /// with its last attempts.
    ///
    /// # Errors
    /// [`WebhookError`]: the token, no such webhook of the caller's, or the
    /// store.
    pub async fn show_webhook(
        &self,
        request: &RequestParts<'_>,
        uuid: &str,
    ) -> Result<WebhookDetail, WebhookError> {
        let caller = self.authenticate_bearer(request.authorization).await?;
        let webhook = self.callers_webhook(&caller, uuid).await?;
        let attempts = self
            .stores
            .webhooks
            .recent_attempts(webhook.id, SHOWN_ATTEMPTS)
            .await?;
        Ok(WebhookDetail { webhook, attempts })
    }

    /// `PUT /integrations/webhooks/{uuid}`: replaces the webhook's
    /// `event_type`, `url`, `event_identifiers` and `include_relations`
    /// (the body of `POST`; a field left out keeps its value), and its
    /// `status` when the body names one. A new URL gets the validation call
    /// first.
    ///
    /// # Errors
    /// As [`Gateway::create_webhook`], and 404 for no such webhook.
    pub async fn update_webhook(
        &self,
        request: &RequestParts<'_>,
        uuid: &str,
    ) -> Result<WebhookView, WebhookError> {
        let caller = self.authenticate_bearer(request.authorization).await?;
        let mut webhook = self.callers_webhook(&caller, uuid).await?;
        let current = WebhookView(webhook.clone()).to_json();
        let spec = self.webhook_spec(request, current.as_object())?;
        let new_url = spec.url != webhook.url;
        webhook.event_type = spec.event_type;
        webhook.url = spec.url;
        webhook.event_identifiers = spec.event_identifiers;
        webhook.include_relations = spec.include_relations;
        webhook.updated_at = self.clock.now();
        if new_url {
            let secret = WebhookSecret::derive(&self.hasher, webhook.id, &webhook.secret_salt);
            self.validation_call(&webhook, &secret).await?;
        }
        match self.stores.webhooks.update_webhook(&webhook).await? {
            WebhookWrite::Stored => {}
            WebhookWrite::DuplicateUrl => return Err(WebhookError::DuplicateUrl),
            WebhookWrite::NotFound => return Err(WebhookError::NotFound),
        }
        if let Some(status) = spec.status
            && status != webhook.status
        {
            self.stores
                .webhooks
                .set_webhook_status(webhook.id, status, webhook.updated_at)
                .await?;
            webhook.status = status;
            if status == WebhookStatus::Active {
                webhook.failing_since = None;
            }
        }
        Ok(WebhookView(webhook))
    }

    /// `DELETE /integrations/webhooks/{uuid}`: deletes the webhook with its
    /// pending deliveries. Answers `204`.
    ///
    /// # Errors
    /// [`WebhookError`]: the token, no such webhook of the caller's, or the
    /// store.
    pub async fn delete_webhook(
        &self,
        request: &RequestParts<'_>,
        uuid: &str,
    ) -> Result<WebhookDeleted, WebhookError> {
        let caller = self.authenticate_bearer(request.authorization).await?;
        let webhook = self.callers_webhook(&caller, uuid).await?;
        if self.stores.webhooks.delete_webhook(webhook.id).await? {
            Ok(WebhookDeleted)
        } else {
            Err(WebhookError::NotFound)
        }
    }

    /// Every webhook of every account, oldest first: for operators.
    ///
    /// # Errors
    /// The store's.
    pub async fn all_webhooks(&self) -> Result<Vec<Webhook>, StoreError> {
        self.stores.webhooks.list_webhooks(None).await
    }

    /// Switches a webhook on or off, as an operator; switching on clears
    /// its failures, and its waiting deliveries go out again. Returns
    /// whether it exists.
    ///
    /// # Errors
    /// The store's.
    pub async fn set_webhook_status(
        &self,
        id: WebhookId,
        status: WebhookStatus,
    ) -> Result<bool, StoreError> {
        self.stores
            .webhooks
            .set_webhook_status(id, status, self.clock.now())
            .await
    }

    /// The body of a POST, or of a PUT over the webhook's `current`
    /// object, read whole.
    fn webhook_spec(
        &self,
        request: &RequestParts<'_>,
        current: Option<&serde_json::Map<String, Value>>,
    ) -> Result<WebhookSpec, WebhookError> {
        if let Some(content_type) = request.content_type
            && media_type(content_type) != Some(MediaType::Json)
        {
            return Err(WebhookError::UnsupportedMediaType);
        }
        read_spec(request.body, self.webhooks.allow_private, current).map_err(WebhookError::Invalid)
    }

    /// The caller's webhook `uuid`, or 404.
    async fn callers_webhook(&self, caller: &Caller, uuid: &str) -> Result<Webhook, WebhookError> {
        let id = Uuid::parse_str(uuid).map_err(|_| WebhookError::NotFound)?;
        self.stores
            .webhooks
            .find_webhook(WebhookId(id))
            .await?
            .filter(|webhook| {
                webhook.account_id == caller.account_id && webhook.client_id == caller.client_id
            })
            .ok_or(WebhookError::NotFound)
    }

    /// The call a URL must answer 2xx before it is registered: a signed
    /// POST of `{"timestamp", "event_type", "entity_type", "validation":
    /// true}`, so that the receiver can check its verification too.
    async fn validation_call(
        &self,
        webhook: &Webhook,
        secret: &WebhookSecret,
    ) -> Result<(), WebhookError> {
        let stored = json!({
            "event_type": webhook.event_type.as_str(),
            "entity_type": "CONTACT",
            "validation": true,
        })
        .to_string();
        let now = self.clock.now();
        let body = body_at(&stored, now);
        let id = format!("msg_{}", random_uuid(&*self.random).simple());
        let request = OutgoingRequest {
            url: webhook.url.clone(),
            headers: secret.headers(&id, now.unix_timestamp(), &body),
            body,
            timeout: self.webhooks.attempt_timeout,
        };
        let outcome = self.webhooks.transport.post(&request).await;
        match outcome {
            outcome if outcome.succeeded() => Ok(()),
            // A name that does not resolve is a call that could not be
            // made, as a refused connection is: 401, as the real service.
            // A destination refused for what it is (scheme, a private
            // address) is the URL's fault: 400 on `url`.
            SendOutcome::Refused(refused) if refused != DestinationRefused::Unresolvable => Err(
                WebhookError::Invalid(vec![WebhookFieldError::destination(&refused)]),
            ),
            outcome => Err(WebhookError::ValidationCallFailed {
                seconds: self.webhooks.attempt_timeout.as_secs(),
                reason: outcome.error().unwrap_or_default(),
            }),
        }
    }
}
