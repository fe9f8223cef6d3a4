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

use serde_json::{Map, Value};
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

/// The delivery body of `event`, without `timestamp`, as JSON text.
pub(crate) fn delivery_body(event: &RecordedEvent, hasher: &SecretHasher) -> String {
    let payload = event.payload.to_value();
    let payload = payload.as_object();
    let field = |name: &str| payload.and_then(|payload| payload.get(name));
    let mut contact = Map::new();
    contact.insert(
        "uuid".into(),
        contact_uuid(hasher, event.account_id, &event.email)
            .to_string()
            .into(),
    );
    contact.insert("email".into(), event.email.to_ascii_lowercase().into());
    for name in CONTACT_FIELDS {
        if let Some(value) = field(name).filter(|value| !is_empty(value)) {
            contact.insert(name.into(), value.clone());
        }
    }
    if let Some(bases) = field("legal_bases").filter(|value| !is_empty(value)) {
        contact.insert("legal_bases".into(), bases.clone());
    }
    if let Some(payload) = payload {
        for (name, value) in payload {
            if name.starts_with("cf_") && !is_empty(value) {
                contact.insert(name.clone(), value.clone());
            }
        }
    }
    if let Some(company) = field("company_name").filter(|value| !is_empty(value)) {
        let mut object = Map::new();
        object.insert("name".into(), company.clone());
        contact.insert("company".into(), Value::Object(object));
    }
    let mut body = Map::new();
    body.insert(
        "event_type".into(),
        WebhookEventType::Converted.as_str().into(),
    );
    body.insert("entity_type".into(), "CONTACT".into());
    body.insert(
        "event_identifier".into(),
        event.conversion_identifier.clone().into(),
    );
    body.insert("event_timestamp".into(), rfc3339(event.received_at).into());
    body.insert("contact".into(), Value::Object(contact));
    Value::Object(body).to_string()
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

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(text) => text.trim().is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(members) => members.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use time::macros::datetime;

    use super::*;
    use crate::records::event::{EventPayload, IntakeChannel};

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
