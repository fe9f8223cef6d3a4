//! The operator commands (`server admin ...`) through the binary: the one
//! JSON object each prints, the exit status and the one line on stderr of
//! each failure, what they store, and a server running on the same store
//! that follows every change without a restart: on an SQLite file, and on
//! PostgreSQL in a schema of the test's own when `DATABASE_URL` names a
//! server (feature `postgres`).

use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};

use conversion_gateway_testkit::TempDir;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::support::{Launch, Reply, Server, encode, param};

/// The redirect URI the apps of these tests register (port 9, "discard":
/// nothing follows it).
const REDIRECT_URI: &str = "http://127.0.0.1:9/admin-callback";

/// RFC 7636 appendix B: a code verifier and its S256 challenge.
const PKCE_VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const PKCE_CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

/// `server admin ARGS`: its exit status, stdout and stderr.
pub(crate) struct Ran {
    args: Vec<String>,
    pub(crate) status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs `server admin` with `args`, as an operator would: no key in the
/// environment, no log filter.
fn admin(args: &[&str]) -> Ran {
    let output = Command::new(crate::support::server_binary())
        .arg("admin")
        .args(args)
        .env_remove("CONVERSION_GATEWAY_KEY")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run the service's binary");
    Ran {
        args: args.iter().map(|arg| (*arg).to_owned()).collect(),
        status: output.status,
        stdout: String::from_utf8(output.stdout).expect("UTF-8 on stdout"),
        stderr: String::from_utf8(output.stderr).expect("UTF-8 on stderr"),
    }
}

impl Ran {
    /// The one JSON object a successful command prints; nothing on stderr.
    #[track_caller]
    pub(crate) fn json(&self) -> Value {
        assert!(self.status.success(), "{self:?}");
        assert_eq!(self.stderr, "", "{self:?}");
        assert_eq!(self.stdout.lines().count(), 1, "{self:?}");
        // `from_str` refuses anything after the first value.
        let value: Value =
            serde_json::from_str(&self.stdout).unwrap_or_else(|error| panic!("{error}: {self:?}"));
        assert!(value.is_object(), "{self:?}");
        value
    }

    /// The failure's exit status must be `code`, with nothing on stdout:
    /// its stderr.
    #[track_caller]
    fn failure(&self, code: i32) -> &str {
        assert_eq!(self.status.code(), Some(code), "{self:?}");
        assert_eq!(self.stdout, "", "{self:?}");
        &self.stderr
    }

    /// A failed command (exit `code`) with the one line `line` on stderr.
    #[track_caller]
    fn fails_with(&self, code: i32, line: &str) {
        assert_eq!(self.failure(code), format!("{line}\n"), "{self:?}");
    }
}

impl std::fmt::Debug for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "server admin {}: {}\nstdout: {}\nstderr: {}",
            self.args.join(" "),
            self.status,
            self.stdout,
            self.stderr
        )
    }
}

/// A store the commands and a server share, with the key file beside it:
/// an SQLite file or a PostgreSQL schema of one test's own.
pub(crate) struct SharedStore {
    /// The `--store` value.
    pub(crate) store: String,
    pub(crate) key_file: PathBuf,
    _dir: TempDir,
    #[cfg(feature = "postgres")]
    _schema: Option<postgres::Schema>,
}

impl SharedStore {
    pub(crate) fn sqlite(name: &str) -> Self {
        let dir = TempDir::new(name);
        Self {
            store: format!("sqlite:{}", dir.path("gateway.db").display()),
            key_file: dir.path("gateway.key"),
            _dir: dir,
            #[cfg(feature = "postgres")]
            _schema: None,
        }
    }

    /// `server admin ARGS` on this store and key.
    pub(crate) fn admin(&self, args: &[&str]) -> Ran {
        let key_file = self.key_file.display().to_string();
        let mut all = args.to_vec();
        all.extend(["--store", &self.store, "--key-file", &key_file]);
        admin(&all)
    }

    /// The server, started on this store and key.
    fn start_server(&self) -> Server {
        self.start_server_with(&[])
    }

