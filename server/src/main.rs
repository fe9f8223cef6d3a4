//! The whole service on one address: the authorization dialog, the token,
//! revocation and intake endpoints, on an embedded SQLite store by default.
//!
//! ```text
//! cargo run --example server -- --demo-credentials demo.json
//! cargo run --example server -- admin client create --name "Lead Sync" --redirect-uri https://app.example/cb
//! ```
//!
//! The JSON routes are the library's (`conversion_gateway::axum::router`);
//! the rest is what a host owns:
//!
//! | file | what |
//! |---|---|
//! | `main.rs` | the command line, logging, start and shutdown |
//! | `admin.rs` | `admin ...`: the operator's commands (accounts, apps, API keys, grants) as JSON |
//! | `account.rs` | the signed-in user's connected applications, `/account/apps` |
//! | `app.rs` | the whole app as one router |
//! | `dialog.rs` | the sign-in and consent pages and their forms |
//! | `session.rs` | the session cookie, the login nonce, CSRF tokens |
//! | `passwords.rs` | Argon2id, and the bound on concurrent checks |
//! | `throttle.rs` | the throttle of failed sign-ins |
//! | `pages.rs` | the HTML template, escaping and the page headers |
//! | `key_file.rs` | the server key and the private files' permissions |
//! | `limits.rs` | `--limit-per-*` and `--rate-limit-*`: the rate limits |
//! | `demo.rs` | the demo app, account and API key, and their file |

mod account;
mod admin;
mod app;
mod demo;
mod dialog;
#[cfg(test)]
mod dialog_tests;
mod key_file;
mod limits;
mod pages;
mod passwords;
mod session;
mod throttle;

