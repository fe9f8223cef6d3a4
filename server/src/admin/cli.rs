//! The command line of `admin ...`: each command with its flags and their
//! checks, the help, and what a wrong command line is told.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{ArgAction, CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use conversion_gateway::{
    Account, ApiKeyId, ClientId, GrantId, StoreUrl, WebhookId, is_registrable_redirect_uri,
};
use uuid::Uuid;

use super::Failure;
use crate::cli::{hyphen_values, message, parsed, print_help};

/// `conversion-gateway admin COMMAND [OPTIONS]`.
#[derive(Parser)]
#[command(
    name = "conversion-gateway admin",
    bin_name = "conversion-gateway admin",
    about = "\
Operator commands on the server's store: accounts, apps, API keys, grants,
webhooks.
Each prints one JSON object on stdout and exits 0; a failure exits non-zero
with one line on stderr. Secrets are printed once, on stdout only.",
    override_usage = "conversion-gateway admin COMMAND [OPTIONS]",
    // The commands in full, with their flags, where clap would list the
    // first words only.
    help_template = "\
{about-with-newline}
{usage-heading} {usage}

Commands:
{before-help}Options (every command):
{options}{after-help}",
    after_help = "\
A running server on the same store sees every change at its next request,
without a restart, except that it may accept a switched-off API key for up
to 10 s.",
    next_line_help = true,
    max_term_width = 100
)]
pub struct AdminLine {
    #[command(subcommand)]
    pub command: Command,
    /// sqlite:PATH | postgres://USER@HOST/DB: the server's store. Not memory:
    /// a memory store ends with the command
    #[arg(long, global = true, value_name = "STORE", default_value = "sqlite:conversion-gateway.db", value_parser = parsed::<StoreUrl>("--store"))]
    pub store: StoreUrl,
    /// The server's key file, found and created if missing as the server does
    /// (else CONVERSION_GATEWAY_KEY, else the SQLite path and .key;
    /// conversion-gateway.key for PostgreSQL). Give the key the server runs
    /// with: secrets are stored as hashes keyed by it, and under another key
    /// they authenticate nothing
    #[arg(long, global = true, value_name = "PATH")]
    pub key_file: Option<PathBuf>,
}

/// One operator command, with its values checked.
#[derive(Subcommand)]
pub enum Command {
    /// Accounts: create
    #[command(subcommand)]
    Account(AccountCommand),
    /// Apps: create, rotate-secret, disable, enable, redirect-uris
    #[command(subcommand)]
    Client(ClientCommand),
    /// API keys: issue, disable, enable
    #[command(subcommand)]
    ApiKey(ApiKeyCommand),
    /// The apps the account has connected, oldest first: {"grants":
    /// [{"grant_id", "client_id", "name", "authorized_at",
    /// "last_refreshed_at"}]}, times in RFC 3339 (null: never refreshed)
    #[command(verbatim_doc_comment)]
    Grants {
        /// The account's login e-mail
        #[arg(long, value_name = "EMAIL")]
        account: String,
    },
    /// Grants: revoke
    #[command(subcommand)]
    Grant(GrantCommand),
    /// Webhooks: list, disable, enable
    #[command(subcommand)]
    Webhook(WebhookCommand),
}

/// `webhook ...`.
#[derive(Subcommand)]
pub enum WebhookCommand {
    /// Every webhook of every account, oldest first, without secrets:
    /// {"webhooks": [{"uuid", "account_id", "client_id", "event_type",
    /// "url", "event_identifiers", "status", "failing_since",
    /// "created_at", "updated_at"}], "pending_deliveries"}
    #[command(verbatim_doc_comment)]
    List,
    /// Switches the webhook off: deliveries already due wait, new
    /// conversions are not delivered to it: {"uuid", "status"}
    #[command(verbatim_doc_comment)]
    Disable(WebhookArg),
    /// Switches the webhook back on, its failures forgotten; the
    /// deliveries that waited go out: {"uuid", "status"}
    #[command(verbatim_doc_comment)]
    Enable(WebhookArg),
}

/// `--id` of a webhook.
#[derive(clap::Args)]
pub struct WebhookArg {
    /// The webhook's uuid, as `webhook list` prints it
    #[arg(long, value_name = "UUID", value_parser = |text: &str| uuid(text, "a webhook").map(WebhookId))]
    pub id: WebhookId,
}

/// `account ...`.
#[derive(Subcommand)]
pub enum AccountCommand {
    /// Creates an account with a generated password, hashed with Argon2id
    /// before it is stored: {"account_id", "email", "password"}
    #[command(verbatim_doc_comment)]
    Create {
        /// The account's name
        #[arg(long, value_name = "NAME", value_parser = name)]
        name: String,
        /// Its login e-mail, stored lowercased
        #[arg(long, value_name = "EMAIL", value_parser = |text: &str| Account::checked_email(text).map_err(|error| format!("--email {error}")))]
        email: String,
    },
}

