//! Injected time: the core never reads the wall clock itself.

use std::fmt;
use std::sync::Mutex;

use time::{Duration, OffsetDateTime};

/// A source of the current time.
///
/// The service layer asks it once per request and hands the instant to the
/// pure decision functions, so every lifecycle test can move time by hand.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current instant, in UTC.
    fn now(&self) -> OffsetDateTime;
}

/// The operating system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }
}

/// A clock that moves only when told to: for tests.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<OffsetDateTime>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: OffsetDateTime) -> Self {
        Self {
            now: Mutex::new(start),
        }
    }

    /// A clock standing at 2026-01-01T00:00:00Z, a fixed start for tests.
    pub fn at_epoch_of_tests() -> Self {
        Self::new(time::macros::datetime!(2026-01-01 00:00:00 UTC))
    }

    /// Moves the clock forward (or back, with a negative duration).
    pub fn advance(&self, by: Duration) {
        let mut now = self
            .now
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *now += by;
    }

    /// Sets the clock to `instant`.
    pub fn set(&self, instant: OffsetDateTime) {
        *self
            .now
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = instant;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> OffsetDateTime {
        *self
            .now
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_advanced() {
        let clock = ManualClock::at_epoch_of_tests();
        let start = clock.now();
        assert_eq!(clock.now(), start);
        clock.advance(Duration::seconds(86_400));
        assert_eq!(clock.now() - start, Duration::days(1));
        clock.set(start);
        assert_eq!(clock.now(), start);
    }

    #[test]
    fn system_clock_is_utc_and_moves_forward() {
        let a = SystemClock.now();
        let b = SystemClock.now();
        assert!(b >= a);
        assert!(a.offset().is_utc());
    }
}
