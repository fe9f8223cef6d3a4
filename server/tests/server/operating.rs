//! Operating the service: `/healthz`, `/readyz` (which follows the
//! store: 503 while PostgreSQL refuses connections, 200 again after),
//! `/metrics` (values move with requests; no secret, e-mail or key ever
//! appears), `--metrics-listen`, and `X-Request-Id`.

use serde_json::json;

use crate::support::{Launch, Server, conversion_body, form};

/// The value of the sample `name` (with its labels, as written) on
/// `/metrics`, or 0 if absent.
async fn sample(server: &Server, name: &str) -> f64 {
    let text = server.get("/metrics", "").await.text();
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn health_and_readiness_answer_json() {
    let server = Launch::memory(&[]).start();
    let health = server.get("/healthz", "").await;
    assert_eq!(health.status, 200);
    assert_eq!(health.json(), json!({ "status": "ok" }));
    let ready = server.get("/readyz", "").await;
    assert_eq!(ready.status, 200);
    let body = ready.json();
    assert_eq!(body["status"], "ready");
    for store in ["tokens", "clients", "accounts", "api_keys", "events"] {
        assert_eq!(body["stores"][store], "ok", "{body}");
    }
}

#[tokio::test]
async fn every_answer_carries_a_request_id_that_the_log_line_has_too() {
    let server = Launch::memory(&[]).start();
    let reply = server.get("/healthz", "").await;
    let generated = reply.header("x-request-id").expect("an id").to_owned();
    assert!(generated.len() >= 16, "{generated}");
    let other = server.get("/healthz", "").await;
    assert_ne!(other.header("x-request-id"), Some(generated.as_str()));
    // A client's own well-formed id is kept, in the answer and the log.
    let request = server
        .client()
        .request(reqwest::Method::GET, "/no-such-page")
        .header("x-request-id", "client-7f3a.1");
    let reply = server.client().send(request).await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.header("x-request-id"), Some("client-7f3a.1"));
    server.wait_for_log("request_id=\"client-7f3a.1\"");
    // A malformed one is replaced.
    let request = server
        .client()
        .request(reqwest::Method::GET, "/healthz")
        .header("x-request-id", "not ok; <script>");
    let reply = server.client().send(request).await;
    let replaced = reply.header("x-request-id").unwrap();
    assert!(
        !replaced.contains(' ') && !replaced.contains('<'),
        "{replaced}"
    );
}

/// Asserts that `/metrics` of `server` lists each of `series` (a name with
/// its labels, as written) at zero.
async fn assert_listed_at_zero(server: &Server, series: &[String]) {
    let text = server.get("/metrics", "").await.text();
    for name in series {
        let value = text
            .lines()
            .find_map(|line| line.strip_prefix(name.as_str())?.strip_prefix(' '));
        assert_eq!(value, Some("0"), "{name} in:\n{text}");
    }
}

/// Every counter and histogram the library records, with each label value,
/// as `/metrics` writes them (a histogram by its `_count`).
fn every_series() -> Vec<String> {
    let mut series = Vec::new();
    for endpoint in [
        "token",
        "revoke",
        "introspect",
        "conversion",
        "event",
        "batch",
    ] {
        for outcome in [
            "accepted",
            "refused_validation",
            "refused_authentication",
            "refused_limit",
            "unavailable",
        ] {
            series.push(format!(
                r#"cg_requests_total{{endpoint="{endpoint}",outcome="{outcome}"}}"#
            ));
        }
    }
    for endpoint in ["conversion", "event", "batch"] {
        series.push(format!(
            r#"cg_events_recorded_total{{endpoint="{endpoint}"}}"#
        ));
    }
    series.push("cg_event_batch_size_count".to_owned());
    for (store, operation) in [
        ("events", "record"),
        ("api_keys", "find_api_key"),
        ("clients", "find_client"),
        ("tokens", "find_access_token"),
        ("tokens", "find_refresh_token"),
        ("tokens", "redeem_code"),
        ("tokens", "rotate_refresh_token"),
    ] {
        series.push(format!(
            r#"cg_store_operation_seconds_count{{store="{store}",operation="{operation}"}}"#
        ));
    }
    for grant_type in ["authorization_code", "refresh_token"] {
        series.push(format!(
            r#"cg_tokens_issued_total{{grant_type="{grant_type}"}}"#
        ));
    }
    for outcome in ["rotated", "kept", "grace_replay", "reuse_detected"] {
        series.push(format!(
            r#"cg_token_refreshes_total{{outcome="{outcome}"}}"#
        ));
    }
    series.push("cg_revocations_total".to_owned());
    series
}

