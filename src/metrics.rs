//! The service's figures, through the [`metrics`] facade: the host picks
//! the exporter (the service serves them in the Prometheus text
//! format). Without a recorder installed, every call here is a no-op.
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `cg_requests_total` | counter | `endpoint`, `outcome` | requests answered, by endpoint (`token`, `revoke`, `introspect`, `conversion`, `event`, `batch`) and outcome (`accepted`, `refused_validation`, `refused_authentication`, `refused_limit`, `unavailable`) |
//! | `cg_events_recorded_total` | counter | `endpoint` | events recorded (replays not counted) |
//! | `cg_event_batch_size` | histogram | | events per recorded batch |
//! | `cg_store_operation_seconds` | histogram | `store`, `operation` | time the gateway waited for a store operation on its hot paths: `events`/`record`, `api_keys`/`find_api_key`, `clients`/`find_client`, `tokens`/`find_access_token`, `find_refresh_token`, `redeem_code`, `rotate_refresh_token` |
//! | `cg_group_commit_size` | histogram | `store` | submissions per group-commit transaction |
//! | `cg_group_commit_queue_depth` | gauge | `store` | submissions waiting for the group-commit writer |
//! | `cg_tokens_issued_total` | counter | `grant_type` | token responses, by `authorization_code` or `refresh_token` |
//! | `cg_token_refreshes_total` | counter | `outcome` | refreshes, by `rotated`, `kept` (the reuse policy), `grace_replay` (the successor handed out again) or `reuse_detected` (the grant revoked) |
//! | `cg_revocations_total` | counter | | grants revoked through the revocation endpoint |
//! | `cg_webhook_attempts_total` | counter | `outcome` | webhook delivery attempts, by `delivered`, `retrying` (failed, attempted again later) or `failed` (given up) |
//! | `cg_webhook_attempt_seconds` | histogram | | how long a webhook attempt took, to the receiver's answer or the timeout |
//! | `cg_webhook_backlog` | gauge | | webhook deliveries pending (set by the delivery loop) |
//! | `cg_webhooks_switched_off_total` | counter | | webhooks switched off by a `410 Gone` or five days of failures |
//!
//! Every label value is one of a fixed few: no label ever carries a
//! secret, an e-mail, an account or a key.
//!
//! Every series is registered at zero when a [`crate::Gateway`] is built
//! (the group-commit ones when their store opens), so `/metrics` lists them
//! before the first request and an alert on a missing series does not fire
//! at every start (Prometheus' instrumentation guidance: initialise the
//! series you know of). Install the recorder before building the gateway:
//! the gateway keeps handles of its per-request series on the recorder
//! installed then.

use std::fmt;
use std::time::Instant;

use metrics::{Counter, Histogram};

/// The endpoints of `cg_requests_total`.
const ENDPOINTS: [&str; 6] = [
    "token",
    "revoke",
    "introspect",
    "conversion",
    "event",
    "batch",
];

/// The endpoints of `cg_events_recorded_total`.
const EVENT_ENDPOINTS: [&str; 3] = ["conversion", "event", "batch"];

/// Every outcome of `cg_requests_total`.
const OUTCOMES: [Outcome; 5] = [
    Outcome::Accepted,
    Outcome::RefusedValidation,
    Outcome::RefusedAuthentication,
    Outcome::RefusedLimit,
    Outcome::Unavailable,
];

/// The grant types of `cg_tokens_issued_total`.
const GRANT_TYPES: [&str; 2] = ["authorization_code", "refresh_token"];

/// The outcomes of `cg_token_refreshes_total`.
const REFRESH_OUTCOMES: [&str; 4] = ["rotated", "kept", "grace_replay", "reuse_detected"];

/// The outcomes of `cg_webhook_attempts_total`.
const WEBHOOK_OUTCOMES: [&str; 3] = ["delivered", "retrying", "failed"];

/// The `(store, operation)` pairs of `cg_store_operation_seconds`.
const STORE_OPERATIONS: [(&str, &str); 7] = [
    ("events", "record"),
    ("api_keys", "find_api_key"),
    ("clients", "find_client"),
    ("tokens", "find_access_token"),
    ("tokens", "find_refresh_token"),
    ("tokens", "redeem_code"),
    ("tokens", "rotate_refresh_token"),
];

