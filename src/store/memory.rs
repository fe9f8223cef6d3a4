//! In-memory stores: for tests and for small hosts that keep nothing across
//! restarts.
//!
//! Each is a newtype over a `Mutex` of its state. The lock is never held
//! across an `.await` (no method awaits while holding it), so each method is
//! one atomic step, which is what makes the atomic operations of the contract
//! hold.
//!
//! Layout: this file holds the token store and the registries of clients,
//! accounts and API keys; [`event_sink`] the event sink and feed, whose
//! events live in the compact [`event_log`]; `webhooks` the webhook store.

mod event_log;
pub(crate) mod event_sink;
mod fresh_pages;
pub(crate) mod webhooks;

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use time::OffsetDateTime;

use crate::account::{Account, AccountId};
use crate::records::api_key::{ApiKeyId, ApiKeyRecord};
use crate::records::client::{Client, ClientId, PreviousSecret};
use crate::records::grant::{Grant, GrantId};
use crate::records::tokens::{AccessTokenRecord, CodeRecord, RefreshState, RefreshTokenRecord};
use crate::secret::SecretHash;
use crate::store::error::StoreError;
use crate::store::{
    AccountStore, ApiKeyStore, ClientRegistry, CodeLookup, CodeTake, Rotation, TokenStore,
};

/// Locks a mutex, ignoring poisoning: every critical section below leaves
/// the state consistent before anything that could panic.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[derive(Default)]
struct TokenState {
    grants: HashMap<GrantId, Grant>,
    /// Codes, with whether they have been taken (the tombstone).
    codes: HashMap<SecretHash, (CodeRecord, bool)>,
    access: HashMap<SecretHash, AccessTokenRecord>,
    refresh: HashMap<SecretHash, RefreshTokenRecord>,
}

impl TokenState {
    /// Refuses new tokens whose hashes are taken, before anything changes.
    fn check_new_tokens(
        &self,
        refresh: Option<&RefreshTokenRecord>,
        access: &AccessTokenRecord,
    ) -> Result<(), StoreError> {
        if refresh.is_some_and(|refresh| self.refresh.contains_key(&refresh.hash)) {
            return Err(StoreError::Duplicate {
                what: "refresh token",
            });
        }
        if self.access.contains_key(&access.hash) {
            return Err(StoreError::Duplicate {
                what: "access token",
            });
        }
        Ok(())
    }

    /// Stores new tokens that [`TokenState::check_new_tokens`] accepted, as
    /// active and unrevoked whatever their records say.
    fn store_new_tokens(
        &mut self,
        refresh: Option<&RefreshTokenRecord>,
        access: &AccessTokenRecord,
    ) {
        if let Some(refresh) = refresh {
            self.refresh.insert(
                refresh.hash,
                RefreshTokenRecord {
                    revoked: false,
                    state: RefreshState::Active,
                    ..refresh.clone()
                },
            );
        }
        self.access.insert(
            access.hash,
            AccessTokenRecord {
                revoked: false,
                ..access.clone()
            },
        );
    }

    fn grant_revoked(&self, id: GrantId) -> bool {
        // A token whose grant is unknown is treated as revoked: it cannot be
        // traced to a live authorization.
        self.grants
            .get(&id)
            .is_none_or(|grant| grant.revoked_at.is_some())
    }
}

/// [`TokenStore`] in memory.
#[derive(Default)]
pub struct MemoryTokenStore {
    state: Mutex<TokenState>,
}

impl MemoryTokenStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl TokenStore for MemoryTokenStore {
    async fn insert_grant(&self, grant: &Grant) -> Result<(), StoreError> {
        let mut state = lock(&self.state);
        if state.grants.contains_key(&grant.id) {
            return Err(StoreError::Duplicate { what: "grant" });
        }
        state.grants.insert(grant.id, grant.clone());
        Ok(())
    }

    async fn find_grant(&self, id: GrantId) -> Result<Option<Grant>, StoreError> {
        Ok(lock(&self.state).grants.get(&id).cloned())
    }

