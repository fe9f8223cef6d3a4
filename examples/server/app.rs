//! The example server's application: the routes, the glue between axum and
//! the core, the dialog's pages with their login sessions, the server key and
//! the demo data.
//!
//! `main.rs` adds the command line, logging, the store and shutdown, and
//! `serve.rs` the connections. The tests include this file as a module
//! (`#[path = "../examples/server/app.rs"]`), so they drive exactly the router
//! the server runs.

// A path relative to this file, so that the module is found both from
// main.rs and from the tests that include this file by `#[path]`.
#[path = "throttle.rs"]
mod throttle;

use std::convert::Infallible;
use std::fmt;
use std::io::{self, Read as _, Write as _};
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use argon2::password_hash::SaltString;
use argon2::{Algorithm, Argon2, Block, Params, PasswordHash, PasswordHasher as _, Version};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, DefaultBodyLimit, FromRequest, Request, State};
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::{Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use conversion_gateway::{
    Account, AccountId, ApiKeyRecord, AuthorizationRequest, Client, Clock, DialogError, Gateway,
    HttpAnswer, OsRandom, RandomSource, RequestParts, SecretHash, SecretHasher, SeededRandom,
    StoreError, Stores, ToHttpAnswer, ValidationErrors,
};
use hmac::{Hmac, Mac as _};
use serde::Serialize;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;
use tokio::sync::Semaphore;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::cors::{Any, CorsLayer};
use tower_http::timeout::TimeoutLayer;

pub use throttle::ThrottleLimits;
use throttle::{LoginThrottle, Outcome, Throttled};

// ---------------------------------------------------------------------------
// State and router
// ---------------------------------------------------------------------------

/// Largest body of the token and revocation endpoints: a few short fields.
const TOKEN_BODY_LIMIT: usize = 16 * 1024;

/// Largest body of the dialog's forms (the dialog query string travels in one).
const FORM_BODY_LIMIT: usize = 16 * 1024;

/// How long one request may take before it is answered 503. It also bounds
/// how long a graceful shutdown waits for requests in flight.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Lifetime of a login session and of the login form's nonce, in seconds.
const SESSION_SECONDS: i64 = 600;

const SESSION_COOKIE: &str = "cg_session";
const LOGIN_COOKIE: &str = "cg_login";

/// Everything a handler needs; cheap to clone (axum clones it per request).
#[derive(Clone)]
pub struct AppState {
    gateway: Arc<Gateway>,
    keys: Arc<PageKeys>,
    passwords: Arc<Passwords>,
    throttle: Arc<LoginThrottle>,
    hashing: HashingLimit,
    clock: Arc<dyn Clock>,
    /// Whether cookies get `Secure` (the base URL is https).
    secure_cookies: bool,
}

impl AppState {
    /// The state of a server running `gateway`, with the login sessions and
    /// CSRF tokens keyed from `key`, passwords checked by `passwords` within
    /// `limits`, and session expiry and throttling windows read from `clock`.
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
            keys: Arc::new(PageKeys {
                session: key.derive(b"dialog session"),
                csrf: key.derive(b"dialog csrf"),
            }),
            passwords: Arc::new(passwords),
            throttle: Arc::new(LoginThrottle::new(limits.throttle)),
            hashing: limits.hashing,
            clock,
            secure_cookies,
        }
    }
}

/// The whole service of spec.md as an axum router: the dialog's pages, the
/// token and revocation endpoints, and the three intake routes.
///
/// The sign-in form throttles by client address, so the router must be
/// served with each request's [`ConnectInfo<SocketAddr>`]: `serve.rs` inserts
/// it, as does `axum::serve` with
/// `router.into_make_service_with_connect_info::<SocketAddr>()`. Without it,
/// a sign-in is answered 500 rather than throttled with everyone else's.
pub fn router(state: AppState) -> Router {
    // COMPAT.md: the real service caps the conversion and batch bodies at
    // 0.2 MB. The core checks the same limit; this one stops a larger body
    // before it is read into memory.
    let event_limit = state.gateway.config().conversion_limits.max_body_bytes;
    // COMPAT.md: website forms post to the conversion route from any origin,
    // so it (and only it) answers CORS. No cookies are involved: the API key
    // is in the query string, so `*` is safe.
    let cors = CorsLayer::new()
        .allow_origin(Any)
        .allow_methods([Method::POST])
        .allow_headers([
            header::CONTENT_TYPE,
            HeaderName::from_static("idempotency-key"),
        ])
        .expose_headers([HeaderName::from_static("idempotent-replayed")])
        .max_age(Duration::from_secs(86_400));
    Router::new()
        .route(
            "/auth/dialog",
            get(dialog_page)
                .post(dialog_form)
                .layer(DefaultBodyLimit::max(FORM_BODY_LIMIT)),
        )
        .route(
            "/auth/token",
            post(token).layer(DefaultBodyLimit::max(TOKEN_BODY_LIMIT)),
        )
        .route(
            "/auth/revoke",
            post(revoke).layer(DefaultBodyLimit::max(TOKEN_BODY_LIMIT)),
        )
        .route(
            "/platform/conversions",
            post(conversion)
                .layer::<_, Infallible>(DefaultBodyLimit::max(event_limit))
                .layer::<_, Infallible>(cors),
        )
        .route(
            "/platform/events",
            post(event).layer(DefaultBodyLimit::max(event_limit)),
        )
        .route(
            "/platform/events/batch",
            post(batch).layer(DefaultBodyLimit::max(event_limit)),
        )
        .fallback(not_found)
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            REQUEST_TIMEOUT,
        ))
        .layer(middleware::from_fn(json_errors))
        .layer(CatchPanicLayer::custom(|_panic| {
            into_response(HttpAnswer::error(
                500,
                "INTERNAL_SERVER_ERROR",
                "the service failed to answer this request",
            ))
        }))
        .layer(middleware::from_fn(log_request))
        .with_state(state)
}

