//! Every event the validator accepts is storable, the same way, in every
//! store: strings drawn from all of Unicode, written with every JSON escape
//! (short escapes, `\uXXXX` in either case, surrogate pairs), go through
//! `validate_conversion`, are recorded as intake records them, and read back
//! identical from `MemoryEventSink`, SQLite and PostgreSQL. The characters a
//! store cannot hold alike (U+0000, which PostgreSQL's text columns refuse,
//! and with it every C0 control but tab, line feed and carriage return) are
//! refused before any store sees them: `INVALID_CHARACTERS` when escaped,
//! `BAD_REQUEST` when raw, as is a lone surrogate escape.
//!
//! Memory and SQLite run under plain `cargo test`. Under `cargo test
//! --all-features` the same cases also go through PostgreSQL, named by
//! `DATABASE_URL`, in a schema of this test's own, dropped at its end.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use conversion_gateway::{
    AccountId, ConversionEvent, ConversionLimits, EventSink, EventSubmission, IntakeChannel,
    MemoryEventSink, OsRandom, RecordOutcome, RecordedEvent, random_uuid, validate_conversion,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Map, Value, json};
use time::macros::datetime;

/// The account's custom field the generated events fill.
const CUSTOM_FIELDS: &[&str] = &["plan"];

/// The optional standard string fields that take free text.
const TEXT_FIELDS: &[&str] = &[
    "name",
    "job_title",
    "state",
    "city",
    "country",
    "personal_phone",
    "mobile_phone",
    "twitter",
    "facebook",
    "linkedin",
    "website",
    "company_name",
    "company_site",
    "company_address",
    "traffic_medium",
    "traffic_campaign",
    "traffic_value",
];

// ---------------------------------------------------------------------------
// Strings and the many ways JSON writes them
// ---------------------------------------------------------------------------

/// The characters the validator refuses in a stored string: the C0 controls
/// but tab, line feed and carriage return.
fn is_refused(c: char) -> bool {
    c < ' ' && !matches!(c, '\t' | '\n' | '\r')
}

/// How one character is written in the JSON text.
#[derive(Clone, Copy, Debug)]
enum Style {
    /// As itself, where JSON allows it.
    Raw,
    /// A two-character escape (`\n`, `\"`, `\/`...) where one exists.
    Short,
    /// `\uXXXX` (a surrogate pair outside the BMP), lowercase hex digits.
    Lower,
    /// The same, uppercase hex digits.
    Upper,
}

fn style() -> impl Strategy<Value = Style> {
    prop_oneof![
        4 => Just(Style::Raw),
        1 => Just(Style::Short),
        1 => Just(Style::Lower),
        1 => Just(Style::Upper),
    ]
}

fn unicode_escape(out: &mut String, unit: u16, upper: bool) {
    if upper {
        out.push_str(&format!("\\u{unit:04X}"));
    } else {
        out.push_str(&format!("\\u{unit:04x}"));
    }
}

/// Appends `c` to `out` as JSON string contents, in `style` where it can be
/// (a character JSON does not allow raw is escaped).
fn write_char(out: &mut String, c: char, style: Style) {
    let short = match c {
        '"' => Some('"'),
        '\\' => Some('\\'),
        '/' => Some('/'),
        '\u{8}' => Some('b'),
        '\u{c}' => Some('f'),
        '\n' => Some('n'),
        '\r' => Some('r'),
        '\t' => Some('t'),
        _ => None,
    };
    let raw_allowed = c >= ' ' && c != '"' && c != '\\';
    match (style, short) {
        (Style::Raw, _) if raw_allowed => out.push(c),
        (Style::Short | Style::Raw, Some(letter)) => {
            out.push('\\');
            out.push(letter);
        }
        (style, _) => {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                unicode_escape(out, *unit, matches!(style, Style::Upper));
            }
        }
    }
}

/// A string and a JSON string literal (quotes included) that spells it.
#[derive(Clone, Debug)]
struct Written {
    text: String,
    json: String,
}

impl Written {
    fn new(chars: &[(char, Style)]) -> Self {
        let mut json = String::from("\"");
        for (c, style) in chars {
            write_char(&mut json, *c, *style);
        }
        json.push('"');
        Written {
            text: chars.iter().map(|(c, _)| *c).collect(),
            json,
        }
    }
}

