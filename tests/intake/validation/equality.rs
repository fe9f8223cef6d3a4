//! Two validated events are equal when they say the same thing, wherever
//! their strings sat in their bodies (an event keeps spans of its body, and
//! compares what they hold), and not when any part differs.

use conversion_gateway::{ConversionLimits, validate_conversion};
use serde_json::{Value, json};

const CUSTOM_FIELDS: &[&str] = &["plan", "segment"];

/// A payload with every part an event compares: standard strings, tags, the
/// mailing flag, legal bases, a custom field and a dropped attribute.
fn payload() -> Value {
    json!({
        "conversion_identifier": "newsletter-signup",
        "email": "ana@example.com",
        "city": "São Paulo",
        "tags": ["webinar", "q2"],
        "available_for_mailing": true,
        "legal_bases": [{ "category": "communications", "type": "consent", "status": "granted" }],
        "cf_plan": "enterprise",
        "utm_content": "banner",
    })
}

fn body(payload: Value) -> Vec<u8> {
    let event = json!({ "event_type": "CONVERSION", "event_family": "CDP", "payload": payload });
    serde_json::to_vec(&event).expect("serializable")
}

/// `body` with its payload changed by `change`.
fn changed(change: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut payload = payload();
    change(&mut payload);
    body(payload)
}

#[test]
fn events_read_from_bodies_laid_out_differently_are_equal() {
    let limits = ConversionLimits::default();
    let compact = body(payload());
    // The same event pretty-printed, with the city written as an escape: its
    // strings sit elsewhere, and one of them in the decoded buffer.
    let mut spaced =
        serde_json::to_string_pretty(&serde_json::from_slice::<Value>(&compact).unwrap())
            .expect("serializable");
    spaced = spaced.replace("São Paulo", "S\\u00e3o Paulo");
    let first = validate_conversion(&compact, CUSTOM_FIELDS, &limits).expect("valid");
    let second = validate_conversion(spaced.as_bytes(), CUSTOM_FIELDS, &limits).expect("valid");
    assert_eq!(second.city(), Some("São Paulo"));
    assert_eq!(first, second);
    assert_eq!(first.clone(), first);
}

#[test]
fn events_differing_in_any_part_are_not_equal() {
    let limits = ConversionLimits::default();
    let base_body = body(payload());
    let base = validate_conversion(&base_body, CUSTOM_FIELDS, &limits).expect("valid");
    let variants: Vec<(&str, Vec<u8>)> = vec![
        (
            "a standard string",
            changed(|p| p["city"] = json!("Recife")),
        ),
        (
            "a standard string left out",
            changed(|p| p["city"] = Value::Null),
        ),
        ("a tag", changed(|p| p["tags"] = json!(["webinar", "q3"]))),
        ("tags sent empty", changed(|p| p["tags"] = json!([]))),
        ("tags left out", changed(|p| p["tags"] = Value::Null)),
        (
            "the mailing flag",
            changed(|p| p["available_for_mailing"] = json!(false)),
        ),
        (
            "legal bases sent empty",
            changed(|p| p["legal_bases"] = json!([])),
        ),
        (
            "a legal basis",
            changed(|p| p["legal_bases"][0]["status"] = json!("declined")),
        ),
        (
            "a custom field's value",
            changed(|p| p["cf_plan"] = json!("free")),
        ),
        (
            "a custom field's name",
            changed(|p| {
                let plan = p["cf_plan"].take();
                p.as_object_mut().unwrap().remove("cf_plan");
                p["cf_segment"] = plan;
            }),
        ),
        (
            "a dropped attribute's name",
            changed(|p| {
                p.as_object_mut().unwrap().remove("utm_content");
                p["utm_term"] = json!("banner");
            }),
        ),
        (
            "a traffic source that is a cookie",
            changed(|p| p["traffic_source"] = json!("{\"a\":1}")),
        ),
    ];
    for (what, variant) in &variants {
        let other = validate_conversion(variant, CUSTOM_FIELDS, &limits).expect("valid");
        assert_ne!(base, other, "{what}");
        assert_ne!(other, base, "{what}");
    }
}

#[test]
fn events_whose_dropped_attributes_differ_only_past_the_listed_ones_are_not_equal() {
    // The first 100 dropped names are listed; the others are only counted.
    let many = |count: usize| {
        changed(|p| {
            for n in 0..count {
                p[format!("unknown_{n:03}")] = json!(1);
            }
        })
    };
    let limits = ConversionLimits::default();
    let (a, b) = (many(101), many(102));
    let fewer = validate_conversion(&a, CUSTOM_FIELDS, &limits).expect("valid");
    let more = validate_conversion(&b, CUSTOM_FIELDS, &limits).expect("valid");
    assert_eq!(
        fewer.unknown_attributes().len(),
        more.unknown_attributes().len()
    );
    assert_ne!(fewer, more);
}

#[test]
fn an_event_debugs_as_what_it_holds() {
    let limits = ConversionLimits::default();
    let event = body(payload());
    let event = validate_conversion(&event, CUSTOM_FIELDS, &limits).expect("valid");
    let shown = format!("{event:?}");
    for part in [
        "(\"city\", \"São Paulo\")",
        "(\"cf_plan\", \"enterprise\")",
        "\"utm_content\"",
        "available_for_mailing: Some(true)",
        "tags: Some([\"webinar\", \"q2\"])",
        "dropped_count: 1",
    ] {
        assert!(shown.contains(part), "{part} in {shown}");
    }
}

#[test]
fn tags_sent_empty_and_tags_left_out_are_not_equal() {
    // Both have no tags, but one records `"tags": []` and the other nothing.
    let limits = ConversionLimits::default();
    let (empty, absent) = (
        changed(|p| p["tags"] = json!([])),
        changed(|p| p["tags"] = Value::Null),
    );
    let empty = validate_conversion(&empty, CUSTOM_FIELDS, &limits).expect("valid");
    let absent = validate_conversion(&absent, CUSTOM_FIELDS, &limits).expect("valid");
    assert_eq!(empty.tags().count(), absent.tags().count());
    assert_ne!(empty, absent);
}
