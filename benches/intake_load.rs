//! Conversion intake over HTTP, side by side: requests per second and
//! latency of `POST /platform/conversions` with a typical 600-byte event,
//! at a fixed number of keep-alive connections, against
//!
//! - `bare`: an axum handler in this process that only parses the JSON body
//!   and answers a fresh uuid (the limit of the HTTP layer here);
//! - `memory`, `sqlite`, `postgres`: the example server's release binary
//!   (`examples/server`) on each store, started through its command line.
//!
//! Targets take turns, round after round, so that a noisy shared machine
//! moves them alike; the table gives each target's median round and its
//! ratio to `bare` and to `memory`. The load generator runs in this process
//! and shares the cores with the servers, as `wrk` would.
//!
//! ```text
//! cargo bench --bench intake_load --all-features -- [--seconds 10] [--connections 64] [--rounds 3]
//! ```
//!
//! `postgres` runs when `DATABASE_URL` names a server, in a schema of its
//! own that is dropped at the end. Not part of CI.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::str::FromStr as _;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};

const TYPICAL: &[u8] = include_bytes!("data/typical.json");

struct Options {
    seconds: u64,
    connections: usize,
    rounds: usize,
}

impl Options {
    fn parse() -> Self {
        let mut options = Options {
            seconds: 10,
            connections: 64,
            rounds: 3,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let mut value = || -> u64 {
                args.next()
                    .and_then(|value| value.parse().ok())
                    .unwrap_or_else(|| panic!("{flag} takes a positive number"))
            };
            match flag.as_str() {
                "--seconds" => options.seconds = value(),
                "--connections" => options.connections = value() as usize,
                "--rounds" => options.rounds = value() as usize,
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
}

fn main() {
    let options = Options::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(run(options));
}

async fn run(options: Options) {
    let binary = build_example_server();
    let dir = std::env::temp_dir().join(format!("cg-intake-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");

    let bare = serve_bare().await;
    let mut targets: Vec<(&str, SocketAddr, String, Option<Child>)> =
        vec![("bare", bare, "api_key=none".to_owned(), None)];
    let postgres = std::env::var("DATABASE_URL").ok().map(postgres_store);
    let mut stores = vec![
        ("memory", "memory".to_owned()),
        (
            "sqlite",
            format!("sqlite:{}", dir.join("load.db").display()),
        ),
    ];
    if let Some((_, url)) = &postgres {
        stores.push(("postgres", url.clone()));
    } else {
        eprintln!("DATABASE_URL is not set: postgres is left out");
    }
    for (name, store) in stores {
        let (child, address, api_key) = start_server(&binary, &dir, name, &store);
        targets.push((name, address, format!("api_key={api_key}"), Some(child)));
    }

    let mut rounds: Vec<Vec<Round>> = vec![Vec::new(); targets.len()];
    for round in 0..options.rounds {
        for (index, (name, address, query, _)) in targets.iter().enumerate() {
            let result = load(*address, query, &options).await;
            eprintln!(
                "round {} {name:>8}: {:>8.0} req/s  p50 {:>6.2} ms  p99 {:>6.2} ms  failures {}",
                round + 1,
                result.requests_per_second,
                result.p50_ms,
                result.p99_ms,
                result.failures
            );
            rounds[index].push(result);
        }
    }

    let medians: Vec<Round> = rounds.iter().map(|r| median(r)).collect();
    println!(
        "\n{} connections, {} s per run, {} rounds, median round:\n",
        options.connections, options.seconds, options.rounds
    );
    println!("| target | requests/s | vs bare | vs memory | p50 ms | p99 ms | failures |");
    println!("|---|---|---|---|---|---|---|");
    let memory = medians[1].requests_per_second;
    for ((name, ..), result) in targets.iter().zip(&medians) {
        println!(
            "| {name} | {:.0} | {:.0}% | {:.0}% | {:.2} | {:.2} | {} |",
            result.requests_per_second,
            100.0 * result.requests_per_second / medians[0].requests_per_second,
            100.0 * result.requests_per_second / memory,
            result.p50_ms,
            result.p99_ms,
            result.failures
        );
    }

    for (_, _, _, child) in &mut targets {
        if let Some(child) = child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    if let Some((drop_schema, _)) = postgres {
        drop_schema();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The median round by requests per second.
fn median(rounds: &[Round]) -> Round {
    let mut sorted = rounds.to_vec();
    sorted.sort_by(|a, b| a.requests_per_second.total_cmp(&b.requests_per_second));
    sorted[sorted.len() / 2]
}

/// `connections` keep-alive connections posting the typical event for
/// `seconds`; every answer but a 200 is a failure.
async fn load(address: SocketAddr, query: &str, options: &Options) -> Round {
    let deadline = Instant::now() + Duration::from_secs(options.seconds);
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
    latencies.sort_unstable();
    let percentile = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
    };
    Round {
        requests_per_second: latencies.len() as f64 / elapsed,
        p50_ms: percentile(0.50),
        p99_ms: percentile(0.99),
        failures,
    }
}

/// The bare handler: parse the JSON body, answer a fresh uuid.
async fn serve_bare() -> SocketAddr {
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
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let address = listener.local_addr().expect("its address");
    let app = Router::new().route("/platform/conversions", post(handler));
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

/// The example server's release binary, built (or found fresh) by cargo.
fn build_example_server() -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--example",
            "server",
            "--all-features",
        ])
        .status()
        .expect("run cargo");
    assert!(status.success(), "building the example server failed");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or(root.join("target"), PathBuf::from);
    target.join("release").join("examples").join("server")
}

/// Starts the example server on `store`; returns it, its address and the
/// demo API key.
fn start_server(
    binary: &PathBuf,
    dir: &std::path::Path,
    name: &str,
    store: &str,
) -> (Child, SocketAddr, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let demo = dir.join(format!("{name}.demo.json"));
    let child = Command::new(binary)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--store", store])
        .arg("--key-file")
        .arg(dir.join(format!("{name}.key")))
        .arg("--demo-credentials")
        .arg(&demo)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the example server");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !demo.is_file() {
        assert!(
            Instant::now() < deadline,
            "{name}: the server did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let text = std::fs::read_to_string(&demo).expect("the demo credentials");
    let credentials: Value = serde_json::from_str(&text).expect("their JSON");
    let api_key = credentials["api_key"]
        .as_str()
        .expect("an api_key")
        .to_owned();
    (child, SocketAddr::from(([127, 0, 0, 1], port)), api_key)
}

/// A schema of its own on the `DATABASE_URL` server: a function that drops
/// it, and the URL that puts the example server in it.
fn postgres_store(url: String) -> (Box<dyn FnOnce()>, String) {
    let schema = format!("intake_load_{}", std::process::id());
    let psql = |sql: &str| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let options = sqlx::postgres::PgConnectOptions::from_str(&url).expect("DATABASE_URL");
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect_with(options)
                .await
                .expect("connect to DATABASE_URL");
            sqlx::query(sql).execute(&pool).await.expect("run SQL");
            pool.close().await;
        });
    };
    std::thread::scope(|scope| {
        scope.spawn(|| psql(&format!("CREATE SCHEMA {schema}")));
    });
    let separator = if url.contains('?') { '&' } else { '?' };
    let in_schema = format!("{url}{separator}options=-c%20search_path%3D{schema}");
    let drop_schema = {
        let url = url.clone();
        move || {
            let url = url.clone();
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime");
                runtime.block_on(async {
                    let options = sqlx::postgres::PgConnectOptions::from_str(&url).expect("URL");
                    if let Ok(pool) = sqlx::postgres::PgPoolOptions::new()
                        .max_connections(1)
                        .connect_with(options)
                        .await
                    {
                        let _ = sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
                            .execute(&pool)
                            .await;
                    }
                });
            })
            .join()
            .expect("drop the schema");
        }
    };
    (Box::new(drop_schema), in_schema)
}
