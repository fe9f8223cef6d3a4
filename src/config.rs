//! Lifetimes and policies, chosen by the host.

use time::Duration;

use crate::intake::rate_limit::LimiterFailure;
use crate::intake::rate_limit::limit::RateLimits;
use crate::intake::validator::limits::ConversionLimits;
use crate::records::refresh_policy::RefreshPolicy;

/// The service's configuration.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GatewayConfig {
    /// The service's base address, e.g. `https://api.example.com`. Used as the
    /// `realm` of `WWW-Authenticate` challenges (`realm="{base_url}/"`).
    pub base_url: String,
    /// Lifetime of access tokens. The spec: 86400 seconds.
    pub access_token_lifetime: Duration,
    /// Lifetime of authorization codes. Default 10 minutes (RFC 6749 section
    /// 4.1.2 recommends at most 10).
    pub code_lifetime: Duration,
    /// Lifetime of refresh tokens; `None` (the default) for no expiry.
    pub refresh_token_lifetime: Option<Duration>,
    /// Rotation or reuse of refresh tokens, for clients whose registration
    /// names no policy of their own ([`crate::Client::refresh_policy`]).
    /// Default: [`RefreshPolicy::Adaptive`] with a 30 s grace window.
    pub refresh_policy: RefreshPolicy,
    /// How long an `Idempotency-Key` is remembered. Default 24 hours, longer
    /// than any client's retry schedule.
    pub idempotency_retention: Duration,
    /// The most API keys one account may hold (the real service: 5).
    pub max_api_keys_per_account: usize,
    /// The bounds of conversion-event validation (body size, string
    /// lengths, tags...) and the policy for unknown attributes.
    pub conversion_limits: ConversionLimits,
    /// How long [`crate::Gateway::purge_expired`] keeps a record after it
    /// stopped being usable. Default 7 days. It is also how long replays are
    /// recognised: a code used again, or a rotated refresh token presented
    /// again, within this time revokes its grant; after it, either is only
    /// unknown.
    pub purge_retention: Duration,
    /// The most records one purge statement deletes. Default 1000: each
    /// statement then holds its locks for milliseconds.
    pub purge_batch: usize,
    /// How long an API key that authenticated is trusted without asking the
    /// store again. Default 10 seconds; zero asks the store on every
    /// request.
    ///
    /// This bounds how long a key switched off elsewhere (by another server
    /// instance, or in the store directly) is still accepted here: an
    /// entry lives from the moment the store was asked, so at most this
    /// long after the switch. A key switched off through this gateway's
    /// [`crate::Gateway::set_api_key_active`] is refused at once (requests
    /// in flight then do not cache it again), and an unknown or
    /// switched-off key is never remembered, so switching a key on takes
    /// effect at once.
    pub api_key_cache_ttl: Duration,
    /// How long a client secret replaced by
    /// [`crate::Gateway::rotate_client_secret`] keeps working, so that the
    /// application can deploy the new one. Default 24 hours.
    pub client_secret_overlap: Duration,
    /// Events per lead, account and credential (see
    /// [`crate::RateLimits`]): by default 120 per contact e-mail in 24
    /// hours, the others off.
    pub rate_limits: RateLimits,
    /// What intake does when the rate limiter cannot count (its Redis is
    /// down): accept uncounted (the default) or refuse with 503.
    pub rate_limiter_failure: LimiterFailure,
}

impl GatewayConfig {
    /// The defaults, for a service at `base_url`.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            access_token_lifetime: Duration::seconds(86_400),
            code_lifetime: Duration::minutes(10),
            refresh_token_lifetime: None,
            refresh_policy: RefreshPolicy::default(),
            idempotency_retention: Duration::hours(24),
            max_api_keys_per_account: 5,
            conversion_limits: ConversionLimits::default(),
            purge_retention: Duration::days(7),
            purge_batch: 1000,
            api_key_cache_ttl: Duration::seconds(10),
            client_secret_overlap: Duration::hours(24),
            rate_limits: RateLimits::default(),
            rate_limiter_failure: LimiterFailure::Open,
        }
    }

    /// The `realm` of this service's `WWW-Authenticate` challenges.
    pub fn realm(&self) -> String {
        format!("{}/", self.base_url)
    }

    /// `text` as a [`GatewayConfig::base_url`], without its trailing `/`,
    /// if it can be one: an `http://` or `https://` URL of printable ASCII
    /// with no `"` or `\`, so that it can be quoted in a `WWW-Authenticate`
    /// realm as it is. For a host that takes the base URL from an operator.
    ///
    /// # Errors
    /// [`BaseUrlError`] for anything else.
    pub fn checked_base_url(text: &str) -> Result<String, BaseUrlError> {
        let url = text.trim_end_matches('/');
        let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
        let chars_ok = url
            .chars()
            .all(|c| c.is_ascii_graphic() && c != '"' && c != '\\');
        if scheme_ok && chars_ok && !url.ends_with("//") {
            Ok(url.to_owned())
        } else {
            Err(BaseUrlError {
                text: text.to_owned(),
            })
        }
    }
}

/// A base URL that [`GatewayConfig::checked_base_url`] refused.
///
/// Its message follows the name of the setting, as in
/// `format!("--base-url {error}")`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("must be an http:// or https:// URL, not {text:?}")]
pub struct BaseUrlError {
    /// The text given.
    pub text: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_url_is_http_or_https_and_fits_in_a_quoted_realm() {
        let checked = GatewayConfig::checked_base_url;
        assert_eq!(
            checked("https://api.example.com/"),
            Ok("https://api.example.com".into())
        );
        assert_eq!(
            checked("http://127.0.0.1:8080"),
            Ok("http://127.0.0.1:8080".into())
        );
        for bad in [
            "ftp://x",
            "api.example.com",
            "https://",
            "http://a b",
            "http://a\"x",
            "http://a\\b",
        ] {
            let error = checked(bad).unwrap_err();
            assert_eq!(
                error.to_string(),
                format!("must be an http:// or https:// URL, not {bad:?}")
            );
        }
    }

    #[test]
    fn defaults_follow_the_spec() {
        let config = GatewayConfig::new("https://api.example.com/");
        assert_eq!(config.access_token_lifetime.whole_seconds(), 86_400);
        assert_eq!(config.code_lifetime.whole_minutes(), 10);
        assert_eq!(config.refresh_token_lifetime, None);
        assert_eq!(config.realm(), "https://api.example.com/");
        assert_eq!(
            config.refresh_policy,
            RefreshPolicy::Adaptive {
                grace: Duration::seconds(30)
            }
        );
        assert_eq!(config.max_api_keys_per_account, 5);
        assert_eq!(config.purge_retention.whole_days(), 7);
        assert_eq!(config.purge_batch, 1000);
    }
}
