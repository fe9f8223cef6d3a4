//! The service's process through its binary and command line: where
//! its files go, what it logs and never logs, its key file and its
//! permission warnings, its flags, restarts on one SQLite file and the
//! periodic purge. Its connections are `connections.rs`'s.

use std::path::Path;

use conversion_gateway_testkit::TempDir;

use crate::support::{BASE_URL, DEMO_REDIRECT_URI, Launch, conversion_body, form};

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

// --- the command line ---------------------------------------------------------

#[test]
fn help_prints_the_usage_and_exits_successfully() {
    let output = std::process::Command::new(crate::support::server_binary())
        .arg("--help")
        .output()
        .expect("run the server");
    assert!(output.status.success(), "{:?}", output.status);
    let usage = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--listen ADDR",
        "--base-url URL",
        "--store STORE",
        "--key-file PATH",
        "--demo-credentials PATH",
        "--header-timeout SECS",
        "--first-byte-timeout SECS",
        "--first-byte-timeout-under-pressure SECS",
        "--max-connections N",
        "--shutdown-timeout SECS",
        "--refresh-policy POLICY",
        "CONVERSION_GATEWAY_KEY",
    ] {
        assert!(usage.contains(flag), "{flag} not in {usage}");
    }
}

#[test]
fn connection_flags_refuse_zero_and_anything_but_a_number() {
    for bad in [
        &["--max-connections", "0"][..],
        &["--header-timeout", "-1"],
        &["--first-byte-timeout", "0"],
        &["--first-byte-timeout-under-pressure", "1.5"],
        &["--shutdown-timeout", "soon"],
        &["--header-timeout"],
    ] {
        let (status, stderr) = Launch::memory(bad).fail();
        assert_eq!(status.code(), Some(2), "{bad:?} was accepted: {stderr}");
        assert!(stderr.starts_with("error: "), "{stderr}");
        assert!(stderr.contains("Usage:"), "{stderr}");
    }
}

#[test]
fn the_refresh_policy_flag_refuses_unknown_policies() {
    for bad in [&["--refresh-policy", "strict"][..], &["--refresh-policy"]] {
        let (status, stderr) = Launch::memory(bad).fail();
        assert_eq!(status.code(), Some(2), "{bad:?} was accepted: {stderr}");
        assert!(stderr.contains("--refresh-policy"), "{stderr}");
    }
}

#[tokio::test]
async fn the_server_runs_with_the_refresh_policy_it_was_given() {
    // reuse: a refresh answers the refresh token it was given.
    let server = Launch::memory(&["--refresh-policy", "reuse"]).start();
    let (_, refresh_token) = server.tokens().await;
    let reply = server.refresh(&refresh_token).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["refresh_token"], refresh_token.as_str());
    // The default (adaptive) and rotate: a new one.
    for args in [&[][..], &["--refresh-policy=rotate"]] {
        let server = Launch::memory(args).start();
        let (_, refresh_token) = server.tokens().await;
        let reply = server.refresh(&refresh_token).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let renewed = reply.json()["refresh_token"].clone();
        assert_ne!(renewed, refresh_token.as_str(), "{args:?}");
    }
}

// --- files -----------------------------------------------------------------------

#[tokio::test]
async fn demo_credentials_default_to_a_file_beside_the_database_or_in_the_working_directory() {
    let dir = TempDir::new("demo-defaults");
    // No --store: sqlite:conversion-gateway.db in the working directory.
    let (_, logs) = Launch::bare(dir.root(), &[]).start().stop();
    assert!(
        dir.path("conversion-gateway.db.demo.json").is_file(),
        "{logs}"
    );
    assert!(dir.path("conversion-gateway.db.key").is_file(), "{logs}");
    let (_, logs) = Launch::bare(dir.root(), &["--store", "sqlite:sub.db"])
        .start()
        .stop();
    assert!(dir.path("sub.db.demo.json").is_file(), "{logs}");
    let (_, logs) = Launch::bare(dir.root(), &["--store", "memory"])
        .start()
        .stop();
    assert!(dir.path("conversion-gateway.demo.json").is_file(), "{logs}");
    let (_, logs) = Launch::bare(
        dir.root(),
        &["--store", "memory", "--demo-credentials", "demo.json"],
    )
    .start()
    .stop();
    assert!(dir.path("demo.json").is_file(), "{logs}");
}

