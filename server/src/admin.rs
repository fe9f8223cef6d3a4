//! The operator's commands (`server admin ...`): create accounts, register
//! and manage apps, issue and switch API keys, list and revoke grants, on
//! the store and with the key the server uses, without starting the server
//! or seeding its demo data.
//!
//! A command line is parsed whole into a [`Command`] first (pure: nothing
//! is opened before the command line is known to be right), then applied
//! to a gateway on the opened store, and its outcome printed as one JSON
//! object on stdout. Secrets (passwords, client secrets, API keys) are
//! printed there once and nowhere else: the errors on stderr name e-mails
//! and ids only, and nothing is logged.
//!
//! A running server sees each change at its next request, on SQLite and
//! PostgreSQL alike: it reads clients and grants from the store on every
//! request. API keys it caches for up to `GatewayConfig::api_key_cache_ttl`
//! (10 s), so a key switched off may be accepted that long still; `api-key
//! disable` says so in its output.

use std::fmt::Write as _;
use std::process::ExitCode;

use conversion_gateway::{
    Account, ApiKeyError, ApiKeyId, ClientId, ClientRegistration, ClientUpdateError, ConnectedApp,
    Gateway, GatewayConfig, GrantId, OsRandom, StoreError, StoreUrl, is_registrable_redirect_uri,
};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

use crate::passwords::Passwords;
use crate::session::random_token;
use crate::{Args, describe, server_key};

/// Random bytes in a generated password: 144 bits, 24 URL-safe characters.
const PASSWORD_BYTES: usize = 18;

/// The label of an API key issued without `--label`.
const DEFAULT_API_KEY_LABEL: &str = "cli";

/// Runs the operator command that `arguments` (what follows `admin` on the
/// command line) name: prints its JSON and exits 0, or prints one line on
/// stderr (and the command's synopsis, if the command line was wrong) and
/// exits non-zero.
pub async fn run(arguments: impl Iterator<Item = String>) -> ExitCode {
    let invocation = match Invocation::parse(arguments) {
        Ok(Some(invocation)) => invocation,
        Ok(None) => {
            print!("{}", usage());
            return ExitCode::SUCCESS;
        }
        Err(failure) => return failure.report(),
    };
    match invocation.execute().await {
        Ok(output) => {
            println!("{output}");
            ExitCode::SUCCESS
        }
        Err(failure) => failure.report(),
    }
}

/// One operator command, with its values checked.
#[derive(Debug, PartialEq, Eq)]
enum Command {
    /// `account create`.
    CreateAccount { name: String, email: String },
    /// `client create`.
    CreateClient {
        name: String,
        redirect_uris: Vec<String>,
        require_pkce: bool,
    },
    /// `client rotate-secret`.
    RotateClientSecret { client: ClientId },
    /// `client disable` and `client enable`.
    SetClientActive { client: ClientId, active: bool },
    /// `client redirect-uris`.
    SetRedirectUris {
        client: ClientId,
        redirect_uris: Vec<String>,
    },
    /// `api-key issue`.
    IssueApiKey { email: String, label: String },
    /// `api-key disable` and `api-key enable`.
    SetApiKeyActive { key: ApiKeyId, active: bool },
    /// `grants`.
    ListGrants { email: String },
    /// `grant revoke`.
    RevokeGrant { grant: GrantId },
}

/// How a command is written and what it does: its help and its usage line
/// come from here, and its values are read by `parse`.
struct Syntax {
    /// The words that name it, as typed after `admin`.
    words: &'static str,
    /// Its flags, as the usage line shows them.
    flags: &'static str,
    /// What it does and prints, for the help.
    about: &'static str,
    /// Reads its values from the flags given.
    parse: fn(&mut Flags) -> Result<Command, Failure>,
}

/// The command's words: what a failure's `Debug` shows of it.
impl std::fmt::Debug for Syntax {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.words)
    }
}

