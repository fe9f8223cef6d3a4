//! Conversion intake over HTTP, side by side: requests per second and
//! latency of `POST /platform/conversions` with a typical 600-byte event,
//! at a fixed number of keep-alive connections, against
//!
//! - `bare`: an axum handler that only parses the JSON body and answers a
//!   fresh uuid (the limit of the HTTP layer here), served by this program
//!   in a process of its own (`--serve-bare`), like the servers it is
//!   compared with;
//! - `memory`, `sqlite`, `postgres`, `jetstream`: the service's
//!   release binary (`conversion-gateway`) on each store, started through its
//!   command line (`jetstream`: events to NATS JetStream, `--events`).
//!
//! Each target first takes a flood of `--warmup` seconds, not measured.
//! Targets then take turns, round after round, so that a noisy shared machine
//! moves them alike; the table gives each target's median round and its
//! ratio to `bare` and to `memory`. The load generator runs in this process
//! and shares the cores with the servers, as `wrk` would. Below the table,
//! each target's ratios are also given round by round (each from runs made
//! one right after the other): their median and range.
//!
//! While each server takes the flood, one client refreshes an OAuth
//! token over and over (a fresh grant per server, through the sign-in and
//! consent pages), so the table also shows whether token refresh queues
//! behind the events (its p99 should stay under 100 ms).
//!
//! ```text
//! cargo bench -p conversion-gateway-server --bench intake_load -- [--seconds 10] [--warmup 2] [--connections 64] [--rounds 3] [--generator hyper|wrk] [--wrk-threads 1] [--baseline PATH] [--webhook]
//! ```
//!
//! `--generator wrk` sends the flood with `wrk -t1` instead of this
//! program's hyper clients (see [`Generator`]); `--wrk-threads 2` gives
//! `wrk` two threads, as issue 39 measured (`wrk -t2 -c64`).
//!
//! `--baseline PATH` also floods another build of the service, `PATH` (say
//! the previous commit's `target/release/conversion-gateway`), on the memory
//! store and on SQLite (and on PostgreSQL when `DATABASE_URL` is set, in a
//! schema of its own), as more targets that take their turns right after
//! this build's: a change measured side by side in one run, which on
//! a shared machine one run against another cannot do (rounds of one run
//! spread by a tenth or more). A baseline's "vs memory" is against this
//! build's memory server; compare it with the baseline's own memory line.
//!
//! On Linux each round also says where the CPU went, per request: the
//! server's process, the store's own processes and threads (PostgreSQL,
//! the NATS server, the SQLite store's writer of events), the load
//! generator, and the share of the machine left idle (module `cpu`).
//!
//! `--webhook` also floods this build on the memory store and on SQLite
//! with one `WEBHOOK.CONVERTED` webhook registered for the demo account
//! (`memory-webhook`, `sqlite-webhook`), pointed at the bare handler on
//! loopback (`--webhooks-allow-private`): every event is then dispatched
//! to it and delivered as the flood goes on, the deliveries of its one
//! contact one after another. With `--baseline`, the baseline build takes
//! the same two floods right after this build's (`memory-webhook-baseline`,
//! `sqlite-webhook-baseline`). The webhook is registered before each of
//! those floods and deleted, with the deliveries still waiting, right after
//! it: a server left delivering a flood's backlog took a third of a core
//! under the next targets' floods (2026-12-06), and every target after the
//! first webhook flood paid for it.
//!
//! `postgres` runs when `DATABASE_URL` names a server, in a schema of its
//! own that is dropped at the end; `jetstream` (the memory store, events
//! sent to a JetStream stream with `--events`) when `NATS_URL` does, on a
//! stream of its own deleted at the end. Not part of CI.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr as _;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use conversion_gateway_testkit::hidden;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};

use self::cpu::{CpuPerRequest, CpuSample};

mod cpu;
#[path = "../common/release_server.rs"]
mod release_server;

const TYPICAL: &[u8] = include_bytes!("../../../benches/data/typical.json");

#[derive(Clone)]
struct Options {
    seconds: u64,
    /// Seconds of flood each target takes once before the rounds, not
    /// measured: a fresh server's first seconds (connections to open,
    /// caches to fill, a database's first pages) are not its pace.
    warmup: u64,
    connections: usize,
    rounds: usize,
    generator: Generator,
    /// `wrk`'s threads (`--wrk-threads`, 1 by default): issue 39 measured
    /// with `wrk -t2 -c64`, the record in `NOTES.md` with `-t1`.
    wrk_threads: usize,
    /// Another build of the service to flood beside this one
    /// (`--baseline`).
    baseline: Option<PathBuf>,
    /// Also flood memory and SQLite with a webhook registered
    /// (`--webhook`).
    webhook: bool,
}

