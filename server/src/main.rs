//! The whole service on one address: the authorization dialog, the token,
//! revocation and intake endpoints, on an embedded SQLite store by default.
//!
//! ```text
//! cargo run -p conversion-gateway-server -- --demo-credentials demo.json
//! cargo run -p conversion-gateway-server -- admin client create --name "Lead Sync" --redirect-uri https://app.example/cb
//! ```
//!
//! The routes, the pages, operations, the accept loop, the purge, webhook
//! delivery, the demo data, and the
//! stores, limiter and key file the flags name are the library's
//! (`conversion_gateway::axum`); the rest is what a host owns:
//!
//! | file | what |
//! |---|---|
//! | `main.rs` | logging, start (store, key, listeners, private files), the routes, shutdown |
//! | `cli.rs` | the command line: the server's flags, their checks and its help |
//! | `admin/` | `admin ...`: the operator's commands (accounts, apps, API keys, grants) as JSON |
//! | `limits.rs` | `--limit-per-*` and `--rate-limit-*`: the rate limits |

mod admin;
mod cli;
mod limits;

use std::future::Future;
use std::io::{self, IsTerminal as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use conversion_gateway::axum::pages::{self, PagesState};
use conversion_gateway::axum::{
    ConnectionLimits, Drained, METRICS_UPKEEP_EVERY, PrometheusMetrics, metrics_router,
    operations_router, shutdown_signal, with_request_log,
};
use conversion_gateway::{
    Argon2Passwords, Argon2Verifier, BackgroundTasks, ErrorChain, Gateway, GatewayConfig,
    HashingLimit, NatsEventSink, OpenedStore, OsRandom, PageFlows, ResourceServersError, ServerKey,
    SignInMethod, StoreUrl, SystemClock, ThrottleLimits, WebhookOptions, seed_demo,
    write_private_file,
};
use tokio::net::TcpListener;
use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use cli::Args;

/// mimalloc in place of glibc's malloc: fewer system calls as the heap grows
/// and faster small allocations on the request path (see Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let mut arguments = std::env::args_os().peekable();
    let program = arguments.next().unwrap_or_default();
    // `admin` first: its commands have flags of their own.
    if arguments.peek().is_some_and(|first| first == "admin") {
        return admin::run(arguments.skip(1)).await;
    }
    let args = match cli::parse(std::iter::once(program).chain(arguments)) {
        Ok(args) => args,
        Err(status) => return status,
    };
    init_logging();
    // Before the start's "listening" line, after which a SIGTERM must
    // drain the server, not kill it.
    let shutdown = shutdown_signal();
    match start(&args).await {
        Ok(started) => {
            started.serve(shutdown).await;
            ExitCode::SUCCESS
        }
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

/// A server ready to serve: its store open, its demo data seeded and its
/// listener bound.
struct Started {
    store: OpenedStore,
    listener: TcpListener,
    dialog: PagesState,
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
    let metrics = PrometheusMetrics::install().map_err(|error| ErrorChain(&error).to_string())?;
    // The store first: a key file is only created for a store that opens.
    let store = args
        .store
        .open()
        .await
        .map_err(|error| ErrorChain(&error).to_string())?;
    let (key, key_path) = server_key(&args.store, args.key_file.as_deref())?;
    let private_files: Vec<PathBuf> = (key_path.into_iter())
        .chain(args.store.private_files())
        .chain(args.resource_servers.clone())
        .collect();
    for file in conversion_gateway::exposed_files(&private_files) {
        tracing::warn!(
            path = %file.path.display(),
            mode = format_args!("{:o}", file.mode),
            "users other than the owner may read or write this file: run chmod 600 on it"
        );
    }

    // Before the listener, whose backlog follows the cap.
    let connections = conversion_gateway::axum::fit_open_files(args.connections());
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
    config.rate_limits = args.limits.limits();
    config.rate_limiter_failure = args.limits.failure;
    let mut stores = store.stores();
    if let Some(url) = &args.events {
        let mut options = args.events_stream.clone();
        options.duplicate_window = config.idempotency_retention.unsigned_abs();
        let sink = NatsEventSink::connect(url, options)
            .await
            .map_err(|error| format!("--events: {}", ErrorChain(&error)))?;
        // The stream is the feed too: the webhook dispatcher follows it,
        // keeping its cursor and the deliveries in the store.
        let sink = Arc::new(sink);
        stores.events = sink.clone();
        stores.feed = sink;
    }
    let mut webhooks = WebhookOptions::over_http(args.webhooks_allow_private)
        .map_err(|error| format!("cannot build the webhook client: {}", ErrorChain(&error)))?;
    webhooks.retry_schedule = args.webhook_retry_schedule.clone();
    let mut gateway = Gateway::new(config, stores.clone(), key.hasher())
        .with_rate_limiter(args.limits.limiter()?)
        .with_webhooks(webhooks);
    if let Some(path) = &args.resource_servers {
        let shown = path.display();
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read --resource-servers {shown}: {error}"))?;
        gateway = gateway
            .with_resource_servers_json(&text)
            .map_err(|error| match error {
                ResourceServersError::NotAnObject => format!("--resource-servers {shown} {error}"),
                _ => format!("--resource-servers {shown}: {error}"),
            })?;
    }
    let gateway = Arc::new(gateway);

    let passwords = Argon2Passwords::recommended();
    let demo = seed_demo(&gateway, &key, &passwords)
        .await
        .map_err(|error| format!("cannot seed the demo data: {}", ErrorChain(&error)))?;
    if demo.api_key_switched_off {
        tracing::warn!("the demo API key is switched off in this store");
    }
    // Never to the log: logs are copied, shipped and kept far more widely
    // than a file only its owner can read. The listener is already bound, so
    // a client that waits for this file finds the port open.
    let demo_path = args.demo_credentials_path();
    write_private_file(&demo_path, demo.to_json().as_bytes()).map_err(|error| {
        format!(
            "cannot write the demo credentials to {} ({error}); pass --demo-credentials PATH to write them elsewhere",
            demo_path.display()
        )
    })?;
    tracing::info!(
        path = %demo_path.display(),
        "demo credentials written (client id and secret, API key, e-mail and password)"
    );

    // Our sign-in form: one password check per core at a time, failures
    // throttled with the library's defaults, sessions and CSRF tokens keyed
    // from the server key.
    let verifier = Argon2Verifier::new(passwords, HashingLimit::per_core());
    let sign_in = SignInMethod::form(verifier, ThrottleLimits::default());
    let flows = PageFlows::new(gateway.clone(), &key, sign_in, Arc::new(SystemClock));
    let dialog = PagesState::new(flows);
    tracing::info!(
        %address,
        %base_url,
        store = %args.store,
        events = if args.events.is_some() { "nats" } else { "store" },
        webhook_retry_schedule = %args.webhook_retry_schedule,
        webhooks_allow_private = args.webhooks_allow_private,
        rate_limits = %args.limits.store,
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
        // The purge, webhook delivery and the metrics' upkeep.
        let background = BackgroundTasks::spawn(self.gateway.clone())
            .with(self.metrics.clone().upkeep(METRICS_UPKEEP_EVERY));
        // The library's pages, JSON routes and operator's routes, each
        // answering its own panics; /metrics beside them, or on its own
        // listener.
        let mut app: axum::Router = pages::routes(self.dialog)
            .merge(conversion_gateway::axum::router(self.gateway.clone()))
            .merge(operations_router(self.gateway.clone()));
        let own = match self.metrics_listener {
            Some(listener) => {
                let routes: axum::Router = metrics_router(self.metrics);
                Some(tokio::spawn(
                    async move { axum::serve(listener, routes).await },
                ))
            }
            None => {
                app = app.merge(metrics_router(self.metrics));
                None
            }
        };
        let drained = conversion_gateway::axum::serve(
            self.listener,
            with_request_log(app),
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
        // Attempts cut off here keep their lease until it ends, and are
        // made again then (by this server after a restart, or another).
        background.stop().await;
        self.store.close().await;
        match drained {
            Drained::All => tracing::info!("stopped"),
            Drained::Cut(connections) => {
                tracing::warn!(connections, "stopped; some requests were cut off");
            }
        }
    }
}

/// The server key of `store`: `file` (`--key-file`), else
/// `CONVERSION_GATEWAY_KEY`, else the store's key file (beside the SQLite
/// database; a fresh key for the memory store); and the key file's path,
/// if it came from one.
fn server_key(
    store: &StoreUrl,
    file: Option<&Path>,
) -> Result<(ServerKey, Option<PathBuf>), String> {
    const INVALID: &str = "CONVERSION_GATEWAY_KEY must be 64 hexadecimal digits";
    if file.is_none() {
        match std::env::var("CONVERSION_GATEWAY_KEY") {
            Ok(hex) => {
                tracing::info!("server key: from CONVERSION_GATEWAY_KEY");
                return Ok((ServerKey::from_hex(&hex).ok_or(INVALID)?, None));
            }
            Err(std::env::VarError::NotUnicode(_)) => return Err(INVALID.into()),
            Err(std::env::VarError::NotPresent) => {}
        }
    }
    let Some(path) = file
        .map(Path::to_owned)
        .or_else(|| store.default_key_file())
    else {
        tracing::info!("server key: a fresh one (the memory store keeps nothing anyway)");
        return Ok((ServerKey::generate(&OsRandom), None));
    };
    let (key, created) = ServerKey::load_or_create(&path, &OsRandom)
        .map_err(|error| format!("cannot use the key file {}: {error}", path.display()))?;
    if created {
        tracing::info!(path = %path.display(), "server key: created a key file; keep it with the store");
    } else {
        tracing::info!(path = %path.display(), "server key: read from the key file");
    }
    Ok((key, Some(path)))
}