#[tokio::test]
async fn the_demo_credentials_go_to_a_private_file_and_never_to_the_log() {
    let dir = TempDir::new("demo-file");
    let database = dir.path("gateway.db");
    // Without --demo-credentials.
    let server = Launch::bare(
        dir.root(),
        &["--store", &format!("sqlite:{}", database.display())],
    )
    .start();
    let (status, logs) = server.stop();
    assert!(status.success(), "{status}: {logs}");

    let file = dir.path("gateway.db.demo.json");
    #[cfg(unix)]
    assert_eq!(mode(&file), 0o600, "only the owner may read {file:?}");
    let demo: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(
        logs.contains(&format!("path={}", file.display())),
        "the log says where: {logs}"
    );
    for field in ["client_secret", "api_key", "password"] {
        let secret = demo[field].as_str().expect("a demo credential");
        assert!(secret.len() >= 16, "{field} is {secret:?}");
        assert!(!logs.contains(secret), "the {field} is in the log: {logs}");
    }
    assert!(logs.contains("stopped"), "{logs}");
}

#[cfg(unix)]
#[tokio::test]
async fn a_key_file_others_can_read_is_warned_about_at_start_by_path_only() {
    let dir = TempDir::new("exposed-key");
    let key_file = dir.path("gateway.key");
    let hex = "5a".repeat(32);
    std::fs::write(&key_file, format!("{hex}\n")).unwrap();
    set_mode(&key_file, 0o644);
    let server = Launch::with_args(&[
        "--store",
        &format!("sqlite:{}", dir.path("gateway.db").display()),
        "--key-file",
        key_file.to_str().unwrap(),
    ])
    .start();
    let (_, logs) = server.stop();
    let warning = logs
        .lines()
        .find(|line| line.contains("WARN") && line.contains(key_file.to_str().unwrap()))
        .unwrap_or_else(|| panic!("no warning about the key file in {logs}"));
    assert!(warning.contains("mode=644"), "{warning}");
    assert!(warning.contains("chmod 600"), "{warning}");
    assert!(!logs.contains(&hex), "the key is in the log: {logs}");
    assert_eq!(mode(&key_file), 0o644, "warned about, not changed");
}

#[cfg(unix)]
#[tokio::test]
async fn an_exposed_database_is_warned_about_at_start() {
    let dir = TempDir::new("exposed-db");
    let database = dir.path("gateway.db");
    let store = format!("sqlite:{}", database.display());
    let (_, logs) = Launch::with_args(&["--store", &store]).start().stop();
    assert!(!logs.contains("chmod 600"), "{logs}");
    set_mode(&database, 0o664);
    let (_, logs) = Launch::with_args(&["--store", &store]).start().stop();
    let warning = logs
        .lines()
        .find(|line| line.contains("WARN") && line.contains("chmod 600"))
        .unwrap_or_else(|| panic!("no warning in {logs}"));
    assert!(warning.contains("gateway.db"), "{warning}");
    assert!(warning.contains("mode=664"), "{warning}");
}

// --- restarts and the demo data ---------------------------------------------------

