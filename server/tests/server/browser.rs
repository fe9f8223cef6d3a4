//! The authorization dialog in a real browser: headless Chromium, driven
//! through ChromeDriver by fantoccini, signs in to the service,
//! answers the consent screen, and lands on the app's redirect URI.
//!
//! The server is the service's binary (`conversion-gateway`) started through its
//! command line on a loopback port, with the memory store
//! ([`crate::support::Launch`]); the demo credentials come from the file
//! `--demo-credentials` writes. The demo
//! app's redirect URI is `http://127.0.0.1:9/callback`, where nothing
//! listens (and port 9 is one Chromium refuses to connect to): the browser
//! shows an error page, whose address still is the callback URL, and that
//! address is what the tests read.
//!
//! Needs Chromium and ChromeDriver (Debian: `apt-get install chromium
//! chromium-driver`). Without them the tests fail, never skip: set
//! `CHROMIUM` and `CHROMEDRIVER` to use binaries elsewhere than `/usr/bin`.
//! Nothing leaves loopback: the server and ChromeDriver listen on
//! 127.0.0.1, Chromium runs with its background services off and resolves
//! no host name.

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use conversion_gateway_testkit::TempDir;
use fantoccini::wd::TimeoutConfiguration;
use fantoccini::{Client, ClientBuilder, Locator};
// fantoccini turns on hyper-util's `client-legacy` feature, for its own use.
use hyper_util::client::legacy::connect::HttpConnector;

use crate::support::{Demo, Launch, Server};

/// How long one scenario may take in the browser, once everything started.
const SCENARIO_BUDGET: Duration = Duration::from_secs(60);
/// How long a page, an element or an address may take to appear.
const STEP: Duration = Duration::from_secs(15);
/// How long ChromeDriver and the server may take to come up.
const START: Duration = Duration::from_secs(30);

const WRONG_PASSWORD_ALERT: &str = "The e-mail or the password is wrong. Please try again.";

// --- scenarios -----------------------------------------------------------------

