//! The authorization dialog (`/auth/dialog`): the sign-in page, the consent
//! screen, and the forms that post to them. The core decides what the
//! request is and where the browser goes back to
//! ([`Gateway::authorization_request`], `approve`, `deny`); this file is
//! what only a host can do: know who the browser is.
//!
//! ```text
//! GET  /auth/dialog?client_id&redirect_uri…   dialog_page
//!        no session  -> sign-in page (login nonce cookie, CSRF token)
//!        session     -> consent screen (CSRF token bound to the session)
//! POST /auth/dialog action=login              login: CSRF, throttle, store, Argon2
//!        -> 303 back to the dialog with a session cookie
//! POST /auth/dialog action=consent            decision=allow|deny
//!        -> 302 to the application with a code, or error=access_denied
//! POST /auth/dialog action=switch             ends the session, 303 back
//! ```

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, State};
use axum::http::header::{self, HeaderMap};
use axum::http::{StatusCode, Uri};
use axum::middleware;
use axum::response::Response;
use axum::routing::get;
use conversion_gateway::axum::{OAuthRequest, REQUEST_TIMEOUT, json_errors};
use conversion_gateway::{
    Account, AccountId, AuthorizationRequest, Clock, DialogError, Gateway, StoreError,
};
use tower_http::timeout::TimeoutLayer;

use crate::key_file::ServerKey;
use crate::pages::{
    append_header, csp_source, csrf_refused, escape, message_page, page, redirect, see_other,
    wait_text,
};
use crate::passwords::{Busy, HashingLimit, Passwords};
use crate::session::{
    LOGIN_COOKIE, PageKeys, SESSION_COOKIE, SESSION_SECONDS, Session, cookie, login_nonce,
    random_token, same_token, set_cookie,
};
use crate::throttle::{LoginThrottle, Outcome, ThrottleLimits, Throttled};

/// Everything the dialog's handlers need; cheap to clone (axum clones it
/// per request).
#[derive(Clone)]
pub struct DialogState {
    gateway: Arc<Gateway>,
    keys: Arc<PageKeys>,
    passwords: Arc<Passwords>,
    throttle: Arc<LoginThrottle>,
    hashing: HashingLimit,
    clock: Arc<dyn Clock>,
    /// Whether cookies get `Secure` (the base URL is https).
    secure_cookies: bool,
}

/// The protections of the sign-in form: the failed-attempt throttle and the
/// bound on concurrent password checks.
#[derive(Clone, Debug)]
pub struct LoginLimits {
    /// Failed sign-ins allowed per account, address and window.
    pub throttle: ThrottleLimits,
    /// Concurrent Argon2 checks.
    pub hashing: HashingLimit,
}

impl LoginLimits {
    /// The defaults: [`ThrottleLimits::default`] and
    /// [`HashingLimit::per_core`].
    pub fn recommended() -> Self {
        Self {
            throttle: ThrottleLimits::default(),
            hashing: HashingLimit::per_core(),
        }
    }
}

impl DialogState {
    /// The dialog of `gateway`, with the login sessions and CSRF tokens
    /// keyed from `key`, passwords checked by `passwords` within `limits`,
    /// and session expiry and throttling windows read from `clock`.
    pub fn new(
        gateway: Arc<Gateway>,
        key: &ServerKey,
        passwords: Passwords,
        limits: LoginLimits,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let secure_cookies = gateway.config().base_url.starts_with("https://");
        Self {
            gateway,
            keys: Arc::new(PageKeys::new(key)),
            passwords: Arc::new(passwords),
            throttle: Arc::new(LoginThrottle::new(limits.throttle)),
            hashing: limits.hashing,
            clock,
            secure_cookies,
        }
    }
}

