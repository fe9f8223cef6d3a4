//! Recorded conversion events and the submissions that record them.

use std::fmt;
use std::sync::Arc;

use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::account::AccountId;
use crate::records::api_key::ApiKeyId;
use crate::records::client::ClientId;

/// How an event reached the service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum IntakeChannel {
    /// `POST /platform/conversions?api_key=...`.
    ApiKey,
    /// `POST /platform/events` (or the batch route) with a bearer token of
    /// this application.
    Bearer {
        /// The application whose token was used.
        client_id: ClientId,
    },
}

/// A validated conversion event, as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedEvent {
    /// The identifier answered to the client as `event_uuid`.
    pub event_uuid: Uuid,
    /// The account the event belongs to.
    pub account_id: AccountId,
    /// When the service accepted it.
    #[serde(with = "time::serde::rfc3339")]
    pub received_at: OffsetDateTime,
    /// `CONVERSION`.
    pub event_type: String,
    /// `CDP`.
    pub event_family: String,
    /// The name of the conversion (`payload.conversion_identifier`).
    pub conversion_identifier: String,
    /// The contact's e-mail (`payload.email`).
    pub email: String,
    /// The validated payload: standard fields and the account's custom
    /// fields; unknown attributes are not kept.
    pub payload: EventPayload,
    /// How the event arrived.
    pub channel: IntakeChannel,
}

/// The payload of a recorded event: a JSON object, kept as its text.
///
/// The validator writes it straight from the request body, and the stores
/// write that text as it is (the SQL stores also read it back as it is);
/// no tree of [`serde_json::Value`]s is built, copied or freed on the way,
/// which was a fifth of the time a conversion spent in the service besides
/// the network. Cloning shares the text.
///
/// Two payloads are equal when they hold the same JSON object, whatever the
/// order of its members or the spacing: payloads PostgreSQL stored as
/// `jsonb` (before its migration 7; it now keeps them as text) come back
/// with their members reordered.
#[derive(Clone)]
pub struct EventPayload(Arc<str>);

impl EventPayload {
    /// The payload holding `value`'s JSON text (compact, members in the
    /// map's order).
    pub fn from_value(value: &serde_json::Value) -> Self {
        Self(Arc::from(value.to_string()))
    }

    /// The payload whose JSON text is `raw`.
    pub(crate) fn from_raw(raw: Box<RawValue>) -> Self {
        Self(Arc::from(Box::<str>::from(raw)))
    }

    /// The payload read back from a store: `text` must be JSON.
    ///
    /// # Errors
    /// The text is not JSON.
    pub fn from_json_text(text: String) -> Result<Self, serde_json::Error> {
        RawValue::from_string(text).map(Self::from_raw)
    }

    /// The payload whose JSON text is `text`, which the caller wrote as
    /// JSON (the validator, from a valid event): not parsed again.
    pub(crate) fn from_written_json(text: String) -> Self {
        Self(Arc::from(text))
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The payload as a [`serde_json::Value`], to read its members.
    pub fn to_value(&self) -> serde_json::Value {
        // The text is JSON by construction.
        serde_json::from_str(self.as_str()).unwrap_or_default()
    }
}

impl From<serde_json::Value> for EventPayload {
    fn from(value: serde_json::Value) -> Self {
        Self::from_value(&value)
    }
}

impl PartialEq for EventPayload {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str() || self.to_value() == other.to_value()
    }
}

impl Eq for EventPayload {}

impl fmt::Debug for EventPayload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for EventPayload {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // As raw JSON, which only `serde_json`'s serializer writes as it
        // is; checked again here, off the intake path (the feed, webhooks).
        let raw: &RawValue = serde_json::from_str(self.as_str()).map_err(S::Error::custom)?;
        raw.serialize(serializer)
    }
}

