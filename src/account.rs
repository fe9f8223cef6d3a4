//! Marketing accounts and their API keys.

use std::fmt;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{ApiKey, RandomSource, SecretHash, SecretHasher, random_uuid};

/// The identifier of an account.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AccountId(pub Uuid);

impl fmt::Display for AccountId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A marketing account: the resource owner of the OAuth flow and the owner
/// of the contacts that conversion events describe.
#[derive(Clone, PartialEq, Eq)]
pub struct Account {
    /// The identifier.
    pub id: AccountId,
    /// The account's display name, shown on the consent screen.
    pub name: String,
    /// The login e-mail of the account owner, stored lowercased.
    pub email: String,
    /// A password hash in PHC string form (argon2, scrypt...), opaque to the
    /// core: the host verifies logins with the password library it chooses.
    pub password_hash: Option<String>,
    /// The names of the account's custom fields, without the `cf_` prefix.
    /// Conversion payloads may carry `cf_<name>` for each of them.
    pub custom_fields: Vec<String>,
}

impl fmt::Debug for Account {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Account")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("email", &self.email)
            .field("password_hash", &self.password_hash.as_ref().map(|_| "***"))
            .field("custom_fields", &self.custom_fields)
            .finish()
    }
}

impl Account {
    /// A new account with a fresh id, its e-mail lowercased.
    pub fn new(name: impl Into<String>, email: &str, random: &dyn RandomSource) -> Self {
        Self {
            id: AccountId(random_uuid(random)),
            name: name.into(),
            email: email.trim().to_lowercase(),
            password_hash: None,
            custom_fields: Vec::new(),
        }
    }
}

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
    use crate::SeededRandom;

    #[test]
    fn account_debug_hides_the_password_hash() {
        let mut account = Account::new("Acme", " Owner@Example.COM ", &SeededRandom::new(1));
        account.password_hash = Some("$argon2id$v=19$secret".into());
        let printed = format!("{account:?}");
        assert!(!printed.contains("argon2"));
        assert_eq!(account.email, "owner@example.com");
    }

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
