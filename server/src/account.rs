//! The signed-in user's own page of connected applications
//! (`/account/apps`): every application the account has authorized, when,
//! and when it last refreshed its tokens, with a button that disconnects
//! one (revoking every token of that grant at once).
//!
//! ```text
//! GET  /account/apps                  no session -> sign-in form
//!                                     session    -> the list, one form per app
//! POST /account/apps action=login     CSRF (login nonce), throttle, Argon2
//!        -> 303 /account/apps with a session cookie
//! POST /account/apps action=disconnect grant=ID
//!        CSRF (bound to the session) -> revoke -> 303 /account/apps
//! ```
//!
//! It shares the dialog's sign-in throttle and password checks
//! ([`DialogState`]), but keeps a session of its own: its cookies have
//! `Path=/account`, the dialog's `Path=/auth/dialog`, so neither page's
//! cookie reaches the other.

use std::net::SocketAddr;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, State};
use axum::http::header::{self, HeaderMap};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::get;
use conversion_gateway::{ConnectedApp, GrantId, StoreError};
use time::format_description::well_known::Rfc3339;
use tower_http::timeout::TimeoutLayer;
use uuid::Uuid;

use crate::dialog::{DialogState, Notice, SignInRefused};
use crate::pages::{append_header, escape, message_page, page};
use crate::session::{
    LOGIN_COOKIE, SESSION_SECONDS, Session, cookie, login_nonce, random_token, same_token,
};

/// The page's path.
pub const APPS_PATH: &str = "/account/apps";

/// The path of the account pages' cookies.
const COOKIE_PATH: &str = "/account";

/// The largest form this page takes: a few short fields. Applied while the
/// body is read: a larger one is answered 413 when its `Content-Length`
/// says so, or as soon as more has come, never buffered whole.
const FORM_LIMIT: usize = 4 * 1024;

/// `GET` and `POST /account/apps`, on the dialog's state.
pub fn routes<S: Clone + Send + Sync + 'static>(state: DialogState) -> Router<S> {
    Router::new()
        .route(APPS_PATH, get(apps_page).post(apps_form))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            conversion_gateway::axum::REQUEST_TIMEOUT,
        ))
        .layer(axum::middleware::from_fn(
            conversion_gateway::axum::json_errors,
        ))
        .with_state(state)
}

/// A submitted form of this page. Unknown fields are ignored; a field sent
/// twice keeps its first value.
#[derive(Default)]
struct AppsForm {
    action: String,
    csrf: String,
    email: String,
    password: String,
    grant: String,
}

impl AppsForm {
    fn parse(body: &[u8]) -> Self {
        let mut form = Self::default();
        for (name, value) in form_urlencoded::parse(body) {
            let field = match name.as_ref() {
                "action" => &mut form.action,
                "csrf" => &mut form.csrf,
                "email" => &mut form.email,
                "password" => &mut form.password,
                "grant" => &mut form.grant,
                _ => continue,
            };
            if field.is_empty() {
                *field = value.into_owned();
            }
        }
        form
    }
}

/// `GET /account/apps`: the list to a signed-in browser, else the sign-in
/// form.
async fn apps_page(State(app): State<DialogState>, headers: HeaderMap) -> Response {
    match app.session(&headers).await {
        Ok(Some(session)) => list_page(&app, &session, None).await,
        Ok(None) => sign_in_page(&app, &headers, "", Notice::None),
        Err(error) => unavailable(&error),
    }
}

/// `POST /account/apps`: the sign-in form (`action=login`) and the
/// disconnect buttons (`action=disconnect`, `grant`).
async fn apps_form(
    State(app): State<DialogState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|essence| {
            essence
                .trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        });
    if !is_form {
        return message_page(
            415,
            "Unsupported form",
            "This page only accepts its own forms.",
        );
    }
    let body = match read_form(&headers, body).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let form = AppsForm::parse(&body);
    match form.action.as_str() {
        "login" => {
            let nonce = cookie(&headers, LOGIN_COOKIE).unwrap_or_default();
            if nonce.is_empty() || !same_token(&app.keys().account_login_token(nonce), &form.csrf) {
                return form_expired();
            }
            match app.sign_in(&form.email, &form.password, peer.ip()).await {
                Ok(account) => {
                    let mut response = see_apps();
                    app.start_session(&mut response, account.id, COOKIE_PATH);
                    response
                }
                Err(SignInRefused::Notice(notice)) => {
                    sign_in_page(&app, &headers, &form.email, notice)
                }
                Err(SignInRefused::Store(error)) => unavailable(&error),
            }
        }
        "disconnect" => {
            let session = match app.session(&headers).await {
                Ok(Some(session)) => session,
                Ok(None) => return sign_in_page(&app, &headers, "", Notice::SessionExpired),
                Err(error) => return unavailable(&error),
            };
            if !same_token(&app.keys().account_token(&session.cookie), &form.csrf) {
                return form_expired();
            }
            let Ok(grant) = Uuid::parse_str(&form.grant) else {
                return list_page(&app, &session, Some("That application is not connected.")).await;
            };
            match app
                .gateway()
                .disconnect_app(session.account.id, GrantId(grant))
                .await
            {
                // Post/redirect/get: a reload does not post again.
                Ok(true) => see_apps(),
                Ok(false) => {
                    list_page(&app, &session, Some("That application is not connected.")).await
                }
                Err(error) => unavailable(&error),
            }
        }
        _ => message_page(400, "Unknown form", "This form is not one of this page's."),
    }
}

