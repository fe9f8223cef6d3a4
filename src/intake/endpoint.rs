//! The three event routes: `POST /platform/conversions` with an API key
//! (from website forms), `POST /platform/events` and
//! `/platform/events/batch` with a bearer token (from applications), with
//! batches and idempotent retries.

use std::sync::Arc;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::account::Account;
use crate::answer::{AnswerContext, HttpAnswer, ToHttpAnswer};
use crate::gateway::Gateway;
use crate::intake::api_key_cache::{KeyOwner, Lookup};
use crate::intake::rate_limit::answer::RateLimited;
use crate::intake::rate_limit::{Admission, Charge, LimitKind, LimiterFailure};
use crate::intake::validator::errors::ValidationErrors;
use crate::intake::validator::event::ConversionEvent;
use crate::intake::validator::{validate_batch, validate_conversion};
use crate::oauth::bearer::BearerError;
use crate::random::time_ordered_uuid;
use crate::records::event::{
    EventSubmission, IdempotencyClaim, IdempotencyScope, IntakeChannel, RecordOutcome,
    RecordedEvent,
};
use crate::request::RequestParts;
use crate::request::{MediaType, Params, media_type};
use crate::secret::ApiKey;
use crate::store::error::StoreError;

/// The longest `Idempotency-Key` accepted, in bytes.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// Why an event was not accepted.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IntakeError {
    /// The `api_key` is missing, unknown, or switched off. The key itself is
    /// never echoed.
    #[error("a valid api_key is required")]
    InvalidApiKey,
    /// The bearer token did not authenticate.
    #[error(transparent)]
    Bearer(#[from] BearerError),
    /// The body is not `application/json` (or, on the conversion route,
    /// `text/plain`, as `navigator.sendBeacon` sends it).
    #[error("the content type must be application/json")]
    UnsupportedMediaType,
    /// The query string could not be read.
    #[error("the query string is malformed")]
    MalformedQuery,
    /// The event (or batch) failed validation: every error found.
    #[error(transparent)]
    Invalid(#[from] ValidationErrors),
    /// The `Idempotency-Key` is empty, too long, or not visible ASCII.
    #[error("the Idempotency-Key must be 1 to 255 visible ASCII characters")]
    InvalidIdempotencyKey,
    /// The `Idempotency-Key` was used before with a different request.
    #[error("this Idempotency-Key was already used with a different request")]
    IdempotencyKeyReused,
    /// The request would exceed a limit: nothing was recorded.
    #[error(transparent)]
    RateLimited(#[from] RateLimited),
    /// The rate limiter could not count and is configured to fail closed
    /// ([`crate::LimiterFailure::Closed`]): nothing was recorded, and the
    /// client may retry.
    #[error("the rate limiter is unavailable")]
    LimiterUnavailable,
    /// The store failed: nothing was recorded, and the client may retry.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A 400, 401, 409, 413, 415 or 429 with the service's error body, the
/// bearer challenge, or a 503 (the store's, or the limiter's when it fails
/// closed). Exhaustive.
impl IntakeError {
    /// How a request refused with this error counts in
    /// `cg_requests_total`.
    pub(crate) fn outcome(&self) -> crate::metrics::Outcome {
        use crate::metrics::Outcome;
        match self {
            IntakeError::InvalidApiKey => Outcome::RefusedAuthentication,
            IntakeError::Bearer(BearerError::Store(_)) => Outcome::Unavailable,
            IntakeError::Bearer(_) => Outcome::RefusedAuthentication,
            IntakeError::UnsupportedMediaType
            | IntakeError::MalformedQuery
            | IntakeError::Invalid(_)
            | IntakeError::InvalidIdempotencyKey
            | IntakeError::IdempotencyKeyReused => Outcome::RefusedValidation,
            IntakeError::RateLimited(_) => Outcome::RefusedLimit,
            IntakeError::LimiterUnavailable | IntakeError::Store(_) => Outcome::Unavailable,
        }
    }
}

impl ToHttpAnswer for IntakeError {
    fn to_http_answer(&self, context: &AnswerContext<'_>) -> HttpAnswer {
        let message = self.to_string();
        match self {
            IntakeError::InvalidApiKey => HttpAnswer::error(401, "UNAUTHORIZED", &message),
            IntakeError::Bearer(error) => error.to_http_answer(context),
            IntakeError::UnsupportedMediaType => {
                HttpAnswer::error(415, "UNSUPPORTED_MEDIA_TYPE", &message)
            }
            IntakeError::MalformedQuery => HttpAnswer::error(400, "BAD_REQUEST", &message),
            IntakeError::Invalid(errors) => errors.to_http_answer(context),
            IntakeError::InvalidIdempotencyKey => {
                HttpAnswer::error(400, "INVALID_IDEMPOTENCY_KEY", &message)
            }
            // 409 Conflict (RFC 9110 section 15.5.10): the request is well
            // formed, but the key is already bound to another request, a
            // conflict with stored state the client resolves with a new key.
            // draft-ietf-httpapi-idempotency-key-header section 2.7 suggests
            // 422 (a SHOULD), which says the content itself cannot be
            // processed; it can, under any other key, and clients and
            // fuzzers alike read 422 as "this body is invalid".
            IntakeError::IdempotencyKeyReused => {
                HttpAnswer::error(409, "IDEMPOTENCY_KEY_REUSED", &message)
            }
            IntakeError::RateLimited(refusal) => refusal.to_http_answer(context),
            IntakeError::LimiterUnavailable => HttpAnswer::error(
                503,
                "SERVICE_UNAVAILABLE",
                "the service is temporarily unavailable, please retry",
            )
            .with_header("retry-after", "1"),
            IntakeError::Store(error) => error.to_http_answer(context),
        }
    }
}

/// What intake recorded (or found already recorded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntakeReceipt {
    /// The `event_uuid` of each event, in request order.
    pub event_uuids: Vec<Uuid>,
    /// The batch's identifier, for the batch route.
    pub batch_uuid: Option<Uuid>,
    /// Whether this was a retry answered from the first request's record
    /// (nothing new was recorded).
    pub replayed: bool,
    /// The paths of attributes that were accepted and dropped (neither
    /// standard nor custom fields), for the host to report to the account.
    pub dropped_attributes: Vec<String>,
}

/// Every error found, with its JSON path: 400, or 413 for a body over the
/// size limit.
impl ToHttpAnswer for ValidationErrors {
    fn to_http_answer(&self, _: &AnswerContext<'_>) -> HttpAnswer {
        HttpAnswer::json(self.status(), self.to_body())
    }
}

/// `200 {"event_uuid": ...}` for a single event, or the batch answer
/// `{"event_batch_uuid": ..., "events": [{"event_uuid": ...}, ...]}`. A
/// replay carries `Idempotent-Replayed: true`.
impl ToHttpAnswer for IntakeReceipt {
    fn to_http_answer(&self, _: &AnswerContext<'_>) -> HttpAnswer {
        let body = match self.batch_uuid {
            Some(batch) => json!({
                "event_batch_uuid": batch,
                "events": self.event_uuids.iter().map(|id| json!({ "event_uuid": id })).collect::<Vec<Value>>(),
            }),
            None => json!({ "event_uuid": self.event_uuids.first() }),
        };
        let answer = HttpAnswer::json(200, body);
        if self.replayed {
            answer.with_header("idempotent-replayed", "true")
        } else {
            answer
        }
    }
}

/// The credential a request authenticated with: how its events are
/// recorded as having arrived, and whose `Idempotency-Key`s it uses.
struct Credential {
    channel: IntakeChannel,
    scope: IdempotencyScope,
}

/// Which route an event came by; part of the idempotency fingerprint, so
/// that one key cannot be replayed across routes.
#[derive(Clone, Copy)]
enum Route {
    Conversion,
    Event,
    Batch,
}

impl Route {
    /// The endpoint's name in metrics.
    fn endpoint(self) -> &'static str {
        match self {
            Route::Conversion => "conversion",
            Route::Event => "event",
            Route::Batch => "batch",
        }
    }

    fn tag(self) -> &'static [u8] {
        match self {
            Route::Conversion => b"conversions\0",
            Route::Event => b"events\0",
            Route::Batch => b"events/batch\0",
        }
    }
}

