//! The purge checks: what stopped being usable before the cutoff is
//! deleted, in batches of at most the limit; what is usable at the cutoff,
//! and every event, is kept.

use time::{Duration, OffsetDateTime};

use crate::account::AccountId;
use crate::random::{OsRandom, random_uuid};
use crate::records::event::{EventSubmission, IdempotencyClaim, RecordOutcome};
use crate::records::grant::Grant;
use crate::records::tokens::{AccessTokenRecord, CodeRecord, RefreshTokenRecord};
use crate::store::{CodeLookup, EventSink, Rotation};

use super::fixtures::{base_time, claim, new_access, new_code, new_event, new_grant, new_refresh};

/// The purge deletes what stopped being usable before the cutoff, never
/// what is usable at it, in batches of at most `limit`.
///
/// Its records are dated a quarter century before the rest of the suite's,
/// so that a purge here never touches what another check (running in
/// parallel on a shared database) relies on.
pub(super) async fn check_purge(store: &dyn crate::store::TokenStore) {
    let cutoff = base_time() - Duration::days(365 * 25);
    let long_ago = cutoff - Duration::days(30);
    let dated = |grant: &Grant| Grant {
        created_at: long_ago,
        ..grant.clone()
    };
    let live_grant = dated(&new_grant());
    let revoked_grant = dated(&new_grant());
    // The contract deletes "the refresh tokens of grants revoked before"
    // the cutoff: a grant revoked at the cutoff itself keeps its tokens.
    let revoked_at_cutoff = dated(&new_grant());
    for grant in [&live_grant, &revoked_grant, &revoked_at_cutoff] {
        store.insert_grant(grant).await.expect("insert_grant");
    }
    for (grant, at) in [
        (&revoked_grant, cutoff - Duration::seconds(1)),
        (&revoked_at_cutoff, cutoff),
    ] {
        store
            .revoke_grant(grant.id, at)
            .await
            .expect("revoke_grant");
    }
    let code = |expires_at| CodeRecord {
        issued_at: long_ago,
        expires_at,
        ..new_code(&live_grant)
    };
    let access = |expires_at| AccessTokenRecord {
        issued_at: long_ago,
        expires_at,
        ..new_access(&live_grant)
    };
    let refresh = |grant: &Grant, expires_at| RefreshTokenRecord {
        issued_at: long_ago,
        expires_at,
        ..new_refresh(grant)
    };

    let expired_code = code(cutoff - Duration::seconds(1));
    let used_code = code(cutoff - Duration::seconds(1));
    let live_code = code(cutoff);
    for c in [&expired_code, &used_code, &live_code] {
        store.insert_code(c).await.expect("insert_code");
    }
    store.take_code(&used_code.hash).await.expect("take_code");
    let expired_access = access(cutoff - Duration::seconds(1));
    let live_access = access(cutoff);
    for a in [&expired_access, &live_access] {
        store
            .insert_access_token(a)
            .await
            .expect("insert_access_token");
    }
    // A token with a predecessor: not a grant's first, so rotation retires
    // it for good.
    let later = |grant: &Grant| RefreshTokenRecord {
        predecessor: Some(refresh(grant, None).hash),
        ..refresh(grant, None)
    };
    let rotated_long_ago = later(&live_grant);
    let rotated_recently = later(&live_grant);
    // Grants' first tokens, rotated long ago: one whose successor was never
    // used (the adaptive policy still accepts it), one whose successor was
    // used long ago too (retired).
    let first_honoured = refresh(&live_grant, None);
    let first_retired = refresh(&live_grant, None);
    let expired_refresh = refresh(&live_grant, Some(cutoff - Duration::seconds(1)));
    let of_revoked_grant = refresh(&revoked_grant, None);
    let of_grant_revoked_at_cutoff = refresh(&revoked_at_cutoff, None);
    let live_refresh = refresh(&live_grant, Some(cutoff));
    for r in [
        &rotated_long_ago,
        &rotated_recently,
        &first_honoured,
        &first_retired,
        &expired_refresh,
        &of_revoked_grant,
        &of_grant_revoked_at_cutoff,
        &live_refresh,
    ] {
        store
            .insert_refresh_token(r)
            .await
            .expect("insert_refresh_token");
    }
    let successor_of = |token: &RefreshTokenRecord| RefreshTokenRecord {
        predecessor: Some(token.hash),
        ..refresh(&live_grant, None)
    };
    let successor_long_ago = successor_of(&rotated_long_ago);
    let successor_recently = successor_of(&rotated_recently);
    let successor_unused = successor_of(&first_honoured);
    let successor_used = successor_of(&first_retired);
    let successor_of_used = successor_of(&successor_used);
    let before = cutoff - Duration::seconds(1);
    for (token, successor, at) in [
        (&rotated_long_ago, &successor_long_ago, before),
        (&rotated_recently, &successor_recently, cutoff),
        (&first_honoured, &successor_unused, before),
        (&first_retired, &successor_used, before),
        (&successor_used, &successor_of_used, before),
    ] {
        let rotated = store
            .rotate_refresh_token(&token.hash, successor, &access(cutoff), at)
            .await
            .expect("rotate_refresh_token");
        assert_eq!(rotated, Rotation::Rotated);
    }

    // Eight records are purgeable; batches of two take five calls. A purge
    // running in parallel (another run of the suite on the same database)
    // may take some of them, so only the bounds are exact.
    let mut calls = 0;
    loop {
        let deleted = store.purge_expired(cutoff, 2).await.expect("purge_expired");
        assert!(deleted <= 2, "a purge call deleted {deleted} > its limit 2");
        calls += 1;
        assert!(calls <= 64, "the purge did not come to an end");
        if deleted < 2 {
            break;
        }
    }

    for (what, hash) in [
        ("an expired code", expired_code.hash),
        ("an expired used code", used_code.hash),
    ] {
        assert_eq!(
            store.find_code(&hash).await.expect("find_code"),
            CodeLookup::NotFound,
            "the purge must delete {what}"
        );
    }
    assert!(
        matches!(
            store.find_code(&live_code.hash).await.expect("find_code"),
            CodeLookup::Unused(_)
        ),
        "the purge must keep a code that expires at the cutoff"
    );
    assert_eq!(
        store
            .find_access_token(&expired_access.hash)
            .await
            .expect("find"),
        None,
        "the purge must delete an expired access token"
    );
    assert!(
        store
            .find_access_token(&live_access.hash)
            .await
            .expect("find")
            .is_some(),
        "the purge must keep an access token that expires at the cutoff"
    );
    for (what, hash) in [
        ("a token rotated before the cutoff", rotated_long_ago.hash),
        (
            "a grant's first token whose successor was used before the cutoff",
            first_retired.hash,
        ),
        ("a successor used before the cutoff", successor_used.hash),
        ("an expired refresh token", expired_refresh.hash),
        ("a refresh token of a revoked grant", of_revoked_grant.hash),
    ] {
        assert_eq!(
            store.find_refresh_token(&hash).await.expect("find"),
            None,
            "the purge must delete {what}"
        );
    }
    for (what, hash) in [
        ("a token rotated at the cutoff", rotated_recently.hash),
        (
            "a refresh token that expires at the cutoff",
            live_refresh.hash,
        ),
        (
            "a refresh token of a grant revoked at the cutoff",
            of_grant_revoked_at_cutoff.hash,
        ),
        (
            "a grant's first token rotated before the cutoff whose successor \
             was never used (the adaptive policy still accepts it)",
            first_honoured.hash,
        ),
        ("an active successor", successor_long_ago.hash),
        ("an active successor", successor_recently.hash),
        ("an active successor", successor_unused.hash),
        ("an active successor", successor_of_used.hash),
    ] {
        assert!(
            store
                .find_refresh_token(&hash)
                .await
                .expect("find")
                .is_some(),
            "the purge must keep {what}"
        );
    }
    assert!(
        store
            .find_grant(revoked_grant.id)
            .await
            .expect("find_grant")
            .is_some(),
        "the purge keeps grants"
    );
}

