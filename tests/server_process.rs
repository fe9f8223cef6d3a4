//! The example server's process (`examples/server/main.rs` and `serve.rs`),
//! in-process on loopback: its start (the demo credentials file, the log,
//! the file permission warnings), and its connections (the header timeout,
//! the connection cap, the shutdown deadline).

// The whole of main.rs, with app.rs and serve.rs, as a module; its `main`
// and some of the app are not used here.
#[allow(dead_code)]
#[path = "../examples/server/main.rs"]
mod server;

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing::get;
use conversion_gateway::{
    Account, ClientRegistration, CodeLookup, Gateway, GatewayConfig, ManualClock, OsRandom,
    RefreshPolicy, SecretHasher, Stores,
};
use server::serve::{ConnectionLimits, Drained, serve};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, oneshot};

/// A log sink for one test: what is logged on this thread.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Collects every event logged on this thread while the guard lives
    /// (a `#[tokio::test]` runs every task on its one thread).
    fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let logs = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || logs.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::TRACE)
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// A directory for one test's files, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let path = std::env::temp_dir().join(format!("cg-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn args(list: &[&str]) -> server::Args {
    server::Args::parse(list.iter().map(|arg| (*arg).to_owned()))
        .expect("valid arguments")
        .expect("not --help")
}

#[cfg(all(unix, feature = "sqlite"))]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

// --- start -------------------------------------------------------------------

#[test]
fn demo_credentials_default_to_a_file_beside_the_database_or_in_the_working_directory() {
    let path = |list: &[&str]| args(list).demo_credentials_path();
    assert_eq!(path(&[]), Path::new("conversion-gateway.db.demo.json"));
    assert_eq!(
        path(&["--store", "sqlite:/var/lib/cg/gw.db"]),
        Path::new("/var/lib/cg/gw.db.demo.json")
    );
    assert_eq!(
        path(&["--store", "memory"]),
        Path::new("conversion-gateway.demo.json")
    );
    assert_eq!(
        path(&["--store", "memory", "--demo-credentials", "demo.json"]),
        Path::new("demo.json")
    );
}

