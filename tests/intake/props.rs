//! Property tests of the conversion validator: it never panics, whatever the
//! input, and every well-formed event passes and reads back as it was sent.

use std::collections::BTreeSet;

use base64::Engine as _;
use conversion_gateway::{ConversionLimits, validate_batch, validate_conversion};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const CUSTOM_FIELDS: &[&str] = &["plan", "segment", "score"];

/// Names the validator knows, so that generated objects hit its paths.
const KNOWN_NAMES: &[&str] = &[
    "event_type",
    "event_family",
    "payload",
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
    "tags",
    "available_for_mailing",
    "legal_bases",
    "category",
    "type",
    "status",
    "cf_plan",
    "cf_segment",
    "cf_unknown",
];

const KNOWN_VALUES: &[&str] = &[
    "CONVERSION",
    "CDP",
    "communications",
    "data_processing",
    "consent",
    "pre_existent_contract",
    "granted",
    "declined",
    "a@b.co",
    "",
    " ",
    "e30",
    "6ba7b810-9dad-11d1-80b4-00c04fd430c8",
];

/// Any short string, control characters and astral planes included.
fn any_text() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..24).prop_map(String::from_iter)
}

/// Any short string a valid event may hold in a stored field: every
/// character but the C0 controls other than tab, line feed and carriage
/// return, which the validator refuses (`INVALID_CHARACTERS`).
fn storable_text() -> impl Strategy<Value = String> {
    let storable = any::<char>().prop_filter("a refused control character", |c| {
        *c >= ' ' || matches!(c, '\t' | '\n' | '\r')
    });
    prop::collection::vec(storable, 0..24).prop_map(String::from_iter)
}

