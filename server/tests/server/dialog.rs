//! The dialog's pages through the service's binary on loopback:
//! sign-in, consent, CSRF, cookies, sessions, the refusals a user sees as
//! pages, and the sign-in throttle by client address.

use std::net::IpAddr;

use conversion_gateway_testkit::TempDir;
use serde_json::json;

use crate::support::sqlite_gateway;
use crate::support::{
    BASE_URL, DEMO_REDIRECT_URI, Framing, Launch, Reply, assert_dialog_headers, encode, param,
};

/// The address the tests' requests come from.
const PEER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

/// Another client's address: on Linux every address of 127.0.0.0/8 is the
/// loopback interface.
const OTHER_PEER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));

/// Asserts a sign-in page refused with `status` and a `Retry-After` of
/// `seconds` (or a few less: the server's clock runs while the test does),
/// whose notice says `text`.
#[track_caller]
fn assert_refused_sign_in(reply: &Reply, status: u16, seconds: u64, text: &str) {
    assert_eq!(reply.status.as_u16(), status, "{}", reply.text());
    let retry_after: u64 = reply
        .header("retry-after")
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After in {:?}", reply.headers));
    assert!(
        (seconds.saturating_sub(5)..=seconds).contains(&retry_after),
        "Retry-After {retry_after}, expected about {seconds}"
    );
    let html = reply.html();
    assert!(html.contains(text), "{text:?} not in {html}");
    assert!(reply.cookie("cg_session").is_none(), "no session");
    assert_dialog_headers(reply);
}

