//! Throttling of failed sign-ins, so that the login form cannot be used to
//! guess passwords at the speed of the network.
//!
//! Failures are counted per key in fixed windows that open at a key's first
//! failure and close [`ThrottleLimits::window_seconds`] later. Three keys are
//! counted for every attempt:
//!
//! | key | limit (default) | stops |
//! |---|---|---|
//! | account and address | 5 | one client guessing one account's password |
//! | account | 20 | many clients guessing one account's password |
//! | address | 20 | one client guessing many accounts (a password spray), unknown e-mails included |
//!
//! An attempt is refused while any of its keys has reached its limit in the
//! current window, so no lock lasts longer than one window. A refused attempt
//! is not counted: hammering does not prolong a lock. As the pair limit is
//! below the account limit, one address alone cannot lock an account for
//! its owner elsewhere; that needs four addresses, each locked itself.
//!
//! The counters hold at most [`ThrottleLimits::max_tracked`] keys. A key at
//! its limit (locked) is never forgotten before its window ends: otherwise a
//! flood of failed sign-ins with other e-mails from other addresses would
//! erase the lock of the account under attack and buy it another 20
//! guesses. Past the cap, ended windows go first, then open windows that
//! are not locked, those with the fewest failures first (forgetting a
//! window of `n` failures grants its key at most `n` more). When every key
//! is locked, an attempt that needs a new key is refused like a locked one,
//! with the seconds until the first lock ends: never admitted uncounted.
//! An attempt that is never checked (the service was busy) leaves no key
//! behind, so a flood of them fills nothing.
//!
//! Everything here is pure decision logic over `now` (Unix seconds): the
//! caller reads the clock.

use std::collections::HashMap;
use std::hash::{BuildHasher as _, RandomState};
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard};

use crate::bounded_windows::{drop_unlocked, excess};

/// How many failed sign-ins a key may have in one window, how long a window
/// lasts, and how many keys are remembered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThrottleLimits {
    /// The length of a window, in seconds.
    pub window_seconds: i64,
    /// Failures of one account from one address in a window.
    pub per_account_and_address: u32,
    /// Failures of one account from every address in a window.
    pub per_account: u32,
    /// Failures from one address, for every e-mail, in a window.
    pub per_address: u32,
    /// The most keys remembered at once; each one costs about 40 bytes.
    /// Locked keys are kept until their window ends even past it: then
    /// attempts that need a new key are refused.
    pub max_tracked: usize,
}

impl Default for ThrottleLimits {
    /// 5 failures per account and address, 20 per account and 20 per
    /// address, in 15 minutes; 100,000 keys (about 4 MB).
    fn default() -> Self {
        Self {
            // OWASP's authentication cheat sheet: lock for a period, not for
            // good, so that an attacker cannot lock an owner out for good.
            window_seconds: 15 * 60,
            // A few typos of one person.
            per_account_and_address: 5,
            // Several people (or devices) of one account at once, yet a
            // guessing rate of at most 20 per 15 minutes per account.
            per_account: 20,
            // A handful of people behind one NAT, and a password spray of at
            // most 20 guesses per 15 minutes per address.
            per_address: 20,
            max_tracked: 100_000,
        }
    }
}

/// The answer to an attempt that may not be checked now: one of its keys
/// is locked, or every key the counters can hold is locked and it needs a
/// new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Throttled {
    /// Seconds until the attempt would be admitted (at least 1).
    pub retry_after: u64,
}

/// An admitted attempt, counted as a failure until it is
/// [settled](LoginThrottle::settle) otherwise.
#[derive(Debug)]
#[must_use = "settle the attempt with what its password check found"]
pub struct Attempt {
    /// `(key, start of its window)`, the account-and-address key first.
    counted: [(u64, i64); 3],
}

/// What the password check of an admitted attempt found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// The e-mail or the password was wrong.
    Failed,
    /// The password was right.
    Succeeded,
    /// The password was never checked (the service was busy, or its store
    /// failed).
    Unchecked,
}

/// A key's failures in its current window.
#[derive(Clone, Copy, Debug)]
struct Window {
    started: i64,
    failures: u32,
    /// Which limit applies (fits in the padding: still 16 bytes).
    kind: Kind,
}

