//! `examples/axum.rs`, the whole service in one file, as a process: a
//! browser signs in and allows an app, the app exchanges the code, a form
//! sends a conversion with the API key, and Ctrl-C drains and stops it.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use conversion_gateway_testkit::{TempDir, hidden};
use serde_json::Value;

use crate::support::{DEMO_REDIRECT_URI, encode, form, param};

/// The example's binary, which `cargo test` builds beside the test binaries.
fn example_binary() -> PathBuf {
    let test = std::env::current_exe().expect("the test binary's path");
    let profile = test
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps");
    profile
        .join("examples")
        .join(format!("axum{}", std::env::consts::EXE_SUFFIX))
}

/// The running example, killed if a test fails half-way.
struct Example(Child);

impl Drop for Example {
    fn drop(&mut self) {
        let _ = self.0.kill();
    }
}

#[tokio::test]
async fn the_example_serves_the_dialog_the_token_route_intake_and_operations() {
    let dir = TempDir::new("axum-example");
    let mut child = Command::new(example_binary())
        .arg("127.0.0.1:0")
        .current_dir(dir.path(""))
        .stdout(Stdio::piped())
        .spawn()
        .expect("start examples/axum (a plain `cargo test` builds it)");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let mut example = Example(child);
    let base = line
        .split_whitespace()
        .nth(2)
        .expect("listening on URL;")
        .trim_end_matches(';');
    let credentials: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path("axum-example.json")).unwrap())
            .unwrap();
    let text = |name: &str| credentials[name].as_str().unwrap().to_owned();
    let client = reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let get = |path: String| client.get(format!("{base}{path}")).send();
    let post = |path: &str, body: String| {
        client
            .post(format!("{base}{path}"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
    };

    assert_eq!(get("/healthz".into()).await.unwrap().status(), 200);
    assert_eq!(get("/readyz".into()).await.unwrap().status(), 200);

    // The browser: the sign-in form, then consent, then the redirect.
    let query = format!(
        "client_id={}&redirect_uri={}&state=s1",
        text("client_id"),
        encode(DEMO_REDIRECT_URI)
    );
    let page = get(format!("/auth/dialog?{query}"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let login = [
        ("action", "login"),
        ("query", &query),
        ("csrf", &hidden(&page, "csrf")),
        ("email", &text("email")),
        ("password", &text("password")),
    ];
    let signed_in = post("/auth/dialog", form(&login)).await.unwrap();
    assert_eq!(signed_in.status(), 303);
    let consent = get(format!("/auth/dialog?{query}"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(consent.contains("Demo App"), "{consent}");
    let allow = [
        ("action", "consent"),
        ("query", &query),
        ("csrf", &hidden(&consent, "csrf")),
        ("decision", "allow"),
    ];
    let redirect = post("/auth/dialog", form(&allow)).await.unwrap();
    assert_eq!(redirect.status(), 302);
    let location = redirect.headers()["location"].to_str().unwrap().to_owned();
    assert_eq!(param(&location, "state").as_deref(), Some("s1"));
    let code = param(&location, "code").expect("a code");

    // The app exchanges the code; a website form sends a conversion.
    let exchange = [
        ("grant_type", "authorization_code"),
        ("code", &code),
        ("client_id", &text("client_id")),
        ("client_secret", &text("client_secret")),
        ("redirect_uri", DEMO_REDIRECT_URI),
    ];
    let tokens = post("/auth/token", form(&exchange)).await.unwrap();
    assert_eq!(tokens.status(), 200);
    let tokens: Value = serde_json::from_str(&tokens.text().await.unwrap()).unwrap();
    assert_eq!(tokens["expires_in"], 86_400);
    let conversion = client
        .post(format!("{base}/platform/conversions?api_key={}", text("api_key")))
        .header("content-type", "application/json")
        .body(r#"{"event_type":"CONVERSION","event_family":"CDP","payload":{"conversion_identifier":"x","email":"a@example.com"}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(conversion.status(), 200);

    // Ctrl-C: the example drains, closes its store and exits by itself.
    let child = &mut example.0;
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    for _ in 0..100 {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the example did not stop within 10 s of Ctrl-C");
}
