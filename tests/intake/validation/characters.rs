//! The characters a stored string may hold: every store must be able to keep
//! an accepted event, so U+0000 (which PostgreSQL refuses) and the other C0
//! controls but tab, line feed and carriage return are refused in every stored
//! string, escaped (`INVALID_CHARACTERS`) or raw (`BAD_REQUEST`, not JSON);
//! lone surrogate escapes are not JSON either.

use conversion_gateway::{ValidationErrors, validate_batch, validate_conversion};
use serde_json::{Value, json};

use super::{CUSTOM_FIELDS, errors, errors_with, kinds, limits, strict};

/// Every standard payload field that holds a string.
const STRING_FIELDS: &[&str] = &[
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

/// JSON escapes of refused control characters, as clients may write them.
const REFUSED_ESCAPES: &[&str] = &[
    r"\u0000", r"\u0001", r"\u0007", r"\b", r"\u0008", r"\f", r"\u000b", r"\u000C", r"\u001b",
    r"\u001f", r"\u001F",
];

/// A valid value for `field`, as JSON string contents, with `insert` placed
/// inside it (where the field's own rules stay satisfied).
fn value_with(field: &str, insert: &str) -> String {
    match field {
        "email" => format!("ana{insert}@example.com"),
        "client_tracking_id" => format!("6ba7b810-9dad-11d1-80b4-00c04fd430c{insert}8"),
        _ => format!("v{insert}alue"),
    }
}

/// A valid event whose payload member `name` holds the raw JSON `json`.
fn body_with_member(name: &str, json: &str) -> Vec<u8> {
    let mut members = vec![
        ("conversion_identifier".to_owned(), r#""c""#.to_owned()),
        ("email".to_owned(), r#""a@b.co""#.to_owned()),
    ];
    match members.iter_mut().find(|(member, _)| member == name) {
        Some(member) => member.1 = json.to_owned(),
        None => members.push((name.to_owned(), json.to_owned())),
    }
    let members: Vec<String> = members
        .iter()
        .map(|(name, json)| format!(r#""{name}":{json}"#))
        .collect();
    format!(
        r#"{{"event_type":"CONVERSION","event_family":"CDP","payload":{{{}}}}}"#,
        members.join(",")
    )
    .into_bytes()
}

fn assert_single(body: &[u8], error_type: &str, path: &str) {
    let errors = errors(body);
    assert_eq!(
        kinds(&errors),
        [(error_type, path.to_owned())],
        "body: {}",
        String::from_utf8_lossy(body)
    );
}

fn assert_not_json(body: &[u8]) {
    let errors = errors(body);
    let list = errors.to_body()["errors"].clone();
    assert_eq!(
        kinds(&errors),
        [("BAD_REQUEST", "$".to_owned())],
        "body: {}",
        String::from_utf8_lossy(body)
    );
    let message = list[0]["error_message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("the body is not valid JSON"),
        "{message}"
    );
}

#[test]
fn escaped_controls_are_refused_in_every_standard_string() {
    for field in STRING_FIELDS {
        for escape in REFUSED_ESCAPES {
            let body = body_with_member(field, &format!(r#""{}""#, value_with(field, escape)));
            assert_single(&body, "INVALID_CHARACTERS", &format!("$.payload.{field}"));
        }
    }
}

#[test]
fn the_invalid_characters_error_reads_as_documented() {
    let body = body_with_member("name", r#""a\u0000b""#);
    assert_eq!(
        errors(&body).to_body(),
        json!({ "errors": [{
            "error_type": "INVALID_CHARACTERS",
            "error_message": "name must not contain control characters other than tab, line feed and carriage return",
            "path": "$.payload.name",
        }] })
    );
}

#[test]
fn invalid_characters_come_before_the_other_rules_of_a_field() {
    // Too long, blank, implausible, not a UUID: the characters are reported.
    let long = format!(r#""{}\u0000""#, "x".repeat(2000));
    for (field, json) in [
        ("name", long.as_str()),
        ("conversion_identifier", r#"" \u000b ""#),
        ("email", r#""not an e-mail\u0000""#),
        ("client_tracking_id", r#""nope\u0001""#),
    ] {
        let body = body_with_member(field, json);
        assert_single(&body, "INVALID_CHARACTERS", &format!("$.payload.{field}"));
    }
    // A traffic-source cookie holding one is refused, not taken for a cookie.
    let body = body_with_member("traffic_source", r#""{\"a\":1}\u0000""#);
    assert_single(&body, "INVALID_CHARACTERS", "$.payload.traffic_source");
}

#[test]
fn escaped_tabs_and_line_breaks_are_accepted_everywhere() {
    for escape in [r"\t", r"\n", r"\r", r"\u0009", r"\u000A", r"\u000d"] {
        for field in STRING_FIELDS {
            if matches!(*field, "email" | "client_tracking_id") {
                continue;
            }
            let body = body_with_member(field, &format!(r#""{}""#, value_with(field, escape)));
            let event = validate_conversion(&body, CUSTOM_FIELDS, &limits())
                .unwrap_or_else(|errors| panic!("{field} with {escape}: {}", errors.to_body()));
            let payload = event.to_payload_json();
            let stored = payload[*field].as_str().unwrap_or_default();
            assert!(
                stored.starts_with('v') && stored.ends_with("alue"),
                "{stored:?}"
            );
        }
        let body = body_with_member("tags", &format!(r#"["a{escape}b"]"#));
        let outcome = validate_conversion(&body, CUSTOM_FIELDS, &limits());
        assert!(outcome.is_ok(), "{outcome:?}");
        let body = body_with_member("cf_plan", &format!(r#""a{escape}b""#));
        let outcome = validate_conversion(&body, CUSTOM_FIELDS, &limits());
        assert!(outcome.is_ok(), "{outcome:?}");
    }
    let body = body_with_member("company_address", r#""Rua A, 1\r\nSão Paulo\tSP""#);
    let event = validate_conversion(&body, CUSTOM_FIELDS, &limits()).expect("multi-line address");
    assert_eq!(event.company_address(), Some("Rua A, 1\r\nSão Paulo\tSP"));
}

#[test]
fn other_control_characters_are_stored() {
    // DEL and the C1 controls are not C0 controls: every store keeps them.
    let body = body_with_member("name", r#""a\u007fb\u0085c\u009fd""#);
    let event = validate_conversion(&body, CUSTOM_FIELDS, &limits()).expect("storable");
    assert_eq!(event.name(), Some("a\u{7f}b\u{85}c\u{9f}d"));
}

#[test]
fn escaped_controls_are_refused_in_tags() {
    for escape in REFUSED_ESCAPES {
        let body = body_with_member("tags", &format!(r#"["ok","a{escape}b"]"#));
        assert_single(&body, "INVALID_CHARACTERS", "$.payload.tags[1]");
    }
    // Before the tag's other rules: blank, too long, uppercase, repeated.
    let long = "x".repeat(300);
    for tags in [
        r#"["\u000b"]"#.to_owned(),
        format!(r#"["{long}\u0000"]"#),
        r#"["A\u0000"]"#.to_owned(),
    ] {
        let body = body_with_member("tags", &tags);
        assert_single(&body, "INVALID_CHARACTERS", "$.payload.tags[0]");
    }
    let body = body_with_member("tags", r#"["a\u0000","a\u0000"]"#);
    assert_eq!(
        kinds(&errors(&body)),
        [
            ("INVALID_CHARACTERS", "$.payload.tags[0]".to_owned()),
            ("INVALID_CHARACTERS", "$.payload.tags[1]".to_owned()),
        ]
    );
}

#[test]
fn escaped_controls_are_refused_in_custom_fields() {
    for escape in REFUSED_ESCAPES {
        let body = body_with_member("cf_plan", &format!(r#""gold{escape}""#));
        assert_single(&body, "INVALID_CHARACTERS", "$.payload.cf_plan");
    }
    // The field's name is stored too, as the payload's key: an account whose
    // field is named with a control character cannot receive it.
    let body = body_with_member(r"cf_pl\u0001an", r#""gold""#);
    let error = errors_with_custom(&body, &["pl\u{1}an"]);
    assert_eq!(
        kinds(&error),
        [(
            "INVALID_CHARACTERS",
            r"$.payload['cf_pl\u0001an']".to_owned()
        )]
    );
    // Without such a field in the account, it is an unknown attribute.
    let outcome = validate_conversion(&body, CUSTOM_FIELDS, &limits());
    assert!(outcome.is_ok(), "{outcome:?}");
}

fn errors_with_custom(body: &[u8], custom: &[&str]) -> ValidationErrors {
    match validate_conversion(body, custom, &limits()) {
        Ok(event) => panic!("expected errors, got {event:?}"),
        Err(errors) => errors,
    }
}

#[test]
fn raw_controls_are_not_json_in_any_string() {
    for raw in ["\u{0}", "\u{1}", "\u{1f}", "\t", "\n", "\r"] {
        for body in [
            body_with_member("name", &format!("\"a{raw}b\"")),
            body_with_member("email", &format!("\"a{raw}@b.co\"")),
            body_with_member("tags", &format!("[\"a{raw}b\"]")),
            body_with_member("cf_plan", &format!("\"a{raw}b\"")),
            body_with_member(&format!("x{raw}y"), "1"),
        ] {
            assert_not_json(&body);
        }
    }
}

#[test]
fn lone_surrogate_escapes_are_not_json_in_any_string() {
    for lone in [
        r"\ud800",
        r"\uDBFF",
        r"\udc00",
        r"\uDFFF",
        r"\ud800\u0041",
        r"\udc00\ud800",
    ] {
        for body in [
            body_with_member("name", &format!(r#""a{lone}b""#)),
            body_with_member("conversion_identifier", &format!(r#""{lone}""#)),
            body_with_member("tags", &format!(r#"["a{lone}"]"#)),
            body_with_member("cf_plan", &format!(r#""{lone}""#)),
            body_with_member(&format!("x{lone}"), "1"),
            body_with_member("x", &format!(r#"["{lone}"]"#)),
        ] {
            assert_not_json(&body);
        }
    }
    // A pair is one character, kept as such.
    let body = body_with_member("name", r#""\ud83d\ude00\uD83D\uDE00""#);
    let event = validate_conversion(&body, CUSTOM_FIELDS, &limits()).expect("a pair");
    assert_eq!(event.name(), Some("\u{1F600}\u{1F600}"));
}

#[test]
fn unknown_names_with_controls_are_dropped_and_render_escaped() {
    let body = br#"{"event_type":"CONVERSION","event_family":"CDP","x\u0000\"'y":1,
        "payload":{"conversion_identifier":"c","email":"a@b.co","\u001b[31mred":"x",
        "legal_bases":[{"category":"communications","type":"consent","status":"granted","\b":0}]}}"#;
    let event = validate_conversion(body, CUSTOM_FIELDS, &limits()).expect("dropped, not stored");
    let dropped: Vec<String> = event.unknown_attributes().map(|p| p.to_string()).collect();
    assert_eq!(
        dropped,
        [
            r#"$['x\u0000"\'y']"#,
            r"$.payload['\u001b[31mred']",
            r"$.payload.legal_bases[0]['\b']",
        ]
    );
    for path in &dropped {
        assert!(!path.chars().any(char::is_control), "{path:?}");
    }
    assert_eq!(
        event.to_payload_json(),
        json!({
            "conversion_identifier": "c",
            "email": "a@b.co",
            "legal_bases": [{ "category": "communications", "type": "consent", "status": "granted" }],
        })
    );
    // Refused instead, they are named the same way, in a body that is JSON.
    let errors = errors_with(body, &strict());
    let answer: Value =
        serde_json::from_slice(&serde_json::to_vec(&errors.to_body()).expect("serializable"))
            .expect("the answer is JSON");
    let paths: Vec<&str> = answer["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|error| error["path"].as_str())
        .collect();
    assert_eq!(paths, dropped);
    for error in errors.errors() {
        assert_eq!(error.to_string(), "this field is not a known field");
    }
    // And the same in a batch.
    let batch = [&b"["[..], body, b"]"].concat();
    let events = validate_batch(&batch, CUSTOM_FIELDS, &limits()).expect("dropped");
    assert_eq!(events[0].unknown_attribute_count(), 3);
}

#[test]
fn choices_holding_controls_are_invalid_options() {
    let body = br#"{"event_type":"CONVERSION\u0000","event_family":"CDP","payload":{"conversion_identifier":"c","email":"a@b.co"}}"#;
    assert_eq!(
        kinds(&errors(body)),
        [("INVALID_OPTION", "$.event_type".to_owned())]
    );
}