impl Gateway {
    /// The account an API key belongs to, if the key is known and switched
    /// on. The key is compared by its keyed hash, never stored or logged.
    ///
    /// A key that authenticated is remembered for
    /// [`crate::GatewayConfig::api_key_cache_ttl`]: within that time after
    /// it was switched off by another gateway on the same store, it may
    /// still be accepted here. Switched off through this gateway's
    /// [`Gateway::set_api_key_active`], it is refused from the next request
    /// on, even if a request that read it before the switch was in flight.
    ///
    /// # Errors
    /// [`IntakeError::InvalidApiKey`], or the store's error.
    pub async fn authenticate_api_key(&self, key: &str) -> Result<Account, IntakeError> {
        Ok(Account::clone(&self.api_key_owner(key).await?.account))
    }

    /// The account an active API key belongs to, and the key's id: from the
    /// cache, or from the stores (and then cached).
    async fn api_key_owner(&self, key: &str) -> Result<KeyOwner, IntakeError> {
        let hash = ApiKey::new(key).hash(&self.hasher);
        // Asked before the stores: the miss dates the question and names
        // the cache's generation, so that an answer read before a switch
        // through `set_api_key_active` is not cached after it.
        let miss = match self.api_key_cache.get(&hash, self.clock.now()) {
            Lookup::Hit(owner) => return Ok(owner),
            Lookup::Miss(miss) => miss,
        };
        let timer = self.metrics.store_operation("api_keys", "find_api_key");
        let record = self.stores.api_keys.find_api_key(&hash).await;
        timer.done();
        let record = record?;
        let Some(record) = record.filter(|record| record.active) else {
            return Err(IntakeError::InvalidApiKey);
        };
        let account = self
            .stores
            .accounts
            .find_account(record.account_id)
            .await?
            .ok_or(IntakeError::InvalidApiKey)?;
        let owner = KeyOwner {
            account: Arc::new(account),
            key_id: record.id,
        };
        self.api_key_cache.insert(&hash, owner.clone(), miss);
        Ok(owner)
    }

