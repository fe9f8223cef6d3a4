//! Conversion-event validation against the usual alternatives, side by side.
//!
//! For each body (benches/data/*.json, shared with tests/intake/alloc.rs),
//! one group compares:
//! - `validate_conversion`: this crate, every rule, all errors collected;
//! - `serde_value`: `serde_json::from_slice::<Value>` alone, no rule checked;
//! - `serde_value+jsonschema`: the same, then the `jsonschema` crate checking a
//!   JSON Schema that states the same rules, collecting every error
//!   (`iter_errors`), the validator compiled once outside the timed loop;
//! - `ignored_any`: `serde_json::from_slice::<IgnoredAny>`, the syntax-only floor.
//!
//! A second group, `hostile_validation`, times the typical event beside one
//! hostile body per shape (`conversion_gateway_testkit::hostile`, in tests/support: each at the 200 KiB size
//! limit, built to make a validator work harder than the bytes it reads), as
//! throughput in bytes per second, so that the cost per byte of each shape
//! compares with the typical event's in the same run; `ignored_any` on the
//! same bytes is the syntax-only floor.
//!
//! Run with
//! `cargo bench --bench validation -- --warm-up-time 1 --measurement-time 3`
//! (add `hostile` after `--` for the second group alone).
//!
//! Times are wall-clock by default. On a machine shared with other work, set
//! `VALIDATION_BENCH_CPU_TIME=1` to measure the CPU time of the benchmark
//! thread instead: time spent descheduled then stays out of every contender,
//! and the ratios between them stop drifting with the load of the machine.

use std::hint::black_box;
use std::time::{Duration, Instant};

use conversion_gateway::{ConversionLimits, validate_batch, validate_conversion};
use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_main};
use serde::de::IgnoredAny;
use serde_json::{Map, Value, json};

const BODIES: [(&str, &[u8]); 4] = [
    ("minimal", include_bytes!("data/minimal.json")),
    ("typical", include_bytes!("data/typical.json")),
    ("full", include_bytes!("data/full.json")),
    ("invalid", include_bytes!("data/invalid.json")),
];

/// The account's custom fields, without the `cf_` prefix.
const CUSTOM_FIELDS: &[&str] = &[
    "plan",
    "company_size",
    "industry",
    "lead_source_detail",
    "preferred_contact_time",
    "segment",
    "score",
];

const OPTIONAL_STRINGS: &[&str] = &[
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
];

/// The rules of `validate_conversion` as a JSON Schema (draft 2020-12), as far
/// as JSON Schema can say them: duplicate members and nesting depth are out of
/// its reach (a `Value` has already merged the one and built the other), and
/// the cookie test is approximated by patterns instead of decoding base64.
fn schema() -> Value {
    let optional_string = json!({ "type": ["string", "null"], "maxLength": 1024 });
    let mut properties = Map::new();
    for name in OPTIONAL_STRINGS {
        properties.insert((*name).to_owned(), optional_string.clone());
    }
    properties.insert(
        "conversion_identifier".into(),
        json!({ "type": "string", "maxLength": 1024, "pattern": "\\S" }),
    );
    properties.insert(
        "email".into(),
        json!({
            "type": "string",
            "maxLength": 254,
            "pattern": "^[^@\\s\\p{Cc}]{1,64}@[^@\\s\\p{Cc}.]+(\\.[^@\\s\\p{Cc}.]+)+$",
        }),
    );
    properties.insert(
        "client_tracking_id".into(),
        json!({
            "type": ["string", "null"],
            "maxLength": 1024,
            "pattern": "^(\\s*|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$",
        }),
    );
    properties.insert(
        "traffic_source".into(),
        json!({ "type": ["string", "null"], "maxLength": 4096 }),
    );
    for name in ["traffic_medium", "traffic_campaign", "traffic_value"] {
        properties.insert(name.into(), optional_string.clone());
    }
    properties.insert(
        "tags".into(),
        json!({
            "type": ["array", "null"],
            "maxItems": 50,
            "uniqueItems": true,
            "items": {
                "type": "string",
                "maxLength": 255,
                "pattern": "\\S",
                "not": { "pattern": "\\p{Lu}" },
            },
        }),
    );
    properties.insert(
        "available_for_mailing".into(),
        json!({ "type": ["boolean", "null"] }),
    );
    properties.insert(
        "legal_bases".into(),
        json!({
            "type": ["array", "null"],
            "maxItems": 10,
            "items": {
                "type": "object",
                "required": ["category", "type"],
                "properties": {
                    "category": { "enum": ["communications", "data_processing"] },
                    "type": { "enum": [
                        "consent", "pre_existent_contract", "legitimate_interest",
                        "judicial_process", "vital_interest", "public_interest",
                    ] },
                    "status": { "enum": ["granted", "declined"] },
                },
                "if": { "properties": { "type": { "const": "consent" } } },
                "then": { "required": ["status"] },
            },
        }),
    );
    let custom = format!("^cf_({})$", CUSTOM_FIELDS.join("|"));
    let empty_or_null = json!({ "anyOf": [{ "type": "null" }, { "pattern": "^\\s*$" }] });
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "required": ["event_type", "event_family", "payload"],
        "properties": {
            "event_type": { "type": "string", "enum": ["CONVERSION"] },
            "event_family": { "type": "string", "enum": ["CDP"] },
            "payload": {
                "type": "object",
                "required": ["conversion_identifier", "email"],
                "properties": properties,
                "patternProperties": {
                    custom: { "type": ["string", "null"], "maxLength": 1024 },
                },
                // A cookie: raw JSON object text, or base64 of it (starts with `e`).
                "if": {
                    "required": ["traffic_source"],
                    "properties": {
                        "traffic_source": {
                            "type": "string",
                            "pattern": "^\\s*(\\{.*\\}|e[A-Za-z0-9+/_-]*={0,2})\\s*$",
                        },
                    },
                },
                "then": {
                    "properties": {
                        "traffic_medium": empty_or_null,
                        "traffic_campaign": empty_or_null,
                        "traffic_value": empty_or_null,
                    },
                },
            },
        },
    })
}

