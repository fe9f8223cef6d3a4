//! Follows the feed of recorded events of the service's store and
//! prints each event as one JSON line on stdout, resuming after a restart
//! from the cursor it keeps in a file.
//!
//! ```text
//! cargo run --example consumer -- --store sqlite:conversion-gateway.db
//! cargo run --example consumer --features postgres -- --store postgres://USER@HOST/DB
//! cargo run --example consumer -- --events nats://127.0.0.1:4222
//! ```
//!
//! Delivery is at least once: the cursor is written (atomically, by a
//! rename) only after a page's lines were written and flushed, so a
//! consumer killed between the two prints that page again when restarted,
//! and never skips an event. Whoever reads its output deduplicates by
//! `event_uuid` if it must.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use conversion_gateway::{EventFeed, FeedCursor};

const USAGE: &str = "\
Follows the events recorded in the service's store, in commit order,
printing each as one JSON line on stdout.

Usage: cargo run --example consumer -- [OPTIONS]

Options:
  --store STORE        sqlite:PATH | postgres://USER@HOST/DB (the server's
                       --store; PostgreSQL needs --features postgres)
                       [default: sqlite:conversion-gateway.db]
  --events URL         nats://HOST:PORT: read the JetStream stream the server
                       sends events to (its --events) instead of --store
  --events-stream NAME The stream [default: CONVERSIONS]
  --cursor-file PATH   Where the cursor is kept between runs; created on the
                       first page [default: consumer.cursor]
  --batch N            Events read per page [default: 100]
  --poll-ms MS         How long to wait when no event is new [default: 500]
  --once               Print what is there, then exit (instead of following)
  -h, --help           Print this help
";

/// The parsed command line.
struct Args {
    store: String,
    events: Option<String>,
    events_stream: String,
    cursor_file: PathBuf,
    batch: usize,
    poll: Duration,
    once: bool,
}

impl Args {
    /// The arguments, or `None` for `--help`.
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Self>, String> {
        let mut parsed = Args {
            store: "sqlite:conversion-gateway.db".to_owned(),
            events: None,
            events_stream: "CONVERSIONS".to_owned(),
            cursor_file: PathBuf::from("consumer.cursor"),
            batch: 100,
            poll: Duration::from_millis(500),
            once: false,
        };
        while let Some(flag) = args.next() {
            let mut value = || args.next().ok_or(format!("{flag} needs a value"));
            match flag.as_str() {
                "-h" | "--help" => return Ok(None),
                "--store" => parsed.store = value()?,
                "--events" => parsed.events = Some(value()?),
                "--events-stream" => parsed.events_stream = value()?,
                "--cursor-file" => parsed.cursor_file = value()?.into(),
                "--batch" => {
                    parsed.batch = value()?
                        .parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or("--batch needs a whole number above 0")?;
                }
                "--poll-ms" => {
                    let millis: u64 = value()?
                        .parse()
                        .map_err(|_| "--poll-ms needs a whole number of milliseconds")?;
                    parsed.poll = Duration::from_millis(millis);
                }
                "--once" => parsed.once = true,
                _ => return Err(format!("unknown argument {flag:?}")),
            }
        }
        Ok(Some(parsed))
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Reads and prints until `--once` finds nothing new, or Ctrl-C.
async fn run(args: &Args) -> Result<(), String> {
    let feed = match &args.events {
        Some(url) => open_stream(url, &args.events_stream).await?,
        None => open_feed(&args.store).await?,
    };
    let mut cursor = read_cursor(&args.cursor_file)?;
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        let page = feed
            .read_after(&cursor, args.batch)
            .await
            .map_err(|error| format!("cannot read the feed: {error}"))?;
        if page.events.is_empty() {
            if args.once {
                return Ok(());
            }
            tokio::select! {
                _ = tokio::time::sleep(args.poll) => continue,
                _ = &mut stop => return Ok(()),
            }
        }
        let mut out = std::io::stdout().lock();
        for event in &page.events {
            let line = serde_json::to_string(event)
                .map_err(|error| format!("cannot write an event as JSON: {error}"))?;
            writeln!(out, "{line}").map_err(|error| format!("cannot write to stdout: {error}"))?;
        }
        out.flush()
            .map_err(|error| format!("cannot write to stdout: {error}"))?;
        drop(out);
        // Only now: the page is out, so a crash from here on repeats it at
        // worst.
        write_cursor(&args.cursor_file, &page.next)?;
        cursor = page.next;
    }
}

/// The feed of the store `--store` names.
async fn open_feed(store: &str) -> Result<Arc<dyn EventFeed>, String> {
    if let Some(path) = store.strip_prefix("sqlite:") {
        if !Path::new(path).is_file() {
            return Err(format!(
                "no SQLite database at {path}: start the server first"
            ));
        }
        let store = conversion_gateway::SqliteStore::open(path)
            .await
            .map_err(|error| format!("cannot open {path}: {error}"))?;
        return Ok(Arc::new(store));
    }
    if store.starts_with("postgres://") || store.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        {
            let store = conversion_gateway::PgStore::connect(store)
                .await
                .map_err(|error| format!("cannot open the PostgreSQL store: {error}"))?;
            return Ok(Arc::new(store));
        }
        #[cfg(not(feature = "postgres"))]
        return Err(
            "this consumer was built without the `postgres` feature: run it with `cargo run --example consumer --features postgres`".into(),
        );
    }
    Err(format!(
        "--store must be sqlite:PATH or postgres://... (the memory store lives inside the server), not {store:?}"
    ))
}

/// The feed of the JetStream stream `name` at `url`.
async fn open_stream(url: &str, name: &str) -> Result<Arc<dyn EventFeed>, String> {
    let mut options = conversion_gateway::NatsOptions::default();
    options.stream = name.to_owned();
    // As the server names them: the stream's name in lower case.
    options.subject_prefix = name.to_lowercase();
    let sink = conversion_gateway::NatsEventSink::connect(url, options)
        .await
        .map_err(|error| format!("cannot read the stream {name}: {error}"))?;
    Ok(Arc::new(sink))
}

/// The kept cursor, or the start of the feed when there is none yet.
fn read_cursor(path: &Path) -> Result<FeedCursor, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(FeedCursor::new(text)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(FeedCursor::start()),
        Err(error) => Err(format!("cannot read {}: {error}", path.display())),
    }
}

/// Keeps `cursor`: written beside the file, then renamed over it, so that
/// a crash leaves the old cursor or the new one, never half of one.
fn write_cursor(path: &Path, cursor: &FeedCursor) -> Result<(), String> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    std::fs::write(&temporary, format!("{cursor}\n"))
        .and_then(|()| std::fs::rename(&temporary, path))
        .map_err(|error| format!("cannot keep the cursor in {}: {error}", path.display()))
}