// ---------------------------------------------------------------------------
// Glue between axum and the core
// ---------------------------------------------------------------------------

/// An axum response carrying the core's answer, status, headers and body.
pub fn into_response(answer: HttpAnswer) -> Response {
    let mut response = Response::new(Body::from(answer.body_bytes()));
    *response.status_mut() =
        StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in &answer.headers {
        match (
            HeaderName::try_from(name.as_str()),
            HeaderValue::try_from(value.as_str()),
        ) {
            (Ok(name), Ok(value)) => {
                response.headers_mut().append(name, value);
            }
            // Only a value with a control character can fail; the name is
            // logged, never the value (it may be a Location with a code).
            _ => tracing::warn!(header = %name, "dropped an answer header that is not valid HTTP"),
        }
    }
    response
}

/// The parts of a request the core reads ([`RequestParts`]), owned.
pub struct Parts {
    query: String,
    content_type: Option<String>,
    authorization: Option<String>,
    idempotency_key: Option<String>,
    body: Bytes,
}

impl Parts {
    /// The borrowed view the core's endpoint methods take.
    pub fn request(&self) -> RequestParts<'_> {
        RequestParts {
            query: &self.query,
            content_type: self.content_type.as_deref(),
            authorization: self.authorization.as_deref(),
            idempotency_key: self.idempotency_key.as_deref(),
            body: &self.body,
        }
    }
}

impl FromRequest<AppState> for Parts {
    type Rejection = Response;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Response> {
        // A header that is not visible ASCII counts as absent: the core then
        // answers exactly as if it had not been sent.
        let headers = request.headers();
        let header = |name: HeaderName| {
            headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned)
        };
        let (content_type, authorization, idempotency_key) = (
            header(header::CONTENT_TYPE),
            header(header::AUTHORIZATION),
            header(HeaderName::from_static("idempotency-key")),
        );
        let query = request.uri().query().unwrap_or_default().to_owned();
        let event_route = request.uri().path().starts_with("/platform/");
        let event_limit = state.gateway.config().conversion_limits.max_body_bytes;
        let body = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                into_response(if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    if event_route {
                        // The validator's own answer for this limit, so a client
                        // sees one body shape whichever layer refused the body.
                        let errors = ValidationErrors::body_too_large(event_limit);
                        HttpAnswer::json(errors.status(), errors.to_body())
                    } else {
                        HttpAnswer::error(413, "BODY_TOO_LARGE", "the request body is too large")
                    }
                } else {
                    HttpAnswer::error(400, "BAD_REQUEST", "the request body could not be read")
                })
            })?;
        Ok(Self {
            query,
            content_type,
            authorization,
            idempotency_key,
            body,
        })
    }
}

/// One log line per request: method, path, status and latency. The path
/// only: the query string carries `api_key` on /platform/conversions and may
/// carry a `code` on /auth/token (COMPAT.md: keys end up in logs).
async fn log_request(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16();
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    if status >= 500 {
        tracing::warn!(%method, path, status, latency_ms, "request");
    } else {
        tracing::info!(%method, path, status, latency_ms, "request");
    }
    response
}

/// Turns every error answer that is neither JSON nor one of the dialog's
/// pages (axum's own 405, a timeout's 503) into the service's JSON error:
/// COMPAT.md, clients crash on HTML or empty bodies.
async fn json_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let content_type = response.headers().get(header::CONTENT_TYPE);
    let media_type = content_type
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    if media_type.starts_with("application/json") || media_type.starts_with("text/html") {
        return response;
    }
    let (error_type, message) = match status {
        StatusCode::METHOD_NOT_ALLOWED => ("METHOD_NOT_ALLOWED", "this method is not allowed here"),
        StatusCode::PAYLOAD_TOO_LARGE => ("BODY_TOO_LARGE", "the request body is too large"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => (
            "UNSUPPORTED_MEDIA_TYPE",
            "the content type is not supported here",
        ),
        StatusCode::NOT_FOUND => ("NOT_FOUND", "no such resource"),
        StatusCode::SERVICE_UNAVAILABLE => (
            "SERVICE_UNAVAILABLE",
            "the service is temporarily unavailable, please retry",
        ),
        _ if status.is_server_error() => (
            "INTERNAL_SERVER_ERROR",
            "the service failed to answer this request",
        ),
        _ => ("BAD_REQUEST", "the request could not be handled"),
    };
    let mut answer = HttpAnswer::error(status.as_u16(), error_type, message);
    if status == StatusCode::SERVICE_UNAVAILABLE {
        answer = answer.with_header("retry-after", "1");
    }
    let (mut head, _) = response.into_parts();
    head.headers.remove(header::CONTENT_TYPE);
    head.headers.remove(header::CONTENT_LENGTH);
    let mut json = into_response(answer);
    // Keep what the original answer said besides its body (`Allow` on 405).
    for (name, value) in &head.headers {
        json.headers_mut().append(name.clone(), value.clone());
    }
    json
}