#[tokio::test]
async fn a_restart_on_the_same_sqlite_file_keeps_the_demo_credentials_and_tokens() {
    let dir = TempDir::new("restart");
    let database = dir.path("gateway.db");
    let key_path = dir.path("gateway.db.key");
    let store = format!("sqlite:{}", database.display());
    let launch = || Launch::with_args(&["--store", &store, "--base-url", BASE_URL]);

    let first = launch().start();
    #[cfg(unix)]
    assert_eq!(mode(&key_path), 0o600, "the key file is its owner's only");
    let (access_token, refresh_token) = first.tokens().await;
    let demo = first.demo.clone();
    let (status, logs) = first.stop();
    assert!(status.success(), "{status}: {logs}");
    assert!(logs.contains("created a key file"), "{logs}");

    let second = launch().start();
    assert!(
        second.logs().contains("read from the key file"),
        "{}",
        second.logs()
    );
    assert_eq!(second.demo, demo, "the same demo credentials");
    assert_eq!(demo.email, "demo@example.com");
    assert_eq!(demo.redirect_uri, DEMO_REDIRECT_URI);
    assert_eq!(demo.base_url, BASE_URL);

    let bearer = format!("Bearer {access_token}");
    let reply = second
        .post_json(
            "/platform/events",
            Some(&bearer),
            &conversion_body("a@example.com"),
        )
        .await;
    assert_eq!(reply.status, 200, "the access token survived the restart");
    let reply = second.refresh(&refresh_token).await;
    assert_eq!(reply.status, 200, "and the refresh token: {}", reply.text());
    let reply = second
        .convert(&demo.api_key, &conversion_body("a@example.com"))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let _ = second.sign_in(&second.dialog_query("")).await;
    second.stop();

    // Seeding again added nothing: one account, one API key.
    let (store, gateway) = crate::support::sqlite_gateway(&database, &key_path).await;
    let account = gateway
        .find_account_by_email(&demo.email)
        .await
        .unwrap()
        .expect("the demo account");
    let keys = gateway.list_api_keys(account.id).await.unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(account.custom_fields, ["plan", "source"]);
    store.close().await;
}

#[tokio::test]
async fn the_demo_data_is_derived_from_the_key() {
    let dir = TempDir::new("derived");
    let key = dir.path("one.key");
    std::fs::write(&key, "42".repeat(32)).unwrap();
    let other_key = dir.path("other.key");
    std::fs::write(&other_key, "17".repeat(32)).unwrap();
    let with_key = |key: &Path| {
        Launch::memory(&["--key-file", key.to_str().unwrap()])
            .start()
            .demo
            .clone()
    };
    // Two stores, one key: the same credentials.
    let first = with_key(&key);
    assert_eq!(with_key(&key), first);
    // Another key makes other credentials.
    let other = with_key(&other_key);
    assert_ne!(other.client_secret, first.client_secret);
    assert_ne!(other.password, first.password);
    // And refuses a store seeded with the first.
    let database = format!("sqlite:{}", dir.path("gateway.db").display());
    Launch::with_args(&["--store", &database, "--key-file", key.to_str().unwrap()])
        .start()
        .stop();
    let (status, stderr) = Launch::with_args(&[
        "--store",
        &database,
        "--key-file",
        other_key.to_str().unwrap(),
    ])
    .fail();
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("created with another server key"),
        "{stderr}"
    );
}

// --- logs ---------------------------------------------------------------------------

