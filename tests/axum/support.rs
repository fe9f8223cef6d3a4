//! What the router tests share: a response read whole, and form and URL
//! helpers.

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;

/// The base URL the tests give the gateway: the realm of its challenges.
pub const BASE_URL: &str = "http://gateway.test";

/// The test app's redirect URI.
pub const DEMO_REDIRECT_URI: &str = "http://127.0.0.1:9/callback";

/// A response, read whole.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
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

pub fn encode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

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

/// A conversion event the demo account accepts.
pub fn conversion_body(email: &str) -> Value {
    serde_json::json!({
        "event_type": "CONVERSION",
        "event_family": "CDP",
        "payload": { "conversion_identifier": "newsletter", "email": email, "cf_plan": "pro" },
    })
}
