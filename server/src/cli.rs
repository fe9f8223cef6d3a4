//! The server's command line: its flags, their defaults and checks, and its
//! help. `admin ...` has a command line of its own (`admin/`), read when
//! `admin` comes first.

use std::ffi::OsString;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{Command, CommandFactory as _, FromArgMatches as _, Parser};
use conversion_gateway::axum::ConnectionLimits;
use conversion_gateway::{GatewayConfig, NatsOptions, RefreshPolicy, RetrySchedule, StoreUrl};

use crate::limits::LimitSettings;

/// The server's flags.
#[derive(Parser)]
#[command(
    name = "conversion-gateway",
    about = "Runs the conversion-gateway service on one address.",
    override_usage = "conversion-gateway [OPTIONS]\n       conversion-gateway admin COMMAND [OPTIONS]",
    next_line_help = true,
    max_term_width = 100,
    // As before clap: a flag given twice takes its last value, so that a
    // wrapper script's flags can be overridden after them.
    args_override_self = true
)]
pub struct Args {
    /// Address to listen on
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// The service's public base URL, also the realm of its WWW-Authenticate
    /// headers [default: http:// and the address listened on]
    #[arg(long, value_name = "URL", value_parser = |text: &str| GatewayConfig::checked_base_url(text).map_err(|error| format!("--base-url {error}")))]
    pub base_url: Option<String>,
    /// memory | sqlite:PATH | postgres://USER@HOST/DB
    #[arg(long, value_name = "STORE", default_value = "sqlite:conversion-gateway.db", value_parser = parsed::<StoreUrl>("--store"))]
    pub store: StoreUrl,
    /// The server key file (64 hex digits), created if missing. Keep it with
    /// the store: stored tokens and secrets are keyed hashes [default: the
    /// SQLite path and .key; conversion-gateway.key for PostgreSQL]
    #[arg(long, value_name = "PATH")]
    pub key_file: Option<PathBuf>,
    /// Where to write the demo app, account and API key, as JSON readable by
    /// its owner only (they are never logged) [default: the SQLite path and
    /// .demo.json; conversion-gateway.demo.json for the memory and PostgreSQL
    /// stores]
    #[arg(long, value_name = "PATH")]
    pub demo_credentials: Option<PathBuf>,
    /// Disconnect a client that takes longer to send a request's headers, or
    /// stays idle longer between requests
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = |text: &str| seconds("--header-timeout", text))]
    header_timeout: Duration,
    /// Close a new connection that sends nothing for this long
    #[arg(long, value_name = "SECS", default_value = "5", value_parser = |text: &str| seconds("--first-byte-timeout", text))]
    first_byte_timeout: Duration,
    /// The same once more than half of --max-connections are open (at most
    /// --first-byte-timeout)
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = |text: &str| seconds("--first-byte-timeout-under-pressure", text))]
    first_byte_timeout_under_pressure: Duration,
    /// Connections open at once. At the cap, the connection that has waited
    /// longest without sending a whole request is closed for a new one; a
    /// connection whose request is being answered never is. When every one
    /// is, new ones wait to be accepted. The open-files limit is raised to its
    /// hard limit at start if needed; if that is still too low, fewer are
    /// served and a warning says so
    #[arg(long, value_name = "N", default_value = "16384", value_parser = |text: &str| positive("--max-connections", text))]
    max_connections: usize,
    /// On Ctrl-C or SIGTERM, how long the requests in flight may take to
    /// finish before their connections are closed
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = |text: &str| seconds("--shutdown-timeout", text))]
    shutdown_timeout: Duration,
    /// adaptive | rotate | reuse: what a refresh does to the refresh token
    /// presented. adaptive keeps a grant's first token valid until its
    /// successor is used (clients that never store a new refresh token keep
    /// working; clients that do get reuse detection); rotate retires every
    /// token at once; reuse never changes it
    #[arg(long, value_name = "POLICY", default_value = "adaptive", value_parser = parsed::<RefreshPolicy>("--refresh-policy"))]
    pub refresh_policy: RefreshPolicy,
    #[command(flatten)]
    pub limits: LimitSettings,
    /// Send events to a NATS JetStream stream (created if missing, file
    /// storage, one subject per account, STREAM.ACCOUNT with the stream's name
    /// in lower case) instead of --store, which keeps OAuth state, accounts
    /// and keys [default: events in --store]
    #[arg(long, value_name = "nats://HOST:PORT", value_parser = events)]
    pub events: Option<String>,
    /// The JetStream stream
    #[arg(long, value_name = "NAME", default_value = "CONVERSIONS", value_parser = |name: &str| NatsOptions::for_stream(name).map_err(|error| format!("--events-stream {error}")))]
    pub events_stream: NatsOptions,
    /// A JSON object of ids and secrets: the platform's own services, which
    /// may introspect any token at POST /auth/introspect with HTTP Basic
    /// ID:SECRET (an application sees its own tokens only); keep it readable
    /// by the server's user only [default: none]
    #[arg(long, value_name = "PATH")]
    pub resource_servers: Option<PathBuf>,
    /// Serve GET /metrics on a listener of its own (for a network only the
    /// monitoring reaches) instead of beside the API [default: beside it]
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,
    /// The waits before each attempt of a webhook delivery, the first
    /// before the first attempt (units ms, s, m, h, d); after the last, a
    /// delivery that failed is given up. Each wait varies by 10 %, and a
    /// receiver's longer Retry-After is honoured
    #[arg(long, value_name = "WAITS", default_value = "0s,5s,5m,30m,2h,5h,10h,10h", value_parser = parsed::<RetrySchedule>("--webhook-retry-schedule"))]
    pub webhook_retry_schedule: RetrySchedule,
    /// Allow webhook URLs over http and to loopback, private and link-local
    /// addresses: for tests and private networks only (by default a URL
    /// must be https and resolve to public addresses only)
    #[arg(long)]
    pub webhooks_allow_private: bool,
}

