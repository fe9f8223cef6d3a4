//! API keys: the `Gateway` methods that issue, list and switch them, and
//! why a key was not issued. The key's stored record, [`ApiKeyRecord`], is
//! in [`crate::records::api_key`].

use crate::account::AccountId;
use crate::answer::{AnswerContext, HttpAnswer, ToHttpAnswer};
use crate::gateway::Gateway;
use crate::records::api_key::{ApiKeyId, ApiKeyRecord};
use crate::secret::ApiKey;
use crate::store::error::StoreError;

/// Why [`crate::Gateway::issue_api_key`] issued no key.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiKeyError {
    /// The account already holds
    /// [`crate::GatewayConfig::max_api_keys_per_account`] keys: switch one
    /// off or delete one first.
    #[error("the account already holds its maximum of {max} API keys")]
    LimitReached {
        /// The configured maximum.
        max: usize,
    },
    /// The store failed; no key was issued.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// `409 API_KEY_LIMIT_REACHED` (the account's state, not the request, is in
/// the way), or the store's answer. Exhaustive.
impl ToHttpAnswer for ApiKeyError {
    fn to_http_answer(&self, context: &AnswerContext<'_>) -> HttpAnswer {
        match self {
            ApiKeyError::LimitReached { .. } => {
                HttpAnswer::error(409, "API_KEY_LIMIT_REACHED", &self.to_string())
            }
            ApiKeyError::Store(error) => error.to_http_answer(context),
        }
    }
}

impl Gateway {
    /// Issues an API key for `account`: its record and the key itself, which
    /// is not kept and must be handed to the account owner now.
    ///
    /// # Errors
    /// [`ApiKeyError::LimitReached`] when the account already holds
    /// [`GatewayConfig::max_api_keys_per_account`](crate::config::GatewayConfig::max_api_keys_per_account) keys, or the store's error.
    pub async fn issue_api_key(
        &self,
        account: AccountId,
        label: &str,
    ) -> Result<(ApiKeyRecord, ApiKey), ApiKeyError> {
        let (record, key) = ApiKeyRecord::issue(
            account,
            label,
            self.clock.now(),
            &*self.random,
            &self.hasher,
        );
        self.import_api_key(&record).await?;
        Ok((record, key))
    }

    /// Stores an API key issued elsewhere, as it is: its id, account, label
    /// and hash under this gateway's key. For a host that moves its keys
    /// over from another installation, or derives a known key from its own
    /// key ([`ApiKeyRecord::issue`] with a seeded random source).
    /// [`Gateway::issue_api_key`] is the usual way in.
    ///
    /// # Errors
    /// [`ApiKeyError::LimitReached`] as for [`Gateway::issue_api_key`];
    /// [`StoreError::Duplicate`] (in [`ApiKeyError::Store`]) when a key has
    /// this id or hash already; else the store's error.
    pub async fn import_api_key(&self, record: &ApiKeyRecord) -> Result<(), ApiKeyError> {
        let max = self.config.max_api_keys_per_account;
        if self.stores.api_keys.insert_api_key(record, max).await? {
            Ok(())
        } else {
            Err(ApiKeyError::LimitReached { max })
        }
    }

    /// The API keys of `account`, switched on or off, oldest first: their
    /// records (ids, labels, hashes), never the keys themselves, which are
    /// not kept. For a host's settings page, beside
    /// [`Gateway::set_api_key_active`].
    ///
    /// # Errors
    /// The store's error.
    pub async fn list_api_keys(&self, account: AccountId) -> Result<Vec<ApiKeyRecord>, StoreError> {
        self.stores.api_keys.list_api_keys(account).await
    }

    /// Switches an API key off or back on. Returns whether it exists.
    ///
    /// Takes effect at once on this gateway: from the next request on, even
    /// when a request that read the key before the switch is still in
    /// flight. Other gateways on the same store may accept a key switched
    /// off for up to their [`GatewayConfig::api_key_cache_ttl`](crate::config::GatewayConfig::api_key_cache_ttl) (10 s by
    /// default).
    ///
    /// # Errors
    /// The store's error.
    pub async fn set_api_key_active(&self, id: ApiKeyId, active: bool) -> Result<bool, StoreError> {
        let changed = self.stores.api_keys.set_api_key_active(id, active).await;
        // Whatever the store answered, the next request asks it again. After
        // the store's write: a lookup in flight that read the key before it
        // finds the cache's generation changed, and caches nothing.
        self.api_key_cache.forget(id);
        changed
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::account::Account;
    use crate::config::GatewayConfig;
    use crate::gateway::Stores;
    use crate::random::SeededRandom;
    use crate::secret::SecretHasher;

    fn gateway() -> Gateway {
        Gateway::new(
            GatewayConfig::new("https://gateway.test"),
            Stores::in_memory(),
            SecretHasher::new([3; 32]),
        )
        .with_random(Arc::new(SeededRandom::new(7)))
    }

    #[tokio::test]
    async fn an_accounts_api_keys_are_listed_oldest_first_switched_off_included() {
        let gateway = gateway();
        let random = SeededRandom::new(9);
        let account = Account::new("Shop", "owner@shop.example", &random);
        gateway.create_account(&account).await.unwrap();
        let (first, _) = gateway.issue_api_key(account.id, "form").await.unwrap();
        let (second, _) = gateway.issue_api_key(account.id, "crm").await.unwrap();
        assert!(gateway.set_api_key_active(first.id, false).await.unwrap());
        let listed = gateway.list_api_keys(account.id).await.unwrap();
        let summary: Vec<_> = listed.iter().map(|k| (k.id, k.active)).collect();
        assert_eq!(
            summary,
            [(first.id, false), (second.id, true)],
            "{listed:?}"
        );
        let other = Account::new("Other", "other@shop.example", &random);
        let none = gateway.list_api_keys(other.id).await.unwrap();
        assert!(none.is_empty(), "{none:?}");
    }

    #[tokio::test]
    async fn an_imported_key_is_listed_once_and_counts_against_the_limit() {
        let mut config = GatewayConfig::new("https://gateway.test");
        config.max_api_keys_per_account = 1;
        let hasher = SecretHasher::new([3; 32]);
        let gateway = Gateway::new(config, Stores::in_memory(), hasher.clone());
        let random = SeededRandom::new(9);
        let account = Account::new("Shop", "owner@shop.example", &random);
        gateway.create_account(&account).await.unwrap();
        let now = time::OffsetDateTime::UNIX_EPOCH;
        let (record, _) = ApiKeyRecord::issue(account.id, "known", now, &random, &hasher);
        gateway.import_api_key(&record).await.unwrap();
        let listed = gateway.list_api_keys(account.id).await.unwrap();
        assert_eq!(listed, std::slice::from_ref(&record));
        let again = gateway.import_api_key(&record).await;
        let duplicate = matches!(again, Err(ApiKeyError::Store(StoreError::Duplicate { .. })));
        assert!(duplicate, "{again:?}");
        let (second, _) = ApiKeyRecord::issue(account.id, "second", now, &random, &hasher);
        let over = gateway.import_api_key(&second).await;
        assert!(
            matches!(over, Err(ApiKeyError::LimitReached { max: 1 })),
            "{over:?}"
        );
    }
}
