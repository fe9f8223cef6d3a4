//! Stored API keys: the credential a website form embeds to send conversions.
//!
//! The key itself ([`crate::ApiKey`]) is a secret handed to the account
//! owner once; only its keyed hash is stored, in an [`ApiKeyRecord`].

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::account::AccountId;
use crate::random::{RandomSource, random_uuid};
use crate::secret::{ApiKey, SecretHash, SecretHasher};

/// The identifier of an API key (not the key itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ApiKeyId(pub Uuid);

/// A stored API key: never the key, only its hash.
///
/// API keys never expire; an account has a few, each of which can be
/// switched off and on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiKeyRecord {
    /// The identifier, for switching the key off and on.
    pub id: ApiKeyId,
    /// The account the key authenticates as.
    pub account_id: AccountId,
    /// The keyed hash of the key.
    pub hash: SecretHash,
    /// A label for the account owner ("website form").
    pub label: String,
    /// Whether the key is switched on.
    pub active: bool,
    /// When the key was created.
    pub created_at: OffsetDateTime,
}

impl ApiKeyRecord {
    /// Issues a new, active key for `account_id`: the record to store and the
    /// key to hand to the account owner once.
    pub fn issue(
        account_id: AccountId,
        label: impl Into<String>,
        now: OffsetDateTime,
        random: &dyn RandomSource,
        hasher: &SecretHasher,
    ) -> (ApiKeyRecord, ApiKey) {
        let key = ApiKey::generate(random);
        let record = ApiKeyRecord {
            id: ApiKeyId(random_uuid(random)),
            account_id,
            hash: key.hash(hasher),
            label: label.into(),
            active: true,
            created_at: now,
        };
        (record, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SeededRandom;

    #[test]
    fn issued_api_key_is_stored_as_its_hash() {
        let random = SeededRandom::new(2);
        let hasher = SecretHasher::generate(&random);
        let (record, key) = ApiKeyRecord::issue(
            AccountId(Uuid::nil()),
            "form",
            OffsetDateTime::UNIX_EPOCH,
            &random,
            &hasher,
        );
        assert_eq!(record.hash, key.hash(&hasher));
        assert!(record.active);
        assert!(!format!("{record:?}").contains(key.expose()));
    }
}