async fn not_found() -> Response {
    into_response(HttpAnswer::error(404, "NOT_FOUND", "no such resource"))
}

/// Logs a failure the client is told only "503" about: the store's error
/// and its sources are for the operator (the core keeps them out of bodies).
fn report_failure(error: &dyn std::error::Error) {
    let mut causes = Vec::new();
    let mut source = error.source();
    while let Some(cause) = source {
        causes.push(cause.to_string());
        source = cause.source();
    }
    tracing::error!(error = %error, causes = ?causes, "request failed");
}

impl AppState {
    /// The answer of a typed endpoint result, logging server-side failures.
    fn settle<T: ToHttpAnswer, E: ToHttpAnswer + std::error::Error>(
        &self,
        result: Result<T, E>,
    ) -> Response {
        let answer = self.gateway.answer(&result);
        if let Err(error) = &result
            && answer.status >= 500
        {
            report_failure(error);
        }
        into_response(answer)
    }
}

// ---------------------------------------------------------------------------
// The JSON endpoints: each one extracts the parts, calls the core, converts
// ---------------------------------------------------------------------------

async fn token(State(app): State<AppState>, parts: Parts) -> Response {
    let result = app.gateway.token(&parts.request()).await;
    app.settle(result)
}

async fn revoke(State(app): State<AppState>, parts: Parts) -> Response {
    let result = app.gateway.revoke(&parts.request()).await;
    app.settle(result)
}

async fn conversion(State(app): State<AppState>, parts: Parts) -> Response {
    let result = app.gateway.record_conversion(&parts.request()).await;
    app.settle(result)
}

async fn event(State(app): State<AppState>, parts: Parts) -> Response {
    let result = app.gateway.record_event(&parts.request()).await;
    app.settle(result)
}

async fn batch(State(app): State<AppState>, parts: Parts) -> Response {
    let result = app.gateway.record_event_batch(&parts.request()).await;
    app.settle(result)
}

// ---------------------------------------------------------------------------
// The dialog: login, consent, and their protection
// ---------------------------------------------------------------------------

/// The keys of the dialog's cookies and forms, derived from the server key.
struct PageKeys {
    /// Signs session cookies.
    session: [u8; 32],
    /// Makes CSRF tokens.
    csrf: [u8; 32],
}

/// HMAC-SHA256 of `parts`, each length-prefixed so that no two different
/// lists of parts are ever hashed as the same bytes.
fn mac(key: &[u8; 32], parts: &[&[u8]]) -> String {
    URL_SAFE_NO_PAD.encode(mac_bytes(key, parts))
}

