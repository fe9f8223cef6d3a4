//! The service type: holds the stores, the clock, the random source and the
//! configuration, and runs every operation as load, decide, persist.
//!
//! Each endpoint is one method, in its area's file as a further
//! `impl Gateway` block: `oauth/dialog.rs` (`authorization_request`,
//! `approve`, `deny`), `oauth/token_endpoint.rs` (`token`),
//! `oauth/revocation.rs` (`revoke`), `oauth/bearer.rs`
//! (`authenticate_bearer`), `intake/endpoint.rs` (`record_conversion`,
//! `record_event`, `record_event_batch`). This file has the construction,
//! [`Gateway::answer`], and the administrative operations.

use std::sync::Arc;

use crate::intake::api_key_cache::ApiKeyCache;
use crate::oauth::introspection::ResourceServer;

use crate::account::{Account, AccountId};
use crate::answer::{AnswerContext, HttpAnswer, ToHttpAnswer};
use crate::clock::{Clock, SystemClock};
use crate::config::GatewayConfig;
use crate::intake::api_key::ApiKeyError;
use crate::intake::rate_limit::RateLimiter;
use crate::intake::rate_limit::memory::MemoryRateLimiter;
use crate::oauth::client::ClientRegistration;
use crate::random::{OsRandom, RandomSource};
use crate::records::api_key::{ApiKeyId, ApiKeyRecord};
use crate::records::client::{Client, ClientId};
use crate::secret::{ApiKey, ClientSecret, SecretHasher};
use crate::store::error::StoreError;
use crate::store::memory::{
    MemoryAccountStore, MemoryApiKeyStore, MemoryClientRegistry, MemoryEventSink, MemoryTokenStore,
};
use crate::store::{AccountStore, ApiKeyStore, ClientRegistry, EventSink, TokenStore};

/// The stores a [`Gateway`] works on, one per storage trait.
#[derive(Clone)]
pub struct Stores {
    /// Grants, codes and tokens.
    pub tokens: Arc<dyn TokenStore>,
    /// Registered applications.
    pub clients: Arc<dyn ClientRegistry>,
    /// Accounts.
    pub accounts: Arc<dyn AccountStore>,
    /// API keys.
    pub api_keys: Arc<dyn ApiKeyStore>,
    /// Accepted conversion events.
    pub events: Arc<dyn EventSink>,
}

impl Stores {
    /// Fresh in-memory stores, for tests and for hosts that keep nothing
    /// across restarts.
    pub fn in_memory() -> Self {
        Self {
            tokens: Arc::new(MemoryTokenStore::new()),
            clients: Arc::new(MemoryClientRegistry::new()),
            accounts: Arc::new(MemoryAccountStore::new()),
            api_keys: Arc::new(MemoryApiKeyStore::new()),
            events: Arc::new(MemoryEventSink::new()),
        }
    }
}

/// What [`Gateway::readiness`] found: each store by name (`tokens`,
/// `clients`, `accounts`, `api_keys`, `events`), and whether it answered.
#[derive(Debug)]
#[non_exhaustive]
pub struct Readiness {
    /// Each store, with its failure if it did not answer.
    pub stores: Vec<(&'static str, Option<StoreError>)>,
}

impl Readiness {
    /// Whether every store answered.
    pub fn is_ready(&self) -> bool {
        self.stores.iter().all(|(_, failure)| failure.is_none())
    }

    /// The names of the stores that did not answer.
    pub fn failed(&self) -> Vec<&'static str> {
        self.stores
            .iter()
            .filter(|(_, failure)| failure.is_some())
            .map(|(name, _)| *name)
            .collect()
    }
}

/// What [`Gateway::purge_expired`] deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PurgeReport {
    /// Codes, access tokens and refresh tokens.
    pub tokens: usize,
    /// Idempotency claims.
    pub idempotency_claims: usize,
}

/// The authorization and conversion-intake service.
///
/// Cheap to share: wrap it in an `Arc` and hand it to every request handler.
/// Each endpoint method takes the request parts an adapter extracted and
/// returns a typed result; [`Gateway::answer`] turns any result into the
/// [`HttpAnswer`] to send. See the crate docs for the flow.
pub struct Gateway {
    pub(crate) stores: Stores,
    pub(crate) config: GatewayConfig,
    pub(crate) hasher: SecretHasher,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) random: Arc<dyn RandomSource>,
    /// API keys that authenticated recently (for
    /// [`GatewayConfig::api_key_cache_ttl`]).
    pub(crate) api_key_cache: ApiKeyCache,
    /// [`GatewayConfig::realm`], built once: every answer may need it.
    realm: String,
    /// The services allowed to introspect any token
    /// ([`Gateway::with_resource_server`]).
    pub(crate) resource_servers: Vec<ResourceServer>,
    /// Counts events against [`GatewayConfig::rate_limits`].
    pub(crate) rate_limiter: Arc<dyn RateLimiter>,
}

