//! When a delivery is attempted again, and when it, or its webhook, is
//! given up: pure decisions over the attempt's outcome, `now` and a jitter
//! drawn by the caller.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc2822;

use crate::records::webhook::{DeliveryNext, WebhookChange};
use crate::webhooks::transport::SendOutcome;

/// How long a webhook may fail, every attempt in a row, before it is
/// switched off.
pub const SWITCH_OFF_AFTER: Duration = Duration::from_secs(5 * 24 * 3600);

/// The longest wait a receiver's `Retry-After` can ask for; a longer one
/// is cut to it, so a receiver cannot park deliveries for months.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);

/// The share of each wait drawn at random (plus or minus), so that the
/// retries of many deliveries that failed together do not arrive together.
pub const JITTER: f64 = 0.1;

/// The waits before each attempt of a delivery: the first is that of the
/// first attempt, which is made as soon as the delivery is dispatched, so
/// it is zero; each later one is the wait after a failed attempt before the
/// next; after the last attempt a delivery that failed is given up. No
/// wait is longer than [`RetrySchedule::MAX_WAIT`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetrySchedule(Vec<Duration>);

impl Default for RetrySchedule {
    /// At once, then 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h: eight
    /// attempts over about 28 hours.
    fn default() -> Self {
        let minutes = |m: u64| Duration::from_secs(60 * m);
        Self(vec![
            Duration::ZERO,
            Duration::from_secs(5),
            minutes(5),
            minutes(30),
            minutes(120),
            minutes(300),
            minutes(600),
            minutes(600),
        ])
    }
}

impl RetrySchedule {
    /// The longest wait of a schedule: 30 days (a wait far longer would
    /// reach past what an instant can hold, and no receiver is waited for
    /// that long).
    pub const MAX_WAIT: Duration = Duration::from_secs(30 * 24 * 3600);

    /// A schedule of these waits.
    ///
    /// # Errors
    /// [`RetryScheduleError::Empty`] when there is none,
    /// [`RetryScheduleError::FirstNotZero`] when the first is not zero,
    /// [`RetryScheduleError::TooLong`] when one is longer than
    /// [`RetrySchedule::MAX_WAIT`].
    pub fn new(waits: Vec<Duration>) -> Result<Self, RetryScheduleError> {
        match waits.first() {
            None => return Err(RetryScheduleError::Empty),
            Some(first) if !first.is_zero() => {
                return Err(RetryScheduleError::FirstNotZero(*first));
            }
            Some(_) => {}
        }
        if let Some(long) = waits.iter().find(|wait| **wait > Self::MAX_WAIT) {
            return Err(RetryScheduleError::TooLong(*long));
        }
        Ok(Self(waits))
    }

    /// The waits.
    pub fn waits(&self) -> &[Duration] {
        &self.0
    }

    /// How many attempts a delivery gets.
    pub fn attempts(&self) -> usize {
        self.0.len()
    }
}

/// `0s,5s,5m,30m,2h`: waits with a unit each (`ms`, `s`, `m`, `h`, `d`),
/// separated by commas.
impl FromStr for RetrySchedule {
    type Err = RetryScheduleError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let waits = text
            .split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(parse_wait)
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(waits)
    }
}

impl fmt::Display for RetrySchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, wait) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            let millis = wait.as_millis();
            if millis % 1000 != 0 {
                write!(f, "{millis}ms")?;
            } else {
                write!(f, "{}s", millis / 1000)?;
            }
        }
        Ok(())
    }
}

fn parse_wait(part: &str) -> Result<Duration, RetryScheduleError> {
    let split = part
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| RetryScheduleError::NoUnit(part.to_owned()))?;
    let (number, unit) = part.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| RetryScheduleError::Invalid(part.to_owned()))?;
    let millis_per = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(RetryScheduleError::Invalid(part.to_owned())),
    };
    number
        .checked_mul(millis_per)
        .map(Duration::from_millis)
        .filter(|wait| *wait <= RetrySchedule::MAX_WAIT)
        .ok_or_else(|| RetryScheduleError::Invalid(part.to_owned()))
}

