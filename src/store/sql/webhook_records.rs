//! Webhook records put together from rows, and the stored forms of their
//! fields, once for both SQL stores (as [`super::records`] does for the
//! other records).
//!
//! Both stores keep a webhook's lists as JSON text (the relations by their
//! wire names), its status and a delivery's state by their names, and
//! counts as 64-bit integers. A value that does not read back (an unknown
//! status, a salt of the wrong length, a negative count) is a backend
//! failure naming the column, never a panic.

use time::OffsetDateTime;

use crate::account::AccountId;
use crate::records::client::ClientId;
use crate::records::webhook::{
    AttemptRecord, Delivery, DeliveryId, DeliveryNext, DeliveryState, LeasedDelivery, Webhook,
    WebhookChange, WebhookEventType, WebhookId, WebhookRelation, WebhookStatus,
};
use crate::store::error::StoreError;
use crate::store::sql::malformed;
use crate::store::sql::records::RecordColumns;
use crate::store::webhooks::WebhookWrite;

// How many attempts are kept per webhook: the number the contract
// (`WebhookStore::finish_attempt`) names, as the memory store keeps it.
pub(crate) use crate::store::memory::webhooks::KEPT_ATTEMPTS;

/// The columns of a webhook, in the order [`webhook_from`] reads them.
pub(crate) const WEBHOOK_COLUMNS: &str =
    "id, account_id, client_id, event_type, url, event_identifiers,
     include_relations, status, created_at, updated_at, secret_salt, failing_since";

