//! conversion-gateway: the auth and conversion-intake side of a marketing
//! platform, as a library that a Rust service embeds.
//!
//! # What it does
//!
//! - **OAuth 2.0 authorization code flow** for third-party applications
//!   (RFC 6749, with PKCE, RFC 7636): the authorization dialog's decisions,
//!   single-use codes, token issue and refresh (access tokens live 86400 s),
//!   refresh-token rotation with reuse detection (RFC 9700) that adapts to
//!   clients which never store a new refresh token, revocation
//!   (RFC 7009), and bearer authentication of API calls.
//! - **API-key authentication** and the **intake of conversion events**
//!   (`CONVERSION` / `CDP`): validation of the event and its contact payload
//!   in one pass with no allocation, recording through an [`EventSink`], an
//!   `event_uuid` answer, batches, and `Idempotency-Key` retries.
//! - Compatibility with the real clients of the RD Station Marketing API it
//!   mirrors (JSON and form token bodies, HTTP Basic, legacy parameter names,
//!   the exact error shapes and challenges clients parse).
//!
//! # What it does not do
//!
//! - No HTTP server, and no web framework in the core: every endpoint takes
//!   the request parts an adapter extracted ([`RequestParts`]) and returns a
//!   typed result, which [`Gateway::answer`] turns into an [`HttpAnswer`]
//!   (status, headers, JSON). The optional `axum` feature (module `axum`)
//!   serves every JSON route as one router, the dialog's and account's
//!   pages (`axum::pages`), the operator's routes and an accept loop a host
//!   may use; the `http` feature converts to and from the `http` crate's
//!   types. The `server/` package is the complete service on axum;
//!   `examples/hyper_adapter.rs` shows another stack.
//! - No framework in sign-in and consent either: [`PageFlows`] decides who
//!   is signed in (our form with [`LoginThrottle`] and a
//!   [`PasswordVerifier`], or the host's own session through
//!   [`HostSignIn`]) and which page or redirect a browser gets; an adapter
//!   renders its [`PageReply`]. Password hashing is the `argon2` feature's
//!   (or the host's own verifier); [`Account::password_hash`] holds the PHC
//!   string.
//! - No wall clock or random source inside the decisions: [`Clock`] and
//!   [`RandomSource`] are injected, so every lifecycle test is deterministic.
//!
//! # Quickstart
//!
//! ```
//! use conversion_gateway::{
//!     Account, ClientRegistration, Gateway, GatewayConfig, OsRandom, RequestParts, SecretHasher,
//!     Stores,
//! };
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // In production the key comes from a secret store and never changes.
//! let key = [7u8; 32];
//! let gateway = Gateway::new(
//!     GatewayConfig::new("https://api.example.com"),
//!     Stores::in_memory(),
//!     SecretHasher::new(key),
//! );
//! let account = Account::new("Acme", "owner@acme.example", &OsRandom);
//! gateway.create_account(&account).await?;
//!
//! // An application sends the account owner to the dialog (RFC 6749 4.1.1)...
//! let (app, secret) = gateway
//!     .register_client(ClientRegistration::new("Lead Sync", ["https://app.example/cb"]))
//!     .await?;
//! let query = format!("client_id={}&redirect_uri=https://app.example/cb&state=s1", app.id);
//! let request = gateway.authorization_request(&query).await?;
//! // ...the host signs the owner in, shows request.client_name(), and on "Allow"
//! // sends the browser to approval.location(), which carries the code.
//! let approval = gateway.approve(&request, account.id).await?;
//! assert!(approval.location().starts_with("https://app.example/cb?code="));
//!
//! // The application exchanges the code for tokens (RFC 6749 4.1.3).
//! let body = format!(
//!     r#"{{"client_id":"{}","client_secret":"{}","code":"{}"}}"#,
//!     app.id,
//!     secret.expose(),
//!     approval.code().expose(),
//! );
//! let tokens = gateway
//!     .token(&RequestParts {
//!         content_type: Some("application/json"),
//!         body: body.as_bytes(),
//!         ..RequestParts::default()
//!     })
//!     .await?;
//! assert_eq!(tokens.expires_in, 86_400);
//!
//! // The host guards its own API with the bearer token.
//! let authorization = format!("Bearer {}", tokens.access_token.expose());
//! let caller = gateway.authenticate_bearer(Some(&authorization)).await?;
//! assert_eq!(caller.account_id, account.id);
//!
//! // A website form sends a conversion with the account's API key.
//! let (_, api_key) = gateway.issue_api_key(account.id, "website").await?;
//! let event = br#"{"event_type":"CONVERSION","event_family":"CDP",
//!     "payload":{"conversion_identifier":"signup","email":"lead@example.com"}}"#;
//! let receipt = gateway
//!     .record_conversion(&RequestParts {
//!         query: &format!("api_key={}", api_key.expose()),
//!         content_type: Some("application/json"),
//!         body: event,
//!         ..RequestParts::default()
//!     })
//!     .await?;
//! assert_eq!(receipt.event_uuids.len(), 1);
//!
//! // In an HTTP handler, every result, success or error, becomes the answer
//! // to send the same way.
//! let answer = gateway.answer(&receipt);
//! assert_eq!(answer.status, 200);
//! assert_eq!(answer.json_body(), Some(&serde_json::json!({ "event_uuid": receipt.event_uuids[0] })));
//! # Ok(())
//! # }
//! ```
//!
//! # Storage
//!
//! Five traits ([`TokenStore`], [`ClientRegistry`], [`AccountStore`],
//! [`ApiKeyStore`], [`EventSink`]) with in-memory implementations here,
//! SQLite (`sqlite` feature) and PostgreSQL (`postgres` feature). The
//! operations that must be atomic are named in each trait's docs; the public
//! conformance suite (`test-util` feature, module `conformance`) checks any
//! implementation, yours included.
#![warn(missing_docs)]