/// What `--help` says after the flags, around the list of `admin` commands:
/// one line per fact an operator needs at the terminal; the README
/// (Operating, Fair use, Security) has the rest.
const NOTES: [&str; 2] = [
    "\
Operator commands (admin --help tells more), on the store and key given by
--store and --key-file, each printing one JSON object, the server not started:
",
    "
GET /healthz: 200 while serving; GET /readyz: 503 naming a store silent for 2 s.
GET /metrics: the Prometheus text format; X-Request-Id on every answer and log line.
Over a limit: 429 with Retry-After, nothing recorded; a batch is all or nothing.
Sign-ins: 429 for 15 minutes after 5 failures of an account from one address, or 20.
At start: a warning for a key file or SQLite database others may read or write.
Every ten minutes: what expired more than 7 days ago is deleted.
More in README.md: Operating, Fair use, Security.

Environment:
  CONVERSION_GATEWAY_KEY   The server key (64 hex digits), when --key-file is
                           not given; share it between instances of one store
  RUST_LOG                 Log filter [default: info,sqlx=warn]",
];

/// The server's flags from `arguments` (the program's name first); else the
/// help on stdout (exit 0), or what is wrong and the usage on stderr (exit 2).
pub fn parse(arguments: impl IntoIterator<Item = OsString>) -> Result<Args, ExitCode> {
    let notes = format!(
        "{}{}{}",
        NOTES[0],
        crate::admin::synopses("  admin ", false),
        NOTES[1]
    );
    let mut command = hyphen_values(Args::command()).after_help(notes);
    let error = match command.try_get_matches_from_mut(arguments) {
        Ok(matches) => match Args::from_arg_matches(&matches) {
            Ok(args) => return Ok(args),
            Err(error) => error,
        },
        Err(error) => error,
    };
    if error.kind() == ErrorKind::DisplayHelp {
        print_help(&error);
        return Err(ExitCode::SUCCESS);
    }
    // With the usage, which clap leaves out of some errors.
    let error = clap::Error::raw(error.kind(), message(&error)).format(&mut command);
    let _ = error.print();
    Err(ExitCode::from(2))
}

