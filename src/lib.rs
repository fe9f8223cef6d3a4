//! conversion-gateway (crate docs are written as the core lands).
#![warn(missing_docs)]

mod account;
mod client;
mod clock;
mod config;
mod event;
mod grant;
mod http;
mod memory;
mod random;
mod secret;
mod store;
mod token;

#[cfg(feature = "test-util")]
pub mod conformance;

pub use account::{Account, AccountId, ApiKeyId, ApiKeyRecord};
pub use client::{Client, ClientId};
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{GatewayConfig, RefreshPolicy};
pub use event::{EventSubmission, IdempotencyClaim, IntakeChannel, RecordOutcome, RecordedEvent};
pub use grant::{Grant, GrantId};
pub use http::{AnswerBody, HttpAnswer};
pub use memory::{
    MemoryAccountStore, MemoryApiKeyStore, MemoryClientRegistry, MemoryEventSink, MemoryTokenStore,
};
pub use random::{OsRandom, RandomSource, SeededRandom, random_uuid};
pub use secret::{
    AccessToken, ApiKey, AuthorizationCode, ClientSecret, RefreshToken, SECRET_ENTROPY_BYTES,
    SecretHash, SecretHasher, SecretKind,
};
pub use store::{
    AccountStore, ApiKeyStore, ClientRegistry, CodeTake, EventSink, Rotation, StoreError,
    TokenStore,
};
pub use token::{AccessTokenRecord, CodeRecord, PkceChallenge, RefreshState, RefreshTokenRecord};

// --- conversion validation (owned by the validation work) ---
mod conversion;
// --- end conversion validation ---
