//! Webhooks: an application's registration of a URL that receives the
//! account's conversions, the deliveries made to it and their attempts.
//!
//! A [`Webhook`] holds no secret: its signing secret is derived from the
//! server key and the webhook's [`Webhook::secret_salt`] whenever it is
//! needed (see `webhooks/signing.rs`), so a copy of the database alone
//! cannot forge a delivery.

use std::fmt;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::account::AccountId;
use crate::records::client::ClientId;

/// The identifier of a webhook, answered as its `uuid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WebhookId(pub Uuid);

impl fmt::Display for WebhookId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// What a webhook is called for (`event_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WebhookEventType {
    /// `WEBHOOK.CONVERTED`: a contact converted (every recorded conversion).
    Converted,
}

impl WebhookEventType {
    /// The name on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            WebhookEventType::Converted => "WEBHOOK.CONVERTED",
        }
    }

    /// The type named `text`, if supported.
    pub fn parse(text: &str) -> Option<Self> {
        (text == "WEBHOOK.CONVERTED").then_some(WebhookEventType::Converted)
    }
}

/// A relation a delivery may carry beside the contact (`include_relations`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum WebhookRelation {
    /// `COMPANY`: the contact's company (`contact.company`).
    Company,
    /// `CONTACT_FUNNEL`: the contact's funnel stage; the platform has no
    /// funnel yet, so it is accepted and adds nothing.
    ContactFunnel,
}

impl WebhookRelation {
    /// Every relation, in the order they are answered.
    pub const ALL: [WebhookRelation; 2] =
        [WebhookRelation::Company, WebhookRelation::ContactFunnel];

    /// The name on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            WebhookRelation::Company => "COMPANY",
            WebhookRelation::ContactFunnel => "CONTACT_FUNNEL",
        }
    }

    /// The relation named `text`.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|relation| relation.as_str() == text)
    }
}

/// Whether a webhook is called (`status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WebhookStatus {
    /// `active`: deliveries are made.
    Active,
    /// `inactive`: switched off (by the app, an operator, a `410 Gone`, or
    /// five days of failures); deliveries already due wait, new
    /// conversions are not delivered.
    Inactive,
}

impl WebhookStatus {
    /// The name on the wire and in the stores.
    pub const fn as_str(self) -> &'static str {
        match self {
            WebhookStatus::Active => "active",
            WebhookStatus::Inactive => "inactive",
        }
    }

    /// The status named `text`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "active" => Some(WebhookStatus::Active),
            "inactive" => Some(WebhookStatus::Inactive),
            _ => None,
        }
    }
}

/// A registered webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Webhook {
    /// Its identifier (`uuid`).
    pub id: WebhookId,
    /// The account whose conversions it receives.
    pub account_id: AccountId,
    /// The application that registered it; only it sees and changes it.
    pub client_id: ClientId,
    /// What it is called for.
    pub event_type: WebhookEventType,
    /// Where deliveries are POSTed.
    pub url: String,
    /// The conversion identifiers delivered; empty: every conversion.
    pub event_identifiers: Vec<String>,
    /// What deliveries carry beside the contact.
    pub include_relations: Vec<WebhookRelation>,
    /// Whether it is called.
    pub status: WebhookStatus,
    /// When it was registered; conversions received before are not
    /// delivered to it.
    pub created_at: OffsetDateTime,
    /// When it was last changed.
    pub updated_at: OffsetDateTime,
    /// Random bytes its signing secret is derived from, with the server
    /// key. Not a secret by itself.
    pub secret_salt: [u8; 16],
    /// Since when every attempt to it failed, if its last one did: five
    /// days of that switch it off.
    pub failing_since: Option<OffsetDateTime>,
}

impl Webhook {
    /// Whether a conversion named `conversion_identifier` is delivered to
    /// it (`event_identifiers` empty, or naming it).
    pub fn wants(&self, conversion_identifier: &str) -> bool {
        self.event_identifiers.is_empty()
            || self
                .event_identifiers
                .iter()
                .any(|wanted| wanted == conversion_identifier)
    }
}

/// The identifier of a delivery: sent as `webhook-id` (`msg_` and its
/// simple form), the same on every attempt, so receivers drop duplicates.
/// The dispatcher derives it from the webhook and the event
/// ([`DeliveryId::of_event`]), so that a page dispatched again carries the
/// ids it had.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeliveryId(pub Uuid);

