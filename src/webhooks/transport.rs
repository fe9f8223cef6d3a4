//! How a delivery leaves the process: the [`WebhookTransport`] trait the
//! gateway sends through, so that the core never opens a socket itself and
//! tests can answer deliveries in memory.

use std::time::Duration;

use async_trait::async_trait;

/// How long a receiver has to answer, the validation call at registration
/// included: the real service's 5 seconds.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// The most bytes of a receiver's answer read (and then dropped): enough to
/// see it end, too few for a hostile receiver to fill memory.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// One POST to a receiver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutgoingRequest {
    /// The absolute URL.
    pub url: String,
    /// The headers besides `Content-Type: application/json` (the Standard
    /// Webhooks ones), lowercase names.
    pub headers: Vec<(&'static str, String)>,
    /// The exact bytes sent (and signed).
    pub body: Vec<u8>,
    /// How long the receiver has to answer.
    pub timeout: Duration,
}

/// Why a URL is not called: it is not one deliveries may go to.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DestinationRefused {
    /// Not an absolute `https` URL (or `http`, where private destinations
    /// are allowed).
    #[error("the URL must be an absolute https URL")]
    Scheme,
    /// Not a URL at all, or one with credentials in it.
    #[error("the URL is not valid")]
    Malformed,
    /// It names or resolves to a loopback, private, link-local, metadata or
    /// otherwise non-public address.
    #[error("the URL must resolve only to public addresses")]
    PrivateAddress,
    /// Its host name does not resolve.
    #[error("the URL's host does not resolve")]
    Unresolvable,
}

/// What one attempt came to.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendOutcome {
    /// The receiver answered with this status (redirects included: they
    /// are never followed, and count as failures).
    Answered {
        /// The status code.
        status: u16,
        /// Its `Retry-After` header, as sent.
        retry_after: Option<String>,
    },
    /// No answer within the timeout.
    TimedOut,
    /// The destination was refused before anything was sent.
    Refused(DestinationRefused),
    /// The connection failed (refused, reset, TLS), with a short reason
    /// for the operator (never a secret: no header or body is in it).
    Failed(String),
}

impl SendOutcome {
    /// Whether the receiver took the delivery (a 2xx answer).
    pub fn succeeded(&self) -> bool {
        matches!(self, SendOutcome::Answered { status, .. } if (200..300).contains(status))
    }

    /// The status code, if the receiver answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            SendOutcome::Answered { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Why the attempt failed, as kept with it (`None` when it succeeded).
    pub fn error(&self) -> Option<String> {
        match self {
            SendOutcome::Answered { status, .. } if (200..300).contains(status) => None,
            SendOutcome::Answered { status, .. } if (300..400).contains(status) => {
                Some(format!("redirect ({status}), not followed"))
            }
            SendOutcome::Answered { status, .. } => Some(format!("status {status}")),
            SendOutcome::TimedOut => Some("timeout".to_owned()),
            SendOutcome::Refused(refused) => Some(refused.to_string()),
            SendOutcome::Failed(reason) => Some(reason.clone()),
        }
    }
}

/// Sends webhook requests. The crate's own, on reqwest, is
/// `HttpWebhookTransport` (feature `webhooks`); tests answer in
/// memory.
///
/// An implementation must not follow redirects, must give up after the
/// request's timeout, must read at most [`MAX_ANSWER_BYTES`] of an answer,
/// and, unless private destinations are allowed, must refuse
/// ([`SendOutcome::Refused`]) a URL that is not `https` or whose host
/// is or resolves to any non-public address, checked on the addresses it
/// connects to (so a name that resolves differently later is caught).
#[async_trait]
pub trait WebhookTransport: Send + Sync {
    /// POSTs `request` and says what came of it. Never fails otherwise.
    async fn post(&self, request: &OutgoingRequest) -> SendOutcome;
}

/// The transport of a gateway that has none: every attempt fails, so
/// webhooks cannot be registered and deliveries wait for a gateway that
/// can send them.
pub(crate) struct NoTransport;

#[async_trait]
impl WebhookTransport for NoTransport {
    async fn post(&self, _: &OutgoingRequest) -> SendOutcome {
        SendOutcome::Failed("this gateway has no webhook transport".to_owned())
    }
}
