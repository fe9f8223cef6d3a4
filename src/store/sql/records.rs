//! Records put together from rows, once for both SQL stores: each store
//! reads its own column types through [`RecordColumns`], and the functions
//! here build every record from those reads.
//!
//! A column that cannot be turned back into its field (a hash of the wrong
//! length, a channel that is not JSON) means the database was written by
//! something else or damaged; it is reported as a backend failure, never a
//! panic, and never as "not found".

use time::OffsetDateTime;
use uuid::Uuid;

use crate::account::{Account, AccountId};
use crate::records::api_key::{ApiKeyId, ApiKeyRecord};
use crate::records::client::{Client, ClientId, PreviousSecret};
use crate::records::event::EventPayload;
use crate::records::event::{IdempotencyClaim, IntakeChannel, RecordOutcome, RecordedEvent};
use crate::records::grant::{Grant, GrantId};
use crate::records::refresh_policy::RefreshPolicy;
use crate::records::tokens::{
    AccessTokenRecord, CodeRecord, PkceChallenge, RefreshState, RefreshTokenRecord,
};
use crate::secret::SecretHash;
use crate::store::error::StoreError;
use crate::store::sql::malformed;
use crate::store::{CodeLookup, CodeTake, Rotation};

/// A hash read back from a 32-byte binary column.
fn hash_from_column(
    bytes: Vec<u8>,
    action: &'static str,
    column: &'static str,
) -> Result<SecretHash, StoreError> {
    let bytes: [u8; 32] = bytes.try_into().map_err(|_| malformed(action, column))?;
    Ok(SecretHash::from_bytes(bytes))
}

/// An idempotency fingerprint read back from a 32-byte binary column.
fn fingerprint_from_column(bytes: Vec<u8>, action: &'static str) -> Result<[u8; 32], StoreError> {
    bytes
        .try_into()
        .map_err(|_| malformed(action, "fingerprint"))
}

/// The channel of an event as stored: the text of its serde JSON form, so
/// that a channel added later needs no migration.
pub(crate) fn channel_to_text(channel: &IntakeChannel) -> Result<String, StoreError> {
    serde_json::to_string(channel)
        .map_err(|error| StoreError::backend("encode an event channel", error))
}

/// The channel of an event read back from its JSON form.
fn channel_from_json(
    value: serde_json::Value,
    action: &'static str,
) -> Result<IntakeChannel, StoreError> {
    serde_json::from_value(value).map_err(|_| malformed(action, "events.channel"))
}

