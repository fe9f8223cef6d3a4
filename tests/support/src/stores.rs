//! Stores that misbehave on purpose: one whose backend is down, one that
//! fails a chosen operation once, one that holds a lookup in flight.

/// A backend that is down: every call fails with `StoreError::Backend`.
pub struct DownStore;

fn down<T>() -> Result<T, conversion_gateway::StoreError> {
    Err(conversion_gateway::StoreError::backend(
        "reach the database",
        std::io::Error::other("connection refused to db.internal:5432"),
    ))
}

#[async_trait::async_trait]
impl conversion_gateway::EventSink for DownStore {
    async fn record(
        &self,
        _: &conversion_gateway::EventSubmission,
    ) -> Result<conversion_gateway::RecordOutcome, conversion_gateway::StoreError> {
        down()
    }
    async fn check_claim(
        &self,
        _: &conversion_gateway::IdempotencyClaim,
    ) -> Result<Option<conversion_gateway::RecordOutcome>, conversion_gateway::StoreError> {
        down()
    }
    async fn find_event(
        &self,
        _: uuid::Uuid,
    ) -> Result<Option<conversion_gateway::RecordedEvent>, conversion_gateway::StoreError> {
        down()
    }
    async fn purge_expired_claims(
        &self,
        _: time::OffsetDateTime,
        _: usize,
    ) -> Result<usize, conversion_gateway::StoreError> {
        down()
    }
}

#[async_trait::async_trait]
impl conversion_gateway::TokenStore for DownStore {
    async fn insert_grant(
        &self,
        _: &conversion_gateway::Grant,
    ) -> Result<(), conversion_gateway::StoreError> {
        down()
    }
    async fn find_grant(
        &self,
        _: conversion_gateway::GrantId,
    ) -> Result<Option<conversion_gateway::Grant>, conversion_gateway::StoreError> {
        down()
    }
    async fn revoke_grant(
        &self,
        _: conversion_gateway::GrantId,
        _: time::OffsetDateTime,
    ) -> Result<bool, conversion_gateway::StoreError> {
        down()
    }
    async fn list_grants(
        &self,
        _: conversion_gateway::AccountId,
    ) -> Result<Vec<conversion_gateway::Grant>, conversion_gateway::StoreError> {
        down()
    }
    async fn insert_code(
        &self,
        _: &conversion_gateway::CodeRecord,
    ) -> Result<(), conversion_gateway::StoreError> {
        down()
    }
    async fn take_code(
        &self,
        _: &conversion_gateway::SecretHash,
    ) -> Result<conversion_gateway::CodeTake, conversion_gateway::StoreError> {
        down()
    }
    async fn insert_access_token(
        &self,
        _: &conversion_gateway::AccessTokenRecord,
    ) -> Result<(), conversion_gateway::StoreError> {
        down()
    }
    async fn find_access_token(
        &self,
        _: &conversion_gateway::SecretHash,
    ) -> Result<Option<conversion_gateway::AccessTokenRecord>, conversion_gateway::StoreError> {
        down()
    }
    async fn insert_refresh_token(
        &self,
        _: &conversion_gateway::RefreshTokenRecord,
    ) -> Result<(), conversion_gateway::StoreError> {
        down()
    }
    async fn find_refresh_token(
        &self,
        _: &conversion_gateway::SecretHash,
    ) -> Result<Option<conversion_gateway::RefreshTokenRecord>, conversion_gateway::StoreError>
    {
        down()
    }
    async fn find_code(
        &self,
        _: &conversion_gateway::SecretHash,
    ) -> Result<conversion_gateway::CodeLookup, conversion_gateway::StoreError> {
        down()
    }
    async fn redeem_code(
        &self,
        _: &conversion_gateway::SecretHash,
        _: &conversion_gateway::RefreshTokenRecord,
        _: &conversion_gateway::AccessTokenRecord,
    ) -> Result<conversion_gateway::CodeTake, conversion_gateway::StoreError> {
        down()
    }
    async fn rotate_refresh_token(
        &self,
        _: &conversion_gateway::SecretHash,
        _: &conversion_gateway::RefreshTokenRecord,
        _: &conversion_gateway::AccessTokenRecord,
        _: time::OffsetDateTime,
    ) -> Result<conversion_gateway::Rotation, conversion_gateway::StoreError> {
        down()
    }
    async fn purge_expired(
        &self,
        _: time::OffsetDateTime,
        _: usize,
    ) -> Result<usize, conversion_gateway::StoreError> {
        down()
    }
}

