//! The in-process limiter: exact for one instance, counted under one lock,
//! in bounded memory.
//!
//! Each counter is 16 bytes: a keyed 8-byte hash of its key, the units used
//! in its window and when the window ends. The counters hold at most
//! [`MemoryRateLimiter::max_tracked`] keys. A counter at its limit (locked)
//! is never forgotten before its window ends: forgetting it would hand its
//! lead a whole new allowance. Past the cap, ended windows go first, then
//! open windows that are not locked, the fewest units used first
//! (forgetting a counter of `n` units lets its key send at most `n` more in
//! that window): a flood of new e-mails, one event each, makes room among
//! its own counters. When every counter is locked, a charge that needs a
//! new one is refused like a charge over its limit (429, `Retry-After`
//! until the first window ends); it is never admitted uncounted.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher as _, RandomState};
use std::sync::Mutex;

use async_trait::async_trait;
use time::OffsetDateTime;

use crate::bounded_windows::{drop_unlocked, excess};

use super::{Admission, Charge, LimiterError, RateLimiter};

/// `used` of a counter at its limit: no unit fits until its window ends.
/// Kept apart from counts so that the counters know which of them are
/// locked without storing each one's limit.
const LOCKED: u32 = u32::MAX;

/// The map's capacity past which it grows to hold the whole cap at once.
const PRESIZE_AT: usize = 1 << 16;

/// One counter's current window: two small integers (the key is the map's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Window {
    /// Units charged in it, or [`LOCKED`] once they reached the limit.
    used: u32,
    /// When it ends, in Unix seconds, rounded up: a window lasts its whole
    /// period, and up to a second more. (Saturates in 2106.)
    ends_at: u32,
}

impl Window {
    /// A window of `used` units (at most `max`) ending at `ends_at`.
    fn new(used: u32, max: u32, ends_at: u32) -> Self {
        Self {
            used: if used >= max { LOCKED } else { used },
            ends_at,
        }
    }

    /// The units used, for a limit of `max`.
    fn used(self, max: u32) -> u32 {
        if self.used == LOCKED {
            max
        } else {
            self.used.min(max)
        }
    }

    /// Whether the window is still open at `now` (Unix seconds).
    fn is_open(self, now: u32) -> bool {
        self.ends_at > now
    }

    /// Whether the window is open and at its limit.
    fn is_locked(self, now: u32) -> bool {
        self.is_open(now) && self.used == LOCKED
    }
}

/// The counters, and when to next drop the ended ones.
#[derive(Default)]
struct Counters {
    /// Each counter's window by the keyed hash of its key (which the map
    /// hashes again with its own keys: 20 ns, not worth a hasher of ours).
    windows: HashMap<u64, Window>,
    /// The map's size after the last sweep of ended windows: the next sweep
    /// comes when it has doubled, so a flood of distinct keys (a script
    /// trying a new e-mail each time) costs memory for live windows only,
    /// and sweeping stays amortised constant time per charge.
    swept_size: usize,
    /// Until when (Unix seconds) no counter can be dropped: the map was
    /// found full of locked windows, the first of which ends then. Until
    /// that second a charge that needs a new counter is refused without
    /// another pass over the map.
    full_until: u32,
}

/// Counts in this process's memory: one instance's exact limits. Several
/// instances behind a load balancer each count their own share; they need
/// a shared limiter such as [`RedisRateLimiter`](crate::RedisRateLimiter).
///
/// Holds at most [`max_tracked`](Self::max_tracked) counters,
/// [`DEFAULT_MAX_TRACKED`](Self::DEFAULT_MAX_TRACKED) unless
/// [`with_max_tracked`](Self::with_max_tracked) says otherwise; see the
/// module docs for what happens past it. Keys are hashed to 8 bytes with
/// SipHash under keys drawn at random for each limiter, so nobody can craft
/// two keys that share a counter; by chance, two of a million keys share
/// one with a probability of about 3 in 100 million.
pub struct MemoryRateLimiter {
    counters: Mutex<Counters>,
    hasher: RandomState,
    max_tracked: usize,
}

