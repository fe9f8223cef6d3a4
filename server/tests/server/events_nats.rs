//! `--events nats://`: the service sends events to a JetStream
//! stream while OAuth state, accounts and keys stay in `--store`, and
//! `examples/consumer.rs --events` follows the stream.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::proxy::{Admit, Proxy};
use crate::support::{Launch, conversion_body, example_binary};
use crate::webhooks::{FAST, Receiver, email_of, register};

fn nats_url() -> String {
    match std::env::var("NATS_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "NATS_URL is not set: these tests need a NATS server with JetStream. Start one, e.g.\n    \
             docker run --rm -p 4222:4222 nats:2 -js\n\
             (or install nats-server and run `nats-server -js`), then\n    \
             export NATS_URL=nats://127.0.0.1:4222"
        ),
    }
}

/// Deletes the stream when dropped.
struct Stream(String);

impl Stream {
    /// A stream name of its own: `PREFIX_` and a fresh UUID.
    fn fresh(prefix: &str) -> Self {
        let id = conversion_gateway::random_uuid(&conversion_gateway::OsRandom);
        Self(format!("{prefix}_{}", id.simple()))
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let name = self.0.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async {
                if let Ok(client) = async_nats::connect(nats_url()).await {
                    let _ = async_nats::jetstream::new(client)
                        .delete_stream(&name)
                        .await;
                }
            });
        })
        .join()
        .ok();
    }
}

/// With `--events`, the webhook dispatcher follows the stream: the
/// conversions sent to JetStream after a webhook was registered are
/// delivered to it, and one sent before is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_delivered_from_the_stream() {
    let url = nats_url();
    let stream = Stream::fresh("CG_SERVER");
    let receiver = Receiver::start().await;
    let mut flags = vec!["--events", &url, "--events-stream", &stream.0];
    flags.extend(FAST);
    let server = Launch::memory(&flags).start();
    let before = server
        .convert(&server.demo.api_key, &conversion_body("before@example.com"))
        .await;
    assert_eq!(before.status, 200, "{}", before.text());
    let (access, _) = server.tokens().await;
    let created = register(&server, &access, &receiver.url).await;
    assert_eq!(created.status, 201, "{}", created.text());
    for n in 0..3 {
        let reply = server
            .convert(
                &server.demo.api_key,
                &conversion_body(&format!("after{n}@example.com")),
            )
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    receiver
        .wait_until(Duration::from_secs(10), |d| d.len() >= 3)
        .await;
    // Time for a delivery of the earlier conversion to show, were it sent.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // In order per contact only: three contacts' deliveries may cross.
    let mut emails: Vec<String> = receiver.deliveries().iter().map(email_of).collect();
    emails.sort();
    assert_eq!(
        emails,
        [
            "after0@example.com",
            "after1@example.com",
            "after2@example.com"
        ]
    );
    let (status, logs) = server.stop();
    assert!(status.success(), "{status}: {logs}");
}

#[tokio::test]
async fn events_go_to_jetstream_and_the_consumer_reads_them_back() {
    let url = nats_url();
    let stream = Stream::fresh("CG_SERVER");
    let server = Launch::memory(&["--events", &url, "--events-stream", &stream.0]).start();
    let mut sent = Vec::new();
    for n in 0..2 {
        let reply = server
            .convert(
                &server.demo.api_key,
                &conversion_body(&format!("lead{n}@example.com")),
            )
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        sent.push(reply.json()["event_uuid"].as_str().unwrap().to_owned());
    }
    // An Idempotency-Key retry answers the first uuid, and the stream
    // holds the event once.
    let conversion = format!("/platform/conversions?api_key={}", server.demo.api_key);
    let body = conversion_body("keyed@example.com").to_string();
    let headers = [
        ("content-type", "application/json"),
        ("idempotency-key", "retry-42"),
    ];
    let first = server.post(&conversion, &headers, body.clone()).await;
    assert_eq!(first.status, 200, "{}", first.text());
    let again = server.post(&conversion, &headers, body).await;
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.json()["event_uuid"], first.json()["event_uuid"]);
    let other = server
        .post(
            &conversion,
            &headers,
            conversion_body("other@example.com").to_string(),
        )
        .await;
    other.assert_error(409, "IDEMPOTENCY_KEY_REUSED");
    sent.push(first.json()["event_uuid"].as_str().unwrap().to_owned());

    let dir = conversion_gateway_testkit::TempDir::new("consumer-nats");
    let output = Command::new(example_binary("consumer"))
        .args(["--events", &url, "--events-stream", &stream.0, "--once"])
        .arg("--cursor-file")
        .arg(dir.path("cursor"))
        .output()
        .expect("run the consumer");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let read: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let uuids: Vec<_> = read
        .iter()
        .map(|e| e["event_uuid"].as_str().unwrap())
        .collect();
    assert_eq!(uuids, sent, "every acknowledged event, once, in order");
    let (status, logs) = server.stop();
    assert!(status.success(), "{status}: {logs}");
}