/// The raw HMAC-SHA256 of `parts` under `key`, each part length-prefixed:
/// the one keyed MAC of this server (cookies, CSRF tokens, subkeys).
fn mac_bytes(key: &[u8; 32], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = <Hmac<Sha256> as hmac::Mac>::new_from_slice(key).expect("HMAC takes any key");
    for part in parts {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// Constant-time equality of a token we made and one a request presented.
fn same_token(expected: &str, presented: &str) -> bool {
    expected.as_bytes().ct_eq(presented.as_bytes()).into()
}

impl PageKeys {
    /// `account_id|expires|nonce|mac`: the session cookie's value. The
    /// random nonce makes every session (and so its CSRF tokens) unique,
    /// even two of one account started in the same second.
    fn session_value(&self, account: AccountId, expires: i64) -> String {
        let (account, expires, nonce) =
            (account.to_string(), expires.to_string(), random_token(16));
        let tag = mac(
            &self.session,
            &[
                b"session",
                account.as_bytes(),
                expires.as_bytes(),
                nonce.as_bytes(),
            ],
        );
        format!("{account}|{expires}|{nonce}|{tag}")
    }

    /// The account of a session cookie that this server signed and that has
    /// not expired at `now` (Unix seconds).
    fn open_session(&self, value: &str, now: i64) -> Option<AccountId> {
        let mut fields = value.split('|');
        let (account, expires, nonce, tag) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
        );
        let expected = mac(
            &self.session,
            &[
                b"session",
                account.as_bytes(),
                expires.as_bytes(),
                nonce.as_bytes(),
            ],
        );
        if fields.next().is_some() || !same_token(&expected, tag) {
            return None;
        }
        let expires: i64 = expires.parse().ok()?;
        (now < expires).then_some(AccountId(account.parse().ok()?))
    }

    /// The login form's CSRF token: bound to the browser's login nonce
    /// cookie and to the dialog request.
    fn login_token(&self, nonce: &str, query: &str) -> String {
        mac(&self.csrf, &[b"login", nonce.as_bytes(), query.as_bytes()])
    }

    /// The consent form's CSRF token: bound to the session and to the dialog
    /// request.
    fn consent_token(&self, session: &str, query: &str) -> String {
        mac(
            &self.csrf,
            &[b"consent", session.as_bytes(), query.as_bytes()],
        )
    }
}

/// The value of cookie `name`, if the request sent it.
fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// A signed-in browser: its cookie value and the account.
struct Session {
    cookie: String,
    account: Account,
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

/// What the login page shows above its form.
enum Notice {
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

/// "3 seconds", "14 minutes": a wait as a person reads it, rounded up.
fn wait_text(seconds: u64) -> String {
    match seconds {
        1 => "1 second".to_owned(),
        0..=90 => format!("{seconds} seconds"),
        _ => format!("{} minutes", seconds.div_ceil(60)),
    }
}

impl AppState {
    fn now(&self) -> i64 {
        self.clock.now().unix_timestamp()
    }

    fn cookie_header(&self, name: &str, value: &str, max_age: i64) -> String {
        let secure = if self.secure_cookies { "; Secure" } else { "" };
        format!(
            "{name}={value}; Path=/auth/dialog; Max-Age={max_age}; HttpOnly; SameSite=Lax{secure}"
        )
    }

    /// The browser's session, if it has a valid one for an existing account.
    async fn session(&self, headers: &HeaderMap) -> Result<Option<Session>, StoreError> {
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
        let nonce = cookie(headers, LOGIN_COOKIE)
            .filter(|nonce| {
                nonce.len() == 22
                    && nonce
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            })
            .map_or_else(|| random_token(16), str::to_owned);
        let alert = |text: &str| format!(r#"<p class="error" role="alert">{text}</p>"#);
        let (status, notice, retry_after) = match notice {
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
        };
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

    /// Checks a password in a blocking thread (Argon2 is slow on purpose),
    /// within the [`HashingLimit`]. An unknown account is checked against a
    /// dummy hash, so the answer's timing does not tell which e-mails have
    /// accounts.
    ///
    /// # Errors
    /// [`Busy`] when no check could start within the limit's wait.
    async fn password_matches(
        &self,
        account: Option<&Account>,
        password: &str,
    ) -> Result<bool, Busy> {
        let busy = Busy {
            retry_after: self.hashing.retry_after(),
        };
        let permit = self.hashing.permits.clone().acquire_owned();
        let permit = match tokio::time::timeout(self.hashing.wait, permit).await {
            Ok(Ok(permit)) => permit,
            // Waited too long (the semaphore is never closed).
            Ok(Err(_)) | Err(_) => return Err(busy),
        };
        let passwords = self.passwords.clone();
        let hash = account.and_then(|account| account.password_hash.clone());
        let password = password.to_owned();
        let pool = self.hashing.memory.clone();
        let verified = tokio::task::spawn_blocking(move || {
            // Held until the hash is computed, even if the request is
            // dropped meanwhile (a client that hangs up does not free a
            // slot while its check still runs).
            let _permit = permit;
            let take = || pool.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let mut memory = take().pop().unwrap_or_default();
            let verified = passwords.verify(&password, hash.as_deref(), &mut memory);
            take().push(memory);
            verified
        });
        Ok(verified.await.unwrap_or(false))
    }
}

/// `GET /auth/dialog`: validates the request, then shows the sign-in page,
/// or the consent screen to a browser already signed in.
async fn dialog_page(State(app): State<AppState>, uri: Uri, headers: HeaderMap) -> Response {
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
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    parts: Parts,
) -> Response {
    let is_form = parts.content_type.as_deref().is_some_and(|value| {
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
    let form = DialogForm::parse(&parts.body);
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
        "login" => login(&app, &headers, &request, form, peer.ip()).await,
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
                append_header(
                    &mut response,
                    header::SET_COOKIE,
                    &app.cookie_header(SESSION_COOKIE, "", 0),
                );
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
            dialog_redirect(answer)
        }
        _ => message_page(
            400,
            "Unknown form",
            "This form is not one of the sign-in dialog's.",
        ),
    }
}

/// The sign-in form: CSRF check, throttle, then the store and Argon2, in
/// order of cost, so that a refused attempt costs neither of the last two.
async fn login(
    app: &AppState,
    headers: &HeaderMap,
    request: &AuthorizationRequest,
    form: DialogForm,
    peer: IpAddr,
) -> Response {
    let nonce = cookie(headers, LOGIN_COOKIE).unwrap_or_default();
    if nonce.is_empty() || !same_token(&app.keys.login_token(nonce, &form.query), &form.csrf) {
        return csrf_refused(&form.query);
    }
    let page = |notice| app.login_page(headers, request, &form.query, &form.email, notice);
    let attempt = match app.throttle.admit(&form.email, peer, app.now()) {
        Ok(attempt) => attempt,
        Err(Throttled { retry_after }) => return page(Notice::TooManyAttempts { retry_after }),
    };
    let account = match app.gateway.find_account_by_email(&form.email).await {
        Ok(account) => account,
        Err(error) => {
            app.throttle.settle(attempt, Outcome::Unchecked);
            return app.dialog_error(&DialogError::Store(error));
        }
    };
    let verified = match app.password_matches(account.as_ref(), &form.password).await {
        Ok(verified) => verified,
        Err(Busy { retry_after }) => {
            app.throttle.settle(attempt, Outcome::Unchecked);
            return page(Notice::Busy { retry_after });
        }
    };
    let Some(account) = account.filter(|_| verified) else {
        app.throttle.settle(attempt, Outcome::Failed);
        return page(Notice::WrongPassword);
    };
    app.throttle.settle(attempt, Outcome::Succeeded);
    // Post/redirect/get: reloading the consent screen never resends the
    // password.
    let session = app
        .keys
        .session_value(account.id, app.now() + SESSION_SECONDS);
    let mut response = see_other(&form.query);
    append_header(
        &mut response,
        header::SET_COOKIE,
        &app.cookie_header(SESSION_COOKIE, &session, SESSION_SECONDS),
    );
    append_header(
        &mut response,
        header::SET_COOKIE,
        &app.cookie_header(LOGIN_COOKIE, "", 0),
    );
    response
}

/// The dialog's answer for a refused request: a page for the user when the
/// redirect URI cannot be trusted (RFC 6749 section 4.1.2.1), else the
/// redirect to the application.
impl AppState {
    fn dialog_error(&self, error: &DialogError) -> Response {
        let answer = self.gateway.answer(error);
        if error.redirects() {
            return dialog_redirect(answer);
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

fn csrf_refused(query: &str) -> Response {
    let body = format!(
        r#"<h1>Form expired</h1>
<p>This form has expired or was not sent from this site, so it was not accepted.</p>
<p><a href="/auth/dialog?{query}">Open the sign-in page again</a></p>"#,
        query = escape(query),
    );
    page(403, "Form expired", &body, None)
}

/// A redirect from the dialog (to the application, with a code or an
/// error), with the dialog's headers.
fn dialog_redirect(answer: HttpAnswer) -> Response {
    let mut response = into_response(answer);
    page_headers(&mut response, None);
    response
}

/// `303 See Other` back to the dialog for this request.
fn see_other(query: &str) -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SEE_OTHER;
    append_header(
        &mut response,
        header::LOCATION,
        &format!("/auth/dialog?{query}"),
    );
    page_headers(&mut response, None);
    response
}

fn append_header(response: &mut Response, name: HeaderName, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        response.headers_mut().append(name, value);
    }
}

// ---------------------------------------------------------------------------
// HTML
// ---------------------------------------------------------------------------

const STYLE: &str = "\
:root{color-scheme:light dark;font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif}\
body{margin:0;padding:1rem;line-height:1.5}\
main{max-width:28rem;margin:1.5rem auto;padding:1.5rem;border:1px solid #8886;border-radius:12px}\
h1{font-size:1.4rem;margin:0 0 1rem}\
label{display:block;margin:.8rem 0 .3rem;font-weight:600}\
input{box-sizing:border-box;width:100%;padding:.65rem;font-size:1rem;border:1px solid #8888;border-radius:6px}\
button{font-size:1rem;padding:.7rem 1.3rem;margin:1rem .5rem 0 0;border-radius:6px;border:1px solid #1a5fb4;background:#1a5fb4;color:#fff;cursor:pointer}\
button.secondary{background:transparent;color:inherit;border-color:#8888}\
button.link{background:none;border:0;padding:0;color:inherit;text-decoration:underline;font-size:.9rem}\
.error{padding:.75rem;border-radius:6px;border:1px solid #c01c28;background:#c01c2822}\
.small{font-size:.9rem}\
code{word-break:break-all}";

/// The Content-Security-Policy source of the inline style sheet: its hash,
/// so that no other style (and no script at all) can run on the pages.
static STYLE_HASH: LazyLock<String> = LazyLock::new(|| {
    format!(
        "'sha256-{}'",
        STANDARD.encode(Sha256::digest(STYLE.as_bytes()))
    )
});

/// Escapes text for HTML content and quoted attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// The CSP source of a redirect URI's origin (`https://app.example`, or
/// `com.example.app:` for a custom scheme), or `None` if it is not one that
/// can be written in a policy.
fn csp_source(uri: &str) -> Option<String> {
    let (scheme, rest) = uri.split_once(':')?;
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if !scheme_ok {
        return None;
    }
    let Some(rest) = rest.strip_prefix("//") else {
        return Some(format!("{scheme}:"));
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit('@').next()?;
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c));
    host_ok.then(|| format!("{scheme}://{host}"))
}

/// The headers of every dialog answer: never cached (they carry codes and
/// CSRF tokens), never framed (clickjacking a consent screen), and no script,
/// plugin or foreign style. `form_target` is the origin the consent form's
/// answer redirects to: browsers check a form's redirects against
/// `form-action` too, so the application's origin must be allowed there.
fn page_headers(response: &mut Response, form_target: Option<&str>) {
    let form_action = match form_target {
        Some(target) => format!("'self' {target}"),
        None => "'self'".to_owned(),
    };
    let policy = format!(
        "default-src 'none'; style-src {}; form-action {form_action}; frame-ancestors 'none'; base-uri 'none'",
        *STYLE_HASH
    );
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if let Ok(policy) = HeaderValue::from_str(&policy) {
        headers.insert(header::CONTENT_SECURITY_POLICY, policy);
    }
}

/// An HTML page of the dialog.
fn page(status: u16, title: &str, body: &str, form_target: Option<&str>) -> Response {
    let html = format!(
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · Conversion Gateway</title>
<style>{STYLE}</style>
</head>
<body>
<main>
{body}
</main>
</body>
</html>
"#,
        title = escape(title),
    );
    let mut response = Response::new(Body::from(html));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    page_headers(&mut response, form_target);
    response
}

/// A page with a title and one paragraph.
fn message_page(status: u16, title: &str, message: &str) -> Response {
    let body = format!("<h1>{}</h1>\n<p>{}</p>", escape(title), escape(message));
    page(status, title, &body, None)
}

/// `bytes` random bytes from the operating system, base64url.
fn random_token(bytes: usize) -> String {
    let mut buffer = vec![0u8; bytes];
    OsRandom.fill_bytes(&mut buffer);
    URL_SAFE_NO_PAD.encode(buffer)
}

// ---------------------------------------------------------------------------
// Passwords
// ---------------------------------------------------------------------------

/// Hashes and checks account passwords with Argon2id, a function made for
/// passwords: slow and memory-hard, unlike the keyed SHA-256 of the core's
/// high-entropy secrets.
#[derive(Clone)]
pub struct Passwords {
    argon2: Argon2<'static>,
    /// A hash of a random password, checked for unknown accounts.
    dummy: String,
}

impl Passwords {
    /// Argon2id with `memory_kib` KiB, `iterations` passes and one lane.
    /// OWASP's recommendation is 19 MiB and 2 passes ([`Self::recommended`]);
    /// tests use the minimum, which is fast and must never guard a real
    /// password.
    pub fn new(memory_kib: u32, iterations: u32) -> Self {
        let params = Params::new(memory_kib, iterations, 1, None).expect("valid Argon2 parameters");
        let argon2 = Argon2::new(Algorithm::Argon2id, argon2::Version::V0x13, params);
        let mut passwords = Self {
            argon2,
            dummy: String::new(),
        };
        passwords.dummy = passwords.hash(&random_token(16));
        passwords
    }

    /// OWASP's parameters for Argon2id: 19 MiB, 2 passes, 1 lane.
    pub fn recommended() -> Self {
        Self::new(19 * 1024, 2)
    }

    /// The PHC string of `password` with a fresh random salt.
    pub fn hash(&self, password: &str) -> String {
        let mut salt = [0u8; 16];
        OsRandom.fill_bytes(&mut salt);
        let salt = SaltString::encode_b64(&salt).expect("16 bytes make a valid salt");
        self.argon2
            .hash_password(password.as_bytes(), &salt)
            .expect("Argon2 hashes any password")
            .to_string()
    }

    /// Whether `password` matches `hash` (a PHC string, whose own parameters
    /// are used). With no hash, a dummy one is checked and `false` returned.
    ///
    /// Argon2 works in `memory`, grown to the hash's memory cost if it is
    /// smaller, instead of in a fresh allocation: see [`HashingLimit`].
    pub fn verify(&self, password: &str, hash: Option<&str>, memory: &mut Vec<Block>) -> bool {
        match hash {
            Some(hash) => matches_in(password, hash, memory),
            None => {
                let _ = matches_in(password, &self.dummy, memory);
                false
            }
        }
    }
}

/// Whether `password` hashes to the PHC string `phc` under its own algorithm,
/// version, parameters and salt: what `PasswordVerifier::verify_password`
/// does, but with Argon2's working memory in `memory`.
fn matches_in(password: &str, phc: &str, memory: &mut Vec<Block>) -> bool {
    let Ok(parsed) = PasswordHash::new(phc) else {
        return false;
    };
    let (Some(salt), Some(expected)) = (parsed.salt, parsed.hash) else {
        return false;
    };
    let (Ok(algorithm), Ok(params)) = (
        Algorithm::try_from(parsed.algorithm),
        Params::try_from(&parsed),
    ) else {
        return false;
    };
    let Ok(version) = parsed
        .version
        .map_or(Ok(Version::default()), Version::try_from)
    else {
        return false;
    };
    let mut salt_bytes = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_bytes) else {
        return false;
    };
    if memory.len() < params.block_count() {
        memory.resize(params.block_count(), Block::default());
    }
    // At most 64 bytes: `Output`'s own bound.
    let mut computed = [0u8; 64];
    let computed = &mut computed[..expected.len()];
    Argon2::new(algorithm, version, params)
        .hash_password_into_with_memory(password.as_bytes(), salt, computed, memory.as_mut_slice())
        .is_ok()
        && bool::from(expected.as_bytes().ct_eq(computed))
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

/// A bound on the password checks running at once, and on their memory.
///
/// An Argon2 check at OWASP's parameters takes 19 MiB and a core for its
/// whole run: unbounded, a flood of concurrent sign-ins for unknown e-mails
/// took the server to gigabytes. With the bound, a check waits for a slot up
/// to `wait`, then the sign-in is refused (503, `Retry-After`) rather than
/// queued without end.
///
/// Each slot keeps its 19 MiB of Argon2 memory from one check to the next.
/// Allocating it per check let the allocator's fragmentation grow the
/// process to 0.8 GB under a 48-client flood even with two checks at a time;
/// reused, the memory of checks stays at one array per slot.
#[derive(Clone)]
pub struct HashingLimit {
    permits: Arc<Semaphore>,
    /// Argon2 working memory, one array per check running (never more
    /// arrays than permits: one is taken and put back under a permit).
    memory: Arc<Mutex<Vec<Vec<Block>>>>,
    wait: Duration,
}

impl fmt::Debug for HashingLimit {
    // Not derived: that would print megabytes of Argon2 memory.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HashingLimit")
            .field("available", &self.permits.available_permits())
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

impl HashingLimit {
    /// One check per permit of `permits` at a time; a check waits for one at
    /// most `wait`.
    pub fn new(permits: Arc<Semaphore>, wait: Duration) -> Self {
        Self {
            permits,
            memory: Arc::default(),
            wait,
        }
    }

    /// One check per core at a time (more would only queue for the CPU, and
    /// hold their memory meanwhile), each waiting at most 2 seconds.
    pub fn per_core() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        Self::new(Arc::new(Semaphore::new(cores)), Duration::from_secs(2))
    }

    /// The `Retry-After` of a refused check: the wait, rounded up to whole
    /// seconds.
    fn retry_after(&self) -> u64 {
        let seconds = self.wait.as_secs() + u64::from(self.wait.subsec_nanos() > 0);
        seconds.max(1)
    }
}

/// No password check could start in time.
#[derive(Clone, Copy, Debug)]
struct Busy {
    retry_after: u64,
}

// ---------------------------------------------------------------------------
// The server key
// ---------------------------------------------------------------------------

/// The server's 32-byte secret: the key of the core's secret hashes, and the
/// root of the dialog's cookie and CSRF keys and of the demo data.
///
/// It must survive restarts: every stored token, code, client secret and API
/// key is a keyed hash that no other key can match again.
#[derive(Clone)]
pub struct ServerKey([u8; 32]);

impl fmt::Debug for ServerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ServerKey(***)")
    }
}

impl ServerKey {
    /// A fresh key from the operating system's random source.
    pub fn generate() -> Self {
        let mut key = [0u8; 32];
        OsRandom.fill_bytes(&mut key);
        Self(key)
    }

    /// Parses 64 hexadecimal digits (surrounding whitespace ignored).
    pub fn from_hex(hex: &str) -> Option<Self> {
        SecretHash::from_hex(hex.trim()).map(|hash| Self(*hash.as_bytes()))
    }

    /// Reads the key file at `path`, or creates it with a fresh key (readable
    /// by its owner only) if there is none. Returns the key and whether the
    /// file was created.
    ///
    /// # Errors
    /// The file cannot be read or created, or does not hold 64 hex digits.
    pub fn load_or_create(path: &Path) -> io::Result<(Self, bool)> {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        match options.open(path) {
            Ok(mut file) => {
                let key = Self::generate();
                let hex = SecretHash::from_bytes(key.0).to_hex();
                file.write_all(format!("{hex}\n").as_bytes())?;
                // On disk before anything is hashed with it.
                file.sync_all()?;
                Ok((key, true))
            }
            // Another process may have created it first: read theirs.
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                let mut text = String::new();
                std::fs::File::open(path)?.read_to_string(&mut text)?;
                let key = Self::from_hex(&text).ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "the key file {} must hold 64 hexadecimal digits",
                            path.display()
                        ),
                    )
                })?;
                Ok((key, false))
            }
            Err(error) => Err(error),
        }
    }

    /// The hasher of the core's secrets: the key itself, so that a host that
    /// replaces this server can keep its database with the same key.
    pub fn hasher(&self) -> SecretHasher {
        SecretHasher::new(self.0)
    }

    /// A subkey for one purpose. The core's hashes put their own labels
    /// first, so no subkey can equal one of them.
    fn derive(&self, purpose: &[u8]) -> [u8; 32] {
        mac_bytes(&self.0, &[b"conversion-gateway example server", purpose])
    }
}

