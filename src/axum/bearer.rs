//! A guard for a host's own routes: the caller of a valid access token.

use std::sync::Arc;

use ::axum::extract::{FromRef, FromRequestParts};
use http::request::Parts;

use crate::answer::HttpAnswer;
use crate::gateway::Gateway;
use crate::oauth::decisions::Caller;

/// The account, application and grant of the request's bearer token
/// (RFC 6750), for a host's own API routes:
///
/// ```
/// use conversion_gateway::axum::Bearer;
///
/// async fn contacts(Bearer(caller): Bearer) -> String {
///     format!("the contacts of account {}", caller.account_id)
/// }
/// ```
///
/// A request without a valid token never reaches the handler: it is
/// answered 401 with the `WWW-Authenticate` challenge the real service's
/// clients read (`error="expired_token"` tells them to refresh). Needs the
/// state to hold the `Arc<Gateway>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bearer(pub Caller);

impl<S: Send + Sync> FromRequestParts<S> for Bearer
where
    Arc<Gateway>: FromRef<S>,
{
    type Rejection = HttpAnswer;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, HttpAnswer> {
        let gateway = Arc::<Gateway>::from_ref(state);
        let authorization = parts
            .headers
            .get(http::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok());
        match gateway.authenticate_bearer(authorization).await {
            Ok(caller) => Ok(Bearer(caller)),
            Err(refused) => Err(gateway.answer(refused)),
        }
    }
}
