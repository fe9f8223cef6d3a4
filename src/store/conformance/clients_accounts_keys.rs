//! The [`ClientRegistry`], [`AccountStore`] and [`ApiKeyStore`] checks one
//! caller at a time (the API-key limit under concurrency is in
//! [`super::concurrency`]).

use time::Duration;

use crate::account::{Account, AccountId};
use crate::random::{OsRandom, random_uuid};
use crate::records::api_key::ApiKeyRecord;
use crate::records::client::{Client, ClientId, PreviousSecret};
use crate::records::refresh_policy::RefreshPolicy;
use crate::secret::ClientSecret;
use crate::store::{AccountStore, ApiKeyStore, ClientRegistry};

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
    // Switched off, with a previous secret: every field reads back.
    let (mut switched_off, _) = Client::register("Suite off", vec![], &OsRandom, &hasher());
    switched_off.active = false;
    switched_off.previous_secret = Some(PreviousSecret {
        hash: ClientSecret::generate(&OsRandom).hash(&hasher()),
        valid_until: base_time(),
    });
    registry
        .register_client(&switched_off)
        .await
        .expect("register_client");
    assert_eq!(
        registry
            .find_client(&switched_off.id)
            .await
            .expect("find_client"),
        Some(switched_off),
        "a client must read back whole"
    );
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

/// A client's secret rotates with the old one kept as the previous, its
/// redirect URIs are replaced, it switches off and on; each change reads
/// back whole, leaves other clients alone, and reports an unknown client.
pub(super) async fn check_client_lifecycle(registry: &dyn ClientRegistry) {
    let (client, _) = Client::register(
        "Suite lifecycle app",
        vec!["https://app.example/cb".into()],
        &OsRandom,
        &hasher(),
    );
    let (bystander, _) = Client::register("Suite bystander", vec![], &OsRandom, &hasher());
    for registered in [&client, &bystander] {
        registry
            .register_client(registered)
            .await
            .expect("register_client");
    }
    let find = |id: ClientId| async move {
        registry
            .find_client(&id)
            .await
            .expect("find_client")
            .expect("the client")
    };

    let second = ClientSecret::generate(&OsRandom).hash(&hasher());
    let until = base_time() + Duration::hours(24);
    assert!(
        registry
            .rotate_client_secret(&client.id, &second, until)
            .await
            .expect("rotate_client_secret")
    );
    let mut expected = Client {
        secret_hash: second,
        previous_secret: Some(PreviousSecret {
            hash: client.secret_hash,
            valid_until: until,
        }),
        ..client.clone()
    };
    assert_eq!(
        find(client.id.clone()).await,
        expected,
        "a rotation keeps the old secret as the previous one"
    );
    // A second rotation replaces the previous secret with the second one.
    let third = ClientSecret::generate(&OsRandom).hash(&hasher());
    let later = until + Duration::hours(1);
    assert!(
        registry
            .rotate_client_secret(&client.id, &third, later)
            .await
            .expect("rotate_client_secret")
    );
    expected.secret_hash = third;
    expected.previous_secret = Some(PreviousSecret {
        hash: second,
        valid_until: later,
    });
    assert_eq!(find(client.id.clone()).await, expected);

    let uris = vec![
        "https://app.example/new".to_owned(),
        "com.example.app:/cb".to_owned(),
    ];
    assert!(
        registry
            .set_client_redirect_uris(&client.id, &uris)
            .await
            .expect("set_client_redirect_uris")
    );
    expected.redirect_uris = uris;
    assert_eq!(find(client.id.clone()).await, expected);

    assert!(
        registry
            .set_client_active(&client.id, false)
            .await
            .expect("set_client_active")
    );
    expected.active = false;
    assert_eq!(find(client.id.clone()).await, expected, "switched off");
    assert!(
        registry
            .set_client_active(&client.id, true)
            .await
            .expect("set_client_active")
    );
    expected.active = true;
    assert_eq!(find(client.id.clone()).await, expected, "switched on");

    assert_eq!(
        find(bystander.id.clone()).await,
        bystander,
        "other clients are left alone"
    );
    let unknown = ClientId::generate(&OsRandom);
    assert!(
        !registry
            .rotate_client_secret(&unknown, &second, until)
            .await
            .expect("rotate")
    );
    assert!(
        !registry
            .set_client_redirect_uris(&unknown, &[])
            .await
            .expect("set")
    );
    assert!(
        !registry
            .set_client_active(&unknown, false)
            .await
            .expect("set")
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
            .set_api_key_active(
                crate::records::api_key::ApiKeyId(random_uuid(&OsRandom)),
                true
            )
            .await
            .expect("x")
    );

    (account, key)
}
