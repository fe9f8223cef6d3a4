//! Framework-neutral HTTP answers: what the core returns for an adapter to
//! send, with no web framework's types.

use serde_json::{Value, json};

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
