//! Validator configurations and the properties of its results.
//!
//! Every input runs under each configuration of [`configs`]: the defaults,
//! `UnknownAttributes::Reject`, and tight bounds with unusual custom-field
//! names. Inputs stay plain JSON, so a crash file is a body to paste into a test.

use std::sync::OnceLock;

use conversion_gateway::{
    ConversionEvent, ConversionLimits, ErrorType, LegalBasisType, UnknownAttributes,
    ValidationErrors, validate_batch, validate_conversion,
};
use serde_json::{Value, json};

/// One way of calling the validator.
#[derive(Debug)]
pub struct Config {
    /// A name for panic messages.
    pub name: &'static str,
    /// The bounds and the unknown-attribute policy.
    pub limits: ConversionLimits,
    /// The account's custom fields, without the `cf_` prefix.
    pub custom_fields: &'static [&'static str],
}

/// The configurations every input runs under.
pub fn configs() -> &'static [Config] {
    static CONFIGS: OnceLock<Vec<Config>> = OnceLock::new();
    CONFIGS.get_or_init(|| {
        let mut reject = ConversionLimits::default();
        reject.unknown_attributes = UnknownAttributes::Reject;
        let mut tight = ConversionLimits::default();
        tight.max_body_bytes = 4096;
        tight.max_string_len = 16;
        tight.max_traffic_source_len = 256;
        tight.max_tags = 3;
        tight.max_tag_len = 5;
        tight.max_legal_bases = 2;
        tight.max_depth = 4;
        tight.max_batch_events = 3;
        vec![
            Config {
                name: "defaults",
                limits: ConversionLimits::default(),
                custom_fields: &["plan", "segment"],
            },
            Config {
                name: "reject unknown attributes",
                limits: reject,
                custom_fields: &["plan", "segment"],
            },
            Config {
                name: "tight bounds, odd custom field names",
                limits: tight,
                custom_fields: &["plan", "", "ção", "cf_x"],
            },
        ]
    })
}

/// The standard payload fields that hold strings, as named on the wire.
const STRING_FIELDS: [&str; 21] = [
    "conversion_identifier",
    "email",
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
    "client_tracking_id",
    "traffic_source",
    "traffic_medium",
    "traffic_campaign",
    "traffic_value",
];

/// The other standard payload fields.
const OTHER_FIELDS: [&str; 3] = ["tags", "available_for_mailing", "legal_bases"];

fn is_blank(value: &str) -> bool {
    value.chars().all(char::is_whitespace)
}

fn chars(value: &str) -> usize {
    value.chars().count()
}

/// The e-mail rule of `validate_conversion`'s docs, written out again.
fn is_plausible_email(value: &str) -> bool {
    let Some((local, domain)) = value.split_once('@') else {
        return false;
    };
    value.len() <= 254
        && (1..=64).contains(&local.len())
        && !domain.contains('@')
        && domain.split('.').count() >= 2
        && domain.split('.').all(|label| !label.is_empty())
        && !value.chars().any(|c| c.is_whitespace() || c.is_control())
}

fn is_uuid_shaped(value: &str) -> bool {
    value.len() == 36
        && value.bytes().enumerate().all(|(index, byte)| match index {
            8 | 13 | 18 | 23 => byte == b'-',
            _ => byte.is_ascii_hexdigit(),
        })
}