use std::future::Future;
use std::io::{self, IsTerminal as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use conversion_gateway::axum::{
    ConnectionLimits, Drained, METRICS_UPKEEP_EVERY, PrometheusMetrics, metrics_router,
    with_request_log,
};
use conversion_gateway::{
    ClientSecret, Gateway, GatewayConfig, NatsEventSink, NatsOptions, OpenedStore, RefreshPolicy,
    StoreUrl, SystemClock,
};
use tokio::net::TcpListener;
use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use demo::seed_demo;
use dialog::{DialogState, LoginLimits};
use key_file::{ServerKey, sqlite_files, warn_if_exposed};
use limits::LimitSettings;
use passwords::Passwords;

/// mimalloc in place of glibc's malloc: fewer system calls as the heap grows
/// and faster small allocations on the request path (see Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "\
Runs the conversion-gateway service on one address.

Usage: cargo run --example server -- [OPTIONS]
       cargo run --example server -- admin COMMAND [OPTIONS]

Options:
  --listen ADDR            Address to listen on [default: 127.0.0.1:8080]
  --base-url URL           The service's public base URL, also the realm of its
                           WWW-Authenticate headers [default: http:// and the
                           address listened on]
  --store STORE            memory | sqlite:PATH | postgres://USER@HOST/DB
                           [default: sqlite:conversion-gateway.db]
  --key-file PATH          The server key file (64 hex digits), created if
                           missing. Keep it with the store: stored tokens and
                           secrets are keyed hashes [default: the SQLite path
                           and .key; conversion-gateway.key for PostgreSQL]
  --demo-credentials PATH  Where to write the demo app, account and API key,
                           as JSON readable by its owner only (they are never
                           logged) [default: the SQLite path and .demo.json;
                           conversion-gateway.demo.json for the memory and
                           PostgreSQL stores]
  --header-timeout SECS    Disconnect a client that takes longer to send a
                           request's headers, or stays idle longer between
                           requests [default: 10]
  --first-byte-timeout SECS
                           Close a new connection that sends nothing for
                           this long [default: 5]
  --first-byte-timeout-under-pressure SECS
                           The same once more than half of --max-connections
                           are open (at most --first-byte-timeout) [default: 1]
  --max-connections N      Connections open at once. At the cap, the
                           connection that has waited longest without sending
                           a whole request is closed for a new one; a
                           connection whose request is being answered never
                           is. When every one is, new ones wait to be
                           accepted. The open-files limit is raised to its
                           hard limit at start if needed; if that is still
                           too low, fewer are served and a warning says so
                           [default: 16384]
  --shutdown-timeout SECS  On Ctrl-C or SIGTERM, how long the requests in
                           flight may take to finish before their connections
                           are closed [default: 30]
  --refresh-policy POLICY  adaptive | rotate | reuse: what a refresh does to
                           the refresh token presented. adaptive keeps a
                           grant's first token valid until its successor is
                           used (clients that never store a new refresh token
                           keep working; clients that do get reuse
                           detection); rotate retires every token at once;
                           reuse never changes it [default: adaptive]
  --limit-per-lead LIMIT   Events per contact e-mail of an account: COUNT/PERIOD,
                           PERIOD a number with s, m or h (20/1m, 120/24h), or
                           off [default: 120/24h]
  --limit-per-account LIMIT
                           Events per account on the event routes [default: off]
  --limit-per-credential LIMIT
                           Events per API key or per application [default: off]
  --rate-limit-store STORE memory | redis://HOST:PORT: where the counts live;
                           Redis shares them between instances [default: memory]
  --rate-limit-failure WHAT
                           open | closed: when Redis does not answer, accept
                           events uncounted, or refuse them with 503
                           [default: open]
  --events nats://HOST:PORT
                           Send events to a NATS JetStream stream (created if
                           missing, file storage, one subject per account,
                           STREAM.ACCOUNT with the stream's name in lower case)
                           instead of --store, which keeps OAuth state,
                           accounts and keys [default: events in --store]
  --events-stream NAME     The JetStream stream [default: CONVERSIONS]
  --resource-servers PATH  A JSON object of ids and secrets: the platform's own
                           services, which may introspect any token at
                           POST /auth/introspect with HTTP Basic ID:SECRET
                           (an application sees its own tokens only); keep it
                           readable by the server's user only [default: none]
  --metrics-listen ADDR    Serve GET /metrics on a listener of its own
                           (for a network only the monitoring reaches)
                           instead of beside the API [default: beside it]
  -h, --help               Print this help

Operating: GET /healthz answers 200 while the process serves; GET /readyz
200 when every store answers within 2 s, else 503 naming the stores that did
not; GET /metrics the Prometheus text format (cg_requests_total,
cg_events_recorded_total, cg_store_operation_seconds, ...). Every answer
carries X-Request-Id, also in its log line (a client's own is kept if it is
1 to 64 letters, digits, -, _ or .).

Operator commands (admin --help tells more), on the store and key given by
--store and --key-file, each printing one JSON object, the server not started:
  admin account create --name NAME --email EMAIL
  admin client create --name NAME --redirect-uri URI [...] [--require-pkce]
  admin client rotate-secret | disable | enable --client-id ID
  admin client redirect-uris --client-id ID --redirect-uri URI [...]
  admin api-key issue --account EMAIL [--label LABEL]
  admin api-key disable | enable --id ID
  admin grants --account EMAIL
  admin grant revoke --id ID

A request over a limit is answered 429 with Retry-After, RateLimit-Policy and
RateLimit headers, and nothing of it is recorded; a batch is charged per
event, all or nothing; an Idempotency-Key replay is not charged again.

Sign-ins are throttled: after 5 failures for one account from one address,
20 for one account, or 20 from one address within 15 minutes, the sign-in
form answers 429 until the 15 minutes have passed. At most one password is
checked per core at a time; a sign-in that waits over 2 s for its turn is
answered 503.

At start, the server warns about a key file or SQLite database (with its
-wal and -shm files) that users other than its owner can read or write.

Every ten minutes, the server deletes what expired more than 7 days ago:
authorization codes, access tokens, rotated refresh tokens, the refresh
tokens of revoked grants and idempotency keys.

Environment:
  CONVERSION_GATEWAY_KEY   The server key (64 hex digits), when --key-file is
                           not given; share it between instances of one store
  RUST_LOG                 Log filter [default: info,sqlx=warn]
";

/// The parsed command line.
struct Args {
    listen: String,
    base_url: Option<String>,
    store: StoreUrl,
    key_file: Option<PathBuf>,
    demo_credentials: Option<PathBuf>,
    /// `--first-byte-timeout*`, `--header-timeout`, `--max-connections`
    /// and `--shutdown-timeout`.
    connections: ConnectionLimits,
    /// `--refresh-policy`: the gateway's default refresh policy.
    refresh_policy: RefreshPolicy,
    /// `--limit-per-*` and `--rate-limit-*`.
    limits: LimitSettings,
    /// `--events nats://HOST:PORT`: events go to JetStream, not `--store`.
    events: Option<String>,
    /// `--events-stream`: the JetStream stream's name.
    events_stream: String,
    /// `--metrics-listen`: a listener of their own for `/metrics`.
    metrics_listen: Option<String>,
    /// `--resource-servers`: the platform's services allowed to introspect
    /// any token.
    resource_servers: Option<PathBuf>,
}

/// The refresh policy a `--refresh-policy` value names, with the default
/// grace window of 30 seconds.
fn refresh_policy(text: &str) -> Result<RefreshPolicy, String> {
    let grace = RefreshPolicy::default().grace();
    match text {
        "adaptive" => Ok(RefreshPolicy::Adaptive { grace }),
        "rotate" => Ok(RefreshPolicy::Rotate { grace }),
        "reuse" => Ok(RefreshPolicy::Reuse),
        _ => Err(format!(
            "--refresh-policy must be adaptive, rotate or reuse, not {text:?}"
        )),
    }
}

impl Args {
    /// The arguments, or `None` for `--help`.
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Self>, String> {
        let mut parsed = Args {
            listen: "127.0.0.1:8080".into(),
            base_url: None,
            store: StoreUrl::Sqlite(PathBuf::from("conversion-gateway.db")),
            key_file: None,
            demo_credentials: None,
            connections: ConnectionLimits::default(),
            refresh_policy: RefreshPolicy::default(),
            limits: LimitSettings::default(),
            events: None,
            events_stream: "CONVERSIONS".to_owned(),
            metrics_listen: None,
            resource_servers: None,
        };
        while let Some(arg) = args.next() {
            if arg == "-h" || arg == "--help" {
                return Ok(None);
            }
            // Both `--flag value` and `--flag=value`.
            let (flag, inline) = match arg.split_once('=') {
                Some((flag, value)) if flag.starts_with("--") => {
                    (flag.to_owned(), Some(value.to_owned()))
                }
                _ => (arg, None),
            };
            let mut value = || {
                inline
                    .clone()
                    .or_else(|| args.next())
                    .ok_or(format!("{flag} needs a value"))
            };
            match flag.as_str() {
                "--listen" => parsed.listen = value()?,
                "--base-url" => parsed.base_url = Some(base_url(&value()?)?),
                "--store" => {
                    parsed.store = value()?
                        .parse()
                        .map_err(|error| format!("--store {error}"))?;
                }
                "--key-file" => parsed.key_file = Some(value()?.into()),
                "--demo-credentials" => parsed.demo_credentials = Some(value()?.into()),
                "--header-timeout" => {
                    parsed.connections.header_timeout = seconds(&flag, &value()?)?;
                }
                "--first-byte-timeout" => {
                    parsed.connections.first_byte_timeout = seconds(&flag, &value()?)?;
                }
                "--first-byte-timeout-under-pressure" => {
                    parsed.connections.first_byte_timeout_under_pressure =
                        seconds(&flag, &value()?)?;
                }
                "--max-connections" => {
                    parsed.connections.max_connections = positive(&flag, &value()?)?;
                }
                "--shutdown-timeout" => {
                    parsed.connections.shutdown_timeout = seconds(&flag, &value()?)?;
                }
                "--refresh-policy" => parsed.refresh_policy = refresh_policy(&value()?)?,
                "--events" => {
                    let url = value()?;
                    if !url.starts_with("nats://") {
                        return Err(format!("--events must be nats://HOST:PORT, not {url:?}"));
                    }
                    parsed.events = Some(url);
                }
                "--metrics-listen" => parsed.metrics_listen = Some(value()?),
                "--resource-servers" => parsed.resource_servers = Some(value()?.into()),
                "--events-stream" => {
                    let name = value()?;
                    let valid = !name.is_empty()
                        && name
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                    if !valid {
                        return Err(format!(
                            "--events-stream must be letters, digits, _ and -, not {name:?}"
                        ));
                    }
                    parsed.events_stream = name;
                }
                _ if flag.starts_with("--limit-per-") || flag.starts_with("--rate-limit-") => {
                    if !parsed.limits.apply(&flag, &value()?)? {
                        return Err(format!("unknown argument {flag:?}"));
                    }
                }
                _ => return Err(format!("unknown argument {flag:?}")),
            }
        }
        Ok(Some(parsed))
    }

    /// Where the demo credentials go: `--demo-credentials`, else beside the
    /// SQLite database, else the working directory.
    fn demo_credentials_path(&self) -> PathBuf {
        if let Some(path) = &self.demo_credentials {
            return path.clone();
        }
        match &self.store {
            StoreUrl::Sqlite(database) => {
                let mut path = database.as_os_str().to_owned();
                path.push(".demo.json");
                PathBuf::from(path)
            }
            StoreUrl::Memory | StoreUrl::Postgres(_) => {
                PathBuf::from("conversion-gateway.demo.json")
            }
        }
    }
}

/// The resource servers of `--resource-servers`: a JSON object of ids and
/// secrets. The secrets are hashed by the gateway and never logged.
fn resource_servers(path: &Path) -> Result<Vec<(String, ClientSecret)>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read --resource-servers {}: {error}", path.display()))?;
    let servers: std::collections::BTreeMap<String, String> =
        serde_json::from_str(&text).map_err(|_| {
            format!(
                "--resource-servers {} must hold a JSON object of ids and secrets",
                path.display()
            )
        })?;
    if servers.values().any(|secret| secret.len() < 16) {
        return Err(format!(
            "--resource-servers {}: every secret needs at least 16 characters",
            path.display()
        ));
    }
    Ok(servers
        .into_iter()
        .map(|(id, secret)| (id, ClientSecret::new(secret)))
        .collect())
}

/// A whole number above zero.
fn positive(flag: &str, text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(number) if number > 0 => Ok(number),
        _ => Err(format!("{flag} needs a whole number above 0, not {text:?}")),
    }
}

