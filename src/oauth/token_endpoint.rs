//! The token endpoint (RFC 6749 sections 4.1.3 and 6): `POST /auth/token` exchanges
//! a code for tokens, or a refresh token for new ones.

use serde_json::json;

use crate::oauth::decisions::{
    CodeRefusal, RefreshDecision, access_token_record, check_code_exchange, check_refresh_token,
    decide_refresh, is_active, refresh_token_record,
};
use crate::request::{HeaderCredentials, Params, ParamsError, parse_authorization};
use crate::{
    AccessToken, AccessTokenRecord, AnswerContext, AuthorizationCode, Caller, Client, ClientId,
    ClientSecret, CodeLookup, CodeTake, Gateway, GrantId, HttpAnswer, RefreshToken,
    RefreshTokenRecord, RequestParts, Rotation, SecretHash, StoreError, ToHttpAnswer, TokenError,
};

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

/// Client credentials as presented, and whether they came by HTTP Basic.
pub(crate) struct PresentedClient {
    pub(crate) id: String,
    pub(crate) secret: String,
    pub(crate) basic: bool,
}

pub(crate) fn params_error(error: ParamsError) -> TokenError {
    match error {
        ParamsError::UnsupportedMediaType => TokenError::UnsupportedMediaType,
        ParamsError::Malformed => TokenError::MalformedBody,
        ParamsError::Duplicate(name) => TokenError::DuplicateParameter { name },
        ParamsError::NotAString(name) => TokenError::InvalidDataType {
            path: format!("body.{name}"),
        },
    }
}

