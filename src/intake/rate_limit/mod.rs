//! Fair use: how many events a lead, an account or a credential may send
//! in a period, and the limiters that count them.
//!
//! Three limits, each `max` events per `period` ([`RateLimits`](limit::RateLimits)): per lead
//! (one contact e-mail of one account; on by default at the real service's
//! 120 per 24 hours), per account and per credential (one API key, one
//! application; both off by default). A request is charged one unit per
//! event against each limit that applies, all at once or not at all: a
//! batch that does not fit is refused whole, and nothing is recorded for
//! it. An `Idempotency-Key` replay is answered from its record and its
//! charge handed back.
//!
//! Counting is a [`RateLimiter`]'s: [`MemoryRateLimiter`] for one instance,
//! [`RedisRateLimiter`] (feature `redis`) for many instances sharing one
//! count. Each limit is a fixed window per key that opens with the key's
//! first charge and lasts `period`; a refused request is told how long
//! until its window ends (`Retry-After`).

pub(crate) mod answer;
pub(crate) mod limit;
pub(crate) mod memory;
#[cfg(feature = "redis")]
pub(crate) mod redis;
pub(crate) mod url;

use std::str::FromStr;

use async_trait::async_trait;
use time::{Duration, OffsetDateTime};

use limit::Limit;

/// Which of the three limits a charge counts against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LimitKind {
    /// Events per contact e-mail of an account.
    Lead,
    /// Events per account, on the event routes.
    Account,
    /// Events per credential: one API key, or one application.
    Credential,
}

impl LimitKind {
    /// The name of the limit in answers (`RateLimit-Policy`) and keys.
    pub fn name(self) -> &'static str {
        match self {
            LimitKind::Lead => "lead",
            LimitKind::Account => "account",
            LimitKind::Credential => "credential",
        }
    }
}

/// One counter to charge: which limit, the key it counts under, and how
/// many units.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Charge {
    /// Which limit.
    pub kind: LimitKind,
    /// The limit's bound.
    pub limit: Limit,
    /// The counter's key: opaque, free of personal data and secrets (a
    /// lead's e-mail is hashed with the server key), such as
    /// `lead:<account>:<hash>`.
    pub key: String,
    /// What the counter is shown as in a refusal's `error`, such as `the
    /// contact ana@example.com` or `the API key <id>`; never a secret.
    pub subject: String,
    /// Units to add: the request's events.
    pub cost: u32,
}

/// What a limiter answered a charge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Every counter was charged.
    Admitted,
    /// The charge at `index` did not fit; nothing was charged.
    Refused {
        /// Which of the charges.
        index: usize,
        /// Its counter's units already used in the current window.
        used: u32,
        /// How long until the window ends and the counter starts over.
        retry_after: Duration,
    },
}

/// The limiter could not count (its backend is unreachable or slow).
#[derive(Debug, thiserror::Error)]
#[error("the rate limiter failed: {reason}")]
pub struct LimiterError {
    /// What failed, for the log; never a secret or a connection string.
    pub reason: String,
}

/// What to do when the limiter fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LimiterFailure {
    /// Accept the request uncounted (the default): an outage of the
    /// limiter's backend must not stop intake.
    #[default]
    Open,
    /// Refuse the request with 503 and `Retry-After`.
    Closed,
}

/// Text that names no [`LimiterFailure`]: neither `open` nor `closed`.
///
/// Its message follows the name of the setting, as in
/// `format!("--rate-limit-failure {error}")`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("must be open or closed, not {text:?}")]
pub struct LimiterFailureParseError {
    /// The text given.
    pub text: String,
}

impl FromStr for LimiterFailure {
    type Err = LimiterFailureParseError;

    /// `open` ([`LimiterFailure::Open`]) or `closed`
    /// ([`LimiterFailure::Closed`]).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "open" => Ok(LimiterFailure::Open),
            "closed" => Ok(LimiterFailure::Closed),
            _ => Err(LimiterFailureParseError {
                text: text.to_owned(),
            }),
        }
    }
}

/// Counts charges against limits. Implementations are atomic: of any
/// number of concurrent calls, the ones admitted never together exceed a
/// limit (64 concurrent requests against a limit of 20 admit exactly 20).
#[async_trait]
pub trait RateLimiter: Send + Sync {
    /// Charges every one of `charges`, or (if any of them would exceed its
    /// limit) none, at `now` (a limiter with a clock of its own, such as
    /// Redis's, may use that instead).
    ///
    /// # Errors
    /// [`LimiterError`] when the limiter cannot count.
    async fn charge(
        &self,
        charges: &[Charge],
        now: OffsetDateTime,
    ) -> Result<Admission, LimiterError>;

    /// Hands back `charges` that were admitted but not used (the request
    /// was a replay, or failed before anything was recorded). A counter
    /// whose window has ended meanwhile is left alone.
    ///
    /// # Errors
    /// [`LimiterError`] when the limiter cannot count.
    async fn refund(&self, charges: &[Charge], now: OffsetDateTime) -> Result<(), LimiterError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limiter_failure_is_open_or_closed() {
        assert_eq!("open".parse(), Ok(LimiterFailure::Open));
        assert_eq!("closed".parse(), Ok(LimiterFailure::Closed));
        let error = "maybe".parse::<LimiterFailure>().unwrap_err();
        assert_eq!(error.to_string(), r#"must be open or closed, not "maybe""#);
    }
}
