//! An application's life after registration (secret rotation, redirect
//! URIs, switching it off) and an account's connected applications.

use conversion_gateway::{BearerError, ClientId, ClientUpdateError};
use conversion_gateway_testkit::*;
use time::Duration;

#[tokio::test]
async fn a_rotated_secret_overlaps_the_new_one_for_a_day_then_stops() {
    let f = Fixture::new().await;
    let new = f
        .gateway
        .rotate_client_secret(&f.client.id)
        .await
        .expect("rotate");
    assert_ne!(new.expose(), f.secret.expose());
    let (_, refresh) = f.tokens().await; // with the old secret, in the overlap
    let with_new = basic(f.client.id.as_str(), new.expose());
    let form = format!("grant_type=refresh_token&refresh_token={refresh}");
    assert_eq!(f.token_form(&form, Some(&with_new)).await.status, 200);

    f.clock.advance(Duration::hours(24));
    let (_, refresh) = {
        // The old secret no longer works...
        let code = f.code().await;
        let old = f
            .token_form(
                &format!("grant_type=authorization_code&code={code}"),
                Some(&f.basic()),
            )
            .await;
        assert_error(&old, 401, "ACCESS_DENIED");
        assert_eq!(body(&old)["error"], "invalid_client");
        // ...the new one does.
        let code = f.code().await;
        let answer = f
            .token_form(
                &format!("grant_type=authorization_code&code={code}"),
                Some(&with_new),
            )
            .await;
        assert_eq!(answer.status, 200, "{:?}", answer.json_body());
        let body = body(&answer);
        (
            body["access_token"].as_str().unwrap().to_owned(),
            body["refresh_token"].as_str().unwrap().to_owned(),
        )
    };
    assert!(!refresh.is_empty());
}

#[tokio::test]
async fn a_configured_overlap_is_honoured() {
    let f =
        Fixture::with_config(|config| config.client_secret_overlap = Duration::minutes(5)).await;
    f.gateway
        .rotate_client_secret(&f.client.id)
        .await
        .expect("rotate");
    f.clock.advance(Duration::minutes(5) - Duration::SECOND);
    let code = f.code().await;
    let form = format!("grant_type=authorization_code&code={code}");
    assert_eq!(f.token_form(&form, Some(&f.basic())).await.status, 200);
    f.clock.advance(Duration::SECOND);
    let code = f.code().await;
    let form = format!("grant_type=authorization_code&code={code}");
    assert_error(
        &f.token_form(&form, Some(&f.basic())).await,
        401,
        "ACCESS_DENIED",
    );
}

#[tokio::test]
async fn unknown_clients_and_bad_redirect_uris_are_refused() {
    let f = Fixture::new().await;
    let unknown = ClientId::new("cgid_unknown");
    assert!(matches!(
        f.gateway.rotate_client_secret(&unknown).await,
        Err(ClientUpdateError::UnknownClient)
    ));
    assert!(matches!(
        f.gateway.set_client_active(&unknown, false).await,
        Err(ClientUpdateError::UnknownClient)
    ));
    assert!(matches!(
        f.gateway
            .set_client_redirect_uris(&unknown, &["https://x.example/cb".to_owned()])
            .await,
        Err(ClientUpdateError::UnknownClient)
    ));
    for bad in [
        vec![],
        vec!["https://x.example/cb#frag".to_owned()],
        vec!["/cb".to_owned()],
    ] {
        let refused = f.gateway.set_client_redirect_uris(&f.client.id, &bad).await;
        assert!(
            matches!(refused, Err(ClientUpdateError::InvalidRedirectUri { .. })),
            "{bad:?}: {refused:?}"
        );
    }
    let kept = f.gateway.find_client(&f.client.id).await.unwrap().unwrap();
    assert_eq!(
        kept.redirect_uris, f.client.redirect_uris,
        "nothing changed"
    );
}

