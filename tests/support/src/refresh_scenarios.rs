//! Scenarios of the refresh policies, run on every store (memory and
//! SQLite in `tests/oauth/refresh.rs`, PostgreSQL in
//! `tests/store/postgres.rs`).

use std::sync::Arc;

use conversion_gateway::HttpAnswer;
use time::Duration;

use crate::{Fixture, assert_error, body};

fn token(answer: &HttpAnswer, name: &str) -> String {
    body(answer)[name]
        .as_str()
        .unwrap_or_else(|| panic!("no {name} in {:?}", answer.json_body()))
        .to_owned()
}

/// A client that behaves as the official Ruby client does: it keeps the
/// first refresh token forever (never stores the one a refresh
/// returns), refreshes when its access token expires and on every 401.
/// Under the default policy it stays connected for 30 days.
pub async fn a_client_that_never_stores_new_refresh_tokens_stays_connected(f: &Fixture) {
    let (mut access, first) = f.tokens().await;
    for hour in 0..30 * 24 {
        // Calls every hour; on a 401 it refreshes with its first token.
        if f.bearer(&access).await.is_err() {
            let answer = f.refresh(&first).await;
            assert_eq!(
                answer.status,
                200,
                "disconnected after {hour} hours: {:?}",
                answer.json_body()
            );
            access = token(&answer, "access_token");
            assert!(
                f.bearer(&access).await.is_ok(),
                "a fresh access token works after {hour} hours"
            );
        }
        f.clock.advance(Duration::hours(1));
    }
}

/// A client that stores and uses the successor it is given, and then
/// presents its old token again (or a thief does): the grant is revoked.
pub async fn a_retired_first_token_presented_after_its_successor_was_used_revokes_the_grant(
    f: &Fixture,
) {
    let (_, first) = f.tokens().await;
    f.clock.advance(Duration::days(1));
    let second = token(&f.refresh(&first).await, "refresh_token");
    f.clock.advance(Duration::minutes(10));
    let renewed = f.refresh(&second).await;
    assert_eq!(renewed.status, 200, "{:?}", renewed.json_body());
    let (access, third) = (
        token(&renewed, "access_token"),
        token(&renewed, "refresh_token"),
    );
    f.clock.advance(Duration::minutes(5));
    assert_error(&f.refresh(&first).await, 401, "INVALID_REFRESH_TOKEN");
    assert!(
        f.bearer(&access).await.is_err(),
        "the grant is revoked: its access tokens die"
    );
    assert_error(&f.refresh(&third).await, 401, "INVALID_REFRESH_TOKEN");
}

/// A client that rotates is held to strict rotation after its first
/// refresh: its second token presented again is reuse.
pub async fn a_rotating_client_is_held_to_strict_rotation(f: &Fixture) {
    let (_, first) = f.tokens().await;
    let second = token(&f.refresh(&first).await, "refresh_token");
    f.clock.advance(Duration::days(1));
    let third = token(&f.refresh(&second).await, "refresh_token");
    assert_ne!(third, second);
    f.clock.advance(Duration::minutes(5));
    assert_error(&f.refresh(&second).await, 401, "INVALID_REFRESH_TOKEN");
    assert_error(&f.refresh(&third).await, 401, "INVALID_REFRESH_TOKEN");
}

/// A thief holding the first token of a client that never rotates, and
/// using the successor it is given, is found out at the client's next
/// refresh: the grant is revoked and the thief's tokens die with it.
pub async fn a_thief_that_rotates_the_first_token_is_found_out(f: &Fixture) {
    let (_, first) = f.tokens().await;
    let stolen = f.refresh(&first).await;
    let thief_successor = token(&stolen, "refresh_token");
    f.clock.advance(Duration::hours(1));
    let thief = f.refresh(&thief_successor).await;
    let thief_access = token(&thief, "access_token");
    f.clock.advance(Duration::days(1));
    assert_error(&f.refresh(&first).await, 401, "INVALID_REFRESH_TOKEN");
    assert!(f.bearer(&thief_access).await.is_err(), "the thief is out");
}

/// Concurrent refreshes of one token all succeed with one successor.
pub async fn concurrent_refreshes_get_one_successor(f: Arc<Fixture>) {
    let (_, first) = f.tokens().await;
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let f = f.clone();
            let first = first.clone();
            tokio::spawn(async move { f.refresh(&first).await })
        })
        .collect();
    let mut successors = std::collections::HashSet::new();
    for task in tasks {
        successors.insert(token(&task.await.expect("task"), "refresh_token"));
    }
    assert_eq!(successors.len(), 1, "never two live successors");
    let successor = successors.into_iter().next().expect("one successor");
    assert_eq!(f.refresh(&successor).await.status, 200);
}

/// How many scenarios [`scenario`] runs.
pub const SCENARIOS: usize = 5;

/// Runs scenario `n` (below [`SCENARIOS`]) on `f`.
pub async fn scenario(n: usize, f: Fixture) {
    match n {
        0 => a_client_that_never_stores_new_refresh_tokens_stays_connected(&f).await,
        1 => {
            a_retired_first_token_presented_after_its_successor_was_used_revokes_the_grant(&f).await
        }
        2 => a_rotating_client_is_held_to_strict_rotation(&f).await,
        3 => a_thief_that_rotates_the_first_token_is_found_out(&f).await,
        4 => concurrent_refreshes_get_one_successor(Arc::new(f)).await,
        _ => panic!("there are {SCENARIOS} scenarios, not {}", n + 1),
    }
}

/// Every scenario, each on a fixture of its own made by `fixture`.
pub async fn all<F, Fut>(fixture: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Fixture>,
{
    for n in 0..SCENARIOS {
        scenario(n, fixture().await).await;
    }
}
