//! Token introspection (RFC 7662): `POST /auth/introspect`, so that the
//! platform's other services can check a token without linking this crate
//! or reading its store.

use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use crate::account::AccountId;
use crate::answer::{AnswerContext, HttpAnswer, ToHttpAnswer};
use crate::gateway::Gateway;
use crate::oauth::client_auth::{PresentedClient, params_error, presented_client};
use crate::oauth::decisions::{
    AccessRefusal, RefreshDecision, check_access_token, check_refresh_token, decide_refresh,
};
use crate::oauth::token_error::TokenError;
use crate::records::client::ClientId;
use crate::records::grant::GrantId;
use crate::request::Params;
use crate::request::RequestParts;
use crate::secret::{AccessToken, ClientSecret, RefreshToken, SecretHash};

/// Credentials of one of the platform's own services (a resource server),
/// allowed to introspect any token, whichever application it was issued
/// to. Registered by the host with [`Gateway::with_resource_server`].
#[derive(Clone, Debug)]
pub(crate) struct ResourceServer {
    /// Its id, presented like a client id.
    id: String,
    /// The keyed hash of its secret.
    secret_hash: SecretHash,
}

/// The fewest characters (bytes of UTF-8) a resource server's secret may
/// have ([`Gateway::with_resource_servers_json`]): a shared secret that a
/// person picks must not be guessable online.
pub const MIN_RESOURCE_SERVER_SECRET_LEN: usize = 16;

/// Why [`Gateway::with_resource_servers_json`] refused its list.
///
/// Its message follows where the list came from, as in
/// `format!("{} {error}", path.display())`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResourceServersError {
    /// Not a JSON object whose values are all strings.
    #[error("must hold a JSON object of ids and secrets")]
    NotAnObject,
    /// The secret of `id` is shorter than [`MIN_RESOURCE_SERVER_SECRET_LEN`].
    #[error("every secret needs at least {MIN_RESOURCE_SERVER_SECRET_LEN} characters")]
    ShortSecret {
        /// The resource server whose secret is too short (its secret is
        /// not repeated).
        id: String,
    },
}

/// What introspecting a token found: RFC 7662 section 2.2's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Introspection {
    /// The token is usable now, by the caller's leave to know.
    Active(ActiveToken),
    /// Unknown, expired, revoked, of a client switched off, of another
    /// client than the caller, or a retired refresh token: `{"active":
    /// false}` and nothing else (RFC 7662 section 2.2: "the authorization
    /// server SHOULD NOT include any additional information about an
    /// inactive token").
    Inactive,
}

/// An active token, as introspection describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ActiveToken {
    /// An access or a refresh token.
    pub kind: TokenKind,
    /// The application it was issued to.
    pub client_id: ClientId,
    /// The account it acts on (`sub`).
    pub account_id: AccountId,
    /// Its grant.
    pub grant_id: GrantId,
    /// When it was issued (`iat`).
    pub issued_at: OffsetDateTime,
    /// When it expires (`exp`); `None` for a refresh token without expiry.
    pub expires_at: Option<OffsetDateTime>,
}

/// The two kinds of token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    /// An access token (`token_type` `Bearer`, RFC 6750).
    AccessToken,
    /// A refresh token (`token_type` `refresh_token`).
    RefreshToken,
}

/// `200` with RFC 7662's JSON (`active`, and for an active token
/// `client_id`, `token_type`, `exp`, `iat`, `sub`, `grant_id`), never
/// cached (RFC 7662 section 2.2 answers carry token state).
impl ToHttpAnswer for Introspection {
    fn to_http_answer(&self, _: &AnswerContext<'_>) -> HttpAnswer {
        let body = match self {
            Introspection::Inactive => json!({ "active": false }),
            Introspection::Active(token) => {
                let mut body = Map::new();
                body.insert("active".into(), Value::Bool(true));
                body.insert("client_id".into(), json!(token.client_id));
                body.insert(
                    "token_type".into(),
                    json!(match token.kind {
                        TokenKind::AccessToken => "Bearer",
                        TokenKind::RefreshToken => "refresh_token",
                    }),
                );
                if let Some(expires_at) = token.expires_at {
                    body.insert("exp".into(), json!(expires_at.unix_timestamp()));
                }
                body.insert("iat".into(), json!(token.issued_at.unix_timestamp()));
                body.insert("sub".into(), json!(token.account_id.0.to_string()));
                body.insert("grant_id".into(), json!(token.grant_id.0.to_string()));
                Value::Object(body)
            }
        };
        HttpAnswer::json(200, body)
            .with_header("cache-control", "no-store")
            .with_header("pragma", "no-cache")
    }
}

