//! Token introspection (RFC 7662) and the authorization server metadata
//! (RFC 8414), through the `Gateway`.

use conversion_gateway::{ClientSecret, Gateway, GatewayConfig, HttpAnswer, RequestParts};
use conversion_gateway_testkit::*;
use serde_json::json;
use time::Duration;

/// 2026-01-01T00:00:00Z, the fixture clock's start, as a Unix time.
const EPOCH_OF_TESTS: i64 = 1_767_225_600;

#[tokio::test]
async fn a_live_access_token_is_described_to_its_own_client() {
    let f = Fixture::new().await;
    let (access, _) = f.tokens().await;
    let answer = f
        .introspect(Some(&f.basic()), &format!("token={access}"))
        .await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("cache-control"), Some("no-store"));
    assert_eq!(answer.header("pragma"), Some("no-cache"));
    let body = body(&answer);
    assert_eq!(body["active"], true);
    assert_eq!(body["client_id"], f.client.id.as_str());
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["sub"], f.account.id.0.to_string());
    assert_eq!(body["iat"], EPOCH_OF_TESTS);
    assert_eq!(body["exp"], EPOCH_OF_TESTS + 86_400);
    assert!(body["grant_id"].is_string(), "{body}");
}

#[tokio::test]
async fn a_refresh_token_is_described_with_what_applies_to_it() {
    let f = Fixture::new().await;
    let (_, refresh) = f.tokens().await;
    // The hint only says where to look first: a wrong one still finds it.
    for hint in ["refresh_token", "access_token", "carrier_pigeon"] {
        let form = format!("token={refresh}&token_type_hint={hint}");
        let answer = f.introspect(Some(&f.basic()), &form).await;
        let body = body(&answer);
        assert_eq!(body["active"], true, "{hint}: {body}");
        assert_eq!(body["token_type"], "refresh_token");
        assert_eq!(body["client_id"], f.client.id.as_str());
        assert_eq!(body["sub"], f.account.id.0.to_string());
        assert_eq!(body["iat"], EPOCH_OF_TESTS);
        assert!(body.get("exp").is_none(), "no expiry by default: {body}");
    }
}

/// RFC 7662 section 2.1: the hint is there to "help the protected resource
/// optimize the token lookup". The hinted kind is looked up first, so a
/// lookup of the other kind, made to fail here, is never reached.
#[tokio::test]
async fn the_hinted_kind_of_token_is_looked_up_first() {
    for hint in TokenHint::BOTH {
        let setup = Fixture::with_the_unhinted_lookup_failing(hint).await;
        let f = &setup.fixture;
        let answer = f.introspect(Some(&f.basic()), &setup.form).await;
        assert_eq!(answer.status, 200, "{hint:?}: {:?}", answer.json_body());
        assert_eq!(body(&answer)["active"], true, "{hint:?}");
        assert!(
            setup.unhinted_lookup_never_made(),
            "{hint:?}: {} was called",
            setup.unreached
        );
    }
}

#[tokio::test]
async fn credentials_in_the_body_work_like_basic() {
    let f = Fixture::new().await;
    let (access, _) = f.tokens().await;
    let form = format!(
        "token={access}&client_id={}&client_secret={}",
        f.client.id,
        f.secret.expose()
    );
    assert_eq!(body(&f.introspect(None, &form).await)["active"], true);
}

#[tokio::test]
async fn unknown_expired_revoked_and_foreign_tokens_are_only_inactive() {
    let f = Fixture::new().await;
    let inactive = json!({ "active": false });
    let unknown = f
        .introspect(Some(&f.basic()), "token=cgat_never_issued")
        .await;
    assert_eq!(unknown.status, 200);
    assert_eq!(body(&unknown), inactive);

    // Another client's live token: nothing about it leaks.
    let (access, refresh) = f.tokens().await;
    let other = basic(f.other_client.id.as_str(), f.other_secret.expose());
    for token in [&access, &refresh] {
        let answer = f.introspect(Some(&other), &format!("token={token}")).await;
        assert_eq!(body(&answer), inactive, "a foreign token");
    }

    // Expired: at exactly the lifetime, the access token is gone.
    f.clock.advance(Duration::seconds(86_400));
    let answer = f
        .introspect(Some(&f.basic()), &format!("token={access}"))
        .await;
    assert_eq!(body(&answer), inactive, "an expired token");

    // Revoked: the refresh token was still active, then its grant goes.
    let answer = f
        .introspect(Some(&f.basic()), &format!("token={refresh}"))
        .await;
    assert_eq!(body(&answer)["active"], true);
    let revoked = f
        .revoke(Some(&f.basic()), &format!("token={refresh}"))
        .await;
    assert_eq!(revoked.status, 200);
    let answer = f
        .introspect(Some(&f.basic()), &format!("token={refresh}"))
        .await;
    assert_eq!(body(&answer), inactive, "a revoked token");
}

