//! A host that signs its users in itself (as Hydra's login and consent
//! providers do): its own session cookie tells the pages who is signed in,
//! the dialog goes straight to consent and issues a code, and our sign-in
//! form, throttle and passwords are never used.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use axum::body::Body;
use axum::http::Request;
use conversion_gateway::{
    AccountId, Argon2Passwords, HostSignIn, PageRequest, RequestParts, SignInMethod, SignedIn,
    StoreError,
};

use crate::{PEER, REDIRECT_URI, Server, form};

/// The host's sessions: its own cookie `host_session` names one.
#[derive(Clone, Default)]
struct HostSessions(Arc<Mutex<HashMap<String, AccountId>>>);

#[async_trait]
impl HostSignIn for HostSessions {
    async fn signed_in(&self, request: &PageRequest<'_>) -> Result<Option<SignedIn>, StoreError> {
        let Some(id) = request.cookie("host_session") else {
            return Ok(None);
        };
        let account = self.0.lock().unwrap().get(id).copied();
        Ok(account.map(|account| SignedIn {
            account,
            session: id.to_owned(),
        }))
    }

    fn sign_in_location(&self, return_to: &str) -> String {
        let back: String = form_urlencoded::byte_serialize(return_to.as_bytes()).collect();
        format!("https://host.example/login?return_to={back}")
    }
}

/// The pages with the host's sign-in, and its session of the account.
async fn host_server() -> (Server, String) {
    let (server, cookie, _) = host_server_with_sessions().await;
    (server, cookie)
}

/// The pages with the host's sign-in, the host's sessions beside them.
async fn host_server_with_sessions() -> (Server, String, HostSessions) {
    let sessions = HostSessions::default();
    let server = Server::with_sign_in(
        SignInMethod::host(sessions.clone()),
        &Argon2Passwords::new(8, 1),
    )
    .await;
    let cookie = "host_session=h-0123456789abcdef".to_owned();
    sessions
        .0
        .lock()
        .unwrap()
        .insert("h-0123456789abcdef".into(), server.demo.account.id);
    (server, cookie, sessions)
}

#[tokio::test]
async fn a_host_session_goes_straight_to_consent_and_the_code_is_issued() {
    let (server, host_cookie, sessions) = host_server_with_sessions().await;
    let query = server.dialog_query();
    let consent = server
        .get(&format!("/auth/dialog?{query}"), &host_cookie)
        .await;
    assert_eq!(consent.status, 200, "{}", consent.text());
    let html = consent.text();
    assert!(html.contains("Allow access?"), "{html}");
    assert!(html.contains("demo@example.com"), "{html}");
    assert!(
        !html.contains(r#"name="password""#),
        "no sign-in form: {html}"
    );
    assert!(consent.cookie("cg_login").is_none(), "no login nonce");
    assert!(consent.cookie("cg_session").is_none(), "no session of ours");

    let fields = [
        ("action", "consent"),
        ("query", query.as_str()),
        ("csrf", &consent.hidden("csrf")),
        ("decision", "allow"),
    ];
    let post = |cookie: &str, body: String| {
        Request::post("/auth/dialog")
            .header("content-type", "application/x-www-form-urlencoded")
            .header("cookie", cookie)
            .body(Body::from(body))
            .unwrap()
    };
    let answer = server
        .send_from(Some(PEER), post(&host_cookie, form(&fields)))
        .await;
    assert_eq!(answer.status, 302, "{}", answer.text());
    let location = answer.header("location").unwrap_or_default();
    assert!(
        location.starts_with(&format!("{REDIRECT_URI}?code=")) && location.ends_with("&state=s1"),
        "{location}"
    );

    // The code is the host's account's: the application's tokens act for it.
    let code = location["?code=".len() + REDIRECT_URI.len()..]
        .split('&')
        .next()
        .unwrap_or_default();
    let exchange = form(&[
        ("grant_type", "authorization_code"),
        ("client_id", server.demo.client_id.as_str()),
        ("client_secret", server.demo.client_secret.as_str()),
        ("code", code),
        ("redirect_uri", REDIRECT_URI),
    ]);
    let tokens = server
        .gateway
        .token(&RequestParts {
            content_type: Some("application/x-www-form-urlencoded"),
            body: exchange.as_bytes(),
            ..RequestParts::default()
        })
        .await
        .expect("the code is exchanged");
    let bearer = format!("Bearer {}", tokens.access_token.expose());
    let caller = server.gateway.authenticate_bearer(Some(&bearer)).await;
    assert_eq!(caller.expect("a caller").account_id, server.demo.account.id);

    // The form's token is bound to the host's session: posted from another
    // session of the same account, it is refused as a forgery.
    sessions
        .0
        .lock()
        .unwrap()
        .insert("h-other".into(), server.demo.account.id);
    let other = server
        .send_from(Some(PEER), post("host_session=h-other", form(&fields)))
        .await;
    assert_eq!(other.status, 403, "{}", other.text());
}

#[tokio::test]
async fn without_a_host_session_the_browser_goes_to_the_hosts_sign_in_never_our_form() {
    let (server, _) = host_server().await;
    let query = server.dialog_query();
    let page = server.get(&format!("/auth/dialog?{query}"), "").await;
    assert_eq!(page.status, 303, "{}", page.text());
    let location = page.header("location").unwrap_or_default();
    assert!(
        location
            .starts_with("https://host.example/login?return_to=%2Fauth%2Fdialog%3Fclient_id%3D"),
        "{location}"
    );
    assert!(page.cookie("cg_login").is_none());

    // Our form's post is not one of these pages' forms: no password is
    // ever checked.
    let fields = [
        ("action", "login"),
        ("query", query.as_str()),
        ("csrf", "x"),
        ("email", server.demo.email.as_str()),
        ("password", server.demo.password.as_str()),
    ];
    let request = Request::post("/auth/dialog")
        .header("content-type", "application/x-www-form-urlencoded")
        .header("cookie", "cg_login=abcdefghijklmnopqrstuv")
        .body(Body::from(form(&fields)))
        .unwrap();
    let reply = server.send_from(Some(PEER), request).await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert!(reply.text().contains("Unknown form"), "{}", reply.text());
    assert!(reply.cookie("cg_session").is_none());

    let apps = server.get("/account/apps", "").await;
    assert_eq!(apps.status, 303);
    assert_eq!(
        apps.header("location"),
        Some("https://host.example/login?return_to=%2Faccount%2Fapps")
    );
}

#[tokio::test]
async fn the_account_page_lists_the_apps_of_the_hosts_signed_in_account() {
    let (server, host_cookie) = host_server().await;
    let page = server.get("/account/apps", &host_cookie).await;
    assert_eq!(page.status, 200, "{}", page.text());
    assert!(
        page.text().contains("No application is connected"),
        "{}",
        page.text()
    );
}
