//! The [`TokenStore`](crate::TokenStore) checks one caller at a time:
//! grants, codes, access and refresh tokens, redemption and rotation, and
//! that a redemption or rotation failing part-way changes nothing.

use time::Duration;

use crate::account::AccountId;
use crate::random::{OsRandom, random_uuid};
use crate::records::grant::{Grant, GrantId};
use crate::records::tokens::{RefreshState, RefreshTokenRecord};
use crate::secret::{AccessToken, AuthorizationCode, RefreshToken};
use crate::store::{CodeLookup, CodeTake, Rotation, StoreError};

use super::fixtures::{base_time, hasher, new_access, new_code, new_grant, new_refresh};

/// Grants read back whole, are unique by id, and keep their first
/// revocation time.
pub(super) async fn check_grants(store: &dyn crate::store::TokenStore) {
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

/// A code is unique by hash, taken once, and remembered with its grant
/// once taken.
pub(super) async fn check_codes(store: &dyn crate::store::TokenStore) {
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

/// Access tokens are unique by hash, read back whole, and read back
/// revoked once their grant is, those inserted later included.
pub(super) async fn check_access_tokens(store: &dyn crate::store::TokenStore) {
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

/// Refresh tokens rotate once, name their successor and predecessor, and
/// stop rotating once their grant is revoked.
pub(super) async fn check_refresh_tokens(store: &dyn crate::store::TokenStore) {
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

    // The successor goes in as the grant's live token: active, whatever
    // state the record handed to the store carries (the SQL stores have no
    // column to take it from; the memory store must not keep it either).
    let successor = RefreshTokenRecord {
        predecessor: Some(token.hash),
        state: RefreshState::Rotated {
            at: base_time(),
            successor: token.hash,
            successor_used_at: None,
        },
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

/// A rotated token reads back when its successor was first used (rotated
/// in turn): the adaptive refresh policy decides on it.
pub(super) async fn check_successor_use(store: &dyn crate::store::TokenStore) {
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
    assert_eq!(
        store
            .find_grant(grant.id)
            .await
            .expect("find_grant")
            .expect("the grant")
            .last_refreshed_at,
        Some(used_at),
        "a rotation must set its grant's last_refreshed_at"
    );
    assert_eq!(found.predecessor, None);
}

/// A code redeems once, storing both of its tokens; a refused redemption
/// stores neither, and a code taken by a refused exchange cannot redeem.
pub(super) async fn check_code_redemption(store: &dyn crate::store::TokenStore) {
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
pub(super) async fn check_redemption_fails_whole(store: &dyn crate::store::TokenStore) {
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
pub(super) async fn check_rotation_fails_whole(store: &dyn crate::store::TokenStore) {
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
        let failed = store
            .rotate_refresh_token(&token.hash, successor, access, base_time())
            .await;
        assert!(
            matches!(failed, Err(StoreError::Duplicate { .. })),
            "a rotation failing at {step} must be a duplicate: {failed:?}"
        );
        assert_eq!(
            store
                .find_grant(grant.id)
                .await
                .expect("find_grant")
                .and_then(|g| g.last_refreshed_at),
            grant.last_refreshed_at,
            "a rotation failing at {step} must not note the refresh on the grant"
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

/// An account's unrevoked grants are listed oldest first; another
/// account's grants and revoked ones are not.
pub(super) async fn check_grant_listing(store: &dyn crate::store::TokenStore) {
    let first = new_grant();
    let account = first.account_id;
    let second = Grant {
        id: GrantId(random_uuid(&OsRandom)),
        created_at: base_time() + Duration::seconds(1),
        last_refreshed_at: Some(base_time() + Duration::days(1)),
        ..first.clone()
    };
    let revoked = Grant {
        id: GrantId(random_uuid(&OsRandom)),
        created_at: base_time() + Duration::seconds(2),
        ..first.clone()
    };
    // Inserted out of order: the listing orders them.
    for grant in [&second, &revoked, &first, &new_grant()] {
        store.insert_grant(grant).await.expect("insert_grant");
    }
    store
        .revoke_grant(revoked.id, base_time() + Duration::seconds(3))
        .await
        .expect("revoke_grant");
    assert_eq!(
        store.list_grants(account).await.expect("list_grants"),
        [first, second],
        "list_grants: the account's unrevoked grants, oldest first, whole"
    );
    assert_eq!(
        store
            .list_grants(AccountId(random_uuid(&OsRandom)))
            .await
            .expect("list_grants"),
        []
    );
}
