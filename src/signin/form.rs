//! Our sign-in form's check ([`FormSignIn`]): the throttle, then the account
//! store, then the password, in order of cost, so that a refused attempt
//! costs neither of the last two.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use crate::account::Account;
use crate::gateway::Gateway;
use crate::signin::password::{PasswordCheck, PasswordVerifier};
use crate::signin::throttle::{AttemptOutcome, LoginThrottle, ThrottleLimits, Throttled};
use crate::signin::view::Notice;
use crate::store::error::StoreError;

/// Our sign-in: e-mail and password, checked by a [`PasswordVerifier`]
/// behind a [`LoginThrottle`]. One per server, shared by the dialog and the
/// account page, so both count against the same limits.
pub struct FormSignIn {
    throttle: LoginThrottle,
    passwords: Arc<dyn PasswordVerifier>,
}

impl fmt::Debug for FormSignIn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FormSignIn")
            .field("throttle", &self.throttle)
            .finish_non_exhaustive()
    }
}

/// Why a sign-in did not go through.
#[derive(Debug)]
pub enum SignInRefused {
    /// Shown on the sign-in page: a wrong password, throttled, or busy.
    Notice(Notice),
    /// The store failed (503).
    Store(StoreError),
}

impl FormSignIn {
    /// Passwords checked by `passwords`, failures throttled within `limits`.
    pub fn new(passwords: Arc<dyn PasswordVerifier>, limits: ThrottleLimits) -> Self {
        Self {
            throttle: LoginThrottle::new(limits),
            passwords,
        }
    }

    /// Checks a sign-in of `email` with `password` from `peer` at `now`
    /// (Unix seconds), against the accounts of `gateway`. The caller has
    /// checked the form's CSRF token.
    ///
    /// # Errors
    /// [`SignInRefused`]: a notice for the page, or the store's failure.
    pub async fn sign_in(
        &self,
        gateway: &Gateway,
        email: &str,
        password: &str,
        peer: IpAddr,
        now: i64,
    ) -> Result<Account, SignInRefused> {
        let attempt = match self.throttle.admit(email, peer, now) {
            Ok(attempt) => attempt,
            Err(Throttled { retry_after }) => {
                return Err(SignInRefused::Notice(Notice::TooManyAttempts {
                    retry_after,
                }));
            }
        };
        let account = match gateway.find_account_by_email(email).await {
            Ok(account) => account,
            Err(error) => {
                self.throttle.settle(attempt, AttemptOutcome::Unchecked);
                return Err(SignInRefused::Store(error));
            }
        };
        let hash = account.as_ref().and_then(|a| a.password_hash.as_deref());
        match self.passwords.verify(password, hash).await {
            PasswordCheck::Matches => {}
            PasswordCheck::DoesNotMatch => {
                self.throttle.settle(attempt, AttemptOutcome::Failed);
                return Err(SignInRefused::Notice(Notice::WrongPassword));
            }
            PasswordCheck::Busy { retry_after } => {
                self.throttle.settle(attempt, AttemptOutcome::Unchecked);
                return Err(SignInRefused::Notice(Notice::Busy { retry_after }));
            }
        }
        // A verifier that says "matches" without a hash is wrong: no hash
        // never signs in.
        let Some(account) = account.filter(|a| a.password_hash.is_some()) else {
            self.throttle.settle(attempt, AttemptOutcome::Failed);
            return Err(SignInRefused::Notice(Notice::WrongPassword));
        };
        self.throttle.settle(attempt, AttemptOutcome::Succeeded);
        Ok(account)
    }
}
