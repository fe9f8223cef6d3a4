//! What a delivery carries: the real service's `WEBHOOK.CONVERTED` body,
//! one contact per request (`../shared/COMPAT.md`, "Webhooks").
//!
//! ```json
//! {"timestamp": "<sent>", "event_type": "WEBHOOK.CONVERTED", "entity_type": "CONTACT",
//!  "event_identifier": "<conversion identifier>", "event_timestamp": "<received>",
//!  "contact": {"uuid", "email", "name", ..., "tags", "legal_bases", "cf_...", "company": {"name"}}}
//! ```
//!
//! Empty fields are left out; custom fields keep their `cf_` names. The
//! body is built once, when the delivery is recorded, without its
//! `timestamp`, which each attempt puts first ([`body_at`]).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde_json::value::RawValue;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

use crate::account::AccountId;
use crate::records::event::RecordedEvent;
use crate::records::webhook::WebhookEventType;
use crate::secret::SecretHasher;

/// The contact's fields copied from a conversion's payload, in the order
/// they are sent.
const CONTACT_FIELDS: [&str; 9] = [
    "name",
    "job_title",
    "personal_phone",
    "mobile_phone",
    "city",
    "state",
    "country",
    "website",
    "tags",
];

/// The delivery body of `event`, without `timestamp`, as JSON text: the
/// members of each object in the order of their names (as
/// `serde_json::Map` orders them), the payload's values as their text.
///
/// Written from the payload's members as raw text, never a tree of
/// values: the dispatcher builds one body for every conversion a webhook
/// wants, and parsing the payload into a `Value` and printing it again
/// was a tenth of a server's CPU under an intake flood with one webhook.
pub(crate) fn delivery_body(event: &RecordedEvent, hasher: &SecretHasher) -> String {
    // A payload that is not an object (none is: the validator refuses it)
    // contributes nothing.
    let payload: BTreeMap<MemberName<'_>, &RawValue> =
        serde_json::from_str(event.payload.as_str()).unwrap_or_default();
    let field = |name: &str| payload.get(name).copied().filter(|value| !is_empty(value));
    let uuid = contact_uuid(hasher, event.account_id, &event.email).to_string();
    let email = event.email.to_ascii_lowercase();
    let mut contact: Vec<(&str, Member<'_>)> = vec![
        ("uuid", Member::Text(&uuid)),
        ("email", Member::Text(&email)),
    ];
    for name in CONTACT_FIELDS {
        if let Some(value) = field(name) {
            contact.push((name, Member::Raw(value)));
        }
    }
    if let Some(bases) = field("legal_bases") {
        contact.push(("legal_bases", Member::Raw(bases)));
    }
    for (name, value) in &payload {
        if name.0.starts_with("cf_") && !is_empty(value) {
            contact.push((&name.0, Member::Raw(value)));
        }
    }
    if let Some(company) = field("company_name") {
        contact.push(("company", Member::Company(company)));
    }
    // Every name is there once: the payload's are distinct, and none of
    // them is `uuid`, `email` or `company`.
    contact.sort_unstable_by(|a, b| a.0.cmp(b.0));

    let mut out = String::with_capacity(event.payload.as_str().len() + 256);
    out.push_str("{\"contact\":{");
    for (n, (name, member)) in contact.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        push_string(&mut out, name);
        out.push(':');
        match member {
            Member::Text(text) => push_string(&mut out, text),
            Member::Raw(value) => out.push_str(value.get()),
            Member::Company(name) => {
                out.push_str("{\"name\":");
                out.push_str(name.get());
                out.push('}');
            }
        }
    }
    out.push_str("},\"entity_type\":\"CONTACT\",\"event_identifier\":");
    push_string(&mut out, &event.conversion_identifier);
    out.push_str(",\"event_timestamp\":");
    push_string(&mut out, &rfc3339(event.received_at));
    out.push_str(",\"event_type\":");
    push_string(&mut out, WebhookEventType::Converted.as_str());
    out.push('}');
    out
}

