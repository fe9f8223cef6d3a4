//! conversion-gateway (crate docs are written as the core lands).
#![warn(missing_docs)]

mod account;
mod bearer;
mod client;
mod clock;
mod config;
mod dialog;
mod event;
mod gateway;
mod grant;
mod http;
mod lifecycle;
mod memory;
mod random;
mod request;
mod revocation;
mod secret;
mod store;
mod token;
mod token_endpoint;
mod token_error;

#[cfg(feature = "test-util")]
pub mod conformance;

pub use account::{Account, AccountId, ApiKeyId, ApiKeyRecord};
pub use bearer::BearerError;
pub use client::{Client, ClientId};
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{GatewayConfig, RefreshPolicy};
pub use dialog::{AuthorizationRequest, DialogError};
pub use event::{EventSubmission, IdempotencyClaim, IntakeChannel, RecordOutcome, RecordedEvent};
pub use grant::{Grant, GrantId};
pub use gateway::{Gateway, Stores};
pub use http::{AnswerBody, HttpAnswer};
pub use lifecycle::{
    AccessRefusal, Caller, RotatedUse, access_token_record, check_access_token, check_code_exchange,
    check_refresh_token, is_active, is_pkce_value, judge_rotated_use, pkce_matches,
    refresh_token_record,
};
pub use memory::{
    MemoryAccountStore, MemoryApiKeyStore, MemoryClientRegistry, MemoryEventSink, MemoryTokenStore,
};
pub use random::{OsRandom, RandomSource, SeededRandom, random_uuid};
pub use request::{ParamsError, RequestParts};
pub use revocation::RevocationError;
pub use secret::{
    AccessToken, ApiKey, AuthorizationCode, ClientSecret, RefreshToken, SECRET_ENTROPY_BYTES,
    SecretHash, SecretHasher, SecretKind,
};
pub use store::{
    AccountStore, ApiKeyStore, ClientRegistry, CodeTake, EventSink, Rotation, StoreError,
    TokenStore,
};
pub use token::{AccessTokenRecord, CodeRecord, PkceChallenge, RefreshState, RefreshTokenRecord};
pub use token_endpoint::TokenResponse;
pub use token_error::TokenError;

mod conversion;