impl DeliveryId {
    /// The id of the delivery of the event `event_uuid`, received at
    /// `received_at`, to `webhook`: the same whenever it is computed, and
    /// another for every other webhook or event.
    ///
    /// A version 8 uuid (RFC 9562 section 5.8, "custom"): its first 48
    /// bits are the millisecond the event was received at, as a version 7
    /// uuid's are (section 5.7), so the deliveries of a page go in at the
    /// end of a store's index of ids instead of one page of it each; the
    /// other 74 free bits are SHA-256 of the two ids. A page is dispatched
    /// again when the store forgets its dispatch while the receivers do not
    /// (a database restored from a backup, a failover to a replica that
    /// had not received the last commits): random bits would then send the
    /// same event under a new `webhook-id`, which a receiver could not tell
    /// from a new delivery. The id is no secret (a receiver sees it), so
    /// the hash needs no key.
    pub fn of_event(webhook: WebhookId, event_uuid: Uuid, received_at: OffsetDateTime) -> Self {
        use sha2::{Digest as _, Sha256};
        let millis = u64::try_from(received_at.unix_timestamp_nanos() / 1_000_000).unwrap_or(0);
        let digest = Sha256::new()
            .chain_update(b"webhook-delivery\0")
            .chain_update(webhook.0.as_bytes())
            .chain_update(event_uuid.as_bytes())
            .finalize();
        let mut bytes = [0u8; 16];
        bytes[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
        bytes[6..].copy_from_slice(&digest[..10]);
        // Sets the version and variant bits over the digest's.
        Self(Uuid::new_v8(bytes))
    }

    /// The `webhook-id` header's value.
    pub fn header_value(&self) -> String {
        format!("msg_{}", self.0.simple())
    }
}

/// Where a delivery is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeliveryState {
    /// Waiting for its next attempt (or in one).
    Pending,
    /// A receiver answered 2xx.
    Delivered,
    /// The last retry of the schedule failed, or the receiver answered
    /// `410 Gone`.
    Failed,
}

impl DeliveryState {
    /// The name in the stores.
    pub const fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Failed => "failed",
        }
    }

    /// The state named `text`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "pending" => Some(DeliveryState::Pending),
            "delivered" => Some(DeliveryState::Delivered),
            "failed" => Some(DeliveryState::Failed),
            _ => None,
        }
    }
}

/// One conversion to deliver to one webhook, as the dispatcher records
/// it. What is sent is built from it at each attempt (the payload's
/// `timestamp` is the attempt's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Its identifier (`webhook-id`).
    pub id: DeliveryId,
    /// The webhook it goes to.
    pub webhook_id: WebhookId,
    /// The conversion delivered.
    pub event_uuid: Uuid,
    /// Whose conversion it is (the contact's e-mail, lowercased): the
    /// deliveries of one contact to one webhook are made in order.
    pub contact_key: String,
    /// The delivery body without its `timestamp`, as JSON text.
    pub body: String,
    /// When the dispatcher recorded it.
    pub created_at: OffsetDateTime,
}

/// A delivery handed to a sender by [`crate::WebhookStore::lease_deliveries`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeasedDelivery {
    /// The delivery.
    pub delivery: Delivery,
    /// The webhook's URL when leased.
    pub url: String,
    /// The webhook's secret salt.
    pub secret_salt: [u8; 16],
    /// The webhook's `failing_since` when leased.
    pub failing_since: Option<OffsetDateTime>,
    /// Attempts made before this one.
    pub attempts: u32,
    /// The end of this lease, as the lease set it: the attempt's token,
    /// handed back to [`crate::WebhookStore::finish_attempt`], so that an
    /// attempt that outlived its lease, while another sender holds the
    /// delivery, changes nothing of it.
    pub leased_until: OffsetDateTime,
}

/// What an attempt came to, as kept for `GET /integrations/webhooks/{uuid}`
/// (time, status, error; never a body).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptRecord {
    /// The delivery attempted.
    pub delivery_id: DeliveryId,
    /// The webhook it went to.
    pub webhook_id: WebhookId,
    /// When the attempt started.
    pub at: OffsetDateTime,
    /// The receiver's status code, if it answered.
    pub status: Option<u16>,
    /// Why it failed, if it did (`timeout`, `redirect`, `status 500`, ...).
    pub error: Option<String>,
    /// How long it took, in milliseconds.
    pub duration_ms: u64,
}

