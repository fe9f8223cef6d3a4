//! How a gateway registers and delivers webhooks.

use std::sync::Arc;
use std::time::Duration;

use crate::webhooks::retry::RetrySchedule;
use crate::webhooks::transport::{ATTEMPT_TIMEOUT, NoTransport, WebhookTransport};

/// The most webhooks one account may hold (over every app): each costs a
/// delivery per conversion, so a token cannot multiply the service's
/// outgoing traffic without bound.
pub const MAX_WEBHOOKS_PER_ACCOUNT: usize = 20;

/// How a gateway registers and delivers webhooks
/// ([`crate::Gateway::with_webhooks`]).
#[derive(Clone)]
pub struct WebhookOptions {
    /// What deliveries and validation calls are sent through. By default
    /// none: registration answers 401 (the validation call cannot be
    /// made) and deliveries wait. `HttpWebhookTransport` (feature
    /// `webhooks`) is the crate's own.
    pub transport: Arc<dyn WebhookTransport>,
    /// The waits before each attempt of a delivery.
    pub retry_schedule: RetrySchedule,
    /// Whether `http` URLs and private addresses are allowed (tests and
    /// private networks). Give the transport the same setting.
    pub allow_private: bool,
    /// How long a receiver has to answer (5 s, as the real service).
    pub attempt_timeout: Duration,
    /// How long a sender holds a delivery it leased before another may
    /// take it: longer than an attempt (30 s, six times the 5 s timeout),
    /// so that only a sender that died mid-attempt loses its lease, and
    /// its deliveries go out again that long after. Keep it at least twice
    /// `attempt_timeout`: an attempt that outlasts its lease may be made
    /// again beside it.
    pub lease: Duration,
    /// The most webhooks per account.
    pub max_per_account: usize,
}

impl Default for WebhookOptions {
    fn default() -> Self {
        Self {
            transport: Arc::new(NoTransport),
            retry_schedule: RetrySchedule::default(),
            allow_private: false,
            attempt_timeout: ATTEMPT_TIMEOUT,
            lease: Duration::from_secs(30),
            max_per_account: MAX_WEBHOOKS_PER_ACCOUNT,
        }
    }
}

#[cfg(feature = "webhooks")]
impl WebhookOptions {
    /// The defaults, delivering through the crate's own
    /// [`HttpWebhookTransport`](crate::HttpWebhookTransport), with
    /// `allow_private` given to both the registration's checks and the
    /// transport's, so that they never disagree.
    ///
    /// # Errors
    /// As [`HttpWebhookTransport::new`](crate::HttpWebhookTransport::new).
    pub fn over_http(allow_private: bool) -> Result<Self, crate::HttpTransportError> {
        let transport = crate::webhooks::http::HttpWebhookTransport::new(allow_private)?;
        Ok(WebhookOptions {
            transport: Arc::new(transport),
            allow_private,
            ..WebhookOptions::default()
        })
    }
}

impl std::fmt::Debug for WebhookOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookOptions")
            .field("retry_schedule", &self.retry_schedule)
            .field("allow_private", &self.allow_private)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("lease", &self.lease)
            .field("max_per_account", &self.max_per_account)
            .finish_non_exhaustive()
    }
}