/// `GET` and `POST /auth/dialog`, with the JSON errors and the request
/// timeout of the library's router (a wrong method is a JSON 405, an
/// oversized form a JSON 413).
///
/// The sign-in form throttles by client address, so the app must be served
/// with each request's [`ConnectInfo<SocketAddr>`]: `serve/` inserts it, as
/// does `axum::serve` with
/// `app.into_make_service_with_connect_info::<SocketAddr>()`. Without it, a
/// sign-in is answered 500 rather than throttled with everyone else's.
pub fn routes<S: Clone + Send + Sync + 'static>(state: DialogState) -> Router<S> {
    Router::new()
        .route(DIALOG_PATH, get(dialog_page).post(dialog_form))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            REQUEST_TIMEOUT,
        ))
        .layer(middleware::from_fn(json_errors))
        .with_state(state)
}

/// The dialog's path, and the path of its cookies.
const DIALOG_PATH: &str = "/auth/dialog";

/// What the login page shows above its form.
pub(crate) enum Notice {
    None,
    WrongPassword,
    SessionExpired,
    /// Throttled: too many failures (429).
    TooManyAttempts {
        retry_after: u64,
    },
    /// Every password check slot stayed taken (503).
    Busy {
        retry_after: u64,
    },
}

impl Notice {
    /// The page's status, the notice's HTML, and the `Retry-After` seconds.
    pub(crate) fn render(self) -> (u16, String, Option<u64>) {
        let alert = |text: &str| format!(r#"<p class="error" role="alert">{text}</p>"#);
        match self {
            Notice::None => (200, String::new(), None),
            Notice::WrongPassword => (
                400,
                alert("The e-mail or the password is wrong. Please try again."),
                None,
            ),
            Notice::SessionExpired => (
                400,
                alert("Your sign-in expired. Please sign in again."),
                None,
            ),
            Notice::TooManyAttempts { retry_after } => (
                429,
                alert(&format!(
                    "Too many failed sign-in attempts. For your account's safety, please try again in {}.",
                    wait_text(retry_after)
                )),
                Some(retry_after),
            ),
            Notice::Busy { retry_after } => (
                503,
                alert(&format!(
                    "The service is busy. Please try again in {}.",
                    wait_text(retry_after)
                )),
                Some(retry_after),
            ),
        }
    }
}

/// Why a sign-in did not go through.
pub(crate) enum SignInRefused {
    /// Shown on the sign-in page: a wrong password, throttled, or busy.
    Notice(Notice),
    /// The store failed.
    Store(StoreError),
}

/// A submitted dialog form. Unknown fields are ignored; a field sent twice
/// keeps its first value.
#[derive(Default)]
struct DialogForm {
    action: String,
    query: String,
    csrf: String,
    email: String,
    password: String,
    decision: String,
}

impl DialogForm {
    fn parse(body: &[u8]) -> Self {
        let mut form = Self::default();
        for (name, value) in form_urlencoded::parse(body) {
            let field = match name.as_ref() {
                "action" => &mut form.action,
                "query" => &mut form.query,
                "csrf" => &mut form.csrf,
                "email" => &mut form.email,
                "password" => &mut form.password,
                "decision" => &mut form.decision,
                _ => continue,
            };
            if field.is_empty() {
                *field = value.into_owned();
            }
        }
        form
    }
}

/// `GET /auth/dialog`: validates the request, then shows the sign-in page,
/// or the consent screen to a browser already signed in.
async fn dialog_page(State(app): State<DialogState>, uri: Uri, headers: HeaderMap) -> Response {
    let query = uri.query().unwrap_or_default();
    let request = match app.gateway.authorization_request(query).await {
        Ok(request) => request,
        Err(error) => return app.dialog_error(&error),
    };
    match app.session(&headers).await {
        Ok(Some(session)) => app.consent_page(&request, query, &session),
        Ok(None) => app.login_page(&headers, &request, query, "", Notice::None),
        Err(error) => app.dialog_error(&DialogError::Store(error)),
    }
}

/// `POST /auth/dialog`: the sign-in form (`action=login`), the consent form
/// (`action=consent`, `decision=allow|deny`) and "sign in with another
/// account" (`action=switch`). Every one carries the dialog query, which is
/// validated again, and a CSRF token bound to it.
async fn dialog_form(
    State(app): State<DialogState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    request: OAuthRequest,
) -> Response {
    let parts = request.parts();
    let is_form = parts.content_type.is_some_and(|value| {
        let essence = value.split(';').next().unwrap_or_default().trim();
        essence.eq_ignore_ascii_case("application/x-www-form-urlencoded")
    });
    if !is_form {
        return message_page(
            415,
            "Unsupported form",
            "This page only accepts the forms of the sign-in dialog.",
        );
    }
    let form = DialogForm::parse(parts.body);
    // The query goes back into a Location header: it must be what a browser
    // sends in a URL (visible ASCII), as it was when the dialog was opened.
    if !form
        .query
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b'#')
    {
        return app.dialog_error(&DialogError::MalformedQuery("unexpected characters".into()));
    }
    let request = match app.gateway.authorization_request(&form.query).await {
        Ok(request) => request,
        Err(error) => return app.dialog_error(&error),
    };
    match form.action.as_str() {
        "login" => app.login(&headers, &request, form, peer.ip()).await,
        "consent" | "switch" => {
            let session = match app.session(&headers).await {
                Ok(Some(session)) => session,
                Ok(None) => {
                    let notice = Notice::SessionExpired;
                    return app.login_page(&headers, &request, &form.query, "", notice);
                }
                Err(error) => return app.dialog_error(&DialogError::Store(error)),
            };
            if !same_token(
                &app.keys.consent_token(&session.cookie, &form.query),
                &form.csrf,
            ) {
                return csrf_refused(&form.query);
            }
            if form.action == "switch" {
                let mut response = see_other(&form.query);
                let ended = app.cookie_header(SESSION_COOKIE, "", 0);
                append_header(&mut response, header::SET_COOKIE, &ended);
                return response;
            }
            let answer = match form.decision.as_str() {
                "allow" => match app.gateway.approve(&request, session.account.id).await {
                    Ok(approval) => app.gateway.answer(approval),
                    Err(error) => return app.dialog_error(&DialogError::Store(error)),
                },
                "deny" => app.gateway.answer(app.gateway.deny(&request)),
                _ => return message_page(400, "Choose an answer", "Please choose Allow or Deny."),
            };
            redirect(answer)
        }
        _ => message_page(
            400,
            "Unknown form",
            "This form is not one of the sign-in dialog's.",
        ),
    }
}

