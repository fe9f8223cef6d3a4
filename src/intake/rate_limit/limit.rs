//! A limit (`max` events per `period`) and the three a deployment sets.

use std::fmt;
use std::str::FromStr;

use time::Duration;

/// At most `max` events per `period`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// The most events in one window.
    pub max: u32,
    /// How long a window lasts.
    pub period: Duration,
}

impl Limit {
    /// `max` events per `period`.
    pub fn new(max: u32, period: Duration) -> Self {
        Self { max, period }
    }

    /// A limit as an operator sets one, where `off` switches it off (a
    /// `None` in [`RateLimits`]): `off`, or `COUNT/PERIOD` as
    /// [`Limit::from_str`] reads it.
    ///
    /// # Errors
    /// [`LimitParseError`] for anything else.
    pub fn parse_or_off(text: &str) -> Result<Option<Self>, LimitParseError> {
        match text {
            "off" => Ok(None),
            limit => limit.parse().map(Some),
        }
    }

    /// The period in whole seconds (at least 1).
    pub fn period_seconds(&self) -> u64 {
        u64::try_from(self.period.whole_seconds())
            .unwrap_or(0)
            .max(1)
    }
}

/// `COUNT/PERIOD`, the period a number with `s`, `m` or `h`: `120/24h`,
/// `20/1m`.
impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seconds = self.period_seconds();
        if seconds.is_multiple_of(3600) {
            write!(f, "{}/{}h", self.max, seconds / 3600)
        } else if seconds.is_multiple_of(60) {
            write!(f, "{}/{}m", self.max, seconds / 60)
        } else {
            write!(f, "{}/{}s", self.max, seconds)
        }
    }
}

/// Why a limit could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "a limit is COUNT/PERIOD, a positive count and a positive number of s, m or h (20/1m, 120/24h): {0:?}"
)]
pub struct LimitParseError(pub String);

impl FromStr for Limit {
    type Err = LimitParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let refused = || LimitParseError(text.to_owned());
        let (count, period) = text.trim().split_once('/').ok_or_else(refused)?;
        let max: u32 = count.parse().map_err(|_| refused())?;
        let unit_at = period
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(refused)?;
        let (amount, unit) = period.split_at(unit_at);
        let amount: i64 = amount.parse().map_err(|_| refused())?;
        let period = match unit {
            "s" => Duration::seconds(amount),
            "m" => Duration::minutes(amount),
            "h" => Duration::hours(amount),
            _ => return Err(refused()),
        };
        if max == 0 || amount <= 0 || amount > 1_000_000 {
            return Err(refused());
        }
        Ok(Self { max, period })
    }
}

/// The limits of a deployment; `None` switches one off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RateLimits {
    /// Events per contact e-mail of an account. Default: 120 per 24 hours,
    /// the real service's limit.
    pub per_lead: Option<Limit>,
    /// Events per account on the event routes. Default: off.
    pub per_account: Option<Limit>,
    /// Events per credential (one API key, one application). Default: off.
    pub per_credential: Option<Limit>,
}

impl Default for RateLimits {
    fn default() -> Self {
        Self {
            per_lead: Some(Limit::new(120, Duration::hours(24))),
            per_account: None,
            per_credential: None,
        }
    }
}

impl RateLimits {
    /// No limit at all.
    pub fn off() -> Self {
        Self {
            per_lead: None,
            per_account: None,
            per_credential: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_switches_a_limit_off() {
        assert_eq!(Limit::parse_or_off("off"), Ok(None));
        assert_eq!(
            Limit::parse_or_off("20/1m"),
            Ok(Some(Limit::new(20, Duration::minutes(1))))
        );
        for bad in ["Off", "", "20"] {
            let error = Limit::parse_or_off(bad).unwrap_err();
            assert_eq!(error, LimitParseError(bad.to_owned()));
        }
    }

    #[test]
    fn limits_read_and_print_as_count_per_period() {
        for (text, max, seconds) in [
            ("120/24h", 120, 86_400),
            ("20/1m", 20, 60),
            ("5/30s", 5, 30),
            ("500/1m", 500, 60),
        ] {
            let limit: Limit = text.parse().unwrap();
            assert_eq!(limit, Limit::new(max, Duration::seconds(seconds)));
            assert_eq!(limit.to_string(), text);
        }
        assert_eq!(Limit::new(7, Duration::seconds(90)).to_string(), "7/90s");
        for bad in [
            "",
            "120",
            "120/",
            "/24h",
            "0/1m",
            "20/0m",
            "20/1d",
            "20/m",
            "-1/1m",
            "20/1.5h",
            "x/1m",
            "20/1mm",
            "20/9999999h",
        ] {
            assert!(bad.parse::<Limit>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn by_default_only_the_lead_limit_is_on() {
        let limits = RateLimits::default();
        assert_eq!(limits.per_lead, Some("120/24h".parse().unwrap()));
        assert_eq!(limits.per_account, None);
        assert_eq!(limits.per_credential, None);
        assert_eq!(RateLimits::off().per_lead, None);
    }
}
