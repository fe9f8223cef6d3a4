//! Conversion-event validation: every rule, every error type, every path shape
//! (here); the characters a stored string may hold (`characters`); when two
//! events are equal (`equality`); and
//! hostile bodies at the size limit, answered in bounded space (`hostile`).

mod characters;
mod equality;
mod hostile;

use conversion_gateway::{
    ConversionLimits, DataType, ErrorType, LegalBasisCategory, LegalBasisStatus, LegalBasisType,
    UnknownAttributes, ValidationErrors, ValidationRules, validate_batch, validate_conversion,
};
use serde_json::{Value, json};

const CUSTOM_FIELDS: &[&str] = &["plan", "segment"];

fn limits() -> ConversionLimits {
    ConversionLimits::default()
}

fn strict() -> ConversionLimits {
    let mut limits = ConversionLimits::default();
    limits.unknown_attributes = UnknownAttributes::Reject;
    limits
}

fn valid_payload() -> Value {
    json!({ "conversion_identifier": "newsletter-signup", "email": "ana@example.com" })
}

fn event_with_payload(payload: Value) -> Vec<u8> {
    let event = json!({ "event_type": "CONVERSION", "event_family": "CDP", "payload": payload });
    serde_json::to_vec(&event).expect("serializable")
}

/// A valid event with one payload member set (or replaced).
fn with_field(name: &str, value: Value) -> Vec<u8> {
    let mut payload = valid_payload();
    payload[name] = value;
    event_with_payload(payload)
}

/// A valid event with one payload member removed.
fn without_field(name: &str) -> Vec<u8> {
    let mut payload = valid_payload();
    payload.as_object_mut().expect("object").remove(name);
    event_with_payload(payload)
}

fn errors_with(body: &[u8], limits: &ConversionLimits) -> ValidationErrors {
    match validate_conversion(body, CUSTOM_FIELDS, limits) {
        Ok(event) => panic!("expected errors, got {event:?}"),
        Err(errors) => errors,
    }
}

fn errors(body: &[u8]) -> ValidationErrors {
    errors_with(body, &limits())
}

/// The errors as (error_type, path) pairs.
fn kinds(errors: &ValidationErrors) -> Vec<(&'static str, String)> {
    errors
        .errors()
        .iter()
        .map(|error| (error.error_type().as_str(), error.path().to_string()))
        .collect()
}

/// The only error of an invalid body, as its JSON object.
fn only_error(body: &[u8]) -> Value {
    only_error_with(body, &limits())
}

fn only_error_with(body: &[u8], limits: &ConversionLimits) -> Value {
    let errors = errors_with(body, limits);
    let body = errors.to_body();
    let list = body["errors"].as_array().expect("errors array");
    assert_eq!(list.len(), 1, "expected one error, got {body:#}");
    list[0].clone()
}

fn assert_only(body: &[u8], error_type: &str, path: &str) -> Value {
    let error = only_error(body);
    assert_eq!(error["error_type"], error_type, "{error:#}");
    assert_eq!(error["path"], path, "{error:#}");
    error
}

// --- The spec's example -----------------------------------------------------

#[test]
fn spec_example_of_an_unaccepted_event_type_comes_out_exactly() {
    let body = br#"{"event_type":"OPPORTUNITY","event_family":"CDP",
        "payload":{"conversion_identifier":"signup","email":"ana@example.com"}}"#;
    let errors = errors(body);
    assert_eq!(errors.status(), 400);
    assert_eq!(
        errors.to_body(),
        json!({
            "errors": [{
                "error_type": "INVALID_OPTION",
                "error_message": "event_type must be one of: CONVERSION",
                "validation_rules": { "valid_options": ["CONVERSION"] },
                "path": "$.event_type",
            }]
        })
    );
}

// --- Valid events and what they give back ---------------------------------

#[test]
fn bench_bodies_validate_and_read_back() {
    let custom = [
        "plan",
        "company_size",
        "industry",
        "lead_source_detail",
        "preferred_contact_time",
    ];
    let typical = include_bytes!("../../benches/data/typical.json");
    let event = validate_conversion(typical, &custom, &limits()).expect("typical is valid");
    assert_eq!(event.event_type(), "CONVERSION");
    assert_eq!(event.event_family(), "CDP");
    assert_eq!(event.conversion_identifier(), "newsletter-signup");
    assert_eq!(event.email(), "maria.silva@example.com.br");
    assert_eq!(event.city(), Some("São Paulo"));
    assert_eq!(event.twitter(), None);
    assert_eq!(event.available_for_mailing(), Some(true));
    assert_eq!(
        event.tags().collect::<Vec<_>>(),
        ["newsletter", "lead", "spring-2025"]
    );
    assert!(!event.traffic_source_is_cookie(), "{event:?}");
    assert_eq!(event.unknown_attributes().count(), 0);

    let full = include_bytes!("../../benches/data/full.json");
    let event = validate_conversion(full, &custom, &limits()).expect("full is valid");
    let bases: Vec<_> = event.legal_bases().collect();
    assert_eq!(bases.len(), 2);
    assert_eq!(bases[0].category, LegalBasisCategory::Communications);
    assert_eq!(bases[0].kind, LegalBasisType::Consent);
    assert_eq!(bases[0].status, Some(LegalBasisStatus::Granted));
    assert_eq!(bases[1].kind, LegalBasisType::PreExistentContract);
    assert_eq!(bases[1].status, None);
    assert_eq!(event.custom_fields().count(), 5);
    assert_eq!(event.custom_field("plan"), Some("enterprise-annual"));
    // The normalized payload is the input payload (nothing unknown in it).
    let input: Value = serde_json::from_slice(full).expect("JSON");
    assert_eq!(event.to_payload_json(), input["payload"]);
}