/// What sends the flood.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Generator {
    /// hyper clients on this program's tokio runtime: nothing to install.
    Hyper,
    /// `wrk -t1` (Debian's `wrk`; `--wrk-threads` for more): a C event
    /// loop on one thread, which turns an answer into the next request
    /// faster than a tokio task does, so a server that answers after a disk
    /// flush is not held back by the generator's own wake-ups.
    Wrk,
}

impl Options {
    fn parse() -> Self {
        let mut options = Options {
            seconds: 10,
            warmup: 2,
            connections: 64,
            rounds: 3,
            generator: Generator::Hyper,
            wrk_threads: 1,
            baseline: None,
            webhook: false,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            if flag == "--baseline" {
                let path = args
                    .next()
                    .expect("--baseline takes the path of a server binary");
                options.baseline = Some(PathBuf::from(path));
                continue;
            }
            if flag == "--webhook" {
                options.webhook = true;
                continue;
            }
            let mut value = || -> u64 {
                args.next()
                    .and_then(|value| value.parse().ok())
                    .unwrap_or_else(|| panic!("{flag} takes a positive number"))
            };
            match flag.as_str() {
                "--seconds" => options.seconds = value(),
                "--warmup" => options.warmup = value(),
                "--connections" => options.connections = value() as usize,
                "--rounds" => options.rounds = value() as usize,
                "--wrk-threads" => options.wrk_threads = value().max(1) as usize,
                "--generator" => {
                    options.generator = match args.next().as_deref() {
                        Some("hyper") => Generator::Hyper,
                        Some("wrk") => Generator::Wrk,
                        _ => panic!("--generator takes hyper or wrk"),
                    }
                }
                // `cargo bench` passes `--bench`.
                _ => {}
            }
        }
        options
    }
}

/// One round of one target.
#[derive(Clone, Copy)]
struct Round {
    requests_per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
    failures: usize,
    /// Where the CPU went, where `/proc` could be read.
    cpu: Option<CpuPerRequest>,
}

fn main() {
    if std::env::args().any(|arg| arg == "--serve-bare") {
        return serve_bare();
    }
    let options = Options::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(run(options));
}

/// One target: its name, address, query string, process, and the OAuth
/// client that refreshes tokens during its flood (not for `bare`).
struct Target {
    name: &'static str,
    address: SocketAddr,
    query: String,
    process: release_server::Started,
    refresher: Option<Refresher>,
    /// Where the webhook registered for each flood delivers (the
    /// `-webhook` targets).
    webhook_receiver: Option<SocketAddr>,
}

impl Target {
    /// Registers this target's webhook, if it floods with one: its uuid.
    async fn register_webhook(&mut self) -> Option<String> {
        let receiver = self.webhook_receiver?;
        let refresher = self.refresher.as_mut().expect("a service target");
        Some(refresher.register_webhook(receiver).await)
    }

    /// Deletes the webhook `register_webhook` registered, and the
    /// deliveries it still had waiting.
    async fn delete_webhook(&mut self, webhook: Option<String>) {
        if let Some(uuid) = webhook {
            let refresher = self.refresher.as_mut().expect("a service target");
            refresher.delete_webhook(&uuid).await;
        }
    }
}