/// A token store that works (in memory) but fails the next call of the
/// operations it is told to, once each: a transient outage at one step.
#[derive(Default)]
pub struct FlakyTokens {
    inner: conversion_gateway::MemoryTokenStore,
    armed: std::sync::Mutex<Vec<&'static str>>,
}

impl FlakyTokens {
    /// Makes the next call of `operation` (a `TokenStore` method's name)
    /// fail with `StoreError::Backend`.
    pub fn fail_next(&self, operation: &'static str) {
        self.armed.lock().unwrap().push(operation);
    }

    /// Whether a failure armed for `operation` is still waiting: no call
    /// of it was made since [`FlakyTokens::fail_next`].
    pub fn is_armed(&self, operation: &'static str) -> bool {
        self.armed.lock().unwrap().contains(&operation)
    }

    fn trip(&self, operation: &'static str) -> Result<(), conversion_gateway::StoreError> {
        let mut armed = self.armed.lock().unwrap();
        match armed.iter().position(|armed| *armed == operation) {
            Some(at) => {
                armed.remove(at);
                down()
            }
            None => Ok(()),
        }
    }
}

#[async_trait::async_trait]
impl conversion_gateway::TokenStore for FlakyTokens {
    async fn insert_grant(
        &self,
        grant: &conversion_gateway::Grant,
    ) -> Result<(), conversion_gateway::StoreError> {
        self.trip("insert_grant")?;
        self.inner.insert_grant(grant).await
    }
    async fn find_grant(
        &self,
        id: conversion_gateway::GrantId,
    ) -> Result<Option<conversion_gateway::Grant>, conversion_gateway::StoreError> {
        self.trip("find_grant")?;
        self.inner.find_grant(id).await
    }
    async fn revoke_grant(
        &self,
        id: conversion_gateway::GrantId,
        at: time::OffsetDateTime,
    ) -> Result<bool, conversion_gateway::StoreError> {
        self.trip("revoke_grant")?;
        self.inner.revoke_grant(id, at).await
    }
    async fn list_grants(
        &self,
        account: conversion_gateway::AccountId,
    ) -> Result<Vec<conversion_gateway::Grant>, conversion_gateway::StoreError> {
        self.trip("list_grants")?;
        self.inner.list_grants(account).await
    }
    async fn insert_code(
        &self,
        code: &conversion_gateway::CodeRecord,
    ) -> Result<(), conversion_gateway::StoreError> {
        self.trip("insert_code")?;
        self.inner.insert_code(code).await
    }
    async fn find_code(
        &self,
        hash: &conversion_gateway::SecretHash,
    ) -> Result<conversion_gateway::CodeLookup, conversion_gateway::StoreError> {
        self.trip("find_code")?;
        self.inner.find_code(hash).await
    }
    async fn take_code(
        &self,
        hash: &conversion_gateway::SecretHash,
    ) -> Result<conversion_gateway::CodeTake, conversion_gateway::StoreError> {
        self.trip("take_code")?;
        self.inner.take_code(hash).await
    }
    async fn redeem_code(
        &self,
        hash: &conversion_gateway::SecretHash,
        refresh: &conversion_gateway::RefreshTokenRecord,
        access: &conversion_gateway::AccessTokenRecord,
    ) -> Result<conversion_gateway::CodeTake, conversion_gateway::StoreError> {
        self.trip("redeem_code")?;
        self.inner.redeem_code(hash, refresh, access).await
    }
    async fn insert_access_token(
        &self,
        token: &conversion_gateway::AccessTokenRecord,
    ) -> Result<(), conversion_gateway::StoreError> {
        self.trip("insert_access_token")?;
        self.inner.insert_access_token(token).await
    }
    async fn find_access_token(
        &self,
        hash: &conversion_gateway::SecretHash,
    ) -> Result<Option<conversion_gateway::AccessTokenRecord>, conversion_gateway::StoreError> {
        self.trip("find_access_token")?;
        self.inner.find_access_token(hash).await
    }
    async fn insert_refresh_token(
        &self,
        token: &conversion_gateway::RefreshTokenRecord,
    ) -> Result<(), conversion_gateway::StoreError> {
        self.trip("insert_refresh_token")?;
        self.inner.insert_refresh_token(token).await
    }
    async fn find_refresh_token(
        &self,
        hash: &conversion_gateway::SecretHash,
    ) -> Result<Option<conversion_gateway::RefreshTokenRecord>, conversion_gateway::StoreError>
    {
        self.trip("find_refresh_token")?;
        self.inner.find_refresh_token(hash).await
    }
    async fn rotate_refresh_token(
        &self,
        old: &conversion_gateway::SecretHash,
        successor: &conversion_gateway::RefreshTokenRecord,
        access: &conversion_gateway::AccessTokenRecord,
        at: time::OffsetDateTime,
    ) -> Result<conversion_gateway::Rotation, conversion_gateway::StoreError> {
        self.trip("rotate_refresh_token")?;
        self.inner
            .rotate_refresh_token(old, successor, access, at)
            .await
    }
    async fn purge_expired(
        &self,
        cutoff: time::OffsetDateTime,
        limit: usize,
    ) -> Result<usize, conversion_gateway::StoreError> {
        self.trip("purge_expired")?;
        self.inner.purge_expired(cutoff, limit).await
    }
}