impl Gateway {
    /// A gateway over `stores`, hashing secrets with `hasher`, on the system
    /// clock and the operating system's random source.
    ///
    /// Registers every `cg_` series of the installed `metrics` recorder at
    /// zero (see the metrics table in the crate docs): install the recorder
    /// first.
    pub fn new(config: GatewayConfig, stores: Stores, hasher: SecretHasher) -> Self {
        crate::metrics::register();
        Self {
            stores,
            api_key_cache: ApiKeyCache::new(config.api_key_cache_ttl),
            realm: config.realm(),
            config,
            hasher,
            clock: Arc::new(SystemClock),
            random: Arc::new(OsRandom),
            resource_servers: Vec::new(),
            rate_limiter: Arc::new(MemoryRateLimiter::new()),
        }
    }

    /// Replaces the clock (tests use a [`crate::ManualClock`]).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Replaces the rate limiter (by default a [`MemoryRateLimiter`], exact
    /// for one instance): a [`crate::RedisRateLimiter`] shares the counts
    /// of every instance behind a load balancer.
    pub fn with_rate_limiter(mut self, limiter: Arc<dyn RateLimiter>) -> Self {
        self.rate_limiter = limiter;
        self
    }

    /// Replaces the random source (tests use a [`crate::SeededRandom`]).
    pub fn with_random(mut self, random: Arc<dyn RandomSource>) -> Self {
        self.random = random;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &GatewayConfig {
        &self.config
    }

    /// The HTTP answer to any result or error of the public API: a handler
    /// is `gateway.answer(gateway.token(&parts).await)`. The gateway knows
    /// the challenge realm (from [`GatewayConfig::base_url`]), so no caller
    /// has to.
    pub fn answer(&self, outcome: impl ToHttpAnswer) -> HttpAnswer {
        outcome.to_http_answer(&AnswerContext::new(&self.realm))
    }

    /// Registers an application. Returns it and its client secret, which is
    /// not kept and must be handed to the developer now.
    ///
    /// # Errors
    /// The store's error.
    pub async fn register_client(
        &self,
        registration: ClientRegistration,
    ) -> Result<(Client, ClientSecret), StoreError> {
        let ClientRegistration {
            name,
            redirect_uris,
            require_pkce,
            refresh_policy,
        } = registration;
        let (mut client, secret) =
            Client::register(name, redirect_uris, &*self.random, &self.hasher);
        client.require_pkce = require_pkce;
        client.refresh_policy = refresh_policy;
        self.stores.clients.register_client(&client).await?;
        Ok((client, secret))
    }

    /// The registered application with this id, for a host's own pages (a
    /// developer console, or a check before registering a known client).
    ///
    /// # Errors
    /// The store's error.
    pub async fn find_client(&self, id: &ClientId) -> Result<Option<Client>, StoreError> {
        self.stores.clients.find_client(id).await
    }

    /// Stores a new account.
    ///
    /// # Errors
    /// The store's error (`Duplicate` for a taken e-mail).
    pub async fn create_account(&self, account: &Account) -> Result<(), StoreError> {
        self.stores.accounts.insert_account(account).await
    }

    /// The account with this login e-mail (compared lowercased), for the
    /// host's login form.
    ///
    /// # Errors
    /// The store's error.
    pub async fn find_account_by_email(&self, email: &str) -> Result<Option<Account>, StoreError> {
        self.stores
            .accounts
            .find_account_by_email(&email.trim().to_lowercase())
            .await
    }

    /// The account with this id, for a host that keeps the id in a session.
    ///
    /// # Errors
    /// The store's error.
    pub async fn find_account(&self, id: AccountId) -> Result<Option<Account>, StoreError> {
        self.stores.accounts.find_account(id).await
    }

    /// Issues an API key for `account`: its record and the key itself, which
    /// is not kept and must be handed to the account owner now.
    ///
    /// # Errors
    /// [`ApiKeyError::LimitReached`] when the account already holds
    /// [`GatewayConfig::max_api_keys_per_account`] keys, or the store's error.
    pub async fn issue_api_key(
        &self,
        account: AccountId,
        label: &str,
    ) -> Result<(ApiKeyRecord, ApiKey), ApiKeyError> {
        let (record, key) = ApiKeyRecord::issue(
            account,
            label,
            self.clock.now(),
            &*self.random,
            &self.hasher,
        );
        let max = self.config.max_api_keys_per_account;
        if self.stores.api_keys.insert_api_key(&record, max).await? {
            Ok((record, key))
        } else {
            Err(ApiKeyError::LimitReached { max })
        }
    }

    /// The API keys of `account`, switched on or off, oldest first: their
    /// records (ids, labels, hashes), never the keys themselves, which are
    /// not kept. For a host's settings page, beside
    /// [`Gateway::set_api_key_active`].
    ///
    /// # Errors
    /// The store's error.
    pub async fn list_api_keys(&self, account: AccountId) -> Result<Vec<ApiKeyRecord>, StoreError> {
        self.stores.api_keys.list_api_keys(account).await
    }

    /// Deletes what stopped being usable more than
    /// [`GatewayConfig::purge_retention`] ago: expired authorization codes
    /// and access tokens, rotated and expired refresh tokens, the refresh
    /// tokens of revoked grants, and expired idempotency claims. Events,
    /// accounts, clients, API keys and grants are kept.
    ///
    /// Deletes in batches of [`GatewayConfig::purge_batch`], each a short
    /// statement of its own, until nothing is left, so that requests running
    /// beside it never wait long. A host calls it periodically (the example
    /// server: every ten minutes).
    ///
    /// # Errors
    /// The store's error; what was deleted before it stays deleted, and the
    /// next call carries on.
    pub async fn purge_expired(&self) -> Result<PurgeReport, StoreError> {
        let cutoff = self.clock.now() - self.config.purge_retention;
        let batch = self.config.purge_batch.max(1);
        let mut report = PurgeReport::default();
        loop {
            let deleted = self.stores.tokens.purge_expired(cutoff, batch).await?;
            report.tokens += deleted;
            if deleted < batch {
                break;
            }
        }
        loop {
            let deleted = self
                .stores
                .events
                .purge_expired_claims(cutoff, batch)
                .await?;
            report.idempotency_claims += deleted;
            if deleted < batch {
                break;
            }
        }
        Ok(report)
    }

    /// Asks every store whether its backend answers (a cheap round trip
    /// each, with a short timeout), for a load balancer's readiness check:
    /// an instance whose database is gone should get no traffic.
    pub async fn readiness(&self) -> Readiness {
        let stores = &self.stores;
        let mut checked = Vec::with_capacity(5);
        checked.push(("tokens", stores.tokens.ready().await.err()));
        checked.push(("clients", stores.clients.ready().await.err()));
        checked.push(("accounts", stores.accounts.ready().await.err()));
        checked.push(("api_keys", stores.api_keys.ready().await.err()));
        checked.push(("events", stores.events.ready().await.err()));
        Readiness { stores: checked }
    }

    /// Switches an API key off or back on. Returns whether it exists.
    ///
    /// Takes effect at once on this gateway: from the next request on, even
    /// when a request that read the key before the switch is still in
    /// flight. Other gateways on the same store may accept a key switched
    /// off for up to their [`GatewayConfig::api_key_cache_ttl`] (10 s by
    /// default).
    ///
    /// # Errors
    /// The store's error.
    pub async fn set_api_key_active(&self, id: ApiKeyId, active: bool) -> Result<bool, StoreError> {
        let changed = self.stores.api_keys.set_api_key_active(id, active).await;
        // Whatever the store answered, the next request asks it again. After
        // the store's write: a lookup in flight that read the key before it
        // finds the cache's generation changed, and caches nothing.
        self.api_key_cache.forget(id);
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SeededRandom;

    fn gateway() -> Gateway {
        Gateway::new(
            GatewayConfig::new("https://gateway.test"),
            Stores::in_memory(),
            SecretHasher::new([3; 32]),
        )
        .with_random(Arc::new(SeededRandom::new(7)))
    }

    #[tokio::test]
    async fn a_registered_client_is_found_by_its_id_and_no_other() {
        let gateway = gateway();
        let registration = ClientRegistration::new("App", ["https://app.example/cb"]);
        let (client, _) = gateway.register_client(registration).await.unwrap();
        let found = gateway.find_client(&client.id).await.unwrap();
        assert_eq!(
            found.as_ref().map(|c| &c.name),
            Some(&client.name),
            "{found:?}"
        );
        let other = gateway
            .find_client(&ClientId::new("cgci_other"))
            .await
            .unwrap();
        assert!(other.is_none(), "{other:?}");
    }

    #[tokio::test]
    async fn an_accounts_api_keys_are_listed_oldest_first_switched_off_included() {
        let gateway = gateway();
        let random = SeededRandom::new(9);
        let account = Account::new("Shop", "owner@shop.example", &random);
        gateway.create_account(&account).await.unwrap();
        let (first, _) = gateway.issue_api_key(account.id, "form").await.unwrap();
        let (second, _) = gateway.issue_api_key(account.id, "crm").await.unwrap();
        assert!(gateway.set_api_key_active(first.id, false).await.unwrap());
        let listed = gateway.list_api_keys(account.id).await.unwrap();
        let summary: Vec<_> = listed.iter().map(|k| (k.id, k.active)).collect();
        assert_eq!(
            summary,
            [(first.id, false), (second.id, true)],
            "{listed:?}"
        );
        let other = Account::new("Other", "other@shop.example", &random);
        let none = gateway.list_api_keys(other.id).await.unwrap();
        assert!(none.is_empty(), "{none:?}");
    }
}
