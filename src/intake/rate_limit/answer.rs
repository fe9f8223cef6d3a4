//! The answer to a request over a limit: 429 with `Retry-After`, the IETF
//! rate-limit headers, and the real service's body fields.

use serde_json::json;
use time::Duration;

use crate::answer::{AnswerContext, HttpAnswer, ToHttpAnswer};

use super::LimitKind;
use super::limit::Limit;

/// A request refused because it would exceed a limit; nothing of it was
/// recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RateLimited {
    /// Which limit.
    pub kind: LimitKind,
    /// Its bound.
    pub limit: Limit,
    /// Who it counts: `the contact ana@example.com`, `the account <id>`,
    /// `the API key <id>`, `the application <client_id>`; never a secret.
    pub subject: String,
    /// Events already counted in the current window.
    pub used: u32,
    /// How long until the window ends.
    pub retry_after: Duration,
}

impl RateLimited {
    /// Whole seconds until the window ends, rounded up, at least 1: a
    /// client that waits that long finds a new window.
    pub fn retry_after_seconds(&self) -> u64 {
        let millis = u64::try_from(self.retry_after.whole_milliseconds()).unwrap_or(0);
        millis.div_ceil(1000).max(1)
    }
}

impl std::fmt::Display for RateLimited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the {} limit of {} events per {} s is exceeded for {}",
            self.kind.name(),
            self.limit.max,
            self.limit.period_seconds(),
            self.subject
        )
    }
}

/// `429 Too Many Requests` with `Retry-After` in seconds (RFC 9110 section
/// 10.2.3), the `RateLimit-Policy` and `RateLimit` fields of
/// draft-ietf-httpapi-ratelimit-headers (the policy's quota `q` and window
/// `w`; the remaining quota `r` and seconds to reset `t`), and a JSON body:
/// the service's `error_type` and `error_message`, and the real limiter's
/// `error`, `max`, `usage` and `remaining_time` (seconds), which its
/// clients read.
impl ToHttpAnswer for RateLimited {
    fn to_http_answer(&self, _: &AnswerContext<'_>) -> HttpAnswer {
        let name = self.kind.name();
        let seconds = self.retry_after_seconds();
        let remaining = self.limit.max.saturating_sub(self.used);
        let message = self.to_string();
        HttpAnswer::json(
            429,
            json!({
                "error_type": "RATE_LIMIT_EXCEEDED",
                "error_message": format!("Too many requests: {message}. Retry in {seconds} s."),
                "error": message,
                "max": self.limit.max,
                "usage": self.used,
                "remaining_time": seconds,
            }),
        )
        .with_header("retry-after", seconds.to_string())
        .with_header(
            "ratelimit-policy",
            format!(
                "\"{name}\";q={};w={}",
                self.limit.max,
                self.limit.period_seconds()
            ),
        )
        .with_header("ratelimit", format!("\"{name}\";r={remaining};t={seconds}"))
    }
}

impl std::error::Error for RateLimited {}
