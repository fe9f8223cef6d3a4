//! The records the conformance suite writes: each with fresh random
//! identifiers and whole-second timestamps.

use time::{Duration, OffsetDateTime};

use crate::account::AccountId;
use crate::random::{OsRandom, random_uuid};
use crate::records::client::ClientId;
use crate::records::event::{IdempotencyClaim, IdempotencyScope, IntakeChannel, RecordedEvent};
use crate::records::grant::{Grant, GrantId};
use crate::records::tokens::{
    AccessTokenRecord, CodeRecord, PkceChallenge, RefreshState, RefreshTokenRecord,
};
use crate::records::webhook::{
    Delivery, DeliveryId, Webhook, WebhookEventType, WebhookId, WebhookRelation, WebhookStatus,
};
use crate::secret::{AccessToken, AuthorizationCode, RefreshToken, SecretHasher};

/// How many tasks race in each concurrency check.
pub(super) const RACERS: usize = 32;

/// A fixed, whole-second instant for the records the suite writes.
pub(super) fn base_time() -> OffsetDateTime {
    time::macros::datetime!(2026-03-01 12:00:00 UTC)
}

/// The hasher of every secret the suite stores, under a fixed key.
pub(super) fn hasher() -> SecretHasher {
    SecretHasher::new([7; 32])
}

/// A grant, not revoked, of a fresh client to a fresh account.
pub(super) fn new_grant() -> Grant {
    Grant {
        id: GrantId(random_uuid(&OsRandom)),
        client_id: ClientId::generate(&OsRandom),
        account_id: AccountId(random_uuid(&OsRandom)),
        created_at: base_time(),
        revoked_at: None,
        last_refreshed_at: None,
    }
}

/// An unused authorization code of `grant`, with a PKCE challenge, that
/// expires ten minutes after [`base_time`].
pub(super) fn new_code(grant: &Grant) -> CodeRecord {
    CodeRecord {
        hash: AuthorizationCode::generate(&OsRandom).hash(&hasher()),
        grant_id: grant.id,
        client_id: grant.client_id.clone(),
        account_id: grant.account_id,
        redirect_uri: "https://app.example/callback?from=suite".into(),
        pkce: Some(PkceChallenge {
            challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM".into(),
        }),
        issued_at: base_time(),
        expires_at: base_time() + Duration::minutes(10),
    }
}

/// An access token of `grant` that lives a day from [`base_time`].
pub(super) fn new_access(grant: &Grant) -> AccessTokenRecord {
    AccessTokenRecord {
        hash: AccessToken::generate(&OsRandom).hash(&hasher()),
        grant_id: grant.id,
        client_id: grant.client_id.clone(),
        account_id: grant.account_id,
        issued_at: base_time(),
        expires_at: base_time() + Duration::seconds(86_400),
        revoked: false,
    }
}

/// An active refresh token of `grant` that never expires.
pub(super) fn new_refresh(grant: &Grant) -> RefreshTokenRecord {
    RefreshTokenRecord {
        hash: RefreshToken::generate(&OsRandom).hash(&hasher()),
        grant_id: grant.id,
        client_id: grant.client_id.clone(),
        account_id: grant.account_id,
        issued_at: base_time(),
        expires_at: None,
        predecessor: None,
        state: RefreshState::Active,
        revoked: false,
    }
}

/// The `n`th conversion event of `account`, with a fresh uuid.
pub(super) fn new_event(account: AccountId, n: usize) -> RecordedEvent {
    RecordedEvent {
        event_uuid: random_uuid(&OsRandom),
        account_id: account,
        received_at: base_time(),
        event_type: "CONVERSION".into(),
        event_family: "CDP".into(),
        conversion_identifier: format!("suite-{n}"),
        email: format!("lead{n}@example.com"),
        payload: serde_json::json!({
            "conversion_identifier": format!("suite-{n}"),
            "email": format!("lead{n}@example.com"),
            "tags": ["a", "b"],
            "cf_plan": "gold",
        })
        .into(),
        channel: IntakeChannel::Bearer {
            client_id: ClientId::new("cgid_suite"),
        },
    }
}

/// The credential of most claims the suite makes: the application whose
/// events it records.
pub(super) fn suite_scope() -> IdempotencyScope {
    IdempotencyScope::Client(ClientId::new("cgid_suite"))
}

/// A claim of the idempotency `key` by the suite's client in `account`, made
/// at `at` and held for a day, for a body whose fingerprint is all
/// `fingerprint` bytes.
pub(super) fn claim(
    account: AccountId,
    key: &str,
    fingerprint: u8,
    at: OffsetDateTime,
) -> IdempotencyClaim {
    IdempotencyClaim {
        account_id: account,
        scope: suite_scope(),
        key: key.into(),
        fingerprint: [fingerprint; 32],
        created_at: at,
        expires_at: at + Duration::hours(24),
    }
}

/// A fresh account's identifier.
pub(super) fn new_account() -> AccountId {
    AccountId(random_uuid(&OsRandom))
}

/// A URL no other webhook has.
pub(super) fn new_url() -> String {
    format!(
        "https://hooks.example/suite/{}?k=v",
        random_uuid(&OsRandom).simple()
    )
}

/// An active webhook of `account` to `url`, registered at [`base_time`],
/// for two conversions and the company relation, with a random salt.
pub(super) fn new_webhook(account: AccountId, url: &str) -> Webhook {
    Webhook {
        id: WebhookId(random_uuid(&OsRandom)),
        account_id: account,
        client_id: ClientId::new("cgid_suite"),
        event_type: WebhookEventType::Converted,
        url: url.into(),
        event_identifiers: vec!["signup".into(), "trial".into()],
        include_relations: vec![WebhookRelation::Company],
        status: WebhookStatus::Active,
        created_at: base_time(),
        updated_at: base_time(),
        secret_salt: random_uuid(&OsRandom).into_bytes(),
        failing_since: None,
    }
}

/// A delivery to `webhook` of a fresh conversion of `contact`, recorded at
/// [`base_time`] (so due from then).
pub(super) fn new_delivery(webhook: &Webhook, contact: &str) -> Delivery {
    let event_uuid = random_uuid(&OsRandom);
    Delivery {
        id: DeliveryId(random_uuid(&OsRandom)),
        webhook_id: webhook.id,
        event_uuid,
        contact_key: contact.into(),
        body: format!(
            r#"{{"event_type":"WEBHOOK.CONVERTED","event_uuid":"{event_uuid}","contact":{{"email":"{contact}","name":"Zoë"}}}}"#
        ),
        created_at: base_time(),
    }
}