// Shared types: ids and accounts, secrets, time and randomness, settings,
// and the HTTP-neutral request and answer.
mod account;
pub use account::{Account, AccountId, EmailError};

mod clock;
pub use clock::{Clock, ManualClock, SystemClock};

// The eviction rule of the bounded counter tables (the sign-in throttle,
// the memory rate limiter): locked windows are never dropped.
mod bounded_windows;

mod config;
pub use config::{BaseUrlError, GatewayConfig};

mod answer;
pub use answer::{AnswerBody, AnswerContext, HttpAnswer, ToHttpAnswer};

mod random;
pub use random::{
    OsRandom, RandomSource, SeededRandom, random_token, random_uuid, time_ordered_uuid,
};

mod error_chain;
pub use error_chain::ErrorChain;

mod server_key;
pub use server_key::{ExposedFile, ServerKey, exposed_files, sqlite_files, write_private_file};

mod request;
pub use request::{ParamsError, RequestParts};

mod secret;
pub use secret::{
    AccessToken, ApiKey, AuthorizationCode, ClientSecret, RefreshToken, SECRET_ENTROPY_BYTES,
    SecretHash, SecretHasher, SecretKind,
};

// The records the stores persist, below the stores, OAuth and intake.
mod records;
pub use records::api_key::{ApiKeyId, ApiKeyRecord};
pub use records::client::{Client, ClientId, PreviousSecret};
pub use records::event::{
    EventPayload, EventSubmission, IdempotencyClaim, IdempotencyScope, IntakeChannel,
    RecordOutcome, RecordedEvent,
};
pub use records::grant::{Grant, GrantId};
pub use records::refresh_policy::{RefreshPolicy, RefreshPolicyParseError};
pub use records::tokens::{
    AccessTokenRecord, CodeRecord, PkceChallenge, RefreshState, RefreshTokenRecord,
};

// The service: construction, and one method per endpoint.
mod gateway;
pub mod metrics;
pub use gateway::open::{OpenStoreError, OpenedStore, StoreUrl, StoreUrlError};
pub use gateway::operations::{PurgeReport, Readiness};
pub use gateway::{Gateway, Stores};

// OAuth 2.0 for third-party applications.
mod oauth;
pub use oauth::bearer::BearerError;
pub use oauth::client::ClientRegistration;
pub use oauth::decisions::Caller;
pub use oauth::dialog::{Approval, AuthorizationRequest, Denial, DialogError};
pub use oauth::introspection::{
    ActiveToken, Introspection, MIN_RESOURCE_SERVER_SECRET_LEN, ResourceServersError, TokenKind,
};
pub use oauth::lifecycle::{ClientUpdateError, ConnectedApp, is_registrable_redirect_uri};
pub use oauth::metadata::{
    AUTHORIZATION_PATH, AuthorizationServerMetadata, INTROSPECTION_PATH, METADATA_PATH,
    REVOCATION_PATH, TOKEN_PATH,
};
pub use oauth::revocation::{Revocation, RevocationError};
pub use oauth::token_endpoint::TokenResponse;
pub use oauth::token_error::TokenError;

// Conversion intake: API keys, the validator, the event routes.
mod intake;
pub use intake::api_key::ApiKeyError;
pub use intake::endpoint::{IntakeError, IntakeReceipt, MAX_IDEMPOTENCY_KEY_LEN};
pub use intake::rate_limit::answer::RateLimited;
pub use intake::rate_limit::limit::{Limit, LimitParseError, RateLimits};
pub use intake::rate_limit::memory::MemoryRateLimiter;
#[cfg(feature = "redis")]
pub use intake::rate_limit::redis::RedisRateLimiter;
pub use intake::rate_limit::url::{OpenRateLimiterError, RateLimiterUrl, RateLimiterUrlError};
pub use intake::rate_limit::{
    Admission, Charge, LimitKind, LimiterError, LimiterFailure, LimiterFailureParseError,
    RateLimiter,
};
pub use intake::validator::errors::{
    DataType, ErrorType, FieldError, ValidationErrors, ValidationRules,
};
pub use intake::validator::event::ConversionEvent;
pub use intake::validator::json_path::{JsonPath, PathSegment};
pub use intake::validator::limits::{ConversionLimits, UnknownAttributes};
pub use intake::validator::tags::Tags;
pub use intake::validator::vocabulary::{
    LegalBasis, LegalBasisCategory, LegalBasisStatus, LegalBasisType,
};
pub use intake::validator::{validate_batch, validate_conversion};