#[test]
fn every_standard_field_has_an_accessor() {
    let names = [
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
        "traffic_source",
        "traffic_medium",
        "traffic_campaign",
        "traffic_value",
    ];
    let mut payload = valid_payload();
    for name in names {
        payload[name] = json!(format!("value of {name}"));
    }
    let body = event_with_payload(payload);
    let event = validate_conversion(&body, &[], &limits()).expect("valid");
    let read = [
        event.name(),
        event.job_title(),
        event.state(),
        event.city(),
        event.country(),
        event.personal_phone(),
        event.mobile_phone(),
        event.twitter(),
        event.facebook(),
        event.linkedin(),
        event.website(),
        event.company_name(),
        event.company_site(),
        event.company_address(),
        event.traffic_source(),
        event.traffic_medium(),
        event.traffic_campaign(),
        event.traffic_value(),
    ];
    for (name, value) in names.iter().zip(read) {
        assert_eq!(value, Some(format!("value of {name}").as_str()));
    }
    let body = with_field(
        "client_tracking_id",
        json!("6ba7b810-9dad-11d1-80b4-00c04fd430c8"),
    );
    let event = validate_conversion(&body, &[], &limits()).expect("valid");
    assert_eq!(
        event.client_tracking_id(),
        Some("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
    );
}

#[test]
fn null_optional_fields_count_as_absent() {
    let mut payload = valid_payload();
    for name in [
        "name",
        "tags",
        "available_for_mailing",
        "legal_bases",
        "cf_plan",
        "client_tracking_id",
    ] {
        payload[name] = Value::Null;
    }
    let body = event_with_payload(payload);
    let event = validate_conversion(&body, CUSTOM_FIELDS, &limits()).expect("valid");
    assert_eq!(event.name(), None);
    assert_eq!(event.tags().count(), 0);
    assert_eq!(event.available_for_mailing(), None);
    assert_eq!(event.legal_bases().count(), 0);
    assert_eq!(event.custom_fields().count(), 0);
    assert_eq!(event.to_payload_json(), valid_payload());
}

#[test]
fn escaped_strings_come_out_unescaped() {
    let body = br#"{"event_type":"CONVERSION","event_family":"CDP","payload":{
        "conversion_identifier":"sign\u0075p","em\u0061il":"ana@example.com",
        "name":"na\u00efve \"quoted\" \ud83d\ude00","tags":["caf\u00e9","a\/b"],
        "cf_pl\u0061n":"pro\nplan"}}"#;
    let event = validate_conversion(body, CUSTOM_FIELDS, &limits()).expect("valid");
    assert_eq!(event.conversion_identifier(), "signup");
    assert_eq!(event.email(), "ana@example.com");
    assert_eq!(event.name(), Some("naïve \"quoted\" \u{1F600}"));
    assert_eq!(event.tags().collect::<Vec<_>>(), ["café", "a/b"]);
    assert_eq!(event.custom_field("plan"), Some("pro\nplan"));
    assert_eq!(
        event.to_payload_json(),
        json!({
            "conversion_identifier": "signup",
            "email": "ana@example.com",
            "name": "naïve \"quoted\" \u{1F600}",
            "tags": ["café", "a/b"],
            "cf_plan": "pro\nplan",
        })
    );
}

// --- Top level ---------------------------------------------------------------

#[test]
fn event_family_must_be_cdp() {
    let body = br#"{"event_type":"CONVERSION","event_family":"cdp","payload":{"conversion_identifier":"a","email":"a@b.co"}}"#;
    let error = assert_only(body, "INVALID_OPTION", "$.event_family");
    assert_eq!(
        error["validation_rules"],
        json!({ "valid_options": ["CDP"] })
    );
}

#[test]
fn missing_top_level_fields_cannot_be_null() {
    assert_eq!(
        kinds(&errors(b"{}")),
        [
            ("CANNOT_BE_NULL", "$.event_type".to_owned()),
            ("CANNOT_BE_NULL", "$.event_family".to_owned()),
            ("CANNOT_BE_NULL", "$.payload".to_owned()),
        ]
    );
    let body = br#"{"event_type":null,"event_family":"CDP","payload":{"conversion_identifier":"a","email":"a@b.co"}}"#;
    let error = assert_only(body, "CANNOT_BE_NULL", "$.event_type");
    let outcome = error.get("validation_rules");
    assert!(outcome.is_none(), "{outcome:?}");
    assert_eq!(
        error["error_message"],
        "event_type is required and cannot be null"
    );
}

#[test]
fn top_level_fields_of_the_wrong_type_are_reported() {
    let body = br#"{"event_type":1,"event_family":"CDP","payload":[]}"#;
    assert_eq!(
        errors(body).to_body()["errors"],
        json!([
            {
                "error_type": "INVALID_DATA_TYPE",
                "error_message": "event_type must be a string",
                "path": "$.event_type",
                "validation_rules": { "data_type": "string" },
            },
            {
                "error_type": "INVALID_DATA_TYPE",
                "error_message": "payload must be an object",
                "path": "$.payload",
                "validation_rules": { "data_type": "object" },
            },
        ])
    );
}

#[test]
fn null_payload_counts_as_missing() {
    let body = br#"{"event_type":"CONVERSION","event_family":"CDP","payload":null}"#;
    assert_only(body, "CANNOT_BE_NULL", "$.payload");
}

// --- Required payload fields --------------------------------------------------

#[test]
fn conversion_identifier_is_required_and_not_blank() {
    assert_only(
        &without_field("conversion_identifier"),
        "CANNOT_BE_NULL",
        "$.payload.conversion_identifier",
    );
    assert_only(
        &with_field("conversion_identifier", Value::Null),
        "CANNOT_BE_NULL",
        "$.payload.conversion_identifier",
    );
    for blank in ["", "   ", "\t\n"] {
        assert_only(
            &with_field("conversion_identifier", json!(blank)),
            "CANNOT_BE_BLANK",
            "$.payload.conversion_identifier",
        );
    }
    let error = assert_only(
        &with_field("conversion_identifier", json!(42)),
        "INVALID_DATA_TYPE",
        "$.payload.conversion_identifier",
    );
    assert_eq!(error["validation_rules"], json!({ "data_type": "string" }));
}

