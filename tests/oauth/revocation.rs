//! Revocation (RFC 7009) and bearer authentication.

use conversion_gateway::{BearerError, RequestParts};
use conversion_gateway_testkit::*;
use serde_json::json;
use time::Duration;

#[tokio::test]
async fn revoking_by_access_token_revokes_the_grant() {
    let f = Fixture::new().await;
    let (access, refresh) = f.tokens().await;
    let answer = f
        .revoke(
            Some(&format!("Bearer {access}")),
            &format!("token={access}"),
        )
        .await;
    assert_eq!(answer.status, 200);
    assert_eq!(body(&answer), json!({}));
    assert_eq!(answer.header("content-type"), Some("application/json"));
    let outcome = f.bearer(&access).await;
    assert!(matches!(outcome, Err(BearerError::Invalid)), "{outcome:?}");
    assert_error(&f.refresh(&refresh).await, 401, "INVALID_REFRESH_TOKEN");
}

#[tokio::test]
async fn revoking_by_refresh_token_revokes_the_grant() {
    let f = Fixture::new().await;
    let (access, refresh) = f.tokens().await;
    let form = format!("token={refresh}&token_type_hint=refresh_token");
    let answer = f.revoke(Some(&format!("Bearer {access}")), &form).await;
    assert_eq!(answer.status, 200);
    let outcome = f.bearer(&access).await;
    assert!(outcome.is_err(), "{outcome:?}");
    assert_error(&f.refresh(&refresh).await, 401, "INVALID_REFRESH_TOKEN");
}

/// RFC 7009 section 2.1: the hint "MAY be used by the authorization server
/// to optimize the token lookup". The hinted kind is looked up first, so a
/// lookup of the other kind, made to fail here, is never reached.
#[tokio::test]
async fn the_hinted_kind_of_token_is_looked_up_first() {
    for hint in TokenHint::BOTH {
        let setup = Fixture::with_the_unhinted_lookup_failing(hint).await;
        let f = &setup.fixture;
        let answer = f.revoke(Some(&f.basic()), &setup.form).await;
        assert_eq!(answer.status, 200, "{hint:?}: {:?}", answer.json_body());
        assert!(
            setup.unhinted_lookup_never_made(),
            "{hint:?}: {} was called",
            setup.unreached
        );
        // The grant is revoked, seen through the lookup left working.
        match hint {
            TokenHint::RefreshToken => {
                assert_error(
                    &f.refresh(&setup.refresh).await,
                    401,
                    "INVALID_REFRESH_TOKEN",
                );
            }
            TokenHint::AccessToken => {
                let outcome = f.bearer(&setup.access).await;
                assert!(matches!(outcome, Err(BearerError::Invalid)), "{outcome:?}");
            }
        }
    }
}

#[tokio::test]
async fn a_wrong_or_unknown_hint_is_ignored() {
    let f = Fixture::new().await;
    let (access, refresh) = f.tokens().await;
    let form = format!("token={refresh}&token_type_hint=access_token");
    assert_eq!(
        f.revoke(Some(&format!("Bearer {access}")), &form)
            .await
            .status,
        200
    );
    assert_error(&f.refresh(&refresh).await, 401, "INVALID_REFRESH_TOKEN");

    let (access, refresh) = f.tokens().await;
    let form = format!("token={access}&token_type_hint=banana");
    assert_eq!(f.revoke(Some(&f.basic()), &form).await.status, 200);
    assert_error(&f.refresh(&refresh).await, 401, "INVALID_REFRESH_TOKEN");
}

#[tokio::test]
async fn an_app_with_an_expired_access_token_revokes_with_client_credentials() {
    let f = Fixture::new().await;
    let (access, refresh) = f.tokens().await;
    f.clock.advance(Duration::days(2));
    let bearer = f
        .revoke(
            Some(&format!("Bearer {access}")),
            &format!("token={refresh}"),
        )
        .await;
    assert_error(&bearer, 401, "UNAUTHORIZED");
    let form = format!(
        "token={refresh}&client_id={}&client_secret={}",
        f.client.id,
        f.secret.expose()
    );
    assert_eq!(f.revoke(None, &form).await.status, 200);
    assert_error(&f.refresh(&refresh).await, 401, "INVALID_REFRESH_TOKEN");
}

