//! The [`ClientRegistry`], [`AccountStore`] and [`ApiKeyStore`] checks one
//! caller at a time (the API-key limit under concurrency is in
//! [`super::concurrency`]).

use time::Duration;

use crate::{
    Account, AccountId, AccountStore, ApiKeyRecord, ApiKeyStore, Client, ClientId, ClientRegistry,
    OsRandom, RefreshPolicy, random_uuid,
};

use super::fixtures::{base_time, hasher};

/// Clients read back whole, their own refresh policy included, and are
/// unique by id.
pub(super) async fn check_clients(registry: &dyn ClientRegistry) {
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

/// Accounts read back whole by id and by e-mail, and are unique by both.
pub(super) async fn check_accounts(store: &dyn AccountStore) {
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

/// API keys are unique, read back whole by hash, and switch on and off.
/// Returns the account and the one key it now holds, for
/// [`super::concurrency::check_concurrent_key_limit`].
pub(super) async fn check_api_keys(store: &dyn ApiKeyStore) -> (AccountId, ApiKeyRecord) {
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

    (account, key)
}
