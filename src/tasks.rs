//! Tasks a host spawns on tokio (feature `tasks`, implied by `axum`).
//!
//! The only code of the crate that waits on a timer: the core reads the
//! time from its injected [`Clock`](crate::clock::Clock) and never sleeps,
//! so its decisions stay testable over weeks of manual time. A task here
//! only says *when* to call the core; what a call does is the core's.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use std::collections::HashMap;

use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};

use crate::error_chain::ErrorChain;
use crate::gateway::Gateway;
use crate::gateway::operations::PurgeReport;
use crate::records::webhook::WebhookId;
use crate::webhooks::delivery::DISPATCH_PAGE;

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

/// The gateway's background work, spawned on the current tokio runtime:
/// the purge ([`purge_every`], every [`PURGE_EVERY`]) and webhook delivery
/// ([`deliver_webhooks`], [`WebhookWorker::default`]), and whatever else
/// the host adds with [`BackgroundTasks::with`]. Every host runs the first
/// two beside its server; this keeps them, and their end, in one value.
///
/// [`BackgroundTasks::stop`], or dropping it, aborts every task, which
/// loses nothing: each purge statement is atomic, and an attempt cut off
/// keeps its lease until it ends and is then made again.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use conversion_gateway::{Gateway, GatewayConfig, SecretHasher, Stores};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # let gateway = Arc::new(Gateway::new(GatewayConfig::new("http://127.0.0.1:8080"), Stores::in_memory(), SecretHasher::new([7; 32])));
/// use conversion_gateway::BackgroundTasks;
///
/// let background = BackgroundTasks::spawn(gateway.clone());
/// // ... serve ...
/// background.stop().await;
/// # }
/// ```
pub struct BackgroundTasks {
    tasks: JoinSet<()>,
}

impl BackgroundTasks {
    /// Spawns the purge and webhook delivery of `gateway`.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn spawn(gateway: Arc<Gateway>) -> Self {
        let mut tasks = JoinSet::new();
        tasks.spawn(purge_every(gateway.clone(), PURGE_EVERY));
        tasks.spawn(deliver_webhooks(gateway, WebhookWorker::default()));
        BackgroundTasks { tasks }
    }

    /// Spawns `task` beside them (a metrics upkeep, say), to end with them.
    #[must_use]
    pub fn with(mut self, task: impl Future<Output = ()> + Send + 'static) -> Self {
        self.tasks.spawn(task);
        self
    }

    /// Aborts every task and waits until none runs.
    pub async fn stop(mut self) {
        self.tasks.shutdown().await;
    }
}

/// One purge, logged.
async fn purge_once(gateway: &Gateway) {
    match gateway.purge_expired().await {
        Ok(report) => log_purge(&report),
        Err(error) => tracing::warn!(
            error = %ErrorChain(&error),
            "purging expired records failed; trying again at the next interval"
        ),
    }
}

/// Logs what a purge did: a line (level info) with what it deleted, if it
/// deleted anything, and a warning naming the webhook delivery queues it
/// repaired, if any, which only an earlier release's instance leaves. A
/// purge that did neither, the usual one, logs nothing.
fn log_purge(report: &PurgeReport) {
    if report.queue_heads_repaired > 0 {
        // Worth an operator's eye: an earlier release is (or was) writing
        // deliveries to this store.
        tracing::warn!(
            queues = report.queue_heads_repaired,
            "webhook delivery queues left unleasable by an earlier release were repaired"
        );
    }
    if report.tokens > 0 || report.idempotency_claims > 0 || report.webhook_deliveries > 0 {
        tracing::info!(
            tokens = report.tokens,
            idempotency_claims = report.idempotency_claims,
            webhook_deliveries = report.webhook_deliveries,
            "purged expired records"
        );
    }
}

/// How [`deliver_webhooks`] paces itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WebhookWorker {
    /// How long it waits when nothing is due before looking again: the
    /// most a new conversion waits for its first attempt.
    pub poll: Duration,
    /// The most attempts in flight at once.
    pub max_in_flight: usize,
    /// The most attempts in flight to one webhook (a batch of leases may
    /// pass it by less than this much): a slow or dead receiver holds at
    /// most these, and every other webhook keeps the rest.
    pub max_in_flight_per_webhook: usize,
    /// How often the `cg_webhook_backlog` gauge is read from the store.
    pub backlog_every: Duration,
}

