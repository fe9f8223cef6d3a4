//! Token revocation (RFC 7009): `POST /auth/revoke`.

use serde_json::json;

use crate::answer::{AnswerContext, HttpAnswer, ToHttpAnswer};
use crate::gateway::Gateway;
use crate::oauth::bearer::BearerError;
use crate::oauth::client_auth::{params_error, presented_client};
use crate::oauth::token_error::TokenError;
use crate::records::client::ClientId;
use crate::records::grant::GrantId;
use crate::request::Params;
use crate::request::RequestParts;
use crate::secret::{AccessToken, RefreshToken};

/// Why a revocation request was refused.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RevocationError {
    /// The request was malformed or its client credentials were wrong.
    #[error(transparent)]
    Request(#[from] TokenError),
    /// The bearer token that should authenticate the caller did not.
    #[error(transparent)]
    Bearer(#[from] BearerError),
}

/// The token endpoint's answer or the bearer challenge. Exhaustive.
impl ToHttpAnswer for RevocationError {
    fn to_http_answer(&self, context: &AnswerContext<'_>) -> HttpAnswer {
        match self {
            RevocationError::Request(error) => error.to_http_answer(context),
            RevocationError::Bearer(error) => error.to_http_answer(context),
        }
    }
}

/// A revocation request that was accepted, whether or not it revoked
/// anything: RFC 7009 section 2.2 answers both the same way, so that a
/// client cannot probe which tokens exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Revocation {
    /// The grant that was revoked: `None` for an unknown token or one of
    /// another client.
    pub revoked_grant: Option<GrantId>,
}

/// `200` with `{}` (clients parse every 2xx body as JSON), never cached.
impl ToHttpAnswer for Revocation {
    fn to_http_answer(&self, _: &AnswerContext<'_>) -> HttpAnswer {
        HttpAnswer::json(200, json!({})).with_header("cache-control", "no-store")
    }
}

impl Gateway {
    /// `POST /auth/revoke` (RFC 7009).
    ///
    /// Body (form or JSON): `token`, an access or a refresh token, and an
    /// optional `token_type_hint` (`access_token` or `refresh_token`; other
    /// values are ignored, RFC 7009 section 2.1). The caller authenticates
    /// with client credentials (HTTP Basic or body), or with `Authorization:
    /// Bearer` as the spec shows. Revoking either token revokes the whole
    /// grant. An unknown token, or one of another client, is answered like a
    /// success and revokes nothing (RFC 7009 section 2.2). Answer the result
    /// with [`Gateway::answer`].
    ///
    /// # Errors
    /// [`RevocationError`]: the request or the caller's credentials were
    /// refused, or the store failed.
    pub async fn revoke(&self, request: &RequestParts<'_>) -> Result<Revocation, RevocationError> {
        let result = self.revoke_request(request).await;
        let outcome = crate::oauth::token_endpoint::outcome(&result, |error| match error {
            RevocationError::Request(error) => error.outcome(),
            RevocationError::Bearer(BearerError::Store(_)) => crate::metrics::Outcome::Unavailable,
            RevocationError::Bearer(_) => crate::metrics::Outcome::RefusedAuthentication,
        });
        self.metrics.request("revoke", outcome);
        if matches!(
            &result,
            Ok(Revocation {
                revoked_grant: Some(_)
            })
        ) {
            self.metrics.revocation();
        }
        result
    }

    async fn revoke_request(
        &self,
        request: &RequestParts<'_>,
    ) -> Result<Revocation, RevocationError> {
        let params = Params::from_body(request.content_type, request.body).map_err(params_error)?;
        let token = params
            .get("token")
            .ok_or(TokenError::MissingField { path: "body.token" })?;
        let caller_client: ClientId = match presented_client(&params, request.authorization)? {
            Some(presented) => self.authenticate_client(&presented).await?.id,
            None => {
                self.authenticate_bearer(request.authorization)
                    .await?
                    .client_id
            }
        };
        let refresh_first = params.get("token_type_hint") == Some("refresh_token");
        let Some((grant_id, owner)) = self.find_token_grant(token, refresh_first).await? else {
            return Ok(Revocation {
                revoked_grant: None,
            });
        };
        if owner != caller_client {
            // RFC 7009 section 2.2: answered as a success, revokes nothing.
            return Ok(Revocation {
                revoked_grant: None,
            });
        }
        self.stores
            .tokens
            .revoke_grant(grant_id, self.clock.now())
            .await
            .map_err(TokenError::from)?;
        Ok(Revocation {
            revoked_grant: Some(grant_id),
        })
    }

    /// The grant and client of an access or refresh token, searching the
    /// hinted kind first.
    async fn find_token_grant(
        &self,
        token: &str,
        refresh_first: bool,
    ) -> Result<Option<(GrantId, ClientId)>, TokenError> {
        let tokens = &self.stores.tokens;
        for refresh in [refresh_first, !refresh_first] {
            let found = if refresh {
                let hash = RefreshToken::new(token).hash(&self.hasher);
                tokens
                    .find_refresh_token(&hash)
                    .await?
                    .map(|r| (r.grant_id, r.client_id))
            } else {
                let hash = AccessToken::new(token).hash(&self.hasher);
                tokens
                    .find_access_token(&hash)
                    .await?
                    .map(|r| (r.grant_id, r.client_id))
            };
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }
}