/// Through a [`serde_json::Value`], so that any deserializer will do
/// (`serde_json::from_value` included, which a raw JSON text cannot be
/// read from): reading back is not on the intake path.
impl<'de> Deserialize<'de> for EventPayload {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde_json::Value::deserialize(deserializer).map(Self::from)
    }
}

/// The credential whose `Idempotency-Key`s a claim belongs to.
///
/// Keys are claimed per credential, not per account: the API key of a
/// website form is public (it sits in the page), so a key space shared with
/// the account's applications would let anyone who reads the page claim an
/// application's keys in advance and make its events fail.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IdempotencyScope {
    /// One API key, on `POST /platform/conversions`.
    ApiKey(ApiKeyId),
    /// One application, by any of its bearer tokens, on the event routes.
    Client(ClientId),
}

impl IdempotencyScope {
    /// The scope as stores keep it: `api_key:` and the key's id, or
    /// `client:` and the client id. Never empty, and never equal for two
    /// different scopes.
    pub fn to_stored(&self) -> String {
        match self {
            IdempotencyScope::ApiKey(id) => format!("api_key:{}", id.0.hyphenated()),
            IdempotencyScope::Client(id) => format!("client:{}", id.as_str()),
        }
    }
}

/// A retried request's key, claimed together with the events it records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdempotencyClaim {
    /// The account the key belongs to: keys of different accounts never meet.
    pub account_id: AccountId,
    /// The credential the key belongs to: keys of different credentials of
    /// one account never meet either.
    pub scope: IdempotencyScope,
    /// The `Idempotency-Key` header's value.
    pub key: String,
    /// A digest of what the request asked for (route and body), to tell a
    /// true retry from a different request reusing the key.
    pub fingerprint: [u8; 32],
    /// When the claim was made.
    pub created_at: OffsetDateTime,
    /// When the claim may be forgotten: a later request with the same key is
    /// then treated as new.
    pub expires_at: OffsetDateTime,
}

/// Events to record together, all or nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSubmission {
    /// The events, in request order.
    pub events: Vec<RecordedEvent>,
    /// The batch identifier, for `POST /platform/events/batch`.
    pub batch_uuid: Option<Uuid>,
    /// The idempotency key to claim with them, if the request carried one.
    pub idempotency: Option<IdempotencyClaim>,
}

/// What recording a submission did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordOutcome {
    /// The events were recorded (and the key, if any, claimed).
    Recorded,
    /// The key was already claimed by a request with the same fingerprint:
    /// nothing was recorded, and these are the first request's identifiers.
    Replayed {
        /// The `event_uuid`s recorded by the first request, in its order.
        event_uuids: Vec<Uuid>,
        /// The first request's batch identifier, if it was a batch.
        batch_uuid: Option<Uuid>,
    },
    /// The key was already claimed by a request with another fingerprint:
    /// nothing was recorded.
    KeyReused,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_is_equal_whatever_its_member_order_and_survives_any_serde_round_trip() {
        let sorted = EventPayload::from(serde_json::json!({"a": 1, "b": [true]}));
        assert_eq!(sorted.as_str(), r#"{"a":1,"b":[true]}"#);
        let reordered = EventPayload::from_json_text(r#"{"b": [true], "a": 1}"#.into()).unwrap();
        assert_eq!(sorted, reordered);
        assert_ne!(
            sorted,
            EventPayload::from(serde_json::json!({"a": 2, "b": [true]}))
        );
        assert!(EventPayload::from_json_text("{not json".into()).is_err());

        let as_value = serde_json::to_value(&sorted).unwrap();
        assert_eq!(as_value, serde_json::json!({"a": 1, "b": [true]}));
        let from_value: EventPayload = serde_json::from_value(as_value).unwrap();
        let from_text: EventPayload =
            serde_json::from_str(&serde_json::to_string(&sorted).unwrap()).unwrap();
        assert_eq!(from_value.as_str(), sorted.as_str());
        assert_eq!(from_text.as_str(), sorted.as_str());
        assert_eq!(format!("{sorted:?}"), sorted.as_str());
    }
}