/// Registers every series of the table above but the group-commit ones at
/// zero, with each of its label values. Registering an existing series
/// leaves its value alone.
fn register() {
    for endpoint in ENDPOINTS {
        for outcome in OUTCOMES {
            metrics::counter!("cg_requests_total", "endpoint" => endpoint, "outcome" => outcome.label())
                .increment(0);
        }
    }
    for endpoint in EVENT_ENDPOINTS {
        metrics::counter!("cg_events_recorded_total", "endpoint" => endpoint).increment(0);
    }
    let _ = metrics::histogram!("cg_event_batch_size");
    for (store, operation) in STORE_OPERATIONS {
        let _ = metrics::histogram!(
            "cg_store_operation_seconds",
            "store" => store,
            "operation" => operation
        );
    }
    for grant_type in GRANT_TYPES {
        metrics::counter!("cg_tokens_issued_total", "grant_type" => grant_type).increment(0);
    }
    for outcome in REFRESH_OUTCOMES {
        metrics::counter!("cg_token_refreshes_total", "outcome" => outcome).increment(0);
    }
    metrics::counter!("cg_revocations_total").increment(0);
    for outcome in WEBHOOK_OUTCOMES {
        metrics::counter!("cg_webhook_attempts_total", "outcome" => outcome).increment(0);
    }
    let _ = metrics::histogram!("cg_webhook_attempt_seconds");
    metrics::gauge!("cg_webhook_backlog").set(0.0);
    metrics::counter!("cg_webhooks_switched_off_total").increment(0);
}

/// Registers the group-commit series of `store` at zero, when it opens.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn register_group_commit(store: &'static str) {
    let _ = metrics::histogram!("cg_group_commit_size", "store" => store);
    metrics::gauge!("cg_group_commit_queue_depth", "store" => store).set(0.0);
}

/// How a request ended, for `cg_requests_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Answered 2xx.
    Accepted,
    /// Refused for its form or content (400, 413, 415, 422).
    RefusedValidation,
    /// Refused for its credentials (401).
    RefusedAuthentication,
    /// Refused by a rate limit (429).
    RefusedLimit,
    /// A store or the rate limiter failed (503).
    Unavailable,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Accepted => "accepted",
            Outcome::RefusedValidation => "refused_validation",
            Outcome::RefusedAuthentication => "refused_authentication",
            Outcome::RefusedLimit => "refused_limit",
            Outcome::Unavailable => "unavailable",
        }
    }
}

/// The gateway's handles of its per-request series, resolved once on the
/// recorder installed when the gateway was built, so that a figure on a
/// hot path is an atomic add, not a lookup of its name and labels in the
/// recorder's registry (about 2,900 of the 78,000 instructions of a
/// conversion on the memory store, `valgrind --tool=callgrind`).
pub(crate) struct GatewayMetrics {
    requests: [[Counter; OUTCOMES.len()]; ENDPOINTS.len()],
    events_recorded: [Counter; EVENT_ENDPOINTS.len()],
    batch_size: Histogram,
    store_operations: [Histogram; STORE_OPERATIONS.len()],
    tokens_issued: [Counter; GRANT_TYPES.len()],
    refreshes: [Counter; REFRESH_OUTCOMES.len()],
    revocations: Counter,
}

impl GatewayMetrics {
    /// The handles, after [`register`]ing every series at zero.
    pub(crate) fn register() -> Self {
        register();
        Self {
            requests: std::array::from_fn(|endpoint| {
                std::array::from_fn(|outcome| {
                    metrics::counter!(
                        "cg_requests_total",
                        "endpoint" => ENDPOINTS[endpoint],
                        "outcome" => OUTCOMES[outcome].label()
                    )
                })
            }),
            events_recorded: std::array::from_fn(
                |endpoint| metrics::counter!("cg_events_recorded_total", "endpoint" => EVENT_ENDPOINTS[endpoint]),
            ),
            batch_size: metrics::histogram!("cg_event_batch_size"),
            store_operations: std::array::from_fn(|index| {
                let (store, operation) = STORE_OPERATIONS[index];
                metrics::histogram!(
                    "cg_store_operation_seconds",
                    "store" => store,
                    "operation" => operation
                )
            }),
            tokens_issued: std::array::from_fn(
                |index| metrics::counter!("cg_tokens_issued_total", "grant_type" => GRANT_TYPES[index]),
            ),
            refreshes: std::array::from_fn(
                |index| metrics::counter!("cg_token_refreshes_total", "outcome" => REFRESH_OUTCOMES[index]),
            ),
            revocations: metrics::counter!("cg_revocations_total"),
        }
    }