/// Every command, in the order the help lists them.
static COMMANDS: &[Syntax] = &[
    Syntax {
        words: "account create",
        flags: "--name NAME --email EMAIL",
        about: "Creates an account with a generated password, hashed with Argon2id\n\
                before it is stored: {\"account_id\", \"email\", \"password\"}",
        parse: |flags| {
            Ok(Command::CreateAccount {
                name: flags.name()?,
                email: email(&flags.required("--email")?)?,
            })
        },
    },
    Syntax {
        words: "client create",
        flags: "--name NAME --redirect-uri URI [--redirect-uri URI ...] [--require-pkce]",
        about: "Registers an app: {\"client_id\", \"client_secret\"}. Redirect URIs\n\
                must be absolute and without a fragment",
        parse: |flags| {
            Ok(Command::CreateClient {
                name: flags.name()?,
                redirect_uris: flags.redirect_uris()?,
                require_pkce: flags.switch("--require-pkce")?,
            })
        },
    },
    Syntax {
        words: "client rotate-secret",
        flags: "--client-id ID",
        about: "Gives the app a new secret: {\"client_id\", \"client_secret\"}. The\n\
                previous one keeps working for 24 hours, for the app to deploy it",
        parse: |flags| {
            Ok(Command::RotateClientSecret {
                client: flags.client()?,
            })
        },
    },
    Syntax {
        words: "client disable",
        flags: "--client-id ID",
        about: "Switches the app off: no dialog, no token, its tokens refused:\n\
                {\"client_id\", \"active\"}",
        parse: |flags| {
            Ok(Command::SetClientActive {
                client: flags.client()?,
                active: false,
            })
        },
    },
    Syntax {
        words: "client enable",
        flags: "--client-id ID",
        about: "Switches the app back on; its tokens not revoked or expired\n\
                meanwhile work again: {\"client_id\", \"active\"}",
        parse: |flags| {
            Ok(Command::SetClientActive {
                client: flags.client()?,
                active: true,
            })
        },
    },
    Syntax {
        words: "client redirect-uris",
        flags: "--client-id ID --redirect-uri URI [--redirect-uri URI ...]",
        about: "Replaces the app's redirect URIs: {\"client_id\", \"redirect_uris\"}",
        parse: |flags| {
            Ok(Command::SetRedirectUris {
                client: flags.client()?,
                redirect_uris: flags.redirect_uris()?,
            })
        },
    },
    Syntax {
        words: "api-key issue",
        flags: "--account EMAIL [--label LABEL]",
        about: "Issues an API key for the account (label: \"cli\" unless given):\n\
                {\"api_key_id\", \"api_key\"}",
        parse: |flags| {
            Ok(Command::IssueApiKey {
                email: flags.required("--account")?,
                label: flags
                    .one("--label")?
                    .unwrap_or_else(|| DEFAULT_API_KEY_LABEL.to_owned()),
            })
        },
    },
    Syntax {
        words: "api-key disable",
        flags: "--id ID",
        about: "Switches the key off: {\"api_key_id\", \"active\",\n\
                \"running_servers_may_accept_it_for_up_to_seconds\"}. A running server\n\
                caches the keys it accepted for up to 10 s, so it may accept this\n\
                one that long still",
        parse: |flags| {
            Ok(Command::SetApiKeyActive {
                key: ApiKeyId(flags.uuid("--id", "an API key")?),
                active: false,
            })
        },
    },
    Syntax {
        words: "api-key enable",
        flags: "--id ID",
        about: "Switches the key back on, at once: {\"api_key_id\", \"active\"}",
        parse: |flags| {
            Ok(Command::SetApiKeyActive {
                key: ApiKeyId(flags.uuid("--id", "an API key")?),
                active: true,
            })
        },
    },
    Syntax {
        words: "grants",
        flags: "--account EMAIL",
        about: "The apps the account has connected, oldest first: {\"grants\":\n\
                [{\"grant_id\", \"client_id\", \"name\", \"authorized_at\",\n\
                \"last_refreshed_at\"}]}, times in RFC 3339 (null: never refreshed)",
        parse: |flags| {
            Ok(Command::ListGrants {
                email: flags.required("--account")?,
            })
        },
    },
    Syntax {
        words: "grant revoke",
        flags: "--id ID",
        about: "Revokes the grant, and every code and token issued under it, at\n\
                once: {\"grant_id\", \"revoked\": true}",
        parse: |flags| {
            Ok(Command::RevokeGrant {
                grant: GrantId(flags.uuid("--id", "a grant")?),
            })
        },
    },
];