/// What `error` says is wrong: a check's own words, which name the flag
/// (without clap's "invalid value ... for ...:" before them), else clap's.
pub fn message(error: &clap::Error) -> String {
    if let Some(cause) = std::error::Error::source(error) {
        return cause.to_string();
    }
    let rendered = error.render().to_string();
    let line = rendered.lines().next().unwrap_or_default();
    line.trim_start_matches("error: ").to_owned()
}

/// `command` with each flag's value the next argument whatever it starts
/// with, as before clap: `--header-timeout -1` is refused for its value, not
/// as an unknown flag `-1`.
pub fn hyphen_values(command: Command) -> Command {
    command
        .mut_args(|arg| {
            let takes_value = arg.get_action().takes_values();
            arg.allow_hyphen_values(takes_value)
        })
        .mut_subcommands(hyphen_values)
}

/// Prints the help that `help` carries, with bare value names
/// (`--listen ADDR`, not clap's `--listen <ADDR>`) as it always had.
pub fn print_help(help: &clap::Error) {
    let mut text = String::new();
    for line in help.render().to_string().lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('-') || trimmed.starts_with("Usage:") {
            text.push_str(&line.replace(['<', '>'], ""));
        } else {
            text.push_str(line);
        }
        text.push('\n');
    }
    // Not `print!`, which panics when the reader has gone (`| head`).
    let _ = std::io::stdout().write_all(text.as_bytes());
}

impl Args {
    /// `--first-byte-timeout*`, `--header-timeout`, `--max-connections` and
    /// `--shutdown-timeout`.
    pub fn connections(&self) -> ConnectionLimits {
        let mut limits = ConnectionLimits::default();
        limits.header_timeout = self.header_timeout;
        limits.first_byte_timeout = self.first_byte_timeout;
        limits.first_byte_timeout_under_pressure = self.first_byte_timeout_under_pressure;
        limits.max_connections = self.max_connections;
        limits.shutdown_timeout = self.shutdown_timeout;
        limits
    }

    /// Where the demo credentials go: `--demo-credentials`, else beside the
    /// SQLite database, else the working directory.
    pub fn demo_credentials_path(&self) -> PathBuf {
        (self.demo_credentials.clone()).unwrap_or_else(|| self.store.file_beside(".demo.json"))
    }
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

/// A NATS address.
fn events(url: &str) -> Result<String, String> {
    if url.starts_with("nats://") {
        Ok(url.to_owned())
    } else {
        Err(format!("--events must be nats://HOST:PORT, not {url:?}"))
    }
}

/// A value of `flag` parsed as a `T`, its error in the flag's words: the
/// library's errors follow the name of the setting ("--store must be
/// memory, sqlite:PATH or postgres://..., not ...").
pub fn parsed<T: FromStr>(flag: &'static str) -> impl Fn(&str) -> Result<T, String> + Clone
where
    T::Err: std::fmt::Display,
{
    move |text| text.parse().map_err(|error| format!("{flag} {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_librarys_and_the_last_of_a_repeated_flag_wins() {
        Args::command().debug_assert();
        let args = Args::try_parse_from(["conversion-gateway"]).unwrap();
        assert_eq!(args.connections(), ConnectionLimits::default());
        assert_eq!(args.refresh_policy, RefreshPolicy::default());
        let args = Args::try_parse_from([
            "cg",
            "--listen",
            "a:1",
            "--listen=b:2",
            "--base-url=http://x/",
        ])
        .unwrap();
        assert_eq!(
            (args.listen.as_str(), args.base_url.as_deref()),
            ("b:2", Some("http://x"))
        );
    }
}
