//! Framework-neutral HTTP answers: what an endpoint's result becomes for an
//! adapter to send, with no web framework's types.
//!
//! Every result and error of the public API implements [`ToHttpAnswer`], and
//! [`crate::Gateway::answer`] turns any of them into an [`HttpAnswer`], so a
//! handler is always `gateway.answer(gateway.endpoint(&parts).await)`. The
//! mapping of each error to its status, body and challenge sits beside the
//! endpoint that returns it ([`crate::StoreError`]'s beside it, in the store
//! layer); the pure decisions know nothing of HTTP.

use serde_json::{Value, json};

/// A result or error that has an HTTP answer.
///
/// Call it through [`crate::Gateway::answer`], which supplies the
/// [`AnswerContext`] (the challenge realm, from the configuration).
pub trait ToHttpAnswer {
    /// The answer to send.
    fn to_http_answer(&self, context: &AnswerContext<'_>) -> HttpAnswer;
}

/// What an answer needs to know of the service that is not in the result
/// itself. Only [`crate::Gateway::answer`] makes one.
#[derive(Clone, Copy, Debug)]
pub struct AnswerContext<'a> {
    realm: &'a str,
}

impl<'a> AnswerContext<'a> {
    pub(crate) fn new(realm: &'a str) -> Self {
        Self { realm }
    }

    /// The `realm` of `WWW-Authenticate` challenges: `{base_url}/`.
    pub fn realm(&self) -> &str {
        self.realm
    }
}

impl<T: ToHttpAnswer, E: ToHttpAnswer> ToHttpAnswer for Result<T, E> {
    fn to_http_answer(&self, context: &AnswerContext<'_>) -> HttpAnswer {
        match self {
            Ok(value) => value.to_http_answer(context),
            Err(error) => error.to_http_answer(context),
        }
    }
}

impl<T: ToHttpAnswer + ?Sized> ToHttpAnswer for &T {
    fn to_http_answer(&self, context: &AnswerContext<'_>) -> HttpAnswer {
        (**self).to_http_answer(context)
    }
}

impl ToHttpAnswer for HttpAnswer {
    fn to_http_answer(&self, _: &AnswerContext<'_>) -> HttpAnswer {
        self.clone()
    }
}

/// The body of an [`HttpAnswer`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum AnswerBody {
    /// A JSON document, sent with `Content-Type: application/json`.
    Json(Value),
    /// No body (a redirect).
    Empty,
}

/// An HTTP answer: status as a number, headers as string pairs, and a body.
///
/// Adapters convert it in a few lines; see `examples/`.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpAnswer {
    /// The status code.
    pub status: u16,
    /// Header names and values, in order. Names are lowercase.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: AnswerBody,
}

impl HttpAnswer {
    /// A JSON answer with `Content-Type: application/json`.
    pub fn json(status: u16, body: Value) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: AnswerBody::Json(body),
        }
    }

    /// A `302 Found` redirect to `location` (RFC 6749 section 4.1.2 uses 302).
    pub fn redirect(location: impl Into<String>) -> Self {
        Self {
            status: 302,
            headers: vec![("location".into(), location.into())],
            body: AnswerBody::Empty,
        }
    }

    /// The service's error answer: `{"error_type", "error_message"}`.
    pub fn error(status: u16, error_type: &str, message: &str) -> Self {
        Self::json(
            status,
            json!({ "error_type": error_type, "error_message": message }),
        )
    }

    /// Adds a header (the name is lowercased).
    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_ascii_lowercase(), value.into()));
        self
    }

    /// The first value of header `name`, compared case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The JSON body, if there is one.
    pub fn json_body(&self) -> Option<&Value> {
        match &self.body {
            AnswerBody::Json(value) => Some(value),
            AnswerBody::Empty => None,
        }
    }

    /// The body serialized to bytes (empty for [`AnswerBody::Empty`]).
    pub fn body_bytes(&self) -> Vec<u8> {
        match &self.body {
            AnswerBody::Json(value) => serde_json::to_vec(value).unwrap_or_default(),
            AnswerBody::Empty => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::error::StoreError;

    const CONTEXT: AnswerContext<'static> = AnswerContext {
        realm: "https://api.example/",
    };

    #[test]
    fn store_errors_answer_503_without_detail() {
        let error = StoreError::backend("insert an event", std::io::Error::other("disk on fire"));
        let answer = error.to_http_answer(&CONTEXT);
        assert_eq!(answer.status, 503);
        assert_eq!(answer.header("retry-after"), Some("1"));
        assert_eq!(
            answer.json_body().unwrap()["error_type"],
            "SERVICE_UNAVAILABLE"
        );
        let body = String::from_utf8(answer.body_bytes()).unwrap();
        assert!(!body.contains("disk"), "{body}");
        let duplicate = StoreError::Duplicate { what: "event" }.to_http_answer(&CONTEXT);
        assert_eq!(
            duplicate.status, 503,
            "a fresh identifier is drawn on retry"
        );
    }

    #[test]
    fn rejected_data_answers_422_without_retry_after_or_detail() {
        let error = StoreError::rejected("insert an event", std::io::Error::other("nul byte"));
        let answer = error.to_http_answer(&CONTEXT);
        assert_eq!(answer.status, 422);
        assert_eq!(answer.header("retry-after"), None);
        assert_eq!(
            answer.json_body().unwrap()["error_type"],
            "UNPROCESSABLE_ENTITY"
        );
        let body = String::from_utf8(answer.body_bytes()).unwrap();
        assert!(!body.contains("nul"), "{body}");
    }

    #[test]
    fn results_answer_with_their_value_or_their_error() {
        let ok: Result<HttpAnswer, StoreError> = Ok(HttpAnswer::redirect("https://a.example/"));
        assert_eq!(ok.to_http_answer(&CONTEXT).status, 302);
        let err: Result<HttpAnswer, StoreError> = Err(StoreError::Duplicate { what: "grant" });
        assert_eq!(ToHttpAnswer::to_http_answer(&&err, &CONTEXT).status, 503);
        assert_eq!(CONTEXT.realm(), "https://api.example/");
    }

    #[test]
    fn json_answers_carry_their_content_type() {
        let answer = HttpAnswer::error(401, "UNAUTHORIZED", "no token").with_header("X-A", "b");
        assert_eq!(answer.header("Content-Type"), Some("application/json"));
        assert_eq!(answer.header("x-a"), Some("b"));
        assert_eq!(
            answer.json_body(),
            Some(&json!({"error_type": "UNAUTHORIZED", "error_message": "no token"}))
        );
        assert_eq!(
            answer.body_bytes(),
            br#"{"error_message":"no token","error_type":"UNAUTHORIZED"}"#
        );
    }

    #[test]
    fn redirects_have_a_location_and_no_body() {
        let answer = HttpAnswer::redirect("https://app.example/cb?code=x");
        assert_eq!(answer.status, 302);
        assert_eq!(
            answer.header("location"),
            Some("https://app.example/cb?code=x")
        );
        assert!(answer.body_bytes().is_empty());
    }
}