#[test]
fn connection_flags_set_the_limits_and_refuse_zero() {
    let parsed = args(&[
        "--header-timeout",
        "3",
        "--max-connections=64",
        "--shutdown-timeout",
        "5",
    ]);
    assert_eq!(
        parsed.connections,
        ConnectionLimits {
            header_timeout: Duration::from_secs(3),
            max_connections: 64,
            shutdown_timeout: Duration::from_secs(5),
        }
    );
    assert_eq!(args(&[]).connections, ConnectionLimits::default());
    for bad in [
        &["--max-connections", "0"][..],
        &["--header-timeout", "-1"],
        &["--shutdown-timeout", "soon"],
        &["--header-timeout"],
    ] {
        let parsed = server::Args::parse(bad.iter().map(|arg| (*arg).to_owned()));
        assert!(parsed.is_err(), "{bad:?} was accepted");
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn the_demo_credentials_go_to_a_private_file_and_never_to_the_log() {
    let dir = TempDir::new("demo-file");
    let database = dir.path("gateway.db");
    let store = format!("sqlite:{}", database.display());
    let logs = Logs::default();
    let _guard = logs.capture();

    // Without --demo-credentials.
    let args = args(&["--listen", "127.0.0.1:0", "--store", &store]);
    let started = server::start(&args).await.expect("the server starts");
    started.serve(std::future::ready(())).await;

    let file = dir.path("gateway.db.demo.json");
    #[cfg(unix)]
    assert_eq!(mode(&file), 0o600, "only the owner may read {file:?}");
    let demo: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let logs = logs.text();
    assert!(
        logs.contains(&format!("path={}", file.display())),
        "the log says where: {logs}"
    );
    for field in ["client_secret", "api_key", "password"] {
        let secret = demo[field].as_str().expect("a demo credential");
        assert!(secret.len() >= 16, "{field} is {secret:?}");
        assert!(!logs.contains(secret), "the {field} is in the log: {logs}");
    }
    assert!(logs.contains("stopped"), "{logs}");
}

#[cfg(all(unix, feature = "sqlite"))]
#[tokio::test]
async fn a_key_file_others_can_read_is_warned_about_at_start_by_path_only() {
    let dir = TempDir::new("exposed-key");
    let key_file = dir.path("gateway.key");
    let hex = "5a".repeat(32);
    std::fs::write(&key_file, format!("{hex}\n")).unwrap();
    set_mode(&key_file, 0o644);
    let logs = Logs::default();
    let _guard = logs.capture();

    let store = format!("sqlite:{}", dir.path("gateway.db").display());
    let demo = dir.path("demo.json");
    let args = args(&[
        "--listen",
        "127.0.0.1:0",
        "--store",
        &store,
        "--key-file",
        key_file.to_str().unwrap(),
        "--demo-credentials",
        demo.to_str().unwrap(),
    ]);
    let started = server::start(&args).await.expect("the server starts");
    started.serve(std::future::ready(())).await;

    let logs = logs.text();
    let warning = logs
        .lines()
        .find(|line| line.contains("WARN") && line.contains(key_file.to_str().unwrap()))
        .unwrap_or_else(|| panic!("no warning about the key file in {logs}"));
    assert!(warning.contains("mode=644"), "{warning}");
    assert!(warning.contains("chmod 600"), "{warning}");
    assert!(!logs.contains(&hex), "the key is in the log: {logs}");
    assert_eq!(mode(&key_file), 0o644, "warned about, not changed");
}

#[cfg(unix)]
#[test]
fn files_are_exposed_when_their_group_or_others_have_any_permission() {
    let dir = TempDir::new("modes");
    let file = dir.path("gateway.db");
    std::fs::write(&file, "").unwrap();
    for (mode, exposed) in [
        (0o600, false),
        (0o400, false),
        (0o700, false),
        (0o640, true),
        (0o604, true),
        (0o660, true),
        (0o602, true),
        (0o610, true),
    ] {
        set_mode(&file, mode);
        let found = server::exposed_mode(&file);
        assert_eq!(found.is_some(), exposed, "mode {mode:o}: {found:?}");
        if exposed {
            assert_eq!(found, Some(mode));
        }
    }
    assert_eq!(server::exposed_mode(&dir.path("missing")), None);

    // The database and its WAL files, each warned about by name.
    let files = server::sqlite_files(&file);
    assert_eq!(
        files,
        [
            file.clone(),
            dir.path("gateway.db-wal"),
            dir.path("gateway.db-shm")
        ]
    );
    std::fs::write(&files[1], "").unwrap();
    set_mode(&files[1], 0o644);
    set_mode(&file, 0o600);
    let logs = Logs::default();
    let _guard = logs.capture();
    assert_eq!(server::warn_if_exposed(&files), 1);
    let logs = logs.text();
    assert!(logs.contains("gateway.db-wal"), "{logs}");
    assert!(!logs.contains("gateway.db-shm"), "{logs}");
}

// --- connections ---------------------------------------------------------------

/// A route that answers with the client's address, and one that says when
/// it is entered and answers only when the test says so.
fn test_router(entered: Arc<Notify>, release: Arc<Notify>) -> Router {
    Router::new()
        .route(
            "/peer",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }),
        )
        .route(
            "/slow",
            get(move || async move {
                entered.notify_one();
                release.notified().await;
                "done"
            }),
        )
}

/// The serve loop on a loopback port with `limits`, until the sender is
/// used or dropped.
struct Running {
    address: SocketAddr,
    stop: oneshot::Sender<()>,
    served: tokio::task::JoinHandle<Drained>,
    entered: Arc<Notify>,
    release: Arc<Notify>,
}

async fn start_serving(limits: ConnectionLimits) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (stop, stopped) = oneshot::channel();
    let router = test_router(entered.clone(), release.clone());
    let served = tokio::spawn(serve(listener, router, limits, async {
        let _ = stopped.await;
    }));
    Running {
        address,
        stop,
        served,
        entered,
        release,
    }
}

/// Sends a GET on `stream` and reads the answer's head and body (the test
/// routes answer a few bytes with a Content-Length).
async fn get_on(stream: &mut TcpStream, path: &str) -> String {
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    read_answer(stream).await
}

/// Reads one answer: its head, then as many body bytes as it announces.
async fn read_answer(stream: &mut TcpStream) -> String {
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 1024];
    loop {
        let n = stream.read(&mut buffer).await.unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&bytes));
        bytes.extend_from_slice(&buffer[..n]);
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length: "))
                .map_or(0, |value| value.trim().parse().unwrap());
            if body.len() >= length {
                return text;
            }
        }
    }
}