/// A member of the contact object, as [`delivery_body`] writes it.
enum Member<'a> {
    /// A string of ours, escaped as it is written.
    Text(&'a str),
    /// A value of the payload, written as its text.
    Raw(&'a RawValue),
    /// `{"name": value}`.
    Company(&'a RawValue),
}

/// A payload member's name, borrowed from the payload's text unless it has
/// an escape to decode.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct MemberName<'a>(Cow<'a, str>);

impl std::borrow::Borrow<str> for MemberName<'_> {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for MemberName<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Name;
        impl<'de> Visitor<'de> for Name {
            type Value = MemberName<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member's name")
            }
            fn visit_borrowed_str<E: de::Error>(self, name: &'de str) -> Result<Self::Value, E> {
                Ok(MemberName(Cow::Borrowed(name)))
            }
            fn visit_str<E: de::Error>(self, name: &str) -> Result<Self::Value, E> {
                Ok(MemberName(Cow::Owned(name.to_owned())))
            }
        }
        deserializer.deserialize_str(Name)
    }
}

/// Appends `text` as a JSON string.
fn push_string(out: &mut String, text: &str) {
    // Printing a `&str` cannot fail.
    out.push_str(&serde_json::to_string(text).unwrap_or_default());
}

/// The bytes sent at `sent`: `stored` (an object's text, from
/// [`delivery_body`]) with `"timestamp"` first.
pub(crate) fn body_at(stored: &str, sent: OffsetDateTime) -> Vec<u8> {
    let rest = stored.strip_prefix('{').unwrap_or(stored);
    let mut out = Vec::with_capacity(stored.len() + 48);
    out.extend_from_slice(b"{\"timestamp\":\"");
    out.extend_from_slice(rfc3339(sent).as_bytes());
    out.push(b'"');
    if rest.trim_start() != "}" {
        out.push(b',');
    }
    out.extend_from_slice(rest.as_bytes());
    out
}

/// A contact's stable identifier: the keyed hash of its account and
/// e-mail, so the same contact has the same `uuid` in every delivery and
/// no dictionary of e-mails reverses it.
pub(crate) fn contact_uuid(hasher: &SecretHasher, account: AccountId, email: &str) -> Uuid {
    let mut input = Vec::with_capacity(16 + email.len());
    input.extend_from_slice(account.0.as_bytes());
    input.extend_from_slice(email.to_ascii_lowercase().as_bytes());
    let mac = hasher.mac(b"webhook-contact\0", &input);
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&mac[..16]);
    Uuid::new_v8(bytes)
}

fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_default()
}

