//! An account created with a password of the service's drawing: what an
//! operator's command or a host's seed does, so that each takes the same
//! care (the e-mail checked first and again by the store, the password
//! random and stored only as its Argon2id hash).

use crate::account::Account;
use crate::gateway::Gateway;
use crate::random::{RandomSource, random_token};
use crate::signin::argon2::Argon2Passwords;
use crate::store::error::StoreError;

/// Random bytes in a drawn password: 144 bits, 24 characters of base64url.
pub const PASSWORD_BYTES: usize = 18;

/// Why [`create_account_with_password`] created nothing.
#[derive(Debug, thiserror::Error)]
pub enum AccountCreationError {
    /// An account holds this login e-mail already (compared lowercased).
    #[error("an account with the e-mail {0} exists already")]
    EmailTaken(String),
    /// The store failed; nothing was created.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Stores `account` with a password drawn from `random`
/// ([`PASSWORD_BYTES`]), kept only as its hash under `passwords`, and
/// returns the password: show it once to its owner, never log it.
///
/// # Errors
/// [`AccountCreationError::EmailTaken`] when an account holds the e-mail,
/// found before hashing or, when another creation won the race, by the
/// store; [`AccountCreationError::Store`] for a store failure.
pub async fn create_account_with_password(
    gateway: &Gateway,
    mut account: Account,
    passwords: &Argon2Passwords,
    random: &dyn RandomSource,
) -> Result<(Account, String), AccountCreationError> {
    let taken = |account: &Account| AccountCreationError::EmailTaken(account.email.clone());
    if gateway
        .find_account_by_email(&account.email)
        .await?
        .is_some()
    {
        return Err(taken(&account));
    }
    let password = random_token(random, PASSWORD_BYTES);
    account.password_hash = Some(passwords.hash(&password));
    match gateway.create_account(&account).await {
        Ok(()) => Ok((account, password)),
        // Created by someone else since the look-up.
        Err(StoreError::Duplicate { .. }) => Err(taken(&account)),
        Err(error) => Err(error.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GatewayConfig;
    use crate::gateway::Stores;
    use crate::random::SeededRandom;
    use crate::secret::SecretHasher;

    fn gateway() -> Gateway {
        Gateway::new(
            GatewayConfig::new("https://api.example.com"),
            Stores::in_memory(),
            SecretHasher::new([0x5e; 32]),
        )
    }

    /// Cheap parameters: the tests check the flow, not Argon2's cost.
    fn passwords() -> Argon2Passwords {
        Argon2Passwords::new(64, 1)
    }

    #[tokio::test]
    async fn the_account_is_stored_with_the_hash_of_the_password_it_returns() {
        let gateway = gateway();
        let random = SeededRandom::from_seed([1; 32]);
        let account = Account::new("Acme", "Owner@Example.com", &random);
        let (created, password) =
            create_account_with_password(&gateway, account, &passwords(), &random)
                .await
                .expect("created");
        assert_eq!(password.len(), 24, "18 bytes of base64url");
        let stored = gateway
            .find_account_by_email("owner@example.com")
            .await
            .expect("the store answers")
            .expect("stored");
        assert_eq!(stored.id, created.id);
        let hash = stored.password_hash.as_deref();
        assert!(
            hash.is_some_and(|hash| !hash.contains(&password)),
            "a hash, not the password"
        );
        let mut memory = Vec::new();
        assert!(passwords().verify(&password, hash, &mut memory));
        assert!(!passwords().verify("another password", hash, &mut memory));
    }

    #[tokio::test]
    async fn a_taken_email_creates_nothing_and_says_so() {
        let gateway = gateway();
        let random = SeededRandom::from_seed([2; 32]);
        let first = Account::new("First", "owner@example.com", &random);
        create_account_with_password(&gateway, first, &passwords(), &random)
            .await
            .expect("created");
        let second = Account::new("Second", "OWNER@example.com", &random);
        let refused = create_account_with_password(&gateway, second, &passwords(), &random).await;
        match refused {
            Err(AccountCreationError::EmailTaken(email)) => assert_eq!(email, "owner@example.com"),
            other => panic!("expected EmailTaken, got {other:?}"),
        }
        let kept = gateway
            .find_account_by_email("owner@example.com")
            .await
            .expect("the store answers")
            .expect("the first account");
        assert_eq!(kept.name, "First");
    }
}