#[tokio::test]
async fn a_landing_page_on_another_origin_sends_a_conversion_with_send_beacon() {
    let harness = Harness::start("beacon").await;
    let landing = serve_landing_page(&harness.demo).await;
    let log = harness.server.log.clone();
    harness
        .run(move |client, _demo| async move {
            client.goto(&landing).await.expect("open the landing page");
            let deadline = Instant::now() + STEP;
            loop {
                let title = client.title().await.expect("the title");
                if title == "queued" {
                    break;
                }
                assert!(title != "refused", "sendBeacon refused to queue it");
                assert!(Instant::now() < deadline, "the page never sent: {title:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            // The browser sends the beacon in the background: the server's
            // request log shows it arrived and was accepted (200, not 415).
            let accepted = r#"method=POST path="/platform/conversions" status=200"#;
            let deadline = Instant::now() + STEP;
            loop {
                let logs = std::fs::read_to_string(&log).unwrap_or_default();
                if logs.contains(accepted) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the beacon was not accepted:\n{logs}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
}

/// Serves, on a loopback port of its own (so another origin than the
/// service's), the landing-page snippet of docs/intake.md: it sends one
/// conversion to the service with `navigator.sendBeacon`, which posts it as
/// `text/plain;charset=UTF-8` with no CORS preflight, and sets its title to
/// `queued` (or `refused`). Returns the page's address.
async fn serve_landing_page(demo: &Demo) -> String {
    let endpoint = format!(
        "{}/platform/conversions?api_key={}",
        demo.base_url, demo.api_key
    );
    let html = format!(
        r#"<!doctype html>
<html><head><meta charset="utf-8"><title>landing</title></head>
<body><h1>Thank you!</h1>
<script>
  const event = {{
    event_type: "CONVERSION",
    event_family: "CDP",
    payload: {{ conversion_identifier: "landing-beacon", email: "beacon@example.com" }}
  }};
  const queued = navigator.sendBeacon("{endpoint}", JSON.stringify(event));
  document.title = queued ? "queued" : "refused";
</script>
</body></html>"#
    );
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .expect("a port for the landing page");
    let address = listener.local_addr().expect("its address");
    let app = axum::Router::new().route(
        "/landing",
        axum::routing::get(move || {
            let html = html.clone();
            async move { axum::response::Html(html) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}/landing")
}

#[tokio::test]
async fn allowing_access_lands_on_the_callback_with_a_code_and_the_state() {
    Harness::start("allow")
        .await
        .run(|client, demo| async move {
            let state = "allow state/1";
            client
                .goto(&dialog_url(&demo, state))
                .await
                .expect("open the dialog");
            sign_in(&client, &demo.email, &demo.password).await;
            wait_for_heading(&client, "Allow access?").await;
            let prompt = client.find(Locator::Css("p")).await.unwrap();
            let prompt = prompt.text().await.unwrap();
            assert!(prompt.contains("Demo App asks to access"), "{prompt}");

            click(&client, r#"button[name="decision"][value="allow"]"#).await;
            let callback = wait_for_callback(&client, &demo.redirect_uri).await;
            let code = query_value(&callback, "code");
            assert!(
                code.as_deref()
                    .is_some_and(|code| code.starts_with("cgac_")),
                "no authorization code in {callback}"
            );
            assert_eq!(query_value(&callback, "state").as_deref(), Some(state));
            assert_eq!(query_value(&callback, "error"), None, "{callback}");
        })
        .await;
}

#[tokio::test]
async fn denying_access_lands_on_the_callback_with_access_denied_and_the_state() {
    Harness::start("deny")
        .await
        .run(|client, demo| async move {
            let state = "deny-42";
            client
                .goto(&dialog_url(&demo, state))
                .await
                .expect("open the dialog");
            sign_in(&client, &demo.email, &demo.password).await;
            wait_for(&client, r#"button[name="decision"][value="deny"]"#).await;

            click(&client, r#"button[name="decision"][value="deny"]"#).await;
            let callback = wait_for_callback(&client, &demo.redirect_uri).await;
            assert_eq!(
                query_value(&callback, "error").as_deref(),
                Some("access_denied"),
                "{callback}"
            );
            assert_eq!(query_value(&callback, "state").as_deref(), Some(state));
            assert_eq!(query_value(&callback, "code"), None, "{callback}");
        })
        .await;
}

#[tokio::test]
async fn a_wrong_password_shows_the_error_and_stays_on_the_dialog() {
    Harness::start("wrong-password")
        .await
        .run(|client, demo| async move {
            client
                .goto(&dialog_url(&demo, "wrong"))
                .await
                .expect("open the dialog");
            sign_in(&client, &demo.email, "not-the-password").await;

            let alert = wait_for(&client, r#"[role="alert"]"#).await;
            assert!(alert.is_displayed().await.unwrap(), "the alert is hidden");
            assert_eq!(alert.text().await.unwrap(), WRONG_PASSWORD_ALERT);
            let page = client.current_url().await.unwrap();
            assert_eq!(page.as_str(), format!("{}/auth/dialog", demo.base_url));
            let heading = client.find(Locator::Css("h1")).await.unwrap();
            assert_eq!(heading.text().await.unwrap(), "Sign in");
            // The e-mail is kept; the password is not.
            let email = client.find(Locator::Css("#email")).await.unwrap();
            assert_eq!(email.prop("value").await.unwrap(), Some(demo.email.clone()));
            let password = client.find(Locator::Css("#password")).await.unwrap();
            assert_eq!(password.prop("value").await.unwrap().as_deref(), Some(""));

            // The form on the error page still works.
            sign_in(&client, &demo.email, &demo.password).await;
            wait_for_heading(&client, "Allow access?").await;
        })
        .await;
}

// --- browser steps ---------------------------------------------------------------

/// Waits until the page's `h1` reads `expected`. Right after a form is sent
/// the old page may still be showing, and its heading may go stale while it
/// is read: both are retried until [`STEP`] has passed.
async fn wait_for_heading(client: &Client, expected: &str) {
    let deadline = Instant::now() + STEP;
    loop {
        let heading = match client.find(Locator::Css("h1")).await {
            Ok(element) => element.text().await.ok(),
            Err(_) => None,
        };
        if heading.as_deref() == Some(expected) {
            return;
        }
        if Instant::now() > deadline {
            let url = client.current_url().await.map(String::from);
            let source = client.source().await.unwrap_or_default();
            panic!(
                "the heading is {heading:?}, not {expected:?}, after {STEP:?} at {url:?}:\n{source}"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Fills in the sign-in form and sends it.
async fn sign_in(client: &Client, email: &str, password: &str) {
    let field = wait_for(client, "#email").await;
    field.clear().await.unwrap();
    field.send_keys(email).await.unwrap();
    let field = client.find(Locator::Css("#password")).await.unwrap();
    field.send_keys(password).await.unwrap();
    click(client, r#"form button[type="submit"]"#).await;
}

async fn click(client: &Client, selector: &str) {
    let button = wait_for(client, selector).await;
    button
        .click()
        .await
        .unwrap_or_else(|error| panic!("click {selector}: {error}"));
}

/// The element `selector` finds, once it is on the page.
async fn wait_for(client: &Client, selector: &str) -> fantoccini::elements::Element {
    match client
        .wait()
        .at_most(STEP)
        .for_element(Locator::Css(selector))
        .await
    {
        Ok(element) => element,
        Err(error) => {
            let url = client.current_url().await.map(String::from);
            let source = client.source().await.unwrap_or_default();
            panic!("no {selector} within {STEP:?} ({error}) at {url:?}:\n{source}");
        }
    }
}

/// The address of the page the browser landed on at `redirect_uri`, once
/// it did. Chromium shows its own error page there (nothing listens), and
/// keeps the address it failed to load.
async fn wait_for_callback(client: &Client, redirect_uri: &str) -> String {
    let deadline = Instant::now() + STEP;
    loop {
        let url = String::from(client.current_url().await.expect("the current URL"));
        if url.split(['?', '#']).next() == Some(redirect_uri) {
            return url;
        }
        if Instant::now() > deadline {
            let source = client.source().await.unwrap_or_default();
            panic!("still at {url}, not {redirect_uri}, after {STEP:?}:\n{source}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The value of query parameter `name` in `url`, decoded; `None` if absent.
/// Panics if it appears twice.
fn query_value(url: &str, name: &str) -> Option<String> {
    let query = url.split_once('?').map_or("", |(_, rest)| rest);
    let query = query.split('#').next().unwrap_or_default();
    let mut values = form_urlencoded::parse(query.as_bytes()).filter(|(key, _)| key == name);
    let value = values.next().map(|(_, value)| value.into_owned());
    assert!(values.next().is_none(), "{name} twice in {url}");
    value
}

// --- the harness -------------------------------------------------------------------

/// A scenario's world: the service, ChromeDriver and a browser
/// session, in a temporary directory. [`Harness::run`] closes the session;
/// then the fields drop in their order: ChromeDriver quits, the server is
/// killed, and last the directory is removed.
struct Harness {
    client: Client,
    _driver: ChromeDriver,
    server: Server,
    demo: Demo,
    _dir: TempDir,
}

impl Harness {
    async fn start(name: &str) -> Self {
        let (chromium, chromedriver) = browser_binaries();
        let dir = TempDir::new(&format!("browser-{name}"));
        let server = Launch::with_args(&["--store", "memory"]).start();
        let mut demo = server.demo.clone();
        // Where the browser reaches the server, whatever the demo file says.
        demo.base_url.clone_from(&server.url);
        let driver = ChromeDriver::start(&chromedriver, &dir);
        let client = open_session(&chromium, &driver, &dir).await;
        Harness {
            client,
            _driver: driver,
            server,
            demo,
            _dir: dir,
        }
    }

    /// Runs `scenario` within [`SCENARIO_BUDGET`], then closes the browser
    /// whatever happened, then passes on the scenario's panic if it had one.
    async fn run<F, Fut>(self, scenario: F)
    where
        F: FnOnce(Client, Demo) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        // A panic in a spawned task comes back as an error instead of
        // unwinding past the browser, which must be closed either way.
        let task = tokio::spawn(scenario(self.client.clone(), self.demo.clone()));
        let abort = task.abort_handle();
        let outcome = tokio::time::timeout(SCENARIO_BUDGET, task).await;
        abort.abort();
        let closed = tokio::time::timeout(STEP, self.client.clone().close()).await;
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(error)) if error.is_panic() => {
                eprintln!("server log:\n{}", self.server.logs());
                std::panic::resume_unwind(error.into_panic());
            }
            Ok(Err(error)) => panic!("the scenario did not finish: {error}"),
            Err(_) => panic!(
                "the scenario took over {SCENARIO_BUDGET:?}; server log:\n{}",
                self.server.logs()
            ),
        }
        match closed {
            Ok(Ok(())) => {}
            Ok(Err(error)) => panic!("closing the browser: {error}"),
            Err(_) => panic!("closing the browser took over {STEP:?}"),
        }
    }
}

/// The address an app sends the browser to, asking for the demo account.
fn dialog_url(demo: &Demo, state: &str) -> String {
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("client_id", &demo.client_id)
        .append_pair("redirect_uri", &demo.redirect_uri)
        .append_pair("state", state)
        .finish();
    format!("{}/auth/dialog?{query}", demo.base_url)
}

/// Chromium's and ChromeDriver's paths: `CHROMIUM` and `CHROMEDRIVER`, else
/// where Debian's packages put them. Panics with how to install them.
fn browser_binaries() -> (PathBuf, PathBuf) {
    let find = |variable: &str, default: &str| {
        std::env::var_os(variable).map_or_else(|| PathBuf::from(default), PathBuf::from)
    };
    let chromium = find("CHROMIUM", "/usr/bin/chromium");
    let chromedriver = find("CHROMEDRIVER", "/usr/bin/chromedriver");
    let missing: Vec<String> = [&chromium, &chromedriver]
        .into_iter()
        .filter(|path| !path.is_file())
        .map(|path| path.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "the browser test needs Chromium and ChromeDriver, and {} is missing. \
         On Debian or Ubuntu: sudo apt-get install -y chromium chromium-driver \
         (.ci/run does this); elsewhere, install both (of the same version) and \
         set CHROMIUM and CHROMEDRIVER to their paths",
        missing.join(" and ")
    );
    (chromium, chromedriver)
}

/// ChromeDriver on a loopback port; when dropped, it quits the browsers it
/// started, then exits (or is killed).
struct ChromeDriver {
    process: Process,
    port: u16,
}

impl ChromeDriver {
    /// Starts ChromeDriver on a free loopback port, and waits until it
    /// accepts connections.
    fn start(chromedriver: &Path, dir: &TempDir) -> Self {
        // Free now; ChromeDriver takes it a moment later (it fails, and says
        // so in its log, in the unlikely case that someone else took it first).
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|listener| listener.local_addr())
            .expect("a free loopback port")
            .port();
        let mut command = Command::new(chromedriver);
        command
            .arg(format!("--port={port}"))
            // Only local clients (its default, said out loud).
            .arg("--allowed-ips=127.0.0.1")
            // Chromium inherits these: its crash reports, caches and
            // temporary files stay in the directory.
            .env("XDG_CONFIG_HOME", dir.root())
            .env("XDG_CACHE_HOME", dir.root())
            .env("TMPDIR", dir.root())
            .current_dir(dir.root());
        let mut process = Process::spawn("ChromeDriver", command, dir.path("chromedriver.log"));
        process.wait_until(START, || {
            TcpStream::connect_timeout(&(Ipv4Addr::LOCALHOST, port).into(), STEP).is_ok()
        });
        ChromeDriver { process, port }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for ChromeDriver {
    /// Killing ChromeDriver would leave its Chromium running: its
    /// `/shutdown` command closes the browsers of any session still open
    /// (one whose scenario could not close it), then exits.
    fn drop(&mut self) {
        let shutdown = || -> std::io::Result<()> {
            let address = (Ipv4Addr::LOCALHOST, self.port).into();
            let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2))?;
            stream.set_read_timeout(Some(Duration::from_secs(10)))?;
            stream.write_all(
                b"GET /shutdown HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
            )?;
            // Answered once the browsers are closed.
            stream.read_to_end(&mut Vec::new()).map(drop)
        };
        if shutdown().is_ok() {
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline && matches!(self.process.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Opens a headless Chromium session with a fresh profile in `dir`.
async fn open_session(chromium: &Path, driver: &ChromeDriver, dir: &TempDir) -> Client {
    let profile = dir.path("chromium-profile");
    let args = [
        "--headless".to_owned(),
        // Root in a container has no user namespace for the sandbox.
        "--no-sandbox".to_owned(),
        "--disable-gpu".to_owned(),
        "--no-first-run".to_owned(),
        // No update checks, field trials, sync or extensions: nothing that
        // calls home.
        "--disable-background-networking".to_owned(),
        "--disable-component-update".to_owned(),
        "--disable-sync".to_owned(),
        "--disable-extensions".to_owned(),
        "--disable-default-apps".to_owned(),
        // Every host name but 127.0.0.1 (the rules apply to addresses too)
        // fails to resolve: whatever got past the switches above reaches
        // nothing.
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1".to_owned(),
        format!("--user-data-dir={}", profile.display()),
    ];
    let capabilities = serde_json::json!({
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": chromium,
            "args": args,
        },
    });
    let serde_json::Value::Object(capabilities) = capabilities else {
        unreachable!("a JSON object")
    };
    let mut builder = ClientBuilder::new(HttpConnector::new());
    builder.capabilities(capabilities);
    let client = match tokio::time::timeout(START, builder.connect(&driver.url())).await {
        Ok(Ok(client)) => client,
        Ok(Err(error)) => panic!(
            "ChromeDriver could not start Chromium: {error}\nChromeDriver's log:\n{}",
            driver.process.log()
        ),
        Err(_) => panic!(
            "Chromium did not start within {START:?}\nChromeDriver's log:\n{}",
            driver.process.log()
        ),
    };
    client
        .update_timeouts(TimeoutConfiguration::new(
            Some(STEP),
            Some(STEP),
            Some(Duration::ZERO),
        ))
        .await
        .expect("set the WebDriver timeouts");
    client
}

// --- processes and files ---------------------------------------------------------

/// A child process, its output in a log file, killed when dropped.
struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Process {
    fn spawn(name: &'static str, mut command: Command, log: PathBuf) -> Self {
        let file = std::fs::File::create(&log).expect("create a log file");
        let child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("clone a file handle"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {name} ({command:?}): {error}"));
        Process { name, child, log }
    }

    /// Waits until `ready`, for at most `limit`; panics with the log if the
    /// process exits or the time is up first.
    fn wait_until(&mut self, limit: Duration, mut ready: impl FnMut() -> bool) {
        let deadline = Instant::now() + limit;
        while !ready() {
            if let Some(status) = self.child.try_wait().expect("poll a child process") {
                panic!("{} exited ({status}):\n{}", self.name, self.log());
            }
            assert!(
                Instant::now() < deadline,
                "{} was not ready within {limit:?}:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