impl Default for WebhookWorker {
    fn default() -> Self {
        Self {
            poll: Duration::from_millis(250),
            max_in_flight: 64,
            max_in_flight_per_webhook: 4,
            backlog_every: Duration::from_secs(5),
        }
    }
}

/// Delivers webhooks for ever: dispatches new conversions from the event
/// feed into deliveries, and attempts the due ones, many at once, each
/// webhook at most [`WebhookWorker::max_in_flight_per_webhook`] at a time,
/// so a receiver that hangs for its whole timeout delays no other webhook
/// (and intake not at all: it never waits for this task). Spawn it beside
/// the server, on every instance: on a shared database the instances
/// share the work through leases, each delivery sent by one of them.
///
/// Aborting it (at shutdown) loses nothing: an attempt cut short keeps its
/// lease until the lease ends, and is then made again. Store failures are
/// logged (`tracing`, level warn) and retried at the next poll. Nothing it
/// logs names a URL or a secret (a URL's query may hold the receiver's
/// own token).
pub async fn deliver_webhooks(gateway: Arc<Gateway>, worker: WebhookWorker) {
    let mut in_flight: JoinSet<()> = JoinSet::new();
    let mut per_webhook: HashMap<WebhookId, usize> = HashMap::new();
    let mut attempts: HashMap<tokio::task::Id, WebhookId> = HashMap::new();
    let mut backlog_read = Instant::now() - worker.backlog_every;
    loop {
        dispatch_waiting(&gateway).await;
        lease_and_start(
            &gateway,
            &worker,
            &mut in_flight,
            &mut per_webhook,
            &mut attempts,
        )
        .await;
        if backlog_read.elapsed() >= worker.backlog_every {
            backlog_read = Instant::now();
            if let Ok(pending) = gateway.webhook_backlog().await {
                crate::metrics::webhook_backlog(pending);
            }
        }
        // Wake at the next poll, or as soon as an attempt ends (its
        // webhook may have more due, and its slot is free).
        tokio::select! {
            () = tokio::time::sleep(worker.poll) => {}
            Some(done) = in_flight.join_next_with_id(), if !in_flight.is_empty() => {
                finished(done, &mut per_webhook, &mut attempts);
                while let Some(done) = in_flight.try_join_next_with_id() {
                    finished(done, &mut per_webhook, &mut attempts);
                }
            }
        }
    }
}

/// Dispatches pages of the feed until a step finds less than a full page
/// (at most 20 pages, so that a backlog of events does not hold up
/// attempts). Stopping at a short page, not at an empty one: under a flood,
/// every step finds the events that arrived during the last, and chasing
/// them wrote the dispatcher's cursor up to 80 times a second where the
/// next poll takes them all in one step.
async fn dispatch_waiting(gateway: &Gateway) {
    for _ in 0..20 {
        match gateway.dispatch_webhook_deliveries(DISPATCH_PAGE).await {
            Ok(passed) if passed < DISPATCH_PAGE => break,
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(
                    error = %ErrorChain(&error),
                    "dispatching webhook deliveries failed; trying again at the next poll"
                );
                break;
            }
        }
    }
}

/// Leases due deliveries while slots are free, a few at a time, and
/// starts an attempt for each.
async fn lease_and_start(
    gateway: &Arc<Gateway>,
    worker: &WebhookWorker,
    in_flight: &mut JoinSet<()>,
    per_webhook: &mut HashMap<WebhookId, usize>,
    attempts: &mut HashMap<tokio::task::Id, WebhookId>,
) {
    let per_cap = worker.max_in_flight_per_webhook.max(1);
    while in_flight.len() < worker.max_in_flight {
        let free = worker.max_in_flight - in_flight.len();
        let skip: Vec<WebhookId> = per_webhook
            .iter()
            .filter(|(_, count)| **count >= per_cap)
            .map(|(id, _)| *id)
            .collect();
        let leased = match gateway
            .lease_webhook_deliveries(free.min(per_cap), &skip)
            .await
        {
            Ok(leased) => leased,
            Err(error) => {
                tracing::warn!(
                    error = %ErrorChain(&error),
                    "leasing webhook deliveries failed; trying again at the next poll"
                );
                return;
            }
        };
        if leased.is_empty() {
            return;
        }
        for delivery in leased {
            let webhook = delivery.delivery.webhook_id;
            *per_webhook.entry(webhook).or_default() += 1;
            let gateway = gateway.clone();
            let task = in_flight.spawn(async move {
                if let Err(error) = gateway.attempt_webhook_delivery(&delivery).await {
                    tracing::warn!(
                        webhook = %webhook,
                        error = %ErrorChain(&error),
                        "recording a webhook attempt failed; the delivery is attempted again when its lease ends"
                    );
                }
            });
            attempts.insert(task.id(), webhook);
        }
    }
}