#[tokio::test]
async fn logs_name_method_path_status_and_never_a_secret() {
    let server = Launch::memory(&[]).start();
    let query = server.dialog_query("");
    let _ = server.sign_in(&query).await;
    let code = server.code().await;
    // One production client sends the code in the query string.
    let secret = form(&[
        ("client_id", &server.demo.client_id),
        ("client_secret", &server.demo.client_secret),
    ]);
    let reply = server
        .post(
            &format!("/auth/token?code={code}"),
            &[("content-type", "application/x-www-form-urlencoded")],
            secret,
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let tokens = reply.json();
    let access_token = tokens["access_token"].as_str().unwrap();
    let refresh_token = tokens["refresh_token"].as_str().unwrap();
    let bearer = format!("Bearer {access_token}");
    server
        .post_json(
            "/platform/events",
            Some(&bearer),
            &conversion_body("a@example.com"),
        )
        .await;
    server.refresh(refresh_token).await;
    server
        .convert(&server.demo.api_key, &conversion_body("a@example.com"))
        .await;
    server
        .convert("cgak_guessed", &conversion_body("a@example.com"))
        .await;
    let demo = server.demo.clone();
    let (_, logs) = server.stop();

    assert!(
        logs.contains("method=POST path=\"/platform/conversions\" status=200 latency_ms="),
        "{logs}"
    );
    // Milliseconds to the microsecond, as a decimal: never the binary
    // rounding of a nanosecond count (`0.015489000000000001`).
    for latency in logs.split("latency_ms=").skip(1) {
        let number = latency.split_whitespace().next().unwrap_or_default();
        let decimals = number
            .split_once('.')
            .map_or(0, |(_, fraction)| fraction.len());
        assert!(
            number.parse::<f64>().is_ok() && decimals <= 3,
            "latency_ms={number}"
        );
    }
    assert!(
        logs.contains("method=POST path=\"/platform/conversions\" status=401"),
        "{logs}"
    );
    assert!(logs.contains("path=\"/auth/token\" status=200"), "{logs}");
    assert!(
        logs.contains("method=GET path=\"/auth/dialog\" status=200"),
        "{logs}"
    );
    for secret in [
        demo.api_key.as_str(),
        "cgak_guessed",
        "api_key",
        demo.client_secret.as_str(),
        demo.password.as_str(),
        code.as_str(),
        access_token,
        refresh_token,
        "cg_session",
    ] {
        assert!(!logs.contains(secret), "{secret} in {logs}");
    }
}

// --- the periodic purge ------------------------------------------------------------

#[tokio::test]
async fn the_server_purges_expired_records_at_start_and_periodically() {
    use std::sync::Arc;

    use conversion_gateway::{
        Account, ClientRegistration, CodeLookup, ManualClock, OsRandom, TokenStore as _,
    };

    let dir = TempDir::new("purge");
    let database = dir.path("gateway.db");
    let key_path = dir.path("gateway.key");
    std::fs::write(&key_path, "3c".repeat(32)).unwrap();
    // A code issued 30 days ago, left in the store.
    let (store, gateway) = crate::support::sqlite_gateway(&database, &key_path).await;
    let long_ago = time::OffsetDateTime::now_utc() - time::Duration::days(30);
    let gateway = gateway.with_clock(Arc::new(ManualClock::new(long_ago)));
    let (client, _) = gateway
        .register_client(ClientRegistration::new("App", ["https://app.example/cb"]))
        .await
        .unwrap();
    let account = Account::new("Acme", "owner@acme.example", &OsRandom);
    gateway.create_account(&account).await.unwrap();
    let request = gateway
        .authorization_request(&format!(
            "client_id={}&redirect_uri=https%3A%2F%2Fapp.example%2Fcb",
            client.id
        ))
        .await
        .unwrap();
    let approval = gateway.approve(&request, account.id).await.unwrap();
    let hasher = conversion_gateway::SecretHasher::new([0x3c; 32]);
    let hash = approval.code().hash(&hasher);
    let found = store.find_code(&hash).await.unwrap();
    assert!(matches!(found, CodeLookup::Unused(_)), "{found:?}");
    store.close().await;

    // The purge runs at start, then every ten minutes.
    let server = Launch::with_args(&[
        "--store",
        &format!("sqlite:{}", database.display()),
        "--key-file",
        key_path.to_str().unwrap(),
    ])
    .start();
    let logs = server.wait_for_log("purged expired records");
    let line = logs
        .lines()
        .find(|line| line.contains("purged expired records"))
        .unwrap();
    assert!(line.contains("tokens=1"), "{line}");
    server.stop();
    let (store, _) = crate::support::sqlite_gateway(&database, &key_path).await;
    let found = store.find_code(&hash).await.unwrap();
    assert_eq!(found, CodeLookup::NotFound);
    store.close().await;
}