    /// `POST /platform/conversions?api_key=KEY`: one conversion from a
    /// website form, authenticated by the account's public API key. Answer
    /// the result with [`Gateway::answer`].
    ///
    /// # Errors
    /// [`IntakeError`]: the key, the content type, the body or the
    /// `Idempotency-Key` was refused, or the store failed (nothing recorded).
    pub async fn record_conversion(
        &self,
        request: &RequestParts<'_>,
    ) -> Result<IntakeReceipt, IntakeError> {
        let result = self.conversion_request(request).await;
        self.observe(Route::Conversion, &result);
        result
    }

    async fn conversion_request(
        &self,
        request: &RequestParts<'_>,
    ) -> Result<IntakeReceipt, IntakeError> {
        let key = Params::form_value(request.query, "api_key")
            .map_err(|_| IntakeError::MalformedQuery)?
            .ok_or(IntakeError::InvalidApiKey)?;
        let KeyOwner { account, key_id } = self.api_key_owner(&key).await?;
        let credential = Credential {
            channel: IntakeChannel::ApiKey,
            scope: IdempotencyScope::ApiKey(key_id),
        };
        self.intake(request, &account, credential, Route::Conversion)
            .await
    }

    /// Counts a request of `route` that ended with `result`.
    fn observe(&self, route: Route, result: &Result<IntakeReceipt, IntakeError>) {
        let endpoint = route.endpoint();
        let outcome = crate::oauth::token_endpoint::outcome(result, IntakeError::outcome);
        self.metrics.request(endpoint, outcome);
        if let Ok(receipt) = result
            && !receipt.replayed
        {
            let batch = matches!(route, Route::Batch);
            self.metrics
                .events_recorded(endpoint, receipt.event_uuids.len(), batch);
        }
    }

    /// `POST /platform/events` with `Authorization: Bearer`: one event from
    /// an application.
    ///
    /// # Errors
    /// As [`Gateway::record_conversion`], with the bearer token in place of
    /// the API key.
    pub async fn record_event(
        &self,
        request: &RequestParts<'_>,
    ) -> Result<IntakeReceipt, IntakeError> {
        let result = async {
            let (account, credential) = self.bearer_account(request).await?;
            self.intake(request, &account, credential, Route::Event)
                .await
        }
        .await;
        self.observe(Route::Event, &result);
        result
    }

