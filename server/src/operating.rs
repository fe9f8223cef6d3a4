//! What whoever runs the server needs: `GET /healthz` (the process
//! serves), `GET /readyz` (every store answers; a load balancer routes
//! around an instance whose database is gone), `GET /metrics` (the
//! library's figures in the Prometheus text format), the request id that
//! ties a client's report to the log, and the warning about private files
//! that other users may read.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse as _, Response};
use axum::routing::get;
use conversion_gateway::{Gateway, HttpAnswer};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use serde_json::json;

/// The header that carries a request's id, both ways.
pub const REQUEST_ID: &str = "x-request-id";

/// The Prometheus recorder of the library's `metrics` calls, installed on
/// first use (a process has one recorder); its handle renders them.
pub fn metrics_handle() -> Result<PrometheusHandle, String> {
    static HANDLE: std::sync::OnceLock<PrometheusHandle> = std::sync::OnceLock::new();
    if let Some(handle) = HANDLE.get() {
        return Ok(handle.clone());
    }
    let handle = install_metrics()?;
    Ok(HANDLE.get_or_init(|| handle).clone())
}

/// Installs the Prometheus recorder.
fn install_metrics() -> Result<PrometheusHandle, String> {
    let failed = |error| format!("cannot set up the metrics: {error}");
    // Store latency in seconds: 100 µs to 10 s.
    let seconds = [
        0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
    ];
    // The two histograms that count, not time: submissions per group
    // commit (at most a few hundred) and events per batch (at most 1000).
    let group_sizes = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];
    let batch_sizes = [1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0];
    PrometheusBuilder::new()
        .set_buckets(&seconds)
        .map_err(failed)?
        .set_buckets_for_metric(Matcher::Full("cg_group_commit_size".into()), &group_sizes)
        .map_err(failed)?
        .set_buckets_for_metric(Matcher::Full("cg_event_batch_size".into()), &batch_sizes)
        .map_err(failed)?
        .install_recorder()
        .map_err(failed)
}

/// How often the recorder's histogram samples are drained into their
/// buckets: the exporter's own period when it runs the task itself.
pub const METRICS_UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Drains the recorder's histogram samples into their buckets every
/// `every`, for ever. `install_recorder` leaves this to its caller: a
/// scrape drains them too, but a server nobody scrapes kept every sample,
/// 8 bytes per conversion (its store's latency), about 700 MB a day at
/// 1,000 conversions a second.
pub async fn run_metrics_upkeep(handle: PrometheusHandle, every: Duration) {
    upkeep_every(every, move || handle.run_upkeep()).await;
}

/// Calls `upkeep` every `every`, the first time after `every`.
async fn upkeep_every(every: Duration, upkeep: impl Fn()) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        upkeep();
    }
}

/// `/healthz` and `/readyz`, and `/metrics` when `metrics` is given (not
/// when the metrics have a listener of their own).
pub fn routes(gateway: Arc<Gateway>, metrics: Option<PrometheusHandle>) -> Router {
    let router = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(gateway);
    match metrics {
        Some(handle) => router.merge(metrics_routes(handle)),
        None => router,
    }
}

/// `/metrics` alone, for `--metrics-listen`.
pub fn metrics_routes(handle: PrometheusHandle) -> Router {
    Router::new()
        .route("/metrics", get(render_metrics))
        .with_state(handle)
}

/// The process is up and serving.
async fn healthz() -> HttpAnswer {
    HttpAnswer::json(200, json!({ "status": "ok" })).with_header("cache-control", "no-store")
}

/// 200 when every store answers within its timeout, else 503 naming the
/// stores that did not (never why: the cause may hold a host name, and is
/// logged for the operator instead).
async fn readyz(State(gateway): State<Arc<Gateway>>) -> HttpAnswer {
    let readiness = gateway.readiness().await;
    let stores: serde_json::Map<String, serde_json::Value> = readiness
        .stores
        .iter()
        .map(|(name, failure)| {
            let state = if failure.is_some() {
                "unavailable"
            } else {
                "ok"
            };
            ((*name).to_owned(), json!(state))
        })
        .collect();
    let answer = if readiness.is_ready() {
        HttpAnswer::json(200, json!({ "status": "ready", "stores": stores }))
    } else {
        for (name, failure) in &readiness.stores {
            if let Some(error) = failure {
                tracing::warn!(store = name, error = %error, "not ready");
            }
        }
        HttpAnswer::json(
            503,
            json!({ "status": "unavailable", "stores": stores, "failed": readiness.failed() }),
        )
        .with_header("retry-after", "5")
    };
    answer.with_header("cache-control", "no-store")
}

/// The Prometheus text exposition format.
async fn render_metrics(State(handle): State<PrometheusHandle>) -> Response {
    let mut response = handle.render().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// A request's id: the client's `X-Request-Id` when it is well-formed (1 to
/// 64 characters of letters, digits, `-`, `_` and `.`), else a fresh one.
pub fn request_id(request: &Request) -> String {
    request
        .headers()
        .get(REQUEST_ID)
        .and_then(|value| value.to_str().ok())
        .filter(|id| is_well_formed(id))
        .map_or_else(
            || conversion_gateway::random_token(&conversion_gateway::OsRandom, 12),
            str::to_owned,
        )
}

/// Whether a client-sent id can be logged and echoed as it is.
fn is_well_formed(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Warns, naming the file and its mode (never its contents), about each of
/// `paths` that users other than its owner may read or write: the key file
/// and the database hold what every token's hash depends on.
pub fn warn_if_exposed(paths: &[std::path::PathBuf]) {
    for file in conversion_gateway::exposed_files(paths) {
        tracing::warn!(
            path = %file.path.display(),
            mode = format_args!("{:o}", file.mode),
            "users other than the owner may read or write this file: run chmod 600 on it"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_metrics_upkeep_runs_once_a_period() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let upkeep = tokio::spawn(upkeep_every(METRICS_UPKEEP_EVERY, move || {
            counted.fetch_add(1, Ordering::SeqCst);
        }));
        tokio::time::sleep(METRICS_UPKEEP_EVERY - Duration::from_millis(100)).await;
        assert_eq!(calls.load(Ordering::SeqCst), 0, "not before one period");
        tokio::time::sleep(METRICS_UPKEEP_EVERY * 2).await;
        assert_eq!(calls.load(Ordering::SeqCst), 2, "once a period");
        upkeep.abort();
    }

    #[test]
    fn only_short_plain_ids_are_kept() {
        for good in ["abc", "req-42_x.y", &"a".repeat(64)] {
            assert!(is_well_formed(good), "{good}");
        }
        for bad in [
            "",
            "has space",
            "a\nb",
            &"a".repeat(65),
            "é",
            "a;b",
            "<script>",
        ] {
            assert!(!is_well_formed(bad), "{bad:?}");
        }
    }
}