#[tokio::test]
async fn new_redirect_uris_are_the_only_ones_the_dialog_accepts() {
    let f = Fixture::new().await;
    let new = "https://app.example/new-callback".to_owned();
    f.gateway
        .set_client_redirect_uris(&f.client.id, std::slice::from_ref(&new))
        .await
        .expect("set");
    let old = f.gateway.authorization_request(&f.dialog_query("")).await;
    assert!(old.is_err(), "the old URI is no longer registered");
    let query = format!(
        "client_id={}&redirect_uri={}&response_type=code&state=s",
        f.client.id,
        form_urlencoded::byte_serialize(new.as_bytes()).collect::<String>()
    );
    assert!(f.gateway.authorization_request(&query).await.is_ok());
}

#[tokio::test]
async fn a_switched_off_client_gets_no_dialog_no_token_and_its_tokens_stop() {
    let f = Fixture::new().await;
    let (access, refresh) = f.tokens().await;
    let code = f.code().await;
    f.gateway
        .set_client_active(&f.client.id, false)
        .await
        .expect("switch off");
    assert!(
        f.gateway
            .authorization_request(&f.dialog_query(""))
            .await
            .is_err()
    );
    let exchange = f
        .token_form(
            &format!("grant_type=authorization_code&code={code}"),
            Some(&f.basic()),
        )
        .await;
    assert_error(&exchange, 401, "ACCESS_DENIED");
    assert_error(&f.refresh(&refresh).await, 401, "ACCESS_DENIED");
    assert!(matches!(f.bearer(&access).await, Err(BearerError::Invalid)));

    f.gateway
        .set_client_active(&f.client.id, true)
        .await
        .expect("switch on");
    assert!(
        f.bearer(&access).await.is_ok(),
        "its unrevoked tokens work again"
    );
    assert_eq!(f.refresh(&refresh).await.status, 200);
}

#[tokio::test]
async fn an_account_lists_its_connected_apps_and_disconnects_one() {
    let f = Fixture::new().await;
    let (first_access, first_refresh) = f.tokens().await;
    f.clock.advance(Duration::minutes(1));
    let (second_access, _) = f.tokens().await;
    f.clock.advance(Duration::minutes(1));
    assert_eq!(f.refresh(&first_refresh).await.status, 200);

    let apps = f.gateway.connected_apps(f.account.id).await.expect("list");
    assert_eq!(apps.len(), 2, "{apps:?}");
    assert_eq!(apps[0].name, "Lead Sync");
    assert_eq!(apps[0].client_id, f.client.id);
    assert_eq!(
        apps[0].authorized_at,
        time::macros::datetime!(2026-01-01 0:00 UTC)
    );
    assert_eq!(
        apps[0].last_refreshed_at,
        Some(time::macros::datetime!(2026-01-01 0:02 UTC))
    );
    assert_eq!(apps[1].last_refreshed_at, None);

    // Another account cannot disconnect it.
    let stranger = conversion_gateway::AccountId(uuid::Uuid::from_u128(7));
    assert!(
        !f.gateway
            .disconnect_app(stranger, apps[0].grant_id)
            .await
            .unwrap()
    );
    assert!(f.bearer(&first_access).await.is_ok());

    assert!(
        f.gateway
            .disconnect_app(f.account.id, apps[0].grant_id)
            .await
            .unwrap()
    );
    assert!(matches!(
        f.bearer(&first_access).await,
        Err(BearerError::Invalid)
    ));
    assert_error(
        &f.refresh(&first_refresh).await,
        401,
        "INVALID_REFRESH_TOKEN",
    );
    assert!(
        f.bearer(&second_access).await.is_ok(),
        "the other grant stays"
    );
    let left = f.gateway.connected_apps(f.account.id).await.expect("list");
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].grant_id, apps[1].grant_id);
    assert!(
        !f.gateway
            .disconnect_app(f.account.id, apps[0].grant_id)
            .await
            .unwrap(),
        "twice: already disconnected"
    );
}

#[tokio::test]
async fn an_operator_revokes_any_grant() {
    let f = Fixture::new().await;
    let (access, _) = f.tokens().await;
    let apps = f.gateway.connected_apps(f.account.id).await.expect("list");
    assert!(f.gateway.revoke_grant(apps[0].grant_id).await.unwrap());
    assert!(matches!(f.bearer(&access).await, Err(BearerError::Invalid)));
    let unknown = conversion_gateway::GrantId(uuid::Uuid::from_u128(9));
    assert!(!f.gateway.revoke_grant(unknown).await.unwrap());
}