#[test]
fn email_is_required_not_blank_and_plausible() {
    assert_only(&without_field("email"), "CANNOT_BE_NULL", "$.payload.email");
    assert_only(
        &with_field("email", json!(" ")),
        "CANNOT_BE_BLANK",
        "$.payload.email",
    );
    for bad in [
        "ana",
        "ana@",
        "@example.com",
        "ana@example",
        "a b@example.com",
        "a@b@example.com",
        "a@example..com",
    ] {
        let error = assert_only(
            &with_field("email", json!(bad)),
            "INVALID_EMAIL_FORMAT",
            "$.payload.email",
        );
        let outcome = error.get("validation_rules");
        assert!(outcome.is_none(), "{outcome:?}");
    }
    let too_long = format!("{}@example.com", "a".repeat(250));
    assert_only(
        &with_field("email", json!(too_long)),
        "INVALID_EMAIL_FORMAT",
        "$.payload.email",
    );
    for good in ["ana@example.com", "Ana.Maria+news@sub.example.com.br"] {
        assert!(
            validate_conversion(&with_field("email", json!(good)), &[], &limits()).is_ok(),
            "{good}"
        );
    }
}

// --- Optional payload fields --------------------------------------------------

#[test]
fn optional_fields_must_have_their_json_type() {
    let strings = [
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
    for name in strings {
        for wrong in [json!(1), json!(true), json!(["a"]), json!({ "a": 1 })] {
            let error = assert_only(
                &with_field(name, wrong),
                "INVALID_DATA_TYPE",
                &format!("$.payload.{name}"),
            );
            assert_eq!(error["validation_rules"], json!({ "data_type": "string" }));
        }
    }
    let cases = [
        ("tags", json!("a,b"), "array"),
        ("tags", json!({ "a": "b" }), "array"),
        ("available_for_mailing", json!("true"), "boolean"),
        ("available_for_mailing", json!(1), "boolean"),
        (
            "legal_bases",
            json!({ "category": "communications" }),
            "array",
        ),
    ];
    for (name, wrong, data_type) in cases {
        let error = assert_only(
            &with_field(name, wrong),
            "INVALID_DATA_TYPE",
            &format!("$.payload.{name}"),
        );
        assert_eq!(error["validation_rules"], json!({ "data_type": data_type }));
    }
}

#[test]
fn tags_must_be_lowercase_unique_strings() {
    let error = assert_only(
        &with_field("tags", json!(["ok", "Not-Ok"])),
        "VALUES_MUST_BE_LOWERCASE",
        "$.payload.tags[1]",
    );
    assert_eq!(error["error_message"], "tags[1] must be lowercase");
    assert_only(
        &with_field("tags", json!(["ok", "ÉCOLE"])),
        "VALUES_MUST_BE_LOWERCASE",
        "$.payload.tags[1]",
    );
    assert_only(
        &with_field("tags", json!(["a", "b", "a"])),
        "VALUES_MUST_BE_UNIQUE",
        "$.payload.tags[2]",
    );
    // An escape that spells an earlier tag is the same tag.
    let body = br#"{"event_type":"CONVERSION","event_family":"CDP","payload":{"conversion_identifier":"a","email":"a@b.co","tags":["ab","\u0061b"]}}"#;
    assert_only(body, "VALUES_MUST_BE_UNIQUE", "$.payload.tags[1]");
    let error = assert_only(
        &with_field("tags", json!(["a", 1])),
        "INVALID_DATA_TYPE",
        "$.payload.tags[1]",
    );
    assert_eq!(error["validation_rules"], json!({ "data_type": "string" }));
    assert_only(
        &with_field("tags", json!(["a", null])),
        "INVALID_DATA_TYPE",
        "$.payload.tags[1]",
    );
    assert_only(
        &with_field("tags", json!(["a", " "])),
        "CANNOT_BE_BLANK",
        "$.payload.tags[1]",
    );
    let body = with_field("tags", json!([]));
    let event = validate_conversion(&body, &[], &limits()).expect("valid");
    assert_eq!(event.tags().count(), 0);
    assert_eq!(event.to_payload_json()["tags"], json!([]));
}

#[test]
fn tags_are_bounded_in_count_and_length() {
    let mut limits = limits();
    limits.max_tags = 3;
    limits.max_tag_len = 5;
    let error = only_error_with(&with_field("tags", json!(["a", "b", "c", "d"])), &limits);
    assert_eq!(error["error_type"], "TOO_MANY_ITEMS");
    assert_eq!(error["path"], "$.payload.tags");
    assert_eq!(error["validation_rules"], json!({ "max_items": 3 }));
    let error = only_error_with(&with_field("tags", json!(["abcdef"])), &limits);
    assert_eq!(error["error_type"], "VALUE_TOO_LONG");
    assert_eq!(error["path"], "$.payload.tags[0]");
    assert_eq!(error["validation_rules"], json!({ "max_length": 5 }));
    // Characters, not bytes.
    let body = with_field("tags", json!(["ééééé"]));
    let outcome = validate_conversion(&body, &[], &limits);
    assert!(outcome.is_ok(), "{outcome:?}");
    // The count is reported once, however many tags are over it, and the
    // tags past it are not checked one by one.
    let body = with_field("tags", json!(["a", "b", "c", "d", "e", "F", 7, "a"]));
    assert_eq!(
        kinds(&errors_with(&body, &limits)),
        [("TOO_MANY_ITEMS", "$.payload.tags".to_owned())]
    );
}

#[test]
fn a_tag_of_the_wrong_type_still_counts_in_later_tags_places() {
    let mut limits = limits();
    limits.max_tags = 3;
    let body = with_field("tags", json!([1, "A", null, "b", "c"]));
    assert_eq!(
        kinds(&errors_with(&body, &limits)),
        [
            ("INVALID_DATA_TYPE", "$.payload.tags[0]".to_owned()),
            ("VALUES_MUST_BE_LOWERCASE", "$.payload.tags[1]".to_owned()),
            ("INVALID_DATA_TYPE", "$.payload.tags[2]".to_owned()),
            ("TOO_MANY_ITEMS", "$.payload.tags".to_owned()),
        ]
    );
}

#[test]
fn legal_bases_are_checked_member_by_member() {
    let consent_without_status = json!([{ "category": "communications", "type": "consent" }]);
    let error = assert_only(
        &with_field("legal_bases", consent_without_status),
        "CANNOT_BE_NULL",
        "$.payload.legal_bases[0].status",
    );
    assert_eq!(
        error["error_message"],
        "status is required and cannot be null"
    );

    let pre_existent = json!([{ "category": "data_processing", "type": "pre_existent_contract" }]);
    let body = with_field("legal_bases", pre_existent);
    let outcome = validate_conversion(&body, &[], &limits());
    assert!(outcome.is_ok(), "{outcome:?}");

    let bad_category = json!([{ "category": "marketing", "type": "consent", "status": "granted" }]);
    let error = assert_only(
        &with_field("legal_bases", bad_category),
        "INVALID_OPTION",
        "$.payload.legal_bases[0].category",
    );
    assert_eq!(
        error["validation_rules"],
        json!({ "valid_options": ["communications", "data_processing"] })
    );

    let bad_type = json!([
        { "category": "communications", "type": "consent", "status": "granted" },
        { "category": "communications", "type": "contract" },
    ]);
    let error = assert_only(
        &with_field("legal_bases", bad_type),
        "INVALID_OPTION",
        "$.payload.legal_bases[1].type",
    );
    assert_eq!(
        error["validation_rules"]["valid_options"],
        json!([
            "consent",
            "pre_existent_contract",
            "legitimate_interest",
            "judicial_process",
            "vital_interest",
            "public_interest"
        ])
    );

    let bad_status = json!([{ "category": "communications", "type": "consent", "status": "yes" }]);
    let error = assert_only(
        &with_field("legal_bases", bad_status),
        "INVALID_OPTION",
        "$.payload.legal_bases[0].status",
    );
    assert_eq!(
        error["validation_rules"],
        json!({ "valid_options": ["granted", "declined"] })
    );

    let missing = json!([{}]);
    assert_eq!(
        kinds(&errors(&with_field("legal_bases", missing))),
        [
            (
                "CANNOT_BE_NULL",
                "$.payload.legal_bases[0].category".to_owned()
            ),
            ("CANNOT_BE_NULL", "$.payload.legal_bases[0].type".to_owned()),
        ]
    );
    let error = assert_only(
        &with_field("legal_bases", json!(["consent"])),
        "INVALID_DATA_TYPE",
        "$.payload.legal_bases[0]",
    );
    assert_eq!(error["validation_rules"], json!({ "data_type": "object" }));
    assert_only(
        &with_field(
            "legal_bases",
            json!([{ "category": 1, "type": "vital_interest" }]),
        ),
        "INVALID_DATA_TYPE",
        "$.payload.legal_bases[0].category",
    );
}

#[test]
fn every_legal_basis_value_is_accepted() {
    for kind in [
        "consent",
        "pre_existent_contract",
        "legitimate_interest",
        "judicial_process",
        "vital_interest",
        "public_interest",
    ] {
        for status in ["granted", "declined"] {
            let bases = json!([{ "category": "data_processing", "type": kind, "status": status }]);
            let body = with_field("legal_bases", bases.clone());
            let event = validate_conversion(&body, &[], &limits()).expect("valid");
            assert_eq!(
                event.legal_bases().next().map(|b| b.kind.as_str()),
                Some(kind)
            );
            assert_eq!(event.to_payload_json()["legal_bases"], bases);
        }
    }
}

#[test]
fn legal_bases_are_bounded() {
    let mut limits = limits();
    limits.max_legal_bases = 1;
    let basis = json!({ "category": "communications", "type": "consent", "status": "declined" });
    let error = only_error_with(&with_field("legal_bases", json!([basis, basis])), &limits);
    assert_eq!(error["error_type"], "TOO_MANY_ITEMS");
    assert_eq!(error["path"], "$.payload.legal_bases");
    assert_eq!(error["validation_rules"], json!({ "max_items": 1 }));
}

#[test]
fn client_tracking_id_must_be_uuid_shaped() {
    let error = assert_only(
        &with_field("client_tracking_id", json!("not-a-uuid")),
        "INVALID_FORMAT",
        "$.payload.client_tracking_id",
    );
    assert_eq!(error["validation_rules"], json!({ "format": "uuid" }));
    // A form without the cookie sends an empty string: not an error.
    assert!(
        validate_conversion(&with_field("client_tracking_id", json!("")), &[], &limits()).is_ok()
    );
}

// --- traffic_source cookies ----------------------------------------------------

fn traffic(source: &str, medium: &str, campaign: &str, value: &str) -> Vec<u8> {
    let mut payload = valid_payload();
    payload["traffic_source"] = json!(source);
    payload["traffic_medium"] = json!(medium);
    payload["traffic_campaign"] = json!(campaign);
    payload["traffic_value"] = json!(value);
    event_with_payload(payload)
}

const COOKIE: &str = r#"{"first_session":{"value":"https://www.google.com/","extra_params":{}},"current_session":{"value":"(none)","extra_params":{}},"created_at":1718000000000}"#;

#[test]
fn raw_cookie_conflicts_with_every_utm_field() {
    let errors = errors(&traffic(COOKIE, "cpc", "spring", "term"));
    assert_eq!(
        kinds(&errors),
        [
            ("CONFLICTING_FIELD", "$.payload.traffic_medium".to_owned()),
            ("CONFLICTING_FIELD", "$.payload.traffic_campaign".to_owned()),
            ("CONFLICTING_FIELD", "$.payload.traffic_value".to_owned()),
        ]
    );
    assert_eq!(
        errors.errors()[0].to_json()["validation_rules"],
        json!({ "conflicts_with": "traffic_source" })
    );
}

#[test]
fn base64_cookies_conflict_in_every_flavour() {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    for engine in [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD] {
        let encoded = engine.encode(COOKIE);
        assert_only(
            &traffic(&encoded, "", "", "term"),
            "CONFLICTING_FIELD",
            "$.payload.traffic_value",
        );
        let body = traffic(&encoded, "", " ", "");
        let event = validate_conversion(&body, &[], &limits()).expect("valid");
        assert!(event.traffic_source_is_cookie(), "{event:?}");
    }
}

#[test]
fn a_utm_source_is_not_a_cookie() {
    let body = traffic("google", "cpc", "spring", "term");
    let event = validate_conversion(&body, &[], &limits()).expect("valid");
    assert!(!event.traffic_source_is_cookie(), "{event:?}");
    assert_eq!(event.traffic_medium(), Some("cpc"));
}

// --- Custom fields and unknown attributes -------------------------------------

#[test]
fn custom_fields_of_the_account_are_kept() {
    let body = with_field("cf_plan", json!("pro"));
    let event = validate_conversion(&body, CUSTOM_FIELDS, &limits()).expect("valid");
    assert_eq!(event.custom_fields().collect::<Vec<_>>(), [("plan", "pro")]);
    assert_eq!(event.to_payload_json()["cf_plan"], "pro");
    assert_eq!(event.unknown_attributes().count(), 0);
}

#[test]
fn custom_fields_must_be_strings() {
    let error = assert_only(
        &with_field("cf_plan", json!(3)),
        "INVALID_DATA_TYPE",
        "$.payload.cf_plan",
    );
    assert_eq!(error["validation_rules"], json!({ "data_type": "string" }));
}

#[test]
fn other_accounts_custom_fields_are_unknown_attributes() {
    let body = with_field("cf_other", json!("x"));
    let event = validate_conversion(&body, CUSTOM_FIELDS, &limits()).expect("accepted");
    let dropped: Vec<String> = event
        .unknown_attributes()
        .map(|path| path.to_string())
        .collect();
    assert_eq!(dropped, ["$.payload.cf_other"]);
    let payload = event.to_payload_json();
    let outcome = payload.get("cf_other");
    assert!(outcome.is_none(), "{outcome:?}");
    let error = only_error_with(&body, &strict());
    assert_eq!(error["error_type"], "UNKNOWN_FIELD");
    assert_eq!(error["path"], "$.payload.cf_other");
    // Names are compared without the prefix: "cf_plan" in the list is not "plan".
    let body = with_field("cf_plan", json!("x"));
    let event = validate_conversion(&body, &["cf_plan"], &limits()).expect("accepted");
    assert_eq!(event.custom_fields().count(), 0);
}

#[test]
fn unknown_attributes_are_accepted_and_dropped_by_default() {
    let body = br#"{"event_type":"CONVERSION","event_family":"CDP","source":"form",
        "payload":{"conversion_identifier":"a","email":"a@b.co","utm_content":{"x":[1,2]},
        "legal_bases":[{"category":"communications","type":"consent","status":"granted","note":"x"}]}}"#;
    let event = validate_conversion(body, &[], &limits()).expect("accepted");
    let dropped: Vec<String> = event
        .unknown_attributes()
        .map(|path| path.to_string())
        .collect();
    assert_eq!(
        dropped,
        [
            "$.source",
            "$.payload.utm_content",
            "$.payload.legal_bases[0].note"
        ]
    );
    let names: Vec<_> = event
        .unknown_attributes()
        .map(|p| p.last_key().map(str::to_owned))
        .collect();
    assert_eq!(names[1].as_deref(), Some("utm_content"));
    assert_eq!(
        event.to_payload_json(),
        json!({
            "conversion_identifier": "a",
            "email": "a@b.co",
            "legal_bases": [{ "category": "communications", "type": "consent", "status": "granted" }],
        })
    );

    assert_eq!(
        kinds(&errors_with(body, &strict())),
        [
            ("UNKNOWN_FIELD", "$.source".to_owned()),
            ("UNKNOWN_FIELD", "$.payload.utm_content".to_owned()),
            ("UNKNOWN_FIELD", "$.payload.legal_bases[0].note".to_owned()),
        ]
    );
}

