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
//! Everything here is pure decision logic over `now` (Unix seconds): the
//! caller reads the clock.

use std::collections::HashMap;
use std::hash::{BuildHasher as _, RandomState};
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard};

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

/// The answer to an attempt that may not be checked now.
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
pub enum Outcome {
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
}

/// The kinds of key, hashed first so that no two kinds share a key.
#[derive(Clone, Copy, Hash)]
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
            }),
        }
    }

    /// Admits a sign-in of `email` from `address` at `now` and counts it as
    /// a failure until it is [settled](Self::settle), or refuses it, counting nothing, while one of its keys is
    /// at its limit.
    ///
    /// Counting before the password is checked means that concurrent
    /// attempts cannot all slip in under the limit.
    ///
    /// # Errors
    /// [`Throttled`], with the seconds until the attempt would be admitted.
    pub fn admit(&self, email: &str, address: IpAddr, now: i64) -> Result<Attempt, Throttled> {
        let keys = self.keys(email, address);
        let limits = [
            self.limits.per_account_and_address,
            self.limits.per_account,
            self.limits.per_address,
        ];
        let mut state = self.lock();
        let window = self.limits.window_seconds;
        let locked_until = keys
            .iter()
            .zip(limits)
            .filter_map(|(key, limit)| state.windows.get(key).map(|w| (w, limit)))
            .filter(|(w, limit)| now < w.started + window && w.failures >= *limit)
            .map(|(w, _)| w.started + window)
            .max();
        if let Some(until) = locked_until {
            return Err(Throttled {
                retry_after: u64::try_from(until - now).unwrap_or(1).max(1),
            });
        }
        state.make_room(now, window, self.limits.max_tracked, keys.len());
        let counted = keys.map(|key| {
            let entry = state.windows.entry(key).or_insert(Window {
                started: now,
                failures: 0,
            });
            if now >= entry.started + window {
                *entry = Window {
                    started: now,
                    failures: 0,
                };
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
    /// An attempt whose password was never checked does not count.
    pub fn settle(&self, attempt: Attempt, outcome: Outcome) {
        let mut state = self.lock();
        let [(pair, started), rest @ ..] = attempt.counted;
        match outcome {
            Outcome::Failed => {}
            Outcome::Succeeded => {
                if state
                    .windows
                    .get(&pair)
                    .is_some_and(|w| w.started == started)
                {
                    state.windows.remove(&pair);
                }
                state.uncount(&rest);
            }
            Outcome::Unchecked => state.uncount(&attempt.counted),
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
    /// counted in.
    fn uncount(&mut self, counted: &[(u64, i64)]) {
        for (key, started) in counted {
            if let Some(window) = self.windows.get_mut(key)
                && window.started == *started
            {
                window.failures = window.failures.saturating_sub(1);
            }
        }
    }

    /// Makes room for `needed` new keys under `max`: first forgets every
    /// closed window; if the counters are still more than three quarters
    /// full, forgets the oldest windows (the nearest to closing anyway) down
    /// to three quarters. Each pass over the map frees at least a quarter of
    /// it, so the cost per attempt stays constant on average.
    fn make_room(&mut self, now: i64, window: i64, max: usize, needed: usize) {
        if self.windows.len() + needed <= max {
            return;
        }
        self.windows.retain(|_, w| now < w.started + window);
        let target = max / 4 * 3;
        if self.windows.len() <= target {
            return;
        }
        let mut starts: Vec<i64> = self.windows.values().map(|w| w.started).collect();
        let excess = self.windows.len() - target;
        let (_, cutoff, _) = starts.select_nth_unstable(excess - 1);
        let cutoff = *cutoff;
        // Windows that opened in the same second as the cutoff may go too:
        // forgetting a little more than needed is harmless.
        self.windows.retain(|_, w| w.started > cutoff);
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
        throttle.settle(attempt, Outcome::Succeeded);
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
            throttle.settle(attempt, Outcome::Unchecked);
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

    #[test]
    fn memory_is_bounded_and_closed_windows_are_forgotten_first() {
        let throttle = LoginThrottle::new(ThrottleLimits {
            max_tracked: 400,
            ..limits()
        });
        // A locked pair, then a flood of other e-mails from other addresses
        // within the same window.
        fail(&throttle, "ana@example.com", ADDRESS, 1_000, 5);
        for n in 0..10_000u32 {
            let address = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n));
            let now = 1_001 + i64::from(n / 100);
            let _ = throttle.admit(&format!("x{n}@example.com"), address, now);
            assert!(throttle.tracked() <= 400, "{} keys", throttle.tracked());
        }
        // The price of the bound: the oldest counters were forgotten first.
        assert!(throttle.admit("ana@example.com", ADDRESS, 1_200).is_ok());

        // Closed windows go before open ones.
        let throttle = LoginThrottle::new(ThrottleLimits {
            max_tracked: 400,
            ..limits()
        });
        for n in 0..100u32 {
            let address = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n));
            let _ = throttle.admit(&format!("x{n}@example.com"), address, 0);
        }
        fail(&throttle, "ana@example.com", ADDRESS, 900, 5);
        for n in 0..33u32 {
            let address = IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + n));
            let _ = throttle.admit(&format!("y{n}@example.com"), address, 901);
        }
        assert!(throttle.tracked() <= 400, "{} keys", throttle.tracked());
        assert!(throttle.admit("ana@example.com", ADDRESS, 901).is_err());
    }
}
