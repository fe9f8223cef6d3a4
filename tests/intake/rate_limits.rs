//! Fair use: the per-lead, per-account and per-credential limits, the 429
//! answer, batches charged whole, replays not charged, and exact counts
//! under concurrency on the in-process limiter.

use std::sync::Arc;

use conversion_gateway::{
    Admission, Charge, HttpAnswer, Limit, LimitKind, MemoryRateLimiter, RateLimiter, RateLimits,
    RequestParts,
};
use conversion_gateway_testkit::*;
use serde_json::json;
use time::Duration;

/// A fixture with `limits`, and an API key of its account.
struct Limited {
    f: Fixture,
    api_key: String,
}

impl Limited {
    async fn new(adjust: impl FnOnce(&mut RateLimits)) -> Self {
        let mut limits = RateLimits::default();
        adjust(&mut limits);
        let f = Fixture::with_config(|config| config.rate_limits = limits).await;
        let (_, key) = f
            .gateway
            .issue_api_key(f.account.id, "website")
            .await
            .unwrap();
        Self {
            f,
            api_key: key.expose().to_owned(),
        }
    }

    async fn convert_with(&self, api_key: &str, email: &str, key: Option<&str>) -> HttpAnswer {
        let query = format!("api_key={api_key}");
        let body = conversion_body(email).to_string();
        let outcome = self
            .f
            .gateway
            .record_conversion(&RequestParts {
                query: &query,
                content_type: Some("application/json"),
                authorization: None,
                idempotency_key: key,
                body: body.as_bytes(),
            })
            .await;
        self.f.gateway.answer(outcome)
    }

    async fn convert(&self, email: &str) -> HttpAnswer {
        self.convert_with(&self.api_key, email, None).await
    }

    async fn batch(&self, token: &str, emails: &[&str]) -> HttpAnswer {
        let events: Vec<_> = emails.iter().map(|email| conversion_body(email)).collect();
        let body = serde_json::to_vec(&events).unwrap();
        let authorization = format!("Bearer {token}");
        let outcome = self
            .f
            .gateway
            .record_event_batch(&RequestParts {
                query: "",
                content_type: Some("application/json"),
                authorization: Some(&authorization),
                idempotency_key: None,
                body: &body,
            })
            .await;
        self.f.gateway.answer(outcome)
    }
}

fn limit(text: &str) -> Option<Limit> {
    Some(text.parse().unwrap())
}

#[tokio::test]
async fn a_lead_gets_120_events_a_day_by_default_then_429() {
    let t = Limited::new(|_| {}).await;
    for n in 0..120 {
        assert_eq!(t.convert("ana@example.com").await.status, 200, "event {n}");
    }
    let refused = t.convert("ana@example.com").await;
    assert_error(&refused, 429, "RATE_LIMIT_EXCEEDED");
    // Another lead, and the same lead in another case, are other counts...
    assert_eq!(t.convert("bo@example.com").await.status, 200);
    assert_error(
        &t.convert("ANA@example.com").await,
        429,
        "RATE_LIMIT_EXCEEDED",
    );
    // ...and the window ends 24 hours after the lead's first event.
    t.f.clock.advance(Duration::hours(24) - Duration::SECOND);
    assert_error(
        &t.convert("ana@example.com").await,
        429,
        "RATE_LIMIT_EXCEEDED",
    );
    t.f.clock.advance(Duration::SECOND);
    assert_eq!(t.convert("ana@example.com").await.status, 200);
}

#[tokio::test]
async fn the_429_carries_retry_after_the_ratelimit_fields_and_the_real_limiters_body() {
    let t = Limited::new(|limits| limits.per_lead = limit("2/1m")).await;
    assert_eq!(t.convert("ana@example.com").await.status, 200);
    t.f.clock.advance(Duration::seconds(15));
    assert_eq!(t.convert("ana@example.com").await.status, 200);
    let refused = t.convert("ana@example.com").await;
    assert_error(&refused, 429, "RATE_LIMIT_EXCEEDED");
    assert_eq!(refused.header("retry-after"), Some("45"));
    assert_eq!(
        refused.header("ratelimit-policy"),
        Some("\"lead\";q=2;w=60")
    );
    assert_eq!(refused.header("ratelimit"), Some("\"lead\";r=0;t=45"));
    let body = body(&refused);
    assert_eq!(body["max"], 2);
    assert_eq!(body["usage"], 2);
    assert_eq!(body["remaining_time"], 45);
    assert_eq!(
        body["error"],
        "the lead limit of 2 events per 60 s is exceeded for the contact ana@example.com"
    );
    assert!(
        body["error_message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Too many requests")),
        "{body}"
    );
    assert!(
        !body.to_string().contains(&t.api_key),
        "no secret in {body}"
    );
}