/// Why a retry schedule was refused; the message follows the setting's
/// name (`--webhook-retry-schedule has ...`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RetryScheduleError {
    /// No wait at all.
    #[error("needs at least one wait (such as 0s,5s,5m)")]
    Empty,
    /// A wait without a unit.
    #[error("has `{0}` without a unit: use ms, s, m, h or d (such as 5s)")]
    NoUnit(String),
    /// A wait that is not a number and a unit, or longer than 30 days.
    #[error("has `{0}`, not a wait of at most 30 days such as 500ms, 5s, 5m, 2h or 1d")]
    Invalid(String),
    /// A first wait that is not zero: the first attempt is made at once.
    #[error(
        "starts with {0:?}: the first attempt is made at once, so the first wait is 0s (such as 0s,5s,5m)"
    )]
    FirstNotZero(Duration),
    /// A wait longer than [`RetrySchedule::MAX_WAIT`].
    #[error("has a wait of {0:?}, longer than 30 days")]
    TooLong(Duration),
}

/// What follows an attempt: the delivery's next state and the change to its
/// webhook.
///
/// `attempts_before` counts the delivery's earlier attempts; `failing_since`
/// is the webhook's; `jitter` is drawn uniformly from `[0, 1)`.
///
/// - a 2xx answer: delivered; the webhook is no longer failing;
/// - `410 Gone`: the receiver asks for no more; the delivery fails and the
///   webhook is switched off;
/// - any other failure (another status, a redirect, a timeout, a refused
///   destination, a broken connection): the webhook is failing since its
///   first failure in a row, and switched off once that is
///   [`SWITCH_OFF_AFTER`] ago (if the store still says so when it records
///   the attempt); the delivery is attempted again after the
///   schedule's next wait (give or take [`JITTER`]) or the receiver's
///   `Retry-After` if that is longer, and fails after the last.
pub(crate) fn after_attempt(
    outcome: &SendOutcome,
    attempts_before: u32,
    now: OffsetDateTime,
    failing_since: Option<OffsetDateTime>,
    schedule: &RetrySchedule,
    jitter: f64,
) -> (DeliveryNext, WebhookChange) {
    if outcome.succeeded() {
        return (DeliveryNext::Delivered, WebhookChange::Succeeded);
    }
    if outcome.status() == Some(410) {
        return (DeliveryNext::Failed, WebhookChange::SwitchOff);
    }
    // Decided again by the store against what it holds when the attempt
    // is recorded: `failing_since` is as the lease read it, which another
    // attempt may have changed since (`WebhookChange::applied`).
    let cutoff = now - SWITCH_OFF_AFTER;
    let change = if failing_since.is_some_and(|since| since <= cutoff) {
        WebhookChange::SwitchOffIfFailingSince(cutoff)
    } else {
        WebhookChange::Failing(now)
    };
    let attempt = usize::try_from(attempts_before).unwrap_or(usize::MAX);
    let Some(wait) = schedule.waits().get(attempt.saturating_add(1)) else {
        return (DeliveryNext::Failed, change);
    };
    let jittered = wait.mul_f64(1.0 - JITTER + 2.0 * JITTER * jitter.clamp(0.0, 1.0));
    let asked = match outcome {
        SendOutcome::Answered {
            retry_after: Some(value),
            ..
        } => retry_after(value, now).map(|asked| asked.min(MAX_RETRY_AFTER)),
        _ => None,
    };
    let wait = asked.map_or(jittered, |asked| asked.max(jittered));
    (DeliveryNext::RetryAt(now + wait), change)
}

