//! Account passwords with Argon2id (feature `argon2`): hashing and checking
//! ([`Argon2Passwords`]), the bound on how many checks run at once and on
//! their memory ([`HashingLimit`]), and both together as the sign-in form's
//! [`PasswordVerifier`] ([`Argon2Verifier`]).

use std::fmt;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use argon2::password_hash::SaltString;
use argon2::{Algorithm, Argon2, Block, Params, PasswordHash, PasswordHasher as _, Version};
use async_trait::async_trait;
use subtle::ConstantTimeEq as _;
use tokio::sync::Semaphore;

use crate::random::{OsRandom, RandomSource, random_token};
use crate::signin::password::{PasswordCheck, PasswordVerifier};

/// Hashes and checks account passwords with Argon2id, a function made for
/// passwords: slow and memory-hard, unlike the keyed SHA-256 of the core's
/// high-entropy secrets.
#[derive(Clone)]
pub struct Argon2Passwords {
    argon2: Argon2<'static>,
    /// A hash of a random password, checked for unknown accounts.
    dummy: String,
    /// Draws the salts.
    random: Arc<dyn RandomSource>,
}

impl fmt::Debug for Argon2Passwords {
    // Not derived: the dummy hash is nobody's business.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Argon2Passwords")
            .field("params", self.argon2.params())
            .finish_non_exhaustive()
    }
}

impl Argon2Passwords {
    /// Argon2id with `memory_kib` KiB, `iterations` passes and one lane.
    /// OWASP's recommendation is 19 MiB and 2 passes ([`Self::recommended`]);
    /// tests use the minimum, which is fast and must never guard a real
    /// password. Salts come from the operating system
    /// ([`Self::with_random`] replaces it).
    ///
    /// # Panics
    /// If the parameters are outside Argon2's (fewer than 8 KiB or no pass).
    pub fn new(memory_kib: u32, iterations: u32) -> Self {
        let params = Params::new(memory_kib, iterations, 1, None).expect("valid Argon2 parameters");
        let argon2 = Argon2::new(Algorithm::Argon2id, argon2::Version::V0x13, params);
        let mut passwords = Self {
            argon2,
            dummy: String::new(),
            random: Arc::new(OsRandom),
        };
        passwords.dummy = passwords.hash(&random_token(&OsRandom, 16));
        passwords
    }

    /// Replaces the source of the salts (tests use a seeded one).
    pub fn with_random(mut self, random: Arc<dyn RandomSource>) -> Self {
        self.random = random;
        self
    }

    /// OWASP's parameters for Argon2id: 19 MiB, 2 passes, 1 lane.
    pub fn recommended() -> Self {
        Self::new(19 * 1024, 2)
    }

    /// The PHC string of `password` with a fresh random salt.
    pub fn hash(&self, password: &str) -> String {
        let mut salt = [0u8; 16];
        self.random.fill_bytes(&mut salt);
        let salt = SaltString::encode_b64(&salt).expect("16 bytes make a valid salt");
        self.argon2
            .hash_password(password.as_bytes(), &salt)
            .expect("Argon2 hashes any password")
            .to_string()
    }

    /// Whether `password` matches `hash` (a PHC string, whose own parameters
    /// are used). With no hash, a dummy one is checked and `false` returned.
    ///
    /// Argon2 works in `memory`, grown to the hash's memory cost if it is
    /// smaller, instead of in a fresh allocation: see [`HashingLimit`].
    pub fn verify(&self, password: &str, hash: Option<&str>, memory: &mut Vec<Block>) -> bool {
        match hash {
            Some(hash) => matches_in(password, hash, memory),
            None => {
                let _ = matches_in(password, &self.dummy, memory);
                false
            }
        }
    }
}