#[test]
fn unusual_attribute_names_are_quoted_in_paths_and_not_echoed() {
    let body = with_field("utm content's", json!(1));
    let error = only_error_with(&body, &strict());
    assert_eq!(error["path"], r"$.payload['utm content\'s']");
    assert_eq!(error["error_message"], "this field is not a known field");
    // An empty or capitalised name still gives a lowercase message.
    for name in ["", "UTM"] {
        let error = only_error_with(&with_field(name, json!(null)), &strict());
        assert_eq!(error["error_message"], "this field is not a known field");
    }
}

#[test]
fn unknown_attributes_nested_too_deep_are_refused() {
    let mut limits = limits();
    limits.max_depth = 4;
    // Depth: event 1, payload 2, the attribute's array 3, then 4, then 5.
    let error = only_error_with(&with_field("deep", json!([[[1]]])), &limits);
    assert_eq!(error["error_type"], "TOO_DEEPLY_NESTED");
    assert_eq!(error["path"], "$.payload.deep");
    assert_eq!(error["validation_rules"], json!({ "max_depth": 4 }));
    let body = with_field("deep", json!([[1]]));
    let outcome = validate_conversion(&body, &[], &limits);
    assert!(outcome.is_ok(), "{outcome:?}");
    // Far past serde_json's own recursion limit: still no panic, still refused.
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let body = format!(
        r#"{{"event_type":"CONVERSION","event_family":"CDP","payload":{{"conversion_identifier":"a","email":"a@b.co","deep":{deep}}}}}"#
    );
    let outcome = validate_conversion(body.as_bytes(), &[], &limits);
    assert!(outcome.is_err(), "{outcome:?}");
}

