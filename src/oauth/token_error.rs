//! Errors of the token endpoint, and their HTTP answers.

use serde_json::{Value, json};

use crate::answer::{AnswerContext, HttpAnswer, ToHttpAnswer};
use crate::store::error::StoreError;

/// Why the token endpoint refused a request.
///
/// Each maps to the `error_type` of the real service this crate mirrors (the
/// RD Station Marketing API: `CANNOT_BE_NULL`, `ACCESS_DENIED`,
/// `EXPIRED_CODE_GRANT`, `INVALID_REFRESH_TOKEN`...) and to RFC 6749 section
/// 5.2's `error`, both carried in the body so that the platform's own
/// clients and standard OAuth libraries can read it.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// A required parameter is missing.
    #[error("{path} is required")]
    MissingField {
        /// Where it was expected, such as `body.client_secret`.
        path: &'static str,
    },
    /// A parameter has the wrong JSON type.
    #[error("{path} must be a string")]
    InvalidDataType {
        /// The parameter, such as `body.code`.
        path: String,
    },
    /// The body could not be parsed as its content type.
    #[error("the request body could not be parsed as its content type")]
    MalformedBody,
    /// The body's content type is neither JSON nor a form.
    #[error("the content type must be application/json or application/x-www-form-urlencoded")]
    UnsupportedMediaType,
    /// A parameter was sent more than once (RFC 6749 section 3.2).
    #[error("parameter {name} was sent more than once")]
    DuplicateParameter {
        /// The parameter.
        name: String,
    },
    /// Two parameters that exclude each other were sent: client credentials
    /// in the header and the body that disagree, or both `code` and
    /// `refresh_token`, or a `grant_type` that contradicts the body.
    #[error("{path} conflicts with another parameter: {reason}")]
    Conflicting {
        /// The parameter, such as `body.client_id`.
        path: &'static str,
        /// Which conflict.
        reason: &'static str,
    },
    /// `grant_type` is not one this endpoint serves.
    #[error("grant_type must be authorization_code or refresh_token")]
    UnsupportedGrantType,
    /// The client is unknown or its secret is wrong.
    #[error("invalid client credentials")]
    InvalidClient {
        /// Whether the client authenticated with HTTP Basic (then the answer
        /// carries a Basic challenge, RFC 6749 section 5.2).
        basic: bool,
    },
    /// The code was never issued, or was issued to another client, or for
    /// another redirect URI.
    #[error("the authorization code is invalid")]
    InvalidCode,
    /// The PKCE verifier is missing, malformed or does not match, or was
    /// sent for a code issued without a challenge.
    #[error("the code verifier does not match the code challenge")]
    InvalidCodeVerifier,
    /// The code was already used or is past its lifetime.
    #[error("the authorization code was already used or has expired")]
    ExpiredCode,
    /// The refresh token is unknown, revoked, expired, reused after rotation,
    /// or of another client.
    #[error("the refresh token is invalid or was revoked")]
    InvalidRefreshToken,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl TokenError {
    /// How a request refused with this error counts in
    /// `cg_requests_total`.
    pub(crate) fn outcome(&self) -> crate::metrics::Outcome {
        use crate::metrics::Outcome;
        match self {
            TokenError::MissingField { .. }
            | TokenError::InvalidDataType { .. }
            | TokenError::MalformedBody
            | TokenError::UnsupportedMediaType
            | TokenError::DuplicateParameter { .. }
            | TokenError::Conflicting { .. }
            | TokenError::UnsupportedGrantType => Outcome::RefusedValidation,
            TokenError::InvalidClient { .. }
            | TokenError::InvalidCode
            | TokenError::InvalidCodeVerifier
            | TokenError::ExpiredCode
            | TokenError::InvalidRefreshToken => Outcome::RefusedAuthentication,
            TokenError::Store(_) => Outcome::Unavailable,
        }
    }
}

