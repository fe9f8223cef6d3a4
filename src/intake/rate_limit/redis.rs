//! The shared limiter: counters in Redis, checked and charged by one Lua
//! script, so that many instances behind a load balancer enforce one
//! limit exactly (feature `redis`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration as StdDuration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Script};
use time::{Duration, OffsetDateTime};

use super::{Admission, Charge, LimiterError, RateLimiter};

/// Checks every counter, then charges every one, in one atomic step:
/// Redis runs a script alone, so no other charge comes between the check
/// and the charge, on any instance. A counter's window opens with its
/// first charge (`PEXPIRE` to the period) and ends with its key.
///
/// `KEYS[i]`: the counters. `ARGV[3i-2..3i]`: each one's cost, maximum and
/// period in milliseconds. Returns `{1}` when admitted, or `{0, i, used,
/// pttl}` for the first counter that would exceed its maximum.
const CHARGE: &str = r"
for i = 1, #KEYS do
    local used = tonumber(redis.call('GET', KEYS[i]) or '0')
    if used + tonumber(ARGV[3 * i - 2]) > tonumber(ARGV[3 * i - 1]) then
        return {0, i, used, redis.call('PTTL', KEYS[i])}
    end
end
for i = 1, #KEYS do
    redis.call('INCRBY', KEYS[i], ARGV[3 * i - 2])
    if redis.call('PTTL', KEYS[i]) < 0 then
        redis.call('PEXPIRE', KEYS[i], ARGV[3 * i])
    end
end
return {1}
";

/// Hands back units of counters whose window is still open, never below
/// zero. `KEYS[i]`: the counters; `ARGV[i]`: each one's units.
const REFUND: &str = r"
for i = 1, #KEYS do
    local used = tonumber(redis.call('GET', KEYS[i]) or '0')
    if used > 0 then
        redis.call('DECRBY', KEYS[i], math.min(used, tonumber(ARGV[i])))
    end
end
return 1
";

/// How long one call to Redis may take before the limiter counts it as
/// failed: a slow Redis must not slow intake down (the gateway then fails
/// open or closed, as configured).
const CALL_TIMEOUT: StdDuration = StdDuration::from_millis(250);

/// Counts in Redis: one limit shared by every instance that uses the same
/// Redis and key prefix.
///
/// Failures (Redis unreachable, slow, or answering errors) are
/// [`LimiterError`]s, which the gateway turns into its configured
/// [`super::LimiterFailure`]; an outage is logged once when it starts and
/// once when it ends (`tracing`, at error and info level), not once per
/// request. The connection is made on first use and remade after an
/// outage, so the service starts and serves while Redis is down.
///
/// Keys are the charges' keys under a prefix (default `cg:rl:`); they hold
/// no personal data or secret: a lead's key holds the server key's HMAC of
/// its e-mail, so the instances sharing a Redis must share the server key
/// (as they must to share a store). Each key expires with its window
/// (`PEXPIRE` to the period at its first charge), so Redis holds live
/// windows only: about 140 bytes each (measured on Redis 7 with expiring
/// lead keys), 140 MB for a million leads within a window. In a Redis Cluster, the counters of one request may live on
/// different nodes, which a script cannot span: use a single Redis (or a
/// primary with replicas).
pub struct RedisRateLimiter {
    connection: ConnectionManager,
    prefix: String,
    charge: Script,
    refund: Script,
    /// Whether the last call failed: the outage is logged once.
    in_outage: AtomicBool,
}

impl std::fmt::Debug for RedisRateLimiter {
    /// The prefix only: the URL may carry a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisRateLimiter")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisRateLimiter {
    /// A limiter on the Redis at `url` (`redis://HOST:PORT`, or
    /// `redis://:PASSWORD@HOST:PORT/DB`). Connects lazily: an unreachable
    /// Redis is not an error here, only when counting.
    ///
    /// # Errors
    /// [`LimiterError`] if the URL cannot be read.
    pub fn new(url: &str) -> Result<Self, LimiterError> {
        let client = Client::open(url).map_err(|error| LimiterError {
            // The error names the scheme or the part it could not read,
            // not the URL, which may hold a password.
            reason: format!("the Redis URL is not valid: {}", error.category()),
        })?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CALL_TIMEOUT))
            .set_response_timeout(Some(CALL_TIMEOUT))
            .set_number_of_retries(1);
        let connection =
            ConnectionManager::new_lazy_with_config(client, config).map_err(|error| {
                LimiterError {
                    reason: format!("cannot set up the Redis connection: {}", error.category()),
                }
            })?;
        Ok(Self {
            connection,
            prefix: "cg:rl:".to_owned(),
            charge: Script::new(CHARGE),
            refund: Script::new(REFUND),
            in_outage: AtomicBool::new(false),
        })
    }

    /// Puts every key under `prefix` instead of `cg:rl:` (to share one
    /// Redis between deployments, or to isolate tests).
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Notes the outcome of a call: logs an outage when it starts and ends.
    fn observe<T>(&self, outcome: Result<T, String>) -> Result<T, LimiterError> {
        match outcome {
            Ok(value) => {
                if self.in_outage.swap(false, Ordering::Relaxed) {
                    tracing::info!("the Redis rate limiter answers again");
                }
                Ok(value)
            }
            Err(reason) => {
                if !self.in_outage.swap(true, Ordering::Relaxed) {
                    tracing::error!(reason = %reason, "the Redis rate limiter failed; until it answers again, requests are not counted (or refused, if it fails closed)");
                }
                Err(LimiterError { reason })
            }
        }
    }

    /// Runs `invocation` with the call timeout.
    async fn run<T: redis::FromRedisValue>(
        &self,
        invocation: redis::ScriptInvocation<'_>,
    ) -> Result<T, String> {
        let mut connection = self.connection.clone();
        match tokio::time::timeout(CALL_TIMEOUT, invocation.invoke_async(&mut connection)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(format!("Redis answered an error: {}", error.category())),
            Err(_) => Err(format!(
                "Redis did not answer within {} ms",
                CALL_TIMEOUT.as_millis()
            )),
        }
    }
}

