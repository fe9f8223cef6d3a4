//! Webhooks across the crate: the HTTP transport against real receivers on
//! loopback, and its refusals of private destinations (`transport`).

mod transport;