/// Who asks: an application, about its own tokens only, or a resource
/// server, about any token.
enum Introspector {
    Client(ClientId),
    ResourceServer,
}

impl Introspector {
    /// RFC 7662 section 4: a client must not learn about the tokens of
    /// another client.
    fn may_see(&self, owner: &ClientId) -> bool {
        match self {
            Introspector::Client(id) => id == owner,
            Introspector::ResourceServer => true,
        }
    }
}

impl Gateway {
    /// Lets the service `id` (one of the platform's own, such as an API
    /// that accepts this gateway's bearer tokens) introspect any token with
    /// `secret`, which is kept only as its keyed hash. An application's own
    /// credentials introspect only its own tokens.
    #[must_use]
    pub fn with_resource_server(mut self, id: impl Into<String>, secret: &ClientSecret) -> Self {
        self.resource_servers.push(ResourceServer {
            id: id.into(),
            secret_hash: secret.hash(&self.hasher),
        });
        self
    }

    /// [`Gateway::with_resource_server`] for each of the resource servers
    /// in `json`, a JSON object of ids and secrets
    /// (`{"reporting-api": "SECRET"}`), as an operator keeps them in a file
    /// only the server's user can read.
    ///
    /// # Errors
    /// [`ResourceServersError`] when `json` is not such an object, or a
    /// secret has fewer than [`MIN_RESOURCE_SERVER_SECRET_LEN`] characters;
    /// no secret is ever part of the error.
    pub fn with_resource_servers_json(mut self, json: &str) -> Result<Self, ResourceServersError> {
        let servers: std::collections::BTreeMap<String, String> =
            serde_json::from_str(json).map_err(|_| ResourceServersError::NotAnObject)?;
        let short = servers
            .iter()
            .find(|(_, secret)| secret.len() < MIN_RESOURCE_SERVER_SECRET_LEN);
        if let Some((id, _)) = short {
            return Err(ResourceServersError::ShortSecret { id: id.clone() });
        }
        for (id, secret) in servers {
            self = self.with_resource_server(id, &ClientSecret::new(secret));
        }
        Ok(self)
    }

    /// `POST /auth/introspect` (RFC 7662).
    ///
    /// Body (form, as RFC 7662 section 2.1 says, or JSON): `token`, and an
    /// optional `token_type_hint` (`access_token` or `refresh_token`, which
    /// only says where to look first; section 2.1: "If the server is unable
    /// to locate the token using the given hint, it MUST extend its search
    /// across all of its supported token types"). The caller authenticates
    /// with client credentials, HTTP Basic or in the body (section 2.1: the
    /// endpoint "MUST also require some form of authorization"): an
    /// application learns about its own tokens only, a resource server
    /// ([`Gateway::with_resource_server`]) about any. A refresh token is
    /// active when the token endpoint would honour it now under its
    /// application's refresh policy. Answer the result with
    /// [`Gateway::answer`].
    ///
    /// # Errors
    /// [`TokenError`]: a malformed request, no `token`, missing or wrong
    /// caller credentials (401 `invalid_client`), or the store failed.
    pub async fn introspect(
        &self,
        request: &RequestParts<'_>,
    ) -> Result<Introspection, TokenError> {
        let result = self.introspect_request(request).await;
        let outcome = crate::oauth::token_endpoint::outcome(&result, TokenError::outcome);
        self.metrics.request("introspect", outcome);
        result
    }

    async fn introspect_request(
        &self,
        request: &RequestParts<'_>,
    ) -> Result<Introspection, TokenError> {
        let params = Params::from_body(request.content_type, request.body).map_err(params_error)?;
        let presented = presented_client(&params, request.authorization)?
            .ok_or(TokenError::InvalidClient { basic: false })?;
        let introspector = self.authenticate_introspector(&presented).await?;
        let token = params
            .get("token")
            .ok_or(TokenError::MissingField { path: "body.token" })?;
        let refresh_first = params.get("token_type_hint") == Some("refresh_token");
        for refresh in [refresh_first, !refresh_first] {
            let found = if refresh {
                self.introspect_refresh_token(token).await?
            } else {
                self.introspect_access_token(token).await?
            };
            let Some(active) = found else { continue };
            // A token that exists but is not the caller's to see is
            // answered as if it did not.
            return Ok(match active {
                Some(active) if introspector.may_see(&active.client_id) => {
                    Introspection::Active(active)
                }
                _ => Introspection::Inactive,
            });
        }
        Ok(Introspection::Inactive)
    }

