//! Token issue (RFC 6749 section 4.1.3): bodies, client authentication, codes, and
//! the exact errors.

use std::sync::Arc;

use conversion_gateway::Stores;
use conversion_gateway_testkit::*;
use serde_json::json;
use time::Duration;

#[tokio::test]
async fn a_code_is_exchanged_for_tokens_with_the_spec_shape() {
    let f = Fixture::new().await;
    let code = f.code().await;
    let answer = f
        .token_json(
            json!({"client_id": f.client.id, "client_secret": f.secret.expose(), "code": code}),
        )
        .await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    assert_eq!(answer.header("cache-control"), Some("no-store"));
    let body = body(&answer);
    assert!(
        body["access_token"].as_str().unwrap().starts_with("cgat_"),
        "{body:?}"
    );
    assert!(
        body["refresh_token"].as_str().unwrap().starts_with("cgrt_"),
        "{body:?}"
    );
    assert_eq!(body["expires_in"], 86_400);
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body.as_object().unwrap().len(), 4);
    let caller = f
        .bearer(body["access_token"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(caller.account_id, f.account.id);
    assert_eq!(caller.client_id, f.client.id);
}

#[tokio::test]
async fn a_standard_form_request_with_basic_auth_is_served() {
    let f = Fixture::new().await;
    let code = f.code().await;
    let form = format!(
        "grant_type=authorization_code&code={code}&redirect_uri={}",
        form_urlencoded::byte_serialize(REDIRECT_URI.as_bytes()).collect::<String>()
    );
    let answer = f.token_form(&form, Some(&f.basic())).await;
    assert_eq!(answer.status, 200, "{:?}", answer.json_body());
}

#[tokio::test]
async fn authlib_content_type_and_unencoded_basic_are_served() {
    let f = Fixture::new().await;
    let code = f.code().await;
    let raw = format!("{}:{}", f.client.id, f.secret.expose());
    let header = format!(
        "Basic {}",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, raw)
    );
    let answer = f
        .token_with(
            Some("application/x-www-form-urlencoded;charset=UTF-8"),
            Some(&header),
            format!("grant_type=authorization_code&code={code}").as_bytes(),
            "",
        )
        .await;
    assert_eq!(answer.status, 200, "{:?}", answer.json_body());
}

#[tokio::test]
async fn credentials_in_header_and_body_must_agree_or_the_client_is_not_authenticated() {
    let f = Fixture::new().await;
    let code = f.code().await;
    let agreeing = format!("code={code}&client_id={}", f.client.id);
    assert_eq!(f.token_form(&agreeing, Some(&f.basic())).await.status, 200);

    // Body credentials that disagree with the header leave the client
    // unauthenticated (RFC 6749 section 5.2, `invalid_client`), with the
    // Basic challenge, and the code stays unspent.
    let code = f.code().await;
    let disagreeing = format!("code={code}&client_id={}", f.other_client.id);
    let answer = f.token_form(&disagreeing, Some(&f.basic())).await;
    assert_error(&answer, 401, "ACCESS_DENIED");
    assert_eq!(body(&answer)["error"], "invalid_client");
    assert!(
        answer
            .header("www-authenticate")
            .is_some_and(|challenge| challenge.starts_with("Basic realm=")),
        "{:?}",
        answer.headers
    );
    let other_secret = format!("code={code}&client_id={}&client_secret=other", f.client.id);
    let answer = f.token_form(&other_secret, Some(&f.basic())).await;
    assert_error(&answer, 401, "ACCESS_DENIED");
    assert_eq!(body(&answer)["error"], "invalid_client");
    let agreeing = format!("code={code}&client_id={}", f.client.id);
    assert_eq!(f.token_form(&agreeing, Some(&f.basic())).await.status, 200);
}

#[tokio::test]
async fn the_code_may_come_in_the_query_string() {
    let f = Fixture::new().await;
    let code = f.code().await;
    let body = json!({"client_id": f.client.id, "client_secret": f.secret.expose()}).to_string();
    let answer = f
        .token_with(
            Some("application/json"),
            None,
            body.as_bytes(),
            &format!("code={code}"),
        )
        .await;
    assert_eq!(answer.status, 200, "{:?}", answer.json_body());
}