#[tokio::test]
async fn a_batch_is_charged_per_event_and_refused_whole() {
    let t = Limited::new(|limits| limits.per_lead = limit("5/1h")).await;
    let (access, _) = t.f.tokens().await;
    let three = ["ana@example.com"; 3];
    assert_eq!(t.batch(&access, &three).await.status, 200);
    let before =
        t.f.stores
            .events
            .find_event(uuid::Uuid::nil())
            .await
            .unwrap();
    assert!(before.is_none());
    // Three more for ana would make six: the whole batch is refused, the
    // events of other leads in it included, and nothing is recorded.
    let mixed = [
        "bo@example.com",
        "ana@example.com",
        "ana@example.com",
        "ana@example.com",
    ];
    let refused = t.batch(&access, &mixed).await;
    assert_error(&refused, 429, "RATE_LIMIT_EXCEEDED");
    assert_eq!(body(&refused)["usage"], 3);
    // Bo was not charged for the refused batch: five more fit for him.
    assert_eq!(t.batch(&access, &["bo@example.com"; 5]).await.status, 200);
    // Two more fit for ana.
    assert_eq!(t.batch(&access, &["ana@example.com"; 2]).await.status, 200);
    assert_error(
        &t.batch(&access, &["ana@example.com"]).await,
        429,
        "RATE_LIMIT_EXCEEDED",
    );
}

#[tokio::test]
async fn a_replay_is_answered_from_its_record_without_a_charge() {
    let t = Limited::new(|limits| limits.per_lead = limit("2/1h")).await;
    let first = t
        .convert_with(&t.api_key, "ana@example.com", Some("retry-1"))
        .await;
    assert_eq!(first.status, 200);
    for _ in 0..5 {
        let replay = t
            .convert_with(&t.api_key, "ana@example.com", Some("retry-1"))
            .await;
        assert_eq!(replay.status, 200);
        assert_eq!(replay.header("idempotent-replayed"), Some("true"));
        assert_eq!(body(&replay)["event_uuid"], body(&first)["event_uuid"]);
    }
    assert_eq!(
        t.convert("ana@example.com").await.status,
        200,
        "one unit left"
    );
    assert_error(
        &t.convert("ana@example.com").await,
        429,
        "RATE_LIMIT_EXCEEDED",
    );
    // A replay of an accepted event is still answered once the limit is
    // reached: it records nothing.
    let replay = t
        .convert_with(&t.api_key, "ana@example.com", Some("retry-1"))
        .await;
    assert_eq!(replay.status, 200);
}

#[tokio::test]
async fn the_account_limit_counts_every_lead_and_route() {
    let t = Limited::new(|limits| {
        limits.per_lead = None;
        limits.per_account = limit("3/1m");
    })
    .await;
    let (access, _) = t.f.tokens().await;
    assert_eq!(t.convert("a@example.com").await.status, 200);
    assert_eq!(
        t.batch(&access, &["b@example.com", "c@example.com"])
            .await
            .status,
        200
    );
    let refused = t.convert("d@example.com").await;
    assert_error(&refused, 429, "RATE_LIMIT_EXCEEDED");
    assert_eq!(
        refused.header("ratelimit-policy"),
        Some("\"account\";q=3;w=60")
    );
    let error = body(&refused)["error"].as_str().unwrap().to_owned();
    assert!(error.contains(&t.f.account.id.0.to_string()), "{error}");
}

#[tokio::test]
async fn the_credential_limit_counts_each_api_key_and_each_application_apart() {
    let t = Limited::new(|limits| {
        limits.per_lead = None;
        limits.per_credential = limit("2/1m");
    })
    .await;
    let (record, second_key) =
        t.f.gateway
            .issue_api_key(t.f.account.id, "second")
            .await
            .unwrap();
    assert_eq!(t.convert("a@example.com").await.status, 200);
    assert_eq!(t.convert("b@example.com").await.status, 200);
    let refused = t.convert("c@example.com").await;
    assert_error(&refused, 429, "RATE_LIMIT_EXCEEDED");
    assert_eq!(
        refused.header("ratelimit-policy"),
        Some("\"credential\";q=2;w=60")
    );
    let error = body(&refused)["error"].as_str().unwrap().to_owned();
    assert!(error.contains("the API key"), "{error}");
    assert!(!error.contains(&t.api_key), "never the key itself: {error}");
    // Another key of the same account has its own count.
    let other = t
        .convert_with(second_key.expose(), "c@example.com", None)
        .await;
    assert_eq!(other.status, 200, "{:?}", other.json_body());
    assert!(!record.id.0.is_nil());
    // So does the application, on the bearer routes.
    let (access, _) = t.f.tokens().await;
    assert_eq!(
        t.batch(&access, &["d@example.com", "e@example.com"])
            .await
            .status,
        200
    );
    let refused = t.batch(&access, &["f@example.com"]).await;
    let error = body(&refused)["error"].as_str().unwrap().to_owned();
    assert!(error.contains(t.f.client.id.as_str()), "{error}");
}