    /// The caller: a resource server whose secret matches, or an
    /// application (switched on) whose secret matches.
    async fn authenticate_introspector(
        &self,
        presented: &PresentedClient,
    ) -> Result<Introspector, TokenError> {
        if let Some(server) = self
            .resource_servers
            .iter()
            .find(|server| server.id == presented.id)
        {
            let hash = ClientSecret::new(presented.secret.as_str()).hash(&self.hasher);
            return if hash == server.secret_hash {
                Ok(Introspector::ResourceServer)
            } else {
                Err(TokenError::InvalidClient {
                    basic: presented.basic,
                })
            };
        }
        let client = self.authenticate_client(presented).await?;
        Ok(Introspector::Client(client.id))
    }

    /// `None` when no access token is `token`; `Some(None)` when one is but
    /// it is not usable now; `Some(Some(_))` when it is.
    async fn introspect_access_token(
        &self,
        token: &str,
    ) -> Result<Option<Option<ActiveToken>>, TokenError> {
        let hash = AccessToken::new(token).hash(&self.hasher);
        let Some(record) = self.stores.tokens.find_access_token(&hash).await? else {
            return Ok(None);
        };
        let usable = match check_access_token(&record, self.clock.now()) {
            Ok(_) => self.client_is_active(&record.client_id).await?,
            Err(AccessRefusal::Revoked | AccessRefusal::Expired) => false,
        };
        Ok(Some(usable.then_some(ActiveToken {
            kind: TokenKind::AccessToken,
            client_id: record.client_id,
            account_id: record.account_id,
            grant_id: record.grant_id,
            issued_at: record.issued_at,
            expires_at: Some(record.expires_at),
        })))
    }

    /// As [`Gateway::introspect_access_token`], for a refresh token: usable
    /// when the token endpoint would honour it now (not revoked or expired,
    /// its application switched on, and its refresh policy would not
    /// retire it and revoke the grant).
    async fn introspect_refresh_token(
        &self,
        token: &str,
    ) -> Result<Option<Option<ActiveToken>>, TokenError> {
        let hash = RefreshToken::new(token).hash(&self.hasher);
        let Some(record) = self.stores.tokens.find_refresh_token(&hash).await? else {
            return Ok(None);
        };
        let now = self.clock.now();
        if check_refresh_token(&record, &record.client_id, now).is_err() {
            return Ok(Some(None));
        }
        let Some(client) = self
            .stores
            .clients
            .find_client(&record.client_id)
            .await?
            .filter(|client| client.active)
        else {
            return Ok(Some(None));
        };
        let policy = client.refresh_policy.unwrap_or(self.config.refresh_policy);
        // Active exactly when a refresh with it now would be answered with
        // tokens: a retired token whose successor is no longer live would
        // revoke the grant instead (`Gateway::refresh`).
        let usable = match decide_refresh(&record, policy, now) {
            RefreshDecision::Rotate | RefreshDecision::KeepToken => true,
            RefreshDecision::ReissueSuccessor(successor) => {
                self.successor_is_live(&successor).await?
            }
            RefreshDecision::RevokeGrant => false,
        };
        Ok(Some(usable.then_some(ActiveToken {
            kind: TokenKind::RefreshToken,
            client_id: record.client_id,
            account_id: record.account_id,
            grant_id: record.grant_id,
            issued_at: record.issued_at,
            expires_at: record.expires_at,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GatewayConfig;
    use crate::gateway::Stores;
    use crate::secret::SecretHasher;

    fn gateway() -> Gateway {
        let config = GatewayConfig::new("https://gateway.test");
        Gateway::new(config, Stores::in_memory(), SecretHasher::new([3; 32]))
    }

    #[test]
    fn resource_servers_come_from_a_json_object_of_long_secrets() {
        let json = r#"{"reporting-api": "rs-secret-0123456789", "billing": "0123456789abcdef"}"#;
        let with_two = gateway().with_resource_servers_json(json).unwrap();
        let ids: Vec<_> = with_two
            .resource_servers
            .iter()
            .map(|rs| rs.id.as_str())
            .collect();
        assert_eq!(ids, ["billing", "reporting-api"]);
        for json in ["[]", r#"{"a": 1}"#, "not json"] {
            let error = gateway().with_resource_servers_json(json).err();
            assert_eq!(error, Some(ResourceServersError::NotAnObject), "{json}");
        }
        let error = gateway()
            .with_resource_servers_json(r#"{"reporting-api": "short-secret"}"#)
            .err()
            .expect("a short secret");
        assert_eq!(
            error,
            ResourceServersError::ShortSecret {
                id: "reporting-api".into()
            }
        );
        assert_eq!(
            error.to_string(),
            "every secret needs at least 16 characters"
        );
    }
}