    /// The server, started on this store and key, with `extra` flags.
    pub(crate) fn start_server_with(&self, extra: &[&str]) -> Server {
        let key_file = self.key_file.display().to_string();
        Launch::with_args(&["--store", &self.store, "--key-file", &key_file])
            .args(extra)
            .start()
    }
}

/// An SQLite store, and a PostgreSQL one when `DATABASE_URL` names a server.
pub(crate) async fn shared_stores(name: &str) -> Vec<SharedStore> {
    #[cfg_attr(not(feature = "postgres"), expect(unused_mut))]
    let mut stores = vec![SharedStore::sqlite(name)];
    #[cfg(feature = "postgres")]
    stores.extend(postgres::store(name).await);
    stores
}

#[cfg(feature = "postgres")]
pub(crate) mod postgres {
    //! A schema of one test's own on the `DATABASE_URL` server, dropped
    //! with it.

    use std::str::FromStr as _;
    use std::time::Duration;

    use conversion_gateway::{OsRandom, random_uuid};
    use conversion_gateway_testkit::TempDir;
    use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

    use super::SharedStore;

    /// A schema, dropped (with all it holds) on drop.
    pub struct Schema {
        url: String,
        name: String,
    }

    /// Runs `sql` on the server at `url`, on a runtime of its own (so that
    /// `Drop` can run it too).
    fn execute(url: &str, sql: String) {
        let url = url.to_owned();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async {
                let options = PgConnectOptions::from_str(&url).expect("a postgres:// address");
                let pool = PgPoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(Duration::from_secs(10))
                    .connect_with(options)
                    .await
                    .unwrap_or_else(|error| panic!("cannot connect to DATABASE_URL: {error}"));
                sqlx::raw_sql(&sql).execute(&pool).await.expect(&sql);
                pool.close().await;
            });
        })
        .join()
        .expect("the SQL ran");
    }

    impl Drop for Schema {
        fn drop(&mut self) {
            // A failure to clean up must not hide the test's own.
            let url = self.url.clone();
            let sql = format!("DROP SCHEMA {} CASCADE", self.name);
            let _ = std::panic::catch_unwind(move || execute(&url, sql));
        }
    }

    /// A store in a fresh schema, or `None` without `DATABASE_URL`.
    pub async fn store(name: &str) -> Option<SharedStore> {
        let url = match std::env::var("DATABASE_URL") {
            Ok(url) if !url.is_empty() => url,
            _ => {
                eprintln!("DATABASE_URL is not set: the PostgreSQL part is left out");
                return None;
            }
        };
        let schema = format!("cg_admin_{}", random_uuid(&OsRandom).simple());
        execute(&url, format!("CREATE SCHEMA {schema}"));
        let separator = if url.contains('?') { '&' } else { '?' };
        let store = format!("{url}{separator}options=-c%20search_path%3D{schema}");
        let dir = TempDir::new(name);
        Some(SharedStore {
            store,
            key_file: dir.path("gateway.key"),
            _dir: dir,
            _schema: Some(Schema { url, name: schema }),
        })
    }
}

/// An account created with the CLI: (e-mail, password).
#[track_caller]
fn create_account(store: &SharedStore, email: &str) -> (String, String) {
    let created = store
        .admin(&["account", "create", "--name", "Acme", "--email", email])
        .json();
    let password = created["password"].as_str().expect("a password").to_owned();
    (created["email"].as_str().unwrap().to_owned(), password)
}

/// An app registered with the CLI: (client id, client secret).
#[track_caller]
fn create_client(store: &SharedStore, name: &str) -> (String, String) {
    let created = store
        .admin(&[
            "client",
            "create",
            "--name",
            name,
            "--redirect-uri",
            REDIRECT_URI,
        ])
        .json();
    assert_eq!(
        object_keys(&created),
        ["client_id", "client_secret"],
        "{created}"
    );
    (
        created["client_id"].as_str().unwrap().to_owned(),
        created["client_secret"].as_str().unwrap().to_owned(),
    )
}

fn object_keys(value: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    keys
}