/// Whether `password` hashes to the PHC string `phc` under its own algorithm,
/// version, parameters and salt: what `PasswordVerifier::verify_password`
/// does, but with Argon2's working memory in `memory`.
fn matches_in(password: &str, phc: &str, memory: &mut Vec<Block>) -> bool {
    let Ok(parsed) = PasswordHash::new(phc) else {
        return false;
    };
    let (Some(salt), Some(expected)) = (parsed.salt, parsed.hash) else {
        return false;
    };
    let (Ok(algorithm), Ok(params)) = (
        Algorithm::try_from(parsed.algorithm),
        Params::try_from(&parsed),
    ) else {
        return false;
    };
    let Ok(version) = parsed
        .version
        .map_or(Ok(Version::default()), Version::try_from)
    else {
        return false;
    };
    let mut salt_bytes = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_bytes) else {
        return false;
    };
    if memory.len() < params.block_count() {
        memory.resize(params.block_count(), Block::default());
    }
    // At most 64 bytes: `Output`'s own bound.
    let mut computed = [0u8; 64];
    let computed = &mut computed[..expected.len()];
    Argon2::new(algorithm, version, params)
        .hash_password_into_with_memory(password.as_bytes(), salt, computed, memory.as_mut_slice())
        .is_ok()
        && bool::from(expected.as_bytes().ct_eq(computed))
}

/// A bound on the password checks running at once, and on their memory.
///
/// An Argon2 check at OWASP's parameters takes 19 MiB and a core for its
/// whole run: unbounded, a flood of concurrent sign-ins for unknown e-mails
/// took the server to gigabytes. With the bound, a check waits for a slot up
/// to `wait`, then the sign-in is refused (503, `Retry-After`) rather than
/// queued without end.
///
/// Each slot keeps its 19 MiB of Argon2 memory from one check to the next.
/// Allocating it per check let the allocator's fragmentation grow the
/// process to 0.8 GB under a 48-client flood even with two checks at a time;
/// reused, the memory of checks stays at one array per slot.
#[derive(Clone)]
pub struct HashingLimit {
    permits: Arc<Semaphore>,
    /// Argon2 working memory, one array per check running (never more
    /// arrays than permits: one is taken and put back under a permit).
    memory: Arc<Mutex<Vec<Vec<Block>>>>,
    wait: Duration,
}

impl fmt::Debug for HashingLimit {
    // Not derived: that would print megabytes of Argon2 memory.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HashingLimit")
            .field("available", &self.permits.available_permits())
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

/// No password check could start in time.
#[derive(Clone, Copy, Debug)]
pub struct Busy {
    /// Seconds to wait before trying again.
    pub retry_after: u64,
}

impl HashingLimit {
    /// One check per permit of `permits` at a time; a check waits for one at
    /// most `wait`.
    pub fn new(permits: Arc<Semaphore>, wait: Duration) -> Self {
        Self {
            permits,
            memory: Arc::default(),
            wait,
        }
    }

    /// One check per core at a time (more would only queue for the CPU, and
    /// hold their memory meanwhile), each waiting at most 2 seconds.
    pub fn per_core() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        Self::new(Arc::new(Semaphore::new(cores)), Duration::from_secs(2))
    }

    /// The `Retry-After` of a refused check: the wait, rounded up to whole
    /// seconds.
    fn retry_after(&self) -> u64 {
        let seconds = self.wait.as_secs() + u64::from(self.wait.subsec_nanos() > 0);
        seconds.max(1)
    }

    /// Checks `password` against `hash` with `passwords` in a blocking
    /// thread (Argon2 is slow on purpose), within this limit. With no hash
    /// (an unknown account), a dummy hash is checked, so the answer's timing
    /// does not tell which e-mails have accounts.
    ///
    /// # Errors
    /// [`Busy`] when no check could start within the limit's wait.
    pub async fn verify(
        &self,
        passwords: &Arc<Argon2Passwords>,
        password: &str,
        hash: Option<String>,
    ) -> Result<bool, Busy> {
        let busy = Busy {
            retry_after: self.retry_after(),
        };
        let permit = self.permits.clone().acquire_owned();
        let permit = match tokio::time::timeout(self.wait, permit).await {
            Ok(Ok(permit)) => permit,
            // Waited too long (the semaphore is never closed).
            Ok(Err(_)) | Err(_) => return Err(busy),
        };
        let passwords = passwords.clone();
        let password = password.to_owned();
        let pool = self.memory.clone();
        let verified = tokio::task::spawn_blocking(move || {
            // Held until the hash is computed, even if the request is
            // dropped meanwhile (a client that hangs up does not free a
            // slot while its check still runs).
            let _permit = permit;
            let take = || pool.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let mut memory = take().pop().unwrap_or_default();
            let verified = passwords.verify(&password, hash.as_deref(), &mut memory);
            take().push(memory);
            verified
        });
        Ok(verified.await.unwrap_or(false))
    }
}

