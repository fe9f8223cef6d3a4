//! `--limit-per-lead`, `--limit-per-account`, `--limit-per-credential`,
//! `--rate-limit-store` and `--rate-limit-failure`: the gateway's rate
//! limits and where they are counted.

use std::sync::Arc;

use conversion_gateway::{Limit, LimiterFailure, RateLimiter, RateLimiterUrl, RateLimits};

use crate::cli::parsed;

/// The limits and their counter, as the command line sets them.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct LimitSettings {
    /// Events per contact e-mail of an account: COUNT/PERIOD, PERIOD a number
    /// with s, m or h (20/1m, 120/24h), or off
    // `::std::option::Option`: a value of its own ("off"), not a flag that
    // may be left out, which is what clap makes of a plain `Option`.
    #[arg(long = "limit-per-lead", value_name = "LIMIT", default_value = "120/24h", value_parser = |text: &str| Limit::parse_or_off(text).map_err(|error| format!("--limit-per-lead: {error}, or off")))]
    per_lead: ::std::option::Option<Limit>,
    /// Events per account on the event routes
    #[arg(long = "limit-per-account", value_name = "LIMIT", default_value = "off", value_parser = |text: &str| Limit::parse_or_off(text).map_err(|error| format!("--limit-per-account: {error}, or off")))]
    per_account: ::std::option::Option<Limit>,
    /// Events per API key or per application
    #[arg(long = "limit-per-credential", value_name = "LIMIT", default_value = "off", value_parser = |text: &str| Limit::parse_or_off(text).map_err(|error| format!("--limit-per-credential: {error}, or off")))]
    per_credential: ::std::option::Option<Limit>,
    /// memory | redis://HOST:PORT: where the counts live; Redis shares them
    /// between instances
    #[arg(id = "rate_limit_store", long = "rate-limit-store", value_name = "STORE", default_value = "memory", value_parser = parsed::<RateLimiterUrl>("--rate-limit-store"))]
    pub store: RateLimiterUrl,
    /// open | closed: when Redis does not answer, accept events uncounted, or
    /// refuse them with 503
    #[arg(id = "rate_limit_failure", long = "rate-limit-failure", value_name = "WHAT", default_value = "open", value_parser = parsed::<LimiterFailure>("--rate-limit-failure"))]
    pub failure: LimiterFailure,
}

impl LimitSettings {
    /// The three limits.
    pub fn limits(&self) -> RateLimits {
        let mut limits = RateLimits::default();
        limits.per_lead = self.per_lead;
        limits.per_account = self.per_account;
        limits.per_credential = self.per_credential;
        limits
    }

    /// The limiter that counts.
    pub fn limiter(&self) -> Result<Arc<dyn RateLimiter>, String> {
        self.store
            .open()
            .map_err(|error| format!("--rate-limit-store: {error}"))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        limits: LimitSettings,
    }

    fn parse(line: &str) -> Result<LimitSettings, clap::Error> {
        let arguments = std::iter::once("cg").chain(line.split_whitespace());
        Flags::try_parse_from(arguments).map(|flags| flags.limits)
    }

    #[test]
    fn the_flags_set_the_limits_and_their_store() {
        // The library's defaults, counted in memory, failing open.
        let settings = parse("").unwrap();
        assert_eq!(settings.limits(), RateLimits::default());
        assert_eq!(settings.store, RateLimiterUrl::Memory);
        assert_eq!(settings.failure, LimiterFailure::Open);
        let settings = parse(
            "--limit-per-lead off --limit-per-account 500/1m --limit-per-credential=20/1m \
             --rate-limit-store redis://:hunter2@127.0.0.1:6379/0 --rate-limit-failure closed",
        )
        .unwrap();
        let limits = settings.limits();
        assert_eq!(limits.per_lead, None);
        assert_eq!(limits.per_account, Some("500/1m".parse().unwrap()));
        assert_eq!(limits.per_credential, Some("20/1m".parse().unwrap()));
        assert_eq!(settings.failure, LimiterFailure::Closed);
        assert_eq!(settings.store.to_string(), "redis://127.0.0.1:6379");
        for line in [
            "--limit-per-lead 120",
            "--limit-per-lead 120/1d",
            "--rate-limit-store postgres://x",
            "--rate-limit-failure maybe",
        ] {
            assert!(parse(line).is_err(), "{line}");
        }
    }
}
