//! A host's own HTML through `Templates`, and the flows called without any
//! framework.

use std::sync::Arc;

use axum::http::Request;
use conversion_gateway::axum::pages::{self, PagesState, Templates};
use conversion_gateway::{
    Argon2Passwords, Argon2Verifier, Gateway, GatewayConfig, HashingLimit, Notice, PageFlows,
    PageRequest, PageView, ServerKey, SignInForm, SignInMethod, Stores, SystemClock,
    ThrottleLimits,
};

use crate::Server;

/// A host that replaces the sign-in page and the style sheet, and keeps
/// every other page.
struct Branded;

impl Templates for Branded {
    fn style_sheet(&self) -> &str {
        "body{font-family:serif}"
    }

    fn sign_in(&self, form: &SignInForm) -> String {
        format!(
            r#"<h1>Welcome to Acme</h1><form method="post" action="{}"><input type="hidden" name="csrf" value="{}"></form>"#,
            form.action, form.csrf
        )
    }
}

#[tokio::test]
async fn a_host_replaces_one_page_and_the_style_sheet_the_policy_allows() {
    let server = Server::new().await;
    let key = ServerKey::from_hex(&"42".repeat(32)).unwrap();
    let sign_in = SignInMethod::form(
        Argon2Verifier::new(Argon2Passwords::new(8, 1), HashingLimit::per_core()),
        ThrottleLimits::default(),
    );
    let flows = PageFlows::new(server.gateway.clone(), &key, sign_in, server.clock.clone());
    let branded = pages::routes(PagesState::with_templates(flows, Arc::new(Branded)));
    let host = Server {
        router: branded,
        ..server
    };
    let page = host
        .get(&format!("/auth/dialog?{}", host.dialog_query()), "")
        .await;
    assert_eq!(page.status, 200, "{}", page.text());
    let html = page.text();
    assert!(html.contains("Welcome to Acme"), "{html}");
    assert!(
        html.contains("<style>body{font-family:serif}</style>"),
        "{html}"
    );
    assert!(!page.hidden("csrf").is_empty(), "the form keeps its token");
    let policy = page.header("content-security-policy").unwrap_or_default();
    // SHA-256 of the host's style sheet, not of ours.
    assert!(
        policy.contains("style-src 'sha256-") && !policy.contains("script-src"),
        "{policy}"
    );
    let default = Server::new().await;
    let ours = default
        .get(&format!("/auth/dialog?{}", default.dialog_query()), "")
        .await;
    assert_ne!(
        ours.header("content-security-policy"),
        Some(policy),
        "the hash follows the style sheet"
    );
    // The pages it did not replace are today's.
    let request = Request::get("/account/apps")
        .body(axum::body::Body::empty())
        .unwrap();
    let apps = host.send_from(Some(crate::PEER), request).await;
    assert!(apps.text().contains("Welcome to Acme"), "the sign-in page");
    assert_eq!(apps.header("x-frame-options"), Some("DENY"));
}

#[tokio::test]
async fn the_flows_answer_without_a_framework() {
    let key = ServerKey::from_hex(&"07".repeat(32)).unwrap();
    let gateway = Arc::new(Gateway::new(
        GatewayConfig::new("https://gateway.test"),
        Stores::in_memory(),
        key.hasher(),
    ));
    let sign_in = SignInMethod::form(
        Argon2Verifier::new(Argon2Passwords::new(8, 1), HashingLimit::per_core()),
        ThrottleLimits::default(),
    );
    let flows = PageFlows::new(gateway, &key, sign_in, Arc::new(SystemClock));
    let reply = flows.apps_page(&PageRequest::default()).await;
    let PageView::SignIn(form) = &reply.view else {
        panic!("a sign-in form, not {:?}", reply.view);
    };
    assert_eq!(form.notice, Notice::None);
    assert_eq!(form.action, "/account/apps");
    let [cookie] = reply.set_cookies.as_slice() else {
        panic!("one login nonce cookie, not {:?}", reply.set_cookies);
    };
    // The cookie rules: our path only, no script, no cross-site post,
    // HTTPS only on an https service.
    assert!(
        cookie.starts_with("cg_login=")
            && cookie.ends_with("; Path=/account; Max-Age=600; HttpOnly; SameSite=Lax; Secure"),
        "{cookie}"
    );
    let refused = flows
        .dialog_page(
            "client_id=nobody&redirect_uri=https://x.example/cb",
            &PageRequest::default(),
        )
        .await;
    assert!(
        matches!(refused.view, PageView::DialogRefused { status: 400, .. }),
        "{:?}",
        refused.view
    );
}

/// A host's template with a bug in it.
struct Panicking;

impl Templates for Panicking {
    fn sign_in(&self, _form: &SignInForm) -> String {
        panic!("a bug in the host's template")
    }
}

#[tokio::test]
async fn a_panic_on_a_page_is_answered_with_a_json_500() {
    let server = Server::new().await;
    let key = ServerKey::from_hex(&"42".repeat(32)).unwrap();
    let sign_in = SignInMethod::form(
        Argon2Verifier::new(Argon2Passwords::new(8, 1), HashingLimit::per_core()),
        ThrottleLimits::default(),
    );
    let flows = PageFlows::new(server.gateway.clone(), &key, sign_in, server.clock.clone());
    let host = Server {
        router: pages::routes(PagesState::with_templates(flows, Arc::new(Panicking))),
        ..server
    };
    let page = host
        .get(&format!("/auth/dialog?{}", host.dialog_query()), "")
        .await;
    assert_eq!(page.status, 500, "{}", page.text());
    assert_eq!(page.header("content-type"), Some("application/json"));
    assert!(!page.text().contains("a bug"), "{}", page.text());
}