// ---------------------------------------------------------------------------
// Demo data
// ---------------------------------------------------------------------------

/// The demo account's login e-mail.
pub const DEMO_EMAIL: &str = "demo@example.com";

/// The demo app's registered redirect URI (port 9, "discard": the browser
/// shows an error page, and the code is read from its address bar).
pub const DEMO_REDIRECT_URI: &str = "http://127.0.0.1:9/callback";

/// What a newcomer needs to try the service, as written by
/// `--demo-credentials`.
#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct DemoCredentials {
    /// The service's base URL.
    pub base_url: String,
    /// The demo app's client id.
    pub client_id: String,
    /// The demo app's client secret.
    pub client_secret: String,
    /// The demo app's redirect URI.
    pub redirect_uri: String,
    /// The demo account's API key.
    pub api_key: String,
    /// The demo account's login e-mail.
    pub email: String,
    /// The demo account's password.
    pub password: String,
}

impl fmt::Debug for DemoCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DemoCredentials")
            .field("base_url", &self.base_url)
            .field("client_id", &self.client_id)
            .field("email", &self.email)
            .finish_non_exhaustive()
    }
}

impl DemoCredentials {
    /// The JSON document `--demo-credentials` writes.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("strings serialize") + "\n"
    }
}

/// Why the demo data could not be seeded.
#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The store holds a demo account made with another server key.
    #[error(
        "the store holds a demo account ({DEMO_EMAIL}) created with another server key, so its demo credentials cannot be derived again: was the key file replaced?"
    )]
    OtherKey,
    /// The demo account already holds the most API keys it may.
    #[error("the demo account already holds the most API keys it may")]
    TooManyApiKeys,
}

