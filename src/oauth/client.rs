//! Registering third-party applications: what an application registers
//! with, and the `Gateway` methods that register and find one. The
//! registered [`Client`] is a stored record, in [`crate::records::client`].

use crate::gateway::Gateway;
use crate::records::client::{Client, ClientId};
use crate::records::refresh_policy::RefreshPolicy;
use crate::secret::ClientSecret;
use crate::store::error::StoreError;

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

impl Gateway {
    /// Registers an application. Returns it and its client secret, which is
    /// not kept and must be handed to the developer now.
    ///
    /// # Errors
    /// The store's error.
    pub async fn register_client(
        &self,
        registration: ClientRegistration,
    ) -> Result<(Client, ClientSecret), StoreError> {
        let ClientRegistration {
            name,
            redirect_uris,
            require_pkce,
            refresh_policy,
        } = registration;
        let (mut client, secret) =
            Client::register(name, redirect_uris, &*self.random, &self.hasher);
        client.require_pkce = require_pkce;
        client.refresh_policy = refresh_policy;
        self.import_client(&client).await?;
        Ok((client, secret))
    }

    /// Stores an application registered elsewhere, as it is: its id, and
    /// its secret's hash under this gateway's key. For a host that moves
    /// its applications over from another installation, or derives a
    /// known application from its own key ([`Client::register`] with a
    /// seeded random source). [`Gateway::register_client`] is the usual
    /// way in.
    ///
    /// # Errors
    /// [`StoreError::Duplicate`] when an application has this id already;
    /// else the store's error.
    pub async fn import_client(&self, client: &Client) -> Result<(), StoreError> {
        self.stores.clients.register_client(client).await
    }

    /// The registered application with this id, for a host's own pages (a
    /// developer console, or a check before registering a known client).
    ///
    /// # Errors
    /// The store's error.
    pub async fn find_client(&self, id: &ClientId) -> Result<Option<Client>, StoreError> {
        self.stores.clients.find_client(id).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
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
    async fn a_registered_client_is_found_by_its_id_and_no_other() {
        let gateway = gateway();
        let registration = ClientRegistration::new("App", ["https://app.example/cb"]);
        let (client, _) = gateway.register_client(registration).await.unwrap();
        let found = gateway.find_client(&client.id).await.unwrap();
        assert_eq!(
            found.as_ref().map(|c| &c.name),
            Some(&client.name),
            "{found:?}"
        );
        let other = gateway
            .find_client(&ClientId::new("cgci_other"))
            .await
            .unwrap();
        assert!(other.is_none(), "{other:?}");
    }

    #[tokio::test]
    async fn an_imported_client_keeps_its_id_and_secret_and_is_imported_once() {
        let gateway = gateway();
        let hasher = SecretHasher::new([3; 32]);
        let (client, secret) = Client::register(
            "Known App",
            vec!["https://app.example/cb".to_owned()],
            &SeededRandom::new(11),
            &hasher,
        );
        gateway.import_client(&client).await.unwrap();
        let found = gateway.find_client(&client.id).await.unwrap().unwrap();
        assert_eq!(found.secret_hash, secret.hash(&hasher));
        let again = gateway.import_client(&client).await;
        assert!(
            matches!(again, Err(StoreError::Duplicate { .. })),
            "{again:?}"
        );
    }
}
