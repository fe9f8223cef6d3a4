//! Webhooks: apps register a URL, and every conversion of the account is
//! POSTed there, signed the Standard Webhooks way, at least once, retried
//! on a schedule, in order per contact.
//!
//! # The area
//!
//! - `registration.rs`: the body of `POST`/`PUT /integrations/webhooks`,
//!   checked whole; `endpoint.rs`: those routes as [`crate::Gateway`]
//!   methods (bearer-authenticated as the app);
//! - `destination.rs`: which URLs and addresses deliveries may go to (no
//!   loopback, private, link-local or metadata addresses);
//! - `payload.rs`: the real service's delivery body; `signing.rs`: the
//!   secret and the Standard Webhooks headers;
//! - `retry.rs`: the retry schedule and what follows each attempt;
//! - `delivery.rs`: the dispatcher (event feed to deliveries) and the
//!   sender (deliveries to receivers) as `Gateway` methods, one step each;
//!   the loop that runs them is `crate::tasks`;
//! - `transport.rs`: the [`WebhookTransport`] trait deliveries leave
//!   through; `http.rs` (feature `webhooks`): the crate's own, on reqwest.
//!
//! The records are in `crate::records::webhook`, the storage contract in
//! `crate::store::webhooks`.

pub(crate) mod delivery;
pub(crate) mod destination;
pub(crate) mod endpoint;
#[cfg(feature = "webhooks")]
pub(crate) mod http;
pub(crate) mod options;
pub(crate) mod payload;
pub(crate) mod registration;
pub(crate) mod retry;
pub(crate) mod signing;
pub(crate) mod transport;