/// The dialog as a browser goes through it for `client_id`, signed in as
/// `email`, with `extra` query parameters: the code the app receives at
/// `redirect_uri`.
async fn authorize(
    server: &Server,
    client_id: &str,
    redirect_uri: &str,
    email: &str,
    password: &str,
    extra: &str,
) -> String {
    let client = server.client();
    let query = format!(
        "client_id={client_id}&redirect_uri={}{extra}",
        encode(redirect_uri)
    );
    let page = client.get(&format!("/auth/dialog?{query}"), "").await;
    assert_eq!(page.status, 200, "{page:?}");
    let nonce = page.cookie("cg_login").expect("a login nonce cookie");
    let signed_in = client
        .post_form(
            "/auth/dialog",
            &format!("cg_login={nonce}"),
            &[
                ("action", "login"),
                ("query", &query),
                ("csrf", &page.hidden("csrf")),
                ("email", email),
                ("password", password),
            ],
        )
        .await;
    assert_eq!(signed_in.status, 303, "the password works: {signed_in:?}");
    let session = format!("cg_session={}", signed_in.cookie("cg_session").unwrap());
    let consent = client.get(&format!("/auth/dialog?{query}"), &session).await;
    let decided = client
        .post_form(
            "/auth/dialog",
            &session,
            &[
                ("action", "consent"),
                ("query", &query),
                ("csrf", &consent.hidden("csrf")),
                ("decision", "allow"),
            ],
        )
        .await;
    assert_eq!(decided.status, 302, "{decided:?}");
    let location = decided.location();
    assert!(location.starts_with(redirect_uri), "{location}");
    param(location, "code").expect("a code")
}

/// POST /auth/token with the client's credentials and `grant` (the code
/// or refresh token fields).
async fn token(server: &Server, client_id: &str, secret: &str, grant: Value) -> Reply {
    let mut body = json!({ "client_id": client_id, "client_secret": secret });
    body.as_object_mut()
        .unwrap()
        .extend(grant.as_object().unwrap().clone());
    server.post_json("/auth/token", None, &body).await
}

/// The tokens of a 200 answer: (access token, refresh token).
#[track_caller]
fn tokens(reply: &Reply) -> (String, String) {
    assert_eq!(reply.status, 200, "{reply:?}");
    let body = reply.json();
    (
        body["access_token"].as_str().unwrap().to_owned(),
        body["refresh_token"].as_str().unwrap().to_owned(),
    )
}

/// A conversion any account accepts (no custom field).
fn conversion() -> Value {
    json!({
        "event_type": "CONVERSION",
        "event_family": "CDP",
        "payload": { "conversion_identifier": "signup", "email": "lead@example.com" },
    })
}

/// A conversion sent with the bearer token `access_token`.
async fn send_with_bearer(server: &Server, access_token: &str) -> Reply {
    let bearer = format!("Bearer {access_token}");
    server
        .post_json("/platform/events", Some(&bearer), &conversion())
        .await
}

#[track_caller]
fn rfc3339(value: &Value) -> OffsetDateTime {
    let text = value.as_str().unwrap_or_else(|| panic!("a time: {value}"));
    OffsetDateTime::parse(text, &Rfc3339).unwrap_or_else(|error| panic!("{text}: {error}"))
}

// --- a running server follows the commands ------------------------------------

