//! The life of a registered application after its registration, and the
//! applications an account has connected: rotating a client secret,
//! changing the redirect URIs, switching a client off and on, listing an
//! account's grants and disconnecting one.

use time::OffsetDateTime;

use crate::account::AccountId;
use crate::gateway::Gateway;
use crate::records::client::ClientId;
use crate::records::grant::GrantId;
use crate::secret::ClientSecret;
use crate::store::error::StoreError;

/// An application an account has authorized, for the account's settings
/// page: one grant, with the application's name.
///
/// Serializes, for a host's JSON API or an operator's command, as
/// `{"grant_id", "client_id", "name", "authorized_at",
/// "last_refreshed_at"}`, times in RFC 3339 (`last_refreshed_at` null when
/// never refreshed). Serializing fails only for a time outside the years
/// 0000 to 9999, which no store holds.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct ConnectedApp {
    /// The grant: what [`Gateway::disconnect_app`] revokes.
    pub grant_id: GrantId,
    /// The application.
    pub client_id: ClientId,
    /// The application's name, as on the consent screen.
    pub name: String,
    /// When the account authorized it.
    #[serde(with = "time::serde::rfc3339")]
    pub authorized_at: OffsetDateTime,
    /// When it last refreshed its tokens, if it has.
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_refreshed_at: Option<OffsetDateTime>,
}