/// The client credentials of a request: HTTP Basic (RFC 6749 section 2.3.1)
/// or `client_id`/`client_secret` in the body. Both may be sent if they agree.
/// A Bearer header is not client authentication and is ignored: some clients
/// send their access token on every request, this one included (the real
/// service's official Ruby client adds `Authorization: Bearer` to all its
/// calls).
///
/// Returns `Ok(None)` when neither was sent.
pub(crate) fn presented_client(
    params: &Params,
    authorization: Option<&str>,
) -> Result<Option<PresentedClient>, TokenError> {
    let header = authorization.map(parse_authorization);
    let body_id = params.get("client_id");
    let body_secret = params.get("client_secret");
    match header {
        Some(HeaderCredentials::Basic {
            client_id,
            client_secret,
        }) => {
            if body_id.is_some_and(|id| id != client_id) {
                return Err(TokenError::Conflicting {
                    path: "body.client_id",
                    reason: "it differs from the Authorization header",
                });
            }
            if body_secret.is_some_and(|secret| secret != client_secret) {
                return Err(TokenError::Conflicting {
                    path: "body.client_secret",
                    reason: "it differs from the Authorization header",
                });
            }
            Ok(Some(PresentedClient {
                id: client_id,
                secret: client_secret,
                basic: true,
            }))
        }
        Some(HeaderCredentials::Unreadable)
            if authorization
                .is_some_and(|h| h.trim_start().to_ascii_lowercase().starts_with("basic")) =>
        {
            Err(TokenError::InvalidClient { basic: true })
        }
        _ => match (body_id, body_secret) {
            (None, None) => Ok(None),
            (None, Some(_)) => Err(TokenError::MissingField {
                path: "body.client_id",
            }),
            (Some(_), None) => Err(TokenError::MissingField {
                path: "body.client_secret",
            }),
            (Some(id), Some(secret)) => Ok(Some(PresentedClient {
                id: id.to_owned(),
                secret: secret.to_owned(),
                basic: false,
            })),
        },
    }
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

    /// The registered client whose secret was presented.
    pub(crate) async fn authenticate_client(
        &self,
        presented: &PresentedClient,
    ) -> Result<Client, TokenError> {
        let invalid = TokenError::InvalidClient {
            basic: presented.basic,
        };
        let client = self
            .stores
            .clients
            .find_client(&ClientId::new(presented.id.as_str()))
            .await?;
        // Hash the presented secret even for an unknown client, so that the
        // answer's timing does not tell which client ids exist.
        let secret = ClientSecret::new(presented.secret.as_str());
        match client {
            Some(client) if client.secret_matches(&secret, &self.hasher) => Ok(client),
            Some(_) => Err(invalid),
            None => {
                let _ = secret.hash(&self.hasher);
                Err(invalid)
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
        match self
            .stores
            .tokens
            .redeem_code(&hash, &refresh, &access)
            .await?
        {
            CodeTake::Taken(_) => Ok(self.stored_tokens(access_token, refresh_token, caller)),
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

    async fn refresh(
        &self,
        client: &Client,
        presented: RefreshToken,
    ) -> Result<TokenResponse, TokenError> {
        let now = self.clock.now();
        let hash = presented.hash(&self.hasher);
        let policy = client.refresh_policy.unwrap_or(self.config.refresh_policy);
        let mut record = self.valid_refresh_token(&hash, client, now).await?;
        let caller = Caller {
            account_id: record.account_id,
            client_id: record.client_id.clone(),
            grant_id: record.grant_id,
        };
        let mut decision = decide_refresh(&record, policy, now);
        if decision == RefreshDecision::Rotate {
            let successor = presented.successor(&self.hasher);
            let successor_record = refresh_token_record(
                &successor,
                Some(hash),
                &caller,
                now,
                &self.config,
                &self.hasher,
            );
            let (access_token, access) = self.new_access_token(&caller, now);
            // One atomic step: should it fail, the presented token is still
            // active and the client's retry is a refresh like the first,
            // not a reuse.
            match self
                .stores
                .tokens
                .rotate_refresh_token(&hash, &successor_record, &access, now)
                .await?
            {
                Rotation::Rotated => {
                    return Ok(self.stored_tokens(access_token, successor, caller));
                }
                // Lost a race with a concurrent refresh of the same token:
                // decide again on the token as the winner left it.
                Rotation::AlreadyRotated { .. } => {
                    record = self.valid_refresh_token(&hash, client, now).await?;
                    decision = decide_refresh(&record, policy, now);
                }
                Rotation::Revoked | Rotation::NotFound => {
                    return Err(TokenError::InvalidRefreshToken);
                }
            }
        }
        match decision {
            RefreshDecision::KeepToken => self.issue_access(caller, presented, now).await,
            RefreshDecision::ReissueSuccessor(successor_hash) => {
                self.reissue_successor(caller, &presented, successor_hash, now)
                    .await
            }
            RefreshDecision::RevokeGrant => self.reused(caller.grant_id, now).await,
            // The token read back after a lost race is rotated; a store that
            // reports it rotated and then active is not keeping its
            // contract.
            RefreshDecision::Rotate => Err(TokenError::Store(StoreError::backend(
                "rotate a refresh token",
                RotationContended,
            ))),
        }
    }

    /// The refresh token hashed to `hash`, if it exists and `client` may use
    /// it now (its rotation state is decided separately).
    async fn valid_refresh_token(
        &self,
        hash: &SecretHash,
        client: &Client,
        now: time::OffsetDateTime,
    ) -> Result<RefreshTokenRecord, TokenError> {
        let record = self
            .stores
            .tokens
            .find_refresh_token(hash)
            .await?
            .ok_or(TokenError::InvalidRefreshToken)?;
        // Revoked, another client's or expired: one answer for all, so that
        // the answer tells a thief nothing about the token it holds.
        check_refresh_token(&record, &client.id, now)
            .map_err(|_refusal| TokenError::InvalidRefreshToken)?;
        Ok(record)
    }

    /// Answers with the successor already issued for `presented`, and a new
    /// access token, if that successor is still the live one; otherwise the
    /// use of `presented` is reuse.
    async fn reissue_successor(
        &self,
        caller: Caller,
        presented: &RefreshToken,
        successor_hash: SecretHash,
        now: time::OffsetDateTime,
    ) -> Result<TokenResponse, TokenError> {
        // Successors are derived from their predecessor under the server
        // key, so the one issued can be handed out again without keeping it.
        let successor = presented.successor(&self.hasher);
        let live = self
            .stores
            .tokens
            .find_refresh_token(&successor_hash)
            .await?;
        if successor.hash(&self.hasher) == successor_hash
            && live.is_some_and(|record| is_active(&record) && !record.revoked)
        {
            return self.issue_access(caller, successor, now).await;
        }
        self.reused(caller.grant_id, now).await
    }

    /// A retired refresh token used again: the grant is revoked, since the
    /// token may be in a thief's hands (RFC 9700 section 4.14.2).
    async fn reused(
        &self,
        grant_id: GrantId,
        now: time::OffsetDateTime,
    ) -> Result<TokenResponse, TokenError> {
        self.stores.tokens.revoke_grant(grant_id, now).await?;
        Err(TokenError::InvalidRefreshToken)
    }

    /// Issues an access token alongside a refresh token that is already
    /// stored (the grace window's successor, or the token kept under
    /// [`crate::RefreshPolicy::Reuse`]).
    async fn issue_access(
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
    fn new_access_token(
        &self,
        caller: &Caller,
        now: time::OffsetDateTime,
    ) -> (AccessToken, AccessTokenRecord) {
        let access_token = AccessToken::generate(&*self.random);
        let record = access_token_record(&access_token, caller, now, &self.config, &self.hasher);
        (access_token, record)
    }

    /// The answer for tokens that are stored.
    fn stored_tokens(
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

/// A refresh token stayed active and unrotatable: the store reported it
/// rotated by a concurrent caller, then read it back active.
#[derive(Debug, thiserror::Error)]
#[error("the refresh token kept changing while it was being rotated")]
struct RotationContended;
