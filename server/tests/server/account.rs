//! The account's page of connected applications (`/account/apps`) through
//! the service's binary on loopback: sign-in, the list, the
//! CSRF-protected disconnect button, and what disconnecting revokes.

use serde_json::json;

use crate::support::{Framing, Launch, Server, assert_dialog_headers};

/// Signs in on the account page; returns the session cookie.
async fn sign_in(server: &Server) -> String {
    let page = server.get("/account/apps", "").await;
    assert_eq!(page.status, 200, "{}", page.text());
    assert!(
        page.html().contains(r#"type="password""#),
        "{}",
        page.text()
    );
    assert_dialog_headers(&page);
    let nonce = page.cookie("cg_login").expect("a login nonce");
    let login_cookie = format!("cg_login={nonce}");
    let csrf = page.hidden("csrf");
    let reply = server
        .post_form(
            "/account/apps",
            &login_cookie,
            &[
                ("action", "login"),
                ("csrf", &csrf),
                ("email", &server.demo.email),
                ("password", &server.demo.password),
            ],
        )
        .await;
    assert_eq!(reply.status, 303, "{}", reply.text());
    assert_eq!(reply.location(), "/account/apps");
    let cookie = reply
        .headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find(|value| value.starts_with("cg_session="))
        .expect("a session cookie")
        .to_owned();
    assert!(cookie.contains("Path=/account;"), "{cookie}");
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    format!("cg_session={}", reply.cookie("cg_session").unwrap())
}

#[tokio::test]
async fn a_signed_in_user_sees_and_disconnects_a_connected_app() {
    let server = Launch::memory(&[]).start();
    let (access, refresh) = server.tokens().await;
    let event = json!({
        "event_type": "CONVERSION", "event_family": "CDP",
        "payload": {"conversion_identifier": "signup", "email": "ana@example.com"},
    });
    let bearer = format!("Bearer {access}");
    let before = server
        .post_json("/platform/events", Some(&bearer), &event)
        .await;
    assert_eq!(before.status, 200, "{}", before.text());

    let session = sign_in(&server).await;
    let page = server.get("/account/apps", &session).await;
    assert_eq!(page.status, 200);
    let html = page.html().to_owned();
    assert!(html.contains("<td>Demo App</td>"), "{html}");
    assert!(html.contains("never"), "not refreshed yet: {html}");
    assert_dialog_headers(&page);
    let grant = page.hidden("grant");
    let csrf = page.hidden("csrf");

    // A forged form (no or a wrong token) is refused, nothing revoked.
    for forged in ["", "not-the-token"] {
        let reply = server
            .post_form(
                "/account/apps",
                &session,
                &[
                    ("action", "disconnect"),
                    ("grant", &grant),
                    ("csrf", forged),
                ],
            )
            .await;
        assert_eq!(reply.status, 403, "{}", reply.text());
    }
    // Without a session: the sign-in form, nothing revoked.
    let reply = server
        .post_form(
            "/account/apps",
            "",
            &[("action", "disconnect"), ("grant", &grant), ("csrf", &csrf)],
        )
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert!(reply.html().contains("sign-in expired"), "{}", reply.text());
    let still = server
        .post_json("/platform/events", Some(&bearer), &event)
        .await;
    assert_eq!(still.status, 200, "nothing was revoked yet");

    let reply = server
        .post_form(
            "/account/apps",
            &session,
            &[("action", "disconnect"), ("grant", &grant), ("csrf", &csrf)],
        )
        .await;
    assert_eq!(reply.status, 303, "{}", reply.text());
    assert_eq!(reply.location(), "/account/apps");
    let after = server
        .post_json("/platform/events", Some(&bearer), &event)
        .await;
    assert_eq!(after.status, 401, "the access token is revoked");
    let refreshed = server.refresh(&refresh).await;
    assert_eq!(refreshed.status, 401, "so is the refresh token");
    let page = server.get("/account/apps", &session).await;
    assert!(
        page.html().contains("No application is connected"),
        "{}",
        page.text()
    );
    // Twice: the grant is no longer connected.
    let reply = server
        .post_form(
            "/account/apps",
            &session,
            &[("action", "disconnect"), ("grant", &grant), ("csrf", &csrf)],
        )
        .await;
    assert_eq!(reply.status, 404, "{}", reply.text());
    let (status, logs) = server.stop();
    assert!(status.success(), "{status}: {logs}");
}

#[tokio::test]
async fn a_wrong_password_stays_on_the_sign_in_form() {
    let server = Launch::memory(&[]).start();
    let page = server.get("/account/apps", "").await;
    let nonce = page.cookie("cg_login").expect("a login nonce");
    let reply = server
        .post_form(
            "/account/apps",
            &format!("cg_login={nonce}"),
            &[
                ("action", "login"),
                ("csrf", &page.hidden("csrf")),
                ("email", &server.demo.email),
                ("password", "not-the-password"),
            ],
        )
        .await;
    assert_eq!(reply.status, 400);
    assert!(reply.html().contains("is wrong"), "{}", reply.text());
    assert!(reply.cookie("cg_session").is_none());
    // A login form without its nonce cookie is a forgery.
    let forged = server
        .post_form(
            "/account/apps",
            "",
            &[
                ("action", "login"),
                ("csrf", &page.hidden("csrf")),
                ("email", &server.demo.email),
                ("password", &server.demo.password),
            ],
        )
        .await;
    assert_eq!(forged.status, 403);
    assert!(forged.cookie("cg_session").is_none());
}

#[tokio::test]
async fn an_oversized_form_is_refused_413_without_being_read_whole() {
    let server = Launch::memory(&[]).start();
    // 8 KiB of a 1 MB body (under axum's default limit of 2 MB, which was
    // buffered before the page's own 4 KiB check), or of a chunked body
    // of no said length: answered without waiting for the rest.
    for framing in [Framing::Length(1_000_000), Framing::Chunked] {
        let status = server
            .post_partially("/account/apps", framing, 8 * 1024)
            .await;
        assert_eq!(status, Some(413), "{framing:?}");
    }
    // A body at the limit is read (and refused as no form of this page).
    let status = server
        .post_partially("/account/apps", Framing::Length(4 * 1024), 4 * 1024)
        .await;
    assert_eq!(status, Some(400));
}
