//! The demo data: an app, an account (with a password) and an API key, so
//! that a newcomer can try every endpoint at once, and their credentials as
//! the JSON written to a private file (`--demo-credentials`).
//!
//! Every demo value is drawn from a random source seeded by the server key:
//! a restart on the same store and key derives the same credentials again,
//! and they hash to what the store holds, so no plaintext secret is kept.
//! The derived records are stored through the gateway's public API
//! (`import_client`, `import_api_key`). The service seeds them at every
//! start, and `examples/axum.rs` too.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::account::Account;
use crate::gateway::Gateway;
use crate::intake::api_key::ApiKeyError;
use crate::random::{SeededRandom, random_token};
use crate::records::api_key::ApiKeyRecord;
use crate::records::client::Client;
use crate::server_key::ServerKey;
use crate::signin::argon2::Argon2Passwords;
use crate::store::error::StoreError;

/// The demo account's login e-mail.
pub const DEMO_EMAIL: &str = "demo@example.com";

/// The demo app's registered redirect URI (port 9, "discard": the browser
/// shows an error page, and the code is read from its address bar).
pub const DEMO_REDIRECT_URI: &str = "http://127.0.0.1:9/callback";

/// What a newcomer needs to try the service, as written by
/// `--demo-credentials` (and read back by its tests).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DemoCredentials {
    /// The service's base URL.
    pub base_url: String,
    /// The demo app's client id.
    pub client_id: String,
    /// The demo app's client secret.
    pub client_secret: String,
    /// The demo app's redirect URI.
    pub redirect_uri: String,
    /// The demo account's API key.
    pub api_key: String,
    /// The demo account's login e-mail.
    pub email: String,
    /// The demo account's password.
    pub password: String,
    /// Whether the store holds the demo API key switched off (by an
    /// operator), so that `api_key` is refused: worth a warning.
    #[serde(skip)]
    pub api_key_switched_off: bool,
}

impl fmt::Debug for DemoCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DemoCredentials")
            .field("base_url", &self.base_url)
            .field("client_id", &self.client_id)
            .field("email", &self.email)
            .finish_non_exhaustive()
    }
}

impl DemoCredentials {
    /// The JSON document `--demo-credentials` writes.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("strings serialize") + "\n"
    }
}

/// Why the demo data could not be seeded.
#[derive(Debug, thiserror::Error)]
pub enum DemoSeedError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The store holds a demo account made with another server key.
    #[error(
        "the store holds a demo account ({DEMO_EMAIL}) created with another server key, so its demo credentials cannot be derived again: was the key file replaced?"
    )]
    OtherKey,
    /// The demo account already holds the most API keys it may.
    #[error("the demo account already holds the most API keys it may")]
    TooManyApiKeys,
}

