//! The dialog's and the account's pages on axum: `GET` and `POST
//! /auth/dialog`, `GET` and `POST /account/apps`. The flows decide
//! ([`crate::PageFlows`]); these handlers extract a [`PageRequest`], call
//! the flow, and render its reply with the host's [`Templates`].
//!
//! ```text
//! GET  /auth/dialog     dialog_page -> PageFlows::dialog_page
//! POST /auth/dialog     dialog_form -> PageFlows::dialog_form (16 KiB body)
//! GET  /account/apps    apps_page   -> PageFlows::apps_page
//! POST /account/apps    apps_form   -> PageFlows::apps_form (4 KiB body)
//! ```
//!
//! ```no_run
//! use std::net::SocketAddr;
//! use std::sync::Arc;
//! use conversion_gateway::axum::pages::{self, PagesState};
//! use conversion_gateway::{
//!     Argon2Passwords, Argon2Verifier, FormSignIn, Gateway, GatewayConfig, HashingLimit,
//!     OsRandom, PageFlows, ServerKey, SignInMethod, Stores, SystemClock, ThrottleLimits,
//! };
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! let key = ServerKey::generate(&OsRandom);
//! let gateway = Arc::new(Gateway::new(
//!     GatewayConfig::new("http://127.0.0.1:8080"),
//!     Stores::in_memory(),
//!     key.hasher(),
//! ));
//! let passwords = Argon2Verifier::new(Argon2Passwords::recommended(), HashingLimit::per_core());
//! let sign_in = FormSignIn::new(Arc::new(passwords), ThrottleLimits::default());
//! let flows = PageFlows::new(
//!     gateway.clone(),
//!     &key,
//!     SignInMethod::Form(Arc::new(sign_in)),
//!     Arc::new(SystemClock),
//! );
//! let app = pages::routes(PagesState::new(flows)).merge(conversion_gateway::axum::router(gateway));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! // The sign-in form throttles by client address: serve with ConnectInfo.
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await
//! # }
//! ```

mod render;
mod templates;

pub use templates::{DefaultTemplates, STYLE, Templates, escape, wait_text};

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, State};
use axum::http::header::{self, HeaderMap};
use axum::http::{StatusCode, Uri};
use axum::middleware;
use axum::response::Response;
use axum::routing::get;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest as _, Sha256};
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;

use crate::axum::extract::OAuthRequest;
use crate::axum::pages::render::render;
use crate::axum::request_timeout::RequestTimeoutLayer;
use crate::axum::respond::{json_errors, panic_as_json};
use crate::axum::router::REQUEST_TIMEOUT;
use crate::signin::flows::{APPS_PATH, DIALOG_PATH, PageFlows, is_form};
use crate::signin::method::PageRequest;
use crate::signin::view::{PageReply, PageView};

/// The largest form of the account page: a few short fields. Applied while
/// the body is read: a larger one is answered 413 when its `Content-Length`
/// says so, or as soon as more has come, never buffered whole.
const APPS_FORM_LIMIT: usize = 4 * 1024;

/// Everything the pages' handlers need; cheap to clone (axum clones it per
/// request).
#[derive(Clone)]
pub struct PagesState {
    flows: Arc<PageFlows>,
    templates: Arc<dyn Templates>,
    /// The policy's source for the templates' style sheet.
    style_hash: Arc<str>,
}

impl std::fmt::Debug for PagesState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PagesState")
            .field("flows", &self.flows)
            .finish_non_exhaustive()
    }
}

impl PagesState {
    /// The pages of `flows`, with today's HTML ([`DefaultTemplates`]).
    pub fn new(flows: PageFlows) -> Self {
        Self::with_templates(flows, Arc::new(DefaultTemplates))
    }

    /// The pages of `flows`, rendered by `templates`.
    pub fn with_templates(flows: PageFlows, templates: Arc<dyn Templates>) -> Self {
        let style_hash = format!(
            "'sha256-{}'",
            STANDARD.encode(Sha256::digest(templates.style_sheet().as_bytes()))
        );
        Self {
            flows: Arc::new(flows),
            templates,
            style_hash: style_hash.into(),
        }
    }

    /// The flows the pages call.
    pub fn flows(&self) -> &PageFlows {
        &self.flows
    }

