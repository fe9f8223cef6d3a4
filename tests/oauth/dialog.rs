//! The authorization dialog (RFC 6749 section 4.1.1) and PKCE.

use conversion_gateway::DialogError;
use conversion_gateway_testkit::*;
use serde_json::json;

#[tokio::test]
async fn approval_redirects_with_a_code_and_echoes_state() {
    let f = Fixture::new().await;
    let params = f.authorize("&state=xyz%20123&response_type=code").await;
    assert!(param(&params, "code").is_some_and(|c| c.starts_with("cgac_")));
    assert_eq!(param(&params, "state").as_deref(), Some("xyz 123"));
}

#[tokio::test]
async fn the_redirect_keeps_the_registered_query_string() {
    let f = Fixture::new().await;
    let encoded: String = form_urlencoded::byte_serialize(REDIRECT_WITH_QUERY.as_bytes()).collect();
    let query = format!("client_id={}&redirect_uri={encoded}&state=s", f.client.id);
    let request = f
        .gateway
        .authorization_request(&query)
        .await
        .expect("valid");
    assert_eq!(request.client_name(), "Lead Sync");
    let answer = f
        .gateway
        .approve(&request, f.account.id)
        .await
        .expect("approve");
    let location = answer.location();
    assert!(
        location.starts_with("https://app.example/callback?tenant=7&lang=pt&code=cgac_"),
        "{location}"
    );
    assert!(location.ends_with("&state=s"), "{location:?}");
}

#[tokio::test]
async fn the_legacy_redirect_url_parameter_is_accepted_alone_or_agreeing() {
    let f = Fixture::new().await;
    // The official Ruby client and WordPress plugin send it, not encoded;
    // sent beside `redirect_uri` with the same URI, it is no conflict.
    for extra in ["", &format!("&redirect_uri={REDIRECT_URI}")] {
        let query = format!(
            "client_id={}&redirect_url={REDIRECT_URI}{extra}",
            f.client.id
        );
        let request = f
            .gateway
            .authorization_request(&query)
            .await
            .unwrap_or_else(|error| panic!("{query}: {error:?}"));
        assert_eq!(request.redirect_uri(), REDIRECT_URI);
    }
}

#[tokio::test]
async fn the_request_reads_state_decoded_and_none_when_absent() {
    let f = Fixture::new().await;
    let with_state = f
        .gateway
        .authorization_request(&f.dialog_query("&state=xyz%20123"))
        .await
        .expect("valid");
    assert_eq!(with_state.state(), Some("xyz 123"));
    let without = f
        .gateway
        .authorization_request(&f.dialog_query(""))
        .await
        .expect("valid");
    assert_eq!(without.state(), None);
}

#[tokio::test]
async fn conflicting_redirect_parameters_are_refused() {
    let f = Fixture::new().await;
    let query = format!(
        "client_id={}&redirect_uri={REDIRECT_URI}&redirect_url=https://evil.example/",
        f.client.id
    );
    let error = f.gateway.authorization_request(&query).await.unwrap_err();
    assert!(
        matches!(error, DialogError::ConflictingRedirectUri),
        "{error:?}"
    );
    assert!(!error.redirects(), "{error:?}");
}

#[tokio::test]
async fn an_unknown_client_is_shown_an_error_and_never_redirected() {
    let f = Fixture::new().await;
    let error = f
        .gateway
        .authorization_request(&format!("client_id=nope&redirect_uri={REDIRECT_URI}"))
        .await
        .unwrap_err();
    assert!(matches!(error, DialogError::UnknownClient), "{error:?}");
    assert!(!error.redirects(), "{error:?}");
    let answer = f.gateway.answer(&error);
    assert_error(&answer, 400, "INVALID_CLIENT");
    assert_eq!(answer.header("location"), None);
}

#[tokio::test]
async fn an_unregistered_redirect_uri_is_shown_an_error_and_never_redirected() {
    let f = Fixture::new().await;
    for uri in [
        "https://evil.example/callback",
        "https://app.example/callback/",
        "https://app.example/callback?tenant=7",
    ] {
        let encoded: String = form_urlencoded::byte_serialize(uri.as_bytes()).collect();
        let query = format!("client_id={}&redirect_uri={encoded}", f.client.id);
        let error = f.gateway.authorization_request(&query).await.unwrap_err();
        assert!(
            matches!(error, DialogError::UnregisteredRedirectUri),
            "{uri}"
        );
        let answer = f.gateway.answer(&error);
        assert_error(&answer, 400, "INVALID_REDIRECT_URI");
        assert_eq!(answer.header("location"), None);
    }
}

#[tokio::test]
async fn missing_parameters_name_their_path() {
    let f = Fixture::new().await;
    let answer = f
        .gateway
        .authorization_request("redirect_uri=x")
        .await
        .unwrap_err();
    let answer = f.gateway.answer(answer);
    assert_error(&answer, 400, "CANNOT_BE_NULL");
    assert_eq!(body(&answer)["path"], "query.client_id");
    let query = format!("client_id={}", f.client.id);
    let answer = f.gateway.authorization_request(&query).await.unwrap_err();
    let answer = f.gateway.answer(answer);
    assert_error(&answer, 400, "CANNOT_BE_NULL");
    assert_eq!(body(&answer)["path"], "query.redirect_uri");
}

