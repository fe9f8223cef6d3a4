//! The token lifecycle over time: expiry, refresh, rotation, reuse
//! detection, the grace window and the reuse policy.

use std::sync::Arc;

use conversion_gateway::{BearerError, RefreshPolicy};
use conversion_gateway_testkit::*;
use time::Duration;

#[tokio::test]
async fn an_access_token_expires_at_exactly_86400_seconds() {
    let f = Fixture::new().await;
    let (access, _) = f.tokens().await;
    f.clock.advance(Duration::seconds(86_399));
    let outcome = f.bearer(&access).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    f.clock.advance(Duration::seconds(1));
    let error = f.bearer(&access).await.unwrap_err();
    assert!(matches!(error, BearerError::Expired), "{error:?}");
    let answer = f.gateway.answer(error);
    assert_error(&answer, 401, "UNAUTHORIZED");
    assert_eq!(
        answer.header("www-authenticate").unwrap(),
        format!(
            "Bearer realm=\"{BASE_URL}/\", error=\"expired_token\", error_description=\"The access token expired\""
        )
    );
}

#[tokio::test]
async fn an_expired_access_token_is_renewed_with_the_refresh_token() {
    let f = Fixture::new().await;
    let (access, refresh) = f.tokens().await;
    f.clock.advance(Duration::days(3));
    let outcome = f.bearer(&access).await;
    assert!(outcome.is_err(), "{outcome:?}");
    let answer = f.refresh(&refresh).await;
    assert_eq!(answer.status, 200);
    let renewed = body(&answer);
    assert_eq!(renewed["expires_in"], 86_400);
    assert_eq!(renewed["token_type"], "Bearer");
    assert!(
        f.bearer(renewed["access_token"].as_str().unwrap())
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn refresh_rotates_the_refresh_token() {
    let f = Fixture::new().await;
    let (_, first) = f.tokens().await;
    let second = body(&f.refresh(&first).await)["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(second, first);
    f.clock.advance(Duration::minutes(5));
    let third = body(&f.refresh(&second).await)["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(third, second);
}

/// A gateway whose default refresh policy is strict rotation.
async fn strict() -> Fixture {
    Fixture::with_config(|c| {
        c.refresh_policy = RefreshPolicy::Rotate {
            grace: Duration::seconds(30),
        }
    })
    .await
}

#[tokio::test]
async fn under_strict_rotation_reuse_of_a_rotated_refresh_token_revokes_the_grant() {
    let f = strict().await;
    let (_, first) = f.tokens().await;
    let renewed = body(&f.refresh(&first).await);
    let (access, second) = (
        renewed["access_token"].as_str().unwrap(),
        renewed["refresh_token"].as_str().unwrap(),
    );
    f.clock.advance(Duration::minutes(5));

    let reuse = f.refresh(&first).await;
    assert_error(&reuse, 401, "INVALID_REFRESH_TOKEN");
    // RFC 9700 4.14.2: the attacker or the victim replayed; both lose the grant.
    let outcome = f.bearer(access).await;
    assert!(matches!(outcome, Err(BearerError::Invalid)), "{outcome:?}");
    assert_error(&f.refresh(second).await, 401, "INVALID_REFRESH_TOKEN");
}

#[tokio::test]
async fn an_invalid_refresh_token_gets_the_spec_401_exactly() {
    let f = Fixture::new().await;
    let answer = f.refresh("cgrt_not_a_token").await;
    assert_eq!(answer.status, 401);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    let b = body(&answer);
    assert_eq!(b["error_type"], "INVALID_REFRESH_TOKEN");
    assert!(
        b["error_message"].as_str().is_some_and(|m| !m.is_empty()),
        "{b:?}"
    );
    assert_eq!(
        b["error"], "invalid_grant",
        "standard clients read RFC 6749 5.2 error"
    );
    let challenge = answer.header("www-authenticate").unwrap();
    assert!(
        challenge.starts_with(&format!(
            "Bearer realm=\"{BASE_URL}/\", error=\"invalid_grant\", error_description=\""
        )),
        "{challenge}"
    );
    assert!(!challenge.contains("expired_token"), "{challenge:?}");
}

#[tokio::test]
async fn a_refresh_token_of_another_client_is_invalid() {
    let f = Fixture::new().await;
    let (_, refresh) = f.tokens().await;
    let answer = f
        .token_json(serde_json::json!({
            "client_id": f.other_client.id, "client_secret": f.other_secret.expose(), "refresh_token": refresh,
        }))
        .await;
    assert_error(&answer, 401, "INVALID_REFRESH_TOKEN");
    assert_eq!(
        f.refresh(&refresh).await.status,
        200,
        "the owner's token still works"
    );
}

#[tokio::test]
async fn under_strict_rotation_the_same_successor_is_returned_within_the_grace_window() {
    let f = strict().await;
    let (_, first) = f.tokens().await;
    let a = body(&f.refresh(&first).await);
    f.clock.advance(Duration::seconds(30));
    let b = body(&f.refresh(&first).await);
    assert_eq!(a["refresh_token"], b["refresh_token"]);
    assert_ne!(a["access_token"], b["access_token"]);
    assert!(
        f.bearer(a["access_token"].as_str().unwrap()).await.is_ok(),
        "no revocation"
    );
    assert_eq!(
        f.refresh(a["refresh_token"].as_str().unwrap()).await.status,
        200
    );
}

#[tokio::test]
async fn the_grace_window_ends_and_is_configurable() {
    let f = Fixture::with_config(|c| {
        c.refresh_policy = RefreshPolicy::Rotate {
            grace: Duration::seconds(5),
        }
    })
    .await;
    let (_, first) = f.tokens().await;
    assert_eq!(f.refresh(&first).await.status, 200);
    f.clock.advance(Duration::seconds(6));
    assert_error(&f.refresh(&first).await, 401, "INVALID_REFRESH_TOKEN");
}

#[tokio::test]
async fn a_grace_use_after_the_successor_moved_on_is_reuse() {
    let f = Fixture::new().await;
    let (_, first) = f.tokens().await;
    let second = body(&f.refresh(&first).await)["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let third = body(&f.refresh(&second).await)["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_error(&f.refresh(&first).await, 401, "INVALID_REFRESH_TOKEN");
    assert_error(&f.refresh(&third).await, 401, "INVALID_REFRESH_TOKEN");
}

#[tokio::test]
async fn under_the_reuse_policy_the_refresh_token_stays_valid() {
    // For clients that never store the refresh token a refresh returns.
    let f = Fixture::with_config(|c| c.refresh_policy = RefreshPolicy::Reuse).await;
    let (_, refresh) = f.tokens().await;
    for _ in 0..3 {
        f.clock.advance(Duration::days(2));
        let answer = body(&f.refresh(&refresh).await);
        assert_eq!(answer["refresh_token"], refresh.as_str());
        assert!(
            f.bearer(answer["access_token"].as_str().unwrap())
                .await
                .is_ok()
        );
    }
    let revoked = f
        .revoke(Some(&f.basic()), &format!("token={refresh}"))
        .await;
    assert_eq!(revoked.status, 200);
    assert_error(&f.refresh(&refresh).await, 401, "INVALID_REFRESH_TOKEN");
}

#[tokio::test]
async fn refresh_tokens_can_be_given_a_lifetime() {
    let f = Fixture::with_config(|c| c.refresh_token_lifetime = Some(Duration::days(30))).await;
    let (_, refresh) = f.tokens().await;
    f.clock.advance(Duration::days(30));
    assert_error(&f.refresh(&refresh).await, 401, "INVALID_REFRESH_TOKEN");
}

#[tokio::test]
async fn refresh_tokens_do_not_expire_by_default() {
    let f = Fixture::new().await;
    let (_, refresh) = f.tokens().await;
    f.clock.advance(Duration::days(3650));
    assert_eq!(f.refresh(&refresh).await.status, 200);
}

#[tokio::test]
async fn a_store_failure_at_any_step_of_a_refresh_leaves_the_token_for_the_retry() {
    for step in ["find_refresh_token", "rotate_refresh_token"] {
        let (f, tokens) = Fixture::with_flaky_tokens().await;
        let (_, refresh) = f.tokens().await;
        tokens.fail_next(step);
        assert_error(&f.refresh(&refresh).await, 503, "SERVICE_UNAVAILABLE");

        // Well past the grace window: were the token rotated by the failed
        // call, this retry would be a reuse and revoke the grant.
        f.clock.advance(Duration::minutes(5));
        let retried = f.refresh(&refresh).await;
        assert_eq!(
            retried.status,
            200,
            "retry after a failure at {step}: {:?}",
            retried.json_body()
        );
        let renewed = body(&retried);
        assert!(
            f.bearer(renewed["access_token"].as_str().unwrap())
                .await
                .is_ok(),
            "the retry's access token works after a failure at {step}"
        );
        assert_eq!(
            f.refresh(renewed["refresh_token"].as_str().unwrap())
                .await
                .status,
            200,
            "the retry's successor works after a failure at {step}"
        );
    }
}

#[tokio::test]
async fn the_purge_deletes_what_expired_beyond_the_retention_and_nothing_live() {
    let f = Fixture::new().await;
    let (_, first) = f.tokens().await;
    let second = refresh_token_of(&f.refresh(&first).await);
    // Within the retention nothing is purged.
    f.clock.advance(Duration::days(2));
    let report = f.gateway.purge_expired().await.unwrap();
    assert_eq!(report.tokens, 0, "{report:?}");

    // Past it (more than 7 days after the rotation and after both access
    // tokens expired): the code and both access tokens go. The first
    // refresh token stays: its successor was never used, so the default
    // (adaptive) policy still honours it, and a client that never stores a
    // new refresh token (the official one) still presents it.
    f.clock.advance(Duration::days(6) + Duration::seconds(1));
    let report = f.gateway.purge_expired().await.unwrap();
    assert_eq!(report.tokens, 3, "{report:?}");
    assert_eq!(f.gateway.purge_expired().await.unwrap().tokens, 0);
    let answer = f.refresh(&first).await;
    assert_eq!(answer.status, 200, "{:?}", answer.json_body());
    assert_eq!(refresh_token_of(&answer), second);

    // The client uses the successor: from now on it rotates strictly, and
    // the first token is retired with the successor's use.
    let third = refresh_token_of(&f.refresh(&second).await);
    f.clock.advance(Duration::days(7) + Duration::seconds(1));
    let report = f.gateway.purge_expired().await.unwrap();
    // The first and second refresh tokens, retired on day 8. (The access
    // tokens issued on day 8 expired on day 9: within the retention.)
    assert_eq!(report.tokens, 2, "{report:?}");

    // The live refresh token survives and works.
    let answer = f.refresh(&third).await;
    assert_eq!(answer.status, 200, "{:?}", answer.json_body());
    // The purged tombstone is now only unknown: refused, but no longer
    // proof of theft, so the grant stands.
    assert_error(&f.refresh(&first).await, 401, "INVALID_REFRESH_TOKEN");
    let fourth = refresh_token_of(&answer);
    f.clock.advance(Duration::minutes(1));
    assert_eq!(f.refresh(&fourth).await.status, 200);
}

fn refresh_token_of(answer: &conversion_gateway::HttpAnswer) -> String {
    assert_eq!(answer.status, 200, "{:?}", answer.json_body());
    body(answer)["refresh_token"]
        .as_str()
        .expect("refresh_token")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_default_policy_serves_both_kinds_of_client_on_the_memory_store() {
    refresh_scenarios::all(Fixture::new).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_default_policy_serves_both_kinds_of_client_on_sqlite() {
    refresh_scenarios::all(|| async {
        let store = Arc::new(
            conversion_gateway::SqliteStore::open_temporary()
                .await
                .expect("open SQLite"),
        );
        let stores = conversion_gateway::Stores::sharing(store);
        Fixture::with_stores(stores, |_| {}).await
    })
    .await;
}

#[tokio::test]
async fn a_client_registered_with_its_own_policy_keeps_it() {
    // Strict rotation for one application, under the adaptive default.
    let f = Fixture::new().await;
    let (strict_app, secret) = f
        .gateway
        .register_client(
            conversion_gateway::ClientRegistration::new("Strict App", [REDIRECT_URI])
                .refresh_policy(RefreshPolicy::Rotate {
                    grace: Duration::seconds(30),
                }),
        )
        .await
        .unwrap();
    let query = format!(
        "client_id={}&redirect_uri={}",
        strict_app.id,
        form_urlencoded::byte_serialize(REDIRECT_URI.as_bytes()).collect::<String>()
    );
    let request = f.gateway.authorization_request(&query).await.unwrap();
    let redirect = f.gateway.approve(&request, f.account.id).await.unwrap();
    let code = param(&redirect_params(&f.gateway.answer(redirect)), "code").unwrap();
    let refresh_with = |token: String| {
        let f = &f;
        let body = serde_json::json!({
            "client_id": strict_app.id, "client_secret": secret.expose(), "refresh_token": token,
        });
        async move { f.token_json(body).await }
    };
    let issued = f
        .token_json(serde_json::json!({
            "client_id": strict_app.id, "client_secret": secret.expose(), "code": code,
        }))
        .await;
    let first = body(&issued)["refresh_token"].as_str().unwrap().to_owned();
    assert_eq!(refresh_with(first.clone()).await.status, 200);
    f.clock.advance(Duration::minutes(5));
    // Under the adaptive default this would still work: the app's own
    // strict policy makes it reuse.
    assert_error(&refresh_with(first).await, 401, "INVALID_REFRESH_TOKEN");

    // The fixture's own app follows the default.
    let (_, first) = f.tokens().await;
    assert_eq!(f.refresh(&first).await.status, 200);
    f.clock.advance(Duration::minutes(5));
    assert_eq!(f.refresh(&first).await.status, 200);
}