/// Why a client could not be changed.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientUpdateError {
    /// No client has this id.
    #[error("no client has this id")]
    UnknownClient,
    /// A redirect URI is not an absolute URI without a fragment (RFC 6749
    /// section 3.1.2), or none was given.
    #[error("redirect URIs must be absolute URIs without a fragment, at least one: {uri:?}")]
    InvalidRedirectUri {
        /// The URI refused (empty when none was given).
        uri: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Whether `uri` may be registered as a redirect URI: RFC 6749 section
/// 3.1.2, "The redirection endpoint URI MUST be an absolute URI ... The
/// endpoint URI MUST NOT include a fragment component." An absolute URI
/// starts with a scheme (RFC 3986 section 3.1: a letter, then letters,
/// digits, `+`, `-` or `.`) and a colon; a native app's private-use scheme
/// (RFC 8252) is one too. [`Gateway::set_client_redirect_uris`] applies it;
/// a host checks with it before [`Gateway::register_client`], which stores
/// what it is given.
pub fn is_registrable_redirect_uri(uri: &str) -> bool {
    let Some((scheme, rest)) = uri.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    let scheme_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    scheme_ok
        && !rest.is_empty()
        && !uri.contains('#')
        && !uri
            .chars()
            .any(|c| c.is_ascii_whitespace() || c.is_ascii_control())
}

impl Gateway {
    /// Gives the client a new secret, returned once to hand to the
    /// developer. The previous secret keeps working for
    /// [`crate::GatewayConfig::client_secret_overlap`] (default 24 hours),
    /// then stops; a second rotation within the overlap ends the first
    /// secret at once.
    ///
    /// # Errors
    /// [`ClientUpdateError::UnknownClient`], or the store's error.
    pub async fn rotate_client_secret(
        &self,
        id: &ClientId,
    ) -> Result<ClientSecret, ClientUpdateError> {
        let secret = ClientSecret::generate(&*self.random);
        let until = self.clock.now() + self.config.client_secret_overlap;
        let hash = secret.hash(&self.hasher);
        if self
            .stores
            .clients
            .rotate_client_secret(id, &hash, until)
            .await?
        {
            Ok(secret)
        } else {
            Err(ClientUpdateError::UnknownClient)
        }
    }

    /// Replaces the client's registered redirect URIs. Codes issued for a
    /// URI no longer registered can still be exchanged with it (RFC 6749
    /// section 4.1.3 checks the URI the code was issued for).
    ///
    /// # Errors
    /// [`ClientUpdateError::InvalidRedirectUri`] (nothing changed),
    /// [`ClientUpdateError::UnknownClient`], or the store's error.
    pub async fn set_client_redirect_uris(
        &self,
        id: &ClientId,
        redirect_uris: &[String],
    ) -> Result<(), ClientUpdateError> {
        if redirect_uris.is_empty() {
            return Err(ClientUpdateError::InvalidRedirectUri { uri: String::new() });
        }
        if let Some(bad) = redirect_uris
            .iter()
            .find(|uri| !is_registrable_redirect_uri(uri))
        {
            return Err(ClientUpdateError::InvalidRedirectUri { uri: bad.clone() });
        }
        if self
            .stores
            .clients
            .set_client_redirect_uris(id, redirect_uris)
            .await?
        {
            Ok(())
        } else {
            Err(ClientUpdateError::UnknownClient)
        }
    }

    /// Switches the client off (`false`) or back on. While off, its dialog
    /// is refused, its credentials authenticate nothing (no code exchange,
    /// refresh or revocation), its access tokens are refused and
    /// introspection reports its tokens inactive. Switched back on, what
    /// was not revoked or expired meanwhile works again.
    ///
    /// # Errors
    /// [`ClientUpdateError::UnknownClient`], or the store's error.
    pub async fn set_client_active(
        &self,
        id: &ClientId,
        active: bool,
    ) -> Result<(), ClientUpdateError> {
        if self.stores.clients.set_client_active(id, active).await? {
            Ok(())
        } else {
            Err(ClientUpdateError::UnknownClient)
        }
    }

    /// The applications `account` has connected and not disconnected,
    /// oldest first.
    ///
    /// # Errors
    /// The store's error.
    pub async fn connected_apps(
        &self,
        account: AccountId,
    ) -> Result<Vec<ConnectedApp>, StoreError> {
        let grants = self.stores.tokens.list_grants(account).await?;
        let mut apps = Vec::with_capacity(grants.len());
        for grant in grants {
            let name = match self.stores.clients.find_client(&grant.client_id).await? {
                Some(client) => client.name,
                // A client deleted from the store directly: show its id.
                None => grant.client_id.to_string(),
            };
            apps.push(ConnectedApp {
                grant_id: grant.id,
                client_id: grant.client_id,
                name,
                authorized_at: grant.created_at,
                last_refreshed_at: grant.last_refreshed_at,
            });
        }
        Ok(apps)
    }

    /// Disconnects an application from `account`: revokes the grant, and so
    /// every code and token issued under it, at once. Returns whether the
    /// account had this grant connected; another account's grant is left
    /// alone (`false`).
    ///
    /// # Errors
    /// The store's error.
    pub async fn disconnect_app(
        &self,
        account: AccountId,
        grant: GrantId,
    ) -> Result<bool, StoreError> {
        match self.stores.tokens.find_grant(grant).await? {
            Some(found) if found.account_id == account && found.revoked_at.is_none() => {
                self.stores
                    .tokens
                    .revoke_grant(grant, self.clock.now())
                    .await
            }
            _ => Ok(false),
        }
    }

    /// Revokes a grant, and so every code and token issued under it, at
    /// once, whichever account it belongs to: for an operator. Returns
    /// whether the grant exists (revoking twice keeps the first time).
    ///
    /// # Errors
    /// The store's error.
    pub async fn revoke_grant(&self, grant: GrantId) -> Result<bool, StoreError> {
        self.stores
            .tokens
            .revoke_grant(grant, self.clock.now())
            .await
    }

    /// Whether the client exists and is switched on.
    pub(crate) async fn client_is_active(&self, id: &ClientId) -> Result<bool, StoreError> {
        Ok(self
            .stores
            .clients
            .find_client(id)
            .await?
            .is_some_and(|client| client.active))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_absolute_uris_without_fragments_are_registrable() {
        for good in [
            "https://app.example/callback",
            "http://127.0.0.1:8080/cb",
            "com.example.app:/oauth2redirect",
            "https://app.example/cb?tenant=1",
        ] {
            assert!(is_registrable_redirect_uri(good), "{good}");
        }
        for bad in [
            "",
            "/callback",
            "app.example/cb",
            "https://app.example/cb#fragment",
            "https:",
            "1https://app.example/cb",
            "https://app.example/c b",
            ":nothing",
        ] {
            assert!(!is_registrable_redirect_uri(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_connected_app_serializes_with_rfc_3339_times() {
        let grant = uuid::Uuid::from_u128(7);
        let mut app = ConnectedApp {
            grant_id: GrantId(grant),
            client_id: ClientId::new("cgid_app"),
            name: "Lead Sync".to_owned(),
            authorized_at: time::macros::datetime!(2026-01-02 03:04:05 UTC),
            last_refreshed_at: None,
        };
        let json = serde_json::to_value(&app).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "grant_id": grant.to_string(),
                "client_id": "cgid_app",
                "name": "Lead Sync",
                "authorized_at": "2026-01-02T03:04:05Z",
                "last_refreshed_at": null,
            })
        );
        app.last_refreshed_at = Some(time::macros::datetime!(2026-01-03 00:00:00.5 UTC));
        let json = serde_json::to_value(&app).unwrap();
        assert_eq!(json["last_refreshed_at"], "2026-01-03T00:00:00.5Z");
    }
}
