//! The operator's commands (`conversion-gateway admin ...`): create
//! accounts, register and manage apps, issue and switch API keys, list and
//! revoke grants, list and switch webhooks, on the store and with the key the server uses, without
//! starting the server or seeding its demo data.
//!
//! A command line is parsed whole into a [`Command`] first (`cli.rs`; pure:
//! nothing is opened before the command line is known to be right), then
//! applied to a gateway on the opened store, and its outcome printed as one
//! JSON object on stdout. Secrets (passwords, client secrets, API keys) are
//! printed there once and nowhere else: the errors on stderr name e-mails
//! and ids only, and nothing is logged.
//!
//! A running server sees each change at its next request, on SQLite and
//! PostgreSQL alike: it reads clients and grants from the store on every
//! request. API keys it caches for up to `GatewayConfig::api_key_cache_ttl`
//! (10 s), so a key switched off may be accepted that long still; `api-key
//! disable` says so in its output.

mod cli;

use std::ffi::OsString;
use std::process::ExitCode;

use conversion_gateway::{
    Account, AccountCreationError, ApiKeyError, ApiKeyId, Argon2Passwords, ClientId,
    ClientRegistration, ClientUpdateError, ErrorChain, Gateway, GatewayConfig, OsRandom,
    StoreError, StoreUrl, WebhookId, WebhookStatus, create_account_with_password,
};
use serde_json::{Value, json};
use time::format_description::well_known::Rfc3339;

use crate::server_key;
use cli::{
    AccountCommand, AdminLine, ApiKeyCommand, ClientCommand, Command, GrantCommand, WebhookCommand,
};

pub use cli::synopses;

/// Runs the operator command that `arguments` (what follows `admin` on the
/// command line) name: prints its JSON and exits 0, or prints one line on
/// stderr (and the command's synopsis, if the command line was wrong) and
/// exits non-zero.
pub async fn run(arguments: impl Iterator<Item = OsString>) -> ExitCode {
    let outcome = match cli::parse(arguments.collect()) {
        Ok(line) => execute(line).await,
        Err(failure) => Err(failure),
    };
    match outcome {
        Ok(output) => {
            println!("{output}");
            ExitCode::SUCCESS
        }
        Err(failure) => failure.report(),
    }
}

/// Opens the store as the server does (the store first, then the key, so
/// that no key file is created for a store that does not open), applies the
/// command, and closes the store.
///
/// # Errors
/// [`Failure::Invalid`] for the memory store, [`Failure::Failed`] for the
/// rest.
async fn execute(line: AdminLine) -> Result<Value, Failure> {
    if let StoreUrl::Memory = line.store {
        return Err(Failure::Invalid(
            "--store memory keeps nothing beyond this command: give the server's \
             store, sqlite:PATH or postgres://..."
                .into(),
        ));
    }
    let store = line
        .store
        .open()
        .await
        .map_err(|error| Failure::Failed(ErrorChain(&error).to_string()))?;
    let outcome = match server_key(&line.store, line.key_file.as_deref()) {
        Ok((key, _)) => {
            // The base URL only names the realm of HTTP answers, and the
            // commands answer none.
            let config = GatewayConfig::new("http://localhost");
            let gateway = Gateway::new(config, store.stores(), key.hasher());
            line.command.apply(&gateway).await
        }
        Err(message) => Err(Failure::Failed(message)),
    };
    // Checkpoints SQLite's write-ahead log, as the server does at exit.
    store.close().await;
    outcome
}