// The demo app, account and API key, derived from the server key.
#[cfg(feature = "argon2")]
mod demo;
#[cfg(feature = "argon2")]
pub use demo::{DEMO_EMAIL, DEMO_REDIRECT_URI, DemoCredentials, DemoSeedError, seed_demo};

// Sign-in, consent and the account page, as library calls: the throttle,
// passwords, sessions and CSRF tokens, and the pages' flows.
mod signin;
#[cfg(feature = "argon2")]
pub use signin::argon2::{Argon2Passwords, Argon2Verifier, Busy, HashingLimit};
pub use signin::flows::{ACCOUNT_COOKIE_PATH, APPS_PATH, PageFlows};
pub use signin::form::{FormSignIn, SignInRefused};
pub use signin::method::{HostSignIn, PageRequest, SignInMethod, SignedIn};
#[cfg(feature = "argon2")]
pub use signin::new_account::{AccountCreationError, PASSWORD_BYTES, create_account_with_password};
pub use signin::password::{PasswordCheck, PasswordVerifier};
pub use signin::session::{
    LOGIN_COOKIE, PageKeys, SESSION_COOKIE, SESSION_SECONDS, cookie, login_nonce, same_token,
    set_cookie,
};
pub use signin::throttle::{Attempt, AttemptOutcome, LoginThrottle, ThrottleLimits, Throttled};
pub use signin::view::{AppsList, ConsentScreen, Notice, PageReply, PageView, SignInForm};

// Storage: the traits, memory, SQLite and PostgreSQL, the conformance suite.
mod store;
#[cfg(feature = "test-util")]
pub use store::conformance;
pub use store::error::StoreError;
pub use store::feed::{EventFeed, FeedCursor, FeedPage};
pub use store::memory::event_sink::MemoryEventSink;
pub use store::memory::webhooks::MemoryWebhookStore;
pub use store::memory::{
    MemoryAccountStore, MemoryApiKeyStore, MemoryClientRegistry, MemoryTokenStore,
};
#[cfg(feature = "nats")]
pub use store::nats::{NatsEventSink, NatsOptions, StreamNameError};
#[cfg(feature = "postgres")]
pub use store::postgres::{PgStore, PgStoreOptions};
#[cfg(feature = "sqlite")]
pub use store::sqlite::SqliteStore;
pub use store::webhooks::{WebhookStore, WebhookWrite};
pub use store::{
    AccountStore, ApiKeyStore, ClientRegistry, CodeLookup, CodeTake, EventSink, Rotation,
    TokenStore,
};

// Webhooks: registration, the Standard Webhooks signature, delivery.
mod webhooks;
pub use records::webhook::{
    AttemptRecord, Delivery, DeliveryId, DeliveryNext, DeliveryState, LeasedDelivery, Webhook,
    WebhookChange, WebhookEventType, WebhookId, WebhookRelation, WebhookStatus,
};
pub use webhooks::delivery::{AttemptReport, DISPATCH_PAGE, SKIP_PAGE, WebhookRound};
pub use webhooks::destination::{MAX_URL_LEN, check_url, is_public_address};
pub use webhooks::endpoint::{
    SHOWN_ATTEMPTS, WebhookCreated, WebhookDeleted, WebhookDetail, WebhookError, WebhookList,
    WebhookView,
};
#[cfg(feature = "webhooks")]
pub use webhooks::http::resolver::NameLookup;
#[cfg(feature = "webhooks")]
pub use webhooks::http::{HttpTransportError, HttpWebhookTransport};
pub use webhooks::options::{MAX_WEBHOOKS_PER_ACCOUNT, WebhookOptions};
pub use webhooks::registration::{WebhookFieldError, WebhookSpec};
pub use webhooks::retry::{RetrySchedule, RetryScheduleError};
pub use webhooks::signing::WebhookSecret;
pub use webhooks::transport::{
    ATTEMPT_TIMEOUT, DestinationRefused, MAX_ANSWER_BYTES, OutgoingRequest, SendOutcome,
    WebhookTransport,
};

// Tasks a host spawns on tokio: the only code here that waits on a timer.
#[cfg(feature = "tasks")]
mod tasks;
// What the crate logs, read back by its unit tests.
#[cfg(test)]
mod captured_logs;
#[cfg(feature = "tasks")]
pub use tasks::{BackgroundTasks, PURGE_EVERY, WebhookWorker, deliver_webhooks, purge_every};

// Adapters to the `http` crate's types and to axum.
#[cfg(feature = "http")]
mod http_types;

#[cfg(feature = "axum")]
pub mod axum;

/// The README's code blocks, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