#[tokio::test]
async fn an_account_and_app_created_by_the_cli_complete_the_code_flow_until_the_grant_is_revoked() {
    for store in shared_stores("admin-flow").await {
        let server = store.start_server();
        let created = store
            .admin(&[
                "account",
                "create",
                "--name",
                "Acme",
                "--email",
                " Owner@Acme.Example ",
            ])
            .json();
        assert_eq!(
            object_keys(&created),
            ["account_id", "email", "password"],
            "{created}"
        );
        let account_id = created["account_id"].as_str().unwrap();
        assert!(uuid::Uuid::parse_str(account_id).is_ok(), "{created}");
        assert_eq!(created["email"], "owner@acme.example", "stored lowercased");
        let password = created["password"].as_str().unwrap();
        assert!(password.len() >= 20, "{password}");
        assert!(
            password
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "{password}"
        );
        let (client_id, secret) = create_client(&store, "Lead Sync");

        // The running server knows both at once: the account signs in
        // with its password, the app exchanges its code.
        let code = authorize(
            &server,
            &client_id,
            REDIRECT_URI,
            "owner@acme.example",
            password,
            "",
        )
        .await;
        let (access_token, refresh_token) =
            tokens(&token(&server, &client_id, &secret, json!({ "code": code })).await);
        assert_eq!(send_with_bearer(&server, &access_token).await.status, 200);

        let listed = store
            .admin(&["grants", "--account", "owner@acme.example"])
            .json();
        let grants = listed["grants"].as_array().expect("a grants array");
        assert_eq!(grants.len(), 1, "{listed}");
        assert_eq!(
            object_keys(&grants[0]),
            [
                "authorized_at",
                "client_id",
                "grant_id",
                "last_refreshed_at",
                "name"
            ],
            "{listed}"
        );
        assert_eq!(grants[0]["client_id"], client_id.as_str());
        assert_eq!(grants[0]["name"], "Lead Sync");
        let authorized_at = rfc3339(&grants[0]["authorized_at"]);
        let age = OffsetDateTime::now_utc() - authorized_at;
        assert!(age.whole_minutes() < 5, "{authorized_at}");
        assert_eq!(grants[0]["last_refreshed_at"], Value::Null, "{listed}");

        let refreshed = token(
            &server,
            &client_id,
            &secret,
            json!({ "refresh_token": refresh_token }),
        )
        .await;
        let (access_token, _) = tokens(&refreshed);
        let listed = store
            .admin(&["grants", "--account", "owner@acme.example"])
            .json();
        let last_refreshed_at = rfc3339(&listed["grants"][0]["last_refreshed_at"]);
        assert!(last_refreshed_at >= authorized_at, "{listed}");

        let grant_id = listed["grants"][0]["grant_id"].as_str().unwrap();
        let revoked = store.admin(&["grant", "revoke", "--id", grant_id]).json();
        assert_eq!(revoked, json!({ "grant_id": grant_id, "revoked": true }));
        let refused = send_with_bearer(&server, &access_token).await;
        assert_eq!(refused.status, 401, "{refused:?}");
        let listed = store
            .admin(&["grants", "--account", "owner@acme.example"])
            .json();
        assert_eq!(listed, json!({ "grants": [] }));
    }
}

#[tokio::test]
async fn switching_an_app_off_and_on_and_rotating_its_secret_reach_a_running_server() {
    for store in shared_stores("admin-client").await {
        let server = store.start_server();
        let (email, password) = create_account(&store, "dev@acme.example");
        let (client_id, secret) = create_client(&store, "Lead Sync");
        let code = authorize(&server, &client_id, REDIRECT_URI, &email, &password, "").await;
        let (_, mut refresh_token) =
            tokens(&token(&server, &client_id, &secret, json!({ "code": code })).await);
        let refresh = |secret: String, refresh_token: String| {
            let (server, client_id) = (&server, &client_id);
            async move {
                token(
                    server,
                    client_id,
                    &secret,
                    json!({ "refresh_token": refresh_token }),
                )
                .await
            }
        };

        let disabled = store
            .admin(&["client", "disable", "--client-id", &client_id])
            .json();
        assert_eq!(disabled, json!({ "client_id": client_id, "active": false }));
        let refused = refresh(secret.clone(), refresh_token.clone()).await;
        refused.assert_error(401, "ACCESS_DENIED");

        let enabled = store
            .admin(&["client", "enable", "--client-id", &client_id])
            .json();
        assert_eq!(enabled, json!({ "client_id": client_id, "active": true }));
        let reply = refresh(secret.clone(), refresh_token.clone()).await;
        refresh_token = tokens(&reply).1;

        let rotated = store
            .admin(&["client", "rotate-secret", "--client-id", &client_id])
            .json();
        assert_eq!(object_keys(&rotated), ["client_id", "client_secret"]);
        assert_eq!(rotated["client_id"], client_id.as_str());
        let new_secret = rotated["client_secret"].as_str().unwrap().to_owned();
        assert_ne!(new_secret, secret);
        let reply = refresh(new_secret.clone(), refresh_token.clone()).await;
        refresh_token = tokens(&reply).1;
        let reply = refresh(secret.clone(), refresh_token.clone()).await;
        assert_eq!(
            reply.status, 200,
            "the previous secret works for the overlap: {reply:?}"
        );
        let wrong = refresh(format!("{new_secret}x"), tokens(&reply).1).await;
        assert_eq!(wrong.status, 401, "{wrong:?}");

        // Another redirect URI: the dialog takes it, and no longer the old.
        let moved = "https://app.example/moved";
        let changed = store
            .admin(&[
                "client",
                "redirect-uris",
                "--client-id",
                &client_id,
                "--redirect-uri",
                moved,
            ])
            .json();
        assert_eq!(
            changed,
            json!({ "client_id": client_id, "redirect_uris": [moved] })
        );
        for (uri, status) in [(moved, 200), (REDIRECT_URI, 400)] {
            let query = format!("client_id={client_id}&redirect_uri={}", encode(uri));
            let page = server.get(&format!("/auth/dialog?{query}"), "").await;
            assert_eq!(page.status, status, "{uri}: {page:?}");
        }
    }
}