#[test]
fn duplicate_members_are_refused() {
    let body = br#"{"event_type":"CONVERSION","event_family":"CDP","event_type":"CONVERSION",
        "payload":{"conversion_identifier":"a","email":"a@b.co","email":"c@d.co"}}"#;
    assert_eq!(
        kinds(&errors(body)),
        [
            ("DUPLICATE_FIELD", "$.event_type".to_owned()),
            ("DUPLICATE_FIELD", "$.payload.email".to_owned()),
        ]
    );
}

// --- Bounds --------------------------------------------------------------------

#[test]
fn a_member_sent_three_times_is_a_duplicate_twice() {
    let body = br#"{"event_type":"CONVERSION","event_type":"CONVERSION","event_type":"CONVERSION",
        "event_family":"CDP","payload":{"conversion_identifier":"a","email":"a@b.co",
        "cf_plan":"x","email":"c@d.co","cf_plan":"y","email":"e@f.co","cf_plan":"z"}}"#;
    assert_eq!(
        kinds(&errors(body)),
        [
            ("DUPLICATE_FIELD", "$.event_type".to_owned()),
            ("DUPLICATE_FIELD", "$.event_type".to_owned()),
            ("DUPLICATE_FIELD", "$.payload.email".to_owned()),
            ("DUPLICATE_FIELD", "$.payload.cf_plan".to_owned()),
            ("DUPLICATE_FIELD", "$.payload.email".to_owned()),
            ("DUPLICATE_FIELD", "$.payload.cf_plan".to_owned()),
        ]
    );
}

