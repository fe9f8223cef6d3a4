//! The service as a process (its binary, started with its command
//! line on a loopback port, killed on drop), an HTTP client for it, and the
//! answers both harnesses read.

use std::io::Read as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use conversion_gateway_testkit::TempDir;
pub use conversion_gateway_testkit::{Reply, encode, form, hidden, url_param as param};
use serde_json::Value;

/// The base URL the dialog tests give the server: the realm of its
/// challenges, and plain http, so cookies are not `Secure`.
pub const BASE_URL: &str = "http://gateway.test";

/// The demo app's redirect URI, as the server registers it.
pub const DEMO_REDIRECT_URI: &str = "http://127.0.0.1:9/callback";

/// The longest a test waits for the server to start or stop.
const PATIENCE: Duration = Duration::from_secs(60);

/// The service's binary, which cargo builds for this package's tests.
pub fn server_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_conversion-gateway"))
}

/// The binary of the library's example `name` (`consumer`), which a plain
/// `cargo test` from the repository's root builds into
/// `target/<profile>/examples/`; checked to be newer than its sources.
pub fn example_binary(name: &str) -> PathBuf {
    let test = std::env::current_exe().expect("the test binary's path");
    let profile = test
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test binary>");
    let binary = profile
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        binary.is_file(),
        "the example {name}'s binary is missing at {}: a plain `cargo test` \
         from the repository's root builds it; otherwise run \
         `cargo build -p conversion-gateway --example {name}` first",
        binary.display()
    );
    // `cargo test -p conversion-gateway-server` does not build the
    // library's examples: refuse to test an old binary against newer
    // sources (those cargo's dep-info lists).
    let built = modified(&binary);
    let sources = std::fs::read_to_string(binary.with_extension("d")).unwrap_or_default();
    let newer = sources
        .lines()
        .next()
        .and_then(|line| line.split_once(": "))
        .into_iter()
        .flat_map(|(_, sources)| sources.split_whitespace())
        .map(Path::new)
        .find(|source| source.is_file() && modified(source) > built);
    if let Some(newer) = newer {
        panic!(
            "the example {name}'s binary is older than {}: run \
             `cargo build -p conversion-gateway --example {name}` (a plain \
             `cargo test` from the root does)",
            newer.display()
        );
    }
    binary
}

