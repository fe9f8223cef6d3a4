//! The OAuth seeds reach what their names say: a seed meant to be served is
//! served, a seed meant to be refused is refused with its error. Without this
//! a broken placeholder or setup would quietly turn every seed into a 400.
//!
//! Run with `cargo test` in `fuzz/` (no sanitizer needed).

use conversion_gateway_fuzz::fixture::{Fixture, block_on};
use conversion_gateway_fuzz::request::{RequestText, fill_placeholders};

fn seed(target: &str, name: &str) -> Vec<u8> {
    let path = format!("{}/seeds/{target}/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|error| panic!("{path}: {error}"))
}

/// The status and `error_type` (empty for a success) of a seed's answer.
fn answer(target: &str, name: &str) -> (u16, String) {
    let data = seed(target, name);
    let input = RequestText::parse(&data);
    let fixture = Fixture::fresh(input.setup);
    let request = input.materialize(|name| fixture.value(name));
    let answer = block_on(async {
        match target {
            "token" => fixture
                .gateway
                .answer(fixture.gateway.token(&request.parts()).await),
            "revoke" => fixture
                .gateway
                .answer(fixture.gateway.revoke(&request.parts()).await),
            _ => unreachable!("{target}"),
        }
    });
    let error_type = answer
        .json_body()
        .and_then(|body| body["error_type"].as_str())
        .unwrap_or_default()
        .to_owned();
    (answer.status, error_type)
}

#[test]
fn token_seeds_reach_their_paths() {
    let expected = [
        ("json-code", 200, ""),
        ("form-basic", 200, ""),
        ("authlib-unencoded-basic", 200, ""),
        ("basic-and-body-agree", 200, ""),
        ("basic-and-body-disagree", 400, "CONFLICTING_FIELD"),
        ("code-in-query", 200, ""),
        ("bearer-header-ignored", 200, ""),
        ("missing-secret", 400, "CANNOT_BE_NULL"),
        ("wrong-secret", 401, "ACCESS_DENIED"),
        ("basic-wrong-secret", 401, "ACCESS_DENIED"),
        ("unknown-code", 401, "ACCESS_DENIED"),
        ("other-client-code", 401, "ACCESS_DENIED"),
        ("code-expired", 401, "EXPIRED_CODE_GRANT"),
        ("code-just-in-time", 200, ""),
        ("code-replayed", 401, "EXPIRED_CODE_GRANT"),
        ("text-plain", 415, "UNSUPPORTED_MEDIA_TYPE"),
        ("grant-type-password", 400, "INVALID_OPTION"),
        ("pkce-verifier", 200, ""),
        ("pkce-wrong-verifier", 401, "ACCESS_DENIED"),
        ("verifier-without-challenge", 401, "ACCESS_DENIED"),
        ("redirect-uri-mismatch", 401, "ACCESS_DENIED"),
        ("refresh", 200, ""),
        ("refresh-after-three-days", 200, ""),
        ("refresh-form-basic", 200, ""),
        ("refresh-other-client", 401, "INVALID_REFRESH_TOKEN"),
        ("json-duplicate-keys", 200, ""),
        ("empty-values", 200, ""),
        ("basic-lowercase-no-space", 401, "ACCESS_DENIED"),
    ];
    for (name, status, error_type) in expected {
        assert_eq!(
            answer("token", name),
            (status, error_type.to_owned()),
            "{name}"
        );
    }
}

#[test]
fn revoke_seeds_reach_their_paths() {
    let expected = [
        ("bearer-access", 200, ""),
        ("bearer-refresh-hint", 200, ""),
        ("expired-bearer", 401, "UNAUTHORIZED"),
        ("body-credentials", 200, ""),
        ("other-client", 200, ""),
        ("missing-token", 400, "CANNOT_BE_NULL"),
        ("unauthenticated", 401, "UNAUTHORIZED"),
        ("basic-wrong", 401, "ACCESS_DENIED"),
        ("json-bearer", 200, ""),
        ("text-plain", 415, "UNSUPPORTED_MEDIA_TYPE"),
        ("duplicate-token", 400, "BAD_REQUEST"),
    ];
    for (name, status, error_type) in expected {
        assert_eq!(
            answer("revoke", name),
            (status, error_type.to_owned()),
            "{name}"
        );
    }
}

#[test]
fn dialog_seeds_reach_their_paths() {
    let fixture = Fixture::shared();
    let run = |name: &str| {
        let query = fill_placeholders(&seed("authorization_request", name), |n| fixture.value(n));
        block_on(
            fixture
                .gateway
                .authorization_request(&String::from_utf8_lossy(&query)),
        )
    };
    for name in [
        "state-and-response-type",
        "registered-query",
        "open-query",
        "fragment",
        "pkce",
        "pkce-required-sent",
        "state-unicode",
    ] {
        assert!(run(name).is_ok(), "{name}: {:?}", run(name).err());
    }
    for name in ["response-type-token", "pkce-plain", "pkce-required-missing"] {
        assert!(run(name).is_err_and(|error| error.redirects()), "{name}");
    }
    for name in [
        "unknown-client",
        "unregistered-evil",
        "missing-redirect",
        "duplicate-state",
    ] {
        assert!(run(name).is_err_and(|error| !error.redirects()), "{name}");
    }
}