/// What becomes of a delivery after an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryNext {
    /// Delivered: never attempted again.
    Delivered,
    /// Attempted again at this time.
    RetryAt(OffsetDateTime),
    /// Given up.
    Failed,
}

/// What an attempt changes on its webhook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WebhookChange {
    /// It answered: `failing_since` is cleared.
    Succeeded,
    /// It failed at this time: `failing_since` is set to it unless already
    /// set.
    Failing(OffsetDateTime),
    /// It is switched off (`410 Gone`).
    SwitchOff,
    /// It failed, and the lease said it had been failing since this
    /// cutoff or before (five days before the attempt): switched off if
    /// its `failing_since` as stored when the attempt is recorded still
    /// says so, else as [`WebhookChange::Failing`] at the attempt's time
    /// ([`WebhookChange::applied`]). The lease's reading may be stale: an
    /// attempt leased beside it may have succeeded since, or the webhook
    /// been switched on again.
    SwitchOffIfFailingSince(OffsetDateTime),
}

impl WebhookChange {
    /// The change a store makes for this one, asked by an attempt made at
    /// `at`, given the webhook's `failing_since` as stored at that moment
    /// (read in the same atomic step as the write):
    /// [`WebhookChange::SwitchOffIfFailingSince`] becomes
    /// [`WebhookChange::SwitchOff`] if `failing_since` is at or before its
    /// cutoff, else [`WebhookChange::Failing`]`(at)`; the others are made
    /// as they are. [`WebhookStore::finish_attempt`](crate::WebhookStore::finish_attempt)
    /// returns it.
    pub fn applied(self, failing_since: Option<OffsetDateTime>, at: OffsetDateTime) -> Self {
        match self {
            Self::SwitchOffIfFailingSince(cutoff) => {
                if failing_since.is_some_and(|since| since <= cutoff) {
                    Self::SwitchOff
                } else {
                    Self::Failing(at)
                }
            }
            change => change,
        }
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    #[test]
    fn a_switch_off_for_failing_too_long_is_made_only_if_the_store_still_says_so() {
        let cutoff = datetime!(2026-12-01 10:00 UTC);
        let at = datetime!(2026-12-06 10:00 UTC);
        let asked = WebhookChange::SwitchOffIfFailingSince(cutoff);
        let second = time::Duration::seconds(1);
        assert_eq!(asked.applied(Some(cutoff), at), WebhookChange::SwitchOff);
        assert_eq!(
            asked.applied(Some(cutoff - second), at),
            WebhookChange::SwitchOff
        );
        assert_eq!(
            asked.applied(Some(cutoff + second), at),
            WebhookChange::Failing(at),
            "failing again since, after a success"
        );
        assert_eq!(
            asked.applied(None, at),
            WebhookChange::Failing(at),
            "a success since cleared it"
        );
        for change in [
            WebhookChange::Succeeded,
            WebhookChange::Failing(cutoff),
            WebhookChange::SwitchOff,
        ] {
            assert_eq!(change.applied(None, at), change);
            assert_eq!(change.applied(Some(cutoff), at), change);
        }
    }

    #[test]
    fn a_deliverys_id_is_drawn_from_its_webhook_and_event_and_ordered_by_the_event() {
        let webhook = WebhookId(Uuid::from_u128(1));
        let event = Uuid::from_u128(2);
        let at = datetime!(2026-12-06 10:00:00.123 UTC);
        let id = DeliveryId::of_event(webhook, event, at);
        assert_eq!(id, DeliveryId::of_event(webhook, event, at), "the same");
        assert_eq!(id.0.get_version_num(), 8);
        assert_eq!(id.0.get_variant(), uuid::Variant::RFC4122);
        assert_eq!(
            &id.0.as_bytes()[..6],
            &1_796_551_200_123_u64.to_be_bytes()[2..],
            "the event's millisecond first"
        );
        let others = [
            DeliveryId::of_event(WebhookId(Uuid::from_u128(3)), event, at),
            DeliveryId::of_event(webhook, Uuid::from_u128(3), at),
        ];
        for other in others {
            assert_ne!(other, id);
            assert_eq!(other.0.as_bytes()[..6], id.0.as_bytes()[..6]);
        }
        let later = DeliveryId::of_event(webhook, event, at + time::Duration::milliseconds(1));
        assert!(id < later, "{id:?} then {later:?}");
        assert_eq!(later.0.as_bytes()[6..], id.0.as_bytes()[6..], "{later:?}");
    }
}