    async fn revoke_grant(&self, id: GrantId, at: OffsetDateTime) -> Result<bool, StoreError> {
        let mut state = lock(&self.state);
        match state.grants.get_mut(&id) {
            Some(grant) => {
                grant.revoked_at.get_or_insert(at);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn list_grants(&self, account: AccountId) -> Result<Vec<Grant>, StoreError> {
        let state = lock(&self.state);
        let mut grants: Vec<Grant> = state
            .grants
            .values()
            .filter(|grant| grant.account_id == account && grant.revoked_at.is_none())
            .cloned()
            .collect();
        grants.sort_by_key(|grant| (grant.created_at, grant.id));
        Ok(grants)
    }

    async fn insert_code(&self, code: &CodeRecord) -> Result<(), StoreError> {
        let mut state = lock(&self.state);
        if state.codes.contains_key(&code.hash) {
            return Err(StoreError::Duplicate {
                what: "authorization code",
            });
        }
        state.codes.insert(code.hash, (code.clone(), false));
        Ok(())
    }

    async fn find_code(&self, hash: &SecretHash) -> Result<CodeLookup, StoreError> {
        Ok(match lock(&self.state).codes.get(hash) {
            None => CodeLookup::NotFound,
            Some((record, false)) => CodeLookup::Unused(record.clone()),
            Some((record, true)) => CodeLookup::Used {
                grant_id: record.grant_id,
                client_id: record.client_id.clone(),
            },
        })
    }

    async fn redeem_code(
        &self,
        hash: &SecretHash,
        refresh: &RefreshTokenRecord,
        access: &AccessTokenRecord,
    ) -> Result<CodeTake, StoreError> {
        let mut state = lock(&self.state);
        // Every check before the first change: all or nothing.
        let record = match state.codes.get(hash) {
            None => return Ok(CodeTake::NotFound),
            Some((record, true)) => {
                return Ok(CodeTake::AlreadyTaken {
                    grant_id: record.grant_id,
                    client_id: record.client_id.clone(),
                });
            }
            Some((record, false)) => record.clone(),
        };
        state.check_new_tokens(Some(refresh), access)?;
        if let Some((_, taken)) = state.codes.get_mut(hash) {
            *taken = true;
        }
        state.store_new_tokens(Some(refresh), access);
        Ok(CodeTake::Taken(record))
    }

    async fn take_code(&self, hash: &SecretHash) -> Result<CodeTake, StoreError> {
        let mut state = lock(&self.state);
        Ok(match state.codes.get_mut(hash) {
            None => CodeTake::NotFound,
            Some((record, taken @ false)) => {
                *taken = true;
                CodeTake::Taken(record.clone())
            }
            Some((record, true)) => CodeTake::AlreadyTaken {
                grant_id: record.grant_id,
                client_id: record.client_id.clone(),
            },
        })
    }

    async fn insert_access_token(&self, token: &AccessTokenRecord) -> Result<(), StoreError> {
        let mut state = lock(&self.state);
        if state.access.contains_key(&token.hash) {
            return Err(StoreError::Duplicate {
                what: "access token",
            });
        }
        state.access.insert(
            token.hash,
            AccessTokenRecord {
                revoked: false,
                ..token.clone()
            },
        );
        Ok(())
    }

    async fn find_access_token(
        &self,
        hash: &SecretHash,
    ) -> Result<Option<AccessTokenRecord>, StoreError> {
        let state = lock(&self.state);
        Ok(state.access.get(hash).map(|record| AccessTokenRecord {
            revoked: state.grant_revoked(record.grant_id),
            ..record.clone()
        }))
    }

    async fn insert_refresh_token(&self, token: &RefreshTokenRecord) -> Result<(), StoreError> {
        let mut state = lock(&self.state);
        if state.refresh.contains_key(&token.hash) {
            return Err(StoreError::Duplicate {
                what: "refresh token",
            });
        }
        state.refresh.insert(
            token.hash,
            RefreshTokenRecord {
                revoked: false,
                ..token.clone()
            },
        );
        Ok(())
    }

    async fn find_refresh_token(
        &self,
        hash: &SecretHash,
    ) -> Result<Option<RefreshTokenRecord>, StoreError> {
        let state = lock(&self.state);
        Ok(state.refresh.get(hash).map(|record| {
            let mut record = RefreshTokenRecord {
                revoked: state.grant_revoked(record.grant_id),
                ..record.clone()
            };
            if let RefreshState::Rotated {
                successor,
                successor_used_at,
                ..
            } = &mut record.state
            {
                *successor_used_at = state.refresh.get(successor).and_then(|s| match s.state {
                    RefreshState::Rotated { at, .. } => Some(at),
                    RefreshState::Active => None,
                });
            }
            record
        }))
    }

    async fn rotate_refresh_token(
        &self,
        old: &SecretHash,
        successor: &RefreshTokenRecord,
        access: &AccessTokenRecord,
        at: OffsetDateTime,
    ) -> Result<Rotation, StoreError> {
        let mut state = lock(&self.state);
        // Every check before the first change: all or nothing.
        let Some(record) = state.refresh.get(old) else {
            return Ok(Rotation::NotFound);
        };
        if state.grant_revoked(record.grant_id) {
            return Ok(Rotation::Revoked);
        }
        if let RefreshState::Rotated { at, successor, .. } = &record.state {
            return Ok(Rotation::AlreadyRotated {
                at: *at,
                successor: *successor,
            });
        }
        state.check_new_tokens(Some(successor), access)?;
        let grant_id = record.grant_id;
        if let Some(record) = state.refresh.get_mut(old) {
            record.state = RefreshState::Rotated {
                at,
                successor: successor.hash,
                successor_used_at: None,
            };
        }
        if let Some(grant) = state.grants.get_mut(&grant_id) {
            grant.last_refreshed_at = Some(at);
        }
        state.store_new_tokens(Some(successor), access);
        Ok(Rotation::Rotated)
    }

    async fn purge_expired(
        &self,
        cutoff: OffsetDateTime,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let mut state = lock(&self.state);
        let state = &mut *state;
        let mut budget = Budget(limit);
        state
            .codes
            .retain(|_, (code, _)| !budget.spend(code.expires_at < cutoff));
        state
            .access
            .retain(|_, token| !budget.spend(token.expires_at < cutoff));
        let grants = &state.grants;
        // A grant's first token whose successor was never used is still
        // honoured by the adaptive policy (and by reuse): kept, however
        // long ago it was rotated.
        let honoured: HashSet<SecretHash> = state
            .refresh
            .values()
            .filter(|token| first_with_unused_successor(token, &state.refresh))
            .map(|token| token.hash)
            .collect();
        state.refresh.retain(|hash, token| {
            let rotated_before = matches!(token.state, RefreshState::Rotated { at, .. } if at < cutoff)
                && !honoured.contains(hash);
            let expired_before = token.expires_at.is_some_and(|at| at < cutoff);
            let revoked_before = grants
                .get(&token.grant_id)
                .and_then(|grant| grant.revoked_at)
                .is_some_and(|at| at < cutoff);
            !budget.spend(rotated_before || expired_before || revoked_before)
        });
        Ok(limit - budget.0)
    }
}

/// Whether `token` is a grant's first refresh token, rotated, whose
/// successor is still active: one that [`crate::RefreshPolicy::Adaptive`]
/// still accepts, so the purge keeps it.
fn first_with_unused_successor(
    token: &RefreshTokenRecord,
    refresh: &HashMap<SecretHash, RefreshTokenRecord>,
) -> bool {
    match &token.state {
        RefreshState::Rotated { successor, .. } if token.predecessor.is_none() => refresh
            .get(successor)
            .is_some_and(|successor| matches!(successor.state, RefreshState::Active)),
        _ => false,
    }
}

/// How many more records a purge may delete.
struct Budget(usize);

impl Budget {
    /// Whether to delete a record that is `purgeable`: yes while the budget
    /// lasts, which this spends.
    fn spend(&mut self, purgeable: bool) -> bool {
        if purgeable && self.0 > 0 {
            self.0 -= 1;
            true
        } else {
            false
        }
    }
}

/// [`ClientRegistry`] in memory.
#[derive(Default)]
pub struct MemoryClientRegistry {
    clients: Mutex<HashMap<ClientId, Client>>,
}

impl MemoryClientRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies `change` to the client `id` under the lock; whether it exists.
    fn update(&self, id: &ClientId, change: impl FnOnce(&mut Client)) -> bool {
        lock(&self.clients).get_mut(id).map(change).is_some()
    }
}

#[async_trait]
impl ClientRegistry for MemoryClientRegistry {
    async fn register_client(&self, client: &Client) -> Result<(), StoreError> {
        let mut clients = lock(&self.clients);
        if clients.contains_key(&client.id) {
            return Err(StoreError::Duplicate { what: "client" });
        }
        clients.insert(client.id.clone(), client.clone());
        Ok(())
    }

    async fn find_client(&self, id: &ClientId) -> Result<Option<Client>, StoreError> {
        Ok(lock(&self.clients).get(id).cloned())
    }

    async fn rotate_client_secret(
        &self,
        id: &ClientId,
        secret_hash: &SecretHash,
        previous_valid_until: OffsetDateTime,
    ) -> Result<bool, StoreError> {
        Ok(self.update(id, |client| {
            client.previous_secret = Some(PreviousSecret {
                hash: client.secret_hash,
                valid_until: previous_valid_until,
            });
            client.secret_hash = *secret_hash;
        }))
    }

    async fn set_client_redirect_uris(
        &self,
        id: &ClientId,
        redirect_uris: &[String],
    ) -> Result<bool, StoreError> {
        Ok(self.update(id, |client| {
            client.redirect_uris = redirect_uris.to_vec();
        }))
    }

    async fn set_client_active(&self, id: &ClientId, active: bool) -> Result<bool, StoreError> {
        Ok(self.update(id, |client| client.active = active))
    }
}

/// [`AccountStore`] in memory.
#[derive(Default)]
pub struct MemoryAccountStore {
    accounts: Mutex<HashMap<AccountId, Account>>,
}

impl MemoryAccountStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl AccountStore for MemoryAccountStore {
    async fn insert_account(&self, account: &Account) -> Result<(), StoreError> {
        let mut accounts = lock(&self.accounts);
        if accounts.contains_key(&account.id) || accounts.values().any(|a| a.email == account.email)
        {
            return Err(StoreError::Duplicate { what: "account" });
        }
        accounts.insert(account.id, account.clone());
        Ok(())
    }

    async fn find_account(&self, id: AccountId) -> Result<Option<Account>, StoreError> {
        Ok(lock(&self.accounts).get(&id).cloned())
    }

    async fn find_account_by_email(&self, email: &str) -> Result<Option<Account>, StoreError> {
        Ok(lock(&self.accounts)
            .values()
            .find(|a| a.email == email)
            .cloned())
    }
}

/// [`ApiKeyStore`] in memory.
#[derive(Default)]
pub struct MemoryApiKeyStore {
    keys: Mutex<Vec<ApiKeyRecord>>,
}

impl MemoryApiKeyStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl ApiKeyStore for MemoryApiKeyStore {
    async fn insert_api_key(
        &self,
        key: &ApiKeyRecord,
        max_per_account: usize,
    ) -> Result<bool, StoreError> {
        let mut keys = lock(&self.keys);
        if keys.iter().any(|k| k.id == key.id || k.hash == key.hash) {
            return Err(StoreError::Duplicate { what: "api key" });
        }
        if keys
            .iter()
            .filter(|k| k.account_id == key.account_id)
            .count()
            >= max_per_account
        {
            return Ok(false);
        }
        keys.push(key.clone());
        Ok(true)
    }

    async fn find_api_key(&self, hash: &SecretHash) -> Result<Option<ApiKeyRecord>, StoreError> {
        Ok(lock(&self.keys).iter().find(|k| k.hash == *hash).cloned())
    }

    async fn set_api_key_active(&self, id: ApiKeyId, active: bool) -> Result<bool, StoreError> {
        let mut keys = lock(&self.keys);
        match keys.iter_mut().find(|k| k.id == id) {
            Some(key) => {
                key.active = active;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn list_api_keys(&self, account: AccountId) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let mut keys: Vec<ApiKeyRecord> = lock(&self.keys)
            .iter()
            .filter(|k| k.account_id == account)
            .cloned()
            .collect();
        // The contract lists oldest first; keys may be inserted out of the
        // order of their creation times (concurrent inserts).
        keys.sort_by_key(|k| k.created_at);
        Ok(keys)
    }
}