    /// `POST /platform/events/batch` with `Authorization: Bearer`: a JSON
    /// array of events, validated whole and recorded all or nothing.
    ///
    /// # Errors
    /// As [`Gateway::record_event`]; one invalid event refuses the batch,
    /// and every error names its event's index.
    pub async fn record_event_batch(
        &self,
        request: &RequestParts<'_>,
    ) -> Result<IntakeReceipt, IntakeError> {
        let result = async {
            let (account, credential) = self.bearer_account(request).await?;
            self.intake(request, &account, credential, Route::Batch)
                .await
        }
        .await;
        self.observe(Route::Batch, &result);
        result
    }

    async fn bearer_account(
        &self,
        request: &RequestParts<'_>,
    ) -> Result<(Account, Credential), IntakeError> {
        let caller = self.authenticate_bearer(request.authorization).await?;
        let account = self
            .stores
            .accounts
            .find_account(caller.account_id)
            .await?
            .ok_or(BearerError::Invalid)?;
        let credential = Credential {
            scope: IdempotencyScope::Client(caller.client_id.clone()),
            channel: IntakeChannel::Bearer {
                client_id: caller.client_id,
            },
        };
        Ok((account, credential))
    }

    async fn intake(
        &self,
        request: &RequestParts<'_>,
        account: &Account,
        credential: Credential,
        route: Route,
    ) -> Result<IntakeReceipt, IntakeError> {
        let Credential { channel, scope } = credential;
        let accepted = match (route, request.content_type.and_then(media_type)) {
            (_, Some(MediaType::Json)) => true,
            // A page's `navigator.sendBeacon` (so that a conversion survives
            // the page being closed), or a `fetch` without a CORS
            // preflight, can only send another origin a CORS-safelisted
            // type: a JSON string goes as `text/plain;charset=UTF-8`. The
            // body is the same JSON, validated the same way.
            (Route::Conversion, Some(MediaType::Text)) => true,
            _ => false,
        };
        if !accepted {
            return Err(IntakeError::UnsupportedMediaType);
        }
        let idempotency_key = match request.idempotency_key {
            None => None,
            Some(key) if is_valid_idempotency_key(key) => Some(key),
            Some(_) => return Err(IntakeError::InvalidIdempotencyKey),
        };
        let custom_fields: Vec<&str> = account.custom_fields.iter().map(String::as_str).collect();
        let limits = &self.config.conversion_limits;
        let events = match route {
            Route::Batch => validate_batch(request.body, &custom_fields, limits)?,
            Route::Conversion | Route::Event => {
                vec![validate_conversion(request.body, &custom_fields, limits)?]
            }
        };
        let now = self.clock.now();
        let dropped_attributes = dropped_attribute_paths(&events, matches!(route, Route::Batch));
        let recorded: Vec<RecordedEvent> = events
            .iter()
            .map(|event| self.recorded_event(event, account, &channel, now))
            .collect();
        let charges = self.charges(account, &scope, &recorded);
        let batch_uuid =
            matches!(route, Route::Batch).then(|| time_ordered_uuid(now, &*self.random));
        let idempotency = idempotency_key.map(|key| IdempotencyClaim {
            account_id: account.id,
            scope,
            key: key.to_owned(),
            fingerprint: fingerprint(route, request.body),
            created_at: now,
            expires_at: now + self.config.idempotency_retention,
        });
        let submission = EventSubmission {
            events: recorded,
            batch_uuid,
            idempotency,
        };
        let charged = match self.charge(&charges, now).await {
            Ok(charged) => charged,
            // The retry of an accepted event is answered from its record
            // even over the limit: it records nothing.
            Err(refused @ IntakeError::RateLimited(_)) => {
                let known = match &submission.idempotency {
                    Some(claim) => self.stores.events.check_claim(claim).await?,
                    None => None,
                };
                return match known {
                    Some(outcome @ (RecordOutcome::Replayed { .. } | RecordOutcome::KeyReused)) => {
                        receipt(outcome, &submission, dropped_attributes)
                    }
                    Some(RecordOutcome::Recorded) | None => Err(refused),
                };
            }
            Err(error) => return Err(error),
        };
        let timer = self.metrics.store_operation("events", "record");
        let outcome = self.stores.events.record(&submission).await;
        timer.done();
        if charged && !matches!(outcome, Ok(RecordOutcome::Recorded)) {
            // Nothing new was recorded (a replay, a reused key, a failed
            // store): the request's charge is handed back. A refund that
            // fails only leaves the counts a little high until the window
            // ends.
            let _ = self.rate_limiter.refund(&charges, now).await;
        }
        receipt(outcome?, &submission, dropped_attributes)
    }

