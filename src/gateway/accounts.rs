//! Accounts: the `Gateway` methods a host's sign-up and sign-in use.

use crate::account::{Account, AccountId};
use crate::gateway::Gateway;
use crate::store::error::StoreError;

impl Gateway {
    /// Stores a new account.
    ///
    /// # Errors
    /// The store's error (`Duplicate` for a taken e-mail).
    pub async fn create_account(&self, account: &Account) -> Result<(), StoreError> {
        self.stores.accounts.insert_account(account).await
    }

    /// The account with this login e-mail (compared lowercased), for the
    /// host's login form.
    ///
    /// # Errors
    /// The store's error.
    pub async fn find_account_by_email(&self, email: &str) -> Result<Option<Account>, StoreError> {
        self.stores
            .accounts
            .find_account_by_email(&email.trim().to_lowercase())
            .await
    }

    /// The account with this id, for a host that keeps the id in a session.
    ///
    /// # Errors
    /// The store's error.
    pub async fn find_account(&self, id: AccountId) -> Result<Option<Account>, StoreError> {
        self.stores.accounts.find_account(id).await
    }
}
