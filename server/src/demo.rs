//! The demo data: an app, an account (with a password) and an API key, so
//! that a newcomer can try every endpoint at once, and their credentials as
//! the JSON written to a private file (`--demo-credentials`).
//!
//! Every demo value is drawn from a random source seeded by the server key:
//! a restart on the same store and key derives the same credentials again,
//! and they hash to what the store holds, so no plaintext secret is kept.
//! The derived records are stored through the gateway's public API
//! (`import_client`, `import_api_key`).

use std::fmt;

use conversion_gateway::{
    Account, ApiKeyError, ApiKeyRecord, Argon2Passwords, Client, Gateway, SeededRandom, ServerKey,
    StoreError, random_token,
};
use serde::Serialize;

/// The demo account's login e-mail.
pub const DEMO_EMAIL: &str = "demo@example.com";

/// The demo app's registered redirect URI (port 9, "discard": the browser
/// shows an error page, and the code is read from its address bar).
pub const DEMO_REDIRECT_URI: &str = "http://127.0.0.1:9/callback";

/// What a newcomer needs to try the service, as written by
/// `--demo-credentials`.
#[derive(Clone, PartialEq, Eq, Serialize)]
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
pub enum SeedError {
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
/// [`SeedError`].
pub async fn seed_demo(
    gateway: &Gateway,
    key: &ServerKey,
    passwords: &Argon2Passwords,
) -> Result<DemoCredentials, SeedError> {
    let hasher = key.hasher();
    let random = SeededRandom::from_seed(key.derive(b"demo data"));
    // The order of these draws fixes every demo value: changing it changes
    // the credentials of existing stores (then `SeedError::OtherKey`).
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
        Some(_) => return Err(SeedError::OtherKey),
        None => {
            account.password_hash = Some(passwords.hash(&password));
            ignore_duplicate(gateway.create_account(&account).await)?;
        }
    }
    let keys = gateway.list_api_keys(account.id).await?;
    match keys
        .iter()
        .find(|record| record.hash == api_key_record.hash)
    {
        Some(record) if !record.active => {
            tracing::warn!("the demo API key is switched off in this store");
        }
        Some(_) => {}
        None => match gateway.import_api_key(&api_key_record).await {
            Ok(()) => {}
            Err(ApiKeyError::LimitReached { .. }) => return Err(SeedError::TooManyApiKeys),
            Err(ApiKeyError::Store(error)) => ignore_duplicate(Err(error))?,
            Err(error) => {
                return Err(StoreError::backend("issue the demo API key", error).into());
            }
        },
    }
    Ok(DemoCredentials {
        base_url: gateway.config().base_url.clone(),
        client_id: client.id.to_string(),
        client_secret: client_secret.expose().to_owned(),
        redirect_uri: DEMO_REDIRECT_URI.to_owned(),
        api_key: api_key.expose().to_owned(),
        email: DEMO_EMAIL.to_owned(),
        password,
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