/// `client ...`.
#[derive(Subcommand)]
pub enum ClientCommand {
    /// Registers an app: {"client_id", "client_secret"}. Redirect URIs
    /// must be absolute and without a fragment
    #[command(verbatim_doc_comment)]
    Create {
        /// The app's name, shown on the consent page
        #[arg(long, value_name = "NAME", value_parser = name)]
        name: String,
        #[command(flatten)]
        redirect_uris: Uris,
        /// Refuse authorization requests without PKCE (RFC 7636)
        // Given twice, still on: a switch, not a value given twice.
        #[arg(long, overrides_with = "require_pkce")]
        require_pkce: bool,
    },
    /// Gives the app a new secret: {"client_id", "client_secret"}. The
    /// previous one keeps working for 24 hours, for the app to deploy it
    #[command(verbatim_doc_comment)]
    RotateSecret(Client),
    /// Switches the app off: no dialog, no token, its tokens refused:
    /// {"client_id", "active"}
    #[command(verbatim_doc_comment)]
    Disable(Client),
    /// Switches the app back on; its tokens not revoked or expired
    /// meanwhile work again: {"client_id", "active"}
    #[command(verbatim_doc_comment)]
    Enable(Client),
    /// Replaces the app's redirect URIs: {"client_id", "redirect_uris"}
    #[command(verbatim_doc_comment)]
    RedirectUris {
        #[command(flatten)]
        client: Client,
        #[command(flatten)]
        redirect_uris: Uris,
    },
}

/// `--client-id`.
#[derive(clap::Args)]
pub struct Client {
    /// The app's client id
    #[arg(long = "client-id", value_name = "ID", value_parser = |id: &str| Ok::<_, String>(ClientId::new(id)))]
    pub id: ClientId,
}

/// Every `--redirect-uri`, at least one, each one registrable.
#[derive(clap::Args)]
pub struct Uris {
    /// A redirect URI of the app; once per URI
    #[arg(long = "redirect-uri", value_name = "URI", required = true, value_parser = redirect_uri)]
    pub uris: Vec<String>,
}

/// `api-key ...`.
#[derive(Subcommand)]
pub enum ApiKeyCommand {
    /// Issues an API key for the account (label: "cli" unless given):
    /// {"api_key_id", "api_key"}
    #[command(verbatim_doc_comment)]
    Issue {
        /// The account's login e-mail
        #[arg(long, value_name = "EMAIL")]
        account: String,
        /// What the key is for, shown to the account
        #[arg(long, value_name = "LABEL", default_value = "cli")]
        label: String,
    },
    /// Switches the key off: {"api_key_id", "active",
    /// "running_servers_may_accept_it_for_up_to_seconds"}. A running server
    /// caches the keys it accepted for up to 10 s, so it may accept this
    /// one that long still
    #[command(verbatim_doc_comment)]
    Disable(ApiKey),
    /// Switches the key back on, at once: {"api_key_id", "active"}
    #[command(verbatim_doc_comment)]
    Enable(ApiKey),
}

/// `--id` of an API key.
#[derive(clap::Args)]
pub struct ApiKey {
    /// The key's id, as `api-key issue` printed it
    #[arg(long, value_name = "ID", value_parser = |text: &str| uuid(text, "an API key").map(ApiKeyId))]
    pub id: ApiKeyId,
}

/// `grant ...`.
#[derive(Subcommand)]
pub enum GrantCommand {
    /// Revokes the grant, and every code and token issued under it, at
    /// once: {"grant_id", "revoked": true}
    #[command(verbatim_doc_comment)]
    Revoke {
        /// The grant's id, as `grants` lists it
        #[arg(long, value_name = "ID", value_parser = |text: &str| uuid(text, "a grant").map(GrantId))]
        id: GrantId,
    },
}

