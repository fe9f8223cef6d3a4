//! The delivery loop (`deliver_webhooks`): attempts run in parallel, and a
//! receiver that hangs for its whole timeout delays no other webhook.

use std::sync::Arc;
use std::time::Duration;

use conversion_gateway::{WebhookWorker, deliver_webhooks};

use crate::support::Hooks;

#[tokio::test(start_paused = true)]
async fn a_hanging_receiver_delays_no_other_webhook() {
    let t = Hooks::new().await;
    t.register("https://slow.example.com/in").await;
    t.register("https://fast.example.com/in").await;
    t.receiver.clear();
    t.receiver
        .delay("https://slow.example.com/in", Duration::from_secs(5));
    for n in 0..20 {
        t.convert(&format!("lead{n}@example.com"), "signup").await;
    }
    let worker = tokio::spawn(deliver_webhooks(
        Arc::clone(&t.f.gateway),
        WebhookWorker::default(),
    ));
    // Within a second, every delivery to the fast receiver is made, while
    // the slow one holds at most its share of attempts.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let fast = t.receiver.bodies_to("https://fast.example.com/in").len();
    let slow = t.receiver.bodies_to("https://slow.example.com/in").len();
    assert_eq!(fast, 20);
    assert!(
        slow <= 2 * WebhookWorker::default().max_in_flight_per_webhook,
        "{slow}"
    );
    // Given time, the slow one gets all of its deliveries too.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        t.receiver.bodies_to("https://slow.example.com/in").len(),
        20
    );
    assert_eq!(t.gateway().webhook_backlog().await.unwrap(), 0);
    worker.abort();
}