#[tokio::test]
async fn a_response_type_other_than_code_is_redirected_back_as_an_error() {
    let f = Fixture::new().await;
    let error = f
        .gateway
        .authorization_request(&f.dialog_query("&response_type=token&state=s1"))
        .await
        .unwrap_err();
    assert!(error.redirects(), "{error:?}");
    let params = redirect_params(&f.gateway.answer(&error));
    assert_eq!(
        param(&params, "error").as_deref(),
        Some("unsupported_response_type")
    );
    assert_eq!(param(&params, "state").as_deref(), Some("s1"));
    assert_eq!(param(&params, "code"), None);
}

#[tokio::test]
async fn denial_redirects_with_access_denied_and_state() {
    let f = Fixture::new().await;
    let request = f
        .gateway
        .authorization_request(&f.dialog_query("&state=abc"))
        .await
        .unwrap();
    let denial = f.gateway.deny(&request);
    let answer = f.gateway.answer(&denial);
    assert_eq!(answer.header("location"), Some(denial.location()));
    assert_eq!(answer.status, 302);
    let params = redirect_params(&answer);
    assert_eq!(param(&params, "error").as_deref(), Some("access_denied"));
    assert_eq!(param(&params, "state").as_deref(), Some("abc"));
    assert_eq!(param(&params, "code"), None);
}

#[tokio::test]
async fn authorizing_again_gives_a_new_code_and_a_new_grant() {
    let f = Fixture::new().await;
    let (first_access, _) = f.tokens().await;
    let (second_access, second_refresh) = f.tokens().await;
    let first = f.bearer(&first_access).await.unwrap();
    let second = f.bearer(&second_access).await.unwrap();
    assert_ne!(first.grant_id, second.grant_id);
    // Revoking the second connection leaves the first one working.
    let answer = f
        .revoke(Some(&f.basic()), &format!("token={second_refresh}"))
        .await;
    assert_eq!(answer.status, 200);
    let outcome = f.bearer(&first_access).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    let outcome = f.bearer(&second_access).await;
    assert!(outcome.is_err(), "{outcome:?}");
}

// RFC 7636 appendix B.
const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

async fn pkce_code(f: &Fixture) -> String {
    let extra = format!("&code_challenge={CHALLENGE}&code_challenge_method=S256");
    param(&f.authorize(&extra).await, "code").unwrap()
}

#[tokio::test]
async fn a_pkce_bound_code_needs_the_matching_verifier() {
    let f = Fixture::new().await;
    let code = pkce_code(&f).await;
    let answer = f
        .token_json(json!({"client_id": f.client.id, "client_secret": f.secret.expose(), "code": code, "code_verifier": VERIFIER}))
        .await;
    assert_eq!(answer.status, 200, "{:?}", answer.json_body());
}

#[tokio::test]
async fn a_wrong_verifier_is_refused_and_burns_the_code() {
    let f = Fixture::new().await;
    let code = pkce_code(&f).await;
    let wrong = "x".repeat(43);
    let answer = f
        .token_json(json!({"client_id": f.client.id, "client_secret": f.secret.expose(), "code": code, "code_verifier": wrong}))
        .await;
    assert_error(&answer, 401, "ACCESS_DENIED");
    assert_eq!(body(&answer)["error"], "invalid_grant");
    let retry = f
        .token_json(json!({"client_id": f.client.id, "client_secret": f.secret.expose(), "code": code, "code_verifier": VERIFIER}))
        .await;
    assert_error(&retry, 401, "EXPIRED_CODE_GRANT");
}

#[tokio::test]
async fn a_missing_verifier_is_refused() {
    let f = Fixture::new().await;
    let code = pkce_code(&f).await;
    let answer = f
        .token_json(
            json!({"client_id": f.client.id, "client_secret": f.secret.expose(), "code": code}),
        )
        .await;
    assert_error(&answer, 401, "ACCESS_DENIED");
}

#[tokio::test]
async fn a_verifier_for_a_code_without_challenge_is_refused() {
    let f = Fixture::new().await;
    let code = f.code().await;
    let answer = f
        .token_json(json!({"client_id": f.client.id, "client_secret": f.secret.expose(), "code": code, "code_verifier": VERIFIER}))
        .await;
    assert_error(&answer, 401, "ACCESS_DENIED");
}

#[tokio::test]
async fn plain_and_malformed_challenges_are_refused() {
    let f = Fixture::new().await;
    for extra in [
        format!("&code_challenge={CHALLENGE}"),
        format!("&code_challenge={CHALLENGE}&code_challenge_method=plain"),
        "&code_challenge=short&code_challenge_method=S256".to_owned(),
        "&code_challenge_method=S256".to_owned(),
    ] {
        let error = f
            .gateway
            .authorization_request(&f.dialog_query(&extra))
            .await
            .unwrap_err();
        assert!(matches!(error, DialogError::InvalidPkce { .. }), "{extra}");
        let params = redirect_params(&f.gateway.answer(&error));
        assert_eq!(param(&params, "error").as_deref(), Some("invalid_request"));
    }
}

#[tokio::test]
async fn an_app_registered_as_requiring_pkce_must_send_a_challenge() {
    let f = Fixture::new().await;
    let (client, _) = f
        .gateway
        .register_client(
            conversion_gateway::ClientRegistration::new("SPA", [REDIRECT_URI]).require_pkce(true),
        )
        .await
        .unwrap();
    let query = format!("client_id={}&redirect_uri={REDIRECT_URI}", client.id);
    let error = f.gateway.authorization_request(&query).await.unwrap_err();
    assert!(
        matches!(error, DialogError::InvalidPkce { .. }),
        "{error:?}"
    );
    let with = format!("{query}&code_challenge={CHALLENGE}&code_challenge_method=S256");
    let outcome = f.gateway.authorization_request(&with).await;
    assert!(outcome.is_ok(), "{outcome:?}");
}