/// The body of a form, at most [`FORM_LIMIT`] bytes, read no further than
/// that: axum's `Bytes` would buffer up to 2 MB first, and 512 such
/// requests held 1 GiB.
///
/// # Errors
/// The page to answer: 413 for a larger body, 400 for one that could not
/// be read.
async fn read_form(headers: &HeaderMap, body: Body) -> Result<Bytes, Response> {
    let too_large = || {
        message_page(
            413,
            "Form too large",
            "This form is larger than any of this page's.",
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > FORM_LIMIT as u64) {
        return Err(too_large());
    }
    axum::body::to_bytes(body, FORM_LIMIT)
        .await
        .map_err(|error| {
            if error.into_inner().is::<http_body_util::LengthLimitError>() {
                too_large()
            } else {
                message_page(400, "Unreadable form", "This form could not be read.")
            }
        })
}

/// The list of connected applications, each with a disconnect button.
async fn list_page(app: &DialogState, session: &Session, notice: Option<&str>) -> Response {
    let apps = match app.gateway().connected_apps(session.account.id).await {
        Ok(apps) => apps,
        Err(error) => return unavailable(&error),
    };
    let csrf = app.keys().account_token(&session.cookie);
    let rows: String = apps
        .iter()
        .map(|connected| app_row(connected, &csrf))
        .collect();
    let list = if apps.is_empty() {
        "<p>No application is connected to this account.</p>".to_owned()
    } else {
        format!(
            "<table>\n<thead><tr><th>Application</th><th>Authorized</th><th>Last refreshed</th><th></th></tr></thead>\n<tbody>\n{rows}</tbody>\n</table>"
        )
    };
    let notice = notice.map_or_else(String::new, |text| {
        format!(r#"<p class="error" role="alert">{}</p>"#, escape(text))
    });
    let body = format!(
        r#"<h1>Connected applications</h1>
<p>The applications that <strong>{account}</strong> ({email}) has allowed to use the API. Disconnecting one revokes its access at once; it would have to ask again.</p>
{notice}
{list}"#,
        account = escape(&session.account.name),
        email = escape(&session.account.email),
    );
    let status = if notice.is_empty() { 200 } else { 404 };
    page(status, "Connected applications", &body, None)
}

/// One application's row: its name, dates and the disconnect form.
fn app_row(connected: &ConnectedApp, csrf: &str) -> String {
    let date = |at: time::OffsetDateTime| at.format(&Rfc3339).unwrap_or_default();
    format!(
        r#"<tr><td>{name}</td><td><time>{authorized}</time></td><td>{refreshed}</td><td>
<form method="post" action="{APPS_PATH}">
<input type="hidden" name="action" value="disconnect">
<input type="hidden" name="grant" value="{grant}">
<input type="hidden" name="csrf" value="{csrf}">
<button type="submit" class="secondary">Disconnect</button>
</form></td></tr>
"#,
        name = escape(&connected.name),
        authorized = date(connected.authorized_at),
        refreshed = connected.last_refreshed_at.map_or_else(
            || "never".to_owned(),
            |at| format!("<time>{}</time>", date(at))
        ),
        grant = connected.grant_id,
    )
}

/// The sign-in form of this page, with a login nonce cookie.
fn sign_in_page(app: &DialogState, headers: &HeaderMap, email: &str, notice: Notice) -> Response {
    let nonce = login_nonce(headers).map_or_else(|| random_token(16), str::to_owned);
    let (status, notice, retry_after) = notice.render();
    let body = format!(
        r#"<h1>Sign in</h1>
<p>Sign in to see the applications connected to your account.</p>
{notice}
<form method="post" action="{APPS_PATH}">
<input type="hidden" name="action" value="login">
<input type="hidden" name="csrf" value="{csrf}">
<label for="email">E-mail</label>
<input id="email" name="email" type="email" value="{email}" autocomplete="username" required autofocus>
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required>
<button type="submit">Sign in</button>
</form>"#,
        csrf = app.keys().account_login_token(&nonce),
        email = escape(email),
    );
    let mut response = page(status, "Sign in", &body, None);
    let cookie = app.cookie_at(COOKIE_PATH, LOGIN_COOKIE, &nonce, SESSION_SECONDS);
    append_header(&mut response, header::SET_COOKIE, &cookie);
    if let Some(seconds) = retry_after {
        append_header(&mut response, header::RETRY_AFTER, &seconds.to_string());
    }
    response
}

/// `303 See Other` to the list.
fn see_apps() -> Response {
    let mut response = page(303, "Connected applications", "", None);
    response
        .headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static(APPS_PATH));
    response
}

/// A form whose CSRF token does not match (403).
fn form_expired() -> Response {
    let body = format!(
        r#"<h1>Form expired</h1>
<p>This form has expired or was not sent from this site, so it was not accepted.</p>
<p><a href="{APPS_PATH}">Open the page again</a></p>"#
    );
    page(403, "Form expired", &body, None)
}

/// The store failed: a page for the user, the causes for the log.
fn unavailable(error: &StoreError) -> Response {
    tracing::error!(error = %error, "account page failed");
    message_page(
        503,
        "Service unavailable",
        "The service is temporarily unavailable. Please try again in a moment.",
    )
}