/// Flags that take no value; every other flag takes one.
const SWITCHES: &[&str] = &["--require-pkce"];

/// The help: every command, then the options they share.
fn usage() -> String {
    let mut text = String::from(
        "\
Operator commands on the server's store: accounts, apps, API keys, grants.
Each prints one JSON object on stdout and exits 0; a failure exits non-zero
with one line on stderr. Secrets are printed once, on stdout only.

Usage: cargo run --example server -- admin COMMAND [OPTIONS]

Commands:
",
    );
    for syntax in COMMANDS {
        let about = syntax.about.replace('\n', "\n      ");
        let _ = write!(text, "  {} {}\n      {about}\n", syntax.words, syntax.flags);
    }
    text.push_str(
        "
Options (every command):
  --store STORE     sqlite:PATH | postgres://USER@HOST/DB: the server's store
                    [default: sqlite:conversion-gateway.db]. Not memory: a
                    memory store ends with the command
  --key-file PATH   The server's key file, found and created if missing as
                    the server does (else CONVERSION_GATEWAY_KEY, else the
                    SQLite path and .key; conversion-gateway.key for
                    PostgreSQL). Give the key the server runs with: secrets
                    are stored as hashes keyed by it, and under another key
                    they authenticate nothing
  -h, --help        Print this help

A running server on the same store sees every change at its next request,
without a restart, except that it may accept a switched-off API key for up
to 10 s.
",
    );
    text
}

/// A parsed command line: the command and the server's own options for its
/// store and key.
struct Invocation {
    command: Command,
    /// The server's command line with the `--store` and `--key-file` given
    /// here, so that both are found exactly as the server finds them.
    server: Args,
}

impl Invocation {
    /// The command `arguments` name, or `None` for `--help`.
    ///
    /// # Errors
    /// [`Failure::Usage`] for a command line that names no command or not
    /// its flags, [`Failure::Invalid`] for a value the command cannot take.
    fn parse(mut arguments: impl Iterator<Item = String>) -> Result<Option<Self>, Failure> {
        let mut words = Vec::new();
        let mut given = Vec::new();
        while let Some(argument) = arguments.next() {
            if argument == "-h" || argument == "--help" {
                return Ok(None);
            }
            if !argument.starts_with('-') {
                words.push(argument);
                continue;
            }
            // Both `--flag value` and `--flag=value`; a missing value is
            // reported by the command that reads the flag, with its usage.
            let (flag, value) = match argument.split_once('=') {
                Some((flag, value)) => (flag.to_owned(), Some(value.to_owned())),
                None if SWITCHES.contains(&argument.as_str()) => (argument, None),
                None => (argument, arguments.next()),
            };
            given.push((flag, value));
        }
        let words = words.join(" ");
        let Some(syntax) = COMMANDS.iter().find(|syntax| syntax.words == words) else {
            let message = if words.is_empty() {
                "no command given".to_owned()
            } else {
                format!("unknown command {words:?}")
            };
            return Err(Failure::Usage {
                message,
                syntax: None,
            });
        };
        let mut flags = Flags { given, syntax };
        let command = (syntax.parse)(&mut flags)?;
        let mut server_flags = Vec::new();
        for flag in ["--store", "--key-file"] {
            if let Some(value) = flags.one(flag)? {
                server_flags.extend([flag.to_owned(), value]);
            }
        }
        flags.finish()?;
        let server = Args::parse(server_flags.into_iter())
            .map_err(Failure::Invalid)?
            .expect("no --help among --store and --key-file");
        if let StoreUrl::Memory = server.store {
            return Err(Failure::Invalid(
                "--store memory keeps nothing beyond this command: give the server's \
                 store, sqlite:PATH or postgres://..."
                    .into(),
            ));
        }
        Ok(Some(Self { command, server }))
    }