#[tokio::test]
async fn limits_that_are_off_count_nothing() {
    let t = Limited::new(|limits| *limits = RateLimits::off()).await;
    for _ in 0..200 {
        assert_eq!(t.convert("ana@example.com").await.status, 200);
    }
}

#[tokio::test]
async fn the_other_routes_are_not_limited() {
    let t = Limited::new(|limits| {
        limits.per_account = limit("1/1h");
        limits.per_credential = limit("1/1h");
    })
    .await;
    assert_eq!(t.convert("a@example.com").await.status, 200);
    assert_error(
        &t.convert("b@example.com").await,
        429,
        "RATE_LIMIT_EXCEEDED",
    );
    // Tokens, refreshes and revocations go on.
    let (_, refresh) = t.f.tokens().await;
    assert_eq!(t.f.refresh(&refresh).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_concurrent_conversions_against_a_limit_of_20_admit_exactly_20() {
    let t = Arc::new(Limited::new(|limits| limits.per_lead = limit("20/1h")).await);
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let t = t.clone();
            tokio::spawn(async move { t.convert("ana@example.com").await.status })
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

fn charge(key: &str, max: u32, cost: u32) -> Charge {
    Charge {
        kind: LimitKind::Lead,
        limit: Limit::new(max, Duration::minutes(1)),
        key: key.to_owned(),
        subject: key.to_owned(),
        cost,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_memory_limiter_is_exact_under_concurrency() {
    let limiter = Arc::new(MemoryRateLimiter::new());
    let now = time::macros::datetime!(2026-01-01 0:00 UTC);
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.charge(&[charge("k", 20, 1)], now).await })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        if task.await.unwrap().unwrap() == Admission::Admitted {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 20);
}

#[tokio::test]
async fn the_memory_limiter_charges_all_or_nothing_and_refunds() {
    let limiter = MemoryRateLimiter::new();
    let now = time::macros::datetime!(2026-01-01 0:00 UTC);
    let both = [charge("a", 3, 2), charge("b", 3, 2)];
    assert_eq!(
        limiter.charge(&both, now).await.unwrap(),
        Admission::Admitted
    );
    // b would go to 5: refused, and a is not charged either.
    let refused = limiter
        .charge(&[charge("a", 3, 1), charge("b", 3, 2)], now)
        .await
        .unwrap();
    assert_eq!(
        refused,
        Admission::Refused {
            index: 1,
            used: 2,
            retry_after: Duration::minutes(1)
        }
    );
    assert_eq!(
        limiter.charge(&[charge("a", 3, 1)], now).await.unwrap(),
        Admission::Admitted,
        "a was left at 2"
    );
    limiter.refund(&[charge("b", 3, 2)], now).await.unwrap();
    assert_eq!(
        limiter.charge(&[charge("b", 3, 3)], now).await.unwrap(),
        Admission::Admitted,
        "b was handed back its 2"
    );
    // A charge larger than the limit never fits.
    assert!(matches!(
        limiter.charge(&[charge("c", 3, 4)], now).await.unwrap(),
        Admission::Refused { used: 0, .. }
    ));
    let _ = json!({});
}

#[tokio::test]
async fn the_memory_limiter_forgets_ended_windows() {
    let limiter = MemoryRateLimiter::new();
    let start = time::macros::datetime!(2026-01-01 0:00 UTC);
    for n in 0..2000 {
        let key = format!("lead-{n}");
        limiter.charge(&[charge(&key, 1, 1)], start).await.unwrap();
    }
    assert_eq!(limiter.len(), 2000);
    // A minute later every window has ended: the map is swept as it grows.
    let later = start + Duration::minutes(1);
    for n in 0..2500 {
        let key = format!("other-{n}");
        limiter.charge(&[charge(&key, 1, 1)], later).await.unwrap();
    }
    assert!(
        limiter.len() < 4500,
        "ended windows are dropped: {}",
        limiter.len()
    );
}

// --- Redis ------------------------------------------------------------------
// The tests that need a Redis server run under the second test command
// (feature `external-tests`); those of an unreachable one need nothing.

/// The Redis of `REDIS_URL`; fails with start-up instructions without it.
#[cfg(feature = "external-tests")]
fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| {
        panic!(
            "REDIS_URL is not set: the Redis rate limiter's tests need a Redis server. Start one, e.g.\n    \
             docker run --rm -p 6379:6379 redis:7\n\
             (or install your distribution's redis-server package), then\n    \
             export REDIS_URL=redis://127.0.0.1:6379"
        )
    })
}

/// A Redis limiter under a prefix of its own, so that runs never meet.
#[cfg(feature = "external-tests")]
fn redis_limiter(prefix: &str) -> conversion_gateway::RedisRateLimiter {
    conversion_gateway::RedisRateLimiter::new(&redis_url())
        .expect("a Redis URL")
        .with_prefix(prefix)
}

#[cfg(feature = "external-tests")]
fn fresh_prefix() -> String {
    format!(
        "cg-test:{}:",
        conversion_gateway::random_uuid(&conversion_gateway::OsRandom).simple()
    )
}

#[cfg(feature = "external-tests")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_redis_limiter_is_exact_under_concurrency_in_one_instance_and_across_two() {
    let now = time::macros::datetime!(2026-01-01 0:00 UTC);
    let prefix = fresh_prefix();
    let instances: [Arc<dyn RateLimiter>; 2] = [
        Arc::new(redis_limiter(&prefix)),
        Arc::new(redis_limiter(&prefix)),
    ];
    // One instance alone, then both on another counter.
    for (counter, spread) in [("one", 1), ("two", 2)] {
        let tasks: Vec<_> = (0..64)
            .map(|n| {
                let limiter = instances[n % spread].clone();
                tokio::spawn(async move { limiter.charge(&[charge(counter, 20, 1)], now).await })
            })
            .collect();
        let mut admitted = 0;
        for task in tasks {
            if task.await.unwrap().expect("Redis answers") == Admission::Admitted {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 20, "{counter} instance(s)");
    }
}

#[cfg(feature = "external-tests")]
#[tokio::test]
async fn the_redis_limiter_charges_all_or_nothing_reports_the_window_and_refunds() {
    let now = time::macros::datetime!(2026-01-01 0:00 UTC);
    let limiter = redis_limiter(&fresh_prefix());
    let both = [charge("a", 3, 2), charge("b", 3, 2)];
    assert_eq!(
        limiter.charge(&both, now).await.unwrap(),
        Admission::Admitted
    );
    let refused = limiter
        .charge(&[charge("a", 3, 1), charge("b", 3, 2)], now)
        .await
        .unwrap();
    let Admission::Refused {
        index,
        used,
        retry_after,
    } = refused
    else {
        panic!("{refused:?}")
    };
    assert_eq!((index, used), (1, 2));
    assert!(
        retry_after > Duration::seconds(55) && retry_after <= Duration::minutes(1),
        "the window's rest: {retry_after}"
    );
    assert_eq!(
        limiter.charge(&[charge("a", 3, 1)], now).await.unwrap(),
        Admission::Admitted,
        "a was left at 2"
    );
    limiter.refund(&[charge("b", 3, 2)], now).await.unwrap();
    assert_eq!(
        limiter.charge(&[charge("b", 3, 3)], now).await.unwrap(),
        Admission::Admitted
    );
}

#[cfg(feature = "external-tests")]
#[tokio::test]
async fn redis_keys_expire_with_their_window_and_hold_the_keyed_hash_of_the_lead() {
    use hmac::Mac as _;
    let prefix = fresh_prefix();
    let t = Limited::new(|limits| limits.per_lead = limit("20/1h")).await;
    let mut config = conversion_gateway::GatewayConfig::new(BASE_URL);
    config.rate_limits.per_lead = limit("20/1h");
    let gateway = conversion_gateway::Gateway::new(
        config,
        t.f.stores.clone(),
        conversion_gateway::SecretHasher::new([42; 32]),
    )
    .with_rate_limiter(Arc::new(redis_limiter(&prefix)));
    let query = format!("api_key={}", t.api_key);
    let body = conversion_body("Ana@Example.com").to_string();
    let outcome = gateway
        .record_conversion(&RequestParts {
            query: &query,
            content_type: Some("application/json"),
            authorization: None,
            idempotency_key: None,
            body: body.as_bytes(),
        })
        .await;
    assert_eq!(gateway.answer(outcome).status, 200);

    let client = redis::Client::open(redis_url()).unwrap();
    let mut redis = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut redis)
        .await
        .unwrap();
    // HMAC-SHA256 under the server key, not a SHA-256 a dictionary of
    // known e-mails reverses.
    let hex = |bytes: &[u8]| -> String { bytes[..16].iter().map(|b| format!("{b:02x}")).collect() };
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&[42; 32]).unwrap();
    mac.update(b"rate-limit-lead\0ana@example.com");
    let keyed = hex(&mac.finalize().into_bytes());
    let account = t.f.account.id.0.simple();
    assert_eq!(keys, [format!("{prefix}lead:{account}:{keyed}")]);
    let unkeyed = hex(&<sha2::Sha256 as sha2::Digest>::digest(b"ana@example.com"));
    assert!(!keys[0].contains(&unkeyed), "{keys:?}");
    // The key ends with its window: Redis holds live windows only.
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&keys[0])
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(ttl > 3_590_000 && ttl <= 3_600_000, "PTTL {ttl} ms");
}

