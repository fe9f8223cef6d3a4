//! Bearer authentication of API calls: one function for hosts to guard
//! their own routes.

use serde_json::json;

use crate::answer::{AnswerContext, HttpAnswer, ToHttpAnswer};
use crate::gateway::Gateway;
use crate::oauth::decisions::Caller;
use crate::oauth::decisions::{AccessRefusal, check_access_token};
use crate::request::{HeaderCredentials, parse_authorization};
use crate::secret::AccessToken;
use crate::store::error::StoreError;

/// Why a bearer token did not authenticate.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BearerError {
    /// No `Authorization: Bearer` header.
    #[error("the request carries no bearer token")]
    Missing,
    /// The token is unknown or its grant was revoked.
    #[error("the access token is invalid or was revoked")]
    Invalid,
    /// The token's lifetime has passed: refresh it.
    #[error("the access token expired")]
    Expired,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The 401 answer with an RFC 6750 section 3 challenge. The real service's
/// clients tell an expired token from a bad one by the exact text
/// `error="expired_token"` in `WWW-Authenticate` (and then refresh), so an
/// expired token says so and nothing else does. Exhaustive.
impl ToHttpAnswer for BearerError {
    fn to_http_answer(&self, context: &AnswerContext<'_>) -> HttpAnswer {
        let realm = context.realm();
        let (oauth_error, description) = match self {
            BearerError::Missing => ("invalid_request", "The request carries no bearer token"),
            BearerError::Invalid => (
                "invalid_token",
                "The access token is invalid or was revoked",
            ),
            BearerError::Expired => ("expired_token", "The access token expired"),
            BearerError::Store(error) => return error.to_http_answer(context),
        };
        HttpAnswer::json(
            401,
            json!({ "error_type": "UNAUTHORIZED", "error_message": self.to_string() }),
        )
        .with_header(
            "www-authenticate",
            format!(
                "Bearer realm=\"{realm}\", error=\"{oauth_error}\", error_description=\"{description}\""
            ),
        )
    }
}

impl Gateway {
    /// Authenticates an API call by its `Authorization` header: who is
    /// calling, or why not. Hosts guard their own routes with it:
    ///
    /// ```
    /// # use conversion_gateway::{Gateway, HttpAnswer};
    /// async fn my_route(gateway: &Gateway, authorization: Option<&str>) -> HttpAnswer {
    ///     let caller = match gateway.authenticate_bearer(authorization).await {
    ///         Ok(caller) => caller,
    ///         Err(refused) => return gateway.answer(refused),
    ///     };
    ///     HttpAnswer::json(200, serde_json::json!({ "account": caller.account_id }))
    /// }
    /// ```
    ///
    /// # Errors
    /// [`BearerError`]: no bearer token, an invalid or expired one, or the
    /// store failed.
    pub async fn authenticate_bearer(
        &self,
        authorization: Option<&str>,
    ) -> Result<Caller, BearerError> {
        let token = match authorization.map(parse_authorization) {
            Some(HeaderCredentials::Bearer(token)) => AccessToken::new(token),
            _ => return Err(BearerError::Missing),
        };
        let timer = self.metrics.store_operation("tokens", "find_access_token");
        let found = self
            .stores
            .tokens
            .find_access_token(&token.hash(&self.hasher))
            .await;
        timer.done();
        let record = found?.ok_or(BearerError::Invalid)?;
        let caller =
            check_access_token(&record, self.clock.now()).map_err(|refusal| match refusal {
                AccessRefusal::Revoked => BearerError::Invalid,
                AccessRefusal::Expired => BearerError::Expired,
            })?;
        // The tokens of an application switched off are refused like
        // revoked ones (and work again when it is switched back on).
        if !self.client_is_active(&record.client_id).await? {
            return Err(BearerError::Invalid);
        }
        Ok(caller)
    }
}