#[tokio::test]
async fn api_keys_issued_by_the_cli_are_accepted_and_switched_by_it() {
    for store in shared_stores("admin-keys").await {
        let server = store.start_server();
        let (email, _) = create_account(&store, "web@acme.example");
        let issued = store
            .admin(&["api-key", "issue", "--account", &email])
            .json();
        assert_eq!(object_keys(&issued), ["api_key", "api_key_id"], "{issued}");
        let api_key = issued["api_key"].as_str().unwrap();
        assert_eq!(server.convert(api_key, &conversion()).await.status, 200);

        // A key the server has not seen yet is not in its cache: switched
        // off, it is refused at once; switched on, accepted at once.
        let second = store
            .admin(&["api-key", "issue", "--account", &email, "--label", "form"])
            .json();
        let (id, key) = (
            second["api_key_id"].as_str().unwrap(),
            second["api_key"].as_str().unwrap(),
        );
        assert_ne!(key, api_key);
        let disabled = store.admin(&["api-key", "disable", "--id", id]).json();
        assert_eq!(
            disabled,
            json!({
                "api_key_id": id,
                "active": false,
                "running_servers_may_accept_it_for_up_to_seconds": 10,
            })
        );
        let refused = server.convert(key, &conversion()).await;
        assert_eq!(refused.status, 401, "{refused:?}");
        let enabled = store.admin(&["api-key", "enable", "--id", id]).json();
        assert_eq!(enabled, json!({ "api_key_id": id, "active": true }));
        let accepted = server.convert(key, &conversion()).await;
        assert_eq!(accepted.status, 200, "{accepted:?}");
    }
}

// --- what the commands store ----------------------------------------------------