    /// What `events` of `account`, sent with the credential of `scope`,
    /// charge: one unit per event against each limit that is on, the lead
    /// limit per distinct contact e-mail.
    fn charges(
        &self,
        account: &Account,
        scope: &IdempotencyScope,
        events: &[RecordedEvent],
    ) -> Vec<Charge> {
        let limits = &self.config.rate_limits;
        let cost = u32::try_from(events.len()).unwrap_or(u32::MAX);
        let mut charges = Vec::new();
        if let Some(limit) = limits.per_lead {
            let mut leads: Vec<(String, u32)> = Vec::new();
            for event in events {
                let email = event.email.trim().to_lowercase();
                match leads.iter_mut().find(|(known, _)| *known == email) {
                    Some((_, count)) => *count += 1,
                    None => leads.push((email, 1)),
                }
            }
            for (email, count) in leads {
                // The key holds a keyed hash of the e-mail: no personal
                // data in the limiter's store, and none a dictionary of
                // known e-mails recovers (an unkeyed SHA-256 would be).
                let digest = self.hasher.mac(b"rate-limit-lead\0", email.as_bytes());
                charges.push(Charge {
                    kind: LimitKind::Lead,
                    limit,
                    key: format!("lead:{}:{}", account.id.0.simple(), hex16(&digest)),
                    subject: format!("the contact {email}"),
                    cost: count,
                });
            }
        }
        if let Some(limit) = limits.per_account {
            charges.push(Charge {
                kind: LimitKind::Account,
                limit,
                key: format!("account:{}", account.id.0.simple()),
                subject: format!("the account {}", account.id.0),
                cost,
            });
        }
        if let Some(limit) = limits.per_credential {
            let (key, subject) = match scope {
                IdempotencyScope::ApiKey(id) => (
                    format!("api_key:{}", id.0.simple()),
                    format!("the API key {}", id.0),
                ),
                IdempotencyScope::Client(id) => {
                    (format!("client:{id}"), format!("the application {id}"))
                }
            };
            charges.push(Charge {
                kind: LimitKind::Credential,
                limit,
                key,
                subject,
                cost,
            });
        }
        charges
    }

    /// Charges `charges`: `Ok(true)` if they were counted, `Ok(false)` if
    /// the limiter failed and fails open (the request goes on uncounted).
    async fn charge(
        &self,
        charges: &[Charge],
        now: time::OffsetDateTime,
    ) -> Result<bool, IntakeError> {
        if charges.is_empty() {
            return Ok(false);
        }
        match self.rate_limiter.charge(charges, now).await {
            Ok(Admission::Admitted) => Ok(true),
            Ok(Admission::Refused {
                index,
                used,
                retry_after,
            }) => {
                let refused = &charges[index.min(charges.len() - 1)];
                Err(IntakeError::RateLimited(RateLimited {
                    kind: refused.kind,
                    limit: refused.limit,
                    subject: refused.subject.clone(),
                    used,
                    retry_after,
                }))
            }
            Err(_) => match self.config.rate_limiter_failure {
                LimiterFailure::Open => Ok(false),
                LimiterFailure::Closed => Err(IntakeError::LimiterUnavailable),
            },
        }
    }

