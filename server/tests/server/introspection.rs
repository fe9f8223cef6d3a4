//! Introspection (RFC 7662) and the authorization server metadata (RFC
//! 8414) over loopback HTTP, through the library's axum router, with the
//! `oauth2` crate's own introspection request: a live, a revoked and a
//! foreign token.

use std::net::SocketAddr;
use std::sync::Arc;

use conversion_gateway::Gateway;
use conversion_gateway_testkit::{BASE_URL, Fixture};
use oauth2::basic::{BasicClient, BasicTokenType};
use oauth2::{
    AccessToken, ClientId, ClientSecret, IntrospectionUrl, TokenIntrospectionResponse as _,
    TokenUrl,
};
use serde_json::Value;

/// Serves the library's router on `gateway` at a loopback port.
async fn serve(gateway: Arc<Gateway>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let address = listener.local_addr().expect("its address");
    let app: axum::Router = conversion_gateway::axum::router(gateway);
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client")
}

#[tokio::test]
async fn the_oauth2_crate_introspects_a_live_a_revoked_and_a_foreign_token() {
    let f = Fixture::new().await;
    let address = serve(f.gateway.clone()).await;
    let http = http();
    let client = BasicClient::new(ClientId::new(f.client.id.to_string()))
        .set_client_secret(ClientSecret::new(f.secret.expose().to_owned()))
        .set_token_uri(TokenUrl::new(format!("http://{address}/auth/token")).unwrap())
        .set_introspection_url(
            IntrospectionUrl::new(format!("http://{address}/auth/introspect")).unwrap(),
        );
    let (access, refresh) = f.tokens().await;

    let live = client
        .introspect(&AccessToken::new(access.clone()))
        .request_async(&http)
        .await
        .expect("introspect a live token");
    assert!(live.active());
    assert_eq!(
        live.client_id().map(|id| id.as_str()),
        Some(f.client.id.as_str())
    );
    assert_eq!(live.token_type(), Some(&BasicTokenType::Bearer));
    assert_eq!(live.sub(), Some(f.account.id.0.to_string().as_str()));
    let (iat, exp) = (live.iat().expect("iat"), live.exp().expect("exp"));
    assert_eq!((exp - iat).num_seconds(), 86_400);

    // Another application's token: its owner is not told.
    let (foreign, _) = f.tokens_of_other_client().await;
    let answer = client
        .introspect(&AccessToken::new(foreign))
        .request_async(&http)
        .await
        .expect("introspect a foreign token");
    assert!(!answer.active());
    assert_eq!(answer.client_id(), None, "nothing about a foreign token");
    assert_eq!(answer.sub(), None);

    // Revoked (RFC 7009 over HTTP, as the server test of revocation does).
    let reply = http
        .post(format!("http://{address}/auth/revoke"))
        .basic_auth(f.client.id.as_str(), Some(f.secret.expose()))
        .form(&[("token", refresh.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let revoked = client
        .introspect(&AccessToken::new(access))
        .request_async(&http)
        .await
        .expect("introspect a revoked token");
    assert!(!revoked.active());
    assert_eq!(revoked.exp(), None);
}

#[tokio::test]
async fn the_metadata_is_served_at_the_well_known_path() {
    let f = Fixture::new().await;
    let address = serve(f.gateway.clone()).await;
    let reply = http()
        .get(format!(
            "http://{address}/.well-known/oauth-authorization-server"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    assert_eq!(
        reply.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    let metadata: Value = serde_json::from_str(&reply.text().await.unwrap()).unwrap();
    assert_eq!(metadata["issuer"], BASE_URL);
    for (field, path) in [
        ("authorization_endpoint", "/auth/dialog"),
        ("token_endpoint", "/auth/token"),
        ("revocation_endpoint", "/auth/revoke"),
        ("introspection_endpoint", "/auth/introspect"),
    ] {
        assert_eq!(metadata[field], format!("{BASE_URL}{path}"), "{field}");
    }
    assert_eq!(
        metadata["code_challenge_methods_supported"],
        serde_json::json!(["S256"])
    );
    assert_eq!(
        metadata["grant_types_supported"],
        serde_json::json!(["authorization_code", "refresh_token"])
    );
    let post = http()
        .post(format!(
            "http://{address}/.well-known/oauth-authorization-server"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 405, "read-only");
}

/// Runs Authlib's `introspect_token` (Python) against `url`. Needs Python
/// with Authlib installed: the second test command only.
#[cfg(feature = "external-tests")]
fn authlib_introspect(url: &str, id: &str, secret: &str, auth: &str, token: &str) -> Value {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/server/clients/authlib_introspect.py"
    );
    let output = std::process::Command::new("python3")
        .args([script, url, id, secret, auth, token])
        .output()
        .expect("python3 (Authlib's introspection client needs it)");
    assert!(
        output.status.success(),
        "Authlib failed. It needs Python 3 with Authlib and requests:\n    \
         pip install authlib requests\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the script's JSON")
}

#[cfg(feature = "external-tests")]
#[tokio::test]
async fn authlibs_introspect_token_works_unmodified() {
    let f = Fixture::new().await;
    let address = serve(f.gateway.clone()).await;
    let url = format!("http://{address}/auth/introspect");
    let (access, refresh) = f.tokens().await;
    let (foreign, _) = f.tokens_of_other_client().await;
    let (id, secret) = (f.client.id.to_string(), f.secret.expose().to_owned());
    let run = move |auth: &'static str, token: String| {
        let (url, id, secret) = (url.clone(), id.clone(), secret.clone());
        tokio::task::spawn_blocking(move || authlib_introspect(&url, &id, &secret, auth, &token))
    };
    for auth in ["client_secret_basic", "client_secret_post"] {
        let live = run(auth, access.clone()).await.unwrap();
        assert_eq!(live["status"], 200, "{auth}: {live}");
        assert_eq!(live["body"]["active"], true, "{auth}: {live}");
        assert_eq!(live["body"]["client_id"], f.client.id.as_str());
        assert_eq!(live["body"]["token_type"], "Bearer");
        let refresh_answer = run(auth, refresh.clone()).await.unwrap();
        assert_eq!(refresh_answer["body"]["token_type"], "refresh_token");
        let foreign = run(auth, foreign.clone()).await.unwrap();
        assert_eq!(foreign["body"], serde_json::json!({ "active": false }));
    }
}

#[tokio::test]
async fn the_example_servers_resource_servers_introspect_any_token() {
    use crate::support::{Launch, form};
    let dir = conversion_gateway_testkit::TempDir::new("resource-servers");
    let file = dir.path("resource-servers.json");
    std::fs::write(&file, r#"{"reporting-api": "rs-secret-0123456789"}"#).unwrap();
    let server = Launch::memory(&["--resource-servers", file.to_str().unwrap()]).start();
    let (access, _) = server.tokens().await;
    let introspect = |id: &str, secret: &str| {
        let authorization = format!(
            "Basic {}",
            base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                format!("{id}:{secret}")
            )
        );
        let body = form(&[("token", access.as_str())]);
        let client = server.client();
        async move {
            client
                .post(
                    "/auth/introspect",
                    &[
                        ("content-type", "application/x-www-form-urlencoded"),
                        ("authorization", authorization.as_str()),
                    ],
                    body,
                )
                .await
        }
    };
    let answer = introspect("reporting-api", "rs-secret-0123456789").await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.json()["active"], true);
    assert_eq!(answer.json()["client_id"], server.demo.client_id.as_str());
    let wrong = introspect("reporting-api", "rs-secret-wrong-000").await;
    wrong.assert_error(401, "ACCESS_DENIED");
    assert!(
        !server.logs().contains("rs-secret"),
        "the secret is never logged"
    );

    std::fs::write(&file, r#"{"reporting-api": "short"}"#).unwrap();
    let (status, stderr) = Launch::memory(&["--resource-servers", file.to_str().unwrap()]).fail();
    assert!(!status.success());
    assert!(stderr.contains("at least 16 characters"), "{stderr}");
}