#[tokio::test]
async fn requests_carry_the_client_address() {
    let running = start_serving(ConnectionLimits::default()).await;
    let mut stream = TcpStream::connect(running.address).await.unwrap();
    let answer = get_on(&mut stream, "/peer").await;
    let local = stream.local_addr().unwrap().to_string();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with(&local), "{local} not in {answer}");
    running.stop.send(()).unwrap();
    assert_eq!(running.served.await.unwrap(), Drained::All);
}

#[tokio::test]
async fn a_client_that_trickles_its_headers_is_cut_off_at_the_header_timeout() {
    let timeout = Duration::from_millis(500);
    let running = start_serving(ConnectionLimits {
        header_timeout: timeout,
        ..ConnectionLimits::default()
    })
    .await;
    let mut stream = TcpStream::connect(running.address).await.unwrap();
    let started = Instant::now();
    stream.write_all(b"GET /peer HTTP/1.1\r\n").await.unwrap();
    // One header byte every 50 ms, for up to 10 s, until the server hangs up.
    let header = b"X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    let mut answer = Vec::new();
    let closed_after = 'trickle: {
        for byte in header.iter().cycle().take(200) {
            let mut buffer = [0u8; 256];
            tokio::select! {
                read = stream.read(&mut buffer) => match read {
                    Ok(0) | Err(_) => break 'trickle started.elapsed(),
                    Ok(n) => answer.extend_from_slice(&buffer[..n]),
                },
                () = tokio::time::sleep(Duration::from_millis(50)) => {
                    if stream.write_all(&[*byte]).await.is_err() {
                        break 'trickle started.elapsed();
                    }
                }
            }
        }
        panic!("still open after {:?}", started.elapsed());
    };
    assert!(
        closed_after >= timeout && closed_after < timeout + Duration::from_secs(2),
        "closed after {closed_after:?}, the header timeout is {timeout:?}"
    );
    assert!(
        !String::from_utf8_lossy(&answer).contains("200 OK"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );

    // A client that sends its headers at once is served.
    let mut stream = TcpStream::connect(running.address).await.unwrap();
    let answer = get_on(&mut stream, "/peer").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    running.stop.send(()).unwrap();
    running.served.await.unwrap();
}

#[tokio::test]
async fn connections_beyond_the_cap_wait_until_one_closes() {
    let running = start_serving(ConnectionLimits {
        max_connections: 2,
        ..ConnectionLimits::default()
    })
    .await;
    // Two connections, each served once and kept alive: both slots taken.
    let mut first = TcpStream::connect(running.address).await.unwrap();
    let mut second = TcpStream::connect(running.address).await.unwrap();
    assert!(
        get_on(&mut first, "/peer")
            .await
            .starts_with("HTTP/1.1 200")
    );
    assert!(
        get_on(&mut second, "/peer")
            .await
            .starts_with("HTTP/1.1 200")
    );

    // The third is let in by the kernel's backlog, but not served.
    let mut third = TcpStream::connect(running.address).await.unwrap();
    third
        .write_all(b"GET /peer HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let mut buffer = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(300), third.read(&mut buffer)).await;
    assert!(early.is_err(), "the third connection was served: {early:?}");
    // The second still is.
    assert!(
        get_on(&mut second, "/peer")
            .await
            .starts_with("HTTP/1.1 200")
    );

    // A slot frees: the third is served.
    drop(first);
    let answer = tokio::time::timeout(Duration::from_secs(10), read_answer(&mut third))
        .await
        .expect("served once a slot is free");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    running.stop.send(()).unwrap();
    running.served.await.unwrap();
}

#[tokio::test]
async fn a_shutdown_finishes_the_requests_in_flight_and_refuses_new_connections() {
    let running = start_serving(ConnectionLimits::default()).await;
    let mut busy = TcpStream::connect(running.address).await.unwrap();
    busy.write_all(b"GET /slow HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    running.entered.notified().await;
    // An idle kept-alive connection is closed at once.
    let mut idle = TcpStream::connect(running.address).await.unwrap();
    assert!(get_on(&mut idle, "/peer").await.starts_with("HTTP/1.1 200"));

    running.stop.send(()).unwrap();
    let mut buffer = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(10), idle.read(&mut buffer)).await;
    assert!(
        matches!(read, Ok(Ok(0) | Err(_))),
        "the idle connection is closed: {read:?}"
    );
    // The listener is closed: no new connection.
    let refused = TcpStream::connect(running.address).await;
    assert!(refused.is_err(), "connected after the shutdown began");
    assert!(!running.served.is_finished(), "a request is in flight");

    running.release.notify_one();
    let answer = read_answer(&mut busy).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("done"), "{answer}");
    let drained = tokio::time::timeout(Duration::from_secs(10), running.served)
        .await
        .expect("the server stops once the request is answered")
        .unwrap();
    assert_eq!(drained, Drained::All);
}

