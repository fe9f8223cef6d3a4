//! The storage contract: the traits a host implements (or takes from this
//! crate) to keep clients, accounts, API keys, grants, tokens and events.
//!
//! Every trait takes `&self`, is `Send + Sync`, and is used as `Arc<dyn _>`.
//! `Ok(None)` always means "no such record"; `Err` always means the backend
//! could not answer. The operations marked *atomic* must hold across
//! concurrent callers, across connections and, for shared databases, across
//! processes: the conformance suite (feature `test-util`) checks them.
//!
//! # The area
//!
//! - this file: the five traits ([`TokenStore`], [`ClientRegistry`],
//!   [`AccountStore`], [`ApiKeyStore`], [`EventSink`]) and the outcomes of
//!   their atomic operations; `error.rs`: [`crate::StoreError`], which
//!   knows nothing of HTTP (the endpoints map it); `feed.rs`: the
//!   [`EventFeed`](crate::EventFeed) consumers follow; `webhooks.rs`:
//!   [`WebhookStore`](crate::WebhookStore), webhooks and their deliveries;
//! - `memory.rs`: every trait in memory, for tests and stateless hosts;
//! - `sqlite/` (feature `sqlite`, the default) and `postgres/` (feature
//!   `postgres`): every trait on one database, one file per trait group,
//!   with `sql/` holding what both share (error classification, row
//!   decoding, migrations, batched purges, the group-commit queue);
//! - `conformance/` (feature `test-util`): the public suite that checks any
//!   implementation of the traits, these and a host's own.

#[cfg(feature = "test-util")]
pub mod conformance;
pub(crate) mod error;
pub(crate) mod feed;
pub(crate) mod memory;
#[cfg(feature = "nats")]
pub(crate) mod nats;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) mod sql;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;
pub(crate) mod webhooks;

use async_trait::async_trait;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::account::{Account, AccountId};
use crate::records::api_key::{ApiKeyId, ApiKeyRecord};
use crate::records::client::{Client, ClientId};
use crate::records::event::{EventSubmission, IdempotencyClaim, RecordOutcome, RecordedEvent};
use crate::records::grant::{Grant, GrantId};
use crate::records::tokens::{AccessTokenRecord, CodeRecord, RefreshTokenRecord};
use crate::secret::SecretHash;
use crate::store::error::StoreError;

/// What [`TokenStore::find_code`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CodeLookup {
    /// The code is stored and has not been used.
    Unused(CodeRecord),
    /// The code was used before (its tombstone), by a redemption or because
    /// a failed exchange burnt it.
    Used {
        /// The grant the code belonged to.
        grant_id: GrantId,
        /// The client it was issued to.
        client_id: ClientId,
    },
    /// No code with this hash is stored.
    NotFound,
}

/// The result of [`TokenStore::take_code`] and [`TokenStore::redeem_code`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CodeTake {
    /// This caller consumed the code; no other caller ever will.
    Taken(CodeRecord),
    /// The code was consumed before. Its grant is named so that the tokens
    /// issued from it can be revoked (RFC 6749 section 4.1.2).
    AlreadyTaken {
        /// The grant the code belonged to.
        grant_id: GrantId,
        /// The client it was issued to.
        client_id: ClientId,
    },
    /// No code with this hash was ever stored.
    NotFound,
}

/// The result of [`TokenStore::rotate_refresh_token`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rotation {
    /// This caller rotated the token; the successor is stored and active.
    Rotated,
    /// The token had already been rotated (by a concurrent caller or
    /// earlier); nothing changed.
    AlreadyRotated {
        /// When it was rotated.
        at: OffsetDateTime,
        /// The hash of its successor.
        successor: SecretHash,
    },
    /// The token's grant is revoked; nothing changed.
    Revoked,
    /// No such token; nothing changed.
    NotFound,
}