/// The answer: a 400, 401 or 415 with both error vocabularies in the body,
/// never cached, with a challenge where clients expect one. Exhaustive: a
/// new variant does not compile until it is mapped.
impl ToHttpAnswer for TokenError {
    fn to_http_answer(&self, context: &AnswerContext<'_>) -> HttpAnswer {
        let realm = context.realm();
        let message = self.to_string();
        let (status, error_type, oauth_error, rules): (u16, &str, &str, Option<Value>) = match self
        {
            TokenError::MissingField { .. } => (400, "CANNOT_BE_NULL", "invalid_request", None),
            TokenError::InvalidDataType { .. } => (
                400,
                "INVALID_DATA_TYPE",
                "invalid_request",
                Some(json!({ "data_type": "string" })),
            ),
            TokenError::MalformedBody => (400, "BAD_REQUEST", "invalid_request", None),
            TokenError::UnsupportedMediaType => {
                (415, "UNSUPPORTED_MEDIA_TYPE", "invalid_request", None)
            }
            TokenError::DuplicateParameter { .. } => (400, "BAD_REQUEST", "invalid_request", None),
            TokenError::Conflicting { .. } => (400, "CONFLICTING_FIELD", "invalid_request", None),
            TokenError::UnsupportedGrantType => (
                400,
                "INVALID_OPTION",
                "unsupported_grant_type",
                Some(json!({ "valid_options": ["authorization_code", "refresh_token"] })),
            ),
            TokenError::InvalidClient { .. } => (401, "ACCESS_DENIED", "invalid_client", None),
            TokenError::InvalidCode | TokenError::InvalidCodeVerifier => {
                (401, "ACCESS_DENIED", "invalid_grant", None)
            }
            TokenError::ExpiredCode => (401, "EXPIRED_CODE_GRANT", "invalid_grant", None),
            TokenError::InvalidRefreshToken => {
                (401, "INVALID_REFRESH_TOKEN", "invalid_grant", None)
            }
            TokenError::Store(error) => return error.to_http_answer(context),
        };
        let mut body = json!({
            "error_type": error_type,
            "error_message": message,
            "error": oauth_error,
            "error_description": message,
        });
        if let Some(path) = self.path() {
            body["path"] = Value::from(path);
        }
        if let Some(rules) = rules {
            body["validation_rules"] = rules;
        }
        if let TokenError::MissingField { path } = self {
            // RFC 6749's `error` above for standard clients, and the real
            // service's list of field errors for its own clients, which
            // read `errors[].path`.
            body["errors"] = json!([{
                "error_type": "CANNOT_BE_NULL",
                "error_message": "Cannot be null.",
                "path": path,
            }]);
        }
        let answer = HttpAnswer::json(status, body)
            .with_header("cache-control", "no-store")
            .with_header("pragma", "no-cache");
        match self {
            TokenError::InvalidClient { basic: true } => {
                answer.with_header("www-authenticate", format!("Basic realm=\"{realm}\""))
            }
            // The real service's exact challenge for a bad refresh token
            // (`Bearer realm=..., error="invalid_grant", error_description=...`), also given
            // for the other invalid_grant cases so clients need one rule.
            // Never `expired_token` here: clients read that as "refresh".
            TokenError::InvalidCode
            | TokenError::InvalidCodeVerifier
            | TokenError::ExpiredCode
            | TokenError::InvalidRefreshToken => answer.with_header(
                "www-authenticate",
                format!(
                    "Bearer realm=\"{realm}\", error=\"invalid_grant\", error_description=\"{message}\""
                ),
            ),
            TokenError::MissingField { .. }
            | TokenError::InvalidDataType { .. }
            | TokenError::MalformedBody
            | TokenError::UnsupportedMediaType
            | TokenError::DuplicateParameter { .. }
            | TokenError::Conflicting { .. }
            | TokenError::UnsupportedGrantType
            | TokenError::InvalidClient { basic: false }
            | TokenError::Store(_) => answer,
        }
    }
}

impl TokenError {
    /// The request path of the offending field, where there is one.
    fn path(&self) -> Option<String> {
        match self {
            TokenError::MissingField { path } | TokenError::Conflicting { path, .. } => {
                Some((*path).to_owned())
            }
            TokenError::InvalidDataType { path } => Some(path.clone()),
            TokenError::UnsupportedGrantType => Some("body.grant_type".to_owned()),
            TokenError::MalformedBody
            | TokenError::UnsupportedMediaType
            | TokenError::DuplicateParameter { .. }
            | TokenError::InvalidClient { .. }
            | TokenError::InvalidCode
            | TokenError::InvalidCodeVerifier
            | TokenError::ExpiredCode
            | TokenError::InvalidRefreshToken
            | TokenError::Store(_) => None,
        }
    }
}