#[tokio::test]
async fn a_shutdown_closes_what_is_still_open_at_the_deadline() {
    let deadline = Duration::from_millis(300);
    let running = start_serving(ConnectionLimits {
        shutdown_timeout: deadline,
        ..ConnectionLimits::default()
    })
    .await;
    let mut stuck = TcpStream::connect(running.address).await.unwrap();
    stuck
        .write_all(b"GET /slow HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    running.entered.notified().await;

    let started = Instant::now();
    running.stop.send(()).unwrap();
    let drained = tokio::time::timeout(Duration::from_secs(10), running.served)
        .await
        .expect("the server stops at the deadline")
        .unwrap();
    assert_eq!(drained, Drained::Cut(1));
    assert!(started.elapsed() >= deadline, "{:?}", started.elapsed());
    let mut buffer = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(10), stuck.read(&mut buffer)).await;
    assert!(
        matches!(read, Ok(Ok(0) | Err(_))),
        "the stuck connection is closed unanswered: {read:?}"
    );
}

// --- refresh policy and purge -------------------------------------------------

#[test]
fn the_refresh_policy_flag_chooses_the_default_and_refuses_others() {
    let grace = time::Duration::seconds(30);
    assert_eq!(args(&[]).refresh_policy, RefreshPolicy::Adaptive { grace });
    assert_eq!(
        args(&["--refresh-policy", "rotate"]).refresh_policy,
        RefreshPolicy::Rotate { grace }
    );
    assert_eq!(
        args(&["--refresh-policy=reuse"]).refresh_policy,
        RefreshPolicy::Reuse
    );
    for bad in [&["--refresh-policy", "strict"][..], &["--refresh-policy"]] {
        let parsed = server::Args::parse(bad.iter().map(|arg| (*arg).to_owned()));
        assert!(parsed.is_err(), "{bad:?} was accepted");
    }
}

#[tokio::test]
async fn the_server_runs_with_the_refresh_policy_it_was_given() {
    let dir = TempDir::new("refresh-policy");
    let demo = dir.path("demo.json");
    let args = args(&[
        "--listen",
        "127.0.0.1:0",
        "--store",
        "memory",
        "--refresh-policy",
        "rotate",
        "--demo-credentials",
        demo.to_str().unwrap(),
    ]);
    let started = server::start(&args).await.expect("the server starts");
    assert_eq!(
        started.gateway().config().refresh_policy,
        RefreshPolicy::Rotate {
            grace: time::Duration::seconds(30)
        }
    );
    started.serve(std::future::ready(())).await;
}

#[tokio::test]
async fn the_server_purges_expired_records_periodically() {
    let clock = Arc::new(ManualClock::at_epoch_of_tests());
    let stores = Stores::in_memory();
    let gateway = Arc::new(
        Gateway::new(
            GatewayConfig::new("http://gateway.test"),
            stores.clone(),
            SecretHasher::new([3; 32]),
        )
        .with_clock(clock.clone()),
    );
    // A code that expired long ago, left in the store.
    let (client, _) = gateway
        .register_client(ClientRegistration::new("App", ["https://app.example/cb"]))
        .await
        .unwrap();
    let account = Account::new("Acme", "owner@acme.example", &OsRandom);
    gateway.create_account(&account).await.unwrap();
    let request = gateway
        .authorization_request(&format!(
            "client_id={}&redirect_uri=https%3A%2F%2Fapp.example%2Fcb",
            client.id
        ))
        .await
        .unwrap();
    let approval = gateway.approve(&request, account.id).await.unwrap();
    let hash = approval.code().hash(&SecretHasher::new([3; 32]));
    assert!(matches!(
        stores.tokens.find_code(&hash).await.unwrap(),
        CodeLookup::Unused(_)
    ));
    clock.advance(time::Duration::days(30));

    let purge = tokio::spawn(server::purge_periodically(
        gateway.clone(),
        Duration::from_millis(20),
    ));
    // The purge runs at once and then every interval; wait (bounded) for
    // the code to be gone.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let code = stores.tokens.find_code(&hash).await.unwrap();
        if code == CodeLookup::NotFound {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the periodic purge never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    purge.abort();
}