#[test]
fn strings_are_bounded_in_characters() {
    let error = assert_only(
        &with_field("name", json!("x".repeat(1025))),
        "VALUE_TOO_LONG",
        "$.payload.name",
    );
    assert_eq!(error["validation_rules"], json!({ "max_length": 1024 }));
    assert!(
        validate_conversion(&with_field("name", json!("é".repeat(1024))), &[], &limits()).is_ok()
    );
    // traffic_source has its own, larger bound for base64 cookies.
    assert!(
        validate_conversion(
            &with_field("traffic_source", json!("x".repeat(4096))),
            &[],
            &limits()
        )
        .is_ok()
    );
    let error = assert_only(
        &with_field("traffic_source", json!("x".repeat(4097))),
        "VALUE_TOO_LONG",
        "$.payload.traffic_source",
    );
    assert_eq!(error["validation_rules"], json!({ "max_length": 4096 }));
    assert_only(
        &with_field("cf_plan", json!("x".repeat(1025))),
        "VALUE_TOO_LONG",
        "$.payload.cf_plan",
    );
}

#[test]
fn an_oversized_body_is_413_before_any_parsing() {
    let mut limits = limits();
    limits.max_body_bytes = 64;
    let body = vec![b'x'; 65];
    let errors = errors_with(&body, &limits);
    assert_eq!(errors.status(), 413);
    assert_eq!(
        errors.to_body(),
        json!({ "errors": [{
            "error_type": "BODY_TOO_LARGE",
            "error_message": "the body is larger than 64 bytes",
            "path": "$",
            "validation_rules": { "max_bytes": 64 },
        }] })
    );
    let batch = validate_batch(&body, &[], &limits).expect_err("too large");
    assert_eq!(batch.status(), 413);
    assert_eq!(ConversionLimits::default().max_body_bytes, 200 * 1024);
}

// --- Malformed bodies ---------------------------------------------------------

#[test]
fn malformed_json_is_a_single_bad_request() {
    for body in [
        &b""[..],
        b"{",
        b"{\"event_type\":",
        b"{\"a\":1,}",
        b"nope",
        b"{} {}",
        b"\xff\xfe",
    ] {
        let errors = errors(body);
        assert_eq!(errors.status(), 400);
        let list = errors.to_body()["errors"].clone();
        assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
        assert_eq!(list[0]["error_type"], "BAD_REQUEST");
        assert_eq!(list[0]["path"], "$");
        let outcome = list[0].get("validation_rules");
        assert!(outcome.is_none(), "{outcome:?}");
    }
    // Errors found before the syntax error are not reported: only BAD_REQUEST.
    let body = br#"{"event_type":"NOPE","event_family":"CDP","payload":{"email":1}"#;
    assert_eq!(kinds(&errors(body)), [("BAD_REQUEST", "$".to_owned())]);
}

/// The message of the single `BAD_REQUEST` at `$` that a body that is not
/// JSON gets, from `validate_conversion` and `validate_batch` alike.
fn not_json_message(body: &[u8]) -> String {
    let single = errors(body);
    let batch = validate_batch(body, &[], &limits()).expect_err("not JSON");
    assert_eq!(single, batch, "{:?}", String::from_utf8_lossy(body));
    assert_eq!(single.status(), 400);
    assert_eq!(
        kinds(&single),
        [("BAD_REQUEST", "$".to_owned())],
        "{:?}",
        String::from_utf8_lossy(body)
    );
    single.errors()[0].to_string()
}

/// Asserts that `body` is refused as not JSON at `line` and `column`.
fn assert_not_json_at(body: &[u8], line: usize, column: usize) {
    assert_eq!(
        not_json_message(body),
        format!("the body is not valid JSON (line {line}, column {column})"),
        "{:?}",
        String::from_utf8_lossy(body)
    );
}

#[test]
fn a_body_that_is_not_utf8_gives_the_line_and_column_of_its_first_bad_byte() {
    // The column counts bytes from 1, the line counts line feeds from 1: a
    // carriage return is a byte of its line, and each byte of a multi-byte
    // character counts.
    for (body, line, column) in [
        (&b"\xff"[..], 1, 1),
        (b"\xff\n\n", 1, 1),
        (b"{\"a\":\"\xff\"}", 1, 7),
        (b"\n\xff", 2, 1),
        (b"\n\n\n\xff", 4, 1),
        (b"{\n\xff", 2, 1),
        (b"{\n \"a\":\"\xfe\"}", 2, 7),
        (b"{\r\n\"a\":\r\n  \"x\xc0\"}", 3, 5),
        // "é" is two bytes, "€" three: the bad byte is the ninth of its line.
        (
            b"\"\xc3\xa9\xe2\x82\xac\"\n\n  \"\xc3\xa9\xe2\x82\xac\xff\"",
            3,
            9,
        ),
        // A character cut short: the line and column of its first byte.
        (b"[\"ab\xe2\x82", 1, 5),
        (b"{\"a\":1,\n\"b\":\"\xf0\x9f\x98\"}", 2, 6),
    ] {
        assert_not_json_at(body, line, column);
    }
}

#[test]
fn malformed_json_gives_the_line_and_column_where_it_stops() {
    for (body, line, column) in [
        (&b""[..], 1, 1),
        (b"   ", 1, 4),
        (b"{", 1, 2),
        (b"{\"a\":1,}", 1, 8),
        (b"{\n  \"a\": 1,\n}", 3, 1),
        (b"\n\n  nope", 3, 3),
        (b"{}\r\n {}", 2, 2),
        (b"[1,\n 2,\n \"tab\there\"]", 3, 6),
    ] {
        assert_not_json_at(body, line, column);
    }
}

