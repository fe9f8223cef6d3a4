//! The storage conformance suite: async checks that any implementation of
//! the storage traits keeps its contract, the atomic operations under
//! concurrency included. Enabled by the `test-util` feature.
//!
//! Run it from a test of your own store:
//!
//! ```ignore
//! #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
//! async fn my_store_keeps_the_contract() {
//!     let store = Arc::new(MyTokenStore::connect(...).await);
//!     conversion_gateway::conformance::check_token_store(store).await;
//! }
//! ```
//!
//! Each check panics (fails the test) with a message naming the broken
//! clause. Every record it writes has fresh random identifiers, so the suite
//! can run repeatedly and in parallel against one shared database.
//! Timestamps are whole seconds: a store must round-trip at least that.

use std::sync::Arc;

use time::{Duration, OffsetDateTime};
use uuid::Uuid;

use crate::{
    AccessToken, AccessTokenRecord, Account, AccountId, AccountStore, ApiKeyId, ApiKeyRecord,
    ApiKeyStore, AuthorizationCode, Client, ClientId, ClientRegistry, CodeLookup, CodeRecord,
    CodeTake, EventSink, EventSubmission, Grant, GrantId, IdempotencyClaim, IdempotencyScope,
    IntakeChannel, OsRandom, PkceChallenge, RecordOutcome, RecordedEvent, RefreshPolicy,
    RefreshState, RefreshToken, RefreshTokenRecord, Rotation, SecretHasher, random_uuid,
};

/// How many tasks race in each concurrency check.
const RACERS: usize = 32;

/// A fixed, whole-second instant for the records the suite writes.
fn base_time() -> OffsetDateTime {
    time::macros::datetime!(2026-03-01 12:00:00 UTC)
}

fn hasher() -> SecretHasher {
    SecretHasher::new([7; 32])
}

fn new_grant() -> Grant {
    Grant {
        id: GrantId(random_uuid(&OsRandom)),
        client_id: ClientId::generate(&OsRandom),
        account_id: AccountId(random_uuid(&OsRandom)),
        created_at: base_time(),
        revoked_at: None,
    }
}

