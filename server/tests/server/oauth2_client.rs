//! A standard OAuth 2.0 client (the `oauth2` crate: form bodies, HTTP Basic)
//! against the service's binary on a loopback port: the token
//! endpoint serves standard clients as well as the spec's JSON.

use std::time::Duration;

use oauth2::basic::{BasicClient, BasicErrorResponseType, BasicTokenType};
use oauth2::url::Url;
use oauth2::{
    AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, RedirectUrl, RequestTokenError,
    TokenResponse as _, TokenUrl,
};

use crate::support::{DEMO_REDIRECT_URI, Launch, hidden};

#[tokio::test]
async fn the_oauth2_crate_exchanges_a_code_and_refreshes_over_loopback() {
    // The base URL is the address the server listens on (its default).
    let server = Launch::with_args(&["--store", "memory"]).start();
    let base_url = server.url.clone();
    let demo = server.demo.clone();
    assert_eq!(demo.base_url, base_url);

    // The browser: keeps cookies, and does not follow the redirect to the
    // app (nothing listens on 127.0.0.1:9); the code is read from Location.
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .cookie_store(true)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let client = BasicClient::new(ClientId::new(demo.client_id.clone()))
        .set_client_secret(ClientSecret::new(demo.client_secret.clone()))
        .set_auth_uri(AuthUrl::new(format!("{base_url}/auth/dialog")).unwrap())
        .set_token_uri(TokenUrl::new(format!("{base_url}/auth/token")).unwrap())
        .set_redirect_uri(RedirectUrl::new(DEMO_REDIRECT_URI.into()).unwrap());
    let (authorize_url, csrf_state) = client.authorize_url(CsrfToken::new_random).url();
    let query = authorize_url.query().expect("a query").to_owned();
    let dialog = format!("{base_url}/auth/dialog");

    let page = http.get(authorize_url.clone()).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    let login = [
        ("action", "login"),
        ("query", &query),
        ("csrf", &hidden(&page, "csrf")),
        ("email", &demo.email),
        ("password", &demo.password),
    ];
    let reply = http.post(&dialog).form(&login).send().await.unwrap();
    assert_eq!(reply.status(), 303);
    let consent = http
        .get(authorize_url.clone())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(consent.contains("Demo App"), "{consent:?}");
    let allow = [
        ("action", "consent"),
        ("query", &query),
        ("csrf", &hidden(&consent, "csrf")),
        ("decision", "allow"),
    ];
    let reply = http.post(&dialog).form(&allow).send().await.unwrap();
    assert_eq!(reply.status(), 302);
    let location = Url::parse(reply.headers()["location"].to_str().unwrap()).unwrap();
    assert_eq!(location.as_str().split('?').next(), Some(DEMO_REDIRECT_URI));
    let param = |name: &str| {
        location
            .query_pairs()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
    };
    assert_eq!(
        param("state").as_deref(),
        Some(csrf_state.secret().as_str())
    );
    let code = param("code").expect("a code");

    // The standard client's part: form bodies and HTTP Basic credentials.
    let tokens = client
        .exchange_code(AuthorizationCode::new(code))
        .request_async(&http)
        .await
        .expect("the code exchange");
    assert_eq!(*tokens.token_type(), BasicTokenType::Bearer);
    assert_eq!(tokens.expires_in(), Some(Duration::from_secs(86_400)));
    let event = r#"{"event_type":"CONVERSION","event_family":"CDP","payload":{"conversion_identifier":"signup","email":"ana@example.com"}}"#;
    let reply = http
        .post(format!("{base_url}/platform/events"))
        .bearer_auth(tokens.access_token().secret())
        .header("content-type", "application/json")
        .body(event)
        .send()
        .await
        .unwrap();
    assert_eq!(
        reply.status(),
        200,
        "the access token works on the bearer routes"
    );

    let refresh_token = tokens.refresh_token().expect("a refresh token");
    let refreshed = client
        .exchange_refresh_token(refresh_token)
        .request_async(&http)
        .await
        .expect("the refresh");
    assert_ne!(
        refreshed.access_token().secret(),
        tokens.access_token().secret()
    );
    let refresh_token = refreshed.refresh_token().expect("a refresh token").clone();

    // RFC 7009 as standard clients send it: a form and HTTP Basic. (The
    // `oauth2` crate itself revokes only over https, as RFC 7009 asks.)
    let reply = http
        .post(format!("{base_url}/auth/revoke"))
        .basic_auth(&demo.client_id, Some(&demo.client_secret))
        .form(&[
            ("token", refresh_token.secret().as_str()),
            ("token_type_hint", "refresh_token"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    assert_eq!(reply.text().await.unwrap(), "{}");
    match client
        .exchange_refresh_token(&refresh_token)
        .request_async(&http)
        .await
    {
        Err(RequestTokenError::ServerResponse(error)) => {
            assert_eq!(*error.error(), BasicErrorResponseType::InvalidGrant);
        }
        other => panic!("a revoked refresh token must be refused: {other:?}"),
    }
    let (status, logs) = server.stop();
    assert!(status.success(), "{status}: {logs}");
}