fn strings_in(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(text) => out.push(text.clone()),
        Value::Array(items) => items.iter().for_each(|item| strings_in(item, out)),
        Value::Object(members) => members.iter().for_each(|(key, item)| {
            out.push(key.clone());
            strings_in(item, out);
        }),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// Checks the properties every accepted event must have under `config`.
pub fn check_event(event: &ConversionEvent<'_>, config: &Config) {
    let limits = &config.limits;
    let name = config.name;
    assert_eq!(event.event_type(), "CONVERSION", "{name}");
    assert_eq!(event.event_family(), "CDP", "{name}");
    let identifier = event.conversion_identifier();
    assert!(
        !is_blank(identifier),
        "{name}: blank identifier {identifier:?}"
    );
    let email = event.email();
    assert!(!is_blank(email), "{name}: blank email {email:?}");
    assert!(
        is_plausible_email(email),
        "{name}: implausible email {email:?}"
    );

    let strings = [
        ("conversion_identifier", Some(identifier)),
        ("email", Some(email)),
        ("name", event.name()),
        ("job_title", event.job_title()),
        ("state", event.state()),
        ("city", event.city()),
        ("country", event.country()),
        ("personal_phone", event.personal_phone()),
        ("mobile_phone", event.mobile_phone()),
        ("twitter", event.twitter()),
        ("facebook", event.facebook()),
        ("linkedin", event.linkedin()),
        ("website", event.website()),
        ("company_name", event.company_name()),
        ("company_site", event.company_site()),
        ("company_address", event.company_address()),
        ("client_tracking_id", event.client_tracking_id()),
        ("traffic_source", event.traffic_source()),
        ("traffic_medium", event.traffic_medium()),
        ("traffic_campaign", event.traffic_campaign()),
        ("traffic_value", event.traffic_value()),
    ];
    for (field, value) in strings {
        let Some(value) = value else { continue };
        let max = if field == "traffic_source" {
            limits.max_traffic_source_len
        } else {
            limits.max_string_len
        };
        assert!(
            chars(value) <= max,
            "{name}: {field} has {} characters, more than {max}",
            chars(value)
        );
    }
    if let Some(id) = event.client_tracking_id() {
        assert!(
            is_blank(id) || is_uuid_shaped(id),
            "{name}: client_tracking_id {id:?}"
        );
    }
    if event.traffic_source_is_cookie() {
        assert!(
            event.traffic_source().is_some(),
            "{name}: cookie without source"
        );
        for (field, value) in [
            ("traffic_medium", event.traffic_medium()),
            ("traffic_campaign", event.traffic_campaign()),
            ("traffic_value", event.traffic_value()),
        ] {
            assert!(
                value.is_none_or(is_blank),
                "{name}: {field} {value:?} beside a traffic-source cookie"
            );
        }
    }

    let tags: Vec<_> = event.tags().collect();
    assert!(tags.len() <= limits.max_tags, "{name}: {} tags", tags.len());
    for (index, tag) in tags.iter().enumerate() {
        assert!(!is_blank(tag), "{name}: blank tag {tag:?}");
        assert!(
            chars(tag) <= limits.max_tag_len,
            "{name}: tag {tag:?} too long"
        );
        assert!(!tag.chars().any(char::is_uppercase), "{name}: tag {tag:?}");
        assert!(!tags[..index].contains(tag), "{name}: tag {tag:?} repeated");
    }

    let bases: Vec<_> = event.legal_bases().collect();
    assert!(bases.len() <= limits.max_legal_bases, "{name}: {bases:?}");
    for basis in &bases {
        if basis.kind == LegalBasisType::Consent {
            assert!(
                basis.status.is_some(),
                "{name}: consent without status {basis:?}"
            );
        }
    }

    let custom: Vec<_> = event.custom_fields().collect();
    for (index, (field, value)) in custom.iter().enumerate() {
        assert!(
            config.custom_fields.contains(field),
            "{name}: custom field {field:?} is not the account's"
        );
        assert!(
            chars(value) <= limits.max_string_len,
            "{name}: cf_{field} too long"
        );
        assert!(
            !custom[..index].iter().any(|(seen, _)| seen == field),
            "{name}: cf_{field} kept twice"
        );
        assert_eq!(event.custom_field(field), Some(*value), "{name}");
    }

    let dropped: Vec<String> = event.unknown_attributes().map(|p| p.to_string()).collect();
    if limits.unknown_attributes == UnknownAttributes::Reject {
        assert!(
            dropped.is_empty(),
            "{name}: dropped {dropped:?} under Reject"
        );
    }
    for path in &dropped {
        // `$.name`, or `$['odd name']` for names that need quoting.
        let shaped = path.starts_with("$.") || path.starts_with("$[");
        assert!(shaped, "{name}: dropped path {path}");
    }

    let payload = event.to_payload_json();
    let Value::Object(members) = &payload else {
        panic!("{name}: payload is not an object: {payload}");
    };
    // What the stores record is that value's text, written without it.
    let text = serde_json::to_string(&payload).expect("a Value serialises");
    assert_eq!(event.to_payload().as_str(), text, "{name}: recorded text");
    for key in members.keys() {
        let known = STRING_FIELDS.contains(&key.as_str())
            || OTHER_FIELDS.contains(&key.as_str())
            || key
                .strip_prefix("cf_")
                .is_some_and(|field| config.custom_fields.contains(&field));
        assert!(
            known,
            "{name}: payload member {key:?} is neither standard nor custom"
        );
    }
    assert_eq!(payload["email"], email, "{name}");
    assert_eq!(payload["conversion_identifier"], identifier, "{name}");
    let text = serde_json::to_string(&payload).expect("payload serialises");
    let again: Value = serde_json::from_str(&text).expect("payload parses back");
    assert_eq!(again, payload, "{name}: payload changes when re-serialised");

    let mut stored = Vec::new();
    strings_in(&payload, &mut stored);
    for text in stored {
        // U+0000 and every C0 control but tab, line feed and carriage
        // return are refused: PostgreSQL cannot store U+0000.
        assert!(
            !text
                .chars()
                .any(|c| c < '\u{20}' && !matches!(c, '\t' | '\n' | '\r')),
            "{name}: stored string {text:?} holds a C0 control"
        );
    }
    check_payload_is_a_fixed_point(&payload, config);
}

/// The event recording `payload` as its payload.
fn event_of(payload: &Value) -> Value {
    json!({ "event_type": "CONVERSION", "event_family": "CDP", "payload": payload })
}

/// The normalized payload of an accepted event, sent again as an event, is
/// accepted and normalizes to itself.
fn check_payload_is_a_fixed_point(payload: &Value, config: &Config) {
    let body = serde_json::to_vec(&event_of(payload)).expect("serialises");
    if body.len() > config.limits.max_body_bytes {
        return;
    }
    match validate_conversion(&body, config.custom_fields, &config.limits) {
        Ok(again) => {
            assert_eq!(
                again.to_payload_json(),
                *payload,
                "{}: the payload is not a fixed point",
                config.name
            );
            assert_eq!(again.unknown_attributes().count(), 0, "{}", config.name);
        }
        Err(errors) => panic!(
            "{}: the normalized payload {payload} is refused: {}",
            config.name,
            errors.to_body()
        ),
    }
}

/// Checks the properties of a refusal of a `body_len`-byte body: the
/// status, `BODY_TOO_LARGE` and `BAD_REQUEST` alone, and the body's shape.
pub fn check_errors(errors: &ValidationErrors, body_len: usize, config: &Config, batch: bool) {
    let name = config.name;
    let list = errors.errors();
    assert!(!list.is_empty(), "{name}: a refusal without errors");
    let too_large = body_len > config.limits.max_body_bytes;
    let has = |kind: ErrorType| list.iter().any(|error| error.error_type() == kind);
    assert_eq!(has(ErrorType::BodyTooLarge), too_large, "{name}: {list:?}");
    assert_eq!(errors.status(), if too_large { 413 } else { 400 }, "{name}");
    if too_large || has(ErrorType::BadRequest) {
        assert_eq!(
            list.len(),
            1,
            "{name}: BAD_REQUEST or BODY_TOO_LARGE not alone: {list:?}"
        );
        assert_eq!(list[0].path().to_string(), "$", "{name}");
    }
    let body = errors.to_body();
    let rendered = body["errors"].as_array().expect("an errors array");
    assert_eq!(rendered.len(), list.len(), "{name}");
    for (error, json) in list.iter().zip(rendered) {
        assert_eq!(json["error_type"], error.error_type().as_str(), "{name}");
        let message = json["error_message"].as_str().expect("a message");
        assert!(
            message.starts_with(|c: char| !c.is_uppercase()),
            "{name}: message {message:?} does not start lowercase"
        );
        let path = json["path"].as_str().expect("a path");
        assert_eq!(path, error.path().to_string(), "{name}");
        let shaped = if batch {
            path == "$" || path.starts_with("$[")
        } else {
            path == "$" || path.starts_with("$.") || path.starts_with("$[")
        };
        assert!(shaped, "{name}: path {path}");
    }
    let text = serde_json::to_string(&body).expect("serialises");
    assert_eq!(serde_json::from_str::<Value>(&text).expect("parses"), body);
}

/// The errors as (type, path, rules) triples, for comparing two refusals.
fn triples(errors: &ValidationErrors) -> Vec<(ErrorType, String, Value)> {
    errors
        .errors()
        .iter()
        .map(|error| {
            let json = error.to_json();
            let rules = json.get("validation_rules").cloned().unwrap_or(Value::Null);
            (error.error_type(), error.path().to_string(), rules)
        })
        .collect()
}

/// `body` validated alone (giving `alone`) and as the only event of a batch
/// gives the same answer: the same event, or the same errors under `$[0]`.
pub fn check_alone_as_in_a_batch(
    body: &[u8],
    alone: &Result<ConversionEvent<'_>, ValidationErrors>,
    config: &Config,
) {
    let limits = &config.limits;
    if body.len() + 2 > limits.max_body_bytes {
        return;
    }
    let mut wrapped = Vec::with_capacity(body.len() + 2);
    wrapped.push(b'[');
    wrapped.extend_from_slice(body);
    wrapped.push(b']');
    let batch = validate_batch(&wrapped, config.custom_fields, limits);
    let name = config.name;
    match (alone, &batch) {
        (Ok(event), Ok(events)) => {
            assert_eq!(
                events.len(),
                1,
                "{name}: one event alone, {} in a batch",
                events.len()
            );
            assert_eq!(
                event.to_payload_json(),
                events[0].to_payload_json(),
                "{name}"
            );
            assert_eq!(
                event.unknown_attributes().count(),
                events[0].unknown_attributes().count(),
                "{name}"
            );
            assert_eq!(
                event.traffic_source_is_cookie(),
                events[0].traffic_source_is_cookie(),
                "{name}"
            );
        }
        (Ok(_), Err(errors)) => {
            panic!(
                "{name}: accepted alone, refused in a batch: {}",
                errors.to_body()
            )
        }
        (Err(errors), Ok(events)) => assert_ne!(
            events.len(),
            1,
            "{name}: refused alone ({}), accepted as a batch of one",
            errors.to_body()
        ),
        (Err(alone), Err(batch)) => {
            let alone = triples(alone);
            let batch = triples(batch);
            if alone
                .iter()
                .any(|(kind, ..)| *kind == ErrorType::BadRequest)
            {
                return;
            }
            if batch
                .iter()
                .any(|(kind, ..)| *kind == ErrorType::BadRequest)
            {
                // The batch array is one more level of nesting: an event
                // nested up to serde_json's limit is too deep in a batch.
                assert!(
                    alone
                        .iter()
                        .any(|(kind, ..)| *kind == ErrorType::TooDeeplyNested),
                    "{name}: a syntax error only in the batch: {alone:?}"
                );
                return;
            }
            let expected: Vec<_> = alone
                .into_iter()
                .map(|(kind, path, rules)| {
                    let tail = path.strip_prefix('$').expect("paths start with $");
                    (kind, format!("$[0]{tail}"), rules)
                })
                .collect();
            assert_eq!(batch, expected, "{name}: alone and in a batch differ");
        }
    }
}

/// The accepted events of a batch, each rebuilt from its normalized payload,
/// make a batch that is accepted with the same payloads.
pub fn check_batch_round_trip(events: &[ConversionEvent<'_>], config: &Config) {
    let payloads: Vec<Value> = events
        .iter()
        .map(ConversionEvent::to_payload_json)
        .collect();
    let rebuilt: Vec<Value> = payloads.iter().map(event_of).collect();
    let body = serde_json::to_vec(&rebuilt).expect("serialises");
    if body.len() > config.limits.max_body_bytes {
        return;
    }
    match validate_batch(&body, config.custom_fields, &config.limits) {
        Ok(again) => {
            let again: Vec<Value> = again.iter().map(ConversionEvent::to_payload_json).collect();
            assert_eq!(
                again, payloads,
                "{}: the batch is not a fixed point",
                config.name
            );
        }
        Err(errors) => panic!(
            "{}: the normalized batch is refused: {}",
            config.name,
            errors.to_body()
        ),
    }
}
