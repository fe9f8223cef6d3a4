//! `Gateway::token` (POST /auth/token) on requests in the text format of
//! `request.rs`: JSON and form bodies, HTTP Basic, `code` in the query, on the
//! shared gateway or on a fresh one with a live code or live tokens.
//!
//! Checks: never a panic; the status is 200, 400, 401 or 415 (the in-memory
//! stores never fail, so never 422/503); a JSON object body,
//! `content-type: application/json`, `cache-control: no-store`, no CR/LF in a
//! header; no answer echoes a client secret, the code or a live token. A 200
//! needs the main client's secret and a live code or refresh token, has the
//! spec's four members, and its new access token authenticates as the main
//! client and account. An error carries `error_type`, `error_message`,
//! `error` and `error_description`, with the status and challenge of its
//! `error` (Basic challenge exactly when Basic was sent, never
//! `expired_token` for `invalid_grant`). A request refused before the grant
//! is looked at spends nothing: the code still exchanges as on an untouched
//! twin gateway, the live access token still answers as before; a replayed
//! code revokes the tokens issued from it (RFC 6749 section 4.1.2).
#![no_main]

use conversion_gateway_fuzz::answer::{
    ENDPOINT_STATUSES, check_no_secret, json_object, sends_basic, text,
};
use conversion_gateway_fuzz::fixture::{Fixture, REALM, block_on};
use conversion_gateway_fuzz::request::RequestText;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = RequestText::parse(data);
    let setup = input.setup;
    let fresh;
    let fixture = if setup.fresh {
        fresh = Fixture::fresh(setup);
        &fresh
    } else {
        Fixture::shared()
    };
    let request = input.materialize(|name| fixture.value(name));
    let before = setup.tokens.then(|| fixture.access_state());
    let answer = fixture
        .gateway
        .answer(block_on(fixture.gateway.token(&request.parts())));

    let body = json_object(&answer, &ENDPOINT_STATUSES, "token");
    check_no_secret(&answer, &request, &fixture.secrets(), "token");
    assert_eq!(answer.header("cache-control"), Some("no-store"));
    assert_eq!(answer.header("pragma"), Some("no-cache"));

    if answer.status == 200 {
        assert!(
            setup.fresh,
            "200 on the shared gateway, which has no live grant"
        );
        assert!(
            request.uses("client_secret"),
            "200 without the client secret"
        );
        assert!(
            request.uses("code") || request.uses("refresh_token"),
            "200 without a live code or refresh token"
        );
        assert!(
            !setup.tokens || request.uses("refresh_token"),
            "200 with a code that was already exchanged"
        );
        assert_eq!(body.len(), 4, "{body:?}");
        assert_eq!(body["token_type"], "Bearer");
        assert_eq!(body["expires_in"], 86_400);
        let access = text(body, "access_token", "token");
        let refresh = text(body, "refresh_token", "token");
        assert!(access.starts_with("cgat_") && refresh.starts_with("cgrt_"));
        let caller = block_on(fixture.bearer(access)).expect("a new access token authenticates");
        assert_eq!(caller.client_id, fixture.client.id);
        assert_eq!(caller.account_id, fixture.account.id);
        return;
    }

    text(body, "error_type", "token");
    text(body, "error_message", "token");
    text(body, "error_description", "token");
    let error = text(body, "error", "token");
    let challenge = answer.header("www-authenticate");
    match error {
        "invalid_request" => assert!(matches!(answer.status, 400 | 415), "{body:?}"),
        "unsupported_grant_type" => assert_eq!(answer.status, 400),
        "invalid_client" => {
            assert_eq!(answer.status, 401);
            let basic = format!("Basic realm=\"{REALM}\"");
            let expected = sends_basic(&request).then_some(basic.as_str());
            assert_eq!(challenge, expected, "{:?}", request.authorization);
        }
        "invalid_grant" => {
            assert_eq!(answer.status, 401);
            let challenge = challenge.expect("a challenge with invalid_grant");
            let start = format!("Bearer realm=\"{REALM}\", error=\"invalid_grant\"");
            assert!(challenge.starts_with(&start), "{challenge}");
            assert!(!challenge.contains("expired_token"), "{challenge}");
        }
        other => panic!("unknown error {other:?}: {body:?}"),
    }
    if error != "invalid_client" && error != "invalid_grant" {
        assert_eq!(challenge, None);
    }

    let spent_nothing = error != "invalid_grant";
    if spent_nothing && setup.fresh && !setup.tokens {
        let twin = Fixture::fresh(setup);
        assert_eq!(twin.code, fixture.code, "fresh gateways are deterministic");
        let after = block_on(fixture.exchange(setup.pkce));
        let untouched = block_on(twin.exchange(setup.pkce));
        assert_eq!(
            after.json_body().map(|b| &b["error_type"]),
            untouched.json_body().map(|b| &b["error_type"]),
            "a request refused with {error} changed what the code does"
        );
        assert_eq!(after.status, untouched.status);
    }
    if let Some(before) = before {
        let after = fixture.access_state();
        if spent_nothing {
            assert_eq!(
                after, before,
                "a request refused with {error} changed the grant"
            );
        }
        if body["error_type"] == "EXPIRED_CODE_GRANT" {
            // The code was spent by the setup: this is a replay.
            assert!(after.is_err(), "a replayed code left its tokens live");
        }
    }
});