impl fmt::Debug for MemoryRateLimiter {
    // Not derived: that would print every counter.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRateLimiter")
            .field("tracked", &self.len())
            .field("max_tracked", &self.max_tracked)
            .finish_non_exhaustive()
    }
}

impl Default for MemoryRateLimiter {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryRateLimiter {
    /// The default cap on counters: 1,000,000, one per lead (and per
    /// account and credential) within their windows. A million distinct
    /// leads within a window take 47 MB of resident memory, 36 MB of it
    /// the table (`cargo bench --bench limiter_memory`; README,
    /// "Security").
    pub const DEFAULT_MAX_TRACKED: usize = 1_000_000;

    /// A limiter with no counters, holding at most
    /// [`DEFAULT_MAX_TRACKED`](Self::DEFAULT_MAX_TRACKED).
    pub fn new() -> Self {
        Self::with_max_tracked(Self::DEFAULT_MAX_TRACKED)
    }

    /// A limiter with no counters, holding at most `max_tracked` of them
    /// (raised to 16 if lower, room for one request's charges). Memory
    /// grows with the counters in use; past 65,536 the table grows to hold
    /// the whole cap at once, about 36 bytes per counter of the cap.
    pub fn with_max_tracked(max_tracked: usize) -> Self {
        Self {
            counters: Mutex::default(),
            hasher: RandomState::new(),
            max_tracked: max_tracked.max(16),
        }
    }

    /// The most counters it holds at once.
    pub fn max_tracked(&self) -> usize {
        self.max_tracked
    }

    /// How many counters it holds, ended windows not yet swept included.
    pub fn len(&self) -> usize {
        self.lock().windows.len()
    }