/// Wall-clock time, or the CPU time of the benchmark thread (see the top).
struct BenchTime {
    cpu: bool,
}

enum Start {
    Wall(Instant),
    Cpu(cpu_time::ThreadTime),
}

// Durations print the same either way: reuse criterion's formatter.
static WALL_TIME: WallTime = WallTime;

impl BenchTime {
    fn from_env() -> Self {
        BenchTime {
            cpu: std::env::var_os("VALIDATION_BENCH_CPU_TIME").is_some_and(|v| v != "0"),
        }
    }
}

impl Measurement for BenchTime {
    type Intermediate = Start;
    type Value = Duration;

    fn start(&self) -> Start {
        if self.cpu {
            Start::Cpu(cpu_time::ThreadTime::now())
        } else {
            Start::Wall(Instant::now())
        }
    }

    fn end(&self, start: Start) -> Duration {
        match start {
            Start::Wall(start) => start.elapsed(),
            Start::Cpu(start) => start.elapsed(),
        }
    }

    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }

    fn zero(&self) -> Duration {
        Duration::ZERO
    }

    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        WALL_TIME.formatter()
    }
}

fn validation(c: &mut Criterion<BenchTime>) {
    let limits = ConversionLimits::default();
    let schema = schema();
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");

    // Both sides must agree on what is valid, or the comparison means nothing.
    for (name, body) in BODIES {
        let value: Value = serde_json::from_slice(body).expect("bench bodies are JSON");
        let schema_errors = validator.iter_errors(&value).count();
        let ours = validate_conversion(body, CUSTOM_FIELDS, &limits);
        if name == "invalid" {
            let errors = ours.expect_err("the invalid body is invalid");
            assert_eq!(errors.errors().len(), 3, "{}", errors.to_body());
            assert_eq!(schema_errors, 3, "jsonschema errors on the invalid body");
        } else {
            assert!(ours.is_ok(), "{name}: {:?}", ours.err());
            assert_eq!(schema_errors, 0, "{name}: jsonschema errors");
        }
    }

    let mut group = c.benchmark_group("conversion_validation");
    for (name, body) in BODIES {
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(
            BenchmarkId::new("validate_conversion", name),
            body,
            |b, body| b.iter(|| validate_conversion(black_box(body), CUSTOM_FIELDS, &limits)),
        );
        group.bench_with_input(BenchmarkId::new("serde_value", name), body, |b, body| {
            b.iter(|| serde_json::from_slice::<Value>(black_box(body)))
        });
        group.bench_with_input(
            BenchmarkId::new("serde_value+jsonschema", name),
            body,
            |b, body| {
                b.iter(|| {
                    let value: Value = serde_json::from_slice(black_box(body)).expect("JSON");
                    validator.iter_errors(&value).count()
                })
            },
        );
        group.bench_with_input(BenchmarkId::new("ignored_any", name), body, |b, body| {
            b.iter(|| serde_json::from_slice::<IgnoredAny>(black_box(body)))
        });
    }
    group.finish();
}

use conversion_gateway_testkit::hostile;

fn hostile_validation(c: &mut Criterion<BenchTime>) {
    let limits = ConversionLimits::default();
    let typical = BODIES[1].1;
    let mut group = c.benchmark_group("hostile_validation");
    // A hostile body takes milliseconds, not microseconds: ten samples of
    // equal iteration counts keep the run short and the samples comparable.
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    group.throughput(Throughput::Bytes(typical.len() as u64));
    group.bench_with_input(
        BenchmarkId::new("validate", "typical"),
        typical,
        |b, body| b.iter(|| validate_conversion(black_box(body), CUSTOM_FIELDS, &limits)),
    );
    for shape in hostile::all() {
        let custom_fields = shape.custom_field_names();
        let body = shape.body.as_slice();
        assert!(body.len() <= limits.max_body_bytes, "{}", shape.name);
        group.throughput(Throughput::Bytes(body.len() as u64));
        match shape.entry {
            hostile::Entry::Single => {
                group.bench_with_input(
                    BenchmarkId::new("validate", shape.name),
                    body,
                    |b, body| {
                        b.iter(|| validate_conversion(black_box(body), &custom_fields, &limits))
                    },
                );
            }
            hostile::Entry::Batch => {
                group.bench_with_input(
                    BenchmarkId::new("validate", shape.name),
                    body,
                    |b, body| b.iter(|| validate_batch(black_box(body), &custom_fields, &limits)),
                );
            }
        }
        group.bench_with_input(
            BenchmarkId::new("ignored_any", shape.name),
            body,
            |b, body| b.iter(|| serde_json::from_slice::<IgnoredAny>(black_box(body))),
        );
    }
    group.finish();
}

// In a private module: criterion_group! makes a `pub fn` it cannot document.
mod group {
    criterion::criterion_group! {
        name = benches;
        config = criterion::Criterion::default().with_measurement(super::BenchTime::from_env());
        targets = super::validation, super::hostile_validation
    }
}
criterion_main!(group::benches);