#[test]
fn json_that_is_not_an_object_is_a_bad_request() {
    for body in [
        &b"[]"[..],
        b"null",
        b"\"event\"",
        b"12",
        b"[{\"event_type\":\"CONVERSION\"}]",
    ] {
        let error = only_error(body);
        assert_eq!(error["error_type"], "BAD_REQUEST");
        assert_eq!(error["error_message"], "the body must be a JSON object");
    }
}

#[test]
fn a_null_event_is_answered_like_any_other_non_object() {
    // Unlike a `null` member, which counts as absent, a `null` event is not
    // an object: the same answer as a number, a string, a boolean or an array.
    let expected = json!({ "errors": [{
        "error_type": "BAD_REQUEST",
        "error_message": "the body must be a JSON object",
        "path": "$",
    }] });
    for body in [
        &b"null"[..],
        b" \n null \t",
        b"0",
        b"\"x\"",
        b"false",
        b"[]",
    ] {
        let errors = errors(body);
        assert_eq!(errors.status(), 400);
        assert_eq!(
            errors.to_body(),
            expected,
            "{:?}",
            String::from_utf8_lossy(body)
        );
    }
    // A word that starts like `null` but is not is not JSON.
    assert_eq!(
        not_json_message(b" nul"),
        "the body is not valid JSON (line 1, column 2)"
    );
    assert_eq!(
        not_json_message(b"nulll"),
        "the body is not valid JSON (line 1, column 5)"
    );
}

#[test]
fn a_lone_surrogate_in_a_tag_is_a_bad_request() {
    let body = br#"{"event_type":"CONVERSION","event_family":"CDP","payload":{"conversion_identifier":"a","email":"a@b.co","tags":["\ud800"]}}"#;
    assert_eq!(only_error(body)["error_type"], "BAD_REQUEST");
    let body = br#"{"event_type":"CONVERSION","event_family":"CDP","payload":{"conversion_identifier":"a","email":"a@b.co","name":"\ud800"}}"#;
    assert_eq!(only_error(body)["error_type"], "BAD_REQUEST");
}

// --- All errors, and no values in messages --------------------------------------

#[test]
fn every_error_is_collected_in_document_order() {
    let body = br#"{"event_type":"OPPORTUNITY","event_family":"CDP","payload":{
        "email":"not-an-email","name":7,"tags":["Up","up","up"],
        "client_tracking_id":"nope","available_for_mailing":"yes",
        "legal_bases":[{"category":"communications","type":"consent"}],
        "traffic_source":"e30","traffic_medium":"cpc","cf_plan":false}}"#;
    assert_eq!(
        kinds(&errors(body)),
        [
            ("INVALID_OPTION", "$.event_type".to_owned()),
            ("INVALID_EMAIL_FORMAT", "$.payload.email".to_owned()),
            ("INVALID_DATA_TYPE", "$.payload.name".to_owned()),
            ("VALUES_MUST_BE_LOWERCASE", "$.payload.tags[0]".to_owned()),
            ("VALUES_MUST_BE_UNIQUE", "$.payload.tags[2]".to_owned()),
            ("INVALID_FORMAT", "$.payload.client_tracking_id".to_owned()),
            (
                "INVALID_DATA_TYPE",
                "$.payload.available_for_mailing".to_owned()
            ),
            (
                "CANNOT_BE_NULL",
                "$.payload.legal_bases[0].status".to_owned()
            ),
            ("INVALID_DATA_TYPE", "$.payload.cf_plan".to_owned()),
            (
                "CANNOT_BE_NULL",
                "$.payload.conversion_identifier".to_owned()
            ),
            ("CONFLICTING_FIELD", "$.payload.traffic_medium".to_owned()),
        ]
    );
}

#[test]
fn each_error_gives_the_rule_it_broke_as_a_value() {
    let body = format!(
        r#"{{"event_type":"OPPORTUNITY","event_family":"CDP","payload":{{
        "email":"not-an-email","name":7,"tags":["Up"],"client_tracking_id":"nope",
        "city":"{}","traffic_source":"e30","traffic_medium":"cpc"}}}}"#,
        "x".repeat(1025)
    );
    let errors = errors(body.as_bytes());
    let rules: Vec<_> = errors
        .errors()
        .iter()
        .map(|error| (error.path().to_string(), error.validation_rules()))
        .collect();
    let at = |path: &str, rules| (path.to_owned(), rules);
    assert_eq!(
        rules,
        [
            at(
                "$.event_type",
                Some(ValidationRules::ValidOptions(&["CONVERSION"]))
            ),
            at("$.payload.email", None),
            at(
                "$.payload.name",
                Some(ValidationRules::DataType(DataType::String))
            ),
            at("$.payload.tags[0]", None),
            at(
                "$.payload.client_tracking_id",
                Some(ValidationRules::Format("uuid"))
            ),
            at("$.payload.city", Some(ValidationRules::MaxLength(1024))),
            at("$.payload.conversion_identifier", None),
            at(
                "$.payload.traffic_medium",
                Some(ValidationRules::ConflictsWith("traffic_source"))
            ),
        ]
    );
    // The value is what `validation_rules` sends.
    for error in errors.errors() {
        let sent = error.to_json().get("validation_rules").cloned();
        assert_eq!(
            sent,
            error.validation_rules().map(|rules| rules.to_json()),
            "{error}"
        );
    }
}

#[test]
fn messages_never_quote_values() {
    let secret = "s3cr3t-value";
    let bodies = [
        with_field("email", json!(format!("{secret} at example"))),
        with_field("client_tracking_id", json!(secret)),
        with_field("tags", json!([format!("{secret}-X")])),
        with_field(
            "legal_bases",
            json!([{ "category": secret, "type": "consent", "status": "granted" }]),
        ),
        with_field("name", json!(secret.repeat(200))),
        traffic(COOKIE, secret, "", ""),
    ];
    for body in bodies {
        let rendered = errors(&body).to_body().to_string();
        assert!(!rendered.contains(secret), "{rendered}");
        for error in errors(&body).errors() {
            let message = error.to_string();
            assert!(message.starts_with(|c: char| c.is_lowercase()), "{message}");
        }
    }
}

