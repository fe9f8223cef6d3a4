//! The password check of our sign-in form, behind a trait: the form asks a
//! [`PasswordVerifier`] and never hashes anything itself, so a host can
//! bring its own function (or the `argon2` feature's
//! `Argon2Verifier`).

use async_trait::async_trait;

/// What a password check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PasswordCheck {
    /// The password matches the hash.
    Matches,
    /// It does not, or there was no hash to match.
    DoesNotMatch,
    /// The check could not start in time (too many ran at once): the form
    /// answers 503 with `Retry-After`, and the attempt is not counted as a
    /// failure.
    Busy {
        /// Seconds to wait before trying again (at least 1).
        retry_after: u64,
    },
}

/// Checks account passwords against their stored hashes
/// ([`crate::Account::password_hash`]).
///
/// Called by the sign-in form once per admitted attempt (after the CSRF
/// check and the throttle), so an implementation may be slow on purpose.
/// It must bound its own concurrency and answer
/// [`PasswordCheck::Busy`] rather than queue without end.
#[async_trait]
pub trait PasswordVerifier: Send + Sync {
    /// Whether `password` matches `hash`. With no hash (an unknown e-mail,
    /// or an account without a password) the answer is
    /// [`PasswordCheck::DoesNotMatch`], but only after as much work as a
    /// real check: the answer's timing must not tell which e-mails have
    /// accounts.
    async fn verify(&self, password: &str, hash: Option<&str>) -> PasswordCheck;
}
