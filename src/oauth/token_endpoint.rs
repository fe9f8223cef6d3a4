//! The token endpoint (RFC 6749 sections 4.1.3 and 6): `POST /auth/token`
//! exchanges a code for tokens, or a refresh token for new ones.
//!
//! [`Gateway::token`] reads the request, authenticates the client
//! (`client_auth.rs`), and runs the code exchange here or the refresh
//! (`refresh.rs`).

use serde_json::json;

use crate::answer::{AnswerContext, HttpAnswer, ToHttpAnswer};
use crate::gateway::Gateway;
use crate::oauth::client_auth::{params_error, presented_client};
use crate::oauth::decisions::Caller;
use crate::oauth::decisions::{
    CodeRefusal, access_token_record, check_code_exchange, refresh_token_record,
};
use crate::oauth::token_error::TokenError;
use crate::records::client::Client;
use crate::records::grant::GrantId;
use crate::records::tokens::AccessTokenRecord;
use crate::request::Params;
use crate::request::RequestParts;
use crate::secret::{AccessToken, AuthorizationCode, RefreshToken};
use crate::store::{CodeLookup, CodeTake};

/// A successful token answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenResponse {
    /// The new access token.
    pub access_token: AccessToken,
    /// The refresh token to use next (the same one under
    /// [`crate::RefreshPolicy::Reuse`]).
    pub refresh_token: RefreshToken,
    /// The access token's lifetime in seconds (86400 by default).
    pub expires_in: i64,
    /// Who the tokens act for.
    pub caller: Caller,
}

/// `200` with `access_token`, `refresh_token`, `expires_in` and
/// `token_type: "Bearer"` (which standard clients such as the Rust `oauth2`
/// crate require), never cached (RFC 6749 section 5.1: "The authorization
/// server MUST include the HTTP "Cache-Control" response header field with a
/// value of "no-store" in any response containing tokens").
impl ToHttpAnswer for TokenResponse {
    fn to_http_answer(&self, _: &AnswerContext<'_>) -> HttpAnswer {
        HttpAnswer::json(
            200,
            json!({
                "access_token": self.access_token.expose(),
                "refresh_token": self.refresh_token.expose(),
                "expires_in": self.expires_in,
                "token_type": "Bearer",
            }),
        )
        .with_header("cache-control", "no-store")
        .with_header("pragma", "no-cache")
    }
}

/// What the token request asks for.
enum GrantRequest {
    Code {
        code: String,
        redirect_uri: Option<String>,
        code_verifier: Option<String>,
    },
    Refresh {
        refresh_token: String,
    },
}

/// What the body asks for: `code` means issue, `refresh_token` means refresh,
/// and a `grant_type`, when present, must agree. `code` may also come in the
/// query string (one production client sends it there).
fn grant_request(params: &Params, query: &Params) -> Result<GrantRequest, TokenError> {
    let code = params.get("code").or_else(|| query.get("code"));
    let refresh_token = params.get("refresh_token");
    let wants_code = match params.get("grant_type") {
        Some("authorization_code") => true,
        Some("refresh_token") => false,
        Some(_) => return Err(TokenError::UnsupportedGrantType),
        None => match (code, refresh_token) {
            (Some(_), Some(_)) => {
                return Err(TokenError::Conflicting {
                    path: "body.refresh_token",
                    reason: "code and refresh_token exclude each other",
                });
            }
            (_, None) => true,
            (None, Some(_)) => false,
        },
    };
    if wants_code {
        if refresh_token.is_some() {
            return Err(TokenError::Conflicting {
                path: "body.refresh_token",
                reason: "the request exchanges a code",
            });
        }
        Ok(GrantRequest::Code {
            code: code
                .ok_or(TokenError::MissingField { path: "body.code" })?
                .to_owned(),
            redirect_uri: params.get("redirect_uri").map(str::to_owned),
            code_verifier: params.get("code_verifier").map(str::to_owned),
        })
    } else {
        if params.get("code").is_some() {
            return Err(TokenError::Conflicting {
                path: "body.code",
                reason: "the request refreshes a token",
            });
        }
        Ok(GrantRequest::Refresh {
            refresh_token: refresh_token
                .ok_or(TokenError::MissingField {
                    path: "body.refresh_token",
                })?
                .to_owned(),
        })
    }
}

impl Gateway {
    /// `POST /auth/token`: exchanges an authorization code (RFC 6749 section
    /// 4.1.3) or a refresh token (section 6) for tokens.
    ///
    /// Bodies may be JSON (as the real service documents) or a form (as
    /// standard OAuth clients send); client credentials may be in the body
    /// or in HTTP Basic. Answer the result with [`Gateway::answer`].
    ///
    /// # Errors
    /// [`TokenError`]: the request, the client or the grant was refused, or
    /// the store failed.
    pub async fn token(&self, request: &RequestParts<'_>) -> Result<TokenResponse, TokenError> {
        let result = self.token_request(request).await;
        self.metrics
            .request("token", outcome(&result, TokenError::outcome));
        result
    }