/// Grants, authorization codes, access tokens and refresh tokens.
///
/// Called by the service layer only; hosts implement it for their database.
#[async_trait]
pub trait TokenStore: Send + Sync {
    /// Whether the backend answers now: a cheap round trip, failing within
    /// a couple of seconds, for a load balancer's readiness check
    /// ([`crate::Gateway::readiness`]). The default, for stores in this
    /// process's memory, always answers.
    ///
    /// # Errors
    /// `Backend` when the backend does not answer in time.
    async fn ready(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Stores a new grant.
    ///
    /// # Errors
    /// [`StoreError::Duplicate`] if the id exists; `Backend` on failure.
    async fn insert_grant(&self, grant: &Grant) -> Result<(), StoreError>;

    /// The grant with this id, revoked or not.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn find_grant(&self, id: GrantId) -> Result<Option<Grant>, StoreError>;

    /// Revokes a grant, *atomically*: once this returns, every access and
    /// refresh token of the grant, including tokens inserted later, reads back
    /// with `revoked: true`. Revoking twice keeps the first time. Returns
    /// whether the grant exists.
    ///
    /// # Errors
    /// `Backend` on failure (then nothing may be assumed revoked).
    async fn revoke_grant(&self, id: GrantId, at: OffsetDateTime) -> Result<bool, StoreError>;

    /// The grants of `account` that are not revoked, oldest first: the
    /// applications it has connected.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn list_grants(&self, account: AccountId) -> Result<Vec<Grant>, StoreError>;

    /// Stores a new authorization code.
    ///
    /// # Errors
    /// `Duplicate` if the hash exists; `Backend` on failure.
    async fn insert_code(&self, code: &CodeRecord) -> Result<(), StoreError>;

    /// The code with this hash, and whether it was used. Changes nothing.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn find_code(&self, hash: &SecretHash) -> Result<CodeLookup, StoreError>;

    /// Consumes a code without issuing anything, *atomically*: the service
    /// burns a code this way when an exchange of it is refused (wrong
    /// client, redirect URI or PKCE verifier). The same code must never be
    /// returned as [`CodeTake::Taken`] twice, by this method or
    /// [`TokenStore::redeem_code`], however many callers race. A consumed
    /// code is kept as a tombstone so later attempts get
    /// [`CodeTake::AlreadyTaken`] with its grant.
    ///
    /// # Errors
    /// `Backend` on failure (then the code may or may not be consumed).
    async fn take_code(&self, hash: &SecretHash) -> Result<CodeTake, StoreError>;

    /// Exchanges a code for its tokens, *atomically*: if the code is unused,
    /// marks it used and stores `refresh` and `access`, as one step. Either
    /// all three changes happen or none does: when this fails, for any
    /// reason, the code is still unused and neither token is stored, so the
    /// client's retry is an ordinary exchange and not a replay. Of any
    /// number of concurrent callers exactly one gets [`CodeTake::Taken`]
    /// (with the code's record); the others get [`CodeTake::AlreadyTaken`]
    /// and store nothing. Expiry is not checked here: the caller decided on
    /// the record of [`TokenStore::find_code`].
    ///
    /// # Errors
    /// `Duplicate` if either token's hash exists; `Backend` on failure. In
    /// both cases nothing changed.
    async fn redeem_code(
        &self,
        hash: &SecretHash,
        refresh: &RefreshTokenRecord,
        access: &AccessTokenRecord,
    ) -> Result<CodeTake, StoreError>;

    /// Stores a new access token.
    ///
    /// # Errors
    /// `Duplicate` if the hash exists; `Backend` on failure.
    async fn insert_access_token(&self, token: &AccessTokenRecord) -> Result<(), StoreError>;

    /// The access token with this hash, with `revoked` read from its grant.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn find_access_token(
        &self,
        hash: &SecretHash,
    ) -> Result<Option<AccessTokenRecord>, StoreError>;

    /// Stores a new refresh token.
    ///
    /// # Errors
    /// `Duplicate` if the hash exists; `Backend` on failure.
    async fn insert_refresh_token(&self, token: &RefreshTokenRecord) -> Result<(), StoreError>;

