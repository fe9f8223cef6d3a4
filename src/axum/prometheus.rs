//! `GET /metrics` in the Prometheus text format (feature `prometheus`):
//! the recorder of the library's [`metrics`](crate::metrics) calls, its
//! upkeep task, and the route.

use std::fmt;
use std::sync::OnceLock;
use std::time::Duration;

use ::axum::Router;
use ::axum::extract::State;
use ::axum::response::{IntoResponse as _, Response};
use ::axum::routing::get;
use http::{HeaderValue, header};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use tower_http::catch_panic::CatchPanicLayer;

use crate::axum::respond::panic_as_json;
use crate::tasks::{FirstRun, run_every};

/// How often [`PrometheusMetrics::upkeep`] should run: the exporter's own
/// period when it runs the task itself.
pub const METRICS_UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The process's Prometheus recorder of the library's figures, and what
/// renders them. Cheap to clone.
///
/// ```no_run
/// use conversion_gateway::axum::{METRICS_UPKEEP_EVERY, PrometheusMetrics, metrics_router};
/// # fn main() -> Result<(), conversion_gateway::axum::MetricsError> {
/// // Before the gateway is built: it registers its series at zero.
/// let metrics = PrometheusMetrics::install()?;
/// tokio::spawn(metrics.clone().upkeep(METRICS_UPKEEP_EVERY));
/// let routes: axum::Router = metrics_router(metrics);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct PrometheusMetrics {
    handle: PrometheusHandle,
}

/// The recorder could not be installed.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up the metrics")]
pub struct MetricsError(#[source] BuildError);

impl fmt::Debug for PrometheusMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PrometheusMetrics")
    }
}

impl PrometheusMetrics {
    /// The process's recorder, installed as the `metrics` facade's global
    /// recorder on the first call; later calls return the same one (a
    /// process has one recorder).
    ///
    /// Install it before building the [`Gateway`](crate::gateway::Gateway)
    /// and opening the stores, which register their series at zero, so that
    /// `/metrics` lists every series before the first request. The
    /// histograms have buckets fit for each: seconds from 100 µs to 10 s for
    /// latencies, powers of two up to 256 for `cg_group_commit_size`, 1 to
    /// 1000 for `cg_event_batch_size`.
    ///
    /// # Errors
    ///
    /// When another recorder is installed already (a host's own).
    pub fn install() -> Result<Self, MetricsError> {
        static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
        if let Some(handle) = HANDLE.get() {
            return Ok(Self {
                handle: handle.clone(),
            });
        }
        let handle = install_recorder().map_err(MetricsError)?;
        Ok(Self {
            handle: HANDLE.get_or_init(|| handle).clone(),
        })
    }

    /// Every series in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        self.handle.render()
    }

    /// Drains the recorder's histogram samples into their buckets every
    /// `every`, the first time after `every`, for ever: spawn it beside the
    /// server. The recorder leaves this to its installer, and a scrape
    /// drains them too, but a server nobody scrapes would keep every sample:
    /// 8 bytes per conversion (its store's latency), about 700 MB a day at
    /// 1,000 conversions a second.
    ///
    /// # Panics
    ///
    /// If `every` is zero.
    pub async fn upkeep(self, every: Duration) {
        run_every(every, FirstRun::AfterOnePeriod, || {
            self.handle.run_upkeep();
            async {}
        })
        .await;
    }
}

/// Installs the Prometheus recorder with the library's buckets.
fn install_recorder() -> Result<PrometheusHandle, BuildError> {
    // Store latency in seconds: 100 µs to 10 s.
    let seconds = [
        0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
    ];
    // The two histograms that count, not time: submissions per group
    // commit (at most a few hundred) and events per batch (at most 1000).
    let group_sizes = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];
    let batch_sizes = [1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0];
    PrometheusBuilder::new()
        .set_buckets(&seconds)?
        .set_buckets_for_metric(Matcher::Full("cg_group_commit_size".into()), &group_sizes)?
        .set_buckets_for_metric(Matcher::Full("cg_event_batch_size".into()), &batch_sizes)?
        .install_recorder()
}

/// `GET /metrics`, rendered by `metrics`: merge it beside the API, or serve
/// it on a listener of its own that only the monitoring reaches.
///
/// Generic over the state `S` of the host's router, so that it merges into
/// it.
pub fn metrics_router<S: Clone + Send + Sync + 'static>(metrics: PrometheusMetrics) -> Router<S> {
    Router::new()
        .route("/metrics", get(render_metrics))
        .layer(CatchPanicLayer::custom(panic_as_json))
        .with_state(metrics)
}

/// The Prometheus text exposition format.
async fn render_metrics(State(metrics): State<PrometheusMetrics>) -> Response {
    let mut response = metrics.render().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use ::axum::body::{Body, to_bytes};
    use tower::ServiceExt as _;

    use super::*;

    #[tokio::test]
    async fn metrics_are_served_in_the_prometheus_text_format() {
        // The only test in this binary that installs a recorder.
        let metrics = PrometheusMetrics::install().unwrap();
        assert!(
            PrometheusMetrics::install().is_ok(),
            "installed once, then shared"
        );
        metrics::counter!("cg_test_total").increment(3);
        let app: Router = metrics_router(metrics);
        let request = http::Request::get("/metrics").body(Body::empty()).unwrap();
        let response = app.oneshot(request).await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "text/plain; version=0.0.4; charset=utf-8"
        );
        let body = to_bytes(response.into_body(), 1 << 20).await.unwrap();
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert!(text.contains("cg_test_total 3"), "{text}");
    }
}
