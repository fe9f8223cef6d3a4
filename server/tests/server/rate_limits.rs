//! The service's rate-limit flags, through its binary on loopback:
//! `--limit-per-lead`, `--limit-per-account`, `--limit-per-credential`,
//! `--rate-limit-store` (two instances sharing one Redis enforce one
//! limit) and `--rate-limit-failure`.

use crate::support::{Launch, Server, conversion_body};

/// The Redis of `REDIS_URL`; fails with start-up instructions without it.
#[cfg(feature = "external-tests")]
fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| {
        panic!(
            "REDIS_URL is not set: the shared rate limit's tests need a Redis server. Start one, e.g.\n    \
             docker run --rm -p 6379:6379 redis:7\n\
             (or install your distribution's redis-server package), then\n    \
             export REDIS_URL=redis://127.0.0.1:6379"
        )
    })
}

async fn convert(server: &Server, email: &str) -> crate::support::Reply {
    server
        .convert(&server.demo.api_key, &conversion_body(email))
        .await
}

#[tokio::test]
async fn the_lead_limit_flag_answers_429_with_its_headers() {
    let server = Launch::memory(&["--limit-per-lead", "3/1m"]).start();
    for _ in 0..3 {
        assert_eq!(convert(&server, "ana@example.com").await.status, 200);
    }
    let refused = convert(&server, "ana@example.com").await;
    refused.assert_error(429, "RATE_LIMIT_EXCEEDED");
    assert_eq!(
        refused.header("ratelimit-policy"),
        Some("\"lead\";q=3;w=60")
    );
    let retry_after: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert!(refused.header("ratelimit").is_some());
    let body = refused.json();
    assert_eq!(body["max"], 3);
    assert_eq!(body["usage"], 3);
    // CORS still lets a page read the refusal.
    assert!(refused.header("access-control-allow-origin").is_some());
    assert_eq!(convert(&server, "bo@example.com").await.status, 200);
}

#[tokio::test]
async fn the_lead_limit_is_on_by_default_and_off_on_request() {
    let limited = Launch::memory(&[]).start();
    for _ in 0..120 {
        assert_eq!(convert(&limited, "ana@example.com").await.status, 200);
    }
    convert(&limited, "ana@example.com")
        .await
        .assert_error(429, "RATE_LIMIT_EXCEEDED");
    let open = Launch::memory(&["--limit-per-lead", "off"]).start();
    for _ in 0..130 {
        assert_eq!(convert(&open, "ana@example.com").await.status, 200);
    }
}

#[tokio::test]
async fn the_account_and_credential_flags_limit_their_counts() {
    let server =
        Launch::memory(&["--limit-per-lead", "off", "--limit-per-account", "2/1h"]).start();
    assert_eq!(convert(&server, "a@example.com").await.status, 200);
    assert_eq!(convert(&server, "b@example.com").await.status, 200);
    let refused = convert(&server, "c@example.com").await;
    refused.assert_error(429, "RATE_LIMIT_EXCEEDED");
    assert_eq!(
        refused.header("ratelimit-policy"),
        Some("\"account\";q=2;w=3600")
    );

    let server =
        Launch::memory(&["--limit-per-lead", "off", "--limit-per-credential", "1/1m"]).start();
    assert_eq!(convert(&server, "a@example.com").await.status, 200);
    let refused = convert(&server, "b@example.com").await;
    refused.assert_error(429, "RATE_LIMIT_EXCEEDED");
    assert_eq!(
        refused.header("ratelimit-policy"),
        Some("\"credential\";q=1;w=60")
    );
    assert!(
        !refused.text().contains(&server.demo.api_key),
        "no key in the answer"
    );
}

#[tokio::test]
async fn bad_limit_flags_stop_the_server_with_a_message() {
    for args in [
        ["--limit-per-lead", "120"],
        ["--limit-per-account", "10/1d"],
        ["--rate-limit-store", "memcached://x"],
        ["--rate-limit-failure", "sometimes"],
    ] {
        let (status, stderr) = Launch::memory(&args).fail();
        assert_eq!(status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(args[0]), "{args:?}: {stderr}");
    }
}

#[cfg(feature = "external-tests")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_sharing_redis_admit_exactly_20_of_64_concurrent_requests() {
    use std::sync::Arc;

    use conversion_gateway_testkit::TempDir;

    let redis = redis_url();
    let dir = TempDir::new("rate-limit-redis");
    let database = format!("sqlite:{}", dir.path("gateway.db").display());
    let key = dir.path("gateway.key").display().to_string();
    let args = [
        "--store",
        database.as_str(),
        "--key-file",
        key.as_str(),
        "--limit-per-lead",
        "20/1m",
        "--rate-limit-store",
        redis.as_str(),
    ];
    // One store, one key: the same account and API key on both.
    let first = Arc::new(Launch::with_args(&args).start());
    let second = Arc::new(Launch::with_args(&args).start());
    assert_eq!(first.demo.api_key, second.demo.api_key);
    let tasks: Vec<_> = (0..64)
        .map(|n| {
            let server = if n % 2 == 0 {
                first.clone()
            } else {
                second.clone()
            };
            tokio::spawn(
                async move { convert(&server, "shared@example.com").await.status.as_u16() },
            )
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        match task.await.unwrap() {
            200 => admitted += 1,
            429 => {}
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!(admitted, 20);
}

#[tokio::test]
async fn an_unreachable_redis_fails_open_or_closed_as_the_flag_says() {
    // Nothing listens on port 1.
    let open = Launch::memory(&["--rate-limit-store", "redis://127.0.0.1:1"]).start();
    for _ in 0..3 {
        assert_eq!(convert(&open, "ana@example.com").await.status, 200);
    }
    let logs = open.wait_for_log("the Redis rate limiter failed");
    assert_eq!(
        logs.matches("the Redis rate limiter failed").count(),
        1,
        "logged once per outage:\n{logs}"
    );
    let closed = Launch::memory(&[
        "--rate-limit-store",
        "redis://127.0.0.1:1",
        "--rate-limit-failure",
        "closed",
    ])
    .start();
    let refused = convert(&closed, "ana@example.com").await;
    refused.assert_error(503, "SERVICE_UNAVAILABLE");
    assert_eq!(refused.header("retry-after"), Some("1"));
}
