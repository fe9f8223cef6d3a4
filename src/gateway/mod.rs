//! The service type: holds the stores, the clock, the random source and the
//! configuration, and runs every operation as load, decide, persist.
//!
//! # Where `Gateway`'s methods are
//!
//! One `impl Gateway` block per area, in the area's own file, so that the
//! method sits beside the types and decisions it uses:
//!
//! | area | file | methods |
//! |---|---|---|
//! | construction | `gateway/mod.rs` (here) | [`Gateway::new`], `with_clock`, `with_rate_limiter`, `with_random`, `with_webhooks`, `config`, [`Gateway::answer`] |
//! | OAuth: the dialog (RFC 6749 4.1.1, 4.1.2) | `oauth/dialog.rs` | `authorization_request`, `approve`, `deny` |
//! | OAuth: the token endpoint (4.1.3, 6) | `oauth/token_endpoint.rs`, `oauth/refresh.rs` | `token` |
//! | OAuth: revocation (RFC 7009) | `oauth/revocation.rs` | `revoke` |
//! | OAuth: bearer tokens (RFC 6750) | `oauth/bearer.rs` | `authenticate_bearer` |
//! | OAuth: introspection (RFC 7662) | `oauth/introspection.rs` | `with_resource_server`, `introspect` |
//! | OAuth: discovery (RFC 8414) | `oauth/metadata.rs` | `metadata` |
//! | OAuth: registering applications | `oauth/client.rs` | `register_client`, `find_client` |
//! | OAuth: an application's life, connected apps | `oauth/lifecycle.rs` | `rotate_client_secret`, `set_client_redirect_uris`, `set_client_active`, `connected_apps`, `disconnect_app`, `revoke_grant` |
//! | intake: the event routes | `intake/endpoint.rs` | `authenticate_api_key`, `record_conversion`, `record_event`, `record_event_batch` |
//! | intake: API keys | `intake/api_key.rs` | `issue_api_key`, `list_api_keys`, `set_api_key_active` |
//! | accounts | `gateway/accounts.rs` | `create_account`, `find_account`, `find_account_by_email` |
//! | operations | `gateway/operations.rs` | `purge_expired`, `readiness` |
//! | webhooks: registration | `webhooks/endpoint.rs` | `create_webhook`, `list_webhooks`, `show_webhook`, `update_webhook`, `delete_webhook`, `all_webhooks`, `set_webhook_status` |
//! | webhooks: delivery | `webhooks/delivery.rs` | `dispatch_webhook_deliveries`, `lease_webhook_deliveries`, `attempt_webhook_delivery`, `run_webhooks_once`, `webhook_backlog` |
//!
//! `gateway/open.rs` opens [`Stores`] from a URL ([`crate::StoreUrl`]).
//!
//! The helpers an area's methods share (client authentication in
//! `oauth/client_auth.rs`, the refresh steps in `oauth/refresh.rs`) are
//! private to the crate and live with their area too.

mod accounts;
pub(crate) mod open;
pub(crate) mod operations;

use crate::metrics::GatewayMetrics;
use std::sync::Arc;

use crate::answer::{AnswerContext, HttpAnswer, ToHttpAnswer};
use crate::clock::{Clock, SystemClock};
use crate::config::GatewayConfig;
use crate::intake::api_key_cache::ApiKeyCache;
use crate::intake::rate_limit::RateLimiter;
use crate::intake::rate_limit::memory::MemoryRateLimiter;
use crate::oauth::introspection::ResourceServer;
use crate::random::{OsRandom, RandomSource};
use crate::secret::SecretHasher;
use crate::store::feed::EventFeed;
use crate::store::memory::event_sink::MemoryEventSink;
use crate::store::memory::webhooks::MemoryWebhookStore;
use crate::store::memory::{
    MemoryAccountStore, MemoryApiKeyStore, MemoryClientRegistry, MemoryTokenStore,
};
use crate::store::webhooks::WebhookStore;
use crate::store::{AccountStore, ApiKeyStore, ClientRegistry, EventSink, TokenStore};
use crate::webhooks::options::WebhookOptions;

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
    /// The recorded events in commit order, which webhook deliveries are
    /// taken from (the same store as `events`, where that store keeps
    /// them).
    pub feed: Arc<dyn EventFeed>,
    /// Webhooks and their deliveries.
    pub webhooks: Arc<dyn WebhookStore>,
}

impl Stores {
    /// Fresh in-memory stores, for tests and for hosts that keep nothing
    /// across restarts.
    pub fn in_memory() -> Self {
        let events = Arc::new(MemoryEventSink::new());
        Self {
            tokens: Arc::new(MemoryTokenStore::new()),
            clients: Arc::new(MemoryClientRegistry::new()),
            accounts: Arc::new(MemoryAccountStore::new()),
            api_keys: Arc::new(MemoryApiKeyStore::new()),
            events: events.clone(),
            feed: events,
            webhooks: Arc::new(MemoryWebhookStore::new()),
        }
    }

    /// Every store on one value that implements all the storage traits, as
    /// [`crate::SqliteStore`] and [`crate::PgStore`] do:
    /// `Stores::sharing(Arc::new(SqliteStore::open(path).await?))`.
    pub fn sharing<S>(store: Arc<S>) -> Self
    where
        S: TokenStore
            + ClientRegistry
            + AccountStore
            + ApiKeyStore
            + EventSink
            + EventFeed
            + WebhookStore
            + 'static,
    {
        Self {
            tokens: store.clone(),
            clients: store.clone(),
            accounts: store.clone(),
            api_keys: store.clone(),
            events: store.clone(),
            feed: store.clone(),
            webhooks: store,
        }
    }
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
    /// How webhooks are registered and delivered.
    pub(crate) webhooks: WebhookOptions,
    /// Handles of the per-request `cg_` series.
    pub(crate) metrics: GatewayMetrics,
}

impl Gateway {
    /// A gateway over `stores`, hashing secrets with `hasher`, on the system
    /// clock and the operating system's random source.
    ///
    /// Registers every `cg_` series of the installed `metrics` recorder at
    /// zero (see the metrics table in the crate docs) and keeps handles of
    /// them: install the recorder first, since one installed later never
    /// sees this gateway's per-request figures.
    pub fn new(config: GatewayConfig, stores: Stores, hasher: SecretHasher) -> Self {
        Self {
            metrics: GatewayMetrics::register(),
            stores,
            api_key_cache: ApiKeyCache::new(config.api_key_cache_ttl),
            realm: config.realm(),
            config,
            hasher,
            clock: Arc::new(SystemClock),
            random: Arc::new(OsRandom),
            resource_servers: Vec::new(),
            rate_limiter: Arc::new(MemoryRateLimiter::new()),
            webhooks: WebhookOptions::default(),
        }
    }

    /// Sets how webhooks are registered and delivered: by default no
    /// transport, so registration fails its validation call and nothing is
    /// delivered until a host gives one (`crate::HttpWebhookTransport`
    /// with feature `webhooks`).
    pub fn with_webhooks(mut self, options: WebhookOptions) -> Self {
        self.webhooks = options;
        self
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
}
