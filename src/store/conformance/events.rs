//! The [`EventSink`] checks one caller at a time: what is acknowledged
//! reads back, batches are all or nothing, and idempotency keys replay,
//! refuse reuse, and expire.

use time::Duration;

use crate::account::AccountId;
use crate::random::{OsRandom, random_uuid};
use crate::records::api_key::ApiKeyId;
use crate::records::client::ClientId;
use crate::records::event::{EventSubmission, IdempotencyClaim, IdempotencyScope, RecordOutcome};
use crate::store::EventSink;

use super::fixtures::{base_time, claim, new_event};

/// Events of `account` read back whole once acknowledged; a batch records
/// all or nothing; an idempotency key is answered from its claim per
/// account and credential, and forgotten once expired.
pub(super) async fn check_events(sink: &dyn EventSink, account: AccountId) {
    let single = EventSubmission {
        events: vec![new_event(account, 0)],
        batch_uuid: None,
        idempotency: None,
    };
    assert_eq!(
        sink.record(&single).await.expect("record"),
        RecordOutcome::Recorded
    );
    let stored = sink
        .find_event(single.events[0].event_uuid)
        .await
        .expect("find_event");
    assert_eq!(stored.as_ref(), Some(&single.events[0]));
    assert_eq!(
        sink.find_event(random_uuid(&OsRandom))
            .await
            .expect("find_event"),
        None
    );

    // All or nothing: a batch with one bad event records none.
    let mut batch = vec![new_event(account, 1), new_event(account, 2)];
    batch.push(single.events[0].clone());
    let bad = EventSubmission {
        events: batch.clone(),
        batch_uuid: Some(random_uuid(&OsRandom)),
        idempotency: None,
    };
    assert!(
        sink.record(&bad).await.is_err(),
        "a batch with an existing uuid must fail"
    );
    for event in &batch[..2] {
        assert_eq!(
            sink.find_event(event.event_uuid).await.expect("find"),
            None,
            "a failed batch records nothing"
        );
    }

    // Idempotency: replay, other body, other account, expiry.
    let key = format!("suite-{}", random_uuid(&OsRandom));
    let first = EventSubmission {
        events: vec![new_event(account, 3), new_event(account, 4)],
        batch_uuid: Some(random_uuid(&OsRandom)),
        idempotency: Some(claim(account, &key, 1, base_time())),
    };
    assert_eq!(
        sink.record(&first).await.expect("record"),
        RecordOutcome::Recorded
    );
    let retry = EventSubmission {
        events: vec![new_event(account, 3), new_event(account, 4)],
        batch_uuid: Some(random_uuid(&OsRandom)),
        idempotency: Some(claim(account, &key, 1, base_time() + Duration::minutes(5))),
    };
    assert_eq!(
        sink.record(&retry).await.expect("record"),
        RecordOutcome::Replayed {
            event_uuids: first.events.iter().map(|e| e.event_uuid).collect(),
            batch_uuid: first.batch_uuid,
        }
    );
    assert_eq!(
        sink.find_event(retry.events[0].event_uuid)
            .await
            .expect("find"),
        None,
        "a replay records nothing"
    );
    let other_body = EventSubmission {
        idempotency: Some(claim(account, &key, 2, base_time() + Duration::minutes(5))),
        ..retry.clone()
    };
    assert_eq!(
        sink.record(&other_body).await.expect("record"),
        RecordOutcome::KeyReused
    );
    assert_eq!(
        sink.find_event(retry.events[0].event_uuid)
            .await
            .expect("find"),
        None
    );

    let other_account = AccountId(random_uuid(&OsRandom));
    let elsewhere = EventSubmission {
        events: vec![new_event(other_account, 5)],
        batch_uuid: None,
        idempotency: Some(claim(other_account, &key, 1, base_time())),
    };
    assert_eq!(
        sink.record(&elsewhere).await.expect("record"),
        RecordOutcome::Recorded,
        "keys are per account"
    );

    // Keys are per credential too: the account's public website key cannot
    // claim a key its application uses, nor the other way round.
    for scope in [
        IdempotencyScope::ApiKey(ApiKeyId(random_uuid(&OsRandom))),
        IdempotencyScope::Client(ClientId::new("cgid_other_app")),
    ] {
        let other_credential = EventSubmission {
            events: vec![new_event(account, 6)],
            batch_uuid: None,
            idempotency: Some(IdempotencyClaim {
                scope: scope.clone(),
                ..claim(account, &key, 3, base_time() + Duration::minutes(5))
            }),
        };
        assert_eq!(
            sink.record(&other_credential).await.expect("record"),
            RecordOutcome::Recorded,
            "keys are per credential: {scope:?} must not meet the suite client's key"
        );
        let retry = EventSubmission {
            events: vec![new_event(account, 7)],
            ..other_credential.clone()
        };
        assert_eq!(
            sink.record(&retry).await.expect("record"),
            RecordOutcome::Replayed {
                event_uuids: vec![other_credential.events[0].event_uuid],
                batch_uuid: None,
            },
            "a retry within {scope:?} is answered from that credential's claim"
        );
    }

    // check_claim answers as record would, and records nothing.
    let check = |fingerprint: u8, at| claim(account, &key, fingerprint, at);
    assert_eq!(
        sink.check_claim(&check(1, base_time() + Duration::minutes(6)))
            .await
            .expect("check_claim"),
        Some(RecordOutcome::Replayed {
            event_uuids: first.events.iter().map(|e| e.event_uuid).collect(),
            batch_uuid: first.batch_uuid,
        }),
        "check_claim: the same fingerprint replays"
    );
    assert_eq!(
        sink.check_claim(&check(2, base_time() + Duration::minutes(6)))
            .await
            .expect("check_claim"),
        Some(RecordOutcome::KeyReused),
        "check_claim: another fingerprint is a reused key"
    );
    assert_eq!(
        sink.check_claim(&check(1, base_time() + Duration::hours(24)))
            .await
            .expect("check_claim"),
        None,
        "check_claim: a claim holds while it expires after the new one is made"
    );
    assert_eq!(
        sink.check_claim(&claim(account, "never-used", 1, base_time()))
            .await
            .expect("check_claim"),
        None
    );
    assert_eq!(
        sink.check_claim(&claim(
            AccountId(random_uuid(&OsRandom)),
            &key,
            1,
            base_time()
        ))
        .await
        .expect("check_claim"),
        None,
        "check_claim: keys are per account"
    );

    let later = EventSubmission {
        idempotency: Some(claim(account, &key, 2, base_time() + Duration::hours(25))),
        ..retry.clone()
    };
    assert_eq!(
        sink.record(&later).await.expect("record"),
        RecordOutcome::Recorded,
        "expired keys are forgotten"
    );
    assert!(
        sink.find_event(retry.events[0].event_uuid)
            .await
            .expect("find")
            .is_some()
    );
}