/// Seeds the demo app, account (custom fields `plan` and `source`) and API
/// key, unless the store has them already, and returns their credentials.
///
/// Nothing secret is stored in plaintext: every value is drawn from a
/// random source seeded by the server key, so a restart on the same store
/// and key derives the same credentials again, and they hash to the stored
/// values.
///
/// # Errors
/// [`SeedError`].
pub async fn seed_demo(
    gateway: &Gateway,
    stores: &Stores,
    key: &ServerKey,
    passwords: &Passwords,
) -> Result<DemoCredentials, SeedError> {
    let hasher = key.hasher();
    let random = SeededRandom::from_seed(key.derive(b"demo data"));
    // The order of these draws fixes every demo value: changing it changes
    // the credentials of existing stores (then `SeedError::OtherKey`).
    let mut account = Account::new("Demo Account", DEMO_EMAIL, &random);
    account.custom_fields = vec!["plan".into(), "source".into()];
    let mut password = [0u8; 18];
    random.fill_bytes(&mut password);
    let password = format!("demo-{}", URL_SAFE_NO_PAD.encode(password));
    let (client, client_secret) =
        Client::register("Demo App", vec![DEMO_REDIRECT_URI.into()], &random, &hasher);
    let now = time::OffsetDateTime::now_utc();
    let (api_key_record, api_key) = ApiKeyRecord::issue(account.id, "demo", now, &random, &hasher);

    if stores.clients.find_client(&client.id).await?.is_none() {
        ignore_duplicate(stores.clients.register_client(&client).await)?;
    }
    match gateway.find_account_by_email(DEMO_EMAIL).await? {
        Some(existing) if existing.id == account.id => {}
        Some(_) => return Err(SeedError::OtherKey),
        None => {
            account.password_hash = Some(passwords.hash(&password));
            ignore_duplicate(gateway.create_account(&account).await)?;
        }
    }
    match stores.api_keys.find_api_key(&api_key_record.hash).await? {
        Some(record) if !record.active => {
            tracing::warn!("the demo API key is switched off in this store");
        }
        Some(_) => {}
        None => {
            let max = gateway.config().max_api_keys_per_account;
            if !stores.api_keys.insert_api_key(&api_key_record, max).await? {
                return Err(SeedError::TooManyApiKeys);
            }
        }
    }
    Ok(DemoCredentials {
        base_url: gateway.config().base_url.clone(),
        client_id: client.id.to_string(),
        client_secret: client_secret.expose().to_owned(),
        redirect_uri: DEMO_REDIRECT_URI.to_owned(),
        api_key: api_key.expose().to_owned(),
        email: DEMO_EMAIL.to_owned(),
        password,
    })
}

