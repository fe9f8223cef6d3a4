//! Why an API key was not issued. The key's stored record,
//! [`ApiKeyRecord`](crate::records::api_key::ApiKeyRecord), is in
//! [`crate::records::api_key`].

use crate::answer::{AnswerContext, HttpAnswer, ToHttpAnswer};
use crate::store::error::StoreError;

/// Why [`crate::Gateway::issue_api_key`] issued no key.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiKeyError {
    /// The account already holds
    /// [`crate::GatewayConfig::max_api_keys_per_account`] keys: switch one
    /// off or delete one first.
    #[error("the account already holds its maximum of {max} API keys")]
    LimitReached {
        /// The configured maximum.
        max: usize,
    },
    /// The store failed; no key was issued.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// `409 API_KEY_LIMIT_REACHED` (the account's state, not the request, is in
/// the way), or the store's answer. Exhaustive.
impl ToHttpAnswer for ApiKeyError {
    fn to_http_answer(&self, context: &AnswerContext<'_>) -> HttpAnswer {
        match self {
            ApiKeyError::LimitReached { .. } => {
                HttpAnswer::error(409, "API_KEY_LIMIT_REACHED", &self.to_string())
            }
            ApiKeyError::Store(error) => error.to_http_answer(context),
        }
    }
}