/// An API key store (in memory) whose next `find_api_key`, once armed by
/// [`HeldApiKeys::hold_next_lookup`], reads the store and then waits for the
/// test to release it: a request in flight with what it read, for races
/// with a switch, interleaved exactly and without sleeping.
#[derive(Default)]
pub struct HeldApiKeys {
    inner: conversion_gateway::MemoryApiKeyStore,
    armed: std::sync::Mutex<Option<Hold>>,
}

/// The store's side of a held lookup.
struct Hold {
    read: tokio::sync::oneshot::Sender<()>,
    release: tokio::sync::oneshot::Receiver<()>,
}

/// The test's side of a held lookup.
pub struct HeldLookup {
    read: tokio::sync::oneshot::Receiver<()>,
    release: tokio::sync::oneshot::Sender<()>,
}

impl HeldApiKeys {
    /// Holds the next `find_api_key` after it has read the store, until the
    /// returned [`HeldLookup`] is released (or dropped).
    pub fn hold_next_lookup(&self) -> HeldLookup {
        let (read_sender, read) = tokio::sync::oneshot::channel();
        let (release, release_receiver) = tokio::sync::oneshot::channel();
        *self.armed.lock().unwrap() = Some(Hold {
            read: read_sender,
            release: release_receiver,
        });
        HeldLookup { read, release }
    }
}

impl HeldLookup {
    /// Waits until the held lookup has read the store.
    pub async fn until_read(&mut self) {
        (&mut self.read)
            .await
            .expect("the held lookup ran and read the store");
    }

    /// Lets the held lookup return what it read.
    pub fn release(self) {
        // The lookup may be gone (its request dropped): nothing to wake.
        let _ = self.release.send(());
    }
}

#[async_trait::async_trait]
impl conversion_gateway::ApiKeyStore for HeldApiKeys {
    async fn insert_api_key(
        &self,
        key: &conversion_gateway::ApiKeyRecord,
        max_per_account: usize,
    ) -> Result<bool, conversion_gateway::StoreError> {
        self.inner.insert_api_key(key, max_per_account).await
    }
    async fn find_api_key(
        &self,
        hash: &conversion_gateway::SecretHash,
    ) -> Result<Option<conversion_gateway::ApiKeyRecord>, conversion_gateway::StoreError> {
        let found = self.inner.find_api_key(hash).await;
        let hold = self.armed.lock().unwrap().take();
        if let Some(Hold { read, release }) = hold {
            let _ = read.send(());
            // Released or dropped: either way the lookup goes on.
            let _ = release.await;
        }
        found
    }
    async fn set_api_key_active(
        &self,
        id: conversion_gateway::ApiKeyId,
        active: bool,
    ) -> Result<bool, conversion_gateway::StoreError> {
        self.inner.set_api_key_active(id, active).await
    }
    async fn list_api_keys(
        &self,
        account: conversion_gateway::AccountId,
    ) -> Result<Vec<conversion_gateway::ApiKeyRecord>, conversion_gateway::StoreError> {
        self.inner.list_api_keys(account).await
    }
}