#[test]
fn every_error_type_has_its_wire_name_and_status() {
    let expected = [
        (ErrorType::BadRequest, "BAD_REQUEST", 400),
        (ErrorType::BodyTooLarge, "BODY_TOO_LARGE", 413),
        (ErrorType::CannotBeNull, "CANNOT_BE_NULL", 400),
        (ErrorType::CannotBeBlank, "CANNOT_BE_BLANK", 400),
        (ErrorType::CannotBeEmpty, "CANNOT_BE_EMPTY", 400),
        (ErrorType::InvalidDataType, "INVALID_DATA_TYPE", 400),
        (ErrorType::InvalidOption, "INVALID_OPTION", 400),
        (ErrorType::InvalidEmailFormat, "INVALID_EMAIL_FORMAT", 400),
        (ErrorType::InvalidFormat, "INVALID_FORMAT", 400),
        (
            ErrorType::ValuesMustBeLowercase,
            "VALUES_MUST_BE_LOWERCASE",
            400,
        ),
        (ErrorType::ValuesMustBeUnique, "VALUES_MUST_BE_UNIQUE", 400),
        (ErrorType::ConflictingField, "CONFLICTING_FIELD", 400),
        (ErrorType::ValueTooLong, "VALUE_TOO_LONG", 400),
        (ErrorType::TooManyItems, "TOO_MANY_ITEMS", 400),
        (ErrorType::TooDeeplyNested, "TOO_DEEPLY_NESTED", 400),
        (ErrorType::UnknownField, "UNKNOWN_FIELD", 400),
        (ErrorType::DuplicateField, "DUPLICATE_FIELD", 400),
        (ErrorType::InvalidCharacters, "INVALID_CHARACTERS", 400),
        (ErrorType::TooManyErrors, "TOO_MANY_ERRORS", 400),
    ];
    for (error_type, name, status) in expected {
        assert_eq!(error_type.as_str(), name);
        assert_eq!(error_type.http_status(), status);
    }
}

// --- Batches -----------------------------------------------------------------------

fn batch_of(events: &[Value]) -> Vec<u8> {
    serde_json::to_vec(events).expect("serializable")
}

fn event_value(payload: Value) -> Value {
    json!({ "event_type": "CONVERSION", "event_family": "CDP", "payload": payload })
}

#[test]
fn a_valid_batch_gives_its_events_in_order() {
    let events: Vec<Value> = (0..4)
        .map(|i| {
            event_value(json!({ "conversion_identifier": format!("c{i}"), "email": "a@b.co" }))
        })
        .collect();
    let body = batch_of(&events);
    let validated = validate_batch(&body, &[], &limits()).expect("valid");
    let ids: Vec<_> = validated
        .iter()
        .map(|e| e.conversion_identifier())
        .collect();
    assert_eq!(ids, ["c0", "c1", "c2", "c3"]);
}

#[test]
fn batch_errors_carry_the_event_index() {
    let good = event_value(valid_payload());
    let bad = event_value(json!({ "conversion_identifier": "x", "email": "nope" }));
    let body = batch_of(&[
        good.clone(),
        json!("not an event"),
        good.clone(),
        bad,
        json!({}),
    ]);
    let errors = validate_batch(&body, &[], &limits()).expect_err("invalid");
    assert_eq!(
        kinds(&errors),
        [
            ("INVALID_DATA_TYPE", "$[1]".to_owned()),
            ("INVALID_EMAIL_FORMAT", "$[3].payload.email".to_owned()),
            ("CANNOT_BE_NULL", "$[4].event_type".to_owned()),
            ("CANNOT_BE_NULL", "$[4].event_family".to_owned()),
            ("CANNOT_BE_NULL", "$[4].payload".to_owned()),
        ]
    );
    assert_eq!(
        errors.errors()[0].to_string(),
        "the event must be an object"
    );
}

#[test]
fn a_null_event_in_a_batch_is_of_the_wrong_type_like_any_other() {
    let good = event_value(valid_payload());
    let body = batch_of(&[
        json!(null),
        good.clone(),
        json!(0),
        json!("x"),
        json!(true),
        json!([]),
        json!(null),
    ]);
    let errors = validate_batch(&body, &[], &limits()).expect_err("invalid");
    let wrong = |index: usize| {
        json!({
            "error_type": "INVALID_DATA_TYPE",
            "error_message": "the event must be an object",
            "path": format!("$[{index}]"),
            "validation_rules": { "data_type": "object" },
        })
    };
    assert_eq!(
        errors.to_body(),
        json!({ "errors": [wrong(0), wrong(2), wrong(3), wrong(4), wrong(5), wrong(6)] })
    );
}

#[test]
fn an_empty_batch_is_refused() {
    let errors = validate_batch(b" [ ] ", &[], &limits()).expect_err("empty");
    assert_eq!(
        errors.to_body(),
        json!({ "errors": [{
            "error_type": "CANNOT_BE_EMPTY",
            "error_message": "the batch must hold at least one event",
            "path": "$",
        }] })
    );
}

#[test]
fn a_batch_is_bounded() {
    let mut limits = limits();
    limits.max_batch_events = 2;
    let event = event_value(valid_payload());
    let body = batch_of(&[event.clone(), event.clone(), event]);
    let errors = validate_batch(&body, &[], &limits).expect_err("too many");
    let list = errors.to_body()["errors"].clone();
    assert_eq!(list[0]["error_type"], "TOO_MANY_ITEMS");
    assert_eq!(list[0]["path"], "$");
    assert_eq!(list[0]["validation_rules"], json!({ "max_items": 2 }));
    assert_eq!(ConversionLimits::default().max_batch_events, 1000);
}

#[test]
fn a_batch_body_must_be_an_array() {
    for body in [&b"{}"[..], b"null", b"[", b"[1,]"] {
        let errors = validate_batch(body, &[], &limits()).expect_err("not an array");
        assert_eq!(kinds(&errors), [("BAD_REQUEST", "$".to_owned())]);
    }
}
