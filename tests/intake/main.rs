//! Conversion intake: the event routes through the `Gateway` (`routes`),
//! the validator's rules (`validation`), its properties (`props`), the heap
//! allocations it makes (`alloc`), that every accepted event is
//! storable alike in every store (`storable`), and the rate limits
//! (`rate_limits`).
//!
//! Linking `allocation-counter` (in `alloc`) installs its counting global
//! allocator in this binary; it counts per thread, so the other tests, on
//! threads of their own, never enter a measurement.

mod alloc;
mod props;
mod rate_limits;
mod routes;
mod storable;
mod validation;
