//! An HTTP answer read whole, the same for every test binary whether it
//! drives a router in-process or a server over loopback, and the form and
//! URL helpers that go with it.

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body_util::BodyExt as _;
use serde_json::Value;

use crate::pages::hidden;

/// A response, read whole.
pub struct Reply {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

/// The status, the headers and the body as text: what a failed assertion
/// shows.
impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reply")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("body", &String::from_utf8_lossy(&self.body))
            .finish()
    }
}

impl Reply {
    /// Reads `response` whole (a router's answer, in-process).
    ///
    /// # Panics
    /// The body cannot be read.
    pub async fn read<B>(response: http::Response<B>) -> Self
    where
        B: http_body::Body,
        B::Error: std::fmt::Debug,
    {
        let (head, body) = response.into_parts();
        let body = body.collect().await.expect("a readable body").to_bytes();
        Reply {
            status: head.status,
            headers: head.headers,
            body,
        }
    }

    /// The first value of header `name`, if it is text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// The body as text, for assertion messages.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The JSON body; fails unless the answer says it is JSON.
    #[track_caller]
    pub fn json(&self) -> Value {
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "status {}: {}",
            self.status,
            self.text()
        );
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    /// The HTML body; fails unless the answer says it is HTML.
    #[track_caller]
    pub fn html(&self) -> &str {
        assert_eq!(
            self.header("content-type"),
            Some("text/html; charset=utf-8"),
            "status {}: {}",
            self.status,
            self.text()
        );
        std::str::from_utf8(&self.body).expect("UTF-8")
    }

    /// The value a `Set-Cookie` header gives cookie `name`.
    pub fn cookie(&self, name: &str) -> Option<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|value| value.to_str().ok())
            .filter_map(|value| value.split(';').next()?.split_once('='))
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.to_owned())
    }

    /// The value of the page's hidden input `name`.
    #[track_caller]
    pub fn hidden(&self, name: &str) -> String {
        hidden(self.html(), name)
    }

    /// The `Location` header; fails without one.
    #[track_caller]
    pub fn location(&self) -> &str {
        self.header("location")
            .unwrap_or_else(|| panic!("no Location in {:?}", self.headers))
    }

    /// Asserts a JSON error answer with this status and `error_type`.
    #[track_caller]
    pub fn assert_error(&self, status: u16, error_type: &str) {
        assert_eq!(self.status.as_u16(), status, "{}", self.text());
        let body = self.json();
        assert_eq!(body["error_type"], error_type, "{body}");
        assert!(body["error_message"].is_string(), "{body}");
    }

    /// Asserts a validation answer, `{"errors": [...]}`, whose one error has
    /// this type, and returns that error.
    #[track_caller]
    pub fn assert_validation_error(&self, status: u16, error_type: &str) -> Value {
        assert_eq!(self.status.as_u16(), status, "{}", self.text());
        let body = self.json();
        let errors = body["errors"].as_array().expect("an errors array");
        assert_eq!(errors.len(), 1, "{body}");
        assert_eq!(errors[0]["error_type"], error_type, "{body}");
        assert!(errors[0]["error_message"].is_string(), "{body}");
        errors[0].clone()
    }
}

/// `text` percent-encoded for a query string or a form.
pub fn encode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// `fields` as an `application/x-www-form-urlencoded` body.
pub fn form(fields: &[(&str, &str)]) -> String {
    let mut serializer = form_urlencoded::Serializer::new(String::new());
    serializer.extend_pairs(fields);
    serializer.finish()
}

/// The query parameter `name` of a URL.
pub fn param(url: &str, name: &str) -> Option<String> {
    let query = url.split_once('?')?.1;
    form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}