    /// Opens the store as the server does (the store first, then the key,
    /// so that no key file is created for a store that does not open),
    /// applies the command, and closes the store.
    ///
    /// # Errors
    /// [`Failure::Failed`].
    async fn execute(self) -> Result<Value, Failure> {
        let store = self
            .server
            .store
            .open()
            .await
            .map_err(|error| Failure::Failed(crate::describe(&error)))?;
        let outcome = match server_key(&self.server) {
            Ok((key, _)) => {
                // The base URL only names the realm of HTTP answers, and
                // the commands answer none.
                let config = GatewayConfig::new("http://localhost");
                let gateway = Gateway::new(config, store.stores(), key.hasher());
                self.command.apply(&gateway).await
            }
            Err(message) => Err(Failure::Failed(message)),
        };
        // Checkpoints SQLite's write-ahead log, as the server does at exit.
        store.close().await;
        outcome
    }
}

impl Command {
    /// Applies the command to the stores behind `gateway`: its JSON.
    ///
    /// # Errors
    /// [`Failure::Failed`] for an unknown record, a taken e-mail or a store
    /// failure; nothing was changed.
    async fn apply(self, gateway: &Gateway) -> Result<Value, Failure> {
        match self {
            Command::CreateAccount { name, email } => {
                // Lowercased, as stored and as the sign-in form looks it up.
                let mut account = Account::new(name, &email, &OsRandom);
                let taken = || {
                    Failure::Failed(format!(
                        "an account with the e-mail {} exists already",
                        account.email
                    ))
                };
                let existing = gateway
                    .find_account_by_email(&account.email)
                    .await
                    .map_err(store_failure("look up the e-mail"))?;
                if existing.is_some() {
                    return Err(taken());
                }
                let password = random_token(PASSWORD_BYTES);
                // The server checks a sign-in with the parameters written in
                // the hash, so any would do; these are what it recommends.
                account.password_hash = Some(Passwords::recommended().hash(&password));
                match gateway.create_account(&account).await {
                    Ok(()) => {}
                    // Created by someone else since the look-up.
                    Err(StoreError::Duplicate { .. }) => return Err(taken()),
                    Err(error) => return Err(store_failure("create the account")(error)),
                }
                Ok(json!({
                    "account_id": account.id.to_string(),
                    "email": account.email,
                    "password": password,
                }))
            }
            Command::CreateClient {
                name,
                redirect_uris,
                require_pkce,
            } => {
                let registration =
                    ClientRegistration::new(name, redirect_uris).require_pkce(require_pkce);
                let (client, secret) = gateway
                    .register_client(registration)
                    .await
                    .map_err(store_failure("register the client"))?;
                Ok(json!({ "client_id": client.id.as_str(), "client_secret": secret.expose() }))
            }
            Command::RotateClientSecret { client } => {
                let secret = gateway
                    .rotate_client_secret(&client)
                    .await
                    .map_err(|error| client_failure(&client, error))?;
                Ok(json!({ "client_id": client.as_str(), "client_secret": secret.expose() }))
            }
            Command::SetClientActive { client, active } => {
                gateway
                    .set_client_active(&client, active)
                    .await
                    .map_err(|error| client_failure(&client, error))?;
                Ok(json!({ "client_id": client.as_str(), "active": active }))
            }
            Command::SetRedirectUris {
                client,
                redirect_uris,
            } => {
                gateway
                    .set_client_redirect_uris(&client, &redirect_uris)
                    .await
                    .map_err(|error| client_failure(&client, error))?;
                Ok(json!({ "client_id": client.as_str(), "redirect_uris": redirect_uris }))
            }
            Command::IssueApiKey { email, label } => {
                let account = account(gateway, &email).await?;
                let (record, key) = gateway.issue_api_key(account.id, &label).await.map_err(
                    |error| match error {
                        ApiKeyError::Store(error) => store_failure("issue the API key")(error),
                        // Switched-off keys count too; `LimitReached` and
                        // whatever reason a later version adds.
                        other => Failure::Failed(format!("{other} ({email})")),
                    },
                )?;
                Ok(json!({ "api_key_id": record.id.0.to_string(), "api_key": key.expose() }))
            }
            Command::SetApiKeyActive { key, active } => {
                let found = gateway
                    .set_api_key_active(key, active)
                    .await
                    .map_err(store_failure("switch the API key"))?;
                if !found {
                    return Err(Failure::Failed(format!("no API key has the id {}", key.0)));
                }
                if active {
                    // Switched-off keys are never cached: on at once.
                    return Ok(json!({ "api_key_id": key.0.to_string(), "active": true }));
                }
                // A running server caches the keys it accepted, and this
                // process cannot reach its cache: it may accept the key for
                // up to its time to live still. The server runs with the
                // default, as this command's gateway does.
                let ttl = gateway.config().api_key_cache_ttl;
                Ok(json!({
                    "api_key_id": key.0.to_string(),
                    "active": false,
                    "running_servers_may_accept_it_for_up_to_seconds": ttl.whole_seconds(),
                }))
            }
            Command::ListGrants { email } => {
                let account = account(gateway, &email).await?;
                let apps = gateway
                    .connected_apps(account.id)
                    .await
                    .map_err(store_failure("list the grants"))?;
                let grants = apps.iter().map(grant_json).collect::<Result<Vec<_>, _>>()?;
                Ok(json!({ "grants": grants }))
            }
            Command::RevokeGrant { grant } => {
                let found = gateway
                    .revoke_grant(grant)
                    .await
                    .map_err(store_failure("revoke the grant"))?;
                if !found {
                    return Err(Failure::Failed(format!("no grant has the id {grant}")));
                }
                Ok(json!({ "grant_id": grant.to_string(), "revoked": true }))
            }
        }
    }
}