/// A `Retry-After` value (RFC 9110 section 10.2.3): seconds, or an
/// HTTP-date, as the wait from `now`. `None` when it is neither.
pub(crate) fn retry_after(value: &str, now: OffsetDateTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = OffsetDateTime::parse(value, &Rfc2822).ok()?;
    Some(Duration::try_from(at - now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    const NOW: OffsetDateTime = datetime!(2026-11-26 12:00 UTC);

    fn failed(status: u16) -> SendOutcome {
        SendOutcome::Answered {
            status,
            retry_after: None,
        }
    }

    #[test]
    fn schedules_parse_print_and_refuse_nonsense() {
        let schedule: RetrySchedule = "0s, 1s,2s,500ms,5m,2h,1d".parse().unwrap();
        let seconds = Duration::from_secs;
        assert_eq!(
            schedule.waits(),
            [
                seconds(0),
                seconds(1),
                seconds(2),
                Duration::from_millis(500),
                seconds(300),
                seconds(7200),
                seconds(86_400)
            ]
        );
        assert_eq!(schedule.to_string(), "0s,1s,2s,500ms,300s,7200s,86400s");
        assert_eq!(schedule.attempts(), 7);
        assert_eq!(
            RetrySchedule::default().to_string(),
            "0s,5s,300s,1800s,7200s,18000s,36000s,36000s"
        );
        assert_eq!(
            "0s,30d".parse::<RetrySchedule>().unwrap().waits(),
            [seconds(0), seconds(30 * 86_400)],
            "the longest wait allowed"
        );
        assert_eq!(
            "5s,5m".parse::<RetrySchedule>(),
            Err(RetryScheduleError::FirstNotZero(seconds(5))),
            "the first attempt is at once"
        );
        assert_eq!(
            RetrySchedule::new(vec![
                seconds(0),
                RetrySchedule::MAX_WAIT + Duration::from_millis(1)
            ]),
            Err(RetryScheduleError::TooLong(
                RetrySchedule::MAX_WAIT + Duration::from_millis(1)
            )),
            "what the parser refuses, the constructor does"
        );
        assert_eq!(
            RetrySchedule::new(vec![seconds(0), Duration::MAX]),
            Err(RetryScheduleError::TooLong(Duration::MAX)),
            "a wait no instant can hold"
        );
        assert!(RetrySchedule::new(vec![seconds(0), RetrySchedule::MAX_WAIT]).is_ok());
        assert_eq!("".parse::<RetrySchedule>(), Err(RetryScheduleError::Empty));
        assert_eq!(
            "5".parse::<RetrySchedule>(),
            Err(RetryScheduleError::NoUnit("5".into()))
        );
        for bad in ["5x", "s", "-1s", "31d", "99999999999999999999s"] {
            assert_eq!(
                bad.parse::<RetrySchedule>(),
                Err(RetryScheduleError::Invalid(bad.into())),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_limits_are_five_days_of_failures_and_a_day_of_retry_after() {
        assert_eq!(SWITCH_OFF_AFTER, Duration::from_secs(432_000));
        assert_eq!(MAX_RETRY_AFTER, Duration::from_secs(86_400));
    }

    #[test]
    fn success_delivers_and_clears_the_failing_mark() {
        for status in [200, 204, 299] {
            assert_eq!(
                after_attempt(
                    &failed(status),
                    3,
                    NOW,
                    Some(NOW),
                    &RetrySchedule::default(),
                    0.5
                ),
                (DeliveryNext::Delivered, WebhookChange::Succeeded)
            );
        }
    }

    #[test]
    fn gone_fails_the_delivery_and_switches_the_webhook_off() {
        assert_eq!(
            after_attempt(&failed(410), 0, NOW, None, &RetrySchedule::default(), 0.5),
            (DeliveryNext::Failed, WebhookChange::SwitchOff)
        );
    }

    #[test]
    fn failures_follow_the_schedule_with_jitter_then_fail() {
        let schedule = RetrySchedule::default();
        for outcome in [
            failed(500),
            failed(302),
            failed(199),
            SendOutcome::TimedOut,
            SendOutcome::Failed("reset".into()),
        ] {
            // After the first attempt, the second wait: 5 s, within 10 %.
            let (next, change) = after_attempt(&outcome, 0, NOW, None, &schedule, 0.5);
            assert_eq!(next, DeliveryNext::RetryAt(NOW + Duration::from_secs(5)));
            assert_eq!(change, WebhookChange::Failing(NOW));
            let (early, _) = after_attempt(&outcome, 0, NOW, None, &schedule, 0.0);
            assert_eq!(
                early,
                DeliveryNext::RetryAt(NOW + Duration::from_millis(4500))
            );
            let (late, _) = after_attempt(&outcome, 0, NOW, None, &schedule, 1.0);
            assert_eq!(
                late,
                DeliveryNext::RetryAt(NOW + Duration::from_millis(5500))
            );
            // After the seventh, the eighth wait (10 h); after the eighth, none.
            let (next, _) = after_attempt(&outcome, 6, NOW, None, &schedule, 0.5);
            assert_eq!(
                next,
                DeliveryNext::RetryAt(NOW + Duration::from_secs(36_000))
            );
            let (next, change) = after_attempt(&outcome, 7, NOW, Some(NOW), &schedule, 0.5);
            assert_eq!(next, DeliveryNext::Failed);
            assert_eq!(change, WebhookChange::Failing(NOW));
        }
    }

    #[test]
    fn five_days_of_failures_in_a_row_switch_the_webhook_off() {
        let schedule = RetrySchedule::default();
        let since = NOW - SWITCH_OFF_AFTER + Duration::from_secs(1);
        let (_, change) = after_attempt(&failed(500), 0, NOW, Some(since), &schedule, 0.5);
        assert_eq!(
            change,
            WebhookChange::Failing(NOW),
            "failing again at the attempt's time; the store keeps the first"
        );
        let since = NOW - SWITCH_OFF_AFTER;
        let (next, change) = after_attempt(&failed(500), 0, NOW, Some(since), &schedule, 0.5);
        assert_eq!(
            change,
            WebhookChange::SwitchOffIfFailingSince(since),
            "switched off if the store still says it has failed since then"
        );
        assert_eq!(next, DeliveryNext::RetryAt(NOW + Duration::from_secs(5)));
    }

    #[test]
    fn retry_after_is_honoured_when_longer_and_capped() {
        let schedule = RetrySchedule::default();
        let asking = |value: &str| SendOutcome::Answered {
            status: 503,
            retry_after: Some(value.into()),
        };
        let (next, _) = after_attempt(&asking("120"), 0, NOW, None, &schedule, 0.5);
        assert_eq!(next, DeliveryNext::RetryAt(NOW + Duration::from_secs(120)));
        // Shorter than the schedule's wait: the schedule's.
        let (next, _) = after_attempt(&asking("1"), 0, NOW, None, &schedule, 0.5);
        assert_eq!(next, DeliveryNext::RetryAt(NOW + Duration::from_secs(5)));
        let (next, _) = after_attempt(&asking("99999999"), 0, NOW, None, &schedule, 0.5);
        assert_eq!(next, DeliveryNext::RetryAt(NOW + MAX_RETRY_AFTER));
        let (next, _) = after_attempt(
            &asking("Thu, 26 Nov 2026 12:10:00 GMT"),
            0,
            NOW,
            None,
            &schedule,
            0.5,
        );
        assert_eq!(next, DeliveryNext::RetryAt(NOW + Duration::from_secs(600)));
        let (next, _) = after_attempt(&asking("soon"), 0, NOW, None, &schedule, 0.5);
        assert_eq!(next, DeliveryNext::RetryAt(NOW + Duration::from_secs(5)));
        assert_eq!(
            retry_after("Thu, 26 Nov 2026 11:00:00 GMT", NOW),
            Some(Duration::ZERO)
        );
    }
}
