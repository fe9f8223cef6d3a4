//! The authorization dialog (RFC 6749 section 4.1.1): validating the
//! request, and issuing a code or a refusal once the host has asked the
//! user.
//!
//! The host owns the pages (login and consent). It calls
//! [`Gateway::authorization_request`] with the dialog's query string on every
//! step, shows [`AuthorizationRequest::client_name`] on the consent screen,
//! and calls [`Gateway::approve`] or [`Gateway::deny`] with the answer.

use serde_json::json;

use crate::account::AccountId;
use crate::answer::{AnswerContext, HttpAnswer, ToHttpAnswer};
use crate::gateway::Gateway;
use crate::oauth::decisions::is_pkce_value;
use crate::random::random_uuid;
use crate::records::client::{Client, ClientId};
use crate::records::grant::{Grant, GrantId};
use crate::records::tokens::{CodeRecord, PkceChallenge};
use crate::request::Params;
use crate::secret::AuthorizationCode;
use crate::store::error::StoreError;

/// A validated authorization request: the application is registered and
/// the redirect URI is one of its own, so answers may be sent there.
#[derive(Clone, Debug)]
pub struct AuthorizationRequest {
    client: Client,
    redirect_uri: String,
    state: Option<String>,
    pkce: Option<PkceChallenge>,
}

impl AuthorizationRequest {
    /// The application's identifier.
    pub fn client_id(&self) -> &ClientId {
        &self.client.id
    }

    /// The application's name, to show on the consent screen.
    pub fn client_name(&self) -> &str {
        &self.client.name
    }

    /// The redirect URI the answer goes to.
    pub fn redirect_uri(&self) -> &str {
        &self.redirect_uri
    }

    /// The `state` the application sent, echoed back on the redirect.
    pub fn state(&self) -> Option<&str> {
        self.state.as_deref()
    }
}

/// The user allowed the application: the code issued, and where the
/// browser goes next.
#[derive(Debug)]
pub struct Approval {
    code: AuthorizationCode,
    location: String,
}

impl Approval {
    /// The single-use authorization code (a secret: its `Debug` is redacted).
    pub fn code(&self) -> &AuthorizationCode {
        &self.code
    }

    /// The redirect: the application's redirect URI with `code` and `state`.
    pub fn location(&self) -> &str {
        &self.location
    }
}

/// `302 Found` to [`Approval::location`] (RFC 6749 section 4.1.2).
impl ToHttpAnswer for Approval {
    fn to_http_answer(&self, _: &AnswerContext<'_>) -> HttpAnswer {
        HttpAnswer::redirect(self.location.as_str())
    }
}

/// The user refused the application: where the browser goes next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    location: String,
}

impl Denial {
    /// The redirect: the application's redirect URI with
    /// `error=access_denied` and `state`.
    pub fn location(&self) -> &str {
        &self.location
    }
}

/// `302 Found` to [`Denial::location`] (RFC 6749 section 4.1.2.1).
impl ToHttpAnswer for Denial {
    fn to_http_answer(&self, _: &AnswerContext<'_>) -> HttpAnswer {
        HttpAnswer::redirect(self.location.as_str())
    }
}