    fn recorded_event(
        &self,
        event: &ConversionEvent<'_>,
        account: &Account,
        channel: &IntakeChannel,
        now: time::OffsetDateTime,
    ) -> RecordedEvent {
        RecordedEvent {
            event_uuid: time_ordered_uuid(now, &*self.random),
            account_id: account.id,
            received_at: now,
            event_type: event.event_type().to_owned(),
            event_family: event.event_family().to_owned(),
            conversion_identifier: event.conversion_identifier().to_owned(),
            email: event.email().to_owned(),
            payload: event.to_payload(),
            channel: channel.clone(),
        }
    }
}

/// The answer to `submission` once the store said `outcome`.
fn receipt(
    outcome: RecordOutcome,
    submission: &EventSubmission,
    dropped_attributes: Vec<String>,
) -> Result<IntakeReceipt, IntakeError> {
    match outcome {
        RecordOutcome::Recorded => Ok(IntakeReceipt {
            event_uuids: submission.events.iter().map(|e| e.event_uuid).collect(),
            batch_uuid: submission.batch_uuid,
            replayed: false,
            dropped_attributes,
        }),
        RecordOutcome::Replayed {
            event_uuids,
            batch_uuid,
        } => Ok(IntakeReceipt {
            event_uuids,
            batch_uuid,
            replayed: true,
            dropped_attributes,
        }),
        RecordOutcome::KeyReused => Err(IntakeError::IdempotencyKeyReused),
    }
}

/// The first 16 bytes of a digest in hex: 128 bits, enough to tell leads
/// apart.
fn hex16(digest: &[u8]) -> String {
    digest
        .iter()
        .take(16)
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The paths of the attributes that were accepted and dropped. The
/// validator gives them relative to their event (`$.payload.x`); in a batch
/// they are prefixed with the event's index (`$[2].payload.x`).
fn dropped_attribute_paths(events: &[ConversionEvent<'_>], batch: bool) -> Vec<String> {
    let mut paths = Vec::new();
    for (index, event) in events.iter().enumerate() {
        for path in event.unknown_attributes() {
            let path = path.to_string();
            paths.push(match (batch, path.strip_prefix('$')) {
                (true, Some(rest)) => format!("$[{index}]{rest}"),
                _ => path,
            });
        }
    }
    paths
}

/// RFC 9110 field values allow more, but a key is an opaque token chosen by
/// the client: visible ASCII keeps it safe to store and to show.
fn is_valid_idempotency_key(key: &str) -> bool {
    (1..=MAX_IDEMPOTENCY_KEY_LEN).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic())
}

/// What makes two requests "the same" for an idempotency key: the route and
/// the exact body bytes.
fn fingerprint(route: Route, body: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(route.tag());
    hasher.update(body);
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotency_keys_are_bounded_visible_ascii() {
        assert!(is_valid_idempotency_key("retry-7f3a"));
        assert!(!is_valid_idempotency_key(""));
        assert!(!is_valid_idempotency_key("has space"));
        assert!(!is_valid_idempotency_key(&"k".repeat(256)));
        assert!(is_valid_idempotency_key(&"k".repeat(255)));
    }

    #[test]
    fn dropped_paths_in_a_batch_name_their_event() {
        let limits = crate::intake::validator::limits::ConversionLimits::default();
        let body = br#"[{"event_type":"CONVERSION","event_family":"CDP","payload":{"conversion_identifier":"a","email":"a@example.com"}},
            {"event_type":"CONVERSION","event_family":"CDP","payload":{"conversion_identifier":"b","email":"b@example.com","color":"teal"}}]"#;
        let events = validate_batch(body, &[], &limits).unwrap();
        assert_eq!(
            dropped_attribute_paths(&events, true),
            vec!["$[1].payload.color"]
        );
        assert_eq!(
            dropped_attribute_paths(&events[1..], false),
            vec!["$.payload.color"]
        );
    }

    #[test]
    fn fingerprints_separate_routes_and_bodies() {
        assert_eq!(
            fingerprint(Route::Event, b"{}"),
            fingerprint(Route::Event, b"{}")
        );
        assert_ne!(
            fingerprint(Route::Event, b"{}"),
            fingerprint(Route::Conversion, b"{}")
        );
        assert_ne!(
            fingerprint(Route::Event, b"{}"),
            fingerprint(Route::Event, b"{ }")
        );
    }
}