#[test]
fn an_unreachable_nats_stops_the_server_at_start_with_a_message() {
    let (status, stderr) = Launch::memory(&["--events", "nats://127.0.0.1:1"]).fail();
    assert!(!status.success());
    assert!(stderr.contains("--events"), "{stderr}");
    let (status, stderr) = Launch::memory(&["--events", "http://x"]).fail();
    assert_eq!(status.code(), Some(2), "{stderr}");
}

/// Every event of `stream`'s feed, read through the library's sink.
async fn stream_uuids(stream: &str) -> std::collections::HashSet<String> {
    use conversion_gateway::{EventFeed, FeedCursor, NatsEventSink, NatsOptions};
    let mut options = NatsOptions::default();
    options.stream = stream.to_owned();
    options.subject_prefix = stream.to_lowercase();
    let sink = NatsEventSink::connect(&nats_url(), options)
        .await
        .expect("connect");
    let mut cursor = FeedCursor::start();
    let mut uuids = std::collections::HashSet::new();
    loop {
        let page = sink
            .read_after(&cursor, 1000)
            .await
            .expect("read the stream");
        if page.events.is_empty() {
            return uuids;
        }
        uuids.extend(page.events.iter().map(|e| e.event_uuid.to_string()));
        cursor = page.next;
    }
}