    /// Whether it holds no counter.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many counters its table has room for without growing.
    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.lock().windows.capacity()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counters> {
        // Every critical section leaves the counters consistent before
        // anything that could panic.
        self.counters
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The counter of `key`.
    fn key(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }
}

/// Unix seconds as the counters keep them, rounded down: a window ends at
/// the whole second before its period is over, so that it never outlasts
/// its period and `Retry-After` never exceeds the policy's window (a
/// window may be up to a second shorter, which lets at most its limit
/// through a second early).
fn seconds(at: OffsetDateTime) -> u32 {
    u32::try_from(at.unix_timestamp().max(0)).unwrap_or(u32::MAX)
}

/// The instant of Unix second `at`.
fn instant(at: u32) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(i64::from(at)).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

impl Counters {
    /// Makes room for `needed` new counters under `max`, never by dropping
    /// a locked window. First drops every ended window; if the map is
    /// still more than three quarters full, drops open windows that are not
    /// locked, the fewest units used first, down to three quarters. Each
    /// pass frees a quarter of the map unless locked windows fill it, so
    /// the cost per charge stays constant on average.
    ///
    /// # Errors
    /// When only locked windows are left and there is still no room: the
    /// second the first of them ends.
    fn make_room(&mut self, now: u32, needed: usize, max: usize) -> Result<(), u32> {
        if now < self.full_until {
            return Err(self.full_until);
        }
        self.windows.retain(|_, w| w.is_open(now));
        let excess = excess(self.windows.len(), needed, max);
        drop_unlocked(&mut self.windows, excess, |w| w.is_locked(now), |w| w.used);
        self.swept_size = self.windows.len();
        if self.windows.len() + needed <= max {
            return Ok(());
        }
        // Only locked windows are left: no room until the first one ends.
        self.full_until = self
            .windows
            .values()
            .map(|w| w.ends_at)
            .min()
            .unwrap_or(now.saturating_add(1));
        Err(self.full_until)
    }
}

#[async_trait]
impl RateLimiter for MemoryRateLimiter {
    async fn charge(
        &self,
        charges: &[Charge],
        now: OffsetDateTime,
    ) -> Result<Admission, LimiterError> {
        let keys: Vec<u64> = charges.iter().map(|charge| self.key(&charge.key)).collect();
        let second = seconds(now);
        let mut counters = self.lock();
        if counters.windows.len() >= (counters.swept_size * 2).max(1024) {
            counters.windows.retain(|_, window| window.is_open(second));
            counters.swept_size = counters.windows.len();
        }
        // Every check before the first change: all or nothing.
        for (index, (charge, key)) in charges.iter().zip(&keys).enumerate() {
            let open = counters
                .windows
                .get(key)
                .copied()
                .filter(|window| window.is_open(second));
            let used = open.map_or(0, |window| window.used(charge.limit.max));
            if u64::from(used) + u64::from(charge.cost) > u64::from(charge.limit.max) {
                let retry_after = match open {
                    Some(window) => instant(window.ends_at) - now,
                    // A charge larger than the limit never fits: try again
                    // after a whole window, when nothing else counts.
                    None => charge.limit.period,
                };
                return Ok(Admission::Refused {
                    index,
                    used,
                    retry_after,
                });
            }
        }
        let needed = keys
            .iter()
            .filter(|key| !counters.windows.contains_key(key))
            .count();
        // Room for every one of the request's counters: making room may drop
        // one it holds (unlocked), which it then opens again.
        if counters.windows.len() + needed > self.max_tracked
            && let Err(until) = counters.make_room(second, keys.len(), self.max_tracked)
        {
            // Every counter is locked: a new one would have to be admitted
            // uncounted. The first charge without a counter is refused,
            // until the first window ends and makes room.
            let index = keys
                .iter()
                .position(|key| !counters.windows.contains_key(key))
                .unwrap_or(0);
            return Ok(Admission::Refused {
                index,
                used: 0,
                retry_after: instant(until) - now,
            });
        }
        let capacity = counters.windows.capacity();
        if counters.windows.len() + needed > capacity && capacity >= PRESIZE_AT {
            // A flood: straight to the table of the whole cap, rather than
            // doubling up to it. Each doubling hands the last table back to
            // the allocator, which may keep its pages resident (mimalloc
            // does): a million counters grown by doubling took 70 MB of
            // resident memory, grown this way 47 MB.
            let room = self.max_tracked.saturating_sub(counters.windows.len());
            counters.windows.reserve(room);
        }
        for (charge, key) in charges.iter().zip(keys) {
            let max = charge.limit.max;
            let fresh = Window::new(0, max, seconds(now + charge.limit.period));
            let window = counters.windows.entry(key).or_insert(fresh);
            if !window.is_open(second) {
                *window = fresh;
            }
            let used = window.used(max).saturating_add(charge.cost);
            *window = Window::new(used, max, window.ends_at);
        }
        Ok(Admission::Admitted)
    }