/// The account with the login e-mail `email`.
///
/// # Errors
/// [`Failure::Failed`] when there is none, or the store failed.
async fn account(gateway: &Gateway, email: &str) -> Result<Account, Failure> {
    gateway
        .find_account_by_email(email)
        .await
        .map_err(store_failure("look up the account"))?
        .ok_or_else(|| Failure::Failed(format!("no account has the e-mail {email}")))
}

/// One connected app as `grants` prints it.
fn grant_json(app: &ConnectedApp) -> Result<Value, Failure> {
    let last_refreshed_at = app.last_refreshed_at.map(rfc3339).transpose()?;
    Ok(json!({
        "grant_id": app.grant_id.to_string(),
        "client_id": app.client_id.as_str(),
        "name": app.name,
        "authorized_at": rfc3339(app.authorized_at)?,
        "last_refreshed_at": last_refreshed_at,
    }))
}

/// `at` in RFC 3339.
fn rfc3339(at: OffsetDateTime) -> Result<String, Failure> {
    // Fails only for a year outside 0000-9999, which no store holds.
    at.format(&Rfc3339)
        .map_err(|error| Failure::Failed(format!("cannot write the time {at}: {error}")))
}

/// The failure of a store operation, `action` (what could not be done).
fn store_failure(action: &'static str) -> impl FnOnce(StoreError) -> Failure {
    move |error| Failure::Failed(format!("cannot {action}: {}", describe(&error)))
}