#[tokio::test]
async fn a_bearer_header_on_the_token_endpoint_is_not_client_authentication() {
    // rdstation-python sends its access token on every request.
    let f = Fixture::new().await;
    let (access, _) = f.tokens().await;
    let code = f.code().await;
    let body = json!({"client_id": f.client.id, "client_secret": f.secret.expose(), "code": code})
        .to_string();
    let answer = f
        .token_with(
            Some("application/json; charset=utf-8"),
            Some(&format!("Bearer {access}")),
            body.as_bytes(),
            "",
        )
        .await;
    assert_eq!(answer.status, 200);
}

#[tokio::test]
async fn a_missing_field_is_named_by_its_path() {
    let f = Fixture::new().await;
    let code = f.code().await;
    let answer = f
        .token_json(json!({"client_id": f.client.id, "code": code}))
        .await;
    assert_error(&answer, 400, "CANNOT_BE_NULL");
    assert_eq!(body(&answer)["path"], "body.client_secret");
    assert_eq!(body(&answer)["error"], "invalid_request");
    // Both shapes at once: RFC 6749's, and the real service's field list.
    assert_eq!(
        body(&answer)["error_description"],
        "body.client_secret is required"
    );
    assert_eq!(
        body(&answer)["errors"],
        json!([{
            "error_type": "CANNOT_BE_NULL",
            "error_message": "Cannot be null.",
            "path": "body.client_secret",
        }])
    );

    let answer = f
        .token_json(json!({"client_secret": f.secret.expose(), "code": code}))
        .await;
    assert_eq!(body(&answer)["path"], "body.client_id");
    assert_eq!(body(&answer)["errors"][0]["path"], "body.client_id");

    let answer = f
        .token_json(json!({"client_id": f.client.id, "client_secret": f.secret.expose()}))
        .await;
    assert_error(&answer, 400, "CANNOT_BE_NULL");
    assert_eq!(body(&answer)["path"], "body.code");
}

#[tokio::test]
async fn bad_client_credentials_are_access_denied() {
    let f = Fixture::new().await;
    let code = f.code().await;
    let answer = f
        .token_json(json!({"client_id": f.client.id, "client_secret": "cgcs_wrong", "code": code}))
        .await;
    assert_error(&answer, 401, "ACCESS_DENIED");
    assert_eq!(body(&answer)["error"], "invalid_client");
    let answer = f
        .token_json(json!({"client_id": "unknown", "client_secret": "x", "code": code}))
        .await;
    assert_error(&answer, 401, "ACCESS_DENIED");
    // With Basic, the answer carries a Basic challenge (RFC 6749 section 5.2).
    let answer = f
        .token_form(
            &format!("code={code}"),
            Some(&basic(f.client.id.as_str(), "wrong")),
        )
        .await;
    assert_error(&answer, 401, "ACCESS_DENIED");
    assert_eq!(
        answer.header("www-authenticate"),
        Some(format!("Basic realm=\"{}\"", f.realm()).as_str())
    );
    // The code was not consumed by failed client authentication.
    let answer = f
        .token_json(
            json!({"client_id": f.client.id, "client_secret": f.secret.expose(), "code": code}),
        )
        .await;
    assert_eq!(answer.status, 200);
}

#[tokio::test]
async fn an_unknown_code_is_access_denied() {
    let f = Fixture::new().await;
    let answer = f
        .token_json(json!({"client_id": f.client.id, "client_secret": f.secret.expose(), "code": "cgac_never_issued"}))
        .await;
    assert_error(&answer, 401, "ACCESS_DENIED");
    assert_eq!(body(&answer)["error"], "invalid_grant");
    assert!(
        !answer
            .header("www-authenticate")
            .unwrap()
            .contains("expired_token")
    );
}

#[tokio::test]
async fn a_code_works_only_for_the_client_it_was_issued_to() {
    let f = Fixture::new().await;
    let code = f.code().await;
    let answer = f
        .token_json(json!({"client_id": f.other_client.id, "client_secret": f.other_secret.expose(), "code": code}))
        .await;
    assert_error(&answer, 401, "ACCESS_DENIED");
}