    async fn refund(&self, charges: &[Charge], now: OffsetDateTime) -> Result<(), LimiterError> {
        let second = seconds(now);
        let mut counters = self.lock();
        for charge in charges {
            let key = self.key(&charge.key);
            if let Some(window) = counters.windows.get_mut(&key)
                && window.is_open(second)
            {
                let max = charge.limit.max;
                let used = window.used(max).saturating_sub(charge.cost);
                *window = Window::new(used, max, window.ends_at);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use time::Duration;
    use time::macros::datetime;

    use super::*;
    use crate::intake::rate_limit::{Limit, LimitKind};

    fn charge(key: &str, max: u32, cost: u32) -> Charge {
        Charge {
            kind: LimitKind::Lead,
            limit: Limit::new(max, Duration::minutes(1)),
            key: key.to_owned(),
            subject: key.to_owned(),
            cost,
        }
    }

    /// Charges `cost` to `key` (a limit of `max` a minute), which must be
    /// admitted.
    async fn admit(
        limiter: &MemoryRateLimiter,
        key: &str,
        max: u32,
        cost: u32,
        now: OffsetDateTime,
    ) {
        let answer = limiter.charge(&[charge(key, max, cost)], now).await;
        assert_eq!(answer.unwrap(), Admission::Admitted, "{key} at {now}");
    }

    const NOW: OffsetDateTime = datetime!(2026-01-01 0:00 UTC);

    #[test]
    fn a_counter_is_sixteen_bytes_beside_its_key() {
        assert_eq!(size_of::<(u64, Window)>(), 16);
    }

    #[tokio::test]
    async fn a_locked_lead_stays_locked_through_a_flood_past_the_cap() {
        let limiter = MemoryRateLimiter::with_max_tracked(400);
        admit(&limiter, "lead:ana", 120, 120, NOW).await;
        admit(&limiter, "lead:bo", 120, 119, NOW).await;
        for n in 0..10_000 {
            let at = NOW + Duration::milliseconds(n);
            admit(&limiter, &format!("lead:x{n}"), 120, 1, at).await;
            assert!(limiter.len() <= 400, "{} counters", limiter.len());
        }
        let later = NOW + Duration::seconds(30);
        let refused = limiter.charge(&[charge("lead:ana", 120, 1)], later).await;
        assert_eq!(
            refused.unwrap(),
            Admission::Refused {
                index: 0,
                used: 120,
                retry_after: Duration::seconds(30)
            }
        );
        // One short of its limit, bo was kept too: the flood's counters of
        // one unit went first.
        admit(&limiter, "lead:bo", 120, 1, later).await;
        let refused = limiter.charge(&[charge("lead:bo", 120, 1)], later).await;
        assert!(
            matches!(refused, Ok(Admission::Refused { used: 120, .. })),
            "{refused:?}"
        );
        // Until the window ends, and no longer.
        admit(&limiter, "lead:ana", 120, 120, NOW + Duration::minutes(1)).await;
    }

    #[tokio::test]
    async fn past_the_cap_the_counters_with_the_fewest_units_go_first() {
        let limiter = MemoryRateLimiter::with_max_tracked(40);
        for (n, used) in [(0, 5), (1, 2), (2, 9)] {
            admit(&limiter, &format!("kept{n}"), 10, used, NOW).await;
        }
        for n in 0..37 {
            admit(&limiter, &format!("one{n}"), 10, 1, NOW).await;
        }
        assert_eq!(limiter.len(), 40);
        // Ten counters of one unit go (down to 30), then the new one comes.
        admit(&limiter, "new", 10, 1, NOW).await;
        assert_eq!(limiter.len(), 31);
        for (n, used) in [(0, 5), (1, 2), (2, 9)] {
            let key = format!("kept{n}");
            let refused = limiter.charge(&[charge(&key, 10, 10)], NOW).await;
            assert!(
                matches!(refused, Ok(Admission::Refused { used: u, .. }) if u == used),
                "{key}: {refused:?}"
            );
        }
    }

    #[tokio::test]
    async fn ended_windows_go_before_any_open_one() {
        let limiter = MemoryRateLimiter::with_max_tracked(16);
        for n in 0..8 {
            admit(&limiter, &format!("old{n}"), 10, 1, NOW).await;
        }
        let later = NOW + Duration::seconds(45);
        for n in 0..8 {
            admit(&limiter, &format!("new{n}"), 10, 2, later).await;
        }
        // At one minute the old eight have ended: they alone go.
        admit(&limiter, "last", 10, 1, NOW + Duration::minutes(1)).await;
        assert_eq!(limiter.len(), 9);
        let kept = limiter.charge(&[charge("new0", 10, 9)], later).await;
        assert!(
            matches!(kept, Ok(Admission::Refused { used: 2, .. })),
            "{kept:?}"
        );
    }

    #[tokio::test]
    async fn past_the_cap_exactly_the_excess_goes_among_equal_counts() {
        // The cap is 16, three quarters 12: one more counter takes 4 out,
        // those of one unit first, then as many of two as make up 4.
        for (ones, twos) in [(3, 13), (5, 11)] {
            let limiter = MemoryRateLimiter::with_max_tracked(16);
            for n in 0..ones {
                admit(&limiter, &format!("one{n}"), 10, 1, NOW).await;
            }
            for n in 0..twos {
                admit(&limiter, &format!("two{n}"), 10, 2, NOW).await;
            }
            admit(&limiter, "new", 10, 1, NOW).await;
            assert_eq!(limiter.len(), 12 + 1, "{ones} of 1, {twos} of 2");
            let counters = limiter.lock();
            let twos_left = (0..twos)
                .filter(|n| {
                    counters
                        .windows
                        .contains_key(&limiter.key(&format!("two{n}")))
                })
                .count();
            assert_eq!(twos_left, twos.min(12), "{ones} of 1, {twos} of 2");
        }
    }

    #[tokio::test]
    async fn a_request_of_many_new_counters_makes_room_for_all_of_them() {
        let limiter = MemoryRateLimiter::with_max_tracked(16);
        for n in 0..12 {
            admit(&limiter, &format!("old{n}"), 10, 1, NOW).await;
        }
        let many: Vec<Charge> = (0..6).map(|n| charge(&format!("new{n}"), 10, 1)).collect();
        assert_eq!(
            limiter.charge(&many, NOW).await.unwrap(),
            Admission::Admitted
        );
        assert_eq!(limiter.len(), 16);
    }

    #[tokio::test]
    async fn ended_windows_are_swept_when_the_map_has_doubled() {
        let limiter = MemoryRateLimiter::new();
        for n in 0..1024 {
            admit(&limiter, &format!("a{n}"), 10, 1, NOW).await;
        }
        // The first sweep comes at 1,024 counters (none has ended yet).
        for n in 0..1000 {
            admit(
                &limiter,
                &format!("b{n}"),
                10,
                1,
                NOW + Duration::seconds(30),
            )
            .await;
        }
        // The "a" windows have ended, but the next sweep waits for 2,048.
        let later = NOW + Duration::seconds(61);
        for n in 0..24 {
            admit(&limiter, &format!("c{n}"), 10, 1, later).await;
        }
        assert_eq!(limiter.len(), 2048);
        admit(&limiter, "c24", 10, 1, later).await;
        assert_eq!(limiter.len(), 1000 + 25);
    }

    #[tokio::test]
    async fn past_65_536_counters_the_table_grows_to_the_whole_cap_at_once() {
        let limiter = MemoryRateLimiter::new();
        assert!(limiter.is_empty());
        admit(&limiter, "lead", 120, 1, NOW).await;
        assert!(!limiter.is_empty());
        assert!(limiter.capacity() < 1_000, "{}", limiter.capacity());
        for n in 0..60_000 {
            admit(&limiter, &format!("lead{n}"), 120, 1, NOW).await;
        }
        let doubled = limiter.capacity();
        assert!(doubled < 200_000, "{doubled}");
        for n in 60_000..120_000 {
            admit(&limiter, &format!("lead{n}"), 120, 1, NOW).await;
        }
        let whole = limiter.capacity();
        assert!(whole >= 1_000_000, "{whole}");
    }

    #[tokio::test]
    async fn with_every_counter_locked_a_new_key_is_refused_until_the_first_window_ends() {
        let limiter = MemoryRateLimiter::with_max_tracked(16);
        for n in 0..16 {
            admit(
                &limiter,
                &format!("full{n}"),
                1,
                1,
                NOW + Duration::seconds(n),
            )
            .await;
        }
        // A held key is charged as ever (here: refused at its own limit).
        let own = limiter.charge(&[charge("full15", 1, 1)], NOW).await;
        assert!(
            matches!(own, Ok(Admission::Refused { used: 1, .. })),
            "{own:?}"
        );
        // The refusal names the first charge that would need a counter.
        let both = [charge("full15", 1, 0), charge("new", 1, 1)];
        let refused = limiter.charge(&both, NOW).await;
        assert!(
            matches!(
                refused,
                Ok(Admission::Refused {
                    index: 1,
                    used: 0,
                    ..
                })
            ),
            "{refused:?}"
        );
        // A new key would go uncounted: refused until the first window
        // (opened at NOW) ends.
        for at in [
            NOW + Duration::seconds(20),
            NOW + Duration::milliseconds(59_500),
        ] {
            assert_eq!(
                limiter.charge(&[charge("new", 1, 1)], at).await.unwrap(),
                Admission::Refused {
                    index: 0,
                    used: 0,
                    retry_after: NOW + Duration::minutes(1) - at
                },
                "at {at}"
            );
        }
        assert_eq!(limiter.len(), 16, "nothing was charged");
        admit(&limiter, "new", 1, 1, NOW + Duration::minutes(1)).await;
        assert_eq!(limiter.len(), 16);
    }

    #[tokio::test]
    async fn a_request_never_takes_the_counters_past_the_cap() {
        let limiter = MemoryRateLimiter::with_max_tracked(16);
        for n in 0..15 {
            admit(&limiter, &format!("full{n}"), 1, 1, NOW).await;
        }
        admit(&limiter, "held", 5, 1, NOW).await;
        // "held" is the only counter that can go; with it gone there is
        // still room for one of the two, so both are refused.
        let both = [charge("held", 5, 1), charge("new", 5, 1)];
        let refused = limiter.charge(&both, NOW).await.unwrap();
        assert!(
            matches!(refused, Admission::Refused { used: 0, .. }),
            "{refused:?}"
        );
        assert!(limiter.len() <= 16, "{} counters", limiter.len());
        admit(&limiter, "held", 5, 1, NOW).await;
        assert_eq!(limiter.len(), 16);
    }

    #[tokio::test]
    async fn a_refund_unlocks_a_counter_and_a_window_lasts_its_whole_period() {
        let limiter = MemoryRateLimiter::new();
        let at = NOW + Duration::milliseconds(250);
        admit(&limiter, "a", 3, 3, at).await;
        limiter.refund(&[charge("a", 3, 2)], at).await.unwrap();
        admit(&limiter, "a", 3, 2, at).await;
        // The window ends at the whole second before its period is over:
        // never later, so Retry-After never exceeds the window.
        let refused = limiter.charge(&[charge("a", 3, 1)], at).await.unwrap();
        assert_eq!(
            refused,
            Admission::Refused {
                index: 0,
                used: 3,
                retry_after: Duration::milliseconds(59_750)
            }
        );
        let just_before = NOW + Duration::seconds(60) - Duration::milliseconds(1);
        let still_refused = limiter
            .charge(&[charge("a", 3, 1)], just_before)
            .await
            .unwrap();
        assert!(
            matches!(still_refused, Admission::Refused { .. }),
            "{still_refused:?}"
        );
        admit(&limiter, "a", 3, 3, NOW + Duration::seconds(60)).await;
    }

    #[test]
    fn the_cap_has_a_documented_default_and_a_floor() {
        assert_eq!(MemoryRateLimiter::new().max_tracked(), 1_000_000);
        assert_eq!(MemoryRateLimiter::with_max_tracked(0).max_tracked(), 16);
        assert_eq!(
            MemoryRateLimiter::with_max_tracked(5_000).max_tracked(),
            5_000
        );
        let debug = format!("{:?}", MemoryRateLimiter::new());
        assert!(debug.contains("max_tracked: 1000000"), "{debug}");
    }
}
