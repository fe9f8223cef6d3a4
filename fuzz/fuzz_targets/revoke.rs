//! `Gateway::revoke` (POST /auth/revoke, RFC 7009) on requests in the text
//! format of `request.rs`, on the shared gateway or on a fresh one with
//! live tokens.
//!
//! The target calls `revoke`, which says which grant, if any, was revoked,
//! and answers it with `Gateway::answer`.
//!
//! Checks: never a panic; status 200, 400, 401 or 415 (never 422/503 from
//! the in-memory stores); a JSON object body, no CR/LF in a header; no answer
//! echoes a client secret, the code or a live token. A 200 is `{}` with
//! `cache-control: no-store` and needs an authenticated caller (a client
//! secret, or the live access token as Bearer). A revoked grant is the live
//! tokens' grant, named by a request that carried a live token, and its access
//! token stops working; any other outcome leaves the access token answering
//! as before. Bearer refusals are `UNAUTHORIZED` with a Bearer challenge;
//! client refusals carry a Basic challenge exactly when Basic was sent.
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
    let before = fixture.access_state();
    let outcome = block_on(fixture.gateway.revoke(&request.parts()));
    let answer = fixture.gateway.answer(&outcome);

    let body = json_object(&answer, &ENDPOINT_STATUSES, "revoke");
    check_no_secret(&answer, &request, &fixture.secrets(), "revoke");
    let after = fixture.access_state();
    match outcome {
        Ok(revoked) => {
            assert_eq!(answer.status, 200);
            assert!(body.is_empty(), "{body:?}");
            assert_eq!(answer.header("cache-control"), Some("no-store"));
            let authenticated = request.uses("client_secret")
                || request.uses("other_client_secret")
                || (setup.tokens && request.uses("access_token"));
            assert!(authenticated, "200 without credentials: {request:?}");
            match revoked.revoked_grant {
                Some(grant) => {
                    assert_eq!(
                        Some(grant),
                        fixture.grant,
                        "revoked a grant that is not the live one"
                    );
                    assert!(
                        request.uses("access_token") || request.uses("refresh_token"),
                        "revoked a grant without naming a live token"
                    );
                    assert!(
                        after.is_err(),
                        "the access token works after its grant was revoked"
                    );
                }
                None => assert_eq!(after, before, "nothing revoked, yet the grant changed"),
            }
        }
        Err(_) => {
            assert_ne!(answer.status, 200);
            assert_eq!(after, before, "a refused revocation changed the grant");
            let error_type = text(body, "error_type", "revoke");
            text(body, "error_message", "revoke");
            let challenge = answer.header("www-authenticate");
            match error_type {
                "UNAUTHORIZED" => {
                    assert_eq!(answer.status, 401);
                    let start = format!("Bearer realm=\"{REALM}\", error=\"");
                    assert!(
                        challenge.is_some_and(|c| c.starts_with(&start)),
                        "{challenge:?}"
                    );
                }
                "ACCESS_DENIED" => {
                    assert_eq!(answer.status, 401);
                    let basic = format!("Basic realm=\"{REALM}\"");
                    let expected = sends_basic(&request).then_some(basic.as_str());
                    assert_eq!(challenge, expected, "{:?}", request.authorization);
                }
                _ => {
                    assert!(matches!(answer.status, 400 | 415), "{body:?}");
                    assert_eq!(challenge, None);
                }
            }
        }
    }
});