/// The purge of idempotency claims deletes expired claims only, and never
/// an event. Its claims are dated a quarter century before the rest of the
/// suite's, so it never touches what another check relies on.
pub(super) async fn check_claim_purge(sink: &dyn EventSink) {
    let account = AccountId(random_uuid(&OsRandom));
    let cutoff = base_time() - Duration::days(365 * 25);
    let submission = |n: usize, expires_at: OffsetDateTime| EventSubmission {
        events: vec![new_event(account, 200 + n)],
        batch_uuid: None,
        idempotency: Some(IdempotencyClaim {
            created_at: expires_at - Duration::hours(24),
            expires_at,
            ..claim(account, &format!("purge-{n}"), 1, cutoff)
        }),
    };
    let expired = submission(0, cutoff - Duration::seconds(1));
    let live = submission(1, cutoff);
    for s in [&expired, &live] {
        assert_eq!(
            sink.record(s).await.expect("record"),
            RecordOutcome::Recorded
        );
    }
    loop {
        let deleted = sink
            .purge_expired_claims(cutoff, 1)
            .await
            .expect("purge_expired_claims");
        assert!(deleted <= 1, "a purge call deleted {deleted} > its limit 1");
        if deleted == 0 {
            break;
        }
    }
    // A retry of the live claim, made at the cutoff, is still a replay; the
    // purged key, reused with another body, is a new request.
    let retry_at = |s: &EventSubmission, n: usize, fingerprint: u8| EventSubmission {
        events: vec![new_event(account, 210 + n)],
        idempotency: s.idempotency.clone().map(|c| IdempotencyClaim {
            fingerprint: [fingerprint; 32],
            created_at: cutoff - Duration::seconds(2),
            ..c
        }),
        ..s.clone()
    };
    assert!(
        matches!(
            sink.record(&retry_at(&live, 1, 1)).await.expect("record"),
            RecordOutcome::Replayed { .. }
        ),
        "the purge must keep a claim that expires at the cutoff"
    );
    assert_eq!(
        sink.record(&retry_at(&expired, 0, 2))
            .await
            .expect("record"),
        RecordOutcome::Recorded,
        "the purge must delete an expired claim"
    );
    for s in [&expired, &live] {
        assert!(
            sink.find_event(s.events[0].event_uuid)
                .await
                .expect("find_event")
                .is_some(),
            "the purge must never delete an event"
        );
    }
}