fn modified(path: &Path) -> std::time::SystemTime {
    std::fs::metadata(path)
        .and_then(|metadata| metadata.modified())
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// The demo credentials file the server writes.
pub type Demo = conversion_gateway::DemoCredentials;

/// A running service, killed when dropped.
pub struct Server {
    child: Option<Child>,
    /// The address it listens on (from its "listening" log line).
    pub address: SocketAddr,
    /// `http://` and the address.
    pub url: String,
    /// What its demo credentials file says.
    pub demo: Demo,
    /// Where its stderr goes.
    pub log: PathBuf,
    /// Holds the log and the demo credentials file, unless the test gave
    /// paths of its own.
    _dir: TempDir,
}

/// A command line for the server, run in a fresh temporary directory.
pub struct Launch {
    args: Vec<String>,
    dir: TempDir,
    cwd: Option<PathBuf>,
}

impl Launch {
    /// `--listen 127.0.0.1:0 --store memory --base-url http://gateway.test`
    /// and a demo credentials file in a temporary directory, then `extra`.
    pub fn memory(extra: &[&str]) -> Self {
        Self::with_args(&["--store", "memory", "--base-url", BASE_URL]).args(extra)
    }

    /// `--listen 127.0.0.1:0` and a demo credentials file in a temporary
    /// directory (unless `args` name one), then `args`.
    pub fn with_args(args: &[&str]) -> Self {
        let dir = TempDir::new("server");
        let mut all = vec!["--listen".to_owned(), "127.0.0.1:0".to_owned()];
        if !args.iter().any(|arg| arg.starts_with("--demo-credentials")) {
            all.push("--demo-credentials".to_owned());
            all.push(dir.path("demo.json").display().to_string());
        }
        let launch = Self {
            args: all,
            dir,
            cwd: None,
        };
        launch.args(args)
    }

    /// No arguments at all but `--listen`, run in `cwd`.
    pub fn bare(cwd: &Path, args: &[&str]) -> Self {
        let mut all = vec!["--listen".to_owned(), "127.0.0.1:0".to_owned()];
        all.extend(args.iter().map(|arg| (*arg).to_owned()));
        Self {
            args: all,
            dir: TempDir::new("server"),
            cwd: Some(cwd.to_owned()),
        }
    }

    pub fn args(mut self, extra: &[&str]) -> Self {
        self.args.extend(extra.iter().map(|arg| (*arg).to_owned()));
        self
    }

    /// Starts the server and waits (bounded) until it listens and its demo
    /// credentials file is written.
    pub fn start(self) -> Server {
        let log = self.dir.path("server.log");
        let mut command = Command::new(server_binary());
        command
            .args(&self.args)
            .env_remove("CONVERSION_GATEWAY_KEY")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("a log file"));
        if let Some(cwd) = &self.cwd {
            command.current_dir(cwd);
        }
        let mut child = command.spawn().expect("start the service");
        let started = Instant::now();
        let address = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(address) = listening_address(&text) {
                break address;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the server exited with {status} before listening:\n{text}");
            }
            if started.elapsed() > PATIENCE {
                let _ = child.kill();
                panic!("the server did not listen within {PATIENCE:?}:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let demo_path = demo_path(&text).expect("the log names the demo credentials file");
        let demo_path = match &self.cwd {
            Some(cwd) => cwd.join(demo_path),
            None => PathBuf::from(demo_path),
        };
        let demo = std::fs::read_to_string(&demo_path)
            .unwrap_or_else(|error| panic!("read {}: {error}", demo_path.display()));
        let demo: Demo = serde_json::from_str(&demo).expect("the demo credentials are JSON");
        Server {
            child: Some(child),
            address,
            url: format!("http://{address}"),
            demo,
            log,
            _dir: self.dir,
        }
    }

    /// Runs the server expecting it to fail: its exit status and stderr.
    pub fn fail(self) -> (ExitStatus, String) {
        let mut command = Command::new(server_binary());
        command
            .args(&self.args)
            .env_remove("CONVERSION_GATEWAY_KEY")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(cwd) = &self.cwd {
            command.current_dir(cwd);
        }
        let mut child = command.spawn().expect("start the service");
        let status = wait_bounded(&mut child).expect("the server exits on its own");
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        (status, stderr)
    }
}

/// The address of the "listening" log line.
fn listening_address(log: &str) -> Option<SocketAddr> {
    let line = log.lines().find(|line| line.contains(" listening "))?;
    let address = line.split("address=").nth(1)?.split(' ').next()?;
    address.parse().ok()
}

/// The path of the "demo credentials written" log line.
fn demo_path(log: &str) -> Option<String> {
    let line = log
        .lines()
        .find(|line| line.contains("demo credentials written"))?;
    Some(line.split("path=").nth(1)?.trim().to_owned())
}

/// Waits for `child` to exit, at most [`PATIENCE`].
fn wait_bounded(child: &mut Child) -> Option<ExitStatus> {
    let started = Instant::now();
    while started.elapsed() < PATIENCE {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    None
}

impl Server {
    /// Everything the server logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (bounded) until the log holds `text`.
    pub fn wait_for_log(&self, text: &str) -> String {
        let started = Instant::now();
        loop {
            let logs = self.logs();
            if logs.contains(text) {
                return logs;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "{text:?} never logged:\n{logs}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the process at once (`SIGKILL`): a crash, no shutdown (the
    /// NATS tests' and the webhooks' crash of a server).
    pub fn kill(&self) {
        let pid = self.child.as_ref().expect("running").id();
        let status = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -KILL {pid}: {status}");
    }

    pub fn terminate(&self) {
        let pid = self.child.as_ref().expect("running").id();
        let status = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM {pid}: {status}");
    }

    /// Stops the server gracefully and waits (bounded) for it to exit: its
    /// exit status and its whole log.
    pub fn stop(mut self) -> (ExitStatus, String) {
        self.terminate();
        let mut child = self.child.take().expect("running");
        let status = wait_bounded(&mut child).expect("the server stops after SIGTERM");
        (status, self.logs())
    }

    /// Waits (bounded) for an exit already under way.
    pub fn wait_exit(mut self) -> (ExitStatus, String) {
        let mut child = self.child.take().expect("running");
        let status = wait_bounded(&mut child).expect("the server exits");
        (status, self.logs())
    }

    /// An HTTP client of this server, from `127.0.0.1`.
    pub fn client(&self) -> Client {
        self.client_from("127.0.0.1".parse().unwrap())
    }

    /// An HTTP client of this server whose connections come from `local`
    /// (any address of 127.0.0.0/8 on Linux).
    pub fn client_from(&self, local: IpAddr) -> Client {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .local_address(local)
            .timeout(Duration::from_secs(30))
            .build()
            .expect("an HTTP client");
        Client {
            http,
            url: self.url.clone(),
            log: self.log.clone(),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// An HTTP client of one server; paths are relative to its URL.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    url: String,
    /// The server's log, shown when it does not answer.
    log: PathBuf,
}

impl Client {
    pub async fn send(&self, request: reqwest::RequestBuilder) -> Reply {
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) => panic!(
                "the server did not answer: {error:?}\nits log:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            ),
        };
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.bytes().await.expect("a readable body");
        Reply {
            status,
            headers,
            body,
        }
    }

    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, format!("{}{path}", self.url))
    }

    pub async fn get(&self, path: &str, cookies: &str) -> Reply {
        let mut request = self.request(reqwest::Method::GET, path);
        if !cookies.is_empty() {
            request = request.header("cookie", cookies);
        }
        self.send(request).await
    }

    pub async fn post(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<reqwest::Body>,
    ) -> Reply {
        let mut request = self.request(reqwest::Method::POST, path);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.send(request.body(body)).await
    }

    pub async fn post_form(&self, path: &str, cookies: &str, fields: &[(&str, &str)]) -> Reply {
        let mut headers = vec![("content-type", "application/x-www-form-urlencoded")];
        if !cookies.is_empty() {
            headers.push(("cookie", cookies));
        }
        self.post(path, &headers, form(fields)).await
    }

    pub async fn post_json(&self, path: &str, authorization: Option<&str>, body: &Value) -> Reply {
        let mut headers = vec![("content-type", "application/json")];
        if let Some(authorization) = authorization {
            headers.push(("authorization", authorization));
        }
        self.post(path, &headers, body.to_string()).await
    }
}

/// How a body is framed in [`Server::post_partially`].
#[derive(Clone, Copy, Debug)]
pub enum Framing {
    /// `Content-Length` of this many bytes.
    Length(usize),
    /// `Transfer-Encoding: chunked`, no length said.
    Chunked,
}

impl Server {
    /// Posts `sent` bytes of a form body to `path`, framed as `framing`
    /// says, and then nothing more, holding the connection open: the status
    /// of an answer that comes within 5 seconds, or `None` if the server
    /// waits for the rest of the body.
    pub async fn post_partially(&self, path: &str, framing: Framing, sent: usize) -> Option<u16> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut stream = tokio::net::TcpStream::connect(self.address)
            .await
            .expect("the server accepts");
        let framing_header = match framing {
            Framing::Length(length) => format!("content-length: {length}"),
            Framing::Chunked => "transfer-encoding: chunked".to_owned(),
        };
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/x-www-form-urlencoded\r\n{framing_header}\r\n\r\n",
            self.address
        );
        let mut request = head.into_bytes();
        if matches!(framing, Framing::Chunked) {
            request.extend_from_slice(format!("{sent:x}\r\n").as_bytes());
        }
        request.extend(std::iter::repeat_n(b'a', sent));
        stream
            .write_all(&request)
            .await
            .expect("the request is sent");
        let mut answer = Vec::new();
        let read = async {
            let mut buffer = [0u8; 4096];
            while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => answer.extend_from_slice(&buffer[..n]),
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), read).await;
        let text = String::from_utf8_lossy(&answer);
        text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
    }
}

/// A conversion event the demo account accepts.
pub fn conversion_body(email: &str) -> Value {
    serde_json::json!({
        "event_type": "CONVERSION",
        "event_family": "CDP",
        "payload": { "conversion_identifier": "newsletter", "email": email, "cf_plan": "pro" },
    })
}

/// What a browser and an app do with the server: open the dialog, sign
/// in, decide, exchange the code.
impl Server {
    pub fn dialog_query(&self, extra: &str) -> String {
        format!(
            "client_id={}&redirect_uri={}{extra}",
            self.demo.client_id,
            encode(DEMO_REDIRECT_URI)
        )
    }

    /// Opens the sign-in page and signs in as the demo account: the session
    /// cookie, as a `Cookie` header value.
    pub async fn sign_in(&self, query: &str) -> String {
        let client = self.client();
        let page = client.get(&format!("/auth/dialog?{query}"), "").await;
        assert_eq!(page.status, 200, "{}", page.text());
        let nonce = page.cookie("cg_login").expect("a login nonce cookie");
        let reply = client
            .post_form(
                "/auth/dialog",
                &format!("cg_login={nonce}"),
                &[
                    ("action", "login"),
                    ("query", query),
                    ("csrf", &page.hidden("csrf")),
                    ("email", &self.demo.email),
                    ("password", &self.demo.password),
                ],
            )
            .await;
        assert_eq!(reply.status, 303, "{}", reply.text());
        assert_eq!(reply.location(), format!("/auth/dialog?{query}"));
        format!(
            "cg_session={}",
            reply.cookie("cg_session").expect("a session cookie")
        )
    }

    /// Opens the sign-in page and posts `email` and `password` from
    /// `address`: the answer to the login form.
    pub async fn try_sign_in(&self, address: IpAddr, email: &str, password: &str) -> Reply {
        let client = self.client_from(address);
        let query = self.dialog_query("");
        let page = client.get(&format!("/auth/dialog?{query}"), "").await;
        let nonce = page.cookie("cg_login").expect("a login nonce cookie");
        let fields = [
            ("action", "login"),
            ("query", query.as_str()),
            ("csrf", &page.hidden("csrf")),
            ("email", email),
            ("password", password),
        ];
        client
            .post_form("/auth/dialog", &format!("cg_login={nonce}"), &fields)
            .await
    }

    /// Signs in, answers the consent screen, and returns the answer.
    pub async fn decide(&self, query: &str, decision: &str) -> Reply {
        let session = self.sign_in(query).await;
        let client = self.client();
        let consent = client.get(&format!("/auth/dialog?{query}"), &session).await;
        assert!(
            consent.html().contains("Allow access?"),
            "{}",
            consent.text()
        );
        let fields = [
            ("action", "consent"),
            ("query", query),
            ("csrf", &consent.hidden("csrf")),
            ("decision", decision),
        ];
        client.post_form("/auth/dialog", &session, &fields).await
    }

    /// A fresh code for the demo app.
    pub async fn code(&self) -> String {
        let reply = self.decide(&self.dialog_query(""), "allow").await;
        assert_eq!(reply.status, 302, "{}", reply.text());
        param(reply.location(), "code").expect("a code")
    }

    /// A fresh code exchanged with JSON: (access token, refresh token).
    pub async fn tokens(&self) -> (String, String) {
        let code = self.code().await;
        let body = serde_json::json!({
            "client_id": self.demo.client_id, "client_secret": self.demo.client_secret, "code": code,
        });
        let reply = self.client().post_json("/auth/token", None, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let tokens = reply.json();
        (
            tokens["access_token"].as_str().unwrap().to_owned(),
            tokens["refresh_token"].as_str().unwrap().to_owned(),
        )
    }

    pub async fn refresh(&self, refresh_token: &str) -> Reply {
        let body = serde_json::json!({
            "client_id": self.demo.client_id, "client_secret": self.demo.client_secret, "refresh_token": refresh_token,
        });
        self.client().post_json("/auth/token", None, &body).await
    }

    pub async fn convert(&self, api_key: &str, body: &Value) -> Reply {
        self.client()
            .post_json(
                &format!("/platform/conversions?api_key={api_key}"),
                None,
                body,
            )
            .await
    }
}

/// Requests from `127.0.0.1`.
impl Server {
    pub async fn get(&self, path: &str, cookies: &str) -> Reply {
        self.client().get(path, cookies).await
    }

    pub async fn post(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<reqwest::Body>,
    ) -> Reply {
        self.client().post(path, headers, body).await
    }

    pub async fn post_form(&self, path: &str, cookies: &str, fields: &[(&str, &str)]) -> Reply {
        self.client().post_form(path, cookies, fields).await
    }

    pub async fn post_json(&self, path: &str, authorization: Option<&str>, body: &Value) -> Reply {
        self.client().post_json(path, authorization, body).await
    }
}

/// Asserts the headers of every dialog answer: no caching, no framing, a
/// policy that allows no script.
#[track_caller]
pub fn assert_dialog_headers(reply: &Reply) {
    assert_eq!(reply.header("cache-control"), Some("no-store"));
    assert_eq!(reply.header("x-frame-options"), Some("DENY"));
    let policy = reply.header("content-security-policy").expect("a CSP");
    for directive in [
        "default-src 'none'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "style-src 'sha256-",
    ] {
        assert!(policy.contains(directive), "{policy}");
    }
    assert!(!policy.contains("unsafe"), "{policy}");
    assert!(
        !policy.contains("script-src"),
        "no script is allowed: {policy}"
    );
}

/// The server's SQLite store opened by the test too (SQLite lets two
/// processes share a file), and a gateway on it with the server's key from
/// `key_file`: what another instance of the service would see.
pub async fn sqlite_gateway(
    database: &Path,
    key_file: &Path,
) -> (
    std::sync::Arc<conversion_gateway::SqliteStore>,
    conversion_gateway::Gateway,
) {
    use conversion_gateway::{Gateway, GatewayConfig, SecretHash, SecretHasher, Stores};
    let hex = std::fs::read_to_string(key_file).expect("the server's key file");
    let key = SecretHash::from_hex(hex.trim()).expect("64 hex digits");
    let store = std::sync::Arc::new(
        conversion_gateway::SqliteStore::open(database)
            .await
            .expect("open SQLite"),
    );
    let stores = Stores::sharing(store.clone());
    let gateway = Gateway::new(
        GatewayConfig::new(BASE_URL),
        stores,
        SecretHasher::new(*key.as_bytes()),
    );
    (store, gateway)
}
