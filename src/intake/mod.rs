//! Conversion intake: API keys, the validator, and the three event routes.
//!
//! # The flow
//!
//! 1. Authenticate: an API key in the query (`POST /platform/conversions`,
//!    from website forms; [`api_key`], remembered for a few seconds by
//!    [`api_key_cache`]) or an OAuth bearer token
//!    (`POST /platform/events` and `/platform/events/batch`, from
//!    applications).
//! 2. Validate the body in one pass with no allocation for a valid event
//!    ([`validator`]): every error is reported, each with its JSON path.
//! 3. Charge the events against the deployment's limits ([`rate_limit`]:
//!    per lead, per account, per credential), all at once or not at all.
//! 4. Record through the [`crate::EventSink`] with the request's
//!    `Idempotency-Key`, if any, in one atomic operation (the records in
//!    [`crate::records::event`]): a
//!    retry is answered with the first request's `event_uuid`s, a reused key
//!    with another body is refused.
//! 5. Answer the [`crate::IntakeReceipt`] (`event_uuid`, or the batch's).
//!
//! [`endpoint`] holds steps 1, 3, 4 and 5; nothing in [`validator`] touches
//! a store, a clock or the network.

pub(crate) mod api_key;
pub(crate) mod api_key_cache;
pub(crate) mod endpoint;
pub mod rate_limit;
pub(crate) mod validator;