fn new_code(grant: &Grant) -> CodeRecord {
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

fn new_access(grant: &Grant) -> AccessTokenRecord {
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

fn new_refresh(grant: &Grant) -> RefreshTokenRecord {
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

/// Checks every clause of [`crate::TokenStore`].
pub async fn check_token_store(store: Arc<dyn crate::TokenStore>) {
    check_grants(&*store).await;
    check_codes(&*store).await;
    check_access_tokens(&*store).await;
    check_refresh_tokens(&*store).await;
    check_successor_use(&*store).await;
    check_code_redemption(&*store).await;
    check_redemption_fails_whole(&*store).await;
    check_rotation_fails_whole(&*store).await;
    check_purge(&*store).await;
    check_concurrent_code_take(store.clone()).await;
    check_concurrent_redemption(store.clone()).await;
    check_concurrent_rotation(store).await;
}

/// A rotated token reads back when its successor was first used (rotated
/// in turn): the adaptive refresh policy decides on it.
async fn check_successor_use(store: &dyn crate::TokenStore) {
    let grant = new_grant();
    store.insert_grant(&grant).await.expect("insert_grant");
    let first = new_refresh(&grant);
    store
        .insert_refresh_token(&first)
        .await
        .expect("insert_refresh_token");
    let second = RefreshTokenRecord {
        predecessor: Some(first.hash),
        ..new_refresh(&grant)
    };
    let third = RefreshTokenRecord {
        predecessor: Some(second.hash),
        ..new_refresh(&grant)
    };
    let rotated_at = base_time() + Duration::seconds(10);
    let used_at = base_time() + Duration::days(2);
    for (token, successor, at) in [(&first, &second, rotated_at), (&second, &third, used_at)] {
        assert_eq!(
            store
                .rotate_refresh_token(&token.hash, successor, &new_access(&grant), at)
                .await
                .expect("rotate_refresh_token"),
            Rotation::Rotated
        );
    }
    let found = store
        .find_refresh_token(&first.hash)
        .await
        .expect("find")
        .expect("first token");
    assert_eq!(
        found.state,
        RefreshState::Rotated {
            at: rotated_at,
            successor: second.hash,
            successor_used_at: Some(used_at),
        },
        "a rotated token must read back when its successor was rotated"
    );
    assert_eq!(found.predecessor, None);
}

async fn check_code_redemption(store: &dyn crate::TokenStore) {
    let grant = new_grant();
    store.insert_grant(&grant).await.expect("insert_grant");
    let code = new_code(&grant);
    store.insert_code(&code).await.expect("insert_code");
    assert_eq!(
        store.find_code(&code.hash).await.expect("find_code"),
        CodeLookup::Unused(code.clone()),
        "a stored code reads back unused, whole"
    );
    let unknown = AuthorizationCode::generate(&OsRandom).hash(&hasher());
    assert_eq!(
        store.find_code(&unknown).await.expect("find_code"),
        CodeLookup::NotFound
    );

    let (refresh, access) = (new_refresh(&grant), new_access(&grant));
    assert_eq!(
        store
            .redeem_code(&code.hash, &refresh, &access)
            .await
            .expect("redeem_code"),
        CodeTake::Taken(code.clone())
    );
    assert_eq!(
        store.find_refresh_token(&refresh.hash).await.expect("find"),
        Some(refresh.clone()),
        "a redemption stores its refresh token"
    );
    assert_eq!(
        store.find_access_token(&access.hash).await.expect("find"),
        Some(access.clone()),
        "a redemption stores its access token"
    );
    let used = CodeLookup::Used {
        grant_id: grant.id,
        client_id: grant.client_id.clone(),
    };
    assert_eq!(store.find_code(&code.hash).await.expect("find_code"), used);

    let (again_refresh, again_access) = (new_refresh(&grant), new_access(&grant));
    assert_eq!(
        store
            .redeem_code(&code.hash, &again_refresh, &again_access)
            .await
            .expect("redeem_code"),
        CodeTake::AlreadyTaken {
            grant_id: grant.id,
            client_id: grant.client_id.clone()
        },
        "a code redeems once"
    );
    assert_eq!(
        store
            .find_refresh_token(&again_refresh.hash)
            .await
            .expect("find"),
        None,
        "a refused redemption stores no refresh token"
    );
    assert_eq!(
        store
            .find_access_token(&again_access.hash)
            .await
            .expect("find"),
        None,
        "a refused redemption stores no access token"
    );
    assert_eq!(
        store.take_code(&code.hash).await.expect("take_code"),
        CodeTake::AlreadyTaken {
            grant_id: grant.id,
            client_id: grant.client_id.clone()
        },
        "a redeemed code cannot be taken"
    );
    assert_eq!(
        store
            .redeem_code(&unknown, &again_refresh, &again_access)
            .await
            .expect("redeem_code"),
        CodeTake::NotFound
    );

    // A code burnt by a refused exchange cannot be redeemed afterwards.
    let burnt = new_code(&grant);
    store.insert_code(&burnt).await.expect("insert_code");
    assert_eq!(
        store.take_code(&burnt.hash).await.expect("take_code"),
        CodeTake::Taken(burnt.clone())
    );
    assert!(
        matches!(
            store
                .redeem_code(&burnt.hash, &again_refresh, &again_access)
                .await
                .expect("redeem_code"),
            CodeTake::AlreadyTaken { .. }
        ),
        "a taken code must not redeem"
    );
}

/// A redemption that fails part-way (here: its second or third write meets
/// an existing hash) changes nothing: the code stays unused for the retry.
async fn check_redemption_fails_whole(store: &dyn crate::TokenStore) {
    let grant = new_grant();
    store.insert_grant(&grant).await.expect("insert_grant");
    let code = new_code(&grant);
    store.insert_code(&code).await.expect("insert_code");
    let existing_refresh = new_refresh(&grant);
    store
        .insert_refresh_token(&existing_refresh)
        .await
        .expect("insert_refresh_token");
    let existing_access = new_access(&grant);
    store
        .insert_access_token(&existing_access)
        .await
        .expect("insert_access_token");

    let (refresh, access) = (new_refresh(&grant), new_access(&grant));
    for (step, refresh, access) in [
        ("storing the refresh token", &existing_refresh, &access),
        ("storing the access token", &refresh, &existing_access),
    ] {
        assert!(
            store
                .redeem_code(&code.hash, refresh, access)
                .await
                .is_err(),
            "a redemption failing at {step} must be an error"
        );
        assert_eq!(
            store.find_code(&code.hash).await.expect("find_code"),
            CodeLookup::Unused(code.clone()),
            "a redemption failing at {step} must leave the code unused"
        );
    }
    assert_eq!(
        store.find_refresh_token(&refresh.hash).await.expect("find"),
        None,
        "a failed redemption must not leave its refresh token"
    );
    assert_eq!(
        store.find_access_token(&access.hash).await.expect("find"),
        None,
        "a failed redemption must not leave its access token"
    );
    assert_eq!(
        store
            .redeem_code(&code.hash, &refresh, &access)
            .await
            .expect("the retry"),
        CodeTake::Taken(code.clone()),
        "the code must redeem on retry"
    );
}

/// A rotation that fails part-way changes nothing: the presented token
/// stays active for the retry.
async fn check_rotation_fails_whole(store: &dyn crate::TokenStore) {
    let grant = new_grant();
    store.insert_grant(&grant).await.expect("insert_grant");
    let token = new_refresh(&grant);
    store
        .insert_refresh_token(&token)
        .await
        .expect("insert_refresh_token");
    let existing_refresh = new_refresh(&grant);
    store
        .insert_refresh_token(&existing_refresh)
        .await
        .expect("insert_refresh_token");
    let existing_access = new_access(&grant);
    store
        .insert_access_token(&existing_access)
        .await
        .expect("insert_access_token");

    let (successor, access) = (new_refresh(&grant), new_access(&grant));
    for (step, successor, access) in [
        ("storing the successor", &existing_refresh, &access),
        ("storing the access token", &successor, &existing_access),
    ] {
        assert!(
            store
                .rotate_refresh_token(&token.hash, successor, access, base_time())
                .await
                .is_err(),
            "a rotation failing at {step} must be an error"
        );
        assert_eq!(
            store
                .find_refresh_token(&token.hash)
                .await
                .expect("find")
                .map(|t| t.state),
            Some(RefreshState::Active),
            "a rotation failing at {step} must leave the token active"
        );
    }
    assert_eq!(
        store
            .find_refresh_token(&successor.hash)
            .await
            .expect("find"),
        None,
        "a failed rotation must not leave its successor"
    );
    assert_eq!(
        store.find_access_token(&access.hash).await.expect("find"),
        None,
        "a failed rotation must not leave its access token"
    );
    assert_eq!(
        store
            .rotate_refresh_token(&token.hash, &successor, &access, base_time())
            .await
            .expect("the retry"),
        Rotation::Rotated,
        "the token must rotate on retry"
    );
    assert!(
        store
            .find_access_token(&access.hash)
            .await
            .expect("find")
            .is_some(),
        "a rotation stores its access token"
    );
}

/// The purge deletes what stopped being usable before the cutoff, never
/// what is usable at it, in batches of at most `limit`.
///
/// Its records are dated a quarter century before the rest of the suite's,
/// so that a purge here never touches what another check (running in
/// parallel on a shared database) relies on.
async fn check_purge(store: &dyn crate::TokenStore) {
    let cutoff = base_time() - Duration::days(365 * 25);
    let long_ago = cutoff - Duration::days(30);
    let dated = |grant: &Grant| Grant {
        created_at: long_ago,
        ..grant.clone()
    };
    let live_grant = dated(&new_grant());
    let revoked_grant = dated(&new_grant());
    for grant in [&live_grant, &revoked_grant] {
        store.insert_grant(grant).await.expect("insert_grant");
    }
    store
        .revoke_grant(revoked_grant.id, cutoff - Duration::seconds(1))
        .await
        .expect("revoke_grant");
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
    let rotated_long_ago = refresh(&live_grant, None);
    let rotated_recently = refresh(&live_grant, None);
    let expired_refresh = refresh(&live_grant, Some(cutoff - Duration::seconds(1)));
    let of_revoked_grant = refresh(&revoked_grant, None);
    let live_refresh = refresh(&live_grant, Some(cutoff));
    for r in [
        &rotated_long_ago,
        &rotated_recently,
        &expired_refresh,
        &of_revoked_grant,
        &live_refresh,
    ] {
        store
            .insert_refresh_token(r)
            .await
            .expect("insert_refresh_token");
    }
    let successor_long_ago = refresh(&live_grant, None);
    let successor_recently = refresh(&live_grant, None);
    for (token, successor, at) in [
        (
            &rotated_long_ago,
            &successor_long_ago,
            cutoff - Duration::seconds(1),
        ),
        (&rotated_recently, &successor_recently, cutoff),
    ] {
        let rotated = store
            .rotate_refresh_token(&token.hash, successor, &access(cutoff), at)
            .await
            .expect("rotate_refresh_token");
        assert_eq!(rotated, Rotation::Rotated);
    }

    // Six records are purgeable; batches of two take four calls. A purge
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
        ("an active successor", successor_long_ago.hash),
        ("an active successor", successor_recently.hash),
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

async fn check_concurrent_redemption(store: Arc<dyn crate::TokenStore>) {
    let grant = new_grant();
    store.insert_grant(&grant).await.expect("insert_grant");
    let code = new_code(&grant);
    store.insert_code(&code).await.expect("insert_code");
    let tokens: Vec<_> = (0..RACERS)
        .map(|_| (new_refresh(&grant), new_access(&grant)))
        .collect();
    let tasks: Vec<_> = tokens
        .iter()
        .cloned()
        .map(|(refresh, access)| {
            let store = store.clone();
            let hash = code.hash;
            tokio::spawn(async move { store.redeem_code(&hash, &refresh, &access).await })
        })
        .collect();
    let mut taken = 0;
    for task in tasks {
        match task.await.expect("task").expect("redeem_code") {
            CodeTake::Taken(_) => taken += 1,
            CodeTake::AlreadyTaken { grant_id, .. } => assert_eq!(grant_id, grant.id),
            other => panic!("unexpected redemption result {other:?}"),
        }
    }
    assert_eq!(taken, 1, "exactly one concurrent caller may redeem a code");
    let mut stored = 0;
    for (refresh, access) in &tokens {
        let has_refresh = store
            .find_refresh_token(&refresh.hash)
            .await
            .expect("find")
            .is_some();
        let has_access = store
            .find_access_token(&access.hash)
            .await
            .expect("find")
            .is_some();
        assert_eq!(
            has_refresh, has_access,
            "a redemption stores both of its tokens or neither"
        );
        stored += usize::from(has_refresh);
    }
    assert_eq!(stored, 1, "only the winner's tokens may be stored");
}

async fn check_grants(store: &dyn crate::TokenStore) {
    let grant = new_grant();
    store.insert_grant(&grant).await.expect("insert_grant");
    assert_eq!(
        store.find_grant(grant.id).await.expect("find_grant"),
        Some(grant.clone())
    );
    assert!(
        store.insert_grant(&grant).await.is_err(),
        "insert_grant must refuse an existing id"
    );
    assert_eq!(
        store
            .find_grant(GrantId(random_uuid(&OsRandom)))
            .await
            .expect("find"),
        None
    );
    assert!(
        !store
            .revoke_grant(GrantId(random_uuid(&OsRandom)), base_time())
            .await
            .expect("revoke")
    );

    let first = base_time() + Duration::seconds(5);
    assert!(
        store
            .revoke_grant(grant.id, first)
            .await
            .expect("revoke_grant")
    );
    assert!(
        store
            .revoke_grant(grant.id, first + Duration::seconds(5))
            .await
            .expect("revoke")
    );
    let revoked = store
        .find_grant(grant.id)
        .await
        .expect("find")
        .expect("grant");
    assert_eq!(
        revoked.revoked_at,
        Some(first),
        "revoking twice keeps the first time"
    );
}

async fn check_codes(store: &dyn crate::TokenStore) {
    let grant = new_grant();
    store.insert_grant(&grant).await.expect("insert_grant");
    let code = new_code(&grant);
    store.insert_code(&code).await.expect("insert_code");
    assert!(
        store.insert_code(&code).await.is_err(),
        "insert_code must refuse an existing hash"
    );

    assert_eq!(
        store.take_code(&code.hash).await.expect("take_code"),
        CodeTake::Taken(code.clone())
    );
    assert_eq!(
        store.take_code(&code.hash).await.expect("take_code"),
        CodeTake::AlreadyTaken {
            grant_id: grant.id,
            client_id: grant.client_id.clone()
        },
        "a consumed code must be remembered with its grant"
    );
    let unknown = AuthorizationCode::generate(&OsRandom).hash(&hasher());
    assert_eq!(
        store.take_code(&unknown).await.expect("take_code"),
        CodeTake::NotFound
    );
}

async fn check_access_tokens(store: &dyn crate::TokenStore) {
    let grant = new_grant();
    store.insert_grant(&grant).await.expect("insert_grant");
    let token = new_access(&grant);
    store
        .insert_access_token(&token)
        .await
        .expect("insert_access_token");
    assert!(
        store.insert_access_token(&token).await.is_err(),
        "duplicate access token hash"
    );
    assert_eq!(
        store.find_access_token(&token.hash).await.expect("find"),
        Some(token.clone())
    );
    let unknown = AccessToken::generate(&OsRandom).hash(&hasher());
    assert_eq!(store.find_access_token(&unknown).await.expect("find"), None);

    store
        .revoke_grant(grant.id, base_time())
        .await
        .expect("revoke_grant");
    let found = store
        .find_access_token(&token.hash)
        .await
        .expect("find")
        .expect("token");
    assert!(
        found.revoked,
        "revoking a grant must revoke its access tokens"
    );

    // A token inserted after its grant was revoked (a race between a code
    // exchange and a code replay) must read back revoked too.
    let late = new_access(&grant);
    store
        .insert_access_token(&late)
        .await
        .expect("insert_access_token");
    let found = store
        .find_access_token(&late.hash)
        .await
        .expect("find")
        .expect("token");
    assert!(
        found.revoked,
        "tokens of a revoked grant must read back revoked"
    );
}

async fn check_refresh_tokens(store: &dyn crate::TokenStore) {
    let grant = new_grant();
    store.insert_grant(&grant).await.expect("insert_grant");
    let token = RefreshTokenRecord {
        expires_at: Some(base_time() + Duration::days(30)),
        ..new_refresh(&grant)
    };
    store
        .insert_refresh_token(&token)
        .await
        .expect("insert_refresh_token");
    assert!(
        store.insert_refresh_token(&token).await.is_err(),
        "duplicate refresh token hash"
    );
    assert_eq!(
        store.find_refresh_token(&token.hash).await.expect("find"),
        Some(token.clone())
    );

    let successor = RefreshTokenRecord {
        predecessor: Some(token.hash),
        ..new_refresh(&grant)
    };
    let at = base_time() + Duration::seconds(60);
    assert_eq!(
        store
            .rotate_refresh_token(&token.hash, &successor, &new_access(&grant), at)
            .await
            .expect("rotate"),
        Rotation::Rotated
    );
    let old = store
        .find_refresh_token(&token.hash)
        .await
        .expect("find")
        .expect("old token");
    assert_eq!(
        old.state,
        RefreshState::Rotated {
            at,
            successor: successor.hash,
            successor_used_at: None,
        }
    );
    let new = store
        .find_refresh_token(&successor.hash)
        .await
        .expect("find")
        .expect("successor");
    assert_eq!(new.state, RefreshState::Active);
    assert_eq!(
        new.predecessor,
        Some(token.hash),
        "a successor reads back naming its predecessor"
    );
    assert!(!new.revoked);

    let other = new_refresh(&grant);
    assert_eq!(
        store
            .rotate_refresh_token(&token.hash, &other, &new_access(&grant), at)
            .await
            .expect("rotate"),
        Rotation::AlreadyRotated {
            at,
            successor: successor.hash
        },
        "a rotated token must not rotate again"
    );
    assert_eq!(
        store.find_refresh_token(&other.hash).await.expect("find"),
        None,
        "loser's successor must not be stored"
    );

    let unknown = RefreshToken::generate(&OsRandom).hash(&hasher());
    assert_eq!(
        store
            .rotate_refresh_token(&unknown, &other, &new_access(&grant), at)
            .await
            .expect("rotate"),
        Rotation::NotFound
    );

    store
        .revoke_grant(grant.id, at)
        .await
        .expect("revoke_grant");
    assert!(
        store
            .find_refresh_token(&successor.hash)
            .await
            .expect("find")
            .expect("t")
            .revoked
    );
    assert!(
        store
            .find_refresh_token(&token.hash)
            .await
            .expect("find")
            .expect("t")
            .revoked
    );
    assert_eq!(
        store
            .rotate_refresh_token(&successor.hash, &other, &new_access(&grant), at)
            .await
            .expect("rotate"),
        Rotation::Revoked,
        "a token of a revoked grant must not rotate"
    );
    assert_eq!(
        store.find_refresh_token(&other.hash).await.expect("find"),
        None
    );
}

async fn check_concurrent_code_take(store: Arc<dyn crate::TokenStore>) {
    let grant = new_grant();
    store.insert_grant(&grant).await.expect("insert_grant");
    let code = new_code(&grant);
    store.insert_code(&code).await.expect("insert_code");
    let tasks: Vec<_> = (0..RACERS)
        .map(|_| {
            let store = store.clone();
            let hash = code.hash;
            tokio::spawn(async move { store.take_code(&hash).await })
        })
        .collect();
    let mut taken = 0;
    for task in tasks {
        match task.await.expect("task").expect("take_code") {
            CodeTake::Taken(_) => taken += 1,
            CodeTake::AlreadyTaken { grant_id, .. } => assert_eq!(grant_id, grant.id),
            CodeTake::NotFound => panic!("a stored code must not be reported missing"),
        }
    }
    assert_eq!(taken, 1, "exactly one concurrent caller may take a code");
}

async fn check_concurrent_rotation(store: Arc<dyn crate::TokenStore>) {
    let grant = new_grant();
    store.insert_grant(&grant).await.expect("insert_grant");
    let token = new_refresh(&grant);
    store
        .insert_refresh_token(&token)
        .await
        .expect("insert_refresh_token");
    let successors: Vec<_> = (0..RACERS)
        .map(|_| (new_refresh(&grant), new_access(&grant)))
        .collect();
    let tasks: Vec<_> = successors
        .iter()
        .cloned()
        .map(|(successor, access)| {
            let store = store.clone();
            let old = token.hash;
            tokio::spawn(async move {
                store
                    .rotate_refresh_token(&old, &successor, &access, base_time())
                    .await
            })
        })
        .collect();
    let mut winners = Vec::new();
    let mut named = Vec::new();
    for (task, (successor, _)) in tasks.into_iter().zip(&successors) {
        match task.await.expect("task").expect("rotate_refresh_token") {
            Rotation::Rotated => winners.push(successor.hash),
            Rotation::AlreadyRotated { successor, .. } => named.push(successor),
            other => panic!("unexpected rotation result {other:?}"),
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "exactly one concurrent caller may rotate a refresh token"
    );
    assert!(
        named.iter().all(|hash| *hash == winners[0]),
        "losers must learn the winner's successor"
    );
    let mut live = 0;
    let mut access_tokens = 0;
    for (successor, access) in &successors {
        if store
            .find_refresh_token(&successor.hash)
            .await
            .expect("find")
            .is_some()
        {
            live += 1;
        }
        if store
            .find_access_token(&access.hash)
            .await
            .expect("find")
            .is_some()
        {
            access_tokens += 1;
        }
    }
    assert_eq!(live, 1, "only the winner's successor may be stored");
    assert_eq!(
        access_tokens, 1,
        "only the winner's access token may be stored"
    );
}

/// Checks every clause of [`crate::ClientRegistry`].
pub async fn check_client_registry(registry: Arc<dyn ClientRegistry>) {
    let (mut client, _) = Client::register(
        "Suite app",
        vec![
            "https://app.example/cb".into(),
            "https://app.example/cb?x=1&y=%20".into(),
        ],
        &OsRandom,
        &hasher(),
    );
    client.require_pkce = true;
    registry
        .register_client(&client)
        .await
        .expect("register_client");
    assert_eq!(
        registry.find_client(&client.id).await.expect("find_client"),
        Some(client.clone())
    );
    for policy in [
        RefreshPolicy::Reuse,
        RefreshPolicy::Rotate {
            grace: Duration::seconds(5),
        },
        RefreshPolicy::Adaptive {
            grace: Duration::seconds(45),
        },
    ] {
        let (mut own_policy, _) = Client::register(
            "Suite app with a refresh policy",
            vec!["https://app.example/cb".into()],
            &OsRandom,
            &hasher(),
        );
        own_policy.refresh_policy = Some(policy);
        registry
            .register_client(&own_policy)
            .await
            .expect("register_client");
        assert_eq!(
            registry
                .find_client(&own_policy.id)
                .await
                .expect("find_client"),
            Some(own_policy),
            "a client's own refresh policy must round-trip"
        );
    }
    assert!(
        registry.register_client(&client).await.is_err(),
        "duplicate client id"
    );
    assert_eq!(
        registry
            .find_client(&ClientId::generate(&OsRandom))
            .await
            .expect("find"),
        None
    );
}

/// Checks every clause of [`crate::AccountStore`].
pub async fn check_account_store(store: Arc<dyn AccountStore>) {
    let email = format!("owner-{}@example.com", random_uuid(&OsRandom).simple());
    let mut account = Account::new("Suite account", &email, &OsRandom);
    account.password_hash = Some("$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA".into());
    account.custom_fields = vec!["plan".into(), "source".into()];
    store
        .insert_account(&account)
        .await
        .expect("insert_account");
    assert_eq!(
        store.find_account(account.id).await.expect("find"),
        Some(account.clone())
    );
    assert_eq!(
        store.find_account_by_email(&email).await.expect("find"),
        Some(account.clone())
    );
    assert_eq!(
        store
            .find_account_by_email("nobody@example.com")
            .await
            .expect("find"),
        None
    );
    assert!(
        store.insert_account(&account).await.is_err(),
        "duplicate account id"
    );
    let twin = Account::new("Twin", &email, &OsRandom);
    assert!(
        store.insert_account(&twin).await.is_err(),
        "duplicate account e-mail"
    );
    assert_eq!(
        store
            .find_account(AccountId(random_uuid(&OsRandom)))
            .await
            .expect("find"),
        None
    );
}

/// Checks every clause of [`crate::ApiKeyStore`], the per-account limit
/// under concurrency included.
pub async fn check_api_key_store(store: Arc<dyn ApiKeyStore>) {
    let account = AccountId(random_uuid(&OsRandom));
    let (key, plaintext) = ApiKeyRecord::issue(account, "form", base_time(), &OsRandom, &hasher());
    assert!(store.insert_api_key(&key, 5).await.expect("insert_api_key"));
    assert!(
        store.insert_api_key(&key, 5).await.is_err(),
        "duplicate api key"
    );
    let found = store
        .find_api_key(&plaintext.hash(&hasher()))
        .await
        .expect("find")
        .expect("key");
    assert_eq!(found, key);

    assert!(
        store
            .set_api_key_active(key.id, false)
            .await
            .expect("switch off")
    );
    assert!(
        !store
            .find_api_key(&key.hash)
            .await
            .expect("find")
            .expect("key")
            .active
    );
    assert!(
        store
            .set_api_key_active(key.id, true)
            .await
            .expect("switch on")
    );
    assert!(
        store
            .find_api_key(&key.hash)
            .await
            .expect("find")
            .expect("key")
            .active
    );
    assert!(
        !store
            .set_api_key_active(crate::ApiKeyId(random_uuid(&OsRandom)), true)
            .await
            .expect("x")
    );

    // The limit holds when many keys are created at once.
    let tasks: Vec<_> = (0..RACERS)
        .map(|i| {
            let store = store.clone();
            let at = base_time() + Duration::seconds(i as i64 + 1);
            let (record, _) =
                ApiKeyRecord::issue(account, format!("key {i}"), at, &OsRandom, &hasher());
            tokio::spawn(async move { store.insert_api_key(&record, 5).await })
        })
        .collect();
    let mut stored = 1;
    for task in tasks {
        if task.await.expect("task").expect("insert_api_key") {
            stored += 1;
        }
    }
    assert_eq!(stored, 5, "an account may not exceed max_per_account keys");
    let listed = store.list_api_keys(account).await.expect("list_api_keys");
    assert_eq!(listed.len(), 5);
    assert_eq!(listed[0], key, "keys are listed oldest first");
    assert!(
        listed
            .windows(2)
            .all(|w| w[0].created_at <= w[1].created_at)
    );
    assert!(
        store
            .list_api_keys(AccountId(random_uuid(&OsRandom)))
            .await
            .expect("list")
            .is_empty()
    );
}

fn new_event(account: AccountId, n: usize) -> RecordedEvent {
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
        }),
        channel: IntakeChannel::Bearer {
            client_id: ClientId::new("cgid_suite"),
        },
    }
}

/// The credential of most claims the suite makes: the application whose
/// events it records.
fn suite_scope() -> IdempotencyScope {
    IdempotencyScope::Client(ClientId::new("cgid_suite"))
}

fn claim(account: AccountId, key: &str, fingerprint: u8, at: OffsetDateTime) -> IdempotencyClaim {
    IdempotencyClaim {
        account_id: account,
        scope: suite_scope(),
        key: key.into(),
        fingerprint: [fingerprint; 32],
        created_at: at,
        expires_at: at + Duration::hours(24),
    }
}

/// Checks every clause of [`crate::EventSink`]: durability of what it
/// acknowledges, all-or-nothing batches and idempotency keys, concurrent
/// retries included.
pub async fn check_event_sink(sink: Arc<dyn EventSink>) {
    let account = AccountId(random_uuid(&OsRandom));

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

    check_claim_purge(&*sink).await;
    check_concurrent_idempotent_retries(sink, account).await;
}

/// The purge of idempotency claims deletes expired claims only, and never
/// an event. Its claims are dated a quarter century before the rest of the
/// suite's, so it never touches what another check relies on.
async fn check_claim_purge(sink: &dyn EventSink) {
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

async fn check_concurrent_idempotent_retries(sink: Arc<dyn EventSink>, account: AccountId) {
    let key: Arc<str> = format!(
        "race-{}",
        Uuid::from_bytes(random_uuid(&OsRandom).into_bytes())
    )
    .into();
    let submissions: Vec<_> = (0..RACERS)
        .map(|n| EventSubmission {
            events: vec![new_event(account, 100 + n)],
            batch_uuid: None,
            idempotency: Some(claim(account, &key, 9, base_time())),
        })
        .collect();
    let tasks: Vec<_> = submissions
        .iter()
        .cloned()
        .map(|submission| {
            let sink = sink.clone();
            tokio::spawn(async move { sink.record(&submission).await })
        })
        .collect();
    let mut recorded = Vec::new();
    let mut replayed = Vec::new();
    for (task, submission) in tasks.into_iter().zip(&submissions) {
        match task.await.expect("task").expect("record") {
            RecordOutcome::Recorded => recorded.push(submission.events[0].event_uuid),
            RecordOutcome::Replayed { event_uuids, .. } => replayed.push(event_uuids),
            RecordOutcome::KeyReused => panic!("same fingerprint must not be KeyReused"),
        }
    }
    assert_eq!(recorded.len(), 1, "exactly one concurrent retry may record");
    assert!(
        replayed.iter().all(|uuids| uuids == &recorded),
        "retries must answer the first event_uuid"
    );
}
