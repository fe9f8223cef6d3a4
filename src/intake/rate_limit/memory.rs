//! The in-process limiter: exact for one instance, counted under one lock.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use time::OffsetDateTime;

use super::{Admission, Charge, LimiterError, RateLimiter};

/// One counter's current window.
#[derive(Clone, Copy, Debug)]
struct Window {
    /// Units charged in it.
    used: u32,
    /// When it ends.
    ends_at: OffsetDateTime,
}

/// The counters, and when to next drop the ended ones.
#[derive(Debug, Default)]
struct Counters {
    windows: HashMap<String, Window>,
    /// The map's size after the last sweep of ended windows: the next sweep
    /// comes when it has doubled, so a flood of distinct keys (a script
    /// trying a new e-mail each time) costs memory for live windows only,
    /// and sweeping stays amortised constant time per charge.
    swept_size: usize,
}

/// Counts in this process's memory: one instance's exact limits. Several
/// instances behind a load balancer each count their own share; they need
/// a shared limiter such as [`super::RedisRateLimiter`].
#[derive(Debug, Default)]
pub struct MemoryRateLimiter {
    counters: Mutex<Counters>,
}

impl MemoryRateLimiter {
    /// A limiter with no counters.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many counters it holds, ended windows not yet swept included.
    pub fn len(&self) -> usize {
        self.lock().windows.len()
    }

    /// Whether it holds no counter.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counters> {
        // Every critical section leaves the counters consistent before
        // anything that could panic.
        self.counters
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait]
impl RateLimiter for MemoryRateLimiter {
    async fn charge(
        &self,
        charges: &[Charge],
        now: OffsetDateTime,
    ) -> Result<Admission, LimiterError> {
        let mut counters = self.lock();
        if counters.windows.len() >= (counters.swept_size * 2).max(1024) {
            counters.windows.retain(|_, window| window.ends_at > now);
            counters.swept_size = counters.windows.len();
        }
        // Every check before the first change: all or nothing.
        for (index, charge) in charges.iter().enumerate() {
            let used = match counters.windows.get(&charge.key) {
                Some(window) if window.ends_at > now => window.used,
                _ => 0,
            };
            if u64::from(used) + u64::from(charge.cost) > u64::from(charge.limit.max) {
                let retry_after = match counters.windows.get(&charge.key) {
                    Some(window) if window.ends_at > now => window.ends_at - now,
                    // A charge larger than the limit never fits: try again
                    // after a whole window, when nothing else counts.
                    _ => charge.limit.period,
                };
                return Ok(Admission::Refused {
                    index,
                    used,
                    retry_after,
                });
            }
        }
        for charge in charges {
            let window = counters
                .windows
                .entry(charge.key.clone())
                .or_insert(Window {
                    used: 0,
                    ends_at: now + charge.limit.period,
                });
            if window.ends_at <= now {
                *window = Window {
                    used: 0,
                    ends_at: now + charge.limit.period,
                };
            }
            window.used += charge.cost;
        }
        Ok(Admission::Admitted)
    }

    async fn refund(&self, charges: &[Charge], now: OffsetDateTime) -> Result<(), LimiterError> {
        let mut counters = self.lock();
        for charge in charges {
            if let Some(window) = counters.windows.get_mut(&charge.key)
                && window.ends_at > now
            {
                window.used = window.used.saturating_sub(charge.cost);
            }
        }
        Ok(())
    }
}