/// The failed-sign-in counters of one server.
#[derive(Debug)]
pub struct LoginThrottle {
    limits: ThrottleLimits,
    /// Keys the hashes of e-mails and addresses: random per throttle.
    hasher: RandomState,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    windows: HashMap<u64, Window>,
    /// Until when no key can be dropped: the counters were found full of
    /// locked windows, the first of which ends then. Until that second, an
    /// attempt that needs a new key is refused without another pass over
    /// the map.
    full_until: i64,
}

/// The kinds of key, hashed first so that no two kinds share a key.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Kind {
    AccountAndAddress,
    Account,
    Address,
}

impl LoginThrottle {
    /// Counters with these limits, remembering nothing yet.
    pub fn new(limits: ThrottleLimits) -> Self {
        Self {
            limits: ThrottleLimits {
                // Room for one attempt's three keys, whatever was asked.
                max_tracked: limits.max_tracked.max(4),
                ..limits
            },
            hasher: RandomState::new(),
            state: Mutex::new(State {
                windows: HashMap::new(),
                full_until: i64::MIN,
            }),
        }
    }

    /// Admits a sign-in of `email` from `address` at `now` and counts it as
    /// a failure until it is [settled](Self::settle), or refuses it,
    /// counting nothing, while one of its keys is at its limit, or when it
    /// needs a new key and every key the counters can hold is at its limit.
    ///
    /// Counting before the password is checked means that concurrent
    /// attempts cannot all slip in under the limit.
    ///
    /// # Errors
    /// [`Throttled`], with the seconds until the attempt would be admitted.
    pub fn admit(&self, email: &str, address: IpAddr, now: i64) -> Result<Attempt, Throttled> {
        let keys = self.keys(email, address);
        let mut state = self.lock();
        let limits = &self.limits;
        let window = limits.window_seconds;
        let locked_until = keys
            .iter()
            .filter_map(|key| state.windows.get(key))
            .filter(|w| w.is_locked(now, limits))
            .map(|w| w.started + window)
            .max();
        if let Some(until) = locked_until {
            return Err(Throttled::until(until, now));
        }
        let needed = keys
            .iter()
            .filter(|key| !state.windows.contains_key(key))
            .count();
        if state.windows.len() + needed > limits.max_tracked {
            // Room for all three: making room may drop one of this
            // attempt's own keys (unlocked), which it then counts again.
            state
                .make_room(now, limits, keys.len())
                .map_err(|until| Throttled::until(until, now))?;
        }
        let counted = std::array::from_fn(|i| {
            let (key, kind) = (keys[i], KINDS[i]);
            let fresh = Window {
                started: now,
                failures: 0,
                kind,
            };
            let entry = state.windows.entry(key).or_insert(fresh);
            if now >= entry.started + window {
                *entry = fresh;
            }
            entry.failures += 1;
            (key, entry.started)
        });
        Ok(Attempt { counted })
    }

    /// Settles an admitted attempt by what its password check found.
    ///
    /// On success the account-and-address counter starts over and the
    /// attempt no longer counts against the account or the address; their
    /// counters are not cleared, or an attacker who owns one account could
    /// clear their address's counter by signing in to it between guesses.
    /// An attempt whose password was never checked does not count, and a
    /// key it alone had counted is forgotten.
    pub fn settle(&self, attempt: Attempt, outcome: AttemptOutcome) {
        let mut state = self.lock();
        let [(pair, started), rest @ ..] = attempt.counted;
        match outcome {
            AttemptOutcome::Failed => {}
            AttemptOutcome::Succeeded => {
                if state
                    .windows
                    .get(&pair)
                    .is_some_and(|w| w.started == started)
                {
                    state.windows.remove(&pair);
                }
                state.uncount(&rest);
            }
            AttemptOutcome::Unchecked => state.uncount(&attempt.counted),
        }
    }

