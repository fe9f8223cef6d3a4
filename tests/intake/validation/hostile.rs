//! Hostile bodies at the size limit, the ones `benches/validation.rs` times:
//! each is answered as its shape deserves, and the answer (the event's list of
//! dropped names, the list of errors) stays bounded however many the body
//! holds. The bench shows the time; these checks need no clock, and
//! `alloc.rs` bounds the memory the same bodies take.

use conversion_gateway_testkit::hostile as bodies;

use conversion_gateway::{
    ConversionEvent, ConversionLimits, ValidationErrors, validate_batch, validate_conversion,
};
use serde_json::{Value, json};

use super::{kinds, limits};

use bodies::{BODY_LIMIT, Entry, Hostile};

/// What a hostile body was answered with.
enum Answer<'a> {
    Events(Vec<ConversionEvent<'a>>),
    Errors(ValidationErrors),
}

fn answer<'a>(shape: &'a Hostile, limits: &ConversionLimits) -> Answer<'a> {
    let custom_fields = shape.custom_field_names();
    let result = match shape.entry {
        Entry::Single => {
            validate_conversion(&shape.body, &custom_fields, limits).map(|event| vec![event])
        }
        Entry::Batch => validate_batch(&shape.body, &custom_fields, limits),
    };
    match result {
        Ok(events) => Answer::Events(events),
        Err(errors) => Answer::Errors(errors),
    }
}

fn accepted<'a>(shape: &'a Hostile) -> Vec<ConversionEvent<'a>> {
    match answer(shape, &limits()) {
        Answer::Events(events) => events,
        Answer::Errors(errors) => panic!("{}: refused with {}", shape.name, errors.to_body()),
    }
}

fn refused(shape: &Hostile) -> ValidationErrors {
    match answer(shape, &limits()) {
        Answer::Errors(errors) => errors,
        Answer::Events(_) => panic!("{}: accepted", shape.name),
    }
}

/// How many times `needle` occurs in the body.
fn occurrences(shape: &Hostile, needle: &str) -> usize {
    shape
        .body
        .windows(needle.len())
        .filter(|window| *window == needle.as_bytes())
        .count()
}

fn dropped_paths(event: &ConversionEvent<'_>) -> Vec<String> {
    event
        .unknown_attributes()
        .map(|path| path.to_string())
        .collect()
}

#[test]
fn every_hostile_body_fills_the_size_limit_and_gets_a_bounded_answer() {
    for shape in bodies::all() {
        assert!(
            shape.body.len() <= BODY_LIMIT && shape.body.len() > BODY_LIMIT * 9 / 10,
            "{}: {} bytes",
            shape.name,
            shape.body.len()
        );
        match answer(&shape, &limits()) {
            Answer::Events(events) => {
                for event in &events {
                    assert!(event.unknown_attributes().len() <= 100, "{}", shape.name);
                }
            }
            Answer::Errors(errors) => {
                assert!(errors.errors().len() <= 101, "{}", shape.name);
                let answer = serde_json::to_vec(&errors.to_body()).expect("serializable");
                assert!(
                    answer.len() < 24 * 1024,
                    "{}: a {} byte answer",
                    shape.name,
                    answer.len()
                );
            }
        }
    }
}