impl Command {
    /// Applies the command to the stores behind `gateway`: its JSON.
    ///
    /// # Errors
    /// [`Failure::Failed`] for an unknown record, a taken e-mail or a store
    /// failure; nothing was changed.
    async fn apply(self, gateway: &Gateway) -> Result<Value, Failure> {
        match self {
            Command::Account(AccountCommand::Create { name, email }) => {
                // Lowercased, as stored and as the sign-in form looks it up.
                let account = Account::new(name, &email, &OsRandom);
                // The server checks a sign-in with the parameters written in
                // the hash, so any would do; these are what it recommends.
                let passwords = Argon2Passwords::recommended();
                let (account, password) =
                    create_account_with_password(gateway, account, &passwords, &OsRandom)
                        .await
                        .map_err(|error| match error {
                            AccountCreationError::EmailTaken(_) => {
                                Failure::Failed(error.to_string())
                            }
                            AccountCreationError::Store(error) => {
                                store_failure("create the account")(error)
                            }
                        })?;
                Ok(json!({
                    "account_id": account.id.to_string(),
                    "email": account.email,
                    "password": password,
                }))
            }
            Command::Client(ClientCommand::Create {
                name,
                redirect_uris,
                require_pkce,
            }) => {
                let registration =
                    ClientRegistration::new(name, redirect_uris.uris).require_pkce(require_pkce);
                let (client, secret) = gateway
                    .register_client(registration)
                    .await
                    .map_err(store_failure("register the client"))?;
                Ok(json!({ "client_id": client.id.as_str(), "client_secret": secret.expose() }))
            }
            Command::Client(ClientCommand::RotateSecret(cli::Client { id: client })) => {
                let secret = gateway
                    .rotate_client_secret(&client)
                    .await
                    .map_err(|error| client_failure(&client, error))?;
                Ok(json!({ "client_id": client.as_str(), "client_secret": secret.expose() }))
            }
            Command::Client(ClientCommand::Disable(client)) => {
                client_active(gateway, client.id, false).await
            }
            Command::Client(ClientCommand::Enable(client)) => {
                client_active(gateway, client.id, true).await
            }
            Command::Client(ClientCommand::RedirectUris {
                client: cli::Client { id: client },
                redirect_uris: cli::Uris { uris },
            }) => {
                gateway
                    .set_client_redirect_uris(&client, &uris)
                    .await
                    .map_err(|error| client_failure(&client, error))?;
                Ok(json!({ "client_id": client.as_str(), "redirect_uris": uris }))
            }
            Command::ApiKey(ApiKeyCommand::Issue {
                account: email,
                label,
            }) => {
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
            Command::ApiKey(ApiKeyCommand::Disable(key)) => {
                api_key_active(gateway, key.id, false).await
            }
            Command::ApiKey(ApiKeyCommand::Enable(key)) => {
                api_key_active(gateway, key.id, true).await
            }
            Command::Grants { account: email } => {
                let account = account(gateway, &email).await?;
                let apps = gateway
                    .connected_apps(account.id)
                    .await
                    .map_err(store_failure("list the grants"))?;
                // Fails only for a year outside 0000-9999, which no store holds.
                let grants = serde_json::to_value(apps).map_err(|error| {
                    Failure::Failed(format!("cannot write the grants: {error}"))
                })?;
                Ok(json!({ "grants": grants }))
            }
            Command::Webhook(WebhookCommand::List) => webhook_list(gateway).await,
            Command::Webhook(WebhookCommand::Disable(webhook)) => {
                webhook_status(gateway, webhook.id, WebhookStatus::Inactive).await
            }
            Command::Webhook(WebhookCommand::Enable(webhook)) => {
                webhook_status(gateway, webhook.id, WebhookStatus::Active).await
            }
            Command::Grant(GrantCommand::Revoke { id: grant }) => {
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

/// `webhook list`.
async fn webhook_list(gateway: &Gateway) -> Result<Value, Failure> {
    let webhooks = gateway
        .all_webhooks()
        .await
        .map_err(store_failure("list the webhooks"))?;
    let pending = gateway
        .webhook_backlog()
        .await
        .map_err(store_failure("count the pending deliveries"))?;
    let time = |at: time::OffsetDateTime| at.format(&Rfc3339).unwrap_or_default();
    let listed: Vec<Value> = webhooks
        .iter()
        .map(|webhook| {
            json!({
                "uuid": webhook.id.to_string(),
                "account_id": webhook.account_id.0.to_string(),
                "client_id": webhook.client_id.as_str(),
                "event_type": webhook.event_type.as_str(),
                "url": webhook.url,
                "event_identifiers": webhook.event_identifiers,
                "status": webhook.status.as_str(),
                "failing_since": webhook.failing_since.map(time),
                "created_at": time(webhook.created_at),
                "updated_at": time(webhook.updated_at),
            })
        })
        .collect();
    Ok(json!({ "webhooks": listed, "pending_deliveries": pending }))
}

/// `webhook disable` and `webhook enable`.
async fn webhook_status(
    gateway: &Gateway,
    webhook: WebhookId,
    status: WebhookStatus,
) -> Result<Value, Failure> {
    let found = gateway
        .set_webhook_status(webhook, status)
        .await
        .map_err(store_failure("switch the webhook"))?;
    if !found {
        return Err(Failure::Failed(format!("no webhook has the id {webhook}")));
    }
    Ok(json!({ "uuid": webhook.to_string(), "status": status.as_str() }))
}

/// `client disable` and `client enable`.
async fn client_active(
    gateway: &Gateway,
    client: ClientId,
    active: bool,
) -> Result<Value, Failure> {
    gateway
        .set_client_active(&client, active)
        .await
        .map_err(|error| client_failure(&client, error))?;
    Ok(json!({ "client_id": client.as_str(), "active": active }))
}

/// `api-key disable` and `api-key enable`.
async fn api_key_active(gateway: &Gateway, key: ApiKeyId, active: bool) -> Result<Value, Failure> {
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
    // A running server caches the keys it accepted, and this process cannot
    // reach its cache: it may accept the key for up to its time to live
    // still. The server runs with the default, as this command's gateway does.
    let ttl = gateway.config().api_key_cache_ttl;
    Ok(json!({
        "api_key_id": key.0.to_string(),
        "active": false,
        "running_servers_may_accept_it_for_up_to_seconds": ttl.whole_seconds(),
    }))
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

/// The failure of a store operation, `action` (what could not be done).
fn store_failure(action: &'static str) -> impl FnOnce(StoreError) -> Failure {
    move |error| Failure::Failed(format!("cannot {action}: {}", ErrorChain(&error)))
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
enum Failure {
    /// `--help`, printed: exit 0.
    Help,
    /// The command line names no command, or not its flags: exit 2, with
    /// the usage line of the command (`"client create --name NAME ..."`) if
    /// it named one.
    Usage {
        message: String,
        usage: Option<String>,
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
            Failure::Help => return ExitCode::SUCCESS,
            Failure::Usage { message, usage } => {
                eprintln!("error: {message}");
                match usage {
                    Some(usage) => eprintln!("usage: conversion-gateway admin {usage}"),
                    None => eprintln!(
                        "usage: conversion-gateway admin COMMAND [OPTIONS] \
                         (see: conversion-gateway admin --help)"
                    ),
                }
            }
            Failure::Invalid(message) => eprintln!("error: {message}"),
            Failure::Failed(message) => {
                eprintln!("error: {message}");
                return ExitCode::FAILURE;
            }
        }
        ExitCode::from(2)
    }
}

/// Why `uri` is refused as a redirect URI.
fn refused_uri(uri: &str) -> String {
    format!("the redirect URI {uri:?} is not absolute or has a fragment (RFC 6749 section 3.1.2)")
}
