//! `--limit-per-lead`, `--limit-per-account`, `--limit-per-credential`,
//! `--rate-limit-store` and `--rate-limit-failure`: the gateway's rate
//! limits and where they are counted.

use std::sync::Arc;

use conversion_gateway::{
    Limit, LimiterFailure, MemoryRateLimiter, RateLimiter, RateLimits, RedisRateLimiter,
};

/// Where the counts live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CountStore {
    /// In this process: exact for one instance.
    Memory,
    /// In a Redis shared by every instance: `redis://HOST:PORT`.
    Redis(String),
}

/// The limits and their counter, as the command line set them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitSettings {
    /// The three limits.
    pub limits: RateLimits,
    /// Where they are counted.
    pub store: CountStore,
    /// What intake does when the counter fails.
    pub failure: LimiterFailure,
}

impl Default for LimitSettings {
    /// The library's defaults (120 events per lead in 24 hours, the others
    /// off), counted in memory, failing open.
    fn default() -> Self {
        Self {
            limits: RateLimits::default(),
            store: CountStore::Memory,
            failure: LimiterFailure::Open,
        }
    }
}

impl LimitSettings {
    /// Applies one of this file's flags; `Ok(false)` if `flag` is not one.
    pub fn apply(&mut self, flag: &str, value: &str) -> Result<bool, String> {
        match flag {
            "--limit-per-lead" => self.limits.per_lead = limit(flag, value)?,
            "--limit-per-account" => self.limits.per_account = limit(flag, value)?,
            "--limit-per-credential" => self.limits.per_credential = limit(flag, value)?,
            "--rate-limit-store" => {
                self.store = if value == "memory" {
                    CountStore::Memory
                } else if value.starts_with("redis://") || value.starts_with("rediss://") {
                    CountStore::Redis(value.to_owned())
                } else {
                    return Err(format!(
                        "--rate-limit-store must be memory or redis://HOST:PORT, not {value:?}"
                    ));
                };
            }
            "--rate-limit-failure" => {
                self.failure = match value {
                    "open" => LimiterFailure::Open,
                    "closed" => LimiterFailure::Closed,
                    _ => {
                        return Err(format!(
                            "--rate-limit-failure must be open or closed, not {value:?}"
                        ));
                    }
                };
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The limiter that counts.
    pub fn limiter(&self) -> Result<Arc<dyn RateLimiter>, String> {
        Ok(match &self.store {
            CountStore::Memory => Arc::new(MemoryRateLimiter::new()),
            CountStore::Redis(url) => Arc::new(
                RedisRateLimiter::new(url)
                    .map_err(|error| format!("--rate-limit-store: {error}"))?,
            ),
        })
    }

    /// Where the counts live, for the start-up log line: the Redis host
    /// and port, never a password the URL may carry.
    pub fn describe_store(&self) -> String {
        match &self.store {
            CountStore::Memory => "memory".to_owned(),
            CountStore::Redis(url) => {
                let rest = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
                let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
                format!("redis://{}", host.split('/').next().unwrap_or_default())
            }
        }
    }
}

/// `COUNT/PERIOD` (`20/1m`, `120/24h`), or `off`.
fn limit(flag: &str, value: &str) -> Result<Option<Limit>, String> {
    if value == "off" {
        return Ok(None);
    }
    value
        .parse()
        .map(Some)
        .map_err(|error| format!("{flag}: {error}, or off"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_set_the_limits_and_their_store() {
        let mut settings = LimitSettings::default();
        assert_eq!(settings.limits, RateLimits::default());
        for (flag, value) in [
            ("--limit-per-lead", "off"),
            ("--limit-per-account", "500/1m"),
            ("--limit-per-credential", "20/1m"),
            ("--rate-limit-store", "redis://:hunter2@127.0.0.1:6379/0"),
            ("--rate-limit-failure", "closed"),
        ] {
            assert_eq!(settings.apply(flag, value), Ok(true), "{flag}");
        }
        assert_eq!(settings.limits.per_lead, None);
        assert_eq!(settings.limits.per_account, Some("500/1m".parse().unwrap()));
        assert_eq!(
            settings.limits.per_credential,
            Some("20/1m".parse().unwrap())
        );
        assert_eq!(settings.failure, LimiterFailure::Closed);
        assert_eq!(settings.describe_store(), "redis://127.0.0.1:6379");
        assert_eq!(settings.apply("--listen", "x"), Ok(false));
        for (flag, value) in [
            ("--limit-per-lead", "120"),
            ("--limit-per-lead", "120/1d"),
            ("--rate-limit-store", "postgres://x"),
            ("--rate-limit-failure", "maybe"),
        ] {
            assert!(settings.apply(flag, value).is_err(), "{flag} {value}");
        }
    }
}