#[test]
fn twenty_five_thousand_unknown_attributes_list_the_first_hundred() {
    let shape = bodies::unknown_attributes();
    let members = occurrences(&shape, "\":0");
    assert!(members > 25_000, "{members} members");
    let event = accepted(&shape).remove(0);
    let dropped: Vec<String> = event
        .unknown_attributes()
        .map(|path| path.last_key().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(dropped.len(), 100);
    assert_eq!(event.unknown_attribute_count(), members);
    // The first hundred, in document order.
    let expected: Vec<String> = (0..100).map(bodies::short_name).collect();
    assert_eq!(dropped, expected);
    assert_eq!(
        event.to_payload_json(),
        json!({ "conversion_identifier": "hostile", "email": "a@b.co" })
    );
}

#[test]
fn escaped_and_cf_prefixed_unknown_names_are_counted_the_same_way() {
    for shape in [bodies::escaped_names(), bodies::unknown_custom_fields()] {
        let members = occurrences(&shape, "\":0");
        let event = accepted(&shape).remove(0);
        assert_eq!(event.unknown_attributes().len(), 100, "{}", shape.name);
        assert_eq!(event.unknown_attribute_count(), members, "{}", shape.name);
        assert_eq!(event.custom_fields().len(), 0, "{}", shape.name);
    }
    let shape = bodies::escaped_names();
    let event = accepted(&shape).remove(0);
    assert_eq!(dropped_paths(&event)[..2], ["$.payload.a", "$.payload.b"]);
}

#[test]
fn a_repeated_unknown_name_is_listed_once() {
    let shape = bodies::repeated_unknown_key();
    assert!(occurrences(&shape, "\"x\":0") > 30_000);
    let event = accepted(&shape).remove(0);
    assert_eq!(dropped_paths(&event), ["$.payload.x"]);
    assert_eq!(event.unknown_attribute_count(), 1);
}

/// A payload with the required fields and then `members`.
fn event_with(members: &[String]) -> Vec<u8> {
    let mut payload = vec![
        r#""conversion_identifier":"c""#.to_owned(),
        r#""email":"a@b.co""#.to_owned(),
    ];
    payload.extend_from_slice(members);
    format!(
        r#"{{"event_type":"CONVERSION","event_family":"CDP","payload":{{{}}}}}"#,
        payload.join(",")
    )
    .into_bytes()
}

#[test]
fn unknown_names_are_listed_once_per_place_in_document_order() {
    // Twenty names, each sent twice: past the first eight the names are
    // hashed, and the list must not change.
    for distinct in [3, 8, 9, 20, 150] {
        let names: Vec<String> = (0..distinct).map(|i| format!("u{i}")).collect();
        let members: Vec<String> = names
            .iter()
            .chain(&names)
            .map(|name| format!(r#""{name}":0"#))
            .collect();
        let body = event_with(&members);
        let event = validate_conversion(&body, &[], &limits()).expect("accepted");
        let expected: Vec<String> = names
            .iter()
            .take(100)
            .map(|name| format!("$.payload.{name}"))
            .collect();
        assert_eq!(dropped_paths(&event), expected, "{distinct} names");
        assert_eq!(event.unknown_attribute_count(), distinct);
    }
    // The same name in two places is two attributes.
    let body = br#"{"event_type":"CONVERSION","event_family":"CDP","x":0,"x":1,
        "payload":{"conversion_identifier":"c","email":"a@b.co","x":0,
        "legal_bases":[{"category":"communications","type":"consent","status":"granted","x":0,"x":0},
                       {"category":"communications","type":"consent","status":"granted","x":0}]}}"#;
    let event = validate_conversion(body, &[], &limits()).expect("accepted");
    assert_eq!(
        dropped_paths(&event),
        [
            "$.x",
            "$.payload.x",
            "$.payload.legal_bases[0].x",
            "$.payload.legal_bases[1].x"
        ]
    );
}

#[test]
fn each_event_of_a_batch_lists_its_own_unknown_names() {
    let names: Vec<String> = (0..20).map(|i| format!(r#""u{i}":0"#)).collect();
    let event = String::from_utf8(event_with(&names)).expect("UTF-8");
    let body = format!("[{event},{event}]");
    let events = validate_batch(body.as_bytes(), &[], &limits()).expect("accepted");
    for event in &events {
        assert_eq!(event.unknown_attribute_count(), 20);
        assert_eq!(event.unknown_attributes().len(), 20);
    }
}

// --- Bounded error lists --------------------------------------------------------

/// An event naming `name` `times` times: `times - 1` duplicate errors.
fn repeated_name(times: usize) -> Vec<u8> {
    let members = vec![r#""name":"x""#.to_owned(); times];
    event_with(&members)
}

#[test]
fn exactly_one_hundred_errors_are_all_listed() {
    let errors = validate_conversion(&repeated_name(101), &[], &limits()).expect_err("refused");
    assert_eq!(errors.found(), 100);
    assert_eq!(errors.errors().len(), 100);
    let listed = kinds(&errors);
    assert!(
        listed
            .iter()
            .all(|error| *error == ("DUPLICATE_FIELD", "$.payload.name".to_owned())),
        "{listed:?}"
    );
}

#[test]
fn a_hundred_and_one_errors_list_a_hundred_and_say_so() {
    let errors = validate_conversion(&repeated_name(102), &[], &limits()).expect_err("refused");
    assert_eq!(errors.found(), 101);
    let body = errors.to_body();
    let list = body["errors"].as_array().expect("a list");
    assert_eq!(list.len(), 101, "{body:#}");
    assert!(
        list[..100]
            .iter()
            .all(|error| error["error_type"] == "DUPLICATE_FIELD"),
        "{body:#}"
    );
    assert_eq!(
        list[100],
        json!({
            "error_type": "TOO_MANY_ERRORS",
            "error_message": "the body has 101 errors; the first 100 are listed",
            "path": "$",
            "validation_rules": { "max_errors": 100 },
        })
    );
    assert_eq!(errors.status(), 400);
}

#[test]
fn eighteen_thousand_repeated_keys_answer_in_kilobytes() {
    let shape = bodies::repeated_known_key();
    let members = occurrences(&shape, "\"name\":");
    assert!(members > 18_000, "{members} members");
    let errors = refused(&shape);
    assert_eq!(errors.found(), members - 1);
    assert_eq!(errors.errors().len(), 101);
    let body = errors.to_body();
    let last = &body["errors"][100];
    assert_eq!(last["error_type"], "TOO_MANY_ERRORS");
    assert_eq!(
        last["error_message"],
        format!(
            "the body has {} errors; the first 100 are listed",
            members - 1
        )
    );
    // 1.9 MB before the list was bounded.
    let size = serde_json::to_vec(&body).expect("serializable").len();
    assert!(size < 16 * 1024, "a {size} byte answer");
    assert_eq!(
        errors.to_string(),
        format!(
            "the conversion event is invalid: name appears more than once (and {} more)",
            members - 2
        )
    );
}

#[test]
fn a_batch_bounds_the_errors_of_all_its_events_together() {
    let errors = refused(&bodies::empty_events());
    // 1,000 events of three missing fields each, and the batch bound.
    assert_eq!(errors.found(), 3001);
    let listed = kinds(&errors);
    assert_eq!(listed.len(), 101);
    assert_eq!(listed[0], ("CANNOT_BE_NULL", "$[0].event_type".to_owned()));
    assert_eq!(
        listed[99],
        ("CANNOT_BE_NULL", "$[33].event_type".to_owned())
    );
    assert_eq!(listed[100], ("TOO_MANY_ERRORS", "$".to_owned()));
}

#[test]
fn max_errors_is_a_limit_of_its_own() {
    let mut limits = limits();
    limits.max_errors = 5;
    let errors = validate_conversion(&repeated_name(50), &[], &limits).expect_err("refused");
    assert_eq!(errors.errors().len(), 6);
    assert_eq!(errors.found(), 49);
    assert_eq!(
        errors.to_body()["errors"][5]["validation_rules"],
        json!({ "max_errors": 5 })
    );
    assert_eq!(ConversionLimits::default().max_errors, 100);
}

// --- Other shapes ---------------------------------------------------------------

#[test]
fn thirteen_thousand_custom_fields_are_all_kept() {
    let shape = bodies::custom_fields();
    assert!(
        shape.custom_fields.len() > 13_000,
        "{}",
        shape.custom_fields.len()
    );
    let event = accepted(&shape).remove(0);
    assert_eq!(event.custom_fields().len(), shape.custom_fields.len());
    let last = shape.custom_fields.last().expect("fields");
    assert_eq!(event.custom_field(last), Some(""));
}

#[test]
fn a_custom_field_repeated_past_the_sixty_fourth_is_a_duplicate() {
    let account: Vec<String> = (0..300).map(|i| format!("f{i}")).collect();
    let account: Vec<&str> = account.iter().map(String::as_str).collect();
    for repeated in ["f0", "f63", "f64", "f127", "f128", "f299"] {
        let members = [
            format!(r#""cf_{repeated}":"a""#),
            r#""cf_f200":"b""#.to_owned(),
            format!(r#""cf_{repeated}":"c""#),
        ];
        let errors = validate_conversion(&event_with(&members), &account, &limits())
            .expect_err("a duplicate");
        assert_eq!(
            kinds(&errors),
            [("DUPLICATE_FIELD", format!("$.payload.cf_{repeated}"))]
        );
    }
}

#[test]
fn custom_fields_are_found_the_same_once_hashed() {
    // Forty fields, the first named twice; enough made-up `cf_` names before
    // the real ones that the searches give way to the index.
    let mut account: Vec<String> = (0..40).map(|i| format!("f{i}")).collect();
    account.push("f0".to_owned());
    let account: Vec<&str> = account.iter().map(String::as_str).collect();
    let mut members: Vec<String> = (0..50).map(|i| format!(r#""cf_x{i}":0"#)).collect();
    members.extend(["f39", "f0", "f7"].map(|name| format!(r#""cf_{name}":"{name}""#)));
    members.push(r#""cf_f0":"again""#.to_owned());
    let errors =
        validate_conversion(&event_with(&members), &account, &limits()).expect_err("a duplicate");
    assert_eq!(
        kinds(&errors),
        [("DUPLICATE_FIELD", "$.payload.cf_f0".to_owned())]
    );
    members.pop();
    let body = event_with(&members);
    let event = validate_conversion(&body, &account, &limits()).expect("accepted");
    let kept: Vec<(&str, &str)> = event.custom_fields().collect();
    assert_eq!(kept, [("f39", "f39"), ("f0", "f0"), ("f7", "f7")]);
    assert_eq!(event.unknown_attribute_count(), 50);
}

#[test]
fn many_tags_are_checked_for_uniqueness_past_the_first_sixteen() {
    let mut limits = limits();
    limits.max_tags = 1000;
    let mut tags: Vec<String> = (0..600).map(|i| format!(r#""t{i}""#)).collect();
    tags.push(r#""t3""#.to_owned());
    tags.push(r#""\u0074400""#.to_owned());
    tags.push(r#""t600""#.to_owned());
    let member = format!(r#""tags":[{}]"#, tags.join(","));
    let errors = validate_conversion(&event_with(&[member]), &[], &limits).expect_err("repeats");
    assert_eq!(
        kinds(&errors),
        [
            ("VALUES_MUST_BE_UNIQUE", "$.payload.tags[600]".to_owned()),
            ("VALUES_MUST_BE_UNIQUE", "$.payload.tags[601]".to_owned()),
        ]
    );
    let shape = bodies::many_tags();
    let events = accepted(&shape);
    assert!(events.len() > 10, "{events:?}");
    for event in &events {
        assert_eq!(event.tags().count(), 50);
    }
}

#[test]
fn the_other_hostile_shapes_are_answered_as_their_rules_say() {
    let errors = refused(&bodies::long_string());
    assert_eq!(
        kinds(&errors),
        [("VALUE_TOO_LONG", "$.payload.name".to_owned())]
    );
    let errors = refused(&bodies::deep_nesting());
    assert_eq!(
        kinds(&errors),
        [("TOO_DEEPLY_NESTED", "$.payload.deep".to_owned())]
    );
    let shape = bodies::long_number();
    let event = accepted(&shape).remove(0);
    assert_eq!(dropped_paths(&event), ["$.payload.n"]);
    let shape = bodies::many_legal_bases();
    let events = accepted(&shape);
    assert!(events.len() > 100, "{events:?}");
    for event in &events {
        assert_eq!(event.legal_bases().count(), 10);
        assert_eq!(event.unknown_attribute_count(), 20);
    }
    let payload: Value = events[0].to_payload_json();
    assert_eq!(payload["legal_bases"].as_array().map(Vec::len), Some(10));
}

#[test]
fn numbers_are_json_exactly_as_serde_json_reads_them() {
    // Without an exponent, up to 308 integer digits are surely finite; past
    // them, and with an exponent, the number is parsed to find out.
    let cases = [
        "9".repeat(308),
        format!("-{}.5", "9".repeat(308)),
        "1".repeat(309),
        "9".repeat(309),
        "9".repeat(400),
        format!("0.{}", "9".repeat(5000)),
        "1e308".to_owned(),
        "1e309".to_owned(),
        "-1.7976931348623157e308".to_owned(),
        "1.8e308".to_owned(),
    ];
    for number in cases {
        let body = event_with(&[format!(r#""n":{number}"#)]);
        let serde_accepts = serde_json::from_slice::<Value>(&body).is_ok();
        let ours = validate_conversion(&body, &[], &limits());
        assert_eq!(
            ours.is_ok(),
            serde_accepts,
            "{}...: {:?}",
            &number[..number.len().min(12)],
            ours.err()
        );
    }
}