    /// How many keys are remembered.
    #[cfg(test)]
    pub fn tracked(&self) -> usize {
        self.lock().windows.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The counters stay consistent whatever panicked while holding them.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The attempt's three keys: fixed-size hashes, so that a long e-mail
    /// costs no more memory than a short one and no e-mail is kept. The
    /// hasher (SipHash) has random keys, so nobody can craft two e-mails
    /// that share a counter; by chance, two of 100,000 keys collide with a
    /// probability of about 3 in 10^10.
    fn keys(&self, email: &str, address: IpAddr) -> [u64; 3] {
        // The account store's own normalisation: `Ana@X` is `ana@x`.
        let email = email.trim().to_lowercase();
        let address = address_block(address);
        let hasher = &self.hasher;
        [
            hasher.hash_one((Kind::AccountAndAddress, &email, address)),
            hasher.hash_one((Kind::Account, &email)),
            hasher.hash_one((Kind::Address, address)),
        ]
    }
}

/// The kinds of the three keys of [`LoginThrottle::keys`], in their order.
const KINDS: [Kind; 3] = [Kind::AccountAndAddress, Kind::Account, Kind::Address];

impl Throttled {
    /// Refused until `until`: at least a second from `now`.
    fn until(until: i64, now: i64) -> Self {
        Self {
            retry_after: u64::try_from(until - now).unwrap_or(1).max(1),
        }
    }
}

impl ThrottleLimits {
    /// The failures a key of `kind` may have in a window.
    fn of(&self, kind: Kind) -> u32 {
        match kind {
            Kind::AccountAndAddress => self.per_account_and_address,
            Kind::Account => self.per_account,
            Kind::Address => self.per_address,
        }
    }
}

impl Window {
    /// Whether the window is still open at `now`.
    fn is_open(&self, now: i64, limits: &ThrottleLimits) -> bool {
        now < self.started + limits.window_seconds
    }

    /// Whether the window is open and at its key's limit: its key is
    /// refused until the window ends.
    fn is_locked(&self, now: i64, limits: &ThrottleLimits) -> bool {
        self.is_open(now, limits) && self.failures >= limits.of(self.kind)
    }
}

/// The block of addresses one client controls: an IPv4 address, or an IPv6
/// /64 (RFC 6177: a site gets at least a /64, so one client can change
/// addresses within it at will). IPv4-mapped IPv6 addresses are IPv4.
fn address_block(address: IpAddr) -> [u8; 16] {
    let mut block = [0u8; 16];
    match address {
        IpAddr::V4(v4) => block[..4].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => block[..4].copy_from_slice(&v4.octets()),
            None => {
                block[..8].copy_from_slice(&v6.octets()[..8]);
                // Set apart from every IPv4 address.
                block[15] = 6;
            }
        },
    }
    block
}

impl State {
    /// Takes one failure back from each key still in the window it was
    /// counted in, and forgets a key left with none: an attempt that was
    /// not checked leaves no key behind.
    fn uncount(&mut self, counted: &[(u64, i64)]) {
        for (key, started) in counted {
            if let Some(window) = self.windows.get_mut(key)
                && window.started == *started
            {
                window.failures = window.failures.saturating_sub(1);
                if window.failures == 0 {
                    self.windows.remove(key);
                }
            }
        }
    }