/// Seeds the demo app, account (custom fields `plan` and `source`) and API
/// key through `gateway`, unless its stores hold them already, and returns
/// their credentials.
///
/// # Errors
/// [`DemoSeedError`].
pub async fn seed_demo(
    gateway: &Gateway,
    key: &ServerKey,
    passwords: &Argon2Passwords,
) -> Result<DemoCredentials, DemoSeedError> {
    let hasher = key.hasher();
    let random = SeededRandom::from_seed(key.derive(b"demo data"));
    // The order of these draws fixes every demo value: changing it changes
    // the credentials of existing stores (then `DemoSeedError::OtherKey`).
    let mut account = Account::new("Demo Account", DEMO_EMAIL, &random);
    account.custom_fields = vec!["plan".into(), "source".into()];
    let password = format!("demo-{}", random_token(&random, 18));
    let (client, client_secret) =
        Client::register("Demo App", vec![DEMO_REDIRECT_URI.into()], &random, &hasher);
    let now = time::OffsetDateTime::now_utc();
    let (api_key_record, api_key) = ApiKeyRecord::issue(account.id, "demo", now, &random, &hasher);

    if gateway.find_client(&client.id).await?.is_none() {
        // Another instance starting on the same shared store may have.
        ignore_duplicate(gateway.import_client(&client).await)?;
    }
    match gateway.find_account_by_email(DEMO_EMAIL).await? {
        Some(existing) if existing.id == account.id => {}
        Some(_) => return Err(DemoSeedError::OtherKey),
        None => {
            account.password_hash = Some(passwords.hash(&password));
            ignore_duplicate(gateway.create_account(&account).await)?;
        }
    }
    let keys = gateway.list_api_keys(account.id).await?;
    let stored = keys
        .iter()
        .find(|record| record.hash == api_key_record.hash);
    if stored.is_none() {
        match gateway.import_api_key(&api_key_record).await {
            Ok(()) => {}
            Err(ApiKeyError::LimitReached { .. }) => return Err(DemoSeedError::TooManyApiKeys),
            Err(ApiKeyError::Store(error)) => ignore_duplicate(Err(error))?,
        }
    }
    Ok(DemoCredentials {
        base_url: gateway.config().base_url.clone(),
        client_id: client.id.to_string(),
        client_secret: client_secret.expose().to_owned(),
        redirect_uri: DEMO_REDIRECT_URI.to_owned(),
        api_key: api_key.expose().to_owned(),
        email: DEMO_EMAIL.to_owned(),
        password,
        api_key_switched_off: stored.is_some_and(|record| !record.active),
    })
}

/// Another instance starting on the same shared store may insert the same
/// demo record first; that is success.
fn ignore_duplicate(result: Result<(), StoreError>) -> Result<(), StoreError> {
    match result {
        Err(StoreError::Duplicate { .. }) => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GatewayConfig;
    use crate::gateway::Stores;

    fn gateway(stores: Stores, key: &ServerKey) -> Gateway {
        Gateway::new(
            GatewayConfig::new("https://api.example.com"),
            stores,
            key.hasher(),
        )
    }

    /// Cheap parameters: the tests check the seed, not Argon2's cost.
    fn passwords() -> Argon2Passwords {
        Argon2Passwords::new(64, 1)
    }

    #[tokio::test]
    async fn a_restart_with_the_same_key_derives_the_same_working_credentials() {
        let stores = Stores::in_memory();
        let key = ServerKey::from_hex(&"42".repeat(32)).expect("a key");
        let first = seed_demo(&gateway(stores.clone(), &key), &key, &passwords())
            .await
            .expect("seeded");
        let again = seed_demo(&gateway(stores.clone(), &key), &key, &passwords())
            .await
            .expect("seeded again");
        assert_eq!(first, again);
        assert_eq!(first.email, DEMO_EMAIL);
        assert_eq!(first.redirect_uri, DEMO_REDIRECT_URI);
        assert!(!first.api_key_switched_off);
        let gateway = gateway(stores, &key);
        let account = gateway
            .find_account_by_email(DEMO_EMAIL)
            .await
            .expect("the store answers")
            .expect("the demo account");
        assert_eq!(account.custom_fields, ["plan", "source"]);
        let mut memory = Vec::new();
        let hash = account.password_hash.as_deref();
        assert!(passwords().verify(&first.password, hash, &mut memory));
        assert_eq!(
            gateway.list_api_keys(account.id).await.expect("keys").len(),
            1
        );
        // Secrets stay out of Debug.
        let shown = format!("{first:?}");
        assert!(!shown.contains(&first.password) && !shown.contains(&first.api_key));
        assert!(first.to_json().contains(&first.client_secret));
    }

    #[tokio::test]
    async fn a_store_seeded_under_another_key_is_refused() {
        let stores = Stores::in_memory();
        let key = ServerKey::from_hex(&"42".repeat(32)).expect("a key");
        seed_demo(&gateway(stores.clone(), &key), &key, &passwords())
            .await
            .expect("seeded");
        let other = ServerKey::from_hex(&"43".repeat(32)).expect("a key");
        let refused = seed_demo(&gateway(stores, &other), &other, &passwords()).await;
        assert!(
            matches!(refused, Err(DemoSeedError::OtherKey)),
            "{refused:?}"
        );
    }
}