/// The command line `arguments` (what follows `admin`), or why it is not
/// one: [`Failure::Help`] for `--help`, [`Failure::Usage`] for a command
/// line that names no command or not its flags, [`Failure::Invalid`] for a
/// value the command cannot take.
pub fn parse(arguments: Vec<OsString>) -> Result<AdminLine, Failure> {
    let program = OsString::from("conversion-gateway admin");
    let command = AdminLine::command().before_help(synopses("  ", true).trim_end().to_owned());
    let error = match hyphen_values(command)
        .try_get_matches_from(std::iter::once(program).chain(arguments.iter().cloned()))
    {
        Ok(matches) => match AdminLine::from_arg_matches(&matches) {
            Ok(line) => return Ok(line),
            Err(error) => error,
        },
        Err(error) => error,
    };
    let words = words(&arguments);
    let flag = match error.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => arg.clone(),
        Some(ContextValue::Strings(args)) => args.first().cloned().unwrap_or_default(),
        _ => String::new(),
    };
    // `--name <NAME>` as `--name`.
    let flag = flag.split(' ').next().unwrap_or_default();
    let message = match error.kind() {
        ErrorKind::DisplayHelp => {
            print_help(&error);
            return Err(Failure::Help);
        }
        ErrorKind::ValueValidation => return Err(Failure::Invalid(message(&error))),
        ErrorKind::MissingRequiredArgument => format!("{flag} is required"),
        ErrorKind::InvalidValue => format!("{flag} needs a value"),
        ErrorKind::ArgumentConflict => format!("{flag} is given more than once"),
        ErrorKind::TooManyValues => format!("{flag} takes no value"),
        ErrorKind::UnknownArgument if flag.starts_with('-') && !words.is_empty() => {
            format!("unknown flag {flag:?} for `{words}`")
        }
        // A word that names no command, or a command with more to it.
        ErrorKind::UnknownArgument
        | ErrorKind::InvalidSubcommand
        | ErrorKind::MissingSubcommand
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            if words.is_empty() {
                "no command given".to_owned()
            } else {
                format!("unknown command {words:?}")
            }
        }
        _ => message(&error),
    };
    let usage = commands()
        .into_iter()
        .find(|(command, _, _)| *command == words)
        .map(|(command, flags, _)| format!("{command} {flags}"));
    Err(Failure::Usage { message, usage })
}

/// Every command, one line each after `indent`: its words and flags, and
/// below them what it does and prints if `about`.
pub fn synopses(indent: &str, about: bool) -> String {
    let mut text = String::new();
    for (command, flags, what) in commands() {
        text.push_str(&format!("{indent}{command} {flags}\n"));
        if about {
            text.push_str(&format!("{indent}    {}\n", what.replace('\n', "\n      ")));
        }
    }
    text
}

/// Every command that does something: its words ("client create"), its
/// flags ("--name NAME ...") and what it does, from the command tree.
fn commands() -> Vec<(String, String, String)> {
    fn walk(command: &clap::Command, words: &str, found: &mut Vec<(String, String, String)>) {
        for sub in command.get_subcommands() {
            let words = format!("{words} {}", sub.get_name()).trim().to_owned();
            if sub.has_subcommands() {
                walk(sub, &words, found);
                continue;
            }
            let flags: Vec<String> = sub.get_arguments().map(synopsis).collect();
            let about = sub.get_about().map(ToString::to_string).unwrap_or_default();
            found.push((words, flags.join(" "), about));
        }
    }
    let mut found = Vec::new();
    walk(&AdminLine::command(), "", &mut found);
    found
}

/// How `arg` is written: `--name NAME`, `[--label LABEL]`, `[--require-pkce]`
/// or `--redirect-uri URI [--redirect-uri URI ...]`.
fn synopsis(arg: &clap::Arg) -> String {
    let long = arg.get_long().unwrap_or_default();
    let value = arg.get_value_names().and_then(<[_]>::first);
    let (true, Some(value)) = (arg.get_action().takes_values(), value) else {
        return format!("[--{long}]");
    };
    let once = format!("--{long} {value}");
    match arg.get_action() {
        ArgAction::Append => format!("{once} [{once} ...]"),
        _ if arg.is_required_set() => once,
        _ => format!("[{once}]"),
    }
}

/// The words of `arguments` that name a command ("client create"): those
/// that are neither a flag nor a flag's value.
fn words(arguments: &[OsString]) -> String {
    let tree = AdminLine::command();
    let takes_value = |flag: &str| {
        fn find(command: &clap::Command, flag: &str) -> bool {
            command
                .get_arguments()
                .any(|arg| arg.get_long() == Some(flag) && arg.get_action().takes_values())
                || command.get_subcommands().any(|sub| find(sub, flag))
        }
        find(&tree, flag)
    };
    let mut words = Vec::new();
    let mut arguments = arguments.iter().map(|argument| argument.to_string_lossy());
    while let Some(argument) = arguments.next() {
        if let Some(flag) = argument.strip_prefix("--") {
            if !flag.contains('=') && takes_value(flag) {
                arguments.next();
            }
        } else if !argument.starts_with('-') {
            words.push(argument.into_owned());
        }
    }
    words.join(" ")
}

/// `--name`, not blank, trimmed.
fn name(text: &str) -> Result<String, String> {
    match text.trim() {
        "" => Err("--name must not be blank".into()),
        name => Ok(name.to_owned()),
    }
}

/// A redirect URI an app may register.
fn redirect_uri(uri: &str) -> Result<String, String> {
    if is_registrable_redirect_uri(uri) {
        Ok(uri.to_owned())
    } else {
        Err(super::refused_uri(uri))
    }
}

/// The id `--id` gives, a UUID; `what` names its kind ("a grant").
fn uuid(text: &str, what: &str) -> Result<Uuid, String> {
    Uuid::parse_str(text.trim())
        .map_err(|_| format!("--id must be {what} id (a UUID), not {text:?}"))
}
