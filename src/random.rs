//! Injected randomness: secrets and identifiers come from a [`RandomSource`].

use std::fmt;
use std::sync::Mutex;

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use uuid::Uuid;

/// A source of random bytes.
///
/// Production hosts use [`OsRandom`]; tests use [`SeededRandom`] so that every
/// run issues the same secrets.
pub trait RandomSource: Send + Sync + fmt::Debug {
    /// Fills `dest` with random bytes. Implementations used in production
    /// must be cryptographically secure.
    fn fill_bytes(&self, dest: &mut [u8]);
}

/// The operating system's secure random source (through `rand`'s thread-local
/// generator, a ChaCha CSPRNG seeded and periodically reseeded from the OS).
#[derive(Clone, Copy, Debug, Default)]
pub struct OsRandom;

impl RandomSource for OsRandom {
    fn fill_bytes(&self, dest: &mut [u8]) {
        rand::rng().fill_bytes(dest);
    }
}

/// A deterministic source seeded with a number: for tests only, never for
/// production secrets.
pub struct SeededRandom {
    rng: Mutex<StdRng>,
}

impl SeededRandom {
    /// A source that yields the same bytes for the same `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
        }
    }

    /// A source seeded with 256 bits, for values that must be derived again
    /// from a secret (a host's demo credentials derived from its server key
    /// survive restarts without being stored). As strong as the seed's secrecy.
    pub fn from_seed(seed: [u8; 32]) -> Self {
        Self {
            rng: Mutex::new(StdRng::from_seed(seed)),
        }
    }
}

impl fmt::Debug for SeededRandom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SeededRandom")
    }
}

impl RandomSource for SeededRandom {
    fn fill_bytes(&self, dest: &mut [u8]) {
        self.rng
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .fill_bytes(dest);
    }
}

/// `bytes` random bytes from `random`, base64url without padding: a token
/// for a cookie, a form or a generated password (16 bytes make 22
/// characters).
pub fn random_token(random: &dyn RandomSource, bytes: usize) -> String {
    use base64::Engine as _;
    let mut buffer = vec![0u8; bytes];
    random.fill_bytes(&mut buffer);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(buffer)
}

/// A version 4 UUID drawn from `random`.
pub fn random_uuid(random: &dyn RandomSource) -> Uuid {
    let mut bytes = [0u8; 16];
    random.fill_bytes(&mut bytes);
    uuid::Builder::from_random_bytes(bytes).into_uuid()
}

/// A version 7 UUID (RFC 9562 section 5.7) for a record created at `at`:
/// its first 48 bits are the milliseconds since the Unix epoch, the other
/// 74 of its 122 free bits come from `random`.
///
/// Records keyed by such identifiers are inserted at the end of their
/// index, not at a random place in it: a group of events recorded together
/// then writes a page or two of the index instead of one page per event,
/// which is most of what SQLite's write-ahead log and PostgreSQL's WAL
/// wrote per event with random (version 4) identifiers. The time it gives
/// away is when the service received the event, which the client knows.
pub fn time_ordered_uuid(at: time::OffsetDateTime, random: &dyn RandomSource) -> Uuid {
    let millis = u64::try_from(at.unix_timestamp_nanos() / 1_000_000).unwrap_or(0);
    let mut bytes = [0u8; 10];
    random.fill_bytes(&mut bytes);
    uuid::Builder::from_unix_timestamp_millis(millis, &bytes).into_uuid()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_ordered_uuids_sort_by_their_millisecond() {
        let random = SeededRandom::new(7);
        let at = time::macros::datetime!(2026-11-24 12:00:00.001 UTC);
        let first = time_ordered_uuid(at, &random);
        let later = time_ordered_uuid(at + time::Duration::milliseconds(1), &random);
        assert_eq!(first.get_version_num(), 7, "{first}");
        assert!(first < later, "{first} then {later}");
        let (seconds, nanos) = first.get_timestamp().expect("a v7 timestamp").to_unix();
        assert_eq!((seconds, nanos), (at.unix_timestamp() as u64, 1_000_000));
        assert_ne!(
            first,
            time_ordered_uuid(at, &random),
            "random below the millisecond"
        );
    }

    #[test]
    fn seeded_random_is_reproducible() {
        let (a, b) = (SeededRandom::new(42), SeededRandom::new(42));
        let (mut x, mut y) = ([0u8; 32], [0u8; 32]);
        a.fill_bytes(&mut x);
        b.fill_bytes(&mut y);
        assert_eq!(x, y);
        a.fill_bytes(&mut y);
        assert_ne!(x, y, "the stream moves on");
    }

    #[test]
    fn a_256_bit_seed_is_reproducible() {
        let (mut x, mut y) = ([0u8; 32], [0u8; 32]);
        SeededRandom::from_seed([9; 32]).fill_bytes(&mut x);
        SeededRandom::from_seed([9; 32]).fill_bytes(&mut y);
        assert_eq!(x, y);
        SeededRandom::from_seed([8; 32]).fill_bytes(&mut y);
        assert_ne!(x, y);
    }

    #[test]
    fn os_random_differs_between_calls() {
        let (mut x, mut y) = ([0u8; 32], [0u8; 32]);
        OsRandom.fill_bytes(&mut x);
        OsRandom.fill_bytes(&mut y);
        assert_ne!(x, y);
    }

    #[test]
    fn random_uuid_is_version_4() {
        let id = random_uuid(&SeededRandom::new(1));
        assert_eq!(id.get_version_num(), 4);
        assert_ne!(id, random_uuid(&SeededRandom::new(2)));
    }
}
