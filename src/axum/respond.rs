//! Answers as axum responses, and the service's JSON shape for the errors
//! axum and tower answer themselves.

use ::axum::body::Body;
use ::axum::extract::Request;
use ::axum::middleware::Next;
use ::axum::response::{IntoResponse, Response};
use http::{StatusCode, header};

use crate::answer::HttpAnswer;

/// The answer's status, headers and JSON body.
impl IntoResponse for HttpAnswer {
    fn into_response(self) -> Response {
        http::Response::<Vec<u8>>::from(self)
            .map(Body::from)
            .into_response()
    }
}

/// The service's JSON 500 for a handler that panicked, in the shape
/// tower-http's `CatchPanicLayer::custom` takes: the library's router
/// answers its own panics with it, and a host can answer its own routes'
/// the same way. What the panic said stays out of the answer.
pub fn panic_as_json(_panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    HttpAnswer::error(
        500,
        "INTERNAL_SERVER_ERROR",
        "the service failed to answer this request",
    )
    .into_response()
}

/// Middleware (for [`axum::middleware::from_fn`](::axum::middleware::from_fn))
/// that turns every error answer that is neither JSON nor an HTML page (axum's
/// own 404, 405, 413 and 415, a timeout's 503, a panic's 500) into the
/// service's JSON error, `{"error_type", "error_message"}`, keeping the
/// original status and headers (`Allow` on a 405). The real service's
/// clients parse every error body as JSON; an empty or plain-text one
/// crashes them.
pub async fn json_errors(request: Request, next: Next) -> Response {
    plain_errors_as_json(next.run(request).await)
}

/// The rewrite of [`json_errors`] on an answer already made: `response`
/// itself unless it is an error answer that is neither JSON nor an HTML
/// page. For a layer that maps responses without a middleware's boxed
/// future (`tower::ServiceBuilder::map_response`), as the library's router
/// uses it.
pub fn plain_errors_as_json(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let media_type = response
        .headers()
        .get(header::CONTENT_TYPE)
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
    let mut json = answer.into_response();
    for (name, value) in &head.headers {
        json.headers_mut().append(name.clone(), value.clone());
    }
    json
}