    fn render(&self, reply: PageReply) -> Response {
        render(reply, &*self.templates, &self.style_hash)
    }
}

/// `GET` and `POST /auth/dialog` and `/account/apps`, with the JSON errors,
/// the request timeout and the answer to panics of the library's router (a
/// wrong method is a JSON 405, an oversized dialog form a JSON 413, a
/// panic a JSON 500).
///
/// Our sign-in form throttles by client address, so the app must be served
/// with each request's [`ConnectInfo<SocketAddr>`] (`axum::serve` with
/// `app.into_make_service_with_connect_info::<SocketAddr>()`). Without it,
/// a posted form is answered 500 rather than throttled with everyone else's.
pub fn routes<S: Clone + Send + Sync + 'static>(state: PagesState) -> Router<S> {
    Router::new()
        .route(DIALOG_PATH, get(dialog_page).post(dialog_form))
        .route(APPS_PATH, get(apps_page).post(apps_form))
        // One layer of three, as in the JSON router (each `layer` call
        // boxes the routes again for every request). Outermost first: a
        // panic's JSON 500, the JSON rewrite of error answers, the timeout.
        .layer(
            ServiceBuilder::new()
                .layer(CatchPanicLayer::custom(panic_as_json))
                .layer(middleware::from_fn(json_errors))
                .layer(RequestTimeoutLayer::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    REQUEST_TIMEOUT,
                )),
        )
        .with_state(state)
}

/// What the flows read of a request: its cookies, headers and client.
fn page_request(headers: &HeaderMap, peer: Option<SocketAddr>) -> PageRequest<'_> {
    PageRequest {
        cookies: headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .collect(),
        headers: headers
            .iter()
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
            .collect(),
        peer: peer.map(|peer| peer.ip()),
    }
}

/// `GET /auth/dialog`.
async fn dialog_page(State(pages): State<PagesState>, uri: Uri, headers: HeaderMap) -> Response {
    let query = uri.query().unwrap_or_default();
    let reply = pages
        .flows
        .dialog_page(query, &page_request(&headers, None))
        .await;
    pages.render(reply)
}

/// `POST /auth/dialog`, its body within the OAuth routes' limit.
async fn dialog_form(
    State(pages): State<PagesState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    request: OAuthRequest,
) -> Response {
    let parts = request.parts();
    let reply = pages
        .flows
        .dialog_form(
            parts.content_type,
            parts.body,
            &page_request(&headers, Some(peer)),
        )
        .await;
    pages.render(reply)
}

/// `GET /account/apps`.
async fn apps_page(State(pages): State<PagesState>, headers: HeaderMap) -> Response {
    let reply = pages.flows.apps_page(&page_request(&headers, None)).await;
    pages.render(reply)
}

/// `POST /account/apps`, its body read no further than [`APPS_FORM_LIMIT`].
async fn apps_form(
    State(pages): State<PagesState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok());
    let request = page_request(&headers, Some(peer));
    // The media type first: a body that is not a form is not read at all.
    if !is_form(content_type) {
        let reply = pages.flows.apps_form(content_type, b"", &request).await;
        return pages.render(reply);
    }
    let body = match read_form(&headers, body).await {
        Ok(body) => body,
        Err(view) => return pages.render(view.into()),
    };
    let reply = pages.flows.apps_form(content_type, &body, &request).await;
    pages.render(reply)
}

/// The body of a form, at most [`APPS_FORM_LIMIT`] bytes, read no further
/// than that: axum's `Bytes` would buffer up to 2 MB first, and 512 such
/// requests held 1 GiB.
///
/// # Errors
/// The page to answer: 413 for a larger body, 400 for one that could not
/// be read.
async fn read_form(headers: &HeaderMap, body: Body) -> Result<Bytes, PageView> {
    let too_large = || PageView::Message {
        status: 413,
        title: "Form too large",
        message: "This form is larger than any of this page's.",
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > APPS_FORM_LIMIT as u64) {
        return Err(too_large());
    }
    axum::body::to_bytes(body, APPS_FORM_LIMIT)
        .await
        .map_err(|error| {
            if error.into_inner().is::<http_body_util::LengthLimitError>() {
                too_large()
            } else {
                PageView::Message {
                    status: 400,
                    title: "Unreadable form",
                    message: "This form could not be read.",
                }
            }
        })
}
