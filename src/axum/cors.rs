//! CORS on the conversion route, answered by the route itself.
//!
//! Website forms post conversions from any origin, so `POST
//! /platform/conversions` (and only it) answers CORS. No cookie is
//! involved (the API key is in the query string), so `*` is safe. The
//! policy is fixed, so its headers are constants added to the route's own
//! answers: a CORS middleware would copy its configuration for every
//! request, which profiling found to be 6% of the conversion route's time.

use ::axum::response::Response;
use http::{HeaderValue, StatusCode, header};

use crate::axum::router::CONVERSIONS_PATH;

/// Who may call: any origin.
const ALLOW_ORIGIN: HeaderValue = HeaderValue::from_static("*");

/// What a script may read of an answer besides the safelisted headers.
const EXPOSE_HEADERS: HeaderValue = HeaderValue::from_static("idempotent-replayed");

/// The request headers a preflight may ask about and that vary the answer.
const VARY: HeaderValue = HeaderValue::from_static(
    "origin, access-control-request-method, access-control-request-headers",
);

/// Adds the CORS headers of an actual request to `response`, whatever its
/// status: a website's script can then read why a conversion was refused.
pub(super) fn allow(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, ALLOW_ORIGIN);
    headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, EXPOSE_HEADERS);
    headers.append(header::VARY, VARY);
    response
}

/// The answer to a preflight (`OPTIONS`): `POST` with `Content-Type` and
/// `Idempotency-Key` from any origin, remembered for a day.
#[utoipa::path(
    options,
    path = CONVERSIONS_PATH,
    tag = "intake",
    operation_id = "conversion_preflight",
    summary = "CORS preflight of the conversion route",
    description = "What a browser asks before a website's script posts a conversion with \
        `Content-Type: application/json` or an `Idempotency-Key`. Always the same answer.",
    responses(
        (status = 200, description = "Any origin may `POST` with `Content-Type` and \
            `Idempotency-Key`; remembered for a day. No body.",
            headers(
                ("Access-Control-Allow-Origin" = String, description = "`*`."),
                ("Access-Control-Allow-Methods" = String, description = "`POST`."),
                ("Access-Control-Allow-Headers" = String,
                    description = "`content-type, idempotency-key`."),
                ("Access-Control-Max-Age" = String, description = "`86400`."),
                ("Vary" = String, description = "`origin, access-control-request-method, \
                    access-control-request-headers`."),
            )),
    ),
)]
pub(super) async fn preflight() -> Response {
    let mut response = Response::new(::axum::body::Body::empty());
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, ALLOW_ORIGIN);
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("POST"),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("content-type, idempotency-key"),
    );
    headers.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("86400"),
    );
    headers.insert(header::VARY, VARY);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_preflight_allows_posts_with_the_event_headers_from_any_origin() {
        let response = preflight().await;
        assert_eq!(response.status(), 200);
        let headers = response.headers();
        assert_eq!(headers["access-control-allow-origin"], "*");
        assert_eq!(headers["access-control-allow-methods"], "POST");
        assert_eq!(
            headers["access-control-allow-headers"],
            "content-type, idempotency-key"
        );
        assert_eq!(headers["access-control-max-age"], "86400");
        assert_eq!(headers["vary"], VARY);
    }

    #[test]
    fn an_answer_is_readable_by_any_origin_with_its_replay_header() {
        let mut answer = Response::new(::axum::body::Body::empty());
        answer
            .headers_mut()
            .insert(header::VARY, HeaderValue::from_static("accept-encoding"));
        let answer = allow(answer);
        let headers = answer.headers();
        assert_eq!(headers["access-control-allow-origin"], "*");
        assert_eq!(
            headers["access-control-expose-headers"],
            "idempotent-replayed"
        );
        let vary: Vec<_> = headers.get_all(header::VARY).iter().collect();
        assert_eq!(vary, [&HeaderValue::from_static("accept-encoding"), &VARY]);
    }
}