/// Any character the validator lets through to a store.
fn storable_char() -> impl Strategy<Value = char> {
    any::<char>().prop_filter("refused control character", |c| !is_refused(*c))
}

/// Text of `len` storable characters, written in random styles.
fn text(
    chars: impl Strategy<Value = char>,
    len: std::ops::Range<usize>,
) -> impl Strategy<Value = Vec<(char, Style)>> {
    prop::collection::vec((chars, style()), len)
}

/// Text with at least one character that is not whitespace.
fn not_blank(mut chars: Vec<(char, Style)>) -> Vec<(char, Style)> {
    if chars.iter().all(|(c, _)| c.is_whitespace()) {
        chars.push(('x', Style::Raw));
    }
    chars
}

/// A plausible e-mail address: no whitespace or control characters, one `@`,
/// a dotted domain; any other character of Unicode.
fn email() -> impl Strategy<Value = Vec<(char, Style)>> {
    let part = || {
        text(
            any::<char>().prop_filter("not an e-mail character", |c| {
                !c.is_whitespace() && !c.is_control() && *c != '@' && *c != '.'
            }),
            1..8,
        )
    };
    (part(), part(), part()).prop_map(|(local, domain, top)| {
        let mut chars = local;
        chars.push(('@', Style::Raw));
        chars.extend(domain);
        chars.push(('.', Style::Raw));
        chars.extend(top);
        chars
    })
}

/// A tag: no uppercase letter, not blank.
fn tag() -> impl Strategy<Value = Vec<(char, Style)>> {
    text(
        storable_char().prop_filter("uppercase", |c| !c.is_uppercase()),
        0..12,
    )
    .prop_map(not_blank)
}

/// A `client_tracking_id`: a UUID in either case, or blank (whitespace of any
/// kind the validator stores: it treats a blank id as not sent, but keeps it).
fn tracking_id() -> impl Strategy<Value = Vec<(char, Style)>> {
    let uuid = ("[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
        .prop_flat_map(|id: String| {
            let len = id.chars().count();
            (Just(id), prop::collection::vec(style(), len))
        })
        .prop_map(|(id, styles)| id.chars().zip(styles).collect::<Vec<_>>());
    let blank = text(
        prop::sample::select(
            &[
                ' ', '\t', '\n', '\r', '\u{85}', '\u{a0}', '\u{2028}', '\u{3000}',
            ][..],
        ),
        0..4,
    );
    prop_oneof![uuid, blank]
}

// ---------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------

/// A stored string of an event, by where it sits.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Slot {
    Field(&'static str),
    Tag(usize),
    Custom,
}

impl Slot {
    fn path(&self) -> String {
        match self {
            Slot::Field(name) => format!("$.payload.{name}"),
            Slot::Tag(index) => format!("$.payload.tags[{index}]"),
            Slot::Custom => "$.payload.cf_plan".to_owned(),
        }
    }
}

/// Something that makes a stored string unstorable, and how it is written.
#[derive(Clone, Copy, Debug)]
enum Spoiler {
    /// A refused control character, escaped (`\u0000`, `\b`, `\f`...).
    Escaped(char, Style),
    /// A refused control character, raw: not JSON.
    Raw(char),
    /// A lone surrogate escape: not JSON either.
    LoneSurrogate(u16),
}

fn spoiler() -> impl Strategy<Value = Spoiler> {
    let control = (0u32..0x20)
        .prop_map(|c| char::from_u32(c).unwrap_or('\0'))
        .prop_filter("allowed control", |c| is_refused(*c));
    prop_oneof![
        6 => (control.clone(), prop_oneof![Just(Style::Short), Just(Style::Lower), Just(Style::Upper)])
            .prop_map(|(c, style)| Spoiler::Escaped(c, style)),
        1 => control.prop_map(Spoiler::Raw),
        1 => (0xD800u16..0xE000).prop_map(Spoiler::LoneSurrogate),
    ]
}

/// A generated event: its stored strings, and maybe one spoiled.
#[derive(Clone, Debug)]
struct Case {
    strings: Vec<(Slot, Vec<(char, Style)>)>,
    available_for_mailing: Option<bool>,
    spoiled: Option<(prop::sample::Index, prop::sample::Index, Spoiler)>,
}

fn case() -> impl Strategy<Value = Case> {
    let texts = prop::collection::vec(
        prop::option::of(text(storable_char(), 0..16)),
        TEXT_FIELDS.len(),
    );
    let tags = prop::option::of(prop::collection::vec(tag(), 0..6));
    (
        text(storable_char(), 0..16).prop_map(not_blank),
        email(),
        texts,
        prop::option::of(tracking_id()),
        prop::option::of(text(storable_char(), 0..16)),
        tags,
        prop::option::of(text(storable_char(), 0..16)),
        prop::option::of(any::<bool>()),
        prop::option::weighted(
            0.25,
            (
                any::<prop::sample::Index>(),
                any::<prop::sample::Index>(),
                spoiler(),
            ),
        ),
    )
        .prop_map(
            |(identifier, email, texts, tracking, source, tags, custom, mailing, spoiled)| {
                let mut strings = vec![
                    (Slot::Field("conversion_identifier"), identifier),
                    (Slot::Field("email"), email),
                ];
                for (name, text) in TEXT_FIELDS.iter().zip(texts) {
                    strings.extend(text.map(|text| (Slot::Field(name), text)));
                }
                strings.extend(tracking.map(|id| (Slot::Field("client_tracking_id"), id)));
                // A UTM source, never a traffic-source cookie (which would
                // forbid the other UTM fields).
                strings.extend(source.map(|mut source| {
                    source.insert(0, ('s', Style::Raw));
                    (Slot::Field("traffic_source"), source)
                }));
                let mut seen = BTreeSet::new();
                let tags = tags
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|tag| seen.insert(tag.iter().map(|(c, _)| *c).collect::<String>()));
                strings.extend(tags.enumerate().map(|(index, tag)| (Slot::Tag(index), tag)));
                strings.extend(custom.map(|value| (Slot::Custom, value)));
                Case {
                    strings,
                    available_for_mailing: mailing,
                    spoiled,
                }
            },
        )
}