/// A whole number of seconds above zero.
fn seconds(flag: &str, text: &str) -> Result<Duration, String> {
    let seconds = positive(flag, text)?;
    Ok(Duration::from_secs(seconds as u64))
}

/// A base URL that can be written in a `WWW-Authenticate` realm.
fn base_url(text: &str) -> Result<String, String> {
    let url = text.trim_end_matches('/');
    let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
    let chars_ok = url
        .chars()
        .all(|c| c.is_ascii_graphic() && c != '"' && c != '\\');
    if scheme_ok && chars_ok && !url.ends_with("//") {
        Ok(url.to_owned())
    } else {
        Err(format!(
            "--base-url must be an http:// or https:// URL, not {text:?}"
        ))
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut arguments = std::env::args().skip(1).peekable();
    // Before the server's own flags: `admin` takes flags of its own.
    if arguments.peek().is_some_and(|first| first == "admin") {
        return admin::run(arguments.skip(1)).await;
    }
    let args = match Args::parse(arguments) {
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
    init_logging();
    match run(args, shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            tracing::error!("{message}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr, one line per event, filtered by `RUST_LOG`.
fn init_logging() {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|spec| spec.parse::<Targets>().ok())
        // sqlx logs every statement at info.
        .unwrap_or_else(|| {
            Targets::new()
                .with_default(Level::INFO)
                .with_target("sqlx", Level::WARN)
        });
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(io::stderr)
                // Colours for a person at a terminal, not in a log file.
                .with_ansi(io::stderr().is_terminal()),
        )
        .with(filter)
        .init();
}

/// The whole life of the server: start, serve until `shutdown` resolves,
/// drain, close the store.
async fn run(args: Args, shutdown: impl Future<Output = ()>) -> Result<(), String> {
    start(&args).await?.serve(shutdown).await;
    Ok(())
}

/// A server ready to serve: its store open, its demo data seeded and its
/// listener bound.
struct Started {
    store: OpenedStore,
    listener: TcpListener,
    dialog: DialogState,
    gateway: Arc<Gateway>,
    connections: ConnectionLimits,
    /// Renders the metrics.
    metrics: PrometheusMetrics,
    /// `--metrics-listen`'s listener, if any.
    metrics_listener: Option<TcpListener>,
}

/// Opens the store, reads the key, binds the listener, seeds the demo data
/// and writes its credentials file, and warns about exposed files.
async fn start(args: &Args) -> Result<Started, String> {
    // The recorder before the store and the gateway, which register their
    // series at zero: /metrics lists them all before the first request.
    let metrics = PrometheusMetrics::install().map_err(|error| describe(&error))?;
    // The store first: a key file is only created for a store that opens.
    let store = args.store.open().await.map_err(|error| describe(&error))?;
    let (key, key_path) = server_key(args)?;
    let mut private_files: Vec<PathBuf> = key_path.into_iter().collect();
    if let StoreUrl::Sqlite(database) = &args.store {
        private_files.extend(sqlite_files(database));
    }
    if let Some(path) = &args.resource_servers {
        private_files.push(path.clone());
    }
    warn_if_exposed(&private_files);

    // Before the listener, whose backlog follows the cap.
    let connections = conversion_gateway::axum::fit_open_files(args.connections);
    let listener = conversion_gateway::axum::listen(&args.listen, &connections)
        .await
        .map_err(|error| format!("cannot listen on {}: {error}", args.listen))?;
    let address = listener
        .local_addr()
        .map_err(|error| format!("cannot read the listening address: {error}"))?;
    // From the bound address, so that `--listen 127.0.0.1:0` gets the real port.
    let base_url = args
        .base_url
        .clone()
        .unwrap_or_else(|| format!("http://{address}"));
    let mut config = GatewayConfig::new(base_url.as_str());
    config.refresh_policy = args.refresh_policy;
    config.rate_limits = args.limits.limits;
    config.rate_limiter_failure = args.limits.failure;
    let mut stores = store.stores();
    if let Some(url) = &args.events {
        let mut options = NatsOptions::default();
        options.stream.clone_from(&args.events_stream);
        // Subjects named after the stream (`CONVERSIONS` takes
        // `conversions.>`), so that streams of other deployments on the
        // same NATS never overlap.
        options.subject_prefix = args.events_stream.to_lowercase();
        options.duplicate_window = config
            .idempotency_retention
            .try_into()
            .unwrap_or(options.duplicate_window);
        let sink = NatsEventSink::connect(url, options)
            .await
            .map_err(|error| format!("--events: {}", describe(&error)))?;
        stores.events = Arc::new(sink);
    }
    let mut gateway = Gateway::new(config, stores.clone(), key.hasher())
        .with_rate_limiter(args.limits.limiter()?);
    if let Some(path) = &args.resource_servers {
        for (id, secret) in resource_servers(path)? {
            gateway = gateway.with_resource_server(id, &secret);
        }
    }
    let gateway = Arc::new(gateway);

    let passwords = Passwords::recommended();
    let demo = seed_demo(&gateway, &stores, &key, &passwords)
        .await
        .map_err(|error| format!("cannot seed the demo data: {}", describe(&error)))?;
    // Never to the log: logs are copied, shipped and kept far more widely
    // than a file only its owner can read. The listener is already bound, so
    // a client that waits for this file finds the port open.
    let demo_path = args.demo_credentials_path();
    demo.write_private(&demo_path).map_err(|error| {
        format!(
            "cannot write the demo credentials to {} ({error}); pass --demo-credentials PATH to write them elsewhere",
            demo_path.display()
        )
    })?;
    tracing::info!(
        path = %demo_path.display(),
        "demo credentials written (client id and secret, API key, e-mail and password)"
    );

    let dialog = DialogState::new(
        gateway.clone(),
        &key,
        passwords,
        LoginLimits::recommended(),
        Arc::new(SystemClock),
    );
    tracing::info!(
        %address,
        %base_url,
        store = %args.store,
        events = if args.events.is_some() { "nats" } else { "store" },
        rate_limits = %args.limits.describe_store(),
        max_connections = connections.max_connections,
        "listening"
    );
    let metrics_listener = match &args.metrics_listen {
        Some(address) => {
            let listener = TcpListener::bind(address)
                .await
                .map_err(|error| format!("cannot listen on {address} for metrics: {error}"))?;
            let bound = listener
                .local_addr()
                .map_err(|error| format!("cannot read the metrics address: {error}"))?;
            tracing::info!(address = %bound, "metrics listening");
            Some(listener)
        }
        None => None,
    };
    Ok(Started {
        store,
        listener,
        dialog,
        gateway,
        connections,
        metrics,
        metrics_listener,
    })
}

impl Started {
    /// Serves until `shutdown` resolves, lets the requests in flight finish
    /// (up to `--shutdown-timeout`), then closes the store.
    async fn serve(self, shutdown: impl Future<Output = ()>) {
        let purge = tokio::spawn(conversion_gateway::purge_every(
            self.gateway.clone(),
            conversion_gateway::PURGE_EVERY,
        ));
        let upkeep = tokio::spawn(self.metrics.clone().upkeep(METRICS_UPKEEP_EVERY));
        // /metrics beside the API, or on its own listener.
        let (beside, own) = match self.metrics_listener {
            Some(listener) => {
                let routes: axum::Router = metrics_router(self.metrics);
                (
                    None,
                    Some(tokio::spawn(
                        async move { axum::serve(listener, routes).await },
                    )),
                )
            }
            None => (Some(self.metrics), None),
        };
        let drained = conversion_gateway::axum::serve(
            self.listener,
            with_request_log(app::router(self.gateway.clone(), self.dialog, beside)),
            self.connections,
            shutdown,
        )
        .await;
        if let Some(metrics) = own {
            metrics.abort();
        }
        // No request runs any more: whatever was acknowledged is in the
        // store. Closing it checkpoints SQLite's write-ahead log. A purge
        // cut off here loses nothing: each of its statements is atomic, and
        // the next start carries on.
        purge.abort();
        upkeep.abort();
        self.store.close().await;
        match drained {
            Drained::All => tracing::info!("stopped"),
            Drained::Cut(connections) => {
                tracing::warn!(connections, "stopped; some requests were cut off");
            }
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM. The handlers are installed when this is
/// called, not when the future is first polled: the server logs that it
/// listens before it polls this, and a SIGTERM sent right after that line
/// must start a graceful shutdown, not kill the process (the default
/// action of a signal without a handler).
fn shutdown_signal() -> impl Future<Output = ()> {
    #[cfg(unix)]
    let signals = {
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::interrupt()).ok(),
            signal(SignalKind::terminate()).ok(),
        )
    };
    async move {
        #[cfg(unix)]
        {
            let (mut interrupt, mut terminate) = signals;
            let interrupt = async {
                match interrupt.as_mut() {
                    Some(signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            let terminate = async {
                match terminate.as_mut() {
                    Some(signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = interrupt => {}
                () = terminate => {}
            }
        }
        #[cfg(not(unix))]
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
        tracing::info!("shutting down: finishing the requests in flight");
    }
}

/// The server key: `--key-file`, else `CONVERSION_GATEWAY_KEY`, else the key
/// file beside the SQLite database (a fresh key for the memory store); and
/// the key file's path, if it came from one.
fn server_key(args: &Args) -> Result<(ServerKey, Option<PathBuf>), String> {
    let from_file = |path: &Path| Ok((key_file(path)?, Some(path.to_owned())));
    if let Some(path) = &args.key_file {
        return from_file(path);
    }
    match std::env::var("CONVERSION_GATEWAY_KEY") {
        Ok(hex) => {
            tracing::info!("server key: from CONVERSION_GATEWAY_KEY");
            return ServerKey::from_hex(&hex)
                .map(|key| (key, None))
                .ok_or_else(|| "CONVERSION_GATEWAY_KEY must be 64 hexadecimal digits".to_owned());
        }
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err("CONVERSION_GATEWAY_KEY must be 64 hexadecimal digits".into());
        }
        Err(std::env::VarError::NotPresent) => {}
    }
    match &args.store {
        StoreUrl::Memory => {
            tracing::info!("server key: a fresh one (the memory store keeps nothing anyway)");
            Ok((ServerKey::generate(), None))
        }
        StoreUrl::Sqlite(database) => {
            let mut path = database.as_os_str().to_owned();
            path.push(".key");
            from_file(Path::new(&path))
        }
        StoreUrl::Postgres(_) => from_file(Path::new("conversion-gateway.key")),
    }
}

fn key_file(path: &Path) -> Result<ServerKey, String> {
    let (key, created) = ServerKey::load_or_create(path)
        .map_err(|error| format!("cannot use the key file {}: {error}", path.display()))?;
    if created {
        tracing::info!(path = %path.display(), "server key: created a key file; keep it with the store");
    } else {
        tracing::info!(path = %path.display(), "server key: read from the key file");
    }
    Ok(key)
}

/// An error and its causes, for a message that says what really failed.
fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