    /// Counts a request of `endpoint` that ended as `outcome`.
    pub(crate) fn request(&self, endpoint: &'static str, outcome: Outcome) {
        let counter = labelled(&self.requests, &ENDPOINTS, endpoint)
            .and_then(|by_outcome| by_outcome.get(outcome as usize));
        if let Some(counter) = counter {
            counter.increment(1);
        }
    }

    /// Counts `count` events recorded through `endpoint`.
    pub(crate) fn events_recorded(&self, endpoint: &'static str, count: usize, batch: bool) {
        if let Some(counter) = labelled(&self.events_recorded, &EVENT_ENDPOINTS, endpoint) {
            counter.increment(u64::try_from(count).unwrap_or(u64::MAX));
        }
        if batch {
            #[allow(clippy::cast_precision_loss)] // batches hold at most thousands
            self.batch_size.record(count as f64);
        }
    }

    /// Starts timing `operation` of `store` (`events`, `tokens`, ...).
    pub(crate) fn store_operation(
        &self,
        store: &'static str,
        operation: &'static str,
    ) -> StoreTimer<'_> {
        let index = STORE_OPERATIONS
            .iter()
            .position(|pair| *pair == (store, operation));
        debug_assert!(index.is_some(), "unregistered {store}/{operation}");
        StoreTimer {
            histogram: index.and_then(|index| self.store_operations.get(index)),
            started: Instant::now(),
        }
    }

    /// Counts a token response of `grant_type`.
    pub(crate) fn token_issued(&self, grant_type: &'static str) {
        if let Some(counter) = labelled(&self.tokens_issued, &GRANT_TYPES, grant_type) {
            counter.increment(1);
        }
    }

    /// Counts a refresh that ended as `outcome`.
    pub(crate) fn refresh(&self, outcome: &'static str) {
        if let Some(counter) = labelled(&self.refreshes, &REFRESH_OUTCOMES, outcome) {
            counter.increment(1);
        }
    }

    /// Counts a grant revoked through the revocation endpoint.
    pub(crate) fn revocation(&self) {
        self.revocations.increment(1);
    }
}

impl fmt::Debug for GatewayMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GatewayMetrics")
    }
}

/// The handle of `label` among `handles`, kept in the order of `labels`;
/// every label a caller passes is one of them (checked in debug builds).
fn labelled<'m, T>(
    handles: &'m [T],
    labels: &[&'static str],
    label: &'static str,
) -> Option<&'m T> {
    let index = labels.iter().position(|known| *known == label);
    debug_assert!(index.is_some(), "unregistered {label}");
    handles.get(index?)
}

/// Times a store operation: call [`StoreTimer::done`] when it returns.
pub(crate) struct StoreTimer<'m> {
    histogram: Option<&'m Histogram>,
    started: Instant,
}

impl StoreTimer<'_> {
    /// Records the time since the timer started.
    pub(crate) fn done(self) {
        if let Some(histogram) = self.histogram {
            histogram.record(self.started.elapsed().as_secs_f64());
        }
    }
}

/// Records a group-commit transaction of `size` submissions on `store`,
/// with `queued` submissions waiting behind it.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn group_commit(store: &'static str, size: usize, queued: usize) {
    #[allow(clippy::cast_precision_loss)] // groups hold at most hundreds
    {
        metrics::histogram!("cg_group_commit_size", "store" => store).record(size as f64);
        metrics::gauge!("cg_group_commit_queue_depth", "store" => store).set(queued as f64);
    }
}

/// Counts a webhook attempt that ended as `outcome` after `seconds`.
pub(crate) fn webhook_attempt(outcome: &'static str, seconds: f64) {
    debug_assert!(
        WEBHOOK_OUTCOMES.contains(&outcome),
        "unregistered {outcome}"
    );
    metrics::counter!("cg_webhook_attempts_total", "outcome" => outcome).increment(1);
    metrics::histogram!("cg_webhook_attempt_seconds").record(seconds);
}

/// Counts a webhook switched off by its receiver's answers.
pub(crate) fn webhook_switched_off() {
    metrics::counter!("cg_webhooks_switched_off_total").increment(1);
}

/// Sets the number of webhook deliveries pending.
#[cfg(feature = "tasks")]
pub(crate) fn webhook_backlog(pending: u64) {
    #[allow(clippy::cast_precision_loss)] // a backlog of 2^53 is not a concern
    metrics::gauge!("cg_webhook_backlog").set(pending as f64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_listed_in_the_order_of_their_discriminants() {
        for (index, outcome) in OUTCOMES.into_iter().enumerate() {
            assert_eq!(outcome as usize, index, "{outcome:?}");
        }
    }
}