/// Posts `total` conversions over `connections` concurrent connections to
/// `base` (a new contact each, so no limit applies), calling `midway` once
/// half have been acknowledged; the `event_uuid`s of the 200s.
async fn burst(
    base: String,
    api_key: String,
    total: usize,
    connections: usize,
    midway: impl FnOnce() + Send + 'static,
) -> Vec<String> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let sent = Arc::new(AtomicUsize::new(0));
    let acknowledged = Arc::new(std::sync::Mutex::new(Vec::new()));
    let midway = Arc::new(std::sync::Mutex::new(Some(midway)));
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .unwrap();
    let tasks: Vec<_> = (0..connections)
        .map(|_| {
            let (sent, acknowledged, midway) = (sent.clone(), acknowledged.clone(), midway.clone());
            let (client, base, api_key) = (client.clone(), base.clone(), api_key.clone());
            tokio::spawn(async move {
                loop {
                    let n = sent.fetch_add(1, Ordering::Relaxed);
                    if n >= total {
                        return;
                    }
                    let body = conversion_body(&format!("burst{n}@example.com")).to_string();
                    let reply = client
                        .post(format!("{base}/platform/conversions?api_key={api_key}"))
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await;
                    let Ok(reply) = reply else { continue };
                    if reply.status() != 200 {
                        continue;
                    }
                    let Ok(text) = reply.text().await else {
                        continue;
                    };
                    let value: Value = serde_json::from_str(&text).unwrap();
                    let mut acknowledged = acknowledged.lock().unwrap();
                    acknowledged.push(value["event_uuid"].as_str().unwrap().to_owned());
                    if acknowledged.len() == total / 2
                        && let Some(midway) = midway.lock().unwrap().take()
                    {
                        midway();
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    std::sync::Arc::try_unwrap(acknowledged)
        .unwrap()
        .into_inner()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_acknowledged_event_is_in_the_stream_after_the_server_is_killed_halfway() {
    let url = nats_url();
    let stream = Stream::fresh("CG_KILL");
    let server = std::sync::Arc::new(
        Launch::memory(&["--events", &url, "--events-stream", &stream.0]).start(),
    );
    let killer = server.clone();
    let acknowledged = burst(
        server.url.clone(),
        server.demo.api_key.clone(),
        10_000,
        64,
        move || killer.kill(),
    )
    .await;
    assert!(
        acknowledged.len() >= 5_000 && acknowledged.len() < 10_000,
        "killed halfway: {} acknowledged",
        acknowledged.len()
    );
    let stored = stream_uuids(&stream.0).await;
    let lost: Vec<_> = acknowledged
        .iter()
        .filter(|id| !stored.contains(*id))
        .collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged events lost: {lost:?}",
        lost.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_acknowledged_event_is_in_the_stream_after_nats_connections_drop() {
    let url = nats_url();
    let stream = Stream::fresh("CG_DROP");
    let proxy = Proxy::start(url.trim_start_matches("nats://")).await;
    let server = Launch::memory(&[
        "--events",
        &format!("nats://{}", proxy.address),
        "--events-stream",
        &stream.0,
    ])
    .start();
    let cut = proxy.cut.clone();
    let acknowledged = burst(
        server.url.clone(),
        server.demo.api_key.clone(),
        4_000,
        64,
        move || cut.notify_waiters(),
    )
    .await;
    assert!(acknowledged.len() >= 2_000, "{}", acknowledged.len());
    let stored = stream_uuids(&stream.0).await;
    let lost: Vec<_> = acknowledged
        .iter()
        .filter(|id| !stored.contains(*id))
        .collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged events lost: {lost:?}",
        lost.len()
    );
    assert!(
        proxy.connections() >= 2,
        "the server reconnected after the cut ({} connections)",
        proxy.connections()
    );
    let (status, logs) = server.stop();
    assert!(status.success(), "{status}: {logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_jetstream_is_answered_503_fast_and_intake_resumes() {
    let url = nats_url();
    let stream = Stream::fresh("CG_DOWN");
    let proxy = Proxy::start(url.trim_start_matches("nats://")).await;
    let server = Launch::memory(&[
        "--events",
        &format!("nats://{}", proxy.address),
        "--events-stream",
        &stream.0,
    ])
    .start();
    let event = conversion_body("down@example.com");
    let first = server.convert(&server.demo.api_key, &event).await;
    assert_eq!(first.status, 200);
    let mut acknowledged = std::collections::HashSet::from([first.json()["event_uuid"]
        .as_str()
        .expect("an event_uuid")
        .to_owned()]);
    // NATS goes away: every connection cut, new ones reset.
    proxy.admit(Admit::Reset);
    proxy.cut.notify_waiters();
    let started = std::time::Instant::now();
    let reply = server.convert(&server.demo.api_key, &event).await;
    reply.assert_error(503, "SERVICE_UNAVAILABLE");
    assert!(reply.header("retry-after").is_some(), "{reply:?}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "answered in {:?}",
        started.elapsed()
    );
    // Retried while it is down: refused, not kept for later.
    for _ in 0..3 {
        let reply = server.convert(&server.demo.api_key, &event).await;
        reply.assert_error(503, "SERVICE_UNAVAILABLE");
    }
    // It comes back: intake resumes without a restart.
    proxy.admit(Admit::All);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let reply = server.convert(&server.demo.api_key, &event).await;
        if reply.status == 200 {
            let uuid = reply.json()["event_uuid"].clone();
            acknowledged.insert(uuid.as_str().expect("an event_uuid").to_owned());
            break;
        }
        assert!(std::time::Instant::now() < deadline, "intake never resumed");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(
        stream_uuids(&stream.0).await,
        acknowledged,
        "the stream holds what was acknowledged, nothing answered 503"
    );
}
