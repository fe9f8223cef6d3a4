//! Token revocation (spec endpoint 4, RFC 7009): `POST /auth/revoke`.

use serde_json::json;

use crate::oauth::token_endpoint::{params_error, presented_client};
use crate::request::Params;
use crate::{
    AccessToken, BearerError, ClientId, Gateway, GrantId, HttpAnswer, RefreshToken, RequestParts,
    TokenError,
};

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

impl RevocationError {
    /// The HTTP answer. Exhaustive.
    pub fn to_answer(&self, realm: &str) -> HttpAnswer {
        match self {
            RevocationError::Request(error) => error.to_answer(realm),
            RevocationError::Bearer(error) => error.to_answer(realm),
        }
    }
}

/// The answer to a revocation request that was accepted, whether or not it
/// revoked anything (RFC 7009 section 2.2): `200` with `{}`, never cached.
pub fn revocation_answer() -> HttpAnswer {
    HttpAnswer::json(200, json!({})).with_header("cache-control", "no-store")
}

impl Gateway {
    /// `POST /auth/revoke`: the whole endpoint, answer included.
    ///
    /// Body (form or JSON): `token`, an access or a refresh token, and an
    /// optional `token_type_hint` (`access_token` or `refresh_token`; other
    /// values are ignored, RFC 7009 section 2.1). The caller authenticates
    /// with client credentials (HTTP Basic or body), or with `Authorization:
    /// Bearer` as the spec shows. Revoking either token revokes the whole
    /// grant. An unknown token, or one of another client, is answered like a
    /// success and revokes nothing (RFC 7009 section 2.2). Success is `200`
    /// with `{}`, since clients parse every 2xx body as JSON.
    pub async fn revoke(&self, request: &RequestParts<'_>) -> HttpAnswer {
        match self.revoke_token(request).await {
            Ok(_) => revocation_answer(),
            Err(error) => error.to_answer(&self.config.realm()),
        }
    }

    /// `POST /auth/revoke`, returning the revoked grant (if one was) for
    /// hosts that build their own answer.
    ///
    /// # Errors
    /// [`RevocationError`], answered with [`RevocationError::to_answer`].
    pub async fn revoke_token(
        &self,
        request: &RequestParts<'_>,
    ) -> Result<Option<GrantId>, RevocationError> {
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
            return Ok(None);
        };
        if owner != caller_client {
            // RFC 7009 section 2.2: answered as a success, revokes nothing.
            return Ok(None);
        }
        self.stores
            .tokens
            .revoke_grant(grant_id, self.clock.now())
            .await
            .map_err(TokenError::from)?;
        Ok(Some(grant_id))
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