/// Frees the slot of an attempt that ended, returned or panicked.
fn finished(
    done: Result<(tokio::task::Id, ()), tokio::task::JoinError>,
    per_webhook: &mut HashMap<WebhookId, usize>,
    attempts: &mut HashMap<tokio::task::Id, WebhookId>,
) {
    let task = match done {
        Ok((task, ())) => task,
        Err(error) => error.id(),
    };
    if let Some(webhook) = attempts.remove(&task)
        && let Some(count) = per_webhook.get_mut(&webhook)
    {
        *count -= 1;
        if *count == 0 {
            per_webhook.remove(&webhook);
        }
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
    use crate::captured_logs::CapturedLogs;
    use crate::clock::ManualClock;
    use crate::config::GatewayConfig;
    use crate::gateway::Stores;
    use crate::oauth::client::ClientRegistration;
    use crate::random::OsRandom;
    use crate::secret::SecretHasher;
    use crate::store::CodeLookup;

    /// What [`log_purge`] logs for `report`.
    fn purge_logs(report: PurgeReport) -> String {
        let logs = CapturedLogs::default();
        let _guard = tracing::subscriber::set_default(logs.subscriber());
        log_purge(&report);
        logs.text()
    }

    #[test]
    fn a_purge_logs_what_it_deleted_and_warns_of_repaired_queues() {
        assert_eq!(
            purge_logs(PurgeReport::default()),
            "",
            "nothing done, nothing said"
        );
        let deleted = [
            PurgeReport {
                tokens: 3,
                ..PurgeReport::default()
            },
            PurgeReport {
                idempotency_claims: 1,
                ..PurgeReport::default()
            },
            PurgeReport {
                webhook_deliveries: 1,
                ..PurgeReport::default()
            },
        ];
        for report in deleted {
            let text = purge_logs(report);
            assert!(text.contains("INFO"), "{text}");
            assert!(text.contains("purged expired records"), "{text}");
            assert!(!text.contains("WARN"), "{text}");
        }
        let text = purge_logs(PurgeReport {
            tokens: 3,
            ..PurgeReport::default()
        });
        assert!(
            text.contains("tokens=3 idempotency_claims=0 webhook_deliveries=0"),
            "{text}"
        );
        let text = purge_logs(PurgeReport {
            queue_heads_repaired: 2,
            ..PurgeReport::default()
        });
        assert!(text.contains("WARN"), "{text}");
        assert!(
            text.contains("left unleasable by an earlier release were repaired queues=2"),
            "{text}"
        );
        assert!(!text.contains("purged expired records"), "{text}");
    }

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
    async fn background_tasks_run_until_stopped_and_stop_every_one() {
        let gateway = Arc::new(Gateway::new(
            GatewayConfig::new("https://api.example.com"),
            Stores::in_memory(),
            SecretHasher::new([0x3d; 32]),
        ));
        let (sender, mut ended) = tokio::sync::oneshot::channel::<()>();
        let background = BackgroundTasks::spawn(gateway).with(async move {
            // Holds the sender until aborted: the receiver then sees it gone.
            let _held = sender;
            std::future::pending::<()>().await;
        });
        assert_eq!(
            background.tasks.len(),
            3,
            "purge, delivery and the added task"
        );
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(
            matches!(
                ended.try_recv(),
                Err(tokio::sync::oneshot::error::TryRecvError::Empty)
            ),
            "the tasks run until stopped"
        );
        background.stop().await;
        assert!(ended.await.is_err(), "stopping aborted the added task");
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