/// Why the dialog refused a request.
///
/// The first variants concern the client or the redirect URI: they must be
/// shown to the user and never redirected (RFC 6749 section 4.1.2.1), since
/// the redirect URI cannot be trusted. The others are sent back to the
/// application on its (verified) redirect URI.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DialogError {
    /// `client_id` is missing.
    #[error("client_id is required")]
    MissingClientId,
    /// No application is registered with this `client_id`.
    #[error("no application is registered with this client_id")]
    UnknownClient,
    /// `redirect_uri` (or the legacy `redirect_url`) is missing.
    #[error("redirect_uri is required")]
    MissingRedirectUri,
    /// `redirect_uri` and `redirect_url` were both sent and differ.
    #[error("redirect_uri and redirect_url differ")]
    ConflictingRedirectUri,
    /// The redirect URI is not one the application registered.
    #[error("the redirect_uri is not registered for this application")]
    UnregisteredRedirectUri,
    /// The query string could not be read (a parameter sent twice).
    #[error("the query string is malformed: {0}")]
    MalformedQuery(String),
    /// `response_type` is present and not `code`; sent to the application.
    #[error("response_type must be code")]
    UnsupportedResponseType {
        /// Where the application waits.
        redirect_uri: String,
        /// Its `state`.
        state: Option<String>,
    },
    /// The PKCE parameters are malformed, use a method other than `S256`, or
    /// are missing for an application that requires them; sent to the
    /// application.
    #[error("{reason}")]
    InvalidPkce {
        /// What is wrong.
        reason: &'static str,
        /// Where the application waits.
        redirect_uri: String,
        /// Its `state`.
        state: Option<String>,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl DialogError {
    /// Whether the error is sent to the application by redirect (`true`) or
    /// must be shown to the user (`false`): RFC 6749 section 4.1.2.1, "If the
    /// request fails due to a missing, invalid, or mismatching redirection
    /// URI, or if the client identifier is missing or invalid, the
    /// authorization server SHOULD inform the resource owner of the error and
    /// MUST NOT automatically redirect the user-agent to the invalid
    /// redirection URI".
    pub fn redirects(&self) -> bool {
        matches!(
            self,
            DialogError::UnsupportedResponseType { .. } | DialogError::InvalidPkce { .. }
        )
    }
}

/// A JSON error for the host to show (hosts that render HTML use
/// [`DialogError::redirects`] and the `Display` text instead), or the
/// redirect to the application. Exhaustive.
impl ToHttpAnswer for DialogError {
    fn to_http_answer(&self, context: &AnswerContext<'_>) -> HttpAnswer {
        let message = self.to_string();
        // Shown to the user, never redirected; `path` names a missing parameter.
        let shown = |status: u16, error_type: &str, oauth_error: &str, path: Option<&str>| {
            let mut body = json!({
                "error_type": error_type,
                "error_message": message,
                "error": oauth_error,
                "error_description": message,
            });
            if let Some(path) = path {
                body["path"] = json!(path);
            }
            HttpAnswer::json(status, body)
        };
        match self {
            DialogError::MissingClientId => shown(
                400,
                "CANNOT_BE_NULL",
                "invalid_request",
                Some("query.client_id"),
            ),
            DialogError::MissingRedirectUri => shown(
                400,
                "CANNOT_BE_NULL",
                "invalid_request",
                Some("query.redirect_uri"),
            ),
            DialogError::UnknownClient => shown(400, "INVALID_CLIENT", "invalid_client", None),
            DialogError::ConflictingRedirectUri => {
                shown(400, "CONFLICTING_FIELD", "invalid_request", None)
            }
            DialogError::UnregisteredRedirectUri => {
                shown(400, "INVALID_REDIRECT_URI", "invalid_request", None)
            }
            DialogError::MalformedQuery(_) => shown(400, "BAD_REQUEST", "invalid_request", None),
            DialogError::UnsupportedResponseType {
                redirect_uri,
                state,
            } => HttpAnswer::redirect(redirect_with(
                redirect_uri,
                &[
                    ("error", "unsupported_response_type"),
                    ("error_description", &message),
                ],
                state.as_deref(),
            )),
            DialogError::InvalidPkce {
                redirect_uri,
                state,
                ..
            } => HttpAnswer::redirect(redirect_with(
                redirect_uri,
                &[
                    ("error", "invalid_request"),
                    ("error_description", &message),
                ],
                state.as_deref(),
            )),
            DialogError::Store(error) => error.to_http_answer(context),
        }
    }
}

/// `redirect_uri` with `params` (and `state`, when there is one) added to its
/// query: after `?`, or after `&` when it already has a query, and before a
/// fragment if one was registered.
fn redirect_with(redirect_uri: &str, params: &[(&str, &str)], state: Option<&str>) -> String {
    let (base, fragment) = match redirect_uri.split_once('#') {
        Some((base, fragment)) => (base, Some(fragment)),
        None => (redirect_uri, None),
    };
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (name, value) in params {
        query.append_pair(name, value);
    }
    if let Some(state) = state {
        query.append_pair("state", state);
    }
    let separator = match base.find('?') {
        None => "?",
        Some(at) if at + 1 == base.len() || base.ends_with('&') => "",
        Some(_) => "&",
    };
    let mut out = format!("{base}{separator}{}", query.finish());
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
    out
}

impl Gateway {
    /// Validates the dialog's query string (`GET /auth/dialog?...`).
    ///
    /// Reads `client_id`, `redirect_uri` (or the legacy `redirect_url` that
    /// official clients still send), `state`, `response_type` (must be `code`
    /// when present), and PKCE's `code_challenge` with
    /// `code_challenge_method=S256`. The redirect URI must equal a registered
    /// one exactly, after the single percent-decoding of the query string.
    ///
    /// # Errors
    /// [`DialogError`]: see [`DialogError::redirects`] for how to answer it.
    pub async fn authorization_request(
        &self,
        query: &str,
    ) -> Result<AuthorizationRequest, DialogError> {
        let params = Params::from_form(query.as_bytes())
            .map_err(|error| DialogError::MalformedQuery(error.to_string()))?;
        let client_id = params
            .get("client_id")
            .ok_or(DialogError::MissingClientId)?;
        let redirect_uri = match (params.get("redirect_uri"), params.get("redirect_url")) {
            (Some(uri), Some(url)) if uri != url => {
                return Err(DialogError::ConflictingRedirectUri);
            }
            (Some(uri), _) | (None, Some(uri)) => uri.to_owned(),
            (None, None) => return Err(DialogError::MissingRedirectUri),
        };
        let client = self
            .stores
            .clients
            .find_client(&ClientId::new(client_id))
            .await?
            // A client switched off gets no dialog, as if unknown.
            .filter(|client| client.active)
            .ok_or(DialogError::UnknownClient)?;
        if !client.has_redirect_uri(&redirect_uri) {
            return Err(DialogError::UnregisteredRedirectUri);
        }
        let state = params.get("state").map(str::to_owned);
        // From here on the redirect URI is trusted, so errors go back to it.
        if params
            .get("response_type")
            .is_some_and(|kind| kind != "code")
        {
            return Err(DialogError::UnsupportedResponseType {
                redirect_uri,
                state,
            });
        }
        let pkce_error = |reason| DialogError::InvalidPkce {
            reason,
            redirect_uri: redirect_uri.clone(),
            state: state.clone(),
        };
        let pkce = match (
            params.get("code_challenge"),
            params.get("code_challenge_method"),
        ) {
            (None, None) if client.require_pkce => {
                return Err(pkce_error(
                    "this application must send a PKCE code_challenge",
                ));
            }
            (None, None) => None,
            (None, Some(_)) => {
                return Err(pkce_error("code_challenge_method without code_challenge"));
            }
            // RFC 7636 section 4.3: a missing method means `plain`, which this
            // service does not accept (RFC 9700 section 2.1.1).
            (Some(_), method) if method != Some("S256") => {
                return Err(pkce_error("code_challenge_method must be S256"));
            }
            (Some(challenge), _) if !is_pkce_value(challenge) => {
                return Err(pkce_error(
                    "code_challenge must be 43 to 128 unreserved characters",
                ));
            }
            (Some(challenge), _) => Some(PkceChallenge {
                challenge: challenge.to_owned(),
            }),
        };
        Ok(AuthorizationRequest {
            client,
            redirect_uri,
            state,
            pkce,
        })
    }

    /// The user (logged in as `account`) allowed the application: creates a
    /// grant and a single-use code, to be sent back by the redirect
    /// `<redirect_uri>?code=<code>[&state=<state>]` (RFC 6749 section
    /// 4.1.2). Authorizing again creates a new grant; earlier ones stay
    /// until revoked.
    ///
    /// # Errors
    /// The store's error; nothing usable was issued.
    pub async fn approve(
        &self,
        request: &AuthorizationRequest,
        account: AccountId,
    ) -> Result<Approval, StoreError> {
        let now = self.clock.now();
        let grant = Grant {
            id: GrantId(random_uuid(&*self.random)),
            client_id: request.client.id.clone(),
            account_id: account,
            created_at: now,
            revoked_at: None,
            last_refreshed_at: None,
        };
        let code = AuthorizationCode::generate(&*self.random);
        let record = CodeRecord {
            hash: code.hash(&self.hasher),
            grant_id: grant.id,
            client_id: grant.client_id.clone(),
            account_id: account,
            redirect_uri: request.redirect_uri.clone(),
            pkce: request.pkce.clone(),
            issued_at: now,
            expires_at: now + self.config.code_lifetime,
        };
        self.stores.tokens.insert_grant(&grant).await?;
        self.stores.tokens.insert_code(&record).await?;
        let location = redirect_with(
            &request.redirect_uri,
            &[("code", code.expose())],
            request.state.as_deref(),
        );
        Ok(Approval { code, location })
    }

    /// The user refused: the redirect with `error=access_denied` (RFC 6749
    /// section 4.1.2.1) and the `state`.
    pub fn deny(&self, request: &AuthorizationRequest) -> Denial {
        Denial {
            location: redirect_with(
                &request.redirect_uri,
                &[
                    ("error", "access_denied"),
                    ("error_description", "the user denied access"),
                ],
                request.state.as_deref(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_keep_the_registered_query_and_fragment() {
        assert_eq!(
            redirect_with("https://a.example/cb", &[("code", "x")], None),
            "https://a.example/cb?code=x"
        );
        assert_eq!(
            redirect_with("https://a.example/cb?u=1", &[("code", "x")], Some("s t&")),
            "https://a.example/cb?u=1&code=x&state=s+t%26"
        );
        assert_eq!(
            redirect_with("https://a.example/cb?", &[("code", "x")], None),
            "https://a.example/cb?code=x"
        );
        assert_eq!(
            redirect_with("https://a.example/cb#frag", &[("code", "x")], None),
            "https://a.example/cb?code=x#frag"
        );
    }
}