#[tokio::test]
async fn a_code_expires_after_its_lifetime() {
    let f = Fixture::new().await;
    let code = f.code().await;
    f.clock.advance(Duration::minutes(10));
    let answer = f
        .token_json(
            json!({"client_id": f.client.id, "client_secret": f.secret.expose(), "code": code}),
        )
        .await;
    assert_error(&answer, 401, "EXPIRED_CODE_GRANT");
    assert_eq!(body(&answer)["error"], "invalid_grant");
}

#[tokio::test]
async fn a_code_is_still_good_just_before_its_lifetime_ends() {
    let f = Fixture::new().await;
    let code = f.code().await;
    f.clock
        .advance(Duration::minutes(10) - Duration::seconds(1));
    let answer = f
        .token_json(
            json!({"client_id": f.client.id, "client_secret": f.secret.expose(), "code": code}),
        )
        .await;
    assert_eq!(answer.status, 200);
}

#[tokio::test]
async fn the_code_lifetime_is_configurable() {
    let f = Fixture::with_config(|c| c.code_lifetime = Duration::minutes(60)).await;
    let code = f.code().await;
    f.clock.advance(Duration::minutes(59));
    let answer = f
        .token_json(
            json!({"client_id": f.client.id, "client_secret": f.secret.expose(), "code": code}),
        )
        .await;
    assert_eq!(answer.status, 200);
}

#[tokio::test]
async fn used_code_revokes_its_tokens() {
    let f = Fixture::new().await;
    let code = f.code().await;
    let request =
        json!({"client_id": f.client.id, "client_secret": f.secret.expose(), "code": code});
    let first = body(&f.token_json(request.clone()).await);
    let access = first["access_token"].as_str().unwrap();
    let refresh = first["refresh_token"].as_str().unwrap();
    let outcome = f.bearer(access).await;
    assert!(outcome.is_ok(), "{outcome:?}");

    let replay = f.token_json(request).await;
    assert_error(&replay, 401, "EXPIRED_CODE_GRANT");
    assert!(
        f.bearer(access).await.is_err(),
        "RFC 6749 4.1.2: replay revokes issued tokens"
    );
    assert_error(&f.refresh(refresh).await, 401, "INVALID_REFRESH_TOKEN");
}

#[tokio::test]
async fn unparseable_bodies_and_wrong_content_types_are_told_apart() {
    let f = Fixture::new().await;
    let answer = f
        .token_with(Some("application/json"), None, b"{not json", "")
        .await;
    assert_error(&answer, 400, "BAD_REQUEST");
    assert_eq!(body(&answer)["error"], "invalid_request");
    let answer = f.token_with(Some("text/plain"), None, b"code=x", "").await;
    assert_error(&answer, 415, "UNSUPPORTED_MEDIA_TYPE");
    let answer = f.token_with(None, None, b"code=x", "").await;
    assert_error(&answer, 415, "UNSUPPORTED_MEDIA_TYPE");
    let answer = f
        .token_json(json!({"client_id": 12, "client_secret": "x", "code": "y"}))
        .await;
    assert_error(&answer, 400, "INVALID_DATA_TYPE");
    assert_eq!(body(&answer)["path"], "body.client_id");
    assert_eq!(
        body(&answer)["validation_rules"],
        json!({"data_type": "string"})
    );
    let answer = f.token_form("code=a&code=b", Some(&f.basic())).await;
    assert_error(&answer, 400, "BAD_REQUEST");
}