#[tokio::test]
async fn a_rotated_refresh_token_is_inactive_once_its_grace_is_over() {
    let f = Fixture::with_config(|config| {
        config.refresh_policy = conversion_gateway::RefreshPolicy::Rotate {
            grace: Duration::seconds(30),
        };
    })
    .await;
    let (_, first) = f.tokens().await;
    let answer = f.refresh(&first).await;
    assert_eq!(answer.status, 200);
    let (authorization, form) = (f.basic(), format!("token={first}"));
    let introspect = || f.introspect(Some(&authorization), &form);
    assert_eq!(
        body(&introspect().await)["active"],
        true,
        "within the grace window the token endpoint still honours it"
    );
    f.clock.advance(Duration::seconds(31));
    assert_eq!(
        body(&introspect().await),
        json!({ "active": false }),
        "past the grace, using it would revoke the grant"
    );
}

/// A second gateway on the fixture's stores that registers the service
/// `reporting-api` as a resource server.
struct ResourceServer {
    gateway: Gateway,
    secret: ClientSecret,
}

impl ResourceServer {
    fn on(f: &Fixture) -> Self {
        let secret = ClientSecret::new("cgcs_resource_server_secret");
        let gateway = Gateway::new(
            GatewayConfig::new(BASE_URL),
            f.stores.clone(),
            conversion_gateway::SecretHasher::new([42; 32]),
        )
        .with_clock(f.clock.clone())
        .with_resource_server("reporting-api", &secret);
        Self { gateway, secret }
    }

    /// The resource server's own HTTP Basic credentials.
    fn basic(&self) -> String {
        basic("reporting-api", self.secret.expose())
    }

    /// Introspects `token` with `authorization`.
    async fn introspect(&self, authorization: String, token: String) -> HttpAnswer {
        let form = format!("token={token}");
        let outcome = self
            .gateway
            .introspect(&RequestParts {
                query: "",
                content_type: Some("application/x-www-form-urlencoded"),
                authorization: Some(&authorization),
                idempotency_key: None,
                body: form.as_bytes(),
            })
            .await;
        self.gateway.answer(outcome)
    }
}

#[tokio::test]
async fn a_switched_off_clients_tokens_are_inactive_and_it_cannot_introspect() {
    let f = Fixture::new().await;
    let (access, _) = f.tokens().await;
    let server = ResourceServer::on(&f);
    let by_resource_server = |token: String| server.introspect(server.basic(), token);
    assert_eq!(
        body(&by_resource_server(access.clone()).await)["active"],
        true
    );

    f.gateway
        .set_client_active(&f.client.id, false)
        .await
        .expect("switch off");
    assert_eq!(
        body(&by_resource_server(access.clone()).await),
        json!({ "active": false }),
        "a switched-off client's tokens are inactive"
    );
    let answer = f
        .introspect(Some(&f.basic()), &format!("token={access}"))
        .await;
    assert_error(&answer, 401, "ACCESS_DENIED");
    assert_eq!(body(&answer)["error"], "invalid_client");

    f.gateway
        .set_client_active(&f.client.id, true)
        .await
        .expect("switch on");
    assert_eq!(body(&by_resource_server(access).await)["active"], true);
}

#[tokio::test]
async fn a_resource_server_sees_every_clients_tokens_with_its_own_secret_only() {
    let f = Fixture::new().await;
    let (access, _) = f.tokens().await;
    let server = ResourceServer::on(&f);
    let introspect = |authorization: String| server.introspect(authorization, access.clone());
    let answer = introspect(server.basic()).await;
    assert_eq!(body(&answer)["active"], true);
    assert_eq!(body(&answer)["client_id"], f.client.id.as_str());
    let wrong = introspect(basic("reporting-api", "cgcs_wrong")).await;
    assert_error(&wrong, 401, "ACCESS_DENIED");
    assert!(
        wrong
            .header("www-authenticate")
            .is_some_and(|challenge| challenge.starts_with("Basic")),
        "{wrong:?}"
    );
}

#[tokio::test]
async fn the_caller_must_authenticate_and_send_a_token() {
    let f = Fixture::new().await;
    let (access, _) = f.tokens().await;
    let anonymous = f.introspect(None, &format!("token={access}")).await;
    assert_error(&anonymous, 401, "ACCESS_DENIED");
    assert_eq!(body(&anonymous)["error"], "invalid_client");
    let bearer = f
        .introspect(
            Some(&format!("Bearer {access}")),
            &format!("token={access}"),
        )
        .await;
    assert_error(&bearer, 401, "ACCESS_DENIED");
    let wrong = basic(f.client.id.as_str(), "cgcs_wrong");
    assert_error(
        &f.introspect(Some(&wrong), &format!("token={access}")).await,
        401,
        "ACCESS_DENIED",
    );
    let missing = f.introspect(Some(&f.basic()), "").await;
    assert_error(&missing, 400, "CANNOT_BE_NULL");
    assert_eq!(body(&missing)["error"], "invalid_request");
    assert_eq!(body(&missing)["errors"][0]["path"], "body.token");
}
