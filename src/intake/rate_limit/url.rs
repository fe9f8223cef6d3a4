//! A [`RateLimiter`] opened from a URL, as an operator names it in a flag
//! or a configuration file: `memory` or `redis://...`.
//!
//! Like `StoreUrl` for the stores (the gateway's, a layer above):
//! parsing is pure and knows Redis whatever the crate's features; opening
//! it without feature `redis` fails with
//! [`OpenRateLimiterError::NotBuiltIn`].

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

#[cfg(feature = "redis")]
use super::LimiterError;
use super::RateLimiter;
use super::memory::MemoryRateLimiter;
#[cfg(feature = "redis")]
use super::redis::RedisRateLimiter;

/// Where the rate limits are counted: `memory` (in this process: exact for
/// one instance) or `redis://HOST:PORT` (also `rediss://` and
/// `redis://:PASSWORD@HOST:PORT/DB`: in a Redis shared by every instance).
///
/// `Display` and `Debug` never show a password: a Redis URL prints as its
/// scheme, host and port.
///
/// ```
/// use conversion_gateway::RateLimiterUrl;
///
/// let url: RateLimiterUrl = "redis://:hunter2@cache.internal:6379/0".parse()?;
/// assert_eq!(url.to_string(), "redis://cache.internal:6379");
/// let limiter = "memory".parse::<RateLimiterUrl>()?.open()?;
/// # drop(limiter);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub enum RateLimiterUrl {
    /// A [`MemoryRateLimiter`] (the default).
    #[default]
    Memory,
    /// A `RedisRateLimiter` (feature `redis`) on this URL, as given,
    /// password included.
    Redis(String),
}

/// A rate-limiter URL that is neither `memory` nor `redis://...`.
///
/// Its message follows the name of the setting that held the URL, as in
/// `format!("--rate-limit-store {error}")`: "--rate-limit-store must be
/// memory or redis://HOST:PORT, not \"mysql://db\"".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RateLimiterUrlError {
    /// Some other text; shown only when it cannot hold a password (no `@`).
    #[error("must be memory or redis://HOST:PORT, not {shown}")]
    Unrecognised {
        /// The text quoted, or a note that it is not shown.
        shown: String,
    },
}

/// A rate limiter that could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenRateLimiterError {
    /// The URL names Redis, and this build of the crate does not hold it.
    #[error(
        "the Redis rate limiter is not built in: turn on the `redis` feature of conversion-gateway"
    )]
    NotBuiltIn,
    /// The Redis URL cannot be read (its text is not repeated: it may hold
    /// a password).
    #[cfg(feature = "redis")]
    #[error(transparent)]
    Redis(LimiterError),
}

impl FromStr for RateLimiterUrl {
    type Err = RateLimiterUrlError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text == "memory" {
            Ok(RateLimiterUrl::Memory)
        } else if text.starts_with("redis://") || text.starts_with("rediss://") {
            Ok(RateLimiterUrl::Redis(text.to_owned()))
        } else {
            // A mistyped Redis URL ("redis:/:secret@...") may still hold a
            // password.
            let shown = if text.contains('@') {
                "a URL with credentials (not shown)".to_owned()
            } else {
                format!("{text:?}")
            };
            Err(RateLimiterUrlError::Unrecognised { shown })
        }
    }
}

impl fmt::Display for RateLimiterUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RateLimiterUrl::Memory => f.write_str("memory"),
            RateLimiterUrl::Redis(url) => {
                let (scheme, rest) = url.split_once("://").unwrap_or(("redis", url));
                // The user and password end at the last `@`; the database
                // number after the `/` is of no interest to a reader.
                let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
                let host = host.split('/').next().unwrap_or_default();
                write!(f, "{scheme}://{host}")
            }
        }
    }
}

impl fmt::Debug for RateLimiterUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RateLimiterUrl({self})")
    }
}