#[tokio::test]
async fn the_cli_stores_what_it_was_given_and_no_demo_data_with_the_servers_default_key() {
    let dir = TempDir::new("admin-records");
    let database = dir.path("gateway.db");
    let store = format!("sqlite:{}", database.display());
    // No --key-file: the server's default, beside the database.
    let run = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--store", &store]);
        admin(&all).json()
    };
    let account = run(&[
        "account",
        "create",
        "--name",
        "Acme",
        "--email",
        "a@acme.example",
    ]);
    let client = run(&[
        "client",
        "create",
        "--name",
        "Native",
        "--redirect-uri",
        "com.acme.app:/cb",
        "--redirect-uri=https://acme.example/cb",
        "--require-pkce",
    ]);
    let key = run(&["api-key", "issue", "--account", "a@acme.example"]);
    let labelled = run(&[
        "api-key",
        "issue",
        "--account",
        "a@acme.example",
        "--label",
        "website form",
    ]);

    let key_file = dir.path("gateway.db.key");
    assert!(key_file.is_file(), "the key is where the server looks");
    let (sqlite, gateway) = crate::support::sqlite_gateway(&database, &key_file).await;
    let stored = gateway
        .find_account_by_email("a@acme.example")
        .await
        .unwrap()
        .expect("the account");
    assert_eq!(
        stored.id.to_string(),
        account["account_id"].as_str().unwrap()
    );
    assert_eq!(stored.name, "Acme");
    let hash = stored.password_hash.as_deref().expect("a password hash");
    assert!(hash.starts_with("$argon2id$"), "{hash}");
    assert!(
        !hash.contains(account["password"].as_str().unwrap()),
        "{hash}"
    );

    let client_id = conversion_gateway::ClientId::new(client["client_id"].as_str().unwrap());
    let registered = gateway
        .find_client(&client_id)
        .await
        .unwrap()
        .expect("the client");
    assert_eq!(registered.name, "Native");
    assert_eq!(
        registered.redirect_uris,
        ["com.acme.app:/cb", "https://acme.example/cb"]
    );
    assert!(registered.require_pkce, "{registered:?}");
    assert!(registered.active, "{registered:?}");

    let keys = gateway.list_api_keys(stored.id).await.unwrap();
    let labels: Vec<(String, &str)> = keys
        .iter()
        .map(|record| (record.id.0.to_string(), record.label.as_str()))
        .collect();
    assert_eq!(
        labels,
        [
            (key["api_key_id"].as_str().unwrap().to_owned(), "cli"),
            (
                labelled["api_key_id"].as_str().unwrap().to_owned(),
                "website form"
            ),
        ]
    );
    assert_eq!(
        gateway
            .find_account_by_email("demo@example.com")
            .await
            .unwrap(),
        None,
        "no demo data"
    );
    sqlite.close().await;

    // The server started afterwards on the same store and default key
    // signs the account in and authenticates the app the CLI registered.
    let server = Launch::with_args(&["--store", &store]).start();
    let code = authorize(
        &server,
        client_id.as_str(),
        "com.acme.app:/cb",
        "a@acme.example",
        account["password"].as_str().unwrap(),
        &format!("&code_challenge={PKCE_CHALLENGE}&code_challenge_method=S256"),
    )
    .await;
    let secret = client["client_secret"].as_str().unwrap();
    let exchange = json!({
        "code": code,
        "code_verifier": PKCE_VERIFIER,
        "redirect_uri": "com.acme.app:/cb",
    });
    tokens(&token(&server, client_id.as_str(), secret, exchange).await);
}

// --- failures --------------------------------------------------------------------

#[test]
fn unknown_records_and_a_taken_e_mail_fail_with_one_line_on_stderr() {
    let store = SharedStore::sqlite("admin-unknown");
    create_account(&store, "taken@acme.example");
    store
        .admin(&[
            "account",
            "create",
            "--name",
            "B",
            "--email",
            "Taken@acme.example",
        ])
        .fails_with(
            1,
            "error: an account with the e-mail taken@acme.example exists already",
        );
    for args in [
        &["api-key", "issue", "--account", "x@y.example"][..],
        &["grants", "--account", "x@y.example"],
    ] {
        store
            .admin(args)
            .fails_with(1, "error: no account has the e-mail x@y.example");
    }
    for action in ["rotate-secret", "disable", "enable"] {
        store
            .admin(&["client", action, "--client-id", "cgid_nope"])
            .fails_with(1, "error: no client has the id cgid_nope");
    }
    store
        .admin(&[
            "client",
            "redirect-uris",
            "--client-id",
            "cgid_nope",
            "--redirect-uri",
            REDIRECT_URI,
        ])
        .fails_with(1, "error: no client has the id cgid_nope");
    let unknown = "67e55044-10b1-426f-9247-bb680e5fe0c8";
    for action in ["disable", "enable"] {
        store
            .admin(&["api-key", action, "--id", unknown])
            .fails_with(1, &format!("error: no API key has the id {unknown}"));
    }
    store
        .admin(&["grant", "revoke", "--id", unknown])
        .fails_with(1, &format!("error: no grant has the id {unknown}"));
}