#[cfg(feature = "external-tests")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_conversions_through_two_gateways_sharing_redis_admit_exactly_20() {
    let prefix = fresh_prefix();
    let first = Limited::new(|limits| limits.per_lead = limit("20/1h")).await;
    // A second gateway on the same stores and Redis: another instance.
    let second = conversion_gateway::Gateway::new(
        {
            let mut config = conversion_gateway::GatewayConfig::new(BASE_URL);
            config.rate_limits.per_lead = limit("20/1h");
            config
        },
        first.f.stores.clone(),
        conversion_gateway::SecretHasher::new([42; 32]),
    )
    .with_rate_limiter(Arc::new(redis_limiter(&prefix)));
    let first_gateway = conversion_gateway::Gateway::new(
        {
            let mut config = conversion_gateway::GatewayConfig::new(BASE_URL);
            config.rate_limits.per_lead = limit("20/1h");
            config
        },
        first.f.stores.clone(),
        conversion_gateway::SecretHasher::new([42; 32]),
    )
    .with_rate_limiter(Arc::new(redis_limiter(&prefix)));
    let gateways = [Arc::new(first_gateway), Arc::new(second)];
    let query = Arc::new(format!("api_key={}", first.api_key));
    let tasks: Vec<_> = (0..64)
        .map(|n| {
            let gateway = gateways[n % 2].clone();
            let query = query.clone();
            tokio::spawn(async move {
                let body = conversion_body("shared@example.com").to_string();
                let outcome = gateway
                    .record_conversion(&RequestParts {
                        query: &query,
                        content_type: Some("application/json"),
                        authorization: None,
                        idempotency_key: None,
                        body: body.as_bytes(),
                    })
                    .await;
                gateway.answer(outcome).status
            })
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

/// A gateway whose limiter's Redis does not answer (nothing listens on
/// port 1), failing as `failure` says.
async fn unreachable_redis(failure: conversion_gateway::LimiterFailure) -> Limited {
    let t = Limited::new(|_| {}).await;
    let mut config = conversion_gateway::GatewayConfig::new(BASE_URL);
    config.rate_limiter_failure = failure;
    let gateway = conversion_gateway::Gateway::new(
        config,
        t.f.stores.clone(),
        conversion_gateway::SecretHasher::new([42; 32]),
    )
    .with_rate_limiter(Arc::new(
        conversion_gateway::RedisRateLimiter::new("redis://127.0.0.1:1").unwrap(),
    ));
    Limited {
        f: Fixture {
            gateway: Arc::new(gateway),
            ..t.f
        },
        api_key: t.api_key,
    }
}

#[tokio::test]
async fn an_unreachable_redis_fails_open_by_default() {
    let t = unreachable_redis(conversion_gateway::LimiterFailure::Open).await;
    for _ in 0..5 {
        let answer = t.convert("ana@example.com").await;
        assert_eq!(
            answer.status,
            200,
            "accepted uncounted: {:?}",
            answer.json_body()
        );
    }
}

#[tokio::test]
async fn an_unreachable_redis_fails_closed_when_told_to() {
    let t = unreachable_redis(conversion_gateway::LimiterFailure::Closed).await;
    let answer = t.convert("ana@example.com").await;
    assert_error(&answer, 503, "SERVICE_UNAVAILABLE");
    assert_eq!(answer.header("retry-after"), Some("1"));
}
