//! `examples/consumer.rs` following the service's SQLite store: one
//! JSON line per event, in commit order, resuming from its cursor file.

use std::process::Command;

use conversion_gateway_testkit::TempDir;
use serde_json::Value;

use crate::support::{Launch, conversion_body, example_binary};

/// Runs the consumer once (`--once`) on `database` with `cursor`: the
/// events it printed.
fn consume(database: &str, cursor: &std::path::Path) -> Vec<Value> {
    let output = Command::new(example_binary("consumer"))
        .args(["--store", database, "--once", "--batch", "2"])
        .arg("--cursor-file")
        .arg(cursor)
        .output()
        .expect("run the consumer");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("UTF-8")
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON event per line"))
        .collect()
}

#[tokio::test]
async fn the_consumer_prints_each_event_once_and_resumes_from_its_cursor() {
    let dir = TempDir::new("consumer");
    let database = format!("sqlite:{}", dir.path("gateway.db").display());
    let cursor = dir.path("consumer.cursor");
    let server = Launch::with_args(&["--store", &database]).start();
    let mut sent = Vec::new();
    for n in 0..3 {
        let reply = server
            .convert(
                &server.demo.api_key,
                &conversion_body(&format!("lead{n}@example.com")),
            )
            .await;
        sent.push(reply.json()["event_uuid"].as_str().unwrap().to_owned());
    }
    let first = consume(&database, &cursor);
    let uuids: Vec<_> = first
        .iter()
        .map(|e| e["event_uuid"].as_str().unwrap())
        .collect();
    assert_eq!(uuids, sent, "every event, in commit order");
    assert_eq!(first[0]["email"], "lead0@example.com");
    assert_eq!(first[0]["payload"]["conversion_identifier"], "newsletter");
    assert!(cursor.is_file(), "the cursor is kept");

    let reply = server
        .convert(&server.demo.api_key, &conversion_body("lead3@example.com"))
        .await;
    let fourth = reply.json()["event_uuid"].as_str().unwrap().to_owned();
    let second = consume(&database, &cursor);
    let uuids: Vec<_> = second
        .iter()
        .map(|e| e["event_uuid"].as_str().unwrap())
        .collect();
    assert_eq!(uuids, [fourth.as_str()], "resumed after what it printed");
    assert!(consume(&database, &cursor).is_empty(), "nothing new");
    let (status, logs) = server.stop();
    assert!(status.success(), "{status}: {logs}");
}

#[test]
fn the_consumer_refuses_the_memory_store_and_a_foreign_cursor() {
    let dir = TempDir::new("consumer-refusals");
    let output = Command::new(example_binary("consumer"))
        .args(["--store", "memory", "--once"])
        .output()
        .expect("run the consumer");
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("memory store"));
    let missing = dir.path("missing.db");
    let output = Command::new(example_binary("consumer"))
        .args([
            "--store",
            &format!("sqlite:{}", missing.display()),
            "--once",
        ])
        .output()
        .expect("run the consumer");
    assert_eq!(output.status.code(), Some(1));
    assert!(!missing.exists(), "no database is created");
}