    async fn token_request(&self, request: &RequestParts<'_>) -> Result<TokenResponse, TokenError> {
        let params = Params::from_body(request.content_type, request.body).map_err(params_error)?;
        let query = Params::from_form(request.query.as_bytes()).map_err(params_error)?;
        let presented =
            presented_client(&params, request.authorization)?.ok_or(TokenError::MissingField {
                path: "body.client_id",
            })?;
        let grant = grant_request(&params, &query)?;
        let client = self.authenticate_client(&presented).await?;
        match grant {
            GrantRequest::Code {
                code,
                redirect_uri,
                code_verifier,
            } => {
                self.exchange_code(
                    &client,
                    &code,
                    redirect_uri.as_deref(),
                    code_verifier.as_deref(),
                )
                .await
            }
            GrantRequest::Refresh { refresh_token } => {
                self.refresh(&client, RefreshToken::new(refresh_token))
                    .await
            }
        }
    }

    async fn exchange_code(
        &self,
        client: &Client,
        code: &str,
        redirect_uri: Option<&str>,
        code_verifier: Option<&str>,
    ) -> Result<TokenResponse, TokenError> {
        let now = self.clock.now();
        let hash = AuthorizationCode::new(code).hash(&self.hasher);
        let record = match self.stores.tokens.find_code(&hash).await? {
            CodeLookup::Unused(record) => record,
            CodeLookup::NotFound => return Err(TokenError::InvalidCode),
            CodeLookup::Used { grant_id, .. } => return self.replayed_code(grant_id, now).await,
        };
        if let Err(refusal) =
            check_code_exchange(&record, &client.id, redirect_uri, code_verifier, now)
        {
            // A refused exchange burns the code: a wrong verifier or client
            // may be an attacker's guess (RFC 7636 section 4.6, RFC 6749
            // section 10.5), and the code must not get another one.
            if let CodeTake::AlreadyTaken { grant_id, .. } =
                self.stores.tokens.take_code(&hash).await?
            {
                return self.replayed_code(grant_id, now).await;
            }
            return Err(match refusal {
                CodeRefusal::OtherClient | CodeRefusal::OtherRedirectUri => TokenError::InvalidCode,
                CodeRefusal::Expired => TokenError::ExpiredCode,
                CodeRefusal::VerifierMismatch => TokenError::InvalidCodeVerifier,
            });
        }
        let caller = Caller {
            account_id: record.account_id,
            client_id: record.client_id,
            grant_id: record.grant_id,
        };
        let refresh_token = RefreshToken::generate(&*self.random);
        let refresh = refresh_token_record(
            &refresh_token,
            None,
            &caller,
            now,
            &self.config,
            &self.hasher,
        );
        let (access_token, access) = self.new_access_token(&caller, now);
        // One atomic step: should it fail, the code is still unused and the
        // client's retry is an exchange like the first, not a replay.
        let timer = self.metrics.store_operation("tokens", "redeem_code");
        let taken = self
            .stores
            .tokens
            .redeem_code(&hash, &refresh, &access)
            .await?;
        timer.done();
        match taken {
            CodeTake::Taken(_) => {
                self.metrics.token_issued("authorization_code");
                Ok(self.stored_tokens(access_token, refresh_token, caller))
            }
            // Lost a race with another exchange of the same code.
            CodeTake::AlreadyTaken { grant_id, .. } => self.replayed_code(grant_id, now).await,
            CodeTake::NotFound => Err(TokenError::InvalidCode),
        }
    }

    /// A code presented after it was used: RFC 6749 section 4.1.2, "if an
    /// authorization code is used more than once, the authorization server
    /// MUST deny the request and SHOULD revoke (when possible) all tokens
    /// previously issued based on that authorization code". The second user
    /// may be the thief.
    async fn replayed_code(
        &self,
        grant_id: GrantId,
        now: time::OffsetDateTime,
    ) -> Result<TokenResponse, TokenError> {
        self.stores.tokens.revoke_grant(grant_id, now).await?;
        Err(TokenError::ExpiredCode)
    }

    /// Issues an access token alongside a refresh token that is already
    /// stored (the grace window's successor, or the token kept under
    /// [`crate::RefreshPolicy::Reuse`]).
    pub(super) async fn issue_access(
        &self,
        caller: Caller,
        refresh_token: RefreshToken,
        now: time::OffsetDateTime,
    ) -> Result<TokenResponse, TokenError> {
        let (access_token, record) = self.new_access_token(&caller, now);
        self.stores.tokens.insert_access_token(&record).await?;
        Ok(self.stored_tokens(access_token, refresh_token, caller))
    }

    /// A fresh access token for `caller` and its record, not yet stored.
    pub(super) fn new_access_token(
        &self,
        caller: &Caller,
        now: time::OffsetDateTime,
    ) -> (AccessToken, AccessTokenRecord) {
        let access_token = AccessToken::generate(&*self.random);
        let record = access_token_record(&access_token, caller, now, &self.config, &self.hasher);
        (access_token, record)
    }

    /// The answer for tokens that are stored.
    pub(super) fn stored_tokens(
        &self,
        access_token: AccessToken,
        refresh_token: RefreshToken,
        caller: Caller,
    ) -> TokenResponse {
        TokenResponse {
            access_token,
            refresh_token,
            expires_in: self.config.access_token_lifetime.whole_seconds(),
            caller,
        }
    }
}

/// How a result counts in `cg_requests_total`: accepted, or as its error
/// says.
pub(crate) fn outcome<T, E>(
    result: &Result<T, E>,
    refused: impl FnOnce(&E) -> crate::metrics::Outcome,
) -> crate::metrics::Outcome {
    match result {
        Ok(_) => crate::metrics::Outcome::Accepted,
        Err(error) => refused(error),
    }
}
