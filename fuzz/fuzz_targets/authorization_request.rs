//! `Gateway::authorization_request` (GET /auth/dialog) on arbitrary query
//! strings, on the shared gateway; `{name}` and `{%name}` placeholders (see
//! `request.rs`) stand for the registered client ids, redirect URIs and a
//! PKCE challenge.
//!
//! Checks: never a panic, and never a redirect to a URI that is not
//! registered (RFC 6749 section 4.1.2.1). An accepted request names a
//! registered client and one of its own redirect URIs, and its refusal
//! (`deny`) is a 302 there with `error=access_denied` and the request's
//! `state` read back unchanged, the registered query kept before it and the
//! registered fragment after it. A refused request is either a redirect of
//! the same shape (`error` and `state`), exactly when `DialogError::redirects`
//! says so, or a 400 JSON error shown to the user with no `location`.
#![no_main]

use conversion_gateway::{DialogError, HttpAnswer};
use conversion_gateway_fuzz::answer::{check_headers, json_object, text};
use conversion_gateway_fuzz::fixture::{Fixture, OTHER_REDIRECT_URI, REDIRECT_URIS, block_on};
use conversion_gateway_fuzz::request::fill_placeholders;
use libfuzzer_sys::fuzz_target;

/// The parameters a redirect added to `registered`, after checking that the
/// location is `registered` with a query appended before its fragment.
fn appended_params(location: &str, registered: &str) -> Vec<(String, String)> {
    let (base, fragment) = match registered.split_once('#') {
        Some((base, fragment)) => (base, Some(fragment)),
        None => (registered, None),
    };
    let rest = location
        .strip_prefix(base)
        .unwrap_or_else(|| panic!("{location} does not start with {base}"));
    let rest = match base.find('?') {
        None => rest.strip_prefix('?'),
        Some(at) if at + 1 == base.len() || base.ends_with('&') => Some(rest),
        Some(_) => rest.strip_prefix('&'),
    }
    .unwrap_or_else(|| panic!("{location}: no separator after {base}"));
    let query = match fragment {
        Some(fragment) => rest
            .strip_suffix(fragment)
            .and_then(|rest| rest.strip_suffix('#'))
            .unwrap_or_else(|| panic!("{location} lost the fragment #{fragment}")),
        None => {
            assert!(!rest.contains('#'), "{location}: a fragment appeared");
            rest
        }
    };
    form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect()
}

/// A redirect to `redirect_uri` carrying `error` and `state`.
fn check_redirect(answer: &HttpAnswer, redirect_uri: &str, error: &[&str], state: Option<&str>) {
    assert_eq!(answer.status, 302);
    assert!(answer.json_body().is_none());
    check_headers(answer, "dialog");
    assert!(
        REDIRECT_URIS.contains(&redirect_uri) || redirect_uri == OTHER_REDIRECT_URI,
        "a redirect to the unregistered {redirect_uri:?}"
    );
    let location = answer.header("location").expect("a location");
    let params = appended_params(location, redirect_uri);
    let value = |name: &str| {
        params
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    let sent = value("error").expect("an error parameter");
    assert!(error.contains(&sent), "error={sent}");
    assert_eq!(value("state"), state, "{location}");
}

fuzz_target!(|data: &[u8]| {
    let fixture = Fixture::shared();
    let query = fill_placeholders(data, |name| fixture.value(name));
    let query = String::from_utf8_lossy(&query);
    match block_on(fixture.gateway.authorization_request(&query)) {
        Ok(request) => {
            let (client, uris): (_, &[&str]) = if *request.client_id() == fixture.client.id {
                (&fixture.client, &REDIRECT_URIS)
            } else {
                assert_eq!(*request.client_id(), fixture.other_client.id);
                (&fixture.other_client, &[OTHER_REDIRECT_URI])
            };
            assert_eq!(request.client_name(), client.name);
            assert!(
                uris.contains(&request.redirect_uri()),
                "{}",
                request.redirect_uri()
            );
            assert!(request.state().is_none_or(|state| !state.is_empty()));
            let denied = fixture.gateway.answer(fixture.gateway.deny(&request));
            check_redirect(
                &denied,
                request.redirect_uri(),
                &["access_denied"],
                request.state(),
            );
        }
        Err(error) => {
            let answer = fixture.gateway.answer(&error);
            assert_eq!(error.redirects(), answer.status == 302, "{error:?}");
            match &error {
                DialogError::UnsupportedResponseType {
                    redirect_uri,
                    state,
                } => {
                    check_redirect(
                        &answer,
                        redirect_uri,
                        &["unsupported_response_type"],
                        state.as_deref(),
                    );
                }
                DialogError::InvalidPkce {
                    redirect_uri,
                    state,
                    ..
                } => {
                    check_redirect(
                        &answer,
                        redirect_uri,
                        &["invalid_request"],
                        state.as_deref(),
                    );
                }
                _ => {
                    let body = json_object(&answer, &[400], "dialog");
                    assert_eq!(answer.header("location"), None);
                    text(body, "error_type", "dialog");
                    text(body, "error_message", "dialog");
                    text(body, "error", "dialog");
                }
            }
        }
    }
});
