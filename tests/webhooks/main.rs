//! Webhooks through the `Gateway`, on the memory store, a manual clock and
//! a receiver in memory: registration (`registration`), the dispatch and
//! the attempts with their retries (`delivery`), the metrics the attempts
//! record (`attempt_metrics`), and the delivery loop's isolation of slow
//! receivers (`worker`); and `HttpWebhookTransport` against real receivers
//! on loopback, with its refusals of private destinations (`transport`).
//! The stores' own contract is in the `store` tests; the release server
//! with real receivers and a Standard Webhooks verifier in the service's
//! tests.

mod attempt_metrics;
mod delivery;
mod registration;
mod support;
mod transport;
mod worker;
