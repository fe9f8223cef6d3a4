//! Conversions to and from the `http` crate's types (feature `http`), for
//! hosts on hyper, axum or any other stack built on them.

use crate::answer::{AnswerBody, HttpAnswer};
use crate::request::RequestParts;

impl<'a> RequestParts<'a> {
    /// The parts the core reads, borrowed from an `http` request head and
    /// its collected body.
    ///
    /// A `Content-Type` or `Authorization` whose value is not visible
    /// ASCII counts as absent, so the core answers exactly as if it had not
    /// been sent (no credential, no media type). An `Idempotency-Key` that
    /// is not visible ASCII, or is sent twice, is
    /// [`RequestParts::UNREADABLE`] instead: the client asked for
    /// idempotency, and taking the request as one without a key would
    /// record each of its retries again.
    pub fn from_http(head: &'a http::request::Parts, body: &'a [u8]) -> Self {
        let header = |name: &str| head.headers.get(name).and_then(|value| value.to_str().ok());
        let mut keys = head.headers.get_all("idempotency-key").iter();
        let idempotency_key = match (keys.next(), keys.next()) {
            (None, _) => None,
            (Some(key), None) => Some(key.to_str().unwrap_or(Self::UNREADABLE)),
            (Some(_), Some(_)) => Some(Self::UNREADABLE),
        };
        RequestParts {
            query: head.uri.query().unwrap_or_default(),
            content_type: header("content-type"),
            authorization: header("authorization"),
            idempotency_key,
            body,
        }
    }
}

/// The answer as an `http` response with its body serialized.
///
/// The core writes only valid header names and values (a redirect's
/// `Location` is percent-encoded); a header that is not valid HTTP anyway
/// is left out rather than sent malformed.
impl From<HttpAnswer> for http::Response<Vec<u8>> {
    fn from(answer: HttpAnswer) -> Self {
        let body = match &answer.body {
            AnswerBody::Json(value) => serde_json::to_vec(value).unwrap_or_default(),
            AnswerBody::Empty => Vec::new(),
        };
        let mut response = http::Response::new(body);
        *response.status_mut() = http::StatusCode::from_u16(answer.status)
            .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
        for (name, value) in answer.headers {
            if let (Ok(name), Ok(value)) = (
                http::HeaderName::try_from(name),
                http::HeaderValue::try_from(value),
            ) {
                response.headers_mut().append(name, value);
            }
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_parts_come_from_the_head_and_body() {
        let (head, ()) = http::Request::post("/platform/conversions?api_key=k")
            .header("Content-Type", "application/json")
            .header("Idempotency-Key", "retry-1")
            .header("Authorization", "Bearer caf\u{e9}".as_bytes())
            .body(())
            .unwrap()
            .into_parts();
        let parts = RequestParts::from_http(&head, b"{}");
        assert_eq!(parts.query, "api_key=k");
        assert_eq!(parts.content_type, Some("application/json"));
        assert_eq!(parts.idempotency_key, Some("retry-1"));
        assert_eq!(parts.authorization, None, "not visible ASCII: absent");
        assert_eq!(parts.body, b"{}");
    }

    #[test]
    fn an_idempotency_key_that_is_not_one_text_is_unreadable_not_absent() {
        let head = |keys: &[&[u8]]| {
            let mut request = http::Request::post("/platform/conversions");
            for key in keys {
                request = request.header("Idempotency-Key", *key);
            }
            request.body(()).unwrap().into_parts().0
        };
        fn key(head: &http::request::Parts) -> Option<&str> {
            RequestParts::from_http(head, b"").idempotency_key
        }
        assert_eq!(key(&head(&[])), None);
        assert_eq!(key(&head(&[b"retry-1"])), Some("retry-1"));
        assert_eq!(
            key(&head(&["cl\u{e9}".as_bytes()])),
            Some(RequestParts::UNREADABLE)
        );
        assert_eq!(
            key(&head(&[b"retry-1", b"retry-2"])),
            Some(RequestParts::UNREADABLE),
            "sent twice"
        );
    }

    #[test]
    fn answers_keep_status_headers_and_body() {
        let answer = HttpAnswer::error(401, "UNAUTHORIZED", "no")
            .with_header("www-authenticate", "Bearer realm=\"x\"")
            .with_header("x-bad", "line\nbreak");
        let response = http::Response::<Vec<u8>>::from(answer.clone());
        assert_eq!(response.status(), 401);
        assert_eq!(response.headers()["www-authenticate"], "Bearer realm=\"x\"");
        assert_eq!(response.headers()["content-type"], "application/json");
        assert!(response.headers().get("x-bad").is_none());
        assert_eq!(response.body(), &answer.body_bytes());
        let redirect = http::Response::<Vec<u8>>::from(HttpAnswer::redirect("/cb?code=x"));
        assert_eq!(redirect.status(), 302);
        assert!(redirect.body().is_empty());
    }
}