/// The failure of a change to `client`.
fn client_failure(client: &ClientId, error: ClientUpdateError) -> Failure {
    match error {
        ClientUpdateError::UnknownClient => {
            Failure::Failed(format!("no client has the id {}", client.as_str()))
        }
        // Checked while parsing already; the gateway checks the same rule.
        ClientUpdateError::InvalidRedirectUri { uri } => Failure::Invalid(refused_uri(&uri)),
        ClientUpdateError::Store(error) => store_failure("change the client")(error),
        // The enum is non-exhaustive: a later reason, in its own words.
        other => Failure::Failed(format!("cannot change the client: {other}")),
    }
}

/// Why a command did not run, and so its exit status.
#[derive(Debug)]
enum Failure {
    /// The command line names no command, or not its flags: exit 2, with
    /// the command's usage line (`syntax`) if it named one.
    Usage {
        message: String,
        syntax: Option<&'static Syntax>,
    },
    /// A value the command cannot take: exit 2.
    Invalid(String),
    /// The command ran and failed (an unknown record, a taken e-mail, the
    /// store): exit 1.
    Failed(String),
}

impl Failure {
    /// Prints the failure on stderr (one line, and a usage line for a
    /// wrong command line) and returns its exit status.
    fn report(self) -> ExitCode {
        match self {
            Failure::Usage { message, syntax } => {
                eprintln!("error: {message}");
                match syntax {
                    Some(syntax) => {
                        eprintln!("usage: server admin {} {}", syntax.words, syntax.flags)
                    }
                    None => eprintln!(
                        "usage: server admin COMMAND [OPTIONS] (see: server admin --help)"
                    ),
                }
                ExitCode::from(2)
            }
            Failure::Invalid(message) => {
                eprintln!("error: {message}");
                ExitCode::from(2)
            }
            Failure::Failed(message) => {
                eprintln!("error: {message}");
                ExitCode::FAILURE
            }
        }
    }
}

/// The flags given to one command, taken one by one as the command reads
/// them; what is left over was not the command's.
struct Flags {
    /// Each flag and its value (`None`: given last, without one, or a
    /// switch).
    given: Vec<(String, Option<String>)>,
    syntax: &'static Syntax,
}

impl Flags {
    /// A usage failure of this command.
    fn usage(&self, message: String) -> Failure {
        Failure::Usage {
            message,
            syntax: Some(self.syntax),
        }
    }

    /// Every value of `flag`, in order.
    fn all(&mut self, flag: &str) -> Result<Vec<String>, Failure> {
        let (taken, left): (Vec<_>, Vec<_>) =
            self.given.drain(..).partition(|(name, _)| name == flag);
        self.given = left;
        taken
            .into_iter()
            .map(|(_, value)| value.ok_or_else(|| self.usage(format!("{flag} needs a value"))))
            .collect()
    }

    /// The value of `flag`, if given (once at most).
    fn one(&mut self, flag: &str) -> Result<Option<String>, Failure> {
        let mut values = self.all(flag)?;
        if values.len() > 1 {
            return Err(self.usage(format!("{flag} is given more than once")));
        }
        Ok(values.pop())
    }

    /// The value of `flag`, which must be given (once).
    fn required(&mut self, flag: &str) -> Result<String, Failure> {
        self.one(flag)?
            .ok_or_else(|| self.usage(format!("{flag} is required")))
    }

    /// Whether the switch `flag` is given.
    fn switch(&mut self, flag: &str) -> Result<bool, Failure> {
        let (taken, left): (Vec<_>, Vec<_>) =
            self.given.drain(..).partition(|(name, _)| name == flag);
        self.given = left;
        if taken.iter().any(|(_, value)| value.is_some()) {
            return Err(self.usage(format!("{flag} takes no value")));
        }
        Ok(!taken.is_empty())
    }

    /// `--name`, not blank.
    fn name(&mut self) -> Result<String, Failure> {
        let name = self.required("--name")?;
        if name.trim().is_empty() {
            return Err(Failure::Invalid("--name must not be blank".into()));
        }
        Ok(name.trim().to_owned())
    }

    /// `--client-id`.
    fn client(&mut self) -> Result<ClientId, Failure> {
        self.required("--client-id").map(ClientId::new)
    }

