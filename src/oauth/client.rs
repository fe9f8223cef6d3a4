//! Registered third-party applications (OAuth clients).

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use crate::{ClientSecret, RandomSource, RefreshPolicy, SecretHash, SecretHasher};

/// The public identifier of a registered application.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClientId(String);

impl ClientId {
    /// Wraps an identifier, as received or as read from a store.
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    /// A fresh identifier (128 random bits, base64url) from `random`.
    pub fn generate(random: &dyn RandomSource) -> Self {
        let mut bytes = [0u8; 16];
        random.fill_bytes(&mut bytes);
        Self(format!("cgid_{}", URL_SAFE_NO_PAD.encode(bytes)))
    }

    /// The identifier as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A registered application: who may ask accounts for access, and where the
/// answer may be sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Client {
    /// The public identifier.
    pub id: ClientId,
    /// The name shown to the user on the consent screen.
    pub name: String,
    /// The keyed hash of the client secret; the secret itself is never kept.
    pub secret_hash: SecretHash,
    /// The callback URLs the application registered. The dialog redirects
    /// only to one of these, compared exactly as strings.
    pub redirect_uris: Vec<String>,
    /// Whether every authorization request must carry a PKCE challenge
    /// (RFC 7636); set it for applications that cannot keep a secret.
    pub require_pkce: bool,
    /// The application's own refresh policy; `None` follows the gateway's
    /// [`crate::GatewayConfig::refresh_policy`].
    pub refresh_policy: Option<RefreshPolicy>,
}

/// What an application registers with: its name and callback URLs, and the
/// options that differ from the defaults.
///
/// ```
/// use conversion_gateway::{ClientRegistration, RefreshPolicy};
///
/// let registration = ClientRegistration::new("Lead Sync", ["https://app.example/cb"])
///     .require_pkce(true)
///     .refresh_policy(RefreshPolicy::Reuse);
/// assert!(registration.require_pkce);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientRegistration {
    /// The name shown to the user on the consent screen.
    pub name: String,
    /// The callback URLs; the dialog redirects only to one of these.
    pub redirect_uris: Vec<String>,
    /// Whether every authorization request must carry a PKCE challenge.
    /// Default `false`.
    pub require_pkce: bool,
    /// The application's own refresh policy. Default `None`: the gateway's.
    pub refresh_policy: Option<RefreshPolicy>,
}

impl ClientRegistration {
    /// A registration with the defaults.
    pub fn new<U: Into<String>>(
        name: impl Into<String>,
        redirect_uris: impl IntoIterator<Item = U>,
    ) -> Self {
        Self {
            name: name.into(),
            redirect_uris: redirect_uris.into_iter().map(Into::into).collect(),
            require_pkce: false,
            refresh_policy: None,
        }
    }

    /// Sets whether authorization requests must carry a PKCE challenge.
    pub fn require_pkce(mut self, require: bool) -> Self {
        self.require_pkce = require;
        self
    }

    /// Gives the application a refresh policy of its own, for example
    /// [`RefreshPolicy::Reuse`] for a client known never to store a new
    /// refresh token, or [`RefreshPolicy::Rotate`] for one known to.
    pub fn refresh_policy(mut self, policy: RefreshPolicy) -> Self {
        self.refresh_policy = Some(policy);
        self
    }
}

impl Client {
    /// Registers a new application: a fresh id and secret, of which only the
    /// hash is kept. The secret is returned once, to hand to the developer.
    pub fn register(
        name: impl Into<String>,
        redirect_uris: Vec<String>,
        random: &dyn RandomSource,
        hasher: &SecretHasher,
    ) -> (Client, ClientSecret) {
        let secret = ClientSecret::generate(random);
        let client = Client {
            id: ClientId::generate(random),
            name: name.into(),
            secret_hash: secret.hash(hasher),
            redirect_uris,
            require_pkce: false,
            refresh_policy: None,
        };
        (client, secret)
    }

    /// Whether `presented` is this client's secret (constant time).
    pub fn secret_matches(&self, presented: &ClientSecret, hasher: &SecretHasher) -> bool {
        presented.hash(hasher) == self.secret_hash
    }

    /// Whether `uri` is one of the registered redirect URIs, compared exactly.
    pub fn has_redirect_uri(&self, uri: &str) -> bool {
        self.redirect_uris
            .iter()
            .any(|registered| registered == uri)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SeededRandom;

    #[test]
    fn registration_keeps_only_the_hash_of_the_secret() {
        let random = SeededRandom::new(1);
        let hasher = SecretHasher::generate(&random);
        let (client, secret) = Client::register(
            "App",
            vec!["https://app.example/cb".into()],
            &random,
            &hasher,
        );
        assert!(client.secret_matches(&secret, &hasher));
        assert!(!client.secret_matches(&ClientSecret::new("cgcs_wrong"), &hasher));
        assert!(!format!("{client:?}").contains(secret.expose()));
        assert!(client.id.as_str().starts_with("cgid_"));
    }

    #[test]
    fn redirect_uris_compare_exactly() {
        let random = SeededRandom::new(2);
        let hasher = SecretHasher::generate(&random);
        let (client, _) = Client::register(
            "App",
            vec!["https://app.example/cb?x=1".into()],
            &random,
            &hasher,
        );
        assert!(client.has_redirect_uri("https://app.example/cb?x=1"));
        assert!(!client.has_redirect_uri("https://app.example/cb?x=1&y=2"));
        assert!(!client.has_redirect_uri("https://app.example/cb"));
        assert!(!client.has_redirect_uri("HTTPS://app.example/cb?x=1"));
    }
}