/// A count as a 64-bit integer, for LIMIT (a limit past `i64::MAX` is no
/// limit).
pub(crate) fn count(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// A webhook's conversion identifiers as stored: a JSON array.
pub(crate) fn identifiers_text(identifiers: &[String]) -> Result<String, StoreError> {
    serde_json::to_string(identifiers)
        .map_err(|error| StoreError::backend("encode a webhook's identifiers", error))
}

/// A webhook's relations as stored: a JSON array of their wire names.
pub(crate) fn relations_text(relations: &[WebhookRelation]) -> Result<String, StoreError> {
    let names: Vec<&str> = relations.iter().map(|relation| relation.as_str()).collect();
    serde_json::to_string(&names)
        .map_err(|error| StoreError::backend("encode a webhook's relations", error))
}

/// An integer column that must fit `T` (a count, a status code).
fn bounded<T: TryFrom<i64>>(
    c: &impl RecordColumns,
    column: &'static str,
    value: i64,
) -> Result<T, StoreError> {
    T::try_from(value).map_err(|_| malformed(c.action(), column))
}

/// A JSON array of strings stored as text in `column`.
fn string_list(c: &impl RecordColumns, column: &'static str) -> Result<Vec<String>, StoreError> {
    serde_json::from_str(&c.text(column)?).map_err(|_| malformed(c.action(), column))
}

/// The answer to a write of a webhook whose only possible unique violation
/// is its URL's (`webhooks_url_unique`: the caller ruled out a duplicate
/// id): [`StoreError::Duplicate`] is [`WebhookWrite::DuplicateUrl`].
pub(crate) fn url_write(outcome: Result<(), StoreError>) -> Result<WebhookWrite, StoreError> {
    match outcome {
        Ok(()) => Ok(WebhookWrite::Stored),
        Err(StoreError::Duplicate { .. }) => Ok(WebhookWrite::DuplicateUrl),
        Err(error) => Err(error),
    }
}

/// A webhook from its `webhooks` row.
pub(crate) fn webhook_from(c: &impl RecordColumns) -> Result<Webhook, StoreError> {
    let action = c.action();
    let include_relations = string_list(c, "include_relations")?
        .iter()
        .map(|name| {
            WebhookRelation::parse(name).ok_or_else(|| malformed(action, "include_relations"))
        })
        .collect::<Result<_, _>>()?;
    Ok(Webhook {
        id: WebhookId(c.uuid("id")?),
        account_id: AccountId(c.uuid("account_id")?),
        client_id: ClientId::new(c.text("client_id")?),
        event_type: WebhookEventType::parse(&c.text("event_type")?)
            .ok_or_else(|| malformed(action, "event_type"))?,
        url: c.text("url")?,
        event_identifiers: string_list(c, "event_identifiers")?,
        include_relations,
        status: WebhookStatus::parse(&c.text("status")?)
            .ok_or_else(|| malformed(action, "status"))?,
        created_at: c.time("created_at")?,
        updated_at: c.time("updated_at")?,
        secret_salt: secret_salt(c)?,
        failing_since: c.optional_time("failing_since")?,
    })
}

/// A webhook's `secret_salt`: 16 bytes.
fn secret_salt(c: &impl RecordColumns) -> Result<[u8; 16], StoreError> {
    c.bytes("secret_salt")?
        .try_into()
        .map_err(|_| malformed(c.action(), "secret_salt"))
}

/// A delivery from its `webhook_deliveries` row.
pub(crate) fn delivery_from(c: &impl RecordColumns) -> Result<Delivery, StoreError> {
    Ok(Delivery {
        id: DeliveryId(c.uuid("id")?),
        webhook_id: WebhookId(c.uuid("webhook_id")?),
        event_uuid: c.uuid("event_uuid")?,
        contact_key: c.text("contact_key")?,
        body: c.text("body")?,
        created_at: c.time("created_at")?,
    })
}

/// A delivery leased until `leased_until`, from its row joined with its
/// webhook's `url`, `secret_salt` and `failing_since`.
pub(crate) fn leased_from(
    c: &impl RecordColumns,
    leased_until: OffsetDateTime,
) -> Result<LeasedDelivery, StoreError> {
    Ok(LeasedDelivery {
        delivery: delivery_from(c)?,
        url: c.text("url")?,
        secret_salt: secret_salt(c)?,
        failing_since: c.optional_time("failing_since")?,
        attempts: bounded(c, "attempts", c.integer("attempts")?)?,
        leased_until,
    })
}

/// A delivery's `state` and `attempts`.
pub(crate) fn delivery_state_from(
    c: &impl RecordColumns,
) -> Result<(DeliveryState, u32), StoreError> {
    let state =
        DeliveryState::parse(&c.text("state")?).ok_or_else(|| malformed(c.action(), "state"))?;
    Ok((state, bounded(c, "attempts", c.integer("attempts")?)?))
}

/// An attempt from its `webhook_attempts` row.
pub(crate) fn attempt_from(c: &impl RecordColumns) -> Result<AttemptRecord, StoreError> {
    Ok(AttemptRecord {
        delivery_id: DeliveryId(c.uuid("delivery_id")?),
        webhook_id: WebhookId(c.uuid("webhook_id")?),
        at: c.time("at")?,
        status: c
            .optional_integer("status")?
            .map(|status| bounded(c, "status", status))
            .transpose()?,
        error: c.optional_text("error")?,
        duration_ms: bounded(c, "duration_ms", c.integer("duration_ms")?)?,
    })
}

/// An attempt's duration as stored (a duration past `i64::MAX`
/// milliseconds, some 292 million years, is kept as that).
pub(crate) fn duration_column(attempt: &AttemptRecord) -> i64 {
    i64::try_from(attempt.duration_ms).unwrap_or(i64::MAX)
}

/// What an attempt's [`DeliveryNext`] writes on its delivery: the new state
/// and finish time if it ended, the next attempt's time if it is retried
/// (`None`: the column keeps its value).
pub(crate) struct NextColumns {
    /// `state`, if it changes.
    pub(crate) state: Option<&'static str>,
    /// `finished_at`, if the delivery ended.
    pub(crate) finished_at: Option<OffsetDateTime>,
    /// `next_attempt_at`, if it is retried.
    pub(crate) next_attempt_at: Option<OffsetDateTime>,
}

impl NextColumns {
    /// The columns `next` writes after an attempt made at `at`.
    pub(crate) fn new(next: DeliveryNext, at: OffsetDateTime) -> Self {
        match next {
            DeliveryNext::Delivered => Self::ended(DeliveryState::Delivered, at),
            DeliveryNext::Failed => Self::ended(DeliveryState::Failed, at),
            DeliveryNext::RetryAt(when) => Self {
                state: None,
                finished_at: None,
                next_attempt_at: Some(when),
            },
        }
    }

    fn ended(state: DeliveryState, at: OffsetDateTime) -> Self {
        Self {
            state: Some(state.as_str()),
            finished_at: Some(at),
            next_attempt_at: None,
        }
    }
}

/// What an attempt's [`WebhookChange`] writes on its webhook, with the
/// attempt's time `at` (which a switch-off makes its `updated_at`).
pub(crate) enum ChangeColumns {
    /// `failing_since = NULL`.
    ClearFailing,
    /// `failing_since = COALESCE(failing_since, since)`.
    Failing(OffsetDateTime),
    /// `status = 'inactive', updated_at = at`.
    SwitchOff(OffsetDateTime),
}

impl ChangeColumns {
    /// The columns `change` writes after an attempt made at `at` on a
    /// webhook whose `failing_since` is `failing_since` (read under the
    /// lock the write holds), and the change they make
    /// ([`WebhookChange::applied`]).
    pub(crate) fn new(
        change: WebhookChange,
        failing_since: Option<OffsetDateTime>,
        at: OffsetDateTime,
    ) -> (Self, WebhookChange) {
        let applied = change.applied(failing_since, at);
        let columns = match applied {
            WebhookChange::Succeeded => Self::ClearFailing,
            // `applied` never leaves the conditional switch-off.
            WebhookChange::Failing(since) | WebhookChange::SwitchOffIfFailingSince(since) => {
                Self::Failing(since)
            }
            WebhookChange::SwitchOff => Self::SwitchOff(at),
        };
        (columns, applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relations_are_stored_by_their_wire_names() {
        let text = relations_text(&WebhookRelation::ALL).unwrap();
        assert_eq!(text, r#"["COMPANY","CONTACT_FUNNEL"]"#);
        assert_eq!(identifiers_text(&[]).unwrap(), "[]");
    }

    #[test]
    fn an_attempt_ends_or_reschedules_its_delivery() {
        let at = time::macros::datetime!(2026-03-01 12:00:00 UTC);
        let later = at + time::Duration::minutes(5);
        let delivered = NextColumns::new(DeliveryNext::Delivered, at);
        assert_eq!(delivered.state, Some("delivered"));
        assert_eq!(delivered.finished_at, Some(at));
        let retried = NextColumns::new(DeliveryNext::RetryAt(later), at);
        assert_eq!(retried.state, None);
        assert_eq!(retried.next_attempt_at, Some(later));
        assert!(matches!(
            ChangeColumns::new(WebhookChange::SwitchOff, None, at),
            (ChangeColumns::SwitchOff(when), WebhookChange::SwitchOff) if when == at
        ));
        let earlier = at - time::Duration::days(6);
        let asked = WebhookChange::SwitchOffIfFailingSince(at - time::Duration::days(5));
        assert!(matches!(
            ChangeColumns::new(asked, Some(earlier), at),
            (ChangeColumns::SwitchOff(when), WebhookChange::SwitchOff) if when == at
        ));
        assert!(matches!(
            ChangeColumns::new(asked, None, at),
            (ChangeColumns::Failing(since), WebhookChange::Failing(applied))
                if since == at && applied == at
        ));
    }
}
