//! Extractors of the request parts the core reads, with the route's body
//! limit applied while the body is read.

use std::sync::Arc;

use ::axum::body::{Body, Bytes};
use ::axum::extract::{FromRef, FromRequest, Request};
use http_body_util::LengthLimitError;

use crate::answer::HttpAnswer;
use crate::gateway::Gateway;
use crate::intake::validator::errors::ValidationErrors;
use crate::request::RequestParts;
use crate::webhooks::destination::MAX_URL_LEN;
use crate::webhooks::registration::{MAX_EVENT_IDENTIFIERS, MAX_IDENTIFIER_LEN};

/// The largest body of the token, revocation and introspection routes: a
/// few short fields, so 16 KiB is generous.
pub const OAUTH_BODY_LIMIT: usize = 16 * 1024;

/// The longest a character can be in JSON text: a character outside the
/// Basic Multilingual Plane escaped as a surrogate pair (`\ud83d\ude00`).
const LONGEST_ESCAPED_CHAR: usize = 12;

/// The largest body of the webhook routes: the largest registration the
/// rules accept, with every character escaped at its longest. The document
/// promises that such a body is read (100 identifiers of 255 characters,
/// a 2,048-byte URL, the fixed fields), so a smaller limit would refuse
/// valid requests with 413. About 330 KiB.
pub const WEBHOOK_BODY_LIMIT: usize = MAX_EVENT_IDENTIFIERS
    * (MAX_IDENTIFIER_LEN * LONGEST_ESCAPED_CHAR + 3)
    + MAX_URL_LEN * LONGEST_ESCAPED_CHAR
    + 4 * 1024;

/// A request whose body was read whole, up to `LIMIT` bytes: its head and
/// its body. A larger body is answered `413 BODY_TOO_LARGE` (JSON) before
/// more of it is read. The routes use it through [`OAuthRequest`] and
/// [`WebhookRequest`]; a host's own route may pick its own limit.
#[derive(Debug)]
pub struct LimitedRequest<const LIMIT: usize> {
    head: http::request::Parts,
    body: Bytes,
}

/// A request to the token, revocation or introspection endpoint, its body
/// read up to [`OAUTH_BODY_LIMIT`] bytes: the parts for [`Gateway::token`],
/// [`Gateway::revoke`] and [`Gateway::introspect`].
pub type OAuthRequest = LimitedRequest<OAUTH_BODY_LIMIT>;

/// A request to a webhook route, its body read up to
/// [`WEBHOOK_BODY_LIMIT`] bytes: the parts for [`Gateway::create_webhook`]
/// and the other webhook calls.
pub type WebhookRequest = LimitedRequest<WEBHOOK_BODY_LIMIT>;

impl<const LIMIT: usize> LimitedRequest<LIMIT> {
    /// The parts for the [`Gateway`] call that serves the route.
    pub fn parts(&self) -> RequestParts<'_> {
        RequestParts::from_http(&self.head, &self.body)
    }
}

impl<S: Send + Sync, const LIMIT: usize> FromRequest<S> for LimitedRequest<LIMIT> {
    type Rejection = HttpAnswer;

    async fn from_request(request: Request, _: &S) -> Result<Self, HttpAnswer> {
        let (head, body) = request.into_parts();
        let body = read_body(body, LIMIT)
            .await
            .map_err(|refusal| match refusal {
                BodyRefusal::TooLarge => {
                    HttpAnswer::error(413, "BODY_TOO_LARGE", "the request body is too large")
                }
                BodyRefusal::Unreadable => unreadable(),
            })?;
        Ok(Self { head, body })
    }
}

/// A request to an event route: its head and its body, read up to the
/// gateway's [`crate::ConversionLimits::max_body_bytes`] (200 KB, as the
/// real service).
///
/// A larger body is answered with the validator's own 413 body, the one it
/// gives for the same limit, so a client sees one shape whichever layer
/// refused the body. Needs the state to hold the `Arc<Gateway>`.
#[derive(Debug)]
pub struct EventRequest {
    head: http::request::Parts,
    body: Bytes,
}

impl EventRequest {
    /// The parts for [`Gateway::record_conversion`], [`Gateway::record_event`]
    /// and [`Gateway::record_event_batch`].
    pub fn parts(&self) -> RequestParts<'_> {
        RequestParts::from_http(&self.head, &self.body)
    }
}

impl<S: Send + Sync> FromRequest<S> for EventRequest
where
    Arc<Gateway>: FromRef<S>,
{
    type Rejection = HttpAnswer;

    async fn from_request(request: Request, state: &S) -> Result<Self, HttpAnswer> {
        let limit = Arc::<Gateway>::from_ref(state)
            .config()
            .conversion_limits
            .max_body_bytes;
        let (head, body) = request.into_parts();
        let body = read_body(body, limit)
            .await
            .map_err(|refusal| match refusal {
                BodyRefusal::TooLarge => {
                    let errors = ValidationErrors::body_too_large(limit);
                    HttpAnswer::json(errors.status(), errors.to_body())
                }
                BodyRefusal::Unreadable => unreadable(),
            })?;
        Ok(Self { head, body })
    }
}

/// Why a body was not read.
enum BodyRefusal {
    /// Longer than the limit (by its `Content-Length` or as it streamed).
    TooLarge,
    /// The connection failed or the framing was invalid.
    Unreadable,
}

/// The whole body, if it is at most `limit` bytes; stops reading as soon as
/// it is known to be longer.
async fn read_body(body: Body, limit: usize) -> Result<Bytes, BodyRefusal> {
    ::axum::body::to_bytes(body, limit).await.map_err(|error| {
        if error.into_inner().downcast::<LengthLimitError>().is_ok() {
            BodyRefusal::TooLarge
        } else {
            BodyRefusal::Unreadable
        }
    })
}

fn unreadable() -> HttpAnswer {
    HttpAnswer::error(400, "BAD_REQUEST", "the request body could not be read")
}