/// Whether a payload value is left out of the contact: `null`, a string
/// of nothing but white space, `[]` or `{}`.
fn is_empty(value: &RawValue) -> bool {
    let text = value.get().trim();
    let inside = || text[1..text.len() - 1].trim().is_empty();
    match text.as_bytes().first() {
        Some(b'n') => text == "null",
        // Decoded only when it has an escape, which may be white space.
        Some(b'"') if text.contains('\\') => {
            serde_json::from_str::<String>(text).is_ok_and(|text| text.trim().is_empty())
        }
        Some(b'"' | b'[' | b'{') => inside(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Map, Value, json};
    use time::macros::datetime;

    use super::*;
    use crate::records::event::{EventPayload, IntakeChannel};

    /// The body as the dispatcher built it before it wrote raw text: the
    /// payload parsed into a tree of values, the body built as one and
    /// printed. What [`delivery_body`] writes must mean the same.
    fn body_from_values(event: &RecordedEvent, hasher: &SecretHasher) -> String {
        fn is_empty_value(value: &Value) -> bool {
            match value {
                Value::Null => true,
                Value::String(text) => text.trim().is_empty(),
                Value::Array(items) => items.is_empty(),
                Value::Object(members) => members.is_empty(),
                _ => false,
            }
        }
        let payload = event.payload.to_value();
        let payload = payload.as_object();
        let field = |name: &str| payload.and_then(|payload| payload.get(name));
        let mut contact = Map::new();
        let uuid = contact_uuid(hasher, event.account_id, &event.email);
        contact.insert("uuid".into(), uuid.to_string().into());
        contact.insert("email".into(), event.email.to_ascii_lowercase().into());
        for name in CONTACT_FIELDS.into_iter().chain(["legal_bases"]) {
            if let Some(value) = field(name).filter(|value| !is_empty_value(value)) {
                contact.insert(name.into(), value.clone());
            }
        }
        for (name, value) in payload.into_iter().flatten() {
            if name.starts_with("cf_") && !is_empty_value(value) {
                contact.insert(name.clone(), value.clone());
            }
        }
        if let Some(company) = field("company_name").filter(|value| !is_empty_value(value)) {
            contact.insert("company".into(), json!({ "name": company }));
        }
        json!({
            "event_type": "WEBHOOK.CONVERTED",
            "entity_type": "CONTACT",
            "event_identifier": event.conversion_identifier,
            "event_timestamp": rfc3339(event.received_at),
            "contact": contact,
        })
        .to_string()
    }

    fn event_with_text(text: &str) -> RecordedEvent {
        let mut event = event(json!({}));
        event.payload = EventPayload::from_json_text(text.to_owned()).unwrap();
        event
    }

    /// The bench's bodies, as the validator stores them (compact): the
    /// same bytes as printing a tree of values.
    #[test]
    fn a_stored_payloads_body_is_byte_for_byte_the_one_a_tree_of_values_prints() {
        let hasher = SecretHasher::new([1; 32]);
        for text in [
            include_str!("../../benches/data/minimal.json"),
            include_str!("../../benches/data/typical.json"),
            include_str!("../../benches/data/full.json"),
        ] {
            let request: Value = serde_json::from_str(text).unwrap();
            let payload = request["payload"].to_string();
            let event = event_with_text(&payload);
            assert_eq!(
                delivery_body(&event, &hasher),
                body_from_values(&event, &hasher)
            );
        }
    }

    /// A JSON value of any kind, with the strings the contact's rules look
    /// at: blank, white space escaped or not, escapes of every kind.
    fn any_value() -> impl Strategy<Value = Value> {
        let text = prop_oneof![
            Just(String::new()),
            Just("  \t\n".to_owned()),
            Just("\u{a0}\u{2028}".to_owned()),
            Just("a \"quoted\" \\ name / é 😀".to_owned()),
            "[ -~]{0,12}",
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (-1e9..1e9_f64).prop_map(Value::from),
            text.prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map("[a-z_]{1,6}", inner, 0..4)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    /// A payload: the contact's fields, custom fields, and others, each
    /// any value.
    fn any_payload() -> impl Strategy<Value = Map<String, Value>> {
        let name = prop_oneof![
            prop::sample::select(
                CONTACT_FIELDS
                    .into_iter()
                    .chain(["legal_bases", "company_name", "email", "uuid", "company"])
                    .collect::<Vec<_>>()
            )
            .prop_map(str::to_owned),
            "cf_[a-z\"\\\\é]{0,6}",
            "[a-z_]{1,8}",
        ];
        prop::collection::btree_map(name, any_value(), 0..12)
            .prop_map(|members| members.into_iter().collect())
    }

    proptest! {
        /// Whatever the payload and however its text is spaced or escaped,
        /// the body means what the tree of values printed.
        #[test]
        fn the_body_means_what_a_tree_of_values_prints(
            payload in any_payload(),
            pretty in any::<bool>(),
            escaped in any::<bool>(),
        ) {
            let hasher = SecretHasher::new([1; 32]);
            let mut text = if pretty {
                serde_json::to_string_pretty(&payload).unwrap()
            } else {
                serde_json::to_string(&payload).unwrap()
            };
            if escaped {
                // Every non-ASCII character as a \u escape (outside strings
                // there are none), as some clients send them.
                text = text
                    .chars()
                    .map(|c| match c {
                        c if c.is_ascii() => c.to_string(),
                        c => c
                            .encode_utf16(&mut [0; 2])
                            .iter()
                            .map(|unit| format!("\\u{unit:04x}"))
                            .collect(),
                    })
                    .collect();
            }
            let event = event_with_text(&text);
            let written: Value = serde_json::from_str(&delivery_body(&event, &hasher)).unwrap();
            let printed: Value = serde_json::from_str(&body_from_values(&event, &hasher)).unwrap();
            prop_assert_eq!(written, printed);
        }
    }

    #[test]
    fn a_member_name_is_a_string_borrowed_unless_escaped() {
        let plain: MemberName<'_> = serde_json::from_str(r#""cf_plan""#).unwrap();
        assert!(matches!(plain.0, Cow::Borrowed("cf_plan")));
        let escaped: MemberName<'_> = serde_json::from_str(r#""cf_\u00e9""#).unwrap();
        assert!(matches!(escaped.0, Cow::Owned(ref name) if name == "cf_é"));
        let error = serde_json::from_str::<MemberName<'_>>("1").err().unwrap();
        assert!(error.to_string().contains("a member's name"), "{error}");
    }

    #[test]
    fn a_payload_that_is_not_an_object_gives_the_contact_alone() {
        let hasher = SecretHasher::new([1; 32]);
        let event = event_with_text("[1, 2]");
        let body: Value = serde_json::from_str(&delivery_body(&event, &hasher)).unwrap();
        let names: Vec<&String> = body["contact"].as_object().unwrap().keys().collect();
        assert_eq!(names, ["email", "uuid"]);
    }

    fn event(payload: Value) -> RecordedEvent {
        RecordedEvent {
            event_uuid: Uuid::from_u128(1),
            account_id: AccountId(Uuid::from_u128(2)),
            received_at: datetime!(2026-11-26 10:00:00 UTC),
            event_type: "CONVERSION".into(),
            event_family: "CDP".into(),
            conversion_identifier: "signup".into(),
            email: "Lead@Example.com".into(),
            payload: EventPayload::from_value(&payload),
            channel: IntakeChannel::ApiKey,
        }
    }

    #[test]
    fn the_body_is_the_real_services_shape_without_empty_fields() {
        let hasher = SecretHasher::new([1; 32]);
        let stored = delivery_body(
            &event(json!({
                "conversion_identifier": "signup",
                "email": "Lead@Example.com",
                "name": "Ada",
                "job_title": "",
                "city": "Recife",
                "tags": ["a", "b"],
                "legal_bases": [{"category": "communications", "type": "consent", "status": "granted"}],
                "cf_plan": "pro",
                "cf_empty": "",
                "company_name": "ACME",
                "traffic_source": "google",
            })),
            &hasher,
        );
        let sent = body_at(&stored, datetime!(2026-11-26 10:00:05 UTC));
        let body: Value = serde_json::from_slice(&sent).unwrap();
        let uuid = contact_uuid(&hasher, AccountId(Uuid::from_u128(2)), "lead@example.com");
        assert_eq!(
            body,
            json!({
                "timestamp": "2026-11-26T10:00:05Z",
                "event_type": "WEBHOOK.CONVERTED",
                "entity_type": "CONTACT",
                "event_identifier": "signup",
                "event_timestamp": "2026-11-26T10:00:00Z",
                "contact": {
                    "uuid": uuid.to_string(),
                    "email": "lead@example.com",
                    "name": "Ada",
                    "city": "Recife",
                    "tags": ["a", "b"],
                    "legal_bases": [{"category": "communications", "type": "consent", "status": "granted"}],
                    "cf_plan": "pro",
                    "company": {"name": "ACME"},
                }
            })
        );
        assert!(sent.starts_with(b"{\"timestamp\":\"2026-11-26T10:00:05Z\",\""));
    }

    #[test]
    fn the_contact_uuid_is_stable_per_account_and_email() {
        let hasher = SecretHasher::new([1; 32]);
        let account = AccountId(Uuid::from_u128(2));
        let uuid = contact_uuid(&hasher, account, "a@example.com");
        assert_eq!(uuid, contact_uuid(&hasher, account, "A@Example.COM"));
        assert_ne!(uuid, contact_uuid(&hasher, account, "b@example.com"));
        assert_ne!(
            uuid,
            contact_uuid(&hasher, AccountId(Uuid::from_u128(3)), "a@example.com")
        );
        assert_ne!(
            uuid,
            contact_uuid(&SecretHasher::new([2; 32]), account, "a@example.com")
        );
    }

    #[test]
    fn null_blank_and_empty_values_are_left_out_and_others_kept() {
        let hasher = SecretHasher::new([1; 32]);
        let stored = delivery_body(
            &event(json!({
                "conversion_identifier": "signup",
                "email": "lead@example.com",
                "name": null,
                "city": "  ",
                "tags": [],
                "legal_bases": [],
                "cf_none": null,
                "cf_list": [],
                "cf_object": {},
                "cf_zero": 0,
                "cf_no": false,
                "company_name": {},
            })),
            &hasher,
        );
        let body: Value = serde_json::from_str(&stored).unwrap();
        let contact = body["contact"].as_object().unwrap();
        let mut names: Vec<&str> = contact.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["cf_no", "cf_zero", "email", "uuid"]);
        assert_eq!(
            (&contact["cf_zero"], &contact["cf_no"]),
            (&json!(0), &json!(false))
        );
    }

    #[test]
    fn an_empty_object_gets_only_its_timestamp() {
        let sent = body_at("{}", datetime!(2026-01-01 0:00 UTC));
        assert_eq!(sent, b"{\"timestamp\":\"2026-01-01T00:00:00Z\"}");
    }
}
