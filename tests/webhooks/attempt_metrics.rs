//! The metrics a delivery attempt records, read through a recorder of the
//! test's own: attempts by outcome and webhooks switched off.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use conversion_gateway::{DeliveryNext, RetrySchedule, WebhookChange};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};

use crate::support::{Hooks, status};

const URL: &str = "https://hooks.example.com/in";

/// Keeps every counter by name and labels (`name{label="value"}`);
/// gauges and histograms are dropped.
#[derive(Default)]
struct Counters(Mutex<HashMap<String, Arc<AtomicU64>>>);

impl Counters {
    /// The counter `name{labels}`, 0 if never registered.
    fn get(&self, key: &str) -> u64 {
        self.0
            .lock()
            .unwrap()
            .get(key)
            .map_or(0, |value| value.load(Ordering::SeqCst))
    }
}

impl Recorder for Counters {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let labels: Vec<String> = key
            .labels()
            .map(|label| format!("{}=\"{}\"", label.key(), label.value()))
            .collect();
        let name = if labels.is_empty() {
            key.name().to_owned()
        } else {
            format!("{}{{{}}}", key.name(), labels.join(","))
        };
        let value = Arc::clone(self.0.lock().unwrap().entry(name).or_default());
        Counter::from_arc(value)
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// Runs `test` on a runtime of this thread, with `counters` as the
/// thread's recorder.
fn with_counters(counters: &Counters, test: impl AsyncFnOnce()) {
    metrics::with_local_recorder(counters, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(test());
    });
}

#[test]
fn attempts_are_counted_by_outcome_and_a_switch_off_once() {
    let counters = Counters::default();
    with_counters(&counters, async || {
        let t = Hooks::with_schedule(RetrySchedule::default()).await;
        t.register(URL).await;
        // Delivered, then retrying (a 500), then switched off (410 Gone).
        t.convert("first@example.com", "signup").await;
        let round = t.gateway().run_webhooks_once().await.unwrap();
        assert_eq!(round.attempts[0].next, DeliveryNext::Delivered);
        t.receiver.answer(URL, [status(500), status(410)]);
        t.convert("second@example.com", "signup").await;
        let round = t.gateway().run_webhooks_once().await.unwrap();
        assert!(matches!(round.attempts[0].next, DeliveryNext::RetryAt(_)));
        assert_eq!(counters.get("cg_webhooks_switched_off_total"), 0);
        t.f.clock.advance(time::Duration::days(1));
        let round = t.gateway().run_webhooks_once().await.unwrap();
        assert_eq!(round.attempts[0].change, WebhookChange::SwitchOff);
    });
    for (outcome, count) in [("delivered", 1), ("retrying", 1), ("failed", 1)] {
        let key = format!("cg_webhook_attempts_total{{outcome=\"{outcome}\"}}");
        assert_eq!(counters.get(&key), count, "{key}");
    }
    assert_eq!(counters.get("cg_webhooks_switched_off_total"), 1);
}