#[tokio::test]
async fn the_dialog_shows_a_sign_in_page_naming_the_app() {
    let server = Launch::memory(&[]).start();
    let reply = server
        .get(
            &format!("/auth/dialog?{}", server.dialog_query("&state=s1")),
            "",
        )
        .await;
    assert_eq!(reply.status, 200);
    let html = reply.html();
    assert!(
        html.contains("<strong>Demo App</strong> wants to access your account"),
        "{html}"
    );
    assert!(html.contains(r#"type="password""#), "{html:?}");
    assert!(html.contains(r#"name="viewport""#), "readable on a phone");
    assert!(!html.contains("<script"), "{html:?}");
    assert_eq!(
        reply.hidden("query"),
        server.dialog_query("&state=s1").replace('&', "&amp;")
    );
    assert!(!reply.hidden("csrf").is_empty(), "{reply:?}");
    assert_dialog_headers(&reply);
    let cookie = reply.header("set-cookie").expect("a login nonce cookie");
    assert!(cookie.starts_with("cg_login="), "{cookie}");
    for attribute in [
        "HttpOnly",
        "SameSite=Lax",
        "Path=/auth/dialog",
        "Max-Age=600",
    ] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "the base URL is plain http");
}

#[tokio::test]
async fn signing_in_and_allowing_redirects_with_a_code_and_the_state() {
    let server = Launch::memory(&[]).start();
    let query = server.dialog_query("&state=xyz%20123&response_type=code");
    let session = server.sign_in(&query).await;
    let consent = server.get(&format!("/auth/dialog?{query}"), &session).await;
    assert_eq!(consent.status, 200);
    let html = consent.html();
    assert!(
        html.contains(
            "<strong>Demo App</strong> asks to access the account <strong>Demo Account</strong>"
        ),
        "{html}"
    );
    assert!(
        html.contains(r#"value="allow""#) && html.contains(r#"value="deny""#),
        "{html:?}"
    );
    assert_dialog_headers(&consent);
    // Browsers check the consent form's redirect against form-action.
    let policy = consent.header("content-security-policy").unwrap();
    assert!(
        policy.contains("form-action 'self' http://127.0.0.1:9;"),
        "{policy}"
    );

    let fields = [
        ("action", "consent"),
        ("query", query.as_str()),
        ("csrf", &consent.hidden("csrf")),
        ("decision", "allow"),
    ];
    let reply = server.post_form("/auth/dialog", &session, &fields).await;
    assert_eq!(reply.status, 302);
    assert_eq!(reply.header("cache-control"), Some("no-store"));
    let location = reply.location();
    assert!(
        location.starts_with("http://127.0.0.1:9/callback?code=cgac_"),
        "{location}"
    );
    assert_eq!(param(location, "state").as_deref(), Some("xyz 123"));
}

#[tokio::test]
async fn denying_redirects_with_access_denied_and_the_state() {
    let server = Launch::memory(&[]).start();
    let reply = server
        .decide(&server.dialog_query("&state=abc"), "deny")
        .await;
    assert_eq!(reply.status, 302);
    let location = reply.location();
    assert!(
        location.starts_with("http://127.0.0.1:9/callback?error=access_denied"),
        "{location}"
    );
    assert_eq!(param(location, "state").as_deref(), Some("abc"));
    assert_eq!(param(location, "code"), None);
}

#[tokio::test]
async fn a_wrong_password_or_unknown_email_shows_a_clear_message_and_no_session() {
    let server = Launch::memory(&[]).start();
    let query = server.dialog_query("");
    let page = server.get(&format!("/auth/dialog?{query}"), "").await;
    let nonce = format!("cg_login={}", page.cookie("cg_login").unwrap());
    for (email, password) in [
        (server.demo.email.as_str(), "not-the-password"),
        ("nobody@example.com", "whatever"),
    ] {
        let fields = [
            ("action", "login"),
            ("query", &query),
            ("csrf", &page.hidden("csrf")),
            ("email", email),
            ("password", password),
        ];
        let reply = server.post_form("/auth/dialog", &nonce, &fields).await;
        assert_eq!(reply.status, 400);
        assert!(
            reply.html().contains("The e-mail or the password is wrong"),
            "{}",
            reply.html()
        );
        assert!(
            reply
                .html()
                .contains(&format!(r#"name="email" type="email" value="{email}""#)),
            "the e-mail is kept"
        );
        assert_eq!(reply.cookie("cg_session"), None);
        assert_dialog_headers(&reply);
    }
}

#[tokio::test]
async fn a_login_without_its_csrf_token_or_nonce_cookie_is_refused() {
    let server = Launch::memory(&[]).start();
    let query = server.dialog_query("");
    let page = server.get(&format!("/auth/dialog?{query}"), "").await;
    let nonce = format!("cg_login={}", page.cookie("cg_login").unwrap());
    let csrf = page.hidden("csrf");
    // No token, a forged one, and the right one without the cookie it is bound to.
    for (cookies, token) in [
        (nonce.as_str(), ""),
        (nonce.as_str(), "forged"),
        ("", csrf.as_str()),
    ] {
        let fields = [
            ("action", "login"),
            ("query", query.as_str()),
            ("csrf", token),
            ("email", server.demo.email.as_str()),
            ("password", server.demo.password.as_str()),
        ];
        let reply = server.post_form("/auth/dialog", cookies, &fields).await;
        assert_eq!(reply.status, 403);
        assert!(reply.html().contains("Form expired"), "{reply:?}");
        assert_eq!(reply.cookie("cg_session"), None);
    }
    // A token made for another dialog request does not carry over.
    let other = server.dialog_query("&state=other");
    let fields = [
        ("action", "login"),
        ("query", &other),
        ("csrf", &csrf),
        ("email", &server.demo.email),
        ("password", &server.demo.password),
    ];
    assert_eq!(
        server
            .post_form("/auth/dialog", &nonce, &fields)
            .await
            .status,
        403
    );
}

#[tokio::test]
async fn a_consent_with_a_forged_or_foreign_csrf_token_is_refused() {
    let server = Launch::memory(&[]).start();
    let query = server.dialog_query("&state=one");
    let session = server.sign_in(&query).await;
    let consent = server.get(&format!("/auth/dialog?{query}"), &session).await;
    let csrf = consent.hidden("csrf");
    let forged = [
        ("action", "consent"),
        ("query", query.as_str()),
        ("csrf", "forged"),
        ("decision", "allow"),
    ];
    let reply = server.post_form("/auth/dialog", &session, &forged).await;
    assert_eq!(reply.status, 403);
    assert_eq!(reply.header("location"), None);
    // The token of one request does not approve another (another state).
    let other = server.dialog_query("&state=two");
    let foreign = [
        ("action", "consent"),
        ("query", other.as_str()),
        ("csrf", &csrf),
        ("decision", "allow"),
    ];
    assert_eq!(
        server
            .post_form("/auth/dialog", &session, &foreign)
            .await
            .status,
        403
    );
    // Nor with another browser's session.
    let other_session = server.sign_in(&query).await;
    let fields = [
        ("action", "consent"),
        ("query", query.as_str()),
        ("csrf", &csrf),
        ("decision", "allow"),
    ];
    assert_eq!(
        server
            .post_form("/auth/dialog", &other_session, &fields)
            .await
            .status,
        403
    );
}

#[tokio::test]
async fn a_consent_without_a_session_asks_to_sign_in_again() {
    let server = Launch::memory(&[]).start();
    let query = server.dialog_query("");
    let fields = [
        ("action", "consent"),
        ("query", query.as_str()),
        ("csrf", "x"),
        ("decision", "allow"),
    ];
    let reply = server.post_form("/auth/dialog", "", &fields).await;
    assert_eq!(reply.status, 400);
    assert!(reply.html().contains("Your sign-in expired"), "{reply:?}");
    assert_eq!(reply.header("location"), None);
}

#[tokio::test]
async fn a_tampered_session_is_not_trusted() {
    let server = Launch::memory(&[]).start();
    let query = server.dialog_query("");
    let uri = format!("/auth/dialog?{query}");
    let session = server.sign_in(&query).await;
    assert!(
        server
            .get(&uri, &session)
            .await
            .html()
            .contains("Allow access?")
    );

    let (_, rest) = session.split_once('|').unwrap();
    let other_account = format!("cg_session={}|{rest}", uuid::Uuid::nil());
    for cookie in [
        other_account,
        format!("{session}x"),
        "cg_session=a|1|n|b".to_owned(),
    ] {
        assert!(
            server.get(&uri, &cookie).await.html().contains("Sign in"),
            "{cookie}"
        );
    }
    // Expiry after 10 minutes needs a clock the test moves: the example's
    // own tests (`dialog_tests.rs`) check it in-process.
}

#[tokio::test]
async fn switching_account_ends_the_session() {
    let server = Launch::memory(&[]).start();
    let query = server.dialog_query("");
    let session = server.sign_in(&query).await;
    let consent = server.get(&format!("/auth/dialog?{query}"), &session).await;
    let fields = [
        ("action", "switch"),
        ("query", query.as_str()),
        ("csrf", &consent.hidden("csrf")),
    ];
    let reply = server.post_form("/auth/dialog", &session, &fields).await;
    assert_eq!(reply.status, 303);
    assert_eq!(reply.cookie("cg_session").as_deref(), Some(""));
    assert!(
        reply.header("set-cookie").unwrap().contains("Max-Age=0"),
        "{reply:?}"
    );
}

#[tokio::test]
async fn an_unknown_app_gets_an_html_page_and_no_redirect() {
    let server = Launch::memory(&[]).start();
    let reply = server
        .get(
            &format!(
                "/auth/dialog?client_id=nope&redirect_uri={}",
                encode(DEMO_REDIRECT_URI)
            ),
            "",
        )
        .await;
    assert_eq!(reply.status, 400);
    assert!(reply.html().contains("Unknown application"), "{reply:?}");
    assert!(
        reply
            .html()
            .contains("No application is registered with this client_id")
    );
    assert_eq!(reply.header("location"), None);
    assert_dialog_headers(&reply);
}

#[tokio::test]
async fn an_unregistered_redirect_uri_gets_an_html_page_and_no_redirect() {
    let server = Launch::memory(&[]).start();
    let query = format!(
        "client_id={}&redirect_uri={}",
        server.demo.client_id,
        encode("https://evil.example/cb")
    );
    let reply = server.get(&format!("/auth/dialog?{query}"), "").await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.html().contains("Unregistered return address"),
        "{reply:?}"
    );
    assert!(
        !reply.html().contains("evil.example"),
        "the untrusted address is not shown as a link"
    );
    assert_eq!(reply.header("location"), None);
}

#[tokio::test]
async fn a_missing_client_id_or_redirect_uri_gets_an_html_page() {
    let server = Launch::memory(&[]).start();
    for uri in [
        "/auth/dialog",
        &format!("/auth/dialog?client_id={}", server.demo.client_id),
    ] {
        let reply = server.get(uri, "").await;
        assert_eq!(reply.status, 400);
        assert!(reply.html().contains("Incomplete link"), "{uri}");
    }
}

#[tokio::test]
async fn an_unsupported_response_type_is_sent_back_to_the_app() {
    let server = Launch::memory(&[]).start();
    let reply = server
        .get(
            &format!(
                "/auth/dialog?{}",
                server.dialog_query("&response_type=token&state=s")
            ),
            "",
        )
        .await;
    assert_eq!(reply.status, 302);
    assert_eq!(
        param(reply.location(), "error").as_deref(),
        Some("unsupported_response_type")
    );
    assert_eq!(param(reply.location(), "state").as_deref(), Some("s"));
    assert_eq!(reply.header("cache-control"), Some("no-store"));
}

#[tokio::test]
async fn the_legacy_redirect_url_parameter_opens_the_dialog() {
    let server = Launch::memory(&[]).start();
    // The official Ruby client sends it, not percent-encoded.
    let query = format!(
        "client_id={}&redirect_url={DEMO_REDIRECT_URI}",
        server.demo.client_id
    );
    let reply = server.decide(&query, "allow").await;
    assert_eq!(reply.status, 302);
    assert!(
        reply
            .location()
            .starts_with("http://127.0.0.1:9/callback?code=cgac_")
    );
}

#[tokio::test]
async fn names_on_the_pages_are_escaped() {
    // An app registered by another process on the server's SQLite store.
    let dir = TempDir::new("escaped");
    let database = dir.path("gateway.db");
    let server = Launch::with_args(&[
        "--store",
        &format!("sqlite:{}", database.display()),
        "--base-url",
        BASE_URL,
    ])
    .start();
    let (store, gateway) = sqlite_gateway(&database, &dir.path("gateway.db.key")).await;
    let (client, _) = gateway
        .register_client(conversion_gateway::ClientRegistration::new(
            r#"<script>alert("x")</script> & Co"#,
            ["https://app.example/cb"],
        ))
        .await
        .unwrap();
    store.close().await;
    let query = format!(
        "client_id={}&redirect_uri={}",
        client.id,
        encode("https://app.example/cb")
    );
    let reply = server.get(&format!("/auth/dialog?{query}"), "").await;
    let html = reply.html();
    assert!(
        html.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; Co"),
        "{html}"
    );
    assert!(!html.contains("<script"), "{html}");
}

#[tokio::test]
async fn the_dialog_form_takes_only_form_bodies() {
    let server = Launch::memory(&[]).start();
    let reply = server
        .post_json("/auth/dialog", None, &json!({"action": "login"}))
        .await;
    assert_eq!(reply.status, 415);
    assert!(reply.html().contains("Unsupported form"), "{reply:?}");
}

#[tokio::test]
async fn five_wrong_passwords_throttle_the_account_from_that_address() {
    let server = Launch::memory(&[]).start();
    let email = server.demo.email.clone();
    for attempt in 1..=5 {
        let reply = server.try_sign_in(PEER, &email, "wrong").await;
        assert_eq!(reply.status, 400, "attempt {attempt}: {}", reply.html());
    }
    let reply = server.try_sign_in(PEER, &email, "wrong").await;
    assert_refused_sign_in(&reply, 429, 900, "try again in 15 minutes");
    // The right password does not get through the lock either. (That the
    // lock ends with the window, and a refused attempt does not prolong it,
    // needs a clock the test moves: the example's own tests check it.)
    let reply = server
        .try_sign_in(PEER, &email, &server.demo.password)
        .await;
    assert_refused_sign_in(&reply, 429, 900, "try again in 15 minutes");
}

#[tokio::test]
async fn the_owner_signs_in_from_another_address_while_one_address_is_throttled() {
    let server = Launch::memory(&[]).start();
    let email = server.demo.email.clone();
    for _ in 0..30 {
        server.try_sign_in(PEER, &email, "guess").await;
    }
    let reply = server.try_sign_in(PEER, &email, "guess").await;
    assert_eq!(reply.status, 429);
    let reply = server
        .try_sign_in(OTHER_PEER, &email, &server.demo.password)
        .await;
    assert_eq!(
        reply.status,
        303,
        "{:?}",
        String::from_utf8_lossy(&reply.body)
    );
}

#[tokio::test]
async fn the_dialog_answers_a_wrong_method_and_an_unknown_path_in_json() {
    let server = Launch::memory(&[]).start();
    let client = server.client();
    let reply = client
        .send(client.request(reqwest::Method::DELETE, "/auth/dialog"))
        .await;
    reply.assert_error(405, "METHOD_NOT_ALLOWED");
    assert_eq!(reply.header("allow"), Some("GET,HEAD,POST"));
    server.get("/nope", "").await.assert_error(404, "NOT_FOUND");
    server
        .post("/platform/unknown", &[], "{}")
        .await
        .assert_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn an_oversized_dialog_form_is_413_json() {
    let server = Launch::memory(&[]).start();
    let body = "a".repeat(16 * 1024 + 1);
    let headers = [("content-type", "application/x-www-form-urlencoded")];
    server
        .post("/auth/dialog", &headers, body)
        .await
        .assert_error(413, "BODY_TOO_LARGE");
}

#[tokio::test]
async fn every_form_route_refuses_an_oversized_body_without_reading_it_whole() {
    let server = Launch::memory(&[]).start();
    // 20 KiB of a 1 MB body, or of a chunked one: each route's limit (16
    // KiB) is applied while reading, not after buffering the whole.
    for path in [
        "/auth/dialog",
        "/auth/token",
        "/auth/revoke",
        "/auth/introspect",
    ] {
        for framing in [Framing::Length(1_000_000), Framing::Chunked] {
            let status = server.post_partially(path, framing, 20 * 1024).await;
            assert_eq!(status, Some(413), "{path} {framing:?}");
        }
    }
}