    /// The refresh token with this hash, with `revoked` read from its grant.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn find_refresh_token(
        &self,
        hash: &SecretHash,
    ) -> Result<Option<RefreshTokenRecord>, StoreError>;

    /// Rotates a refresh token, *atomically*: if `old` is active and its grant
    /// not revoked, mark it rotated at `at` with `successor.hash`, insert
    /// `successor`, and insert `access` (the access token issued with it),
    /// as one step. Either all three changes happen or none does: when this
    /// fails, for any reason, `old` is still active and neither new token is
    /// stored, so the client's retry is an ordinary refresh and not a reuse.
    /// Exactly one of any number of concurrent callers gets
    /// [`Rotation::Rotated`]; the others get [`Rotation::AlreadyRotated`]
    /// naming the winner's successor, and store nothing. A rotation also
    /// sets its grant's [`Grant::last_refreshed_at`] to `at`.
    ///
    /// # Errors
    /// `Duplicate` if either new token's hash exists; `Backend` on failure.
    /// In both cases nothing changed.
    async fn rotate_refresh_token(
        &self,
        old: &SecretHash,
        successor: &RefreshTokenRecord,
        access: &AccessTokenRecord,
        at: OffsetDateTime,
    ) -> Result<Rotation, StoreError>;

    /// Deletes at most `limit` records that stopped being usable before
    /// `cutoff`, and returns how many it deleted: authorization codes that
    /// expired before it (used or not, tombstones included), access tokens
    /// that expired before it, refresh tokens rotated before it (their
    /// tombstones), refresh tokens that expired before it, and the refresh
    /// tokens of grants revoked before it. Nothing usable at `cutoff` or
    /// later is deleted; grants themselves are kept.
    ///
    /// One rotated token is usable however long ago it was rotated, and is
    /// never deleted for its rotation: a grant's first refresh token (no
    /// [`RefreshTokenRecord::predecessor`]) whose successor is still
    /// active, which [`crate::RefreshPolicy::Adaptive`] and
    /// [`crate::RefreshPolicy::Reuse`] still accept (clients that never
    /// store a new refresh token present it for as long as the grant
    /// lives). It goes once its successor is used and that use is past
    /// the retention, or when it expires or its grant is revoked.
    ///
    /// Called by [`crate::Gateway::purge_expired`] repeatedly until it
    /// returns less than `limit`. An implementation deletes in short
    /// statements (no lock held across the whole purge), so that it never
    /// stalls the requests running beside it.
    ///
    /// # Errors
    /// `Backend` on failure (some records may have been deleted).
    async fn purge_expired(
        &self,
        cutoff: OffsetDateTime,
        limit: usize,
    ) -> Result<usize, StoreError>;
}

/// Registered applications.
#[async_trait]
pub trait ClientRegistry: Send + Sync {
    /// Whether the backend answers now: a cheap round trip, failing within
    /// a couple of seconds, for a load balancer's readiness check
    /// ([`crate::Gateway::readiness`]). The default, for stores in this
    /// process's memory, always answers.
    ///
    /// # Errors
    /// `Backend` when the backend does not answer in time.
    async fn ready(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Registers an application.
    ///
    /// # Errors
    /// `Duplicate` if the client id exists; `Backend` on failure.
    async fn register_client(&self, client: &Client) -> Result<(), StoreError>;

    /// The application with this id.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn find_client(&self, id: &ClientId) -> Result<Option<Client>, StoreError>;

    /// Replaces the client's secret, *atomically*: the secret it had becomes
    /// its [`Client::previous_secret`], valid until `previous_valid_until`
    /// (replacing any older previous secret), and `secret_hash` its secret.
    /// Returns whether the client exists.
    ///
    /// # Errors
    /// `Backend` on failure (then nothing changed).
    async fn rotate_client_secret(
        &self,
        id: &ClientId,
        secret_hash: &SecretHash,
        previous_valid_until: OffsetDateTime,
    ) -> Result<bool, StoreError>;

    /// Replaces the client's registered redirect URIs. Returns whether the
    /// client exists.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn set_client_redirect_uris(
        &self,
        id: &ClientId,
        redirect_uris: &[String],
    ) -> Result<bool, StoreError>;

    /// Switches the client on or off ([`Client::active`]). Returns whether
    /// the client exists.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn set_client_active(&self, id: &ClientId, active: bool) -> Result<bool, StoreError>;
}