impl RateLimiterUrl {
    /// The limiter this URL names: a fresh [`MemoryRateLimiter`], or a
    /// `RedisRateLimiter` that connects at its first charge (an unreachable
    /// Redis is not an error here, only when counting). Redis's must be
    /// opened within a tokio runtime.
    ///
    /// # Errors
    /// [`OpenRateLimiterError::NotBuiltIn`] for Redis without feature
    /// `redis`; [`OpenRateLimiterError::Redis`] for a Redis URL the client
    /// cannot read.
    pub fn open(&self) -> Result<Arc<dyn RateLimiter>, OpenRateLimiterError> {
        match self {
            RateLimiterUrl::Memory => Ok(Arc::new(MemoryRateLimiter::new())),
            #[cfg(feature = "redis")]
            RateLimiterUrl::Redis(url) => RedisRateLimiter::new(url)
                .map(|limiter| Arc::new(limiter) as Arc<dyn RateLimiter>)
                .map_err(OpenRateLimiterError::Redis),
            #[cfg(not(feature = "redis"))]
            RateLimiterUrl::Redis(_) => Err(OpenRateLimiterError::NotBuiltIn),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<RateLimiterUrl, RateLimiterUrlError> {
        text.parse()
    }

    #[test]
    fn memory_and_redis_urls_parse() {
        assert_eq!(parsed("memory"), Ok(RateLimiterUrl::Memory));
        assert_eq!(RateLimiterUrl::default(), RateLimiterUrl::Memory);
        for url in ["redis://127.0.0.1:6379", "rediss://:pw@cache:6380/1"] {
            assert_eq!(parsed(url), Ok(RateLimiterUrl::Redis(url.to_owned())));
        }
    }

    #[test]
    fn anything_else_is_refused_with_the_text_quoted_unless_it_may_hold_a_password() {
        for text in ["", "Memory", "postgres://x", "redis"] {
            let error = parsed(text).unwrap_err();
            assert_eq!(
                error.to_string(),
                format!("must be memory or redis://HOST:PORT, not {text:?}")
            );
        }
        let error = parsed("redis:/:hunter2@cache:6379").unwrap_err();
        assert!(!error.to_string().contains("hunter2"), "{error}");
    }

    #[test]
    fn a_redis_url_prints_its_host_and_port_never_its_password() {
        for (url, shown) in [
            (
                "redis://:hunter2@127.0.0.1:6379/0",
                "redis://127.0.0.1:6379",
            ),
            ("redis://user:hunter2@cache:6379", "redis://cache:6379"),
            (
                "rediss://cache.internal:6380",
                "rediss://cache.internal:6380",
            ),
        ] {
            let url = parsed(url).unwrap();
            assert_eq!(url.to_string(), shown);
            assert_eq!(format!("{url:?}"), format!("RateLimiterUrl({shown})"));
        }
        assert_eq!(RateLimiterUrl::Memory.to_string(), "memory");
    }

    #[test]
    fn memory_opens_a_memory_limiter() {
        assert!(RateLimiterUrl::Memory.open().is_ok());
    }

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn redis_opens_lazily_and_an_unreadable_url_names_no_password() {
        // Nothing listens there: opening does not connect.
        assert!(parsed("redis://127.0.0.1:1").unwrap().open().is_ok());
        let error = RateLimiterUrl::Redis("redis://:hunter2@[bad".to_owned())
            .open()
            .err()
            .expect("an unreadable URL");
        assert!(matches!(error, OpenRateLimiterError::Redis(_)), "{error:?}");
        assert!(!error.to_string().contains("hunter2"), "{error}");
    }

    #[cfg(not(feature = "redis"))]
    #[test]
    fn redis_without_its_feature_says_which_feature() {
        let error = parsed("redis://127.0.0.1:6379").unwrap().open().err();
        assert!(
            matches!(error, Some(OpenRateLimiterError::NotBuiltIn)),
            "{error:?}"
        );
    }
}