impl DialogState {
    fn now(&self) -> i64 {
        self.clock.now().unix_timestamp()
    }

    /// The gateway.
    pub(crate) fn gateway(&self) -> &Gateway {
        &self.gateway
    }

    /// The keys of sessions and CSRF tokens.
    pub(crate) fn keys(&self) -> &PageKeys {
        &self.keys
    }

    /// A `Set-Cookie` value for the dialog's cookies.
    fn cookie_header(&self, name: &str, value: &str, max_age: i64) -> String {
        self.cookie_at(DIALOG_PATH, name, value, max_age)
    }

    /// A `Set-Cookie` value for a cookie of the pages under `path`.
    pub(crate) fn cookie_at(&self, path: &str, name: &str, value: &str, max_age: i64) -> String {
        set_cookie(name, value, path, max_age, self.secure_cookies)
    }

    /// The browser's session, if it has a valid one for an existing account.
    pub(crate) async fn session(&self, headers: &HeaderMap) -> Result<Option<Session>, StoreError> {
        let Some(value) = cookie(headers, SESSION_COOKIE) else {
            return Ok(None);
        };
        let Some(account_id) = self.keys.open_session(value, self.now()) else {
            return Ok(None);
        };
        let account = self.gateway.find_account(account_id).await?;
        Ok(account.map(|account| Session {
            cookie: value.to_owned(),
            account,
        }))
    }

    /// The sign-in form: CSRF check, throttle, then the store and Argon2, in
    /// order of cost, so that a refused attempt costs neither of the last two.
    async fn login(
        &self,
        headers: &HeaderMap,
        request: &AuthorizationRequest,
        form: DialogForm,
        peer: IpAddr,
    ) -> Response {
        let nonce = cookie(headers, LOGIN_COOKIE).unwrap_or_default();
        if nonce.is_empty() || !same_token(&self.keys.login_token(nonce, &form.query), &form.csrf) {
            return csrf_refused(&form.query);
        }
        let account = match self.sign_in(&form.email, &form.password, peer).await {
            Ok(account) => account,
            Err(SignInRefused::Store(error)) => {
                return self.dialog_error(&DialogError::Store(error));
            }
            Err(SignInRefused::Notice(notice)) => {
                return self.login_page(headers, request, &form.query, &form.email, notice);
            }
        };
        // Post/redirect/get: reloading the consent screen never resends the
        // password.
        let mut response = see_other(&form.query);
        self.start_session(&mut response, account.id, DIALOG_PATH);
        response
    }

