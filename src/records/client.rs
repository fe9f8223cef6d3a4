//! Registered third-party applications (OAuth clients).

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::random::RandomSource;
use crate::records::refresh_policy::RefreshPolicy;
use crate::secret::{ClientSecret, SecretHash, SecretHasher};

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
    /// Whether the application is switched on. Switched off, its dialog,
    /// codes, tokens and credentials are refused and introspection reports
    /// its tokens inactive; switched back on, what was not revoked or
    /// expired meanwhile works again.
    pub active: bool,
    /// The secret it had before its last rotation, still accepted until the
    /// overlap ends, so that the application can deploy the new one.
    pub previous_secret: Option<PreviousSecret>,
}

/// A client secret replaced by a rotation, accepted until `valid_until`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreviousSecret {
    /// Its keyed hash.
    pub hash: SecretHash,
    /// The end of the overlap: from then on only the new secret works.
    pub valid_until: OffsetDateTime,
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
            active: true,
            previous_secret: None,
        };
        (client, secret)
    }

    /// Whether `presented` is this client's secret, or its previous one
    /// before the rotation's overlap ends at `now`. Both hashes are compared
    /// in constant time, always, so that the timing does not tell which one
    /// matched or whether there is a previous one.
    pub fn secret_matches(
        &self,
        presented: &ClientSecret,
        hasher: &SecretHasher,
        now: OffsetDateTime,
    ) -> bool {
        let hash = presented.hash(hasher);
        let current = hash == self.secret_hash;
        let previous = self
            .previous_secret
            .as_ref()
            .is_some_and(|previous| (hash == previous.hash) & (now < previous.valid_until));
        current | previous
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
    use crate::random::SeededRandom;

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
        let now = time::macros::datetime!(2026-01-01 0:00 UTC);
        assert!(client.secret_matches(&secret, &hasher, now));
        assert!(!client.secret_matches(&ClientSecret::new("cgcs_wrong"), &hasher, now));
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

    #[test]
    fn a_rotated_secret_works_until_the_overlap_ends_and_not_after() {
        let random = SeededRandom::new(2);
        let hasher = SecretHasher::generate(&random);
        let (mut client, old) = Client::register("App", vec![], &random, &hasher);
        let new = ClientSecret::generate(&random);
        let until = time::macros::datetime!(2026-01-02 0:00 UTC);
        client.previous_secret = Some(PreviousSecret {
            hash: client.secret_hash,
            valid_until: until,
        });
        client.secret_hash = new.hash(&hasher);
        let before = until - time::Duration::SECOND;
        assert!(client.secret_matches(&new, &hasher, before));
        assert!(client.secret_matches(&old, &hasher, before));
        assert!(client.secret_matches(&new, &hasher, until));
        assert!(
            !client.secret_matches(&old, &hasher, until),
            "the overlap ends"
        );
        let other = ClientSecret::generate(&random);
        assert!(!client.secret_matches(&other, &hasher, before));
    }
}