    /// Every `--redirect-uri`, at least one, each one registrable.
    fn redirect_uris(&mut self) -> Result<Vec<String>, Failure> {
        let uris = self.all("--redirect-uri")?;
        if uris.is_empty() {
            return Err(self.usage("--redirect-uri is required, once per URI".into()));
        }
        match uris.iter().find(|uri| !is_registrable_redirect_uri(uri)) {
            Some(bad) => Err(Failure::Invalid(refused_uri(bad))),
            None => Ok(uris),
        }
    }

    /// The id `flag` gives, a UUID; `what` names its kind ("a grant").
    fn uuid(&mut self, flag: &str, what: &str) -> Result<Uuid, Failure> {
        let text = self.required(flag)?;
        Uuid::parse_str(text.trim()).map_err(|_| {
            Failure::Invalid(format!("{flag} must be {what} id (a UUID), not {text:?}"))
        })
    }

    /// Fails on a flag no one took: not one of this command's.
    fn finish(self) -> Result<(), Failure> {
        match self.given.first() {
            Some((flag, _)) => {
                Err(self.usage(format!("unknown flag {flag:?} for `{}`", self.syntax.words)))
            }
            None => Ok(()),
        }
    }
}

/// `text` trimmed, if it looks like an e-mail address: something, `@`,
/// something, and no space. Only a guard against a swapped `--name` and
/// `--email`; whether the address works is the account owner's to prove.
fn email(text: &str) -> Result<String, Failure> {
    let address = text.trim();
    let looks_right = address
        .split_once('@')
        .is_some_and(|(local, domain)| !local.is_empty() && !domain.is_empty())
        && !address.chars().any(char::is_whitespace);
    if looks_right {
        Ok(address.to_owned())
    } else {
        Err(Failure::Invalid(format!(
            "--email must be an e-mail address, not {text:?}"
        )))
    }
}

