//! The records the stores persist, below the stores and the services that
//! use them: [`crate::store`] reads and writes them, [`crate::oauth`] and
//! [`crate::intake`] make and decide on them, and this module imports from
//! none of the three (only the shared types: ids, secrets, randomness).
//!
//! - [`client`]: a registered application, and its previous secret during a
//!   rotation; [`refresh_policy`]: what its refresh tokens do when used.
//! - [`grant`]: one authorization of one application by one account;
//!   [`tokens`]: the codes, access tokens and refresh tokens issued under it.
//! - [`api_key`]: an account's API key.
//! - [`event`]: recorded conversion events, the submissions that record
//!   them and the idempotency claims that come with them.
//! - [`webhook`]: an application's webhook, the deliveries made to it and
//!   their attempts.
//!
//! Accounts ([`crate::account`]) are a shared type of their own. Every
//! record holds the keyed hash of its secret, never the secret.

pub(crate) mod api_key;
pub(crate) mod client;
pub(crate) mod event;
pub(crate) mod grant;
pub(crate) mod refresh_policy;
pub(crate) mod tokens;
pub(crate) mod webhook;