/// Another instance starting on the same shared store may insert the same
/// demo record first; that is success.
fn ignore_duplicate(result: Result<(), StoreError>) -> Result<(), StoreError> {
    match result {
        Err(StoreError::Duplicate { .. }) => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csp_sources_are_origins_or_schemes() {
        let source = |uri| csp_source(uri);
        assert_eq!(
            source("http://127.0.0.1:9/callback").as_deref(),
            Some("http://127.0.0.1:9")
        );
        assert_eq!(
            source("https://u:p@app.example/cb?x#y").as_deref(),
            Some("https://app.example")
        );
        assert_eq!(
            source("com.example.app:/callback").as_deref(),
            Some("com.example.app:")
        );
        assert_eq!(source("https://app.example;script-src *"), None);
        assert_eq!(source("1http://x"), None);
        assert_eq!(source("no-colon"), None);
    }

    #[test]
    fn escaping_covers_text_and_attribute_values() {
        assert_eq!(
            escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn sessions_open_only_when_signed_by_this_key_and_unexpired() {
        let keys = |byte| {
            let key = ServerKey([byte; 32]);
            PageKeys {
                session: key.derive(b"dialog session"),
                csrf: key.derive(b"dialog csrf"),
            }
        };
        let (ours, theirs) = (keys(1), keys(2));
        let account = AccountId(uuid::Uuid::from_u128(7));
        let value = ours.session_value(account, 1_000);
        assert_eq!(ours.open_session(&value, 999), Some(account));
        assert_eq!(ours.open_session(&value, 1_000), None, "expired");
        assert_eq!(theirs.open_session(&value, 999), None, "another key");
        assert_eq!(ours.open_session(&format!("{value}|x"), 999), None);
        let longer = value.replacen("|1000|", "|9999|", 1);
        assert_eq!(
            ours.open_session(&longer, 999),
            None,
            "the expiry is signed"
        );
        assert_ne!(
            value,
            ours.session_value(account, 1_000),
            "every session is unique"
        );
        assert_ne!(ours.login_token("n", "q"), ours.consent_token("n", "q"));
    }

    #[test]
    fn cookies_are_found_by_exact_name() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; cg_login=x; cg_session=y"),
        );
        headers.append(header::COOKIE, HeaderValue::from_static("other=2"));
        assert_eq!(cookie(&headers, "cg_session"), Some("y"));
        assert_eq!(cookie(&headers, "other"), Some("2"));
        assert_eq!(cookie(&headers, "cg"), None);
    }

    #[test]
    fn passwords_are_verified_in_reused_memory_as_argon2_verifies_them() {
        use argon2::PasswordVerifier as _;
        let passwords = Passwords::new(8, 1);
        let mut memory = Vec::new();
        let hash = passwords.hash("correct horse");
        assert!(passwords.verify("correct horse", Some(&hash), &mut memory));
        assert_eq!(memory.len(), 8, "one block per KiB");
        assert!(!passwords.verify("correct horsE", Some(&hash), &mut memory));
        assert!(!passwords.verify("correct horse", None, &mut memory));
        assert!(!passwords.verify("x", Some("$argon2id$v=19$garbage"), &mut memory));
        // A hash with other parameters is checked with its own, in memory
        // grown to fit; the crate's own verifier agrees.
        let costlier = Passwords::new(32, 2).hash("battery staple");
        assert!(passwords.verify("battery staple", Some(&costlier), &mut memory));
        assert_eq!(memory.len(), 32);
        assert!(passwords.verify("correct horse", Some(&hash), &mut memory));
        let parsed = PasswordHash::new(&costlier).unwrap();
        assert!(
            Argon2::default()
                .verify_password(b"battery staple", &parsed)
                .is_ok()
        );
    }

    #[test]
    fn server_keys_are_64_hex_digits_and_never_printed() {
        let key = ServerKey::from_hex(&format!(" {} \n", "ab".repeat(32))).expect("hex");
        assert_eq!(key.0, [0xab; 32]);
        assert!(ServerKey::from_hex("abcd").is_none());
        assert_eq!(format!("{key:?}"), "ServerKey(***)");
    }
}