/// The sign-in form's [`PasswordVerifier`]: [`Argon2Passwords`] within a
/// [`HashingLimit`].
#[derive(Clone, Debug)]
pub struct Argon2Verifier {
    passwords: Arc<Argon2Passwords>,
    limit: HashingLimit,
}

impl Argon2Verifier {
    /// Checks with `passwords`, at most as many at once as `limit` allows.
    pub fn new(passwords: Argon2Passwords, limit: HashingLimit) -> Self {
        Self {
            passwords: Arc::new(passwords),
            limit,
        }
    }

    /// The hashing half, for a host that sets passwords.
    pub fn passwords(&self) -> &Argon2Passwords {
        &self.passwords
    }
}

#[async_trait]
impl PasswordVerifier for Argon2Verifier {
    async fn verify(&self, password: &str, hash: Option<&str>) -> PasswordCheck {
        let hash = hash.map(str::to_owned);
        match self.limit.verify(&self.passwords, password, hash).await {
            Ok(true) => PasswordCheck::Matches,
            Ok(false) => PasswordCheck::DoesNotMatch,
            Err(Busy { retry_after }) => PasswordCheck::Busy { retry_after },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_verified_in_reused_memory_as_argon2_verifies_them() {
        use argon2::PasswordVerifier as _;
        let passwords = Argon2Passwords::new(8, 1);
        let mut memory = Vec::new();
        let hash = passwords.hash("correct horse");
        assert!(passwords.verify("correct horse", Some(&hash), &mut memory));
        assert_eq!(memory.len(), 8, "one block per KiB");
        assert!(!passwords.verify("correct horsE", Some(&hash), &mut memory));
        assert!(!passwords.verify("correct horse", None, &mut memory));
        assert!(!passwords.verify("x", Some("$argon2id$v=19$garbage"), &mut memory));
        // A hash with other parameters is checked with its own, in memory
        // grown to fit; the crate's own verifier agrees.
        let costlier = Argon2Passwords::new(32, 2).hash("battery staple");
        assert!(passwords.verify("battery staple", Some(&costlier), &mut memory));
        assert_eq!(memory.len(), 32);
        assert!(passwords.verify("correct horse", Some(&hash), &mut memory));
        let parsed = PasswordHash::new(&costlier).unwrap();
        assert!(
            Argon2::default()
                .verify_password(b"battery staple", &parsed)
                .is_ok()
        );
    }

    #[tokio::test]
    async fn a_check_beyond_the_bound_is_busy_and_gives_its_slot_back() {
        let slot = Arc::new(Semaphore::new(1));
        let limit = HashingLimit::new(slot.clone(), Duration::from_millis(20));
        let verifier = Argon2Verifier::new(Argon2Passwords::new(8, 1), limit);
        let hash = verifier.passwords().hash("pw");
        assert_eq!(
            verifier.verify("pw", Some(&hash)).await,
            PasswordCheck::Matches
        );
        assert_eq!(
            verifier.verify("nope", None).await,
            PasswordCheck::DoesNotMatch
        );
        let held = slot.clone().try_acquire_owned().unwrap();
        assert_eq!(
            verifier.verify("pw", Some(&hash)).await,
            PasswordCheck::Busy { retry_after: 1 }
        );
        drop(held);
        assert_eq!(slot.available_permits(), 1);
    }
}