fn any_key() -> BoxedStrategy<String> {
    prop_oneof![
        3 => prop::sample::select(KNOWN_NAMES).prop_map(str::to_owned),
        1 => any_text(),
    ]
    .boxed()
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        any_text().prop_map(Value::String),
        prop::sample::select(KNOWN_VALUES).prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(8, 96, 10, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..10).prop_map(Value::Array),
            prop::collection::btree_map(any_key(), inner, 0..10)
                .prop_map(|map| Value::Object(map.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Checks the invariants of a result: errors are never empty, have a status,
/// a `$` path and a lowercase message; a valid event renders its payload.
fn check_outcome<T>(result: Result<T, conversion_gateway::ValidationErrors>) {
    if let Err(errors) = result {
        assert!(!errors.errors().is_empty(), "{errors:?}");
        let outcome = errors.status();
        assert!(matches!(outcome, 400 | 413), "{outcome:?}");
        for error in errors.errors() {
            assert!(error.path().to_string().starts_with('$'), "{error:?}");
            let message = error.to_string();
            assert!(message.starts_with(|c: char| c.is_lowercase()), "{message}");
        }
        let body = errors.to_body();
        assert!(body["errors"].is_array(), "{body:?}");
    }
}

/// Whether the validator refused the body as not being JSON at all.
fn refused_as_not_json<T>(result: &Result<T, conversion_gateway::ValidationErrors>) -> bool {
    result.as_ref().err().is_some_and(|errors| {
        errors.errors().len() == 1
            && errors.errors()[0]
                .to_string()
                .starts_with("the body is not valid JSON")
    })
}

/// A small edit of a byte string: replace, insert or delete one byte.
#[derive(Clone, Debug)]
enum Edit {
    Replace(prop::sample::Index, u8),
    Insert(prop::sample::Index, u8),
    Delete(prop::sample::Index),
}

fn edit() -> impl Strategy<Value = Edit> {
    let byte = prop_oneof![
        prop::sample::select(
            &b"{}[]\",:\\ u0123456789abcdefnulltrueE+-.\x00\x1f\x7f\xc3\xa9\xff"[..]
        ),
        any::<u8>(),
    ];
    prop_oneof![
        (any::<prop::sample::Index>(), byte.clone()).prop_map(|(at, b)| Edit::Replace(at, b)),
        (any::<prop::sample::Index>(), byte).prop_map(|(at, b)| Edit::Insert(at, b)),
        any::<prop::sample::Index>().prop_map(Edit::Delete),
    ]
}

fn apply(body: &mut Vec<u8>, edit: &Edit) {
    match edit {
        Edit::Replace(at, byte) if !body.is_empty() => {
            let at = at.index(body.len());
            body[at] = *byte;
        }
        Edit::Insert(at, byte) => {
            let at = at.index(body.len() + 1);
            body.insert(at, *byte);
        }
        Edit::Delete(at) if !body.is_empty() => {
            let at = at.index(body.len());
            body.remove(at);
        }
        _ => {}
    }
}

fn some_text(pattern: &'static str) -> impl Strategy<Value = Option<String>> {
    prop::option::of(pattern)
}

prop_compose! {
    fn legal_basis()(
        category in prop::sample::select(&["communications", "data_processing"][..]),
        kind in prop::sample::select(&[
            "consent", "pre_existent_contract", "legitimate_interest",
            "judicial_process", "vital_interest", "public_interest",
        ][..]),
        status in prop::option::of(prop::sample::select(&["granted", "declined"][..])),
    ) -> Value {
        let mut basis = json!({ "category": category, "type": kind });
        let status = if kind == "consent" { Some(status.unwrap_or("granted")) } else { status };
        if let Some(status) = status {
            basis["status"] = json!(status);
        }
        basis
    }
}

prop_compose! {
    /// A payload that follows every rule, with its fields drawn at random.
    fn valid_payload()(
        conversion_identifier in "[a-z0-9][a-z0-9 _-]{0,30}",
        email in "[a-z0-9._%+-]{1,20}@[a-z0-9-]{1,10}(\\.[a-z]{2,6}){1,2}",
        texts in prop::collection::vec(prop::option::of(storable_text()), 14),
        client_tracking_id in some_text("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"),
        utm in prop::collection::vec(some_text("utm-[a-z0-9 _-]{0,16}"), 4),
        cookie in prop::option::of(prop::collection::btree_map("[a-z_]{1,8}", any_text(), 0..4)),
        cookie_base64 in any::<bool>(),
        tags in prop::option::of(prop::collection::btree_set("[a-z0-9][a-z0-9 é-]{0,11}", 0..8)),
        available_for_mailing in prop::option::of(any::<bool>()),
        legal_bases in prop::option::of(prop::collection::vec(legal_basis(), 0..4)),
        custom in prop::collection::vec(prop::option::of(storable_text()), 3),
    ) -> Value {
        let names = [
            "name", "job_title", "state", "city", "country", "personal_phone", "mobile_phone",
            "twitter", "facebook", "linkedin", "website", "company_name", "company_site",
            "company_address",
        ];
        let mut payload = Map::new();
        payload.insert("conversion_identifier".into(), json!(conversion_identifier));
        payload.insert("email".into(), json!(email));
        for (name, text) in names.iter().zip(texts) {
            if let Some(text) = text {
                payload.insert((*name).into(), json!(text));
            }
        }
        if let Some(id) = client_tracking_id {
            payload.insert("client_tracking_id".into(), json!(id));
        }
        let utm_names = ["traffic_source", "traffic_medium", "traffic_campaign", "traffic_value"];
        match cookie {
            // A cookie in traffic_source: the UTM fields stay out.
            Some(cookie) => {
                let text = serde_json::to_string(&cookie).expect("serializable");
                let text = if cookie_base64 {
                    base64::engine::general_purpose::STANDARD.encode(text)
                } else {
                    text
                };
                payload.insert("traffic_source".into(), json!(text));
            }
            None => {
                for (name, value) in utm_names.iter().zip(utm) {
                    if let Some(value) = value {
                        payload.insert((*name).into(), json!(value));
                    }
                }
            }
        }
        if let Some(tags) = tags {
            payload.insert("tags".into(), json!(tags.into_iter().collect::<Vec<_>>()));
        }
        if let Some(available) = available_for_mailing {
            payload.insert("available_for_mailing".into(), json!(available));
        }
        if let Some(bases) = legal_bases {
            payload.insert("legal_bases".into(), Value::Array(bases));
        }
        for (name, value) in CUSTOM_FIELDS.iter().zip(custom) {
            if let Some(value) = value {
                payload.insert(format!("cf_{name}"), json!(value));
            }
        }
        Value::Object(payload)
    }
}

fn event(payload: Value) -> Value {
    json!({ "event_type": "CONVERSION", "event_family": "CDP", "payload": payload })
}

proptest! {
    // No regression file: a failure prints its minimal case, which belongs in
    // tests/intake/validation.rs as a named test.
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 0..600)) {
        let limits = ConversionLimits::default();
        check_outcome(validate_conversion(&body, CUSTOM_FIELDS, &limits));
        check_outcome(validate_batch(&body, CUSTOM_FIELDS, &limits));
    }

    #[test]
    fn arbitrary_json_never_panics(value in any_json()) {
        let limits = ConversionLimits::default();
        let body = serde_json::to_vec(&value).expect("serializable");
        check_outcome(validate_conversion(&body, CUSTOM_FIELDS, &limits));
        check_outcome(validate_batch(&body, CUSTOM_FIELDS, &limits));
    }

    #[test]
    fn arbitrary_payloads_never_panic(
        payload in any_json(),
        event_type in prop::sample::select(&["CONVERSION", "conversion", "OPPORTUNITY"][..]),
        reject in any::<bool>(),
    ) {
        let mut limits = ConversionLimits::default();
        if reject {
            limits.unknown_attributes = conversion_gateway::UnknownAttributes::Reject;
        }
        limits.max_depth = 4;
        let single = json!({ "event_type": event_type, "event_family": "CDP", "payload": payload });
        let body = serde_json::to_vec(&single).expect("serializable");
        check_outcome(validate_conversion(&body, CUSTOM_FIELDS, &limits));
        let batch = serde_json::to_vec(&json!([single, payload])).expect("serializable");
        check_outcome(validate_batch(&batch, CUSTOM_FIELDS, &limits));
    }

    // The validator reads JSON itself: it must accept exactly what serde_json
    // accepts, on near-misses of real events as much as on noise.
    #[test]
    fn json_syntax_matches_serde_json_on_edited_events(
        payload in valid_payload(),
        edits in prop::collection::vec(edit(), 1..4),
    ) {
        let mut body = serde_json::to_vec(&event(payload)).expect("serializable");
        for edit in &edits {
            apply(&mut body, edit);
        }
        let serde_accepts = serde_json::from_slice::<Value>(&body).is_ok();
        let result = validate_conversion(&body, CUSTOM_FIELDS, &ConversionLimits::default());
        prop_assert_eq!(
            refused_as_not_json(&result),
            !serde_accepts,
            "body: {:?}", String::from_utf8_lossy(&body)
        );
        check_outcome(result);
    }

    #[test]
    fn json_syntax_matches_serde_json_on_arbitrary_values(value in any_json(), edit in edit()) {
        let mut body = serde_json::to_vec(&json!({ "payload": { "x": value } })).expect("serializable");
        apply(&mut body, &edit);
        let serde_accepts = serde_json::from_slice::<Value>(&body).is_ok();
        let mut limits = ConversionLimits::default();
        limits.max_depth = 200;
        let result = validate_conversion(&body, CUSTOM_FIELDS, &limits);
        prop_assert_eq!(
            refused_as_not_json(&result),
            !serde_accepts,
            "body: {:?}", String::from_utf8_lossy(&body)
        );
    }

    #[test]
    fn json_syntax_matches_serde_json_on_noise(body in prop::collection::vec(
        prop::sample::select(&b"{}[]\",: \\u0009afnlrtuse-+.eE\xc3\xa9"[..]), 0..40)
    ) {
        let serde_accepts = serde_json::from_slice::<Value>(&body).is_ok();
        let result = validate_conversion(&body, CUSTOM_FIELDS, &ConversionLimits::default());
        prop_assert_eq!(refused_as_not_json(&result), !serde_accepts);
    }

    #[test]
    fn truncated_valid_events_never_panic(payload in valid_payload(), cut in any::<prop::sample::Index>()) {
        let body = serde_json::to_vec(&event(payload)).expect("serializable");
        let truncated = &body[..cut.index(body.len())];
        check_outcome(validate_conversion(truncated, CUSTOM_FIELDS, &ConversionLimits::default()));
    }

    #[test]
    fn a_generated_valid_event_validates_and_reads_back(payload in valid_payload()) {
        let body = serde_json::to_vec(&event(payload.clone())).expect("serializable");
        let validated = validate_conversion(&body, CUSTOM_FIELDS, &ConversionLimits::default());
        let event = match validated {
            Ok(event) => event,
            Err(errors) => panic!("{:#}\nfor {payload:#}", errors.to_body()),
        };
        prop_assert_eq!(event.to_payload_json(), payload.clone());
        // The text recorded is exactly that value's serialisation: members
        // in the same order, the same escapes.
        let text = serde_json::to_string(&event.to_payload_json()).expect("serializable");
        let recorded = event.to_payload();
        prop_assert_eq!(recorded.as_str(), text.as_str());
        prop_assert_eq!(event.email(), payload["email"].as_str().unwrap_or_default());
        let tags: Vec<String> = event.tags().map(|tag| tag.into_owned()).collect();
        let sent: Vec<String> = payload["tags"]
            .as_array()
            .map(|tags| tags.iter().filter_map(|t| t.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        prop_assert_eq!(tags, sent);
        let unique: BTreeSet<_> = event.tags().collect();
        prop_assert_eq!(unique.len(), event.tags().count());
    }

    #[test]
    fn unknown_attributes_do_not_change_the_recorded_payload(
        payload in valid_payload(),
        extra in prop::collection::btree_map("x_[a-z]{1,8}", any_json(), 1..4),
    ) {
        let mut with_extra = payload.clone();
        for (name, value) in &extra {
            with_extra[name] = value.clone();
        }
        let body = serde_json::to_vec(&event(with_extra)).expect("serializable");
        let mut limits = ConversionLimits::default();
        limits.max_depth = 64;
        let event = validate_conversion(&body, CUSTOM_FIELDS, &limits).expect("accepted");
        prop_assert_eq!(event.to_payload().to_value(), payload.clone());
        prop_assert_eq!(event.to_payload_json(), payload);
        prop_assert_eq!(event.unknown_attributes().count(), extra.len());
    }

    #[test]
    fn a_batch_of_valid_events_validates_in_order(payloads in prop::collection::vec(valid_payload(), 1..6)) {
        let events: Vec<Value> = payloads.iter().cloned().map(event).collect();
        let body = serde_json::to_vec(&events).expect("serializable");
        let validated = validate_batch(&body, CUSTOM_FIELDS, &ConversionLimits::default())
            .unwrap_or_else(|errors| panic!("{:#}", errors.to_body()));
        let read: Vec<Value> = validated.iter().map(|event| event.to_payload_json()).collect();
        prop_assert_eq!(read, payloads);
    }
}