    /// Checks a sign-in: the throttle, then the store and Argon2, in order
    /// of cost, so that a refused attempt costs neither of the last two.
    /// The caller has checked the form's CSRF token.
    pub(crate) async fn sign_in(
        &self,
        email: &str,
        password: &str,
        peer: IpAddr,
    ) -> Result<Account, SignInRefused> {
        let attempt = match self.throttle.admit(email, peer, self.now()) {
            Ok(attempt) => attempt,
            Err(Throttled { retry_after }) => {
                return Err(SignInRefused::Notice(Notice::TooManyAttempts {
                    retry_after,
                }));
            }
        };
        let account = match self.gateway.find_account_by_email(email).await {
            Ok(account) => account,
            Err(error) => {
                self.throttle.settle(attempt, Outcome::Unchecked);
                return Err(SignInRefused::Store(error));
            }
        };
        let hash = account.as_ref().and_then(|a| a.password_hash.clone());
        let verified = match self.hashing.verify(&self.passwords, password, hash).await {
            Ok(verified) => verified,
            Err(Busy { retry_after }) => {
                self.throttle.settle(attempt, Outcome::Unchecked);
                return Err(SignInRefused::Notice(Notice::Busy { retry_after }));
            }
        };
        let Some(account) = account.filter(|_| verified) else {
            self.throttle.settle(attempt, Outcome::Failed);
            return Err(SignInRefused::Notice(Notice::WrongPassword));
        };
        self.throttle.settle(attempt, Outcome::Succeeded);
        Ok(account)
    }

    /// Starts a session for `account` on `response`, for the pages under
    /// `path`, and ends the login nonce there, which has served.
    pub(crate) fn start_session(&self, response: &mut Response, account: AccountId, path: &str) {
        let session = self
            .keys
            .session_value(account, self.now() + SESSION_SECONDS);
        let started = self.cookie_at(path, SESSION_COOKIE, &session, SESSION_SECONDS);
        append_header(response, header::SET_COOKIE, &started);
        let used = self.cookie_at(path, LOGIN_COOKIE, "", 0);
        append_header(response, header::SET_COOKIE, &used);
    }

    /// The sign-in page, with a login nonce cookie (kept if the browser has
    /// one, so two open tabs do not invalidate each other's form).
    fn login_page(
        &self,
        headers: &HeaderMap,
        request: &AuthorizationRequest,
        query: &str,
        email: &str,
        notice: Notice,
    ) -> Response {
        let nonce = login_nonce(headers).map_or_else(|| random_token(16), str::to_owned);
        let (status, notice, retry_after) = notice.render();
        let body = format!(
            r#"<h1>Sign in</h1>
<p><strong>{app}</strong> wants to access your account. Sign in to continue.</p>
{notice}
<form method="post" action="/auth/dialog">
<input type="hidden" name="action" value="login">
<input type="hidden" name="query" value="{query}">
<input type="hidden" name="csrf" value="{csrf}">
<label for="email">E-mail</label>
<input id="email" name="email" type="email" value="{email}" autocomplete="username" required autofocus>
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required>
<button type="submit">Sign in</button>
</form>"#,
            app = escape(request.client_name()),
            query = escape(query),
            csrf = self.keys.login_token(&nonce, query),
            email = escape(email),
        );
        let mut response = page(status, "Sign in", &body, None);
        let cookie = self.cookie_header(LOGIN_COOKIE, &nonce, SESSION_SECONDS);
        append_header(&mut response, header::SET_COOKIE, &cookie);
        if let Some(seconds) = retry_after {
            append_header(&mut response, header::RETRY_AFTER, &seconds.to_string());
        }
        response
    }