#[test]
fn values_a_command_cannot_take_fail_with_one_line_before_the_store_is_opened() {
    let dir = TempDir::new("admin-values");
    // A store that would be created if opened: it must not be.
    let database = dir.path("never.db");
    let store = format!("sqlite:{}", database.display());
    for uri in ["/callback", "https://app.example/cb#top", "app.example/cb"] {
        admin(&[
            "client",
            "create",
            "--name",
            "Bad",
            "--redirect-uri",
            REDIRECT_URI,
            "--redirect-uri",
            uri,
            "--store",
            &store,
        ])
        .fails_with(
            2,
            &format!(
                "error: the redirect URI {uri:?} is not absolute or has a fragment (RFC 6749 section 3.1.2)"
            ),
        );
    }
    admin(&["grant", "revoke", "--id", "42", "--store", &store])
        .fails_with(2, "error: --id must be a grant id (a UUID), not \"42\"");
    admin(&[
        "account",
        "create",
        "--name",
        "A",
        "--email=A",
        "--store",
        &store,
    ])
    .fails_with(2, "error: --email must be an e-mail address, not \"A\"");
    // The store's flag before the command's words, in either form.
    admin(&["--store=mysql://x", "grants", "--account", "a@b.example"]).fails_with(
        2,
        "error: --store must be memory, sqlite:PATH or postgres://..., not \"mysql://x\"",
    );
    let stderr = admin(&["grants", "--account", "a@b.example", "--store", "memory"])
        .failure(2)
        .to_owned();
    assert!(stderr.starts_with("error: --store memory"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(!database.exists(), "nothing was opened");
    assert!(!dir.path("never.db.key").exists(), "no key was created");
}

#[test]
fn wrong_command_lines_fail_with_the_commands_usage_line() {
    for (args, error, usage) in [
        (
            &["account", "create", "--email", "a@b.example"][..],
            "error: --name is required",
            "usage: conversion-gateway admin account create --name NAME --email EMAIL",
        ),
        (
            &[
                "client",
                "create",
                "--name",
                "A",
                "--redirect-uri",
                REDIRECT_URI,
                "--pkce",
            ],
            "error: unknown flag \"--pkce\" for `client create`",
            "usage: conversion-gateway admin client create --name NAME --redirect-uri URI [--redirect-uri URI ...] [--require-pkce]",
        ),
        (
            &["client", "rotate-secret", "--client-id"],
            "error: --client-id needs a value",
            "usage: conversion-gateway admin client rotate-secret --client-id ID",
        ),
        (
            &["client", "delete", "--client-id", "x"],
            "error: unknown command \"client delete\"",
            "usage: conversion-gateway admin COMMAND [OPTIONS] (see: conversion-gateway admin --help)",
        ),
        (
            &[],
            "error: no command given",
            "usage: conversion-gateway admin COMMAND [OPTIONS] (see: conversion-gateway admin --help)",
        ),
        (
            &["client"],
            "error: unknown command \"client\"",
            "usage: conversion-gateway admin COMMAND [OPTIONS] (see: conversion-gateway admin --help)",
        ),
        (
            &["client", "enable", "--client-id", "a", "--client-id=b"],
            "error: --client-id is given more than once",
            "usage: conversion-gateway admin client enable --client-id ID",
        ),
        (
            &["client", "enable", "--client-id", "a", "--require-pkce"],
            "error: unknown flag \"--require-pkce\" for `client enable`",
            "usage: conversion-gateway admin client enable --client-id ID",
        ),
    ] {
        admin(args).fails_with(2, &format!("{error}\n{usage}"));
    }
}

#[test]
fn help_describes_every_command_and_the_api_key_cache() {
    let help = admin(&["--help"]);
    assert!(help.status.success(), "{help:?}");
    for command in [
        "account create --name NAME --email EMAIL",
        "client create --name NAME --redirect-uri URI",
        "[--require-pkce]",
        "client rotate-secret --client-id ID",
        "client disable --client-id ID",
        "client enable --client-id ID",
        "client redirect-uris --client-id ID --redirect-uri URI",
        "api-key issue --account EMAIL [--label LABEL]",
        "api-key disable --id ID",
        "api-key enable --id ID",
        "grants --account EMAIL",
        "grant revoke --id ID",
        "--store STORE",
        "--key-file PATH",
        "10 s",
    ] {
        assert!(help.stdout.contains(command), "{command} not in {help:?}");
    }
    // And the server's own help points to them.
    let output = Command::new(crate::support::server_binary())
        .arg("--help")
        .output()
        .expect("run the server");
    let usage = String::from_utf8_lossy(&output.stdout);
    assert!(usage.contains("admin COMMAND"), "{usage}");
    assert!(usage.contains("admin grant revoke --id ID"), "{usage}");
}