/// Why `uri` is refused as a redirect URI.
fn refused_uri(uri: &str) -> String {
    format!("the redirect URI {uri:?} is not absolute or has a fragment (RFC 6749 section 3.1.2)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Option<Invocation>, Failure> {
        Invocation::parse(line.split_whitespace().map(str::to_owned))
    }

    fn command(line: &str) -> Command {
        match parse(line) {
            Ok(Some(invocation)) => invocation.command,
            Ok(None) => panic!("{line}: help"),
            Err(failure) => panic!("{line}: {failure:?}"),
        }
    }

    #[test]
    fn commands_read_their_flags_in_any_order_and_either_form() {
        assert_eq!(
            command(
                "client create --redirect-uri https://a.example/cb --name Sync \
                 --require-pkce --redirect-uri=com.example.app:/cb --store sqlite:x.db"
            ),
            Command::CreateClient {
                name: "Sync".into(),
                redirect_uris: vec!["https://a.example/cb".into(), "com.example.app:/cb".into()],
                require_pkce: true,
            }
        );
        assert_eq!(
            command("--store=sqlite:x.db api-key issue --account a@b.example"),
            Command::IssueApiKey {
                email: "a@b.example".into(),
                label: "cli".into(),
            }
        );
        let id = "67e55044-10b1-426f-9247-bb680e5fe0c8";
        assert_eq!(
            command(&format!("api-key disable --id {id}")),
            Command::SetApiKeyActive {
                key: ApiKeyId(Uuid::parse_str(id).unwrap()),
                active: false,
            }
        );
        assert_eq!(
            command(&format!("grant revoke --id {id}")),
            Command::RevokeGrant {
                grant: GrantId(Uuid::parse_str(id).unwrap()),
            }
        );
    }

    #[test]
    fn the_store_and_key_are_found_as_the_server_finds_them() {
        let invocation = parse("grants --account a@b.example --store sqlite:dir/x.db")
            .unwrap()
            .unwrap();
        assert_eq!(invocation.server.store.to_string(), "sqlite:dir/x.db");
        assert_eq!(invocation.server.key_file, None, "the server's default");
        let invocation = parse("grants --account a@b.example --key-file k.key")
            .unwrap()
            .unwrap();
        assert_eq!(
            invocation.server.store.to_string(),
            "sqlite:conversion-gateway.db"
        );
        assert_eq!(invocation.server.key_file, Some("k.key".into()));
    }

    #[test]
    fn wrong_command_lines_are_usage_failures_naming_the_command() {
        for (line, said) in [
            ("", "no command given"),
            ("client", "unknown command \"client\""),
            (
                "client delete --client-id x",
                "unknown command \"client delete\"",
            ),
            ("client create --name A", "--redirect-uri is required"),
            ("client rotate-secret", "--client-id is required"),
            (
                "client rotate-secret --client-id",
                "--client-id needs a value",
            ),
            (
                "client enable --client-id a --client-id b",
                "given more than once",
            ),
            (
                "client enable --client-id a --force",
                "unknown flag \"--force\"",
            ),
            ("client enable --client-id a --require-pkce", "unknown flag"),
            ("account create --email a@b.example", "--name is required"),
        ] {
            match parse(line) {
                Err(Failure::Usage { message, .. }) => {
                    assert!(message.contains(said), "{line:?}: {message}");
                }
                other => panic!(
                    "{line:?}: {:?}",
                    other.map(|parsed| parsed.map(|i| i.command))
                ),
            }
        }
    }

    #[test]
    fn values_a_command_cannot_take_are_refused_before_anything_is_opened() {
        for (line, said) in [
            (
                "client create --name A --redirect-uri /cb",
                "\"/cb\" is not absolute",
            ),
            (
                "client redirect-uris --client-id x --redirect-uri https://a.example/#f",
                "has a fragment",
            ),
            ("grant revoke --id 42", "--id must be a grant id (a UUID)"),
            (
                "account create --name A --email A",
                "--email must be an e-mail",
            ),
            (
                "grants --account a@b.example --store memory",
                "--store memory",
            ),
            (
                "grants --account a@b.example --store mysql://x",
                "--store must be",
            ),
        ] {
            match parse(line) {
                Err(Failure::Invalid(message)) => {
                    assert!(message.contains(said), "{line:?}: {message}");
                }
                other => panic!(
                    "{line:?}: {:?}",
                    other.map(|parsed| parsed.map(|i| i.command))
                ),
            }
        }
    }

    #[tokio::test]
    async fn switching_a_key_off_says_how_long_a_running_server_may_accept_it() {
        let stores = conversion_gateway::Stores::in_memory();
        let config = GatewayConfig::new("http://localhost");
        let gateway = Gateway::new(
            config,
            stores.clone(),
            conversion_gateway::SecretHasher::new([7; 32]),
        );
        let account = Account::new("Acme", "a@acme.example", &OsRandom);
        stores.accounts.insert_account(&account).await.unwrap();
        let (record, _) = gateway.issue_api_key(account.id, "form").await.unwrap();
        let id = record.id.0.to_string();

        let switch = |active| Command::SetApiKeyActive {
            key: record.id,
            active,
        };
        let disabled = switch(false).apply(&gateway).await.unwrap();
        assert_eq!(
            disabled,
            json!({
                "api_key_id": id,
                "active": false,
                "running_servers_may_accept_it_for_up_to_seconds": 10,
            })
        );
        // Switched-off keys are never cached: switching on needs no delay.
        let enabled = switch(true).apply(&gateway).await.unwrap();
        assert_eq!(enabled, json!({ "api_key_id": id, "active": true }));
    }

    #[test]
    fn help_lists_every_command_and_the_api_key_cache() {
        assert!(matches!(parse("client create --help"), Ok(None)));
        let help = usage();
        for syntax in COMMANDS {
            assert!(
                help.contains(syntax.words),
                "{} not in {help}",
                syntax.words
            );
        }
        assert!(help.contains("10 s"), "{help}");
    }
}