#[tokio::test]
async fn revoking_someone_elses_token_answers_200_and_revokes_nothing() {
    let f = Fixture::new().await;
    let (access, refresh) = f.tokens().await;
    let other = basic(f.other_client.id.as_str(), f.other_secret.expose());
    let answer = f.revoke(Some(&other), &format!("token={refresh}")).await;
    assert_eq!(answer.status, 200);
    assert_eq!(body(&answer), json!({}));
    let outcome = f.bearer(&access).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(f.refresh(&refresh).await.status, 200);
}

#[tokio::test]
async fn an_unknown_token_answers_200() {
    let f = Fixture::new().await;
    let answer = f.revoke(Some(&f.basic()), "token=cgat_unknown").await;
    assert_eq!(answer.status, 200);
    assert_eq!(body(&answer), json!({}));
}

#[tokio::test]
async fn revocation_needs_a_token_and_an_authenticated_caller() {
    let f = Fixture::new().await;
    let (access, _) = f.tokens().await;
    let answer = f
        .revoke(Some(&f.basic()), "token_type_hint=refresh_token")
        .await;
    assert_error(&answer, 400, "CANNOT_BE_NULL");
    assert_eq!(body(&answer)["path"], "body.token");
    let answer = f.revoke(None, &format!("token={access}")).await;
    assert_error(&answer, 401, "UNAUTHORIZED");
    assert!(
        f.bearer(&access).await.is_ok(),
        "an unauthenticated request revokes nothing"
    );
    let answer = f
        .revoke(
            Some(&basic(f.client.id.as_str(), "wrong")),
            &format!("token={access}"),
        )
        .await;
    assert_error(&answer, 401, "ACCESS_DENIED");
}

#[tokio::test]
async fn revocation_accepts_json_bodies() {
    let f = Fixture::new().await;
    let (access, _) = f.tokens().await;
    let body_bytes = json!({"token": access}).to_string();
    let answer = f
        .gateway
        .revoke(&RequestParts {
            query: "",
            content_type: Some("application/json"),
            authorization: Some(&format!("Bearer {access}")),
            idempotency_key: None,
            body: body_bytes.as_bytes(),
        })
        .await;
    let answer = f.gateway.answer(answer);
    assert_eq!(answer.status, 200);
    let outcome = f.bearer(&access).await;
    assert!(outcome.is_err(), "{outcome:?}");
}

#[tokio::test]
async fn bearer_challenges_tell_missing_invalid_and_expired_apart() {
    let f = Fixture::new().await;
    let realm = f.realm();
    let missing = f
        .gateway
        .answer(f.gateway.authenticate_bearer(None).await.unwrap_err());
    assert_error(&missing, 401, "UNAUTHORIZED");
    assert!(
        missing
            .header("www-authenticate")
            .unwrap()
            .contains("error=\"invalid_request\"")
    );
    let basic = f
        .gateway
        .authenticate_bearer(Some(&f.basic()))
        .await
        .unwrap_err();
    assert!(matches!(basic, BearerError::Missing), "{basic:?}");

    let invalid = f.gateway.answer(f.bearer("cgat_forged").await.unwrap_err());
    assert_error(&invalid, 401, "UNAUTHORIZED");
    assert_eq!(
        invalid.header("www-authenticate").unwrap(),
        format!(
            "Bearer realm=\"{realm}\", error=\"invalid_token\", error_description=\"The access token is invalid or was revoked\""
        )
    );
}

#[tokio::test]
async fn bearer_authentication_names_the_caller() {
    let f = Fixture::new().await;
    let (access, _) = f.tokens().await;
    let caller = f
        .gateway
        .authenticate_bearer(Some(&format!("bearer {access}")))
        .await
        .unwrap();
    assert_eq!(caller.account_id, f.account.id);
    assert_eq!(caller.client_id, f.client.id);
}