    /// Makes room for `needed` new keys under `limits.max_tracked`, never
    /// by forgetting a locked window. First forgets every ended window;
    /// if the counters are still more than three quarters full, forgets
    /// open windows that are not locked, the fewest failures first, down to
    /// three quarters. Each pass frees a quarter of the map unless locked
    /// windows fill it, so the cost per attempt stays constant on average.
    ///
    /// # Errors
    /// When only locked windows are left and there is still no room: the
    /// second the first of them ends.
    fn make_room(&mut self, now: i64, limits: &ThrottleLimits, needed: usize) -> Result<(), i64> {
        let max = limits.max_tracked;
        if now < self.full_until {
            return Err(self.full_until);
        }
        self.windows.retain(|_, w| w.is_open(now, limits));
        let excess = excess(self.windows.len(), needed, max);
        drop_unlocked(
            &mut self.windows,
            excess,
            |w| w.is_locked(now, limits),
            |w| w.failures,
        );
        if self.windows.len() + needed <= max {
            return Ok(());
        }
        // Only locked windows are left: no room until the first one ends.
        self.full_until = self
            .windows
            .values()
            .map(|w| w.started + limits.window_seconds)
            .min()
            .unwrap_or(now + 1);
        Err(self.full_until)
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    const ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    const OTHER: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7));

    fn limits() -> ThrottleLimits {
        ThrottleLimits::default()
    }

    /// `times` failed attempts, each of which must be admitted.
    fn fail(throttle: &LoginThrottle, email: &str, address: IpAddr, now: i64, times: u32) {
        for attempt in 0..times {
            let admitted = throttle.admit(email, address, now);
            assert!(
                admitted.is_ok(),
                "attempt {attempt} of {email} from {address}: {admitted:?}"
            );
        }
    }

    #[test]
    fn five_failures_lock_the_account_from_that_address_for_the_rest_of_the_window() {
        let throttle = LoginThrottle::new(limits());
        fail(&throttle, "ana@example.com", ADDRESS, 1_000, 4);
        fail(&throttle, "ana@example.com", ADDRESS, 1_100, 1);
        let refused = throttle.admit("ana@example.com", ADDRESS, 1_100);
        assert_eq!(refused.unwrap_err(), Throttled { retry_after: 800 });
        // Refusals are not counted: the lock does not grow.
        for _ in 0..100 {
            let _ = throttle.admit("ANA@example.com ", ADDRESS, 1_200);
        }
        assert_eq!(
            throttle
                .admit("ana@example.com", ADDRESS, 1_899)
                .unwrap_err(),
            Throttled { retry_after: 1 }
        );
        assert!(throttle.admit("ana@example.com", ADDRESS, 1_900).is_ok());
    }

    #[test]
    fn the_owner_elsewhere_is_not_locked_out_by_one_address() {
        let throttle = LoginThrottle::new(limits());
        fail(&throttle, "ana@example.com", ADDRESS, 1_000, 5);
        for _ in 0..1_000 {
            let _ = throttle.admit("ana@example.com", ADDRESS, 1_000);
        }
        let owner = throttle.admit("ana@example.com", OTHER, 1_001);
        assert!(owner.is_ok(), "{owner:?}");
    }

    #[test]
    fn many_addresses_lock_the_account_for_one_window_at_most() {
        let throttle = LoginThrottle::new(limits());
        for host in 0..4 {
            let address = IpAddr::V4(Ipv4Addr::new(203, 0, 113, host));
            fail(&throttle, "ana@example.com", address, 1_000, 5);
        }
        let owner = throttle.admit("ana@example.com", OTHER, 1_010);
        assert_eq!(owner.unwrap_err(), Throttled { retry_after: 890 });
        assert!(throttle.admit("ana@example.com", OTHER, 1_900).is_ok());
    }

    #[test]
    fn one_address_spraying_many_emails_is_locked() {
        let throttle = LoginThrottle::new(limits());
        for n in 0..20 {
            fail(
                &throttle,
                &format!("user{n}@example.com"),
                ADDRESS,
                1_000,
                1,
            );
        }
        let refused = throttle.admit("user20@example.com", ADDRESS, 1_000);
        assert_eq!(refused.unwrap_err(), Throttled { retry_after: 900 });
        assert!(throttle.admit("user20@example.com", OTHER, 1_000).is_ok());
    }

    #[test]
    fn a_success_clears_the_pair_but_not_the_address() {
        let throttle = LoginThrottle::new(limits());
        fail(&throttle, "ana@example.com", ADDRESS, 1_000, 4);
        let attempt = throttle.admit("ana@example.com", ADDRESS, 1_000).unwrap();
        throttle.settle(attempt, AttemptOutcome::Succeeded);
        // Five more typos are allowed after a success.
        fail(&throttle, "ana@example.com", ADDRESS, 1_000, 5);
        assert!(throttle.admit("ana@example.com", ADDRESS, 1_000).is_err());
        // 4 + 5 failures count against the address; the success does not.
        for n in 0..11 {
            fail(
                &throttle,
                &format!("user{n}@example.com"),
                ADDRESS,
                1_000,
                1,
            );
        }
        assert!(throttle.admit("cy@example.com", ADDRESS, 1_000).is_err());
    }

    #[test]
    fn an_unchecked_attempt_does_not_count() {
        let throttle = LoginThrottle::new(limits());
        for _ in 0..50 {
            let attempt = throttle.admit("ana@example.com", ADDRESS, 1_000).unwrap();
            throttle.settle(attempt, AttemptOutcome::Unchecked);
        }
        fail(&throttle, "ana@example.com", ADDRESS, 1_000, 5);
    }

    #[test]
    fn ipv6_addresses_of_one_64_share_a_counter_and_mapped_ipv4_is_ipv4() {
        let throttle = LoginThrottle::new(limits());
        for host in 0..5u16 {
            let address = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, host));
            fail(&throttle, "ana@example.com", address, 1_000, 1);
        }
        let same_64 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 9, 9, 9, 9));
        assert!(throttle.admit("ana@example.com", same_64, 1_000).is_err());
        let next_64 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 2, 0, 0, 0, 1));
        assert!(throttle.admit("ana@example.com", next_64, 1_000).is_ok());

        fail(&throttle, "bo@example.com", ADDRESS, 1_000, 5);
        let mapped = IpAddr::V6(Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped());
        assert!(throttle.admit("bo@example.com", mapped, 1_000).is_err());
    }

    /// Limits under which every failure locks its three keys.
    fn one_strike(max_tracked: usize) -> ThrottleLimits {
        ThrottleLimits {
            per_account_and_address: 1,
            per_account: 1,
            per_address: 1,
            max_tracked,
            ..limits()
        }
    }

    /// The `n`th of many client addresses.
    fn address(n: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n))
    }

    #[test]
    fn a_locked_account_stays_locked_through_a_flood_past_the_cap() {
        let throttle = LoginThrottle::new(ThrottleLimits {
            max_tracked: 400,
            ..limits()
        });
        // The attack: lock the account (4 addresses, 5 failures each), then
        // flood failed sign-ins with other e-mails from other addresses,
        // hoping the lock is forgotten to make room.
        for host in 0..4 {
            let address = IpAddr::V4(Ipv4Addr::new(203, 0, 113, host));
            fail(&throttle, "ana@example.com", address, 1_000, 5);
        }
        fail(&throttle, "bo@example.com", ADDRESS, 1_000, 5);
        for n in 0..10_000u32 {
            let now = 1_001 + i64::from(n / 100);
            let flood = throttle.admit(&format!("x{n}@example.com"), address(n), now);
            assert!(flood.is_ok(), "flood attempt {n}: {flood:?}");
            assert!(throttle.tracked() <= 400, "{} keys", throttle.tracked());
        }
        let owner = throttle.admit("ana@example.com", OTHER, 1_200);
        assert_eq!(owner.unwrap_err(), Throttled { retry_after: 700 });
        let pair = throttle.admit("bo@example.com", ADDRESS, 1_899);
        assert_eq!(pair.unwrap_err(), Throttled { retry_after: 1 });
        // Until its window ends, and no longer.
        assert!(throttle.admit("ana@example.com", OTHER, 1_900).is_ok());
        assert!(throttle.admit("bo@example.com", ADDRESS, 1_900).is_ok());
    }

    #[test]
    fn past_the_cap_the_windows_with_the_fewest_failures_go_first() {
        let throttle = LoginThrottle::new(ThrottleLimits {
            max_tracked: 40,
            ..limits()
        });
        // 4 failures of one pair (one short of its lock), 2 and 3 failures
        // of others: the oldest windows.
        fail(&throttle, "ana@example.com", ADDRESS, 100, 4);
        fail(&throttle, "bo@example.com", OTHER, 100, 2);
        fail(&throttle, "cy@example.com", address(1), 100, 3);
        // 30 newer keys of one failure each fill the cap but one.
        for n in 0..10u32 {
            fail(
                &throttle,
                &format!("new{n}@example.com"),
                address(100 + n),
                900,
                1,
            );
        }
        assert_eq!(throttle.tracked(), 39);
        // The next attempt needs 3 keys: 9 windows of one failure go, down
        // to three quarters (30), then its 3 come.
        fail(&throttle, "last@example.com", address(200), 900, 1);
        assert_eq!(throttle.tracked(), 30 + 3);
        // Every key with more than one failure is still counted: one more
        // failure locks ana's pair, and bo and cy have theirs.
        fail(&throttle, "ana@example.com", ADDRESS, 900, 1);
        assert!(throttle.admit("ana@example.com", ADDRESS, 900).is_err());
        fail(&throttle, "bo@example.com", OTHER, 900, 3);
        assert!(throttle.admit("bo@example.com", OTHER, 900).is_err());
        fail(&throttle, "cy@example.com", address(1), 900, 2);
        assert!(throttle.admit("cy@example.com", address(1), 900).is_err());
    }

    #[test]
    fn ended_windows_are_forgotten_before_any_open_one() {
        let throttle = LoginThrottle::new(ThrottleLimits {
            max_tracked: 12,
            ..limits()
        });
        // Six keys whose window ends at 900, six whose ends at 1,400.
        fail(&throttle, "a@example.com", address(1), 0, 1);
        fail(&throttle, "b@example.com", address(2), 0, 1);
        fail(&throttle, "c@example.com", address(3), 500, 1);
        fail(&throttle, "d@example.com", address(4), 500, 1);
        // The ended six go, and nothing else needs to.
        fail(&throttle, "e@example.com", address(5), 950, 1);
        assert_eq!(throttle.tracked(), 9);
        fail(&throttle, "c@example.com", address(3), 950, 4);
        assert!(throttle.admit("c@example.com", address(3), 950).is_err());
    }

    #[test]
    fn past_the_cap_exactly_the_excess_goes_among_equal_counts() {
        let throttle = LoginThrottle::new(ThrottleLimits {
            max_tracked: 24,
            ..limits()
        });
        // 3 keys of one failure, 21 of two: full.
        fail(&throttle, "a@example.com", address(1), 1_000, 1);
        for n in 2..9 {
            fail(
                &throttle,
                &format!("u{n}@example.com"),
                address(n),
                1_000,
                2,
            );
        }
        assert_eq!(throttle.tracked(), 24);
        // Down to 18: the three of one failure, then three of the 21.
        fail(&throttle, "new@example.com", address(99), 1_000, 1);
        assert_eq!(throttle.tracked(), 18 + 3);
    }

    #[test]
    fn a_window_that_ended_starts_over_at_the_next_failure() {
        let throttle = LoginThrottle::new(limits());
        fail(&throttle, "ana@example.com", ADDRESS, 1_000, 5);
        fail(&throttle, "ana@example.com", ADDRESS, 1_900, 5);
        let refused = throttle.admit("ana@example.com", ADDRESS, 1_900);
        assert_eq!(refused.unwrap_err(), Throttled { retry_after: 900 });
    }

    #[test]
    fn with_every_key_locked_a_new_key_is_refused_until_the_first_lock_ends() {
        let throttle = LoginThrottle::new(one_strike(12));
        for n in 0..4u32 {
            let now = 1_000 + i64::from(n) * 10;
            fail(&throttle, &format!("u{n}@example.com"), address(n), now, 1);
        }
        assert_eq!(throttle.tracked(), 12);
        // No key can be dropped: refused, not admitted uncounted, until the
        // first lock (opened at 1,000) ends at 1,900.
        for now in [1_050, 1_899] {
            let refused = throttle.admit("new@example.com", address(9), now);
            assert_eq!(
                refused.unwrap_err(),
                Throttled {
                    retry_after: u64::try_from(1_900 - now).unwrap()
                },
                "at {now}"
            );
        }
        assert_eq!(throttle.tracked(), 12, "a refusal adds no key");
        let admitted = throttle.admit("new@example.com", address(9), 1_900);
        assert!(admitted.is_ok(), "{admitted:?}");
        // The other three locks still hold.
        let locked = throttle.admit("u3@example.com", OTHER, 1_900);
        assert_eq!(locked.unwrap_err(), Throttled { retry_after: 30 });
    }

    #[test]
    fn a_full_throttle_still_admits_attempts_whose_keys_it_holds() {
        let throttle = LoginThrottle::new(ThrottleLimits {
            max_tracked: 6,
            ..limits()
        });
        fail(&throttle, "ana@example.com", ADDRESS, 1_000, 1);
        fail(&throttle, "bo@example.com", OTHER, 1_000, 1);
        assert_eq!(throttle.tracked(), 6);
        // Needs no new key: admitted without making room.
        fail(&throttle, "ana@example.com", ADDRESS, 1_000, 3);
        assert_eq!(throttle.tracked(), 6);
        // Needs three: bo's keys (one failure each) make room; ana's stay.
        fail(&throttle, "cy@example.com", address(1), 1_000, 1);
        fail(&throttle, "ana@example.com", ADDRESS, 1_000, 1);
        assert!(throttle.admit("ana@example.com", ADDRESS, 1_000).is_err());
    }

    #[test]
    fn an_attempt_never_takes_the_counters_past_the_cap() {
        let throttle = LoginThrottle::new(ThrottleLimits {
            per_address: 5,
            ..one_strike(6)
        });
        // Two locked pairs and accounts; the two addresses are not locked.
        fail(&throttle, "a@example.com", address(1), 1_000, 1);
        fail(&throttle, "b@example.com", address(2), 1_000, 1);
        // c needs two new keys and holds its address's, the only ones that
        // can go: with both addresses gone, four locks leave room for two
        // keys, not three.
        let refused = throttle.admit("c@example.com", address(1), 1_000);
        assert_eq!(refused.unwrap_err(), Throttled { retry_after: 900 });
        assert!(throttle.tracked() <= 6, "{} keys", throttle.tracked());
    }

    #[test]
    fn an_attempt_with_a_locked_key_is_told_its_own_lock_not_the_full_map() {
        // A full map and a locked key of this attempt: the lock answers,
        // with its own window's end, not the map's.
        let throttle = LoginThrottle::new(one_strike(6));
        fail(&throttle, "ana@example.com", ADDRESS, 1_000, 1);
        fail(&throttle, "bo@example.com", OTHER, 1_100, 1);
        let refused = throttle.admit("bo@example.com", address(1), 1_200);
        assert_eq!(refused.unwrap_err(), Throttled { retry_after: 800 });
    }

    #[test]
    fn attempts_that_were_never_checked_leave_no_key() {
        let throttle = LoginThrottle::new(limits());
        for n in 0..1_000u32 {
            let attempt = throttle
                .admit(&format!("x{n}@example.com"), address(n), 1_000)
                .unwrap();
            throttle.settle(attempt, AttemptOutcome::Unchecked);
        }
        assert_eq!(throttle.tracked(), 0);
        // A key that had failures of its own keeps them.
        fail(&throttle, "ana@example.com", ADDRESS, 1_000, 2);
        let attempt = throttle.admit("bo@example.com", ADDRESS, 1_000).unwrap();
        throttle.settle(attempt, AttemptOutcome::Unchecked);
        assert_eq!(throttle.tracked(), 3, "ana's pair and account, the address");
        fail(&throttle, "ana@example.com", ADDRESS, 1_000, 3);
        assert!(throttle.admit("ana@example.com", ADDRESS, 1_000).is_err());
    }

    #[test]
    fn a_success_forgets_the_keys_it_alone_counted() {
        let throttle = LoginThrottle::new(limits());
        let attempt = throttle.admit("ana@example.com", ADDRESS, 1_000).unwrap();
        throttle.settle(attempt, AttemptOutcome::Succeeded);
        assert_eq!(throttle.tracked(), 0);
    }

    #[test]
    fn memory_is_bounded() {
        let throttle = LoginThrottle::new(ThrottleLimits {
            max_tracked: 400,
            ..limits()
        });
        for n in 0..10_000u32 {
            let now = 1_000 + i64::from(n / 100);
            let _ = throttle.admit(&format!("x{n}@example.com"), address(n), now);
            assert!(throttle.tracked() <= 400, "{} keys", throttle.tracked());
        }
        // A cap below one attempt's three keys is raised to hold them.
        let tiny = LoginThrottle::new(ThrottleLimits {
            max_tracked: 0,
            ..limits()
        });
        fail(&tiny, "ana@example.com", ADDRESS, 1_000, 1);
        fail(&tiny, "bo@example.com", OTHER, 1_000, 1);
        assert_eq!(tiny.tracked(), 4);
    }
}
