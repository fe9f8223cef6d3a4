//! `--events nats://`: the example server sends events to a JetStream
//! stream while OAuth state, accounts and keys stay in `--store`, and
//! `examples/consumer.rs --events` follows the stream.

use std::process::Command;

use serde_json::Value;

use crate::support::{Launch, conversion_body, example_binary};

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

#[tokio::test]
async fn events_go_to_jetstream_and_the_consumer_reads_them_back() {
    let url = nats_url();
    let stream = Stream(format!(
        "CG_SERVER_{}",
        conversion_gateway::random_uuid(&conversion_gateway::OsRandom).simple()
    ));
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
    other.assert_error(422, "IDEMPOTENCY_KEY_REUSED");
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