async fn run(options: Options) {
    let binary = release_server::build();
    let dir = std::env::temp_dir().join(format!("cg-intake-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");

    let (bare, bare_address) = start_bare();
    let mut targets = vec![Target {
        name: "bare",
        address: bare_address,
        query: "api_key=none".to_owned(),
        process: bare,
        refresher: None,
        webhook_receiver: None,
    }];
    let database_url = std::env::var("DATABASE_URL").ok();
    // PostgreSQL's tail under a long flood depends on the server's own
    // settings more than on the store (server/benches/intake_load/NOTES.md):
    // the table names them, so that runs on different servers are not
    // compared as if they were alike.
    let postgres_settings = database_url
        .as_deref()
        .map(|url| query_text(url, POSTGRES_SETTINGS.to_owned()));
    // A cluster that has not yet made its log's segment files (a new
    // machine's) writes each new one as zeros and syncs it inside some
    // commit, pausing the flood, until `max_wal_size` worth exist: the
    // count tells such a run from the others (NOTES.md, "the write-back
    // hint").
    let wal_segments = database_url
        .as_deref()
        .map(|url| query_text(url, WAL_SEGMENTS.to_owned()));
    let postgres = database_url.as_ref().map(|url| postgres_store(url, ""));
    let postgres_baseline = database_url
        .filter(|_| options.baseline.is_some())
        .map(|url| postgres_store(&url, "_baseline"));
    // (name, --store, more arguments, the binary that serves it)
    let mut stores: Vec<(&str, String, Vec<String>, &Path)> = Vec::new();
    // Memory and SQLite, each followed by the baseline's server on it.
    let sqlite_at = |file: &str| format!("sqlite:{}", dir.join(file).display());
    let side_by_side = [
        (
            "memory",
            "memory".to_owned(),
            "memory-baseline",
            "memory".to_owned(),
        ),
        (
            "sqlite",
            sqlite_at("load.db"),
            "sqlite-baseline",
            sqlite_at("load-baseline.db"),
        ),
    ];
    for (name, store, baseline_name, baseline_store) in side_by_side {
        stores.push((name, store, Vec::new(), binary.as_path()));
        if let Some(baseline) = &options.baseline {
            stores.push((
                baseline_name,
                baseline_store,
                Vec::new(),
                baseline.as_path(),
            ));
        }
    }
    if options.webhook {
        let allow = vec!["--webhooks-allow-private".to_owned()];
        let with_webhook = [
            (
                "memory-webhook",
                "memory".to_owned(),
                "memory-webhook-baseline",
                "memory".to_owned(),
            ),
            (
                "sqlite-webhook",
                sqlite_at("load-webhook.db"),
                "sqlite-webhook-baseline",
                sqlite_at("load-webhook-baseline.db"),
            ),
        ];
        for (name, store, baseline_name, baseline_store) in with_webhook {
            stores.push((name, store, allow.clone(), binary.as_path()));
            if let Some(baseline) = &options.baseline {
                stores.push((
                    baseline_name,
                    baseline_store,
                    allow.clone(),
                    baseline.as_path(),
                ));
            }
        }
    }
    if let Some((_, url)) = &postgres {
        stores.push(("postgres", url.clone(), Vec::new(), binary.as_path()));
        if let (Some((_, url)), Some(baseline)) = (&postgres_baseline, &options.baseline) {
            stores.push((
                "postgres-baseline",
                url.clone(),
                Vec::new(),
                baseline.as_path(),
            ));
        }
    } else {
        eprintln!("DATABASE_URL is not set: postgres is left out");
    }
    // JetStream: events to a stream of this run's own, the rest in memory.
    let jetstream = std::env::var("NATS_URL").ok().map(|url| {
        let stream = format!("BENCH_{}", std::process::id());
        let args = vec![
            "--events".to_owned(),
            url.clone(),
            "--events-stream".to_owned(),
            stream.clone(),
        ];
        stores.push(("jetstream", "memory".to_owned(), args, binary.as_path()));
        (url, stream)
    });
    if jetstream.is_none() {
        eprintln!("NATS_URL is not set: jetstream is left out");
    }
    for (name, store, extra, binary) in stores {
        let (process, address, credentials) = start_server(binary, &dir, name, &store, &extra);
        let refresher = Refresher::connect(address, &credentials).await;
        targets.push(Target {
            name,
            address,
            query: format!(
                "api_key={}",
                credentials["api_key"].as_str().expect("api_key")
            ),
            process,
            refresher: Some(refresher),
            webhook_receiver: name.contains("-webhook").then_some(bare_address),
        });
    }

    if options.warmup > 0 {
        let warmup = Options {
            seconds: options.warmup,
            ..options.clone()
        };
        for target in &mut targets {
            let webhook = target.register_webhook().await;
            let deadline = Instant::now() + Duration::from_secs(warmup.seconds);
            load(target.address, &target.query, &warmup, deadline).await;
            target.delete_webhook(webhook).await;
        }
    }
    let mut rounds: Vec<Vec<Round>> = vec![Vec::new(); targets.len()];
    let mut refreshes: Vec<Vec<Duration>> = vec![Vec::new(); targets.len()];
    for round in 0..options.rounds {
        for (index, target) in targets.iter_mut().enumerate() {
            let webhook = target.register_webhook().await;
            let deadline = Instant::now() + Duration::from_secs(options.seconds);
            let refreshing = target
                .refresher
                .take()
                .map(|refresher| tokio::spawn(refresher.run_until(deadline)));
            let before = CpuSample::now(target.process.id());
            let started = Instant::now();
            let mut result = load(target.address, &target.query, &options, deadline).await;
            let requests = result.requests_per_second * started.elapsed().as_secs_f64();
            result.cpu = before
                .zip(CpuSample::now(target.process.id()))
                .map(|(before, after)| before.per_request(&after, requests));
            let mut refresh_p99 = f64::NAN;
            if let Some(task) = refreshing {
                let (refresher, latencies) = task.await.expect("the refresher");
                refresh_p99 = percentile(&latencies, 0.99);
                refreshes[index].extend(latencies);
                target.refresher = Some(refresher);
            }
            target.delete_webhook(webhook).await;
            eprintln!(
                "round {} {:>8}: {:>8.0} req/s  p50 {:>6.2} ms  p99 {:>6.2} ms  failures {}  refresh p99 {:>6.2} ms  {}",
                round + 1,
                target.name,
                result.requests_per_second,
                result.p50_ms,
                result.p99_ms,
                result.failures,
                refresh_p99,
                result.cpu.map_or_else(String::new, |cpu| format!(
                    "CPU/req: server {:.1} us, store {:.1} us, generator {:.1} us; idle {:.0}%",
                    cpu.server_us,
                    cpu.store_us,
                    cpu.generator_us,
                    100.0 * cpu.idle_share
                )),
            );
            rounds[index].push(result);
        }
    }

    let medians: Vec<Round> = rounds.iter().map(|r| median(r)).collect();
    println!(
        "\n{} connections ({}), {} s per run, {} rounds, median round; token refreshes during the floods, all rounds:\n",
        options.connections,
        match options.generator {
            Generator::Hyper => "hyper clients".to_owned(),
            Generator::Wrk => format!("wrk -t{}", options.wrk_threads),
        },
        options.seconds,
        options.rounds
    );
    println!(
        "| target | requests/s | vs bare | vs memory | p50 ms | p99 ms | failures | refreshes | refresh p99 ms | refresh max ms | server µs/req | store µs/req | generator µs/req | idle |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let memory = medians[1].requests_per_second;
    for ((target, result), refreshes) in targets.iter().zip(&medians).zip(&mut refreshes) {
        refreshes.sort_unstable();
        let (count, p99, max) = if target.refresher.is_some() {
            (
                refreshes.len().to_string(),
                format!("{:.2}", percentile(refreshes, 0.99)),
                format!("{:.2}", percentile(refreshes, 1.0)),
            )
        } else {
            ("".to_owned(), "".to_owned(), "".to_owned())
        };
        let cpu = result.cpu.map_or_else(
            || " | | | ".to_owned(),
            |cpu| {
                format!(
                    "{:.1} | {:.1} | {:.1} | {:.0}%",
                    cpu.server_us,
                    cpu.store_us,
                    cpu.generator_us,
                    100.0 * cpu.idle_share
                )
            },
        );
        println!(
            "| {} | {:.0} | {:.0}% | {:.0}% | {:.2} | {:.2} | {} | {count} | {p99} | {max} | {cpu} |",
            target.name,
            result.requests_per_second,
            100.0 * result.requests_per_second / medians[0].requests_per_second,
            100.0 * result.requests_per_second / memory,
            result.p50_ms,
            result.p99_ms,
            result.failures
        );
    }

    match postgres_settings {
        Some(Ok(settings)) => println!("\nPostgreSQL's settings: {settings}."),
        Some(Err(error)) => println!("\nPostgreSQL's settings could not be read: {error}."),
        None => {}
    }
    match wal_segments {
        Some(Ok(count)) => println!("PostgreSQL's log segment files before the floods: {count}."),
        Some(Err(error)) => {
            println!("PostgreSQL's log segment files could not be counted: {error}.")
        }
        None => {}
    }

    // Each round's ratio pairs runs made one right after the other, so a
    // machine that slows down for a while moves both sides of it alike.
    println!("\nRatios round by round (each from one round's runs): median (lowest to highest)\n");
    for (index, target) in targets.iter().enumerate().skip(1) {
        let versus = |base: usize| {
            let mut ratios: Vec<f64> = rounds[index]
                .iter()
                .zip(&rounds[base])
                .map(|(round, base)| 100.0 * round.requests_per_second / base.requests_per_second)
                .collect();
            ratios.sort_by(f64::total_cmp);
            format!(
                "{:.0}% ({:.0}% to {:.0}%)",
                ratios[ratios.len() / 2],
                ratios[0],
                ratios[ratios.len() - 1]
            )
        };
        println!(
            "- {}: {} of bare, {} of memory",
            target.name,
            versus(0),
            versus(1)
        );
    }

    // The servers end before their schema and stream go.
    drop(targets);
    for (drop_schema, _) in postgres.into_iter().chain(postgres_baseline) {
        drop_schema();
    }
    if let Some((url, stream)) = jetstream
        && let Ok(client) = async_nats::connect(url).await
    {
        let _ = async_nats::jetstream::new(client)
            .delete_stream(&stream)
            .await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `p` quantile of sorted `latencies`, in milliseconds.
fn percentile(latencies: &[Duration], p: f64) -> f64 {
    let mut sorted = latencies.to_vec();
    sorted.sort_unstable();
    sorted
        .get(((sorted.len() as f64 * p) as usize).min(sorted.len().saturating_sub(1)))
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

/// The median round by requests per second.
fn median(rounds: &[Round]) -> Round {
    let mut sorted = rounds.to_vec();
    sorted.sort_by(|a, b| a.requests_per_second.total_cmp(&b.requests_per_second));
    sorted[sorted.len() / 2]
}

/// `connections` keep-alive connections posting the typical event for
/// `seconds`; every answer but a 200 is a failure.
async fn load(address: SocketAddr, query: &str, options: &Options, deadline: Instant) -> Round {
    if options.generator == Generator::Wrk {
        let (address, query) = (address, query.to_owned());
        let (threads, connections, seconds) =
            (options.wrk_threads, options.connections, options.seconds);
        return tokio::task::spawn_blocking(move || {
            wrk(address, &query, threads, connections, seconds)
        })
        .await
        .expect("wrk");
    }
    let uri = format!("http://{address}/platform/conversions?{query}");
    let tasks: Vec<_> = (0..options.connections)
        .map(|_| {
            let uri = uri.clone();
            tokio::spawn(async move {
                let stream = TcpStream::connect(address).await.expect("connect");
                stream.set_nodelay(true).expect("TCP_NODELAY");
                let (mut sender, connection) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                        .await
                        .expect("an HTTP/1 handshake");
                tokio::spawn(connection);
                let mut latencies = Vec::new();
                let mut failures = 0;
                while Instant::now() < deadline {
                    let request = hyper::Request::post(uri.as_str())
                        .header("content-type", "application/json")
                        .header("host", "load")
                        .body(Full::new(Bytes::from_static(TYPICAL)))
                        .expect("a request");
                    let started = Instant::now();
                    let Ok(response) = sender.send_request(request).await else {
                        failures += 1;
                        break;
                    };
                    let ok = response.status() == 200;
                    let _ = response.into_body().collect().await;
                    latencies.push(started.elapsed());
                    if !ok {
                        failures += 1;
                    }
                }
                (latencies, failures)
            })
        })
        .collect();
    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut failures = 0;
    for task in tasks {
        let (task_latencies, task_failures) = task.await.expect("a load task");
        latencies.extend(task_latencies);
        failures += task_failures;
    }
    let elapsed = started.elapsed().as_secs_f64();
    Round {
        requests_per_second: latencies.len() as f64 / elapsed,
        p50_ms: percentile(&latencies, 0.50),
        p99_ms: percentile(&latencies, 0.99),
        failures,
        cpu: None,
    }
}

/// One `wrk` run of `seconds` on `connections` connections, posting the
/// typical event; every answer but a 2xx (and every socket error) is a
/// failure.
fn wrk(
    address: SocketAddr,
    query: &str,
    threads: usize,
    connections: usize,
    seconds: u64,
) -> Round {
    let dir = std::env::temp_dir().join(format!("cg-intake-wrk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let body = dir.join("typical.json");
    std::fs::write(&body, TYPICAL).expect("write the body");
    let script = dir.join("post.lua");
    std::fs::write(
        &script,
        format!(
            "wrk.method = \"POST\"\n\
             wrk.body = io.open(\"{}\"):read(\"*a\")\n\
             wrk.headers[\"Content-Type\"] = \"application/json\"\n\
             wrk.path = \"/platform/conversions?{query}\"\n",
            body.display()
        ),
    )
    .expect("write the script");
    let output = Command::new("wrk")
        .args([
            format!("-t{threads}"),
            format!("-c{connections}"),
            format!("-d{seconds}s"),
        ])
        .arg("--latency")
        .arg("-s")
        .arg(&script)
        .arg(format!("http://{address}/"))
        .output()
        .expect("run wrk (Debian's package wrk)");
    let text = String::from_utf8_lossy(&output.stdout);
    let field = |prefix: &str| {
        text.lines()
            .map(str::trim)
            .find_map(|line| line.strip_prefix(prefix))
            .map(str::trim)
    };
    let millis = |quantile: &str| {
        let value =
            field(quantile).unwrap_or_else(|| panic!("no {quantile} in wrk's output:\n{text}"));
        let (number, factor) = if let Some(us) = value.strip_suffix("us") {
            (us, 0.001)
        } else if let Some(ms) = value.strip_suffix("ms") {
            (ms, 1.0)
        } else {
            (value.trim_end_matches('s'), 1000.0)
        };
        number.parse::<f64>().expect("a latency") * factor
    };
    let count = |prefix: &str| {
        field(prefix).map_or(0, |value| {
            value
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|n| n.parse::<usize>().ok())
                .sum()
        })
    };
    Round {
        requests_per_second: field("Requests/sec:")
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("no Requests/sec in wrk's output:\n{text}")),
        p50_ms: millis("50%"),
        p99_ms: millis("99%"),
        failures: count("Non-2xx or 3xx responses:") + count("Socket errors:"),
        cpu: None,
    }
}

/// `--serve-bare`: the bare handler (parse the JSON body, answer a fresh
/// uuid) on a port of its own, announced on stdout; serves until killed.
fn serve_bare() {
    async fn handler(body: Bytes) -> axum::response::Response {
        use axum::response::IntoResponse as _;
        match serde_json::from_slice::<Value>(&body) {
            Ok(_) => {
                let uuid = uuid::Uuid::from_u128(rand::random());
                let body = serde_json::to_vec(&json!({ "event_uuid": uuid })).unwrap_or_default();
                ([("content-type", "application/json")], body).into_response()
            }
            Err(_) => axum::http::StatusCode::BAD_REQUEST.into_response(),
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let address = listener.local_addr().expect("its address");
        println!("{address}");
        let app = Router::new().route("/platform/conversions", post(handler));
        axum::serve(listener, app).await.expect("serve");
    });
}

/// Starts this program again as the bare server: the process and its address.
fn start_bare() -> (release_server::Started, SocketAddr) {
    use std::io::BufRead as _;
    let mut child = Command::new(std::env::current_exe().expect("this program"))
        .arg("--serve-bare")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the bare server");
    let stdout = child.stdout.take().expect("its stdout");
    let child = release_server::Started::new(child);
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .expect("its address");
    let address = line.trim().parse().expect("an address");
    (child, address)
}

/// An OAuth client of the demo app holding a grant: it refreshes its token
/// over and over, with a short pause between refreshes, as a client does.
struct Refresher {
    http: reqwest::Client,
    base: String,
    client_id: String,
    client_secret: String,
    refresh_token: String,
}

impl Refresher {
    /// Signs in as the demo account, allows the demo app, and exchanges the
    /// code: a client holding a fresh grant.
    async fn connect(address: SocketAddr, credentials: &Value) -> Self {
        let field = |name: &str| credentials[name].as_str().expect(name).to_owned();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client");
        let base = format!("http://{address}");
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("client_id", &field("client_id"))
            .append_pair("redirect_uri", &field("redirect_uri"))
            .finish();
        let dialog = format!("{base}/auth/dialog?{query}");
        let page = http.get(&dialog).send().await.expect("the sign-in page");
        let nonce = cookie(&page, "cg_login");
        let csrf = hidden(&page.text().await.expect("its HTML"), "csrf");
        let signed_in = http
            .post(format!("{base}/auth/dialog"))
            .header("cookie", format!("cg_login={nonce}"))
            .form(&[
                ("action", "login"),
                ("query", &query),
                ("csrf", &csrf),
                ("email", &field("email")),
                ("password", &field("password")),
            ])
            .send()
            .await
            .expect("signing in");
        let session = format!("cg_session={}", cookie(&signed_in, "cg_session"));
        let consent = http
            .get(&dialog)
            .header("cookie", &session)
            .send()
            .await
            .expect("the consent page");
        let csrf = hidden(&consent.text().await.expect("its HTML"), "csrf");
        let allowed = http
            .post(format!("{base}/auth/dialog"))
            .header("cookie", &session)
            .form(&[
                ("action", "consent"),
                ("query", &query),
                ("csrf", &csrf),
                ("decision", "allow"),
            ])
            .send()
            .await
            .expect("allowing");
        let location = allowed.headers()["location"].to_str().expect("a Location");
        let code = form_urlencoded::parse(location.split_once('?').expect("a query").1.as_bytes())
            .find(|(name, _)| name == "code")
            .expect("a code")
            .1
            .into_owned();
        let mut refresher = Self {
            http,
            base,
            client_id: field("client_id"),
            client_secret: field("client_secret"),
            refresh_token: String::new(),
        };
        refresher.refresh_token = refresher.token(("code", &code)).await;
        refresher
    }

    /// A fresh access token of this client's grant (its refresh token
    /// rotated).
    async fn access_token(&mut self) -> String {
        let presented = self.refresh_token.clone();
        let tokens = self.tokens(("refresh_token", &presented)).await;
        self.refresh_token = tokens["refresh_token"]
            .as_str()
            .expect("a refresh token")
            .to_owned();
        tokens["access_token"]
            .as_str()
            .expect("an access token")
            .to_owned()
    }

    /// Registers a `WEBHOOK.CONVERTED` webhook of the demo account (every
    /// conversion) at the bare handler listening on `receiver`, with an
    /// access token of this client's grant; its uuid.
    async fn register_webhook(&mut self, receiver: SocketAddr) -> String {
        let access = self.access_token().await;
        let reply = self
            .http
            .post(format!("{}/integrations/webhooks", self.base))
            .timeout(Duration::from_secs(30))
            .bearer_auth(access)
            .header("content-type", "application/json")
            .body(
                json!({
                    "event_type": "WEBHOOK.CONVERTED",
                    "entity_type": "CONTACT",
                    "http_method": "POST",
                    "url": format!("http://{receiver}/platform/conversions"),
                })
                .to_string(),
            )
            .send()
            .await
            .expect("the webhooks endpoint");
        let status = reply.status();
        let body = reply.text().await.unwrap_or_default();
        assert!(status.is_success(), "a webhook registered: {status} {body}");
        let webhook: Value = serde_json::from_str(&body).expect("a JSON webhook");
        webhook["uuid"]
            .as_str()
            .unwrap_or_else(|| panic!("the webhook's uuid in {body}"))
            .to_owned()
    }

    /// Deletes the webhook `uuid`, and with it the deliveries it still has
    /// waiting.
    async fn delete_webhook(&mut self, uuid: &str) {
        let access = self.access_token().await;
        let reply = self
            .http
            .delete(format!("{}/integrations/webhooks/{uuid}", self.base))
            .timeout(Duration::from_secs(120))
            .bearer_auth(access)
            .send()
            .await
            .expect("the webhook endpoint");
        let status = reply.status();
        assert!(status.is_success(), "the webhook deleted: {status}");
    }

    /// Posts the token request with `grant` and returns the refresh token.
    async fn token(&self, grant: (&str, &str)) -> String {
        self.tokens(grant).await["refresh_token"]
            .as_str()
            .expect("a refresh token")
            .to_owned()
    }

    /// Posts the token request with `grant` and returns the token answer.
    async fn tokens(&self, grant: (&str, &str)) -> Value {
        let mut body = json!({ "client_id": self.client_id, "client_secret": self.client_secret });
        body[grant.0] = Value::from(grant.1);
        let reply = self
            .http
            .post(format!("{}/auth/token", self.base))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("the token endpoint");
        assert_eq!(reply.status(), 200, "a token answer");
        serde_json::from_slice(&reply.bytes().await.expect("tokens")).expect("JSON tokens")
    }

    /// Refreshes every 20 ms until `deadline`: itself and each refresh's latency.
    async fn run_until(mut self, deadline: Instant) -> (Self, Vec<Duration>) {
        let mut latencies = Vec::new();
        while Instant::now() < deadline {
            let started = Instant::now();
            let presented = self.refresh_token.clone();
            self.refresh_token = self.token(("refresh_token", &presented)).await;
            latencies.push(started.elapsed());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (self, latencies)
    }
}

/// The value of the cookie `name` that `reply` sets.
fn cookie(reply: &reqwest::Response, name: &str) -> String {
    let prefix = format!("{name}=");
    reply
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find_map(|value| value.strip_prefix(&prefix))
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_else(|| panic!("no {name} cookie"))
        .to_owned()
}

/// Starts the service on `store`; returns it, its address and the
/// demo credentials (API key, app, account).
fn start_server(
    binary: &Path,
    dir: &Path,
    name: &str,
    store: &str,
    extra: &[String],
) -> (release_server::Started, SocketAddr, Value) {
    let key_file = dir.join(format!("{name}.key"));
    let mut args = vec!["--store", store];
    // The flood repeats one contact's event: the default limit of 120
    // per lead a day would refuse all but the first 120.
    args.extend(["--limit-per-lead", "off"]);
    args.extend(extra.iter().map(String::as_str));
    args.extend(["--key-file", key_file.to_str().expect("a UTF-8 path")]);
    let (child, address, demo) = release_server::launch(binary, dir, name, args, Stdio::null());
    let text = std::fs::read_to_string(&demo).expect("the demo credentials");
    let credentials: Value = serde_json::from_str(&text).expect("their JSON");
    (child, address, credentials)
}

/// A schema of its own on the `DATABASE_URL` server: a function that drops
/// it, and the URL that puts the service in it.
fn postgres_store(url: &str, suffix: &str) -> (Box<dyn FnOnce()>, String) {
    let schema = format!("intake_load_{}{suffix}", std::process::id());
    run_sql(url, format!("CREATE SCHEMA {schema}")).expect("create a schema at DATABASE_URL");
    let separator = if url.contains('?') { '&' } else { '?' };
    let in_schema = format!("{url}{separator}options=-c%20search_path%3D{schema}");
    // Best effort: a schema left behind is only a schema left behind.
    let url = url.to_owned();
    let drop_schema = move || {
        let _ = run_sql(&url, format!("DROP SCHEMA {schema} CASCADE"));
    };
    (Box::new(drop_schema), in_schema)
}

/// The PostgreSQL server's settings that move its tail under a flood (the
/// shared buffers the events table is evicted from, the log's size between
/// checkpoints) or its durability, as one line of text.
const POSTGRES_SETTINGS: &str =
    "SELECT string_agg(name || ' ' || current_setting(name), ', ' ORDER BY ordinality)
     FROM unnest(ARRAY['shared_buffers', 'max_wal_size', 'checkpoint_timeout',
                       'synchronous_commit', 'wal_sync_method']) WITH ORDINALITY AS name";

/// How many segment files the PostgreSQL server's log has (`pg_ls_waldir`
/// needs a superuser or `pg_monitor`), as text.
const WAL_SEGMENTS: &str =
    "SELECT count(*)::text FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$'";

/// Runs `sql` on the server at `url`, on a thread and runtime of its own
/// (the caller may be on the bench's runtime, which cannot block on it).
fn run_sql(url: &str, sql: String) -> Result<(), sqlx::Error> {
    on_postgres(url, move |pool| async move {
        sqlx::query(&sql).execute(&pool).await.map(|_| ())
    })
}

/// The text in the first column of the one row `sql` answers on the server
/// at `url` (as [`run_sql`], on a thread of its own).
fn query_text(url: &str, sql: String) -> Result<String, sqlx::Error> {
    on_postgres(url, move |pool| async move {
        sqlx::query_scalar::<_, String>(&sql).fetch_one(&pool).await
    })
}

/// Runs `work` on a one-connection pool to `url`, on a thread and runtime
/// of its own, and closes the pool.
fn on_postgres<T, F, Fut>(url: &str, work: F) -> Result<T, sqlx::Error>
where
    T: Send + 'static,
    F: FnOnce(sqlx::PgPool) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
{
    let url = url.to_owned();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let options = sqlx::postgres::PgConnectOptions::from_str(&url)?;
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect_with(options)
                .await?;
            let result = work(pool.clone()).await;
            pool.close().await;
            result
        })
    })
    .join()
    .expect("the SQL thread")
}
