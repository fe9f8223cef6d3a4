//! Properties every answer of the OAuth endpoints must have.

use conversion_gateway::HttpAnswer;
use serde_json::{Map, Value};

use crate::request::Request;

/// The statuses the token and revocation endpoints answer with themselves.
pub const ENDPOINT_STATUSES: [u16; 4] = [200, 400, 401, 415];

/// The statuses of store failures (503 unavailable, 422 data refused): the
/// in-memory stores never fail, so these never come here.
pub const STORE_STATUSES: [u16; 2] = [422, 503];

/// Header names are lowercase and no value can split a header: no CR or LF.
pub fn check_headers(answer: &HttpAnswer, what: &str) {
    for (name, value) in &answer.headers {
        assert!(
            !name.is_empty() && !name.bytes().any(|b| b.is_ascii_uppercase()),
            "{what}: header name {name:?}"
        );
        assert!(
            !value.contains(['\r', '\n', '\0']),
            "{what}: header {name}: {value:?} holds a line break"
        );
    }
}

/// A JSON answer with one of `statuses`: its body as an object.
pub fn json_object<'a>(
    answer: &'a HttpAnswer,
    statuses: &[u16],
    what: &str,
) -> &'a Map<String, Value> {
    assert!(
        !STORE_STATUSES.contains(&answer.status),
        "{what}: {} from in-memory stores, which never fail: {:?}",
        answer.status,
        answer.json_body()
    );
    assert!(
        statuses.contains(&answer.status),
        "{what}: status {} is none of {statuses:?}: {:?}",
        answer.status,
        answer.json_body()
    );
    assert_eq!(
        answer.header("content-type"),
        Some("application/json"),
        "{what}"
    );
    check_headers(answer, what);
    let body = answer
        .json_body()
        .unwrap_or_else(|| panic!("{what}: a {} without a JSON body", answer.status));
    body.as_object()
        .unwrap_or_else(|| panic!("{what}: the body is not an object: {body}"))
}

/// The non-empty string member `name` of an error body.
pub fn text<'a>(body: &'a Map<String, Value>, name: &str, what: &str) -> &'a str {
    let value = body
        .get(name)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{what}: no string {name} in {body:?}"));
    assert!(!value.is_empty(), "{what}: empty {name}");
    value
}

/// No header or body of `answer` holds any of `secrets`, unless the request
/// itself put that secret in a parameter name (errors echo names by design).
pub fn check_no_secret(answer: &HttpAnswer, request: &Request, secrets: &[&str], what: &str) {
    let names = request.parameter_names();
    let body = String::from_utf8_lossy(&answer.body_bytes()).into_owned();
    for secret in secrets {
        if names.iter().any(|name| name.contains(secret)) {
            continue;
        }
        assert!(
            !body.contains(secret),
            "{what}: the body holds a secret: {body}"
        );
        for (name, value) in &answer.headers {
            assert!(
                !value.contains(secret),
                "{what}: header {name} holds a secret: {value}"
            );
        }
    }
}

/// Whether the request's `Authorization` header is of the Basic scheme, as
/// the token endpoint reads it when it answers `invalid_client`.
pub fn sends_basic(request: &Request) -> bool {
    request.authorization.as_deref().is_some_and(|header| {
        header
            .trim_start()
            .to_ascii_lowercase()
            .starts_with("basic")
    })
}