#[async_trait]
impl RateLimiter for RedisRateLimiter {
    async fn charge(
        &self,
        charges: &[Charge],
        _now: OffsetDateTime,
    ) -> Result<Admission, LimiterError> {
        if charges.is_empty() {
            return Ok(Admission::Admitted);
        }
        let mut invocation = self.charge.prepare_invoke();
        for charge in charges {
            let period_ms = u64::try_from(charge.limit.period.whole_milliseconds())
                .unwrap_or(u64::MAX)
                .max(1);
            invocation
                .key(format!("{}{}", self.prefix, charge.key))
                .arg(charge.cost)
                .arg(charge.limit.max)
                .arg(period_ms);
        }
        let reply: Vec<i64> = self.observe(self.run(invocation).await)?;
        match reply.as_slice() {
            [1] => Ok(Admission::Admitted),
            [0, index, used, pttl] => {
                let index = usize::try_from(*index - 1).unwrap_or(0);
                let period = charges
                    .get(index)
                    .map_or(Duration::ZERO, |c| c.limit.period);
                Ok(Admission::Refused {
                    index,
                    used: u32::try_from(*used).unwrap_or(u32::MAX),
                    // No key (-2) or no expiry (-1): the window is a whole
                    // period away at most.
                    retry_after: if *pttl > 0 {
                        Duration::milliseconds(*pttl)
                    } else {
                        period
                    },
                })
            }
            _ => Err(LimiterError {
                reason: "the charge script answered an unexpected reply".to_owned(),
            }),
        }
    }

    async fn refund(&self, charges: &[Charge], _now: OffsetDateTime) -> Result<(), LimiterError> {
        if charges.is_empty() {
            return Ok(());
        }
        let mut invocation = self.refund.prepare_invoke();
        for charge in charges {
            invocation
                .key(format!("{}{}", self.prefix, charge.key))
                .arg(charge.cost);
        }
        let _: i64 = self.observe(self.run(invocation).await)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::captured_logs::CapturedLogs;
    use crate::intake::rate_limit::LimitKind;

    #[tokio::test]
    async fn an_outage_is_logged_once_without_the_address() {
        let logs = CapturedLogs::default();
        let _guard = tracing::subscriber::set_default(logs.subscriber());
        // Nothing listens on port 1.
        let limiter = RedisRateLimiter::new("redis://:secret@127.0.0.1:1").expect("a URL");
        let charge = Charge {
            kind: LimitKind::Lead,
            limit: crate::intake::rate_limit::limit::Limit::new(1, Duration::minutes(1)),
            key: "k".to_owned(),
            subject: "k".to_owned(),
            cost: 1,
        };
        for _ in 0..3 {
            let failed = limiter
                .charge(std::slice::from_ref(&charge), OffsetDateTime::UNIX_EPOCH)
                .await;
            assert!(failed.is_err(), "{failed:?}");
        }
        assert!(
            limiter
                .refund(&[charge], OffsetDateTime::UNIX_EPOCH)
                .await
                .is_err()
        );
        let text = logs.text();
        assert_eq!(
            text.matches("the Redis rate limiter failed").count(),
            1,
            "one line per outage, not per request:\n{text}"
        );
        assert!(
            !text.contains("secret") && !text.contains("127.0.0.1"),
            "{text}"
        );
        assert!(!format!("{limiter:?}").contains("secret"));
    }

    #[test]
    fn a_malformed_url_is_refused_without_echoing_it() {
        let error = RedisRateLimiter::new("http://:secret@host").expect_err("not redis://");
        assert!(!error.reason.contains("secret"), "{}", error.reason);
    }
}
