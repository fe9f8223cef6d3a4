//! Tasks a host spawns on tokio (feature `tasks`, implied by `axum`).
//!
//! The only code of the crate that waits on a timer: the core reads the
//! time from its injected [`Clock`](crate::clock::Clock) and never sleeps,
//! so its decisions stay testable over weeks of manual time. A task here
//! only says *when* to call the core; what a call does is the core's.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};

use crate::error_chain::ErrorChain;
use crate::gateway::Gateway;
use crate::gateway::operations::PurgeReport;

/// How often the service binary purges: often enough that expired records
/// never pile up between two runs, rarely enough that the purge's
/// statements are lost among the requests.
pub const PURGE_EVERY: Duration = Duration::from_secs(600);

/// Deletes what expired beyond the gateway's retention
/// ([`Gateway::purge_expired`]) at once and then every `every`, for ever:
/// spawn it, and abort it at shutdown.
///
/// What it deleted is logged (`tracing`, level info) when it deleted
/// anything. A failure is logged (level warn, with its causes) and retried at
/// the next tick: an outage only delays the purge. Aborting it mid-purge
/// loses nothing, since each of the purge's statements is atomic and the
/// next run carries on. A tick missed because a purge took long is not
/// made up for: the next one comes `every` after it.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use conversion_gateway::{Gateway, GatewayConfig, SecretHasher, Stores};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # let gateway = Arc::new(Gateway::new(GatewayConfig::new("http://127.0.0.1:8080"), Stores::in_memory(), SecretHasher::new([7; 32])));
/// use conversion_gateway::{PURGE_EVERY, purge_every};
///
/// let purge = tokio::spawn(purge_every(gateway.clone(), PURGE_EVERY));
/// // ... serve ...
/// purge.abort();
/// # }
/// ```
///
/// # Panics
///
/// If `every` is zero.
pub async fn purge_every(gateway: Arc<Gateway>, every: Duration) {
    run_every(every, FirstRun::AtOnce, || purge_once(&gateway)).await;
}

/// One purge, logged.
async fn purge_once(gateway: &Gateway) {
    match gateway.purge_expired().await {
        Ok(report) if report == PurgeReport::default() => {}
        Ok(report) => tracing::info!(
            tokens = report.tokens,
            idempotency_claims = report.idempotency_claims,
            "purged expired records"
        ),
        Err(error) => tracing::warn!(
            error = %ErrorChain(&error),
            "purging expired records failed; trying again at the next interval"
        ),
    }
}

/// When a periodic task first runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FirstRun {
    /// At once, then every period.
    AtOnce,
    /// After one period, then every period.
    #[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
    AfterOnePeriod,
}

/// Runs `task` every `every` (the first time as `first` says), for ever.
pub(crate) async fn run_every<F, Fut>(every: Duration, first: FirstRun, mut task: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let start = match first {
        FirstRun::AtOnce => Instant::now(),
        FirstRun::AfterOnePeriod => Instant::now() + every,
    };
    let mut ticks = tokio::time::interval_at(start, every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        task().await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::account::Account;
    use crate::clock::ManualClock;
    use crate::config::GatewayConfig;
    use crate::gateway::Stores;
    use crate::oauth::client::ClientRegistration;
    use crate::random::OsRandom;
    use crate::secret::SecretHasher;
    use crate::store::CodeLookup;

    /// The runs of a task spawned with `first`, counted after each of `waits`.
    async fn runs_after(first: FirstRun, every: Duration, waits: &[Duration]) -> Vec<usize> {
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let task = tokio::spawn(run_every(every, first, move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async {}
        }));
        let mut seen = Vec::new();
        for wait in waits {
            tokio::time::sleep(*wait).await;
            seen.push(runs.load(Ordering::SeqCst));
        }
        task.abort();
        seen
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_at_once_runs_at_start_then_once_a_period() {
        let every = Duration::from_secs(600);
        let little = Duration::from_millis(1);
        let seen = runs_after(FirstRun::AtOnce, every, &[little, every, every * 2]).await;
        assert_eq!(seen, [1, 2, 4]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_after_one_period_waits_a_period_first() {
        let every = Duration::from_secs(5);
        let seen = runs_after(
            FirstRun::AfterOnePeriod,
            every,
            &[every - Duration::from_millis(100), every * 2],
        )
        .await;
        assert_eq!(seen, [0, 2]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_purge_task_deletes_what_expired_at_start() {
        let key = [0x3c; 32];
        let stores = Stores::in_memory();
        let clock = Arc::new(ManualClock::at_epoch_of_tests());
        let gateway = Gateway::new(
            GatewayConfig::new("https://api.example.com"),
            stores.clone(),
            SecretHasher::new(key),
        )
        .with_clock(clock.clone());
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
        let hash = approval.code().hash(&SecretHasher::new(key));
        // Long past the code's lifetime and the retention after it.
        clock.advance(time::Duration::days(30));

        let purge = tokio::spawn(purge_every(Arc::new(gateway), PURGE_EVERY));
        tokio::time::sleep(Duration::from_millis(1)).await;
        let found = stores.tokens.find_code(&hash).await.unwrap();
        assert_eq!(found, CodeLookup::NotFound);
        purge.abort();
    }
}