#[tokio::test]
async fn grant_type_must_agree_with_the_body() {
    let f = Fixture::new().await;
    let (_, refresh) = f.tokens().await;
    let code = f.code().await;
    let answer = f
        .token_form(
            &format!("grant_type=refresh_token&code={code}"),
            Some(&f.basic()),
        )
        .await;
    assert_error(&answer, 400, "CONFLICTING_FIELD");
    let answer = f
        .token_form(
            &format!("grant_type=authorization_code&refresh_token={refresh}"),
            Some(&f.basic()),
        )
        .await;
    assert_error(&answer, 400, "CONFLICTING_FIELD");
    let answer = f
        .token_form(
            &format!("code={code}&refresh_token={refresh}"),
            Some(&f.basic()),
        )
        .await;
    assert_error(&answer, 400, "CONFLICTING_FIELD");
    let answer = f
        .token_form(
            "grant_type=password&username=a&password=b",
            Some(&f.basic()),
        )
        .await;
    assert_error(&answer, 400, "INVALID_OPTION");
    assert_eq!(body(&answer)["error"], "unsupported_grant_type");
    assert_eq!(
        body(&answer)["validation_rules"]["valid_options"],
        json!(["authorization_code", "refresh_token"])
    );
    let answer = f
        .token_form("grant_type=refresh_token", Some(&f.basic()))
        .await;
    assert_error(&answer, 400, "CANNOT_BE_NULL");
    assert_eq!(body(&answer)["path"], "body.refresh_token");
}

#[tokio::test]
async fn concurrent_exchanges_of_one_code_issue_tokens_once() {
    let f = Arc::new(Fixture::new().await);
    let code = f.code().await;
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let f = f.clone();
            let code = code.clone();
            tokio::spawn(async move {
                f.token_json(json!({"client_id": f.client.id, "client_secret": f.secret.expose(), "code": code}))
                    .await
                    .status
            })
        })
        .collect();
    let mut ok = 0;
    for task in tasks {
        if task.await.unwrap() == 200 {
            ok += 1;
        }
    }
    assert_eq!(ok, 1);
}

#[tokio::test]
async fn a_token_store_outage_answers_503_with_a_generic_body() {
    let stores = Stores {
        tokens: Arc::new(DownStore),
        ..Stores::in_memory()
    };
    let f = Fixture::with_stores(stores, |_| {}).await;
    let request = f
        .gateway
        .authorization_request(&f.dialog_query(""))
        .await
        .unwrap();
    let error = f.gateway.approve(&request, f.account.id).await.unwrap_err();
    assert_error(&f.gateway.answer(error), 503, "SERVICE_UNAVAILABLE");

    let answer = f
        .token_json(
            json!({"client_id": f.client.id, "client_secret": f.secret.expose(), "code": "cgac_x"}),
        )
        .await;
    assert_error(&answer, 503, "SERVICE_UNAVAILABLE");
    assert_eq!(answer.header("retry-after"), Some("1"));
    assert!(
        !String::from_utf8(answer.body_bytes())
            .unwrap()
            .contains("db.internal")
    );

    let bearer = f.gateway.answer(f.bearer("cgat_x").await.unwrap_err());
    assert_error(&bearer, 503, "SERVICE_UNAVAILABLE");
    let revoke = f.revoke(Some(&f.basic()), "token=cgat_x").await;
    assert_error(&revoke, 503, "SERVICE_UNAVAILABLE");
}

#[tokio::test]
async fn a_store_failure_at_any_step_of_an_exchange_leaves_the_code_for_the_retry() {
    for step in ["find_code", "redeem_code"] {
        let (f, tokens) = Fixture::with_flaky_tokens().await;
        let code = f.code().await;
        let exchange = json!({
            "client_id": f.client.id, "client_secret": f.secret.expose(), "code": code,
        });
        tokens.fail_next(step);
        let failed = f.token_json(exchange.clone()).await;
        assert_error(&failed, 503, "SERVICE_UNAVAILABLE");

        // The retry is an exchange like the first, not a replay that would
        // revoke the grant.
        let retried = f.token_json(exchange.clone()).await;
        assert_eq!(
            retried.status,
            200,
            "retry after a failure at {step}: {:?}",
            retried.json_body()
        );
        let access = body(&retried)["access_token"].as_str().unwrap().to_owned();
        assert!(
            f.bearer(&access).await.is_ok(),
            "the tokens of the retry work after a failure at {step}"
        );
        // And the code is spent now: a third use is the replay.
        assert_error(&f.token_json(exchange).await, 401, "EXPIRED_CODE_GRANT");
    }
}