#[tokio::test]
async fn metrics_list_every_series_at_zero_before_the_first_request() {
    let server = Launch::memory(&[]).start();
    assert_listed_at_zero(&server, &every_series()).await;
}

#[tokio::test]
async fn metrics_list_the_group_commit_of_the_store_in_use_at_zero() {
    let dir = conversion_gateway_testkit::TempDir::new("zero");
    let store = format!("sqlite:{}", dir.path("gateway.db").display());
    let key_file = dir.path("gateway.key").display().to_string();
    let server = Launch::with_args(&["--store", &store, "--key-file", &key_file]).start();
    let mut series = every_series();
    series.push(r#"cg_group_commit_size_count{store="sqlite"}"#.to_owned());
    series.push(r#"cg_group_commit_queue_depth{store="sqlite"}"#.to_owned());
    assert_listed_at_zero(&server, &series).await;
    let text = server.get("/metrics", "").await.text();
    assert!(!text.contains(r#"store="postgres""#), "{text}");
}

#[tokio::test]
async fn metric_values_move_as_requests_are_made() {
    let server = Launch::memory(&[]).start();
    let accepted = r#"cg_requests_total{endpoint="conversion",outcome="accepted"}"#;
    let refused = r#"cg_requests_total{endpoint="conversion",outcome="refused_authentication"}"#;
    let recorded = r#"cg_events_recorded_total{endpoint="conversion"}"#;
    let before = sample(&server, accepted).await;
    for n in 0..3 {
        let reply = server
            .convert(
                &server.demo.api_key,
                &conversion_body(&format!("m{n}@example.com")),
            )
            .await;
        assert_eq!(reply.status, 200);
    }
    assert_eq!(sample(&server, accepted).await, before + 3.0);
    assert_eq!(sample(&server, recorded).await, before + 3.0);
    let reply = server
        .convert("cgak_wrong", &conversion_body("x@example.com"))
        .await;
    assert_eq!(reply.status, 401);
    assert_eq!(sample(&server, refused).await, 1.0);
    let (_, refresh) = server.tokens().await;
    assert_eq!(server.refresh(&refresh).await.status, 200);
    let issued = r#"cg_tokens_issued_total{grant_type="authorization_code"}"#;
    assert_eq!(sample(&server, issued).await, 1.0);
    let rotated = r#"cg_token_refreshes_total{outcome="rotated"}"#;
    assert_eq!(sample(&server, rotated).await, 1.0);
    let text = server.get("/metrics", "").await;
    assert_eq!(
        text.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert!(
        text.text()
            .contains("cg_store_operation_seconds_bucket{store=\"events\",operation=\"record\""),
        "{}",
        text.text()
    );
}

/// The histograms that count (submissions per group commit, events per
/// batch) have buckets of counts, not of seconds: one conversion on the
/// default SQLite store is a group of one, in the bucket of 2 (which the
/// seconds buckets lack); a batch of three falls in the bucket of 5 and
/// not in that of 2.
#[tokio::test]
async fn counting_histograms_have_count_buckets() {
    let dir = conversion_gateway_testkit::TempDir::new("buckets");
    let store = format!("sqlite:{}", dir.path("gateway.db").display());
    let key_file = dir.path("gateway.key").display().to_string();
    let server = Launch::with_args(&["--store", &store, "--key-file", &key_file]).start();
    let event = conversion_body("counted@example.com");
    assert_eq!(
        server.convert(&server.demo.api_key, &event).await.status,
        200
    );
    let group = r#"cg_group_commit_size_bucket{store="sqlite",le="2"}"#;
    assert_eq!(sample(&server, group).await, 1.0);
    let (access, _) = server.tokens().await;
    let batch = json!([
        event,
        conversion_body("b@example.com"),
        conversion_body("c@example.com")
    ]);
    let reply = server
        .client()
        .post_json(
            "/platform/events/batch",
            Some(&format!("Bearer {access}")),
            &batch,
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let metrics = server.get("/metrics", "").await.text();
    assert!(
        metrics.contains("cg_event_batch_size_bucket{le=\"2\"} 0\n"),
        "{metrics}"
    );
    assert_eq!(
        sample(&server, r#"cg_event_batch_size_bucket{le="5"}"#).await,
        1.0
    );
}

#[tokio::test]
async fn no_secret_e_mail_or_key_appears_on_metrics_after_every_route() {
    let server = Launch::memory(&[]).start();
    let demo = server.demo.clone();
    // Every route: the dialog (sign-in and consent), the token endpoint,
    // a refresh, the event routes, introspection, revocation, the account
    // page, and refusals of each.
    let (access, refresh) = server.tokens().await;
    let bearer = format!("Bearer {access}");
    let event = conversion_body("secret-lead@example.com");
    assert_eq!(server.convert(&demo.api_key, &event).await.status, 200);
    let client = server.client();
    assert_eq!(
        client
            .post_json("/platform/events", Some(&bearer), &event)
            .await
            .status,
        200
    );
    assert_eq!(
        client
            .post_json("/platform/events/batch", Some(&bearer), &json!([event]))
            .await
            .status,
        200
    );
    let basic = format!(
        "Basic {}",
        base64_encode(&format!("{}:{}", demo.client_id, demo.client_secret))
    );
    let introspect = client
        .post(
            "/auth/introspect",
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("authorization", &basic),
            ],
            form(&[("token", &access)]),
        )
        .await;
    assert_eq!(introspect.status, 200);
    assert_eq!(server.refresh(&refresh).await.status, 200);
    let revoke = client
        .post(
            "/auth/revoke",
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("authorization", &bearer),
            ],
            form(&[("token", &access)]),
        )
        .await;
    assert_eq!(revoke.status, 200);
    assert_eq!(server.get("/account/apps", "").await.status, 200);
    let _ = server.convert("cgak_not_a_key", &event).await;
    let metrics = server.get("/metrics", "").await.text();
    assert!(metrics.contains("cg_requests_total"), "{metrics}");
    for secret in [
        demo.client_secret.as_str(),
        demo.api_key.as_str(),
        demo.password.as_str(),
        demo.email.as_str(),
        access.as_str(),
        refresh.as_str(),
        "secret-lead@example.com",
        "cgak_not_a_key",
        &demo.client_id,
    ] {
        assert!(!metrics.contains(secret), "{secret:?} on /metrics");
    }
}

fn base64_encode(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[tokio::test]
async fn metrics_listen_serves_them_apart_from_the_api() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .unwrap()
        .port();
    let address = format!("127.0.0.1:{port}");
    let server = Launch::memory(&["--metrics-listen", &address]).start();
    assert_eq!(
        server.get("/metrics", "").await.status,
        404,
        "not beside the API"
    );
    let reply = reqwest::get(format!("http://{address}/metrics"))
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
}

/// A PostgreSQL database of a test's own (from `DATABASE_URL`), so that
/// refusing its connections touches nothing else.
#[cfg(feature = "postgres")]
struct OwnDatabase {
    /// A connection to `DATABASE_URL`'s database, for the test's own SQL.
    admin: sqlx::PgPool,
    /// The database's name.
    name: String,
    /// `DATABASE_URL` without its database: `postgres://USER@HOST:PORT`.
    server: String,
}

#[cfg(feature = "postgres")]
impl OwnDatabase {
    async fn create(prefix: &str) -> Self {
        use std::str::FromStr as _;
        let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| {
            panic!(
                "DATABASE_URL is not set: this test needs a PostgreSQL server. Start one, e.g.\n    \
                 docker run --rm -e POSTGRES_HOST_AUTH_METHOD=trust -e POSTGRES_DB=test -p 5432:5432 postgres:16\n\
                 then export DATABASE_URL=postgres://postgres@127.0.0.1:5432/test"
            )
        });
        let name = format!(
            "{prefix}_{}",
            conversion_gateway::random_uuid(&conversion_gateway::OsRandom).simple()
        );
        let admin = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect_with(sqlx::postgres::PgConnectOptions::from_str(&url).unwrap())
            .await
            .expect("connect to DATABASE_URL");
        let server = url
            .split_once('?')
            .map_or(url.as_str(), |(url, _)| url)
            .rsplit_once('/')
            .map_or(url.as_str(), |(server, _)| server)
            .to_owned();
        let database = Self {
            admin,
            name,
            server,
        };
        database
            .run(&format!("CREATE DATABASE {}", database.name))
            .await;
        database
    }

    /// The `--store` address of the database, through `server` (the
    /// address of `DATABASE_URL`'s server, or of a proxy to it).
    fn store(&self, server: &str) -> String {
        format!("{server}/{}", self.name)
    }

    /// `USER@HOST:PORT` of the server.
    fn authority(&self) -> &str {
        self.server.rsplit_once("//").map_or("", |(_, a)| a)
    }

    /// The user (and password, if any) the server is reached as.
    fn user(&self) -> &str {
        self.authority()
            .rsplit_once('@')
            .map_or("postgres", |(user, _)| user)
    }

    /// `host:port` of the server (PostgreSQL's port if none is named).
    fn host_and_port(&self) -> String {
        let host = self
            .authority()
            .rsplit_once('@')
            .map_or(self.authority(), |(_, host)| host);
        if host.contains(':') {
            host.to_owned()
        } else {
            format!("{host}:5432")
        }
    }

    async fn run(&self, sql: &str) {
        sqlx::query(sql)
            .execute(&self.admin)
            .await
            .expect("admin SQL");
    }

    async fn drop_database(self) {
        self.run(&format!("DROP DATABASE {} WITH (FORCE)", self.name))
            .await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_postgresql_refusing_connections_and_coming_back() {
    let database = OwnDatabase::create("cg_ready").await;
    let name = database.name.clone();
    let server = Launch::memory(&["--store", &database.store(&database.server)]).start();
    assert_eq!(server.get("/readyz", "").await.status, 200);

    database
        .run(&format!(
            "ALTER DATABASE {name} WITH ALLOW_CONNECTIONS false"
        ))
        .await;
    database
        .run(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
        ))
        .await;
    let refused = server.get("/readyz", "").await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    let body = refused.json();
    assert_eq!(body["status"], "unavailable");
    assert!(
        body["failed"]
            .as_array()
            .is_some_and(|f| f.contains(&json!("tokens"))),
        "{body}"
    );
    assert!(!refused.text().contains("postgres://") && !refused.text().contains(&name));

    database
        .run(&format!(
            "ALTER DATABASE {name} WITH ALLOW_CONNECTIONS true"
        ))
        .await;
    assert_eq!(server.get("/readyz", "").await.status, 200, "ready again");
    drop(server);
    database.drop_database().await;
}

/// PostgreSQL down for real (its port refuses connections, and the ones
/// open are cut): a conversion is answered 503 within the store's acquire
/// timeout (5 s by default; the retry of a group whose connection was lost
/// does not wait twice), nothing hangs, and intake resumes by itself once
/// the database is back.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_down_is_answered_503_within_the_acquire_timeout_and_intake_resumes() {
    use std::time::{Duration, Instant};

    use crate::proxy::{Admit, Proxy};

    let database = OwnDatabase::create("cg_down").await;
    let proxy = Proxy::start(&database.host_and_port()).await;
    let via_proxy = format!("postgres://{}@{}", database.user(), proxy.address);
    let server = Launch::memory(&["--store", &database.store(&via_proxy)]).start();
    let event = conversion_body("down@example.com");
    let first = server.convert(&server.demo.api_key, &event).await;
    assert_eq!(first.status, 200, "{}", first.text());

    proxy.admit(Admit::Refused);
    proxy.cut.notify_waiters();
    let started = Instant::now();
    let reply = server.convert(&server.demo.api_key, &event).await;
    reply.assert_error(503, "SERVICE_UNAVAILABLE");
    assert!(reply.header("retry-after").is_some(), "{reply:?}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "answered in {:?}",
        started.elapsed()
    );
    // A burst while it is down: more calls than one group takes queue
    // behind the group that waits for a connection, and none of them
    // waits for a second acquire timeout.
    let mut burst = tokio::task::JoinSet::new();
    for n in 0..400 {
        let client = server.client();
        let path = format!("/platform/conversions?api_key={}", server.demo.api_key);
        let body = conversion_body(&format!("burst{n}@example.com"));
        burst.spawn(async move {
            let started = Instant::now();
            let reply = client.post_json(&path, None, &body).await;
            (reply.status, started.elapsed())
        });
    }
    let mut slowest = Duration::ZERO;
    while let Some(done) = burst.join_next().await {
        let (status, took) = done.expect("a request");
        assert_eq!(status, 503);
        slowest = slowest.max(took);
    }
    assert!(
        slowest < Duration::from_secs(8),
        "the slowest took {slowest:?}"
    );

    proxy.admit(Admit::All);
    let deadline = Instant::now() + Duration::from_secs(20);
    let resumed = loop {
        let reply = server.convert(&server.demo.api_key, &event).await;
        if reply.status == 200 {
            break reply;
        }
        assert!(Instant::now() < deadline, "intake never resumed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // The acknowledged events are stored, the refused ones are not.
    let acknowledged: std::collections::BTreeSet<String> = [first, resumed]
        .iter()
        .map(|reply| {
            reply.json()["event_uuid"]
                .as_str()
                .expect("a uuid")
                .to_owned()
        })
        .collect();
    let events = sqlx::PgPool::connect(&database.store(&database.server))
        .await
        .expect("connect to the test's database");
    let stored: std::collections::BTreeSet<String> =
        sqlx::query_scalar("SELECT event_uuid::text FROM events")
            .fetch_all(&events)
            .await
            .expect("the events")
            .into_iter()
            .collect();
    assert_eq!(stored, acknowledged);
    events.close().await;
    drop(server);
    database.drop_database().await;
}
