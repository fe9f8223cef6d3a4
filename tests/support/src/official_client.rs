//! The official Ruby client over weeks, on any store: it authorises once,
//! keeps its first refresh token forever (it never stores the one a refresh
//! returns), and refreshes once a day; the server restarts every day with
//! its clock a day later, and purges at start as the service does.

use time::Duration;

use crate::{Fixture, body, restartable::Restartable};

/// How long the scenario runs: longer than the purge's retention (7 days)
/// several times over, and past a month.
pub const DAYS: i64 = 35;

/// Runs the official client's pattern for [`DAYS`] days on `R`'s stores,
/// with a restart and a purge every day, and asserts that every refresh
/// succeeds and every new access token works.
pub async fn the_official_client_stays_connected<R: Restartable>() {
    let mut stores = R::start().await;
    let mut f = Fixture::with_stores(stores.stores(), |_| {}).await;
    let (mut access, first) = f.tokens().await;
    let mut purged = 0;
    for day in 1..=DAYS {
        f.clock.advance(Duration::days(1));
        stores.restart().await;
        f.restart(stores.stores(), 1_000 + day.unsigned_abs());
        // The service purges at start (and every ten minutes after).
        purged += f.gateway.purge_expired().await.expect("purge").tokens;

        // A day later the access token has expired: the client is told so
        // and refreshes with the only refresh token it ever kept.
        assert!(
            matches!(
                f.bearer(&access).await,
                Err(conversion_gateway::BearerError::Expired)
            ),
            "on day {day} on {}, yesterday's access token must have expired",
            R::NAME
        );
        let answer = f.refresh(&first).await;
        assert_eq!(
            answer.status,
            200,
            "the official client was disconnected on day {day} on {}: {:?}",
            R::NAME,
            answer.json_body()
        );
        access = body(&answer)["access_token"]
            .as_str()
            .expect("access_token")
            .to_owned();
        assert!(
            f.bearer(&access).await.is_ok(),
            "on day {day} on {}, the fresh access token must work",
            R::NAME
        );
    }
    // The purges did run and delete something (the code and the access
    // tokens of the first weeks): the client survived them, not their absence.
    assert!(
        purged >= 20,
        "the purges deleted only {purged} records in {DAYS} days"
    );
    stores.stop().await;
}