/// The columns of one row, read as the values records are made of.
///
/// Each store implements it for its own column types (PostgreSQL: native
/// UUID, TIMESTAMPTZ, BYTEA, arrays and JSON; SQLite: uuids as text,
/// instants as integer microseconds, hashes as BLOBs, lists and JSON as
/// text), so that each record below is put together once for both. Every
/// failure is a [`StoreError::Backend`] naming [`RecordColumns::action`].
pub(crate) trait RecordColumns {
    /// What the caller was doing, named in every failure.
    fn action(&self) -> &'static str;
    /// A uuid.
    fn uuid(&self, column: &'static str) -> Result<Uuid, StoreError>;
    /// A uuid or NULL.
    fn optional_uuid(&self, column: &'static str) -> Result<Option<Uuid>, StoreError>;
    /// A list of uuids.
    fn uuids(&self, column: &'static str) -> Result<Vec<Uuid>, StoreError>;
    /// An instant.
    fn time(&self, column: &'static str) -> Result<OffsetDateTime, StoreError>;
    /// An instant or NULL.
    fn optional_time(&self, column: &'static str) -> Result<Option<OffsetDateTime>, StoreError>;
    /// Text.
    fn text(&self, column: &'static str) -> Result<String, StoreError>;
    /// Text or NULL.
    fn optional_text(&self, column: &'static str) -> Result<Option<String>, StoreError>;
    /// A boolean.
    fn flag(&self, column: &'static str) -> Result<bool, StoreError>;
    /// A 64-bit integer (SQLite's INTEGER, PostgreSQL's BIGINT).
    fn integer(&self, column: &'static str) -> Result<i64, StoreError>;
    /// A 64-bit integer or NULL.
    fn optional_integer(&self, column: &'static str) -> Result<Option<i64>, StoreError>;
    /// Bytes.
    fn bytes(&self, column: &'static str) -> Result<Vec<u8>, StoreError>;
    /// Bytes or NULL.
    fn optional_bytes(&self, column: &'static str) -> Result<Option<Vec<u8>>, StoreError>;
    /// A list of strings.
    fn strings(&self, column: &'static str) -> Result<Vec<String>, StoreError>;
    /// A JSON value.
    fn json(&self, column: &'static str) -> Result<serde_json::Value, StoreError>;
    /// An event's payload: its JSON text as stored, not re-serialised, so
    /// that an event reads back with the text it was recorded with.
    fn payload(&self, column: &'static str) -> Result<EventPayload, StoreError>;

    /// A [`SecretHash`] from a 32-byte binary column.
    fn hash(&self, column: &'static str) -> Result<SecretHash, StoreError> {
        hash_from_column(self.bytes(column)?, self.action(), column)
    }
}

/// A grant from its `grants` row.
pub(crate) fn grant_from(c: &impl RecordColumns) -> Result<Grant, StoreError> {
    Ok(Grant {
        id: GrantId(c.uuid("id")?),
        client_id: ClientId::new(c.text("client_id")?),
        account_id: AccountId(c.uuid("account_id")?),
        created_at: c.time("created_at")?,
        revoked_at: c.optional_time("revoked_at")?,
        last_refreshed_at: c.optional_time("last_refreshed_at")?,
    })
}

/// The authorization code hashed to `hash`, from the columns its take
/// returns.
pub(crate) fn code_from(
    c: &impl RecordColumns,
    hash: SecretHash,
) -> Result<CodeRecord, StoreError> {
    Ok(CodeRecord {
        hash,
        grant_id: GrantId(c.uuid("grant_id")?),
        client_id: ClientId::new(c.text("client_id")?),
        account_id: AccountId(c.uuid("account_id")?),
        redirect_uri: c.text("redirect_uri")?,
        pkce: c
            .optional_text("pkce_challenge")?
            .map(|challenge| PkceChallenge { challenge }),
        issued_at: c.time("issued_at")?,
        expires_at: c.time("expires_at")?,
    })
}

/// A code as [`crate::TokenStore::find_code`] reports it, from its row
/// (the columns of [`code_from`] and `taken`).
pub(crate) fn code_lookup(
    c: &impl RecordColumns,
    hash: SecretHash,
) -> Result<CodeLookup, StoreError> {
    Ok(if c.flag("taken")? {
        CodeLookup::Used {
            grant_id: GrantId(c.uuid("grant_id")?),
            client_id: ClientId::new(c.text("client_id")?),
        }
    } else {
        CodeLookup::Unused(code_from(c, hash)?)
    })
}

/// What a code found already taken (its tombstone) tells of it.
pub(crate) fn code_tombstone(c: &impl RecordColumns) -> Result<CodeTake, StoreError> {
    Ok(CodeTake::AlreadyTaken {
        grant_id: GrantId(c.uuid("grant_id")?),
        client_id: ClientId::new(c.text("client_id")?),
    })
}

/// The access token hashed to `hash`, from its row joined with its grant's
/// `revoked`.
pub(crate) fn access_from(
    c: &impl RecordColumns,
    hash: SecretHash,
) -> Result<AccessTokenRecord, StoreError> {
    Ok(AccessTokenRecord {
        hash,
        grant_id: GrantId(c.uuid("grant_id")?),
        client_id: ClientId::new(c.text("client_id")?),
        account_id: AccountId(c.uuid("account_id")?),
        issued_at: c.time("issued_at")?,
        expires_at: c.time("expires_at")?,
        revoked: c.flag("revoked")?,
    })
}

/// The refresh token hashed to `hash`, from its row joined with its grant's
/// `revoked` and its successor's rotation time (`successor_used_at`).
pub(crate) fn refresh_from(
    c: &impl RecordColumns,
    hash: SecretHash,
) -> Result<RefreshTokenRecord, StoreError> {
    Ok(RefreshTokenRecord {
        hash,
        grant_id: GrantId(c.uuid("grant_id")?),
        client_id: ClientId::new(c.text("client_id")?),
        account_id: AccountId(c.uuid("account_id")?),
        issued_at: c.time("issued_at")?,
        expires_at: c.optional_time("expires_at")?,
        predecessor: c
            .optional_bytes("predecessor")?
            .map(|bytes| hash_from_column(bytes, c.action(), "predecessor"))
            .transpose()?,
        state: refresh_state(c, c.optional_time("successor_used_at")?)?,
        revoked: c.flag("revoked")?,
    })
}

/// A refresh token's state, from its `rotated_at` and `successor`, and when
/// that successor was used, as read by the caller.
fn refresh_state(
    c: &impl RecordColumns,
    successor_used_at: Option<OffsetDateTime>,
) -> Result<RefreshState, StoreError> {
    let at = c.optional_time("rotated_at")?;
    let successor = c.optional_bytes("successor")?;
    Ok(match (at, successor) {
        (Some(at), Some(successor)) => RefreshState::Rotated {
            at,
            successor: hash_from_column(successor, c.action(), "successor")?,
            successor_used_at,
        },
        // The table's CHECK keeps both set or both unset.
        (None, None) => RefreshState::Active,
        _ => return Err(malformed(c.action(), "successor")),
    })
}

/// Why the refresh token in this row (its `revoked`, `rotated_at` and
/// `successor`) cannot be rotated, or `None` if it is active.
pub(crate) fn rotation_refused(c: &impl RecordColumns) -> Result<Option<Rotation>, StoreError> {
    if c.flag("revoked")? {
        return Ok(Some(Rotation::Revoked));
    }
    Ok(match refresh_state(c, None)? {
        RefreshState::Rotated { at, successor, .. } => {
            Some(Rotation::AlreadyRotated { at, successor })
        }
        RefreshState::Active => None,
    })
}

/// A client from its `clients` row.
pub(crate) fn client_from(c: &impl RecordColumns) -> Result<Client, StoreError> {
    Ok(Client {
        id: ClientId::new(c.text("id")?),
        name: c.text("name")?,
        secret_hash: c.hash("secret_hash")?,
        redirect_uris: c.strings("redirect_uris")?,
        require_pkce: c.flag("require_pkce")?,
        refresh_policy: c
            .optional_text("refresh_policy")?
            .map(|text| {
                RefreshPolicy::from_stored(&text)
                    .ok_or_else(|| malformed(c.action(), "clients.refresh_policy"))
            })
            .transpose()?,
        active: c.flag("active")?,
        previous_secret: match c.optional_bytes("previous_secret_hash")? {
            Some(bytes) => Some(PreviousSecret {
                hash: hash_from_column(bytes, c.action(), "previous_secret_hash")?,
                valid_until: c
                    .optional_time("previous_secret_valid_until")?
                    .ok_or_else(|| malformed(c.action(), "previous_secret_valid_until"))?,
            }),
            None => None,
        },
    })
}

/// An account from its `accounts` row.
pub(crate) fn account_from(c: &impl RecordColumns) -> Result<Account, StoreError> {
    Ok(Account {
        id: AccountId(c.uuid("id")?),
        name: c.text("name")?,
        email: c.text("email")?,
        password_hash: c.optional_text("password_hash")?,
        custom_fields: c.strings("custom_fields")?,
    })
}

/// An API key from its `api_keys` row.
pub(crate) fn api_key_from(c: &impl RecordColumns) -> Result<ApiKeyRecord, StoreError> {
    Ok(ApiKeyRecord {
        id: ApiKeyId(c.uuid("id")?),
        account_id: AccountId(c.uuid("account_id")?),
        hash: c.hash("hash")?,
        label: c.text("label")?,
        active: c.flag("active")?,
        created_at: c.time("created_at")?,
    })
}

/// An event from its `events` row.
pub(crate) fn event_from(c: &impl RecordColumns) -> Result<RecordedEvent, StoreError> {
    Ok(RecordedEvent {
        event_uuid: c.uuid("event_uuid")?,
        account_id: AccountId(c.uuid("account_id")?),
        received_at: c.time("received_at")?,
        event_type: c.text("event_type")?,
        event_family: c.text("event_family")?,
        conversion_identifier: c.text("conversion_identifier")?,
        email: c.text("email")?,
        payload: c.payload("payload")?,
        channel: channel_from_json(c.json("channel")?, c.action())?,
    })
}

/// The live claim of an idempotency key as a store read it back: what the
/// first request with the key was, and what it was answered.
pub(crate) struct StoredClaim {
    /// The fingerprint of the first request's body.
    fingerprint: [u8; 32],
    /// The uuids of the events it recorded.
    event_uuids: Vec<Uuid>,
    /// The uuid of its batch, if it was one.
    batch_uuid: Option<Uuid>,
}

impl StoredClaim {
    /// A claim from its stored columns; a fingerprint that is not 32 bytes
    /// long is a [`StoreError::Backend`] naming `action`.
    pub(crate) fn new(
        fingerprint: Vec<u8>,
        event_uuids: Vec<Uuid>,
        batch_uuid: Option<Uuid>,
        action: &'static str,
    ) -> Result<Self, StoreError> {
        Ok(Self {
            fingerprint: fingerprint_from_column(fingerprint, action)?,
            event_uuids,
            batch_uuid,
        })
    }

    /// The outcome of `claim` against this live claim of its key: the first
    /// request's identifiers if the fingerprints match, else
    /// [`RecordOutcome::KeyReused`].
    pub(crate) fn outcome_for(self, claim: &IdempotencyClaim) -> RecordOutcome {
        if self.fingerprint == claim.fingerprint {
            RecordOutcome::Replayed {
                event_uuids: self.event_uuids,
                batch_uuid: self.batch_uuid,
            }
        } else {
            RecordOutcome::KeyReused
        }
    }
}

/// The outcome of `claim` against the live claim of its key in this row
/// (its `fingerprint`, `event_uuids` and `batch_uuid`), as
/// [`StoredClaim::outcome_for`].
pub(crate) fn replay_or_reuse(
    c: &impl RecordColumns,
    claim: &IdempotencyClaim,
) -> Result<RecordOutcome, StoreError> {
    let stored = StoredClaim::new(
        c.bytes("fingerprint")?,
        c.uuids("event_uuids")?,
        c.optional_uuid("batch_uuid")?,
        c.action(),
    )?;
    Ok(stored.outcome_for(claim))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_of_the_wrong_length_is_a_backend_error_not_a_panic() {
        let error = hash_from_column(vec![1; 31], "read a token", "hash").unwrap_err();
        assert!(matches!(error, StoreError::Backend { .. }));
        let source = std::error::Error::source(&error).expect("source");
        assert_eq!(source.to_string(), "the stored hash is malformed");
        assert_eq!(
            hash_from_column(vec![7; 32], "read a token", "hash").unwrap(),
            SecretHash::from_bytes([7; 32])
        );
    }

    #[test]
    fn channels_round_trip_through_json() {
        let channel = IntakeChannel::Bearer {
            client_id: crate::records::client::ClientId::new("cgid_x"),
        };
        let stored = serde_json::from_str(&channel_to_text(&channel).unwrap()).unwrap();
        assert_eq!(channel_from_json(stored, "read an event").unwrap(), channel);
        assert!(matches!(
            channel_from_json(
                serde_json::json!({"kind": "carrier_pigeon"}),
                "read an event"
            ),
            Err(StoreError::Backend { .. })
        ));
    }
}