/// What the validator must answer a case with.
#[derive(Debug, PartialEq, Eq)]
enum Expected {
    /// Accepted, with this payload.
    Accepted(Value),
    /// Refused with one error of this type at this path.
    Refused(&'static str, String),
}

impl Case {
    /// The body, and what it must be answered with.
    fn body(&self) -> (Vec<u8>, Expected) {
        let spoiled = self.spoiled.map(|(slot, at, spoiler)| {
            let slot = slot.index(self.strings.len());
            let at = at.index(self.strings[slot].1.len() + 1);
            (slot, at, spoiler)
        });
        let mut members = Vec::new();
        let mut payload = Map::new();
        let mut tags = Vec::new();
        for (index, (slot, chars)) in self.strings.iter().enumerate() {
            let written = Written::new(chars);
            let json = match spoiled {
                Some((spoiled, at, spoiler)) if spoiled == index => {
                    let (before, after) = chars.split_at(at);
                    let before = Written::new(before).json;
                    let after = Written::new(after).json;
                    let middle = match spoiler {
                        Spoiler::Escaped(c, style) => {
                            let mut out = String::new();
                            write_char(&mut out, c, style);
                            out
                        }
                        Spoiler::Raw(c) => c.to_string(),
                        Spoiler::LoneSurrogate(unit) => format!("\\u{unit:04x}"),
                    };
                    // Both halves keep their quotes; drop the inner ones.
                    format!("{}{middle}{}", &before[..before.len() - 1], &after[1..])
                }
                _ => written.json,
            };
            match slot {
                Slot::Field(name) => {
                    members.push(format!("\"{name}\":{json}"));
                    payload.insert((*name).to_owned(), json!(written.text));
                }
                Slot::Tag(_) => {
                    tags.push(json);
                }
                Slot::Custom => {
                    members.push(format!("\"cf_plan\":{json}"));
                    payload.insert("cf_plan".to_owned(), json!(written.text));
                }
            }
        }
        let tag_values: Vec<Value> = self
            .strings
            .iter()
            .filter(|(slot, _)| matches!(slot, Slot::Tag(_)))
            .map(|(_, chars)| json!(chars.iter().map(|(c, _)| *c).collect::<String>()))
            .collect();
        if !tags.is_empty() {
            members.push(format!("\"tags\":[{}]", tags.join(",")));
            payload.insert("tags".to_owned(), Value::Array(tag_values));
        }
        if let Some(available) = self.available_for_mailing {
            members.push(format!("\"available_for_mailing\":{available}"));
            payload.insert("available_for_mailing".to_owned(), json!(available));
        }
        let body = format!(
            r#"{{"event_type":"CONVERSION","event_family":"CDP","payload":{{{}}}}}"#,
            members.join(",")
        );
        let expected = match spoiled {
            None => Expected::Accepted(Value::Object(payload)),
            Some((slot, _, Spoiler::Escaped(..))) => {
                Expected::Refused("INVALID_CHARACTERS", self.strings[slot].0.path())
            }
            Some((_, _, Spoiler::Raw(_) | Spoiler::LoneSurrogate(_))) => {
                Expected::Refused("BAD_REQUEST", "$".to_owned())
            }
        };
        (body.into_bytes(), expected)
    }
}

/// The record intake makes of an accepted event (`Gateway::intake`).
fn recorded(event: &ConversionEvent<'_>) -> RecordedEvent {
    RecordedEvent {
        event_uuid: random_uuid(&OsRandom),
        account_id: AccountId(random_uuid(&OsRandom)),
        // Whole seconds: PostgreSQL keeps microseconds, SQLite too.
        received_at: datetime!(2026-03-01 12:00:00 UTC),
        event_type: event.event_type().to_owned(),
        event_family: event.event_family().to_owned(),
        conversion_identifier: event.conversion_identifier().to_owned(),
        email: event.email().to_owned(),
        payload: event.to_payload(),
        channel: IntakeChannel::ApiKey,
    }
}

// ---------------------------------------------------------------------------
// Stores
// ---------------------------------------------------------------------------

type Sinks = Vec<(&'static str, Arc<dyn EventSink>)>;

/// How many cases were accepted and how many refused, so that a run that
/// drew only one kind cannot pass unnoticed.
#[derive(Default)]
struct Tally {
    accepted: AtomicUsize,
    refused: AtomicUsize,
}

/// Validates one case, and records and reads back what was accepted through
/// every sink.
async fn check_case(case: &Case, sinks: &Sinks, tally: &Tally) -> Result<(), TestCaseError> {
    let (body, expected) = case.body();
    let shown = String::from_utf8_lossy(&body).into_owned();
    let result = validate_conversion(&body, CUSTOM_FIELDS, &ConversionLimits::default());
    let event = match (result, expected) {
        (Ok(event), Expected::Accepted(payload)) => {
            prop_assert_eq!(event.to_payload_json(), payload, "body: {}", shown);
            event
        }
        (Err(errors), Expected::Refused(error_type, path)) => {
            let listed: Vec<(&str, String)> = errors
                .errors()
                .iter()
                .map(|error| (error.error_type().as_str(), error.path().to_string()))
                .collect();
            prop_assert_eq!(listed, vec![(error_type, path)], "body: {}", shown);
            tally.refused.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        (Ok(event), expected) => {
            return Err(TestCaseError::fail(format!(
                "accepted {event:?}, expected {expected:?}; body: {shown}"
            )));
        }
        (Err(errors), expected) => {
            return Err(TestCaseError::fail(format!(
                "refused with {}, expected {expected:?}; body: {shown}",
                errors.to_body()
            )));
        }
    };
    let record = recorded(&event);
    for (name, sink) in sinks {
        let submission = EventSubmission {
            events: vec![record.clone()],
            batch_uuid: None,
            idempotency: None,
        };
        let outcome = sink.record(&submission).await.map_err(|error| {
            TestCaseError::fail(format!("{name}: record: {error}; body: {shown}"))
        })?;
        prop_assert_eq!(outcome, RecordOutcome::Recorded, "{}", name);
        let found = sink
            .find_event(record.event_uuid)
            .await
            .map_err(|error| TestCaseError::fail(format!("{name}: find: {error}")))?;
        prop_assert_eq!(found.as_ref(), Some(&record), "{}: body: {}", name, shown);
    }
    tally.accepted.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: 64,
        // No regression file: a failure prints its minimal case, which
        // belongs in tests/intake/validation.rs as a named test.
        failure_persistence: None,
        ..Config::default()
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Runs the property over `sinks`, inside `runtime`.
fn check_every_case(runtime: &tokio::runtime::Runtime, sinks: &Sinks) {
    let mut runner = runner();
    let tally = Tally::default();
    let outcome = runner.run(&case(), |case| {
        runtime.block_on(check_case(&case, sinks, &tally))
    });
    if let Err(error) = outcome {
        panic!("{error}");
    }
    let (accepted, refused) = (tally.accepted.into_inner(), tally.refused.into_inner());
    println!("{accepted} cases accepted and stored, {refused} refused");
    // With one case in four spoiled, 64 cases draw both kinds but once in
    // about 10^8 runs.
    assert!(
        accepted > 0 && refused > 0,
        "{accepted} accepted, {refused} refused: the cases did not cover both"
    );
}

#[cfg(feature = "sqlite")]
async fn sqlite_sink() -> Arc<dyn EventSink> {
    Arc::new(
        conversion_gateway::SqliteStore::open_temporary()
            .await
            .expect("open SQLite in memory"),
    )
}

#[test]
fn accepted_events_read_back_identical_from_memory_and_sqlite() {
    let runtime = runtime();
    let mut sinks: Sinks = vec![("memory", Arc::new(MemoryEventSink::new()))];
    #[cfg(feature = "sqlite")]
    sinks.push(("sqlite", runtime.block_on(sqlite_sink())));
    check_every_case(&runtime, &sinks);
}

#[cfg(all(feature = "postgres", feature = "external-tests"))]
mod postgres {
    //! The same property through PostgreSQL as well.

    use std::str::FromStr;
    use std::sync::Arc;
    use std::time::Duration;

    use conversion_gateway::{MemoryEventSink, OsRandom, PgStore, random_uuid};
    use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

    use super::{Sinks, check_every_case, runtime};

    const NO_DATABASE: &str = "\
DATABASE_URL is not set: the PostgreSQL part of this test needs a server. Start one, e.g.
    docker run --rm -e POSTGRES_HOST_AUTH_METHOD=trust -e POSTGRES_DB=test -p 5432:5432 postgres:16
(or install your distribution's postgresql package and create a database `test`), then
    export DATABASE_URL=postgres://postgres@127.0.0.1:5432/test
and run the tests again.";

    fn database_url() -> String {
        match std::env::var("DATABASE_URL") {
            Ok(url) if !url.is_empty() => url,
            _ => panic!("{NO_DATABASE}"),
        }
    }

    #[test]
    fn accepted_events_read_back_identical_from_every_store() {
        let runtime = runtime();
        let url = database_url();
        let schema = format!("cg_storable_{}", random_uuid(&OsRandom).simple());
        let admin = runtime.block_on(async {
            let admin = PgPoolOptions::new()
                .max_connections(1)
                .acquire_timeout(Duration::from_secs(10))
                .connect(&url)
                .await
                .unwrap_or_else(|error| {
                    panic!("cannot connect to DATABASE_URL ({error}).\n{NO_DATABASE}")
                });
            sqlx::raw_sql(&format!("CREATE SCHEMA {schema}"))
                .execute(&admin)
                .await
                .expect("create the test schema");
            admin
        });
        // The property runs in a closure so that the schema is dropped
        // whether it held or not.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let store = runtime.block_on(async {
                let options = PgConnectOptions::from_str(&url)
                    .expect("DATABASE_URL must be a postgres:// address")
                    .options([("search_path", schema.as_str())]);
                let pool = PgPoolOptions::new()
                    .max_connections(4)
                    .acquire_timeout(Duration::from_secs(10))
                    .connect_with(options)
                    .await
                    .expect("connect to DATABASE_URL");
                PgStore::from_pool(pool)
                    .await
                    .expect("open the PostgreSQL store")
            });
            let mut sinks: Sinks = vec![("memory", Arc::new(MemoryEventSink::new()))];
            #[cfg(feature = "sqlite")]
            sinks.push(("sqlite", runtime.block_on(super::sqlite_sink())));
            sinks.push(("postgres", Arc::new(store.clone())));
            check_every_case(&runtime, &sinks);
            runtime.block_on(store.close());
        }));
        runtime.block_on(async {
            sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
                .execute(&admin)
                .await
                .expect("drop the test schema");
            admin.close().await;
        });
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    }
}