/// Accounts.
#[async_trait]
pub trait AccountStore: Send + Sync {
    /// Whether the backend answers now: a cheap round trip, failing within
    /// a couple of seconds, for a load balancer's readiness check
    /// ([`crate::Gateway::readiness`]). The default, for stores in this
    /// process's memory, always answers.
    ///
    /// # Errors
    /// `Backend` when the backend does not answer in time.
    async fn ready(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Stores a new account.
    ///
    /// # Errors
    /// `Duplicate` if the id or the e-mail exists; `Backend` on failure.
    async fn insert_account(&self, account: &Account) -> Result<(), StoreError>;

    /// The account with this id.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn find_account(&self, id: AccountId) -> Result<Option<Account>, StoreError>;

    /// The account whose login e-mail is `email` (already lowercased by the
    /// caller; compared exactly).
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn find_account_by_email(&self, email: &str) -> Result<Option<Account>, StoreError>;
}

/// API keys, stored as hashes.
#[async_trait]
pub trait ApiKeyStore: Send + Sync {
    /// Whether the backend answers now: a cheap round trip, failing within
    /// a couple of seconds, for a load balancer's readiness check
    /// ([`crate::Gateway::readiness`]). The default, for stores in this
    /// process's memory, always answers.
    ///
    /// # Errors
    /// `Backend` when the backend does not answer in time.
    async fn ready(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Stores a new key, *atomically* refusing it when its account already
    /// holds `max_per_account` keys (switched off ones count). Returns whether
    /// it was stored.
    ///
    /// # Errors
    /// `Duplicate` if the id or hash exists; `Backend` on failure.
    async fn insert_api_key(
        &self,
        key: &ApiKeyRecord,
        max_per_account: usize,
    ) -> Result<bool, StoreError>;

    /// The key with this hash, active or not.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn find_api_key(&self, hash: &SecretHash) -> Result<Option<ApiKeyRecord>, StoreError>;

    /// Switches a key on or off. Returns whether the key exists.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn set_api_key_active(&self, id: ApiKeyId, active: bool) -> Result<bool, StoreError>;

    /// The keys of an account, oldest first.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn list_api_keys(&self, account: AccountId) -> Result<Vec<ApiKeyRecord>, StoreError>;
}

/// Where accepted conversion events go.
#[async_trait]
pub trait EventSink: Send + Sync {
    /// Whether the backend answers now: a cheap round trip, failing within
    /// a couple of seconds, for a load balancer's readiness check
    /// ([`crate::Gateway::readiness`]). The default, for stores in this
    /// process's memory, always answers.
    ///
    /// # Errors
    /// `Backend` when the backend does not answer in time.
    async fn ready(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Records a submission, *atomically* and durably: either every event is
    /// stored (and the idempotency key, if any, claimed with them) before
    /// this returns `Ok(Recorded)`, or none is. An `Ok` is what the client's
    /// `event_uuid` acknowledges, so it must not be given before the events
    /// would survive a restart of the store.
    ///
    /// With an idempotency claim: if an unexpired claim for the same account,
    /// [`crate::IdempotencyScope`] and key exists, nothing is recorded and the answer is
    /// [`RecordOutcome::Replayed`] (same fingerprint) or
    /// [`RecordOutcome::KeyReused`] (another one). A claim is unexpired while
    /// its `expires_at` is after the new claim's `created_at`. Concurrent
    /// submissions with the same key: exactly one records.
    ///
    /// # Errors
    /// `Duplicate` if an event uuid exists; `Backend` on failure, with
    /// nothing recorded.
    async fn record(&self, submission: &EventSubmission) -> Result<RecordOutcome, StoreError>;

    /// What [`EventSink::record`] would answer a submission with `claim`
    /// because of the key alone, without recording anything:
    /// [`RecordOutcome::Replayed`] or [`RecordOutcome::KeyReused`] when an
    /// unexpired claim of the same account, scope and key exists (as
    /// `record` judges it), `None` when none does. The gateway asks it for
    /// a request over a rate limit, so that the retry of an accepted event
    /// is still answered from its record.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn check_claim(
        &self,
        claim: &IdempotencyClaim,
    ) -> Result<Option<RecordOutcome>, StoreError>;

    /// The event recorded under `event_uuid`.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn find_event(&self, event_uuid: Uuid) -> Result<Option<RecordedEvent>, StoreError>;

    /// Deletes at most `limit` idempotency claims that expired before
    /// `cutoff`, and returns how many it deleted. Events are never deleted.
    /// Called by [`crate::Gateway::purge_expired`] repeatedly until it
    /// returns less than `limit`, in short statements like
    /// [`TokenStore::purge_expired`].
    ///
    /// # Errors
    /// `Backend` on failure (some claims may have been deleted).
    async fn purge_expired_claims(
        &self,
        cutoff: OffsetDateTime,
        limit: usize,
    ) -> Result<usize, StoreError>;
}