    /// The consent screen: the application, the account, Allow and Deny.
    fn consent_page(
        &self,
        request: &AuthorizationRequest,
        query: &str,
        session: &Session,
    ) -> Response {
        let csrf = self.keys.consent_token(&session.cookie, query);
        let hidden = format!(
            r#"<input type="hidden" name="query" value="{query}">
<input type="hidden" name="csrf" value="{csrf}">"#,
            query = escape(query),
        );
        let body = format!(
            r#"<h1>Allow access?</h1>
<p><strong>{app}</strong> asks to access the account <strong>{account}</strong> ({email}).</p>
<p>If you allow it, it can send conversion events and use the API for this account until the access is revoked.</p>
<p class="small">You will be sent back to <code>{redirect}</code>.</p>
<form method="post" action="/auth/dialog">
<input type="hidden" name="action" value="consent">
{hidden}
<button type="submit" name="decision" value="allow">Allow</button>
<button type="submit" name="decision" value="deny" class="secondary">Deny</button>
</form>
<form method="post" action="/auth/dialog">
<input type="hidden" name="action" value="switch">
{hidden}
<button type="submit" class="link">Not you? Sign in with another account</button>
</form>"#,
            app = escape(request.client_name()),
            account = escape(&session.account.name),
            email = escape(&session.account.email),
            redirect = escape(request.redirect_uri()),
        );
        // A redirect URI whose origin cannot be written in the policy gets
        // `*`: a blocked redirect would break the flow for that app.
        let target = csp_source(request.redirect_uri()).unwrap_or_else(|| "*".to_owned());
        page(200, "Allow access?", &body, Some(&target))
    }

    /// The dialog's answer for a refused request: a page for the user when
    /// the redirect URI cannot be trusted (RFC 6749 section 4.1.2.1), else
    /// the redirect to the application.
    fn dialog_error(&self, error: &DialogError) -> Response {
        let answer = self.gateway.answer(error);
        if error.redirects() {
            return redirect(answer);
        }
        let (title, message) = match error {
            DialogError::MissingClientId => (
                "Incomplete link",
                "This sign-in link does not say which application is asking (client_id is missing). Please go back to the application and try again.",
            ),
            DialogError::UnknownClient => (
                "Unknown application",
                "No application is registered with this client_id. The link may be wrong or out of date: please tell the developer of the application that sent you here.",
            ),
            DialogError::MissingRedirectUri => (
                "Incomplete link",
                "This sign-in link does not say where to send you back (redirect_uri is missing). Please go back to the application and try again.",
            ),
            DialogError::ConflictingRedirectUri => (
                "Conflicting return addresses",
                "This sign-in link names two different addresses to send you back to (redirect_uri and redirect_url). For your safety, you were not sent to either.",
            ),
            DialogError::UnregisteredRedirectUri => (
                "Unregistered return address",
                "The application asked to send you back to an address (redirect_uri) it has not registered. For your safety, you were not sent there and nothing was shared. Please tell the developer of the application.",
            ),
            DialogError::MalformedQuery(_) => (
                "Malformed link",
                "This sign-in link could not be read. Please go back to the application and try again.",
            ),
            DialogError::Store(store) => {
                report_failure(store);
                (
                    "Service unavailable",
                    "The service is temporarily unavailable. Please try again in a moment.",
                )
            }
            // DialogError is non-exhaustive: a future variant is shown by its
            // own (secret-free) message.
            _ => ("Request refused", ""),
        };
        let fallback = error.to_string();
        let message = if message.is_empty() {
            fallback.as_str()
        } else {
            message
        };
        message_page(answer.status, title, message)
    }
}

/// Logs a failure the browser is told only "unavailable" about: the store's
/// error and its sources are for the operator.
fn report_failure(error: &dyn std::error::Error) {
    let mut causes = Vec::new();
    let mut source = error.source();
    while let Some(cause) = source {
        causes.push(cause.to_string());
        source = cause.source();
    }
    tracing::error!(error = %error, causes = ?causes, "request failed");
}
