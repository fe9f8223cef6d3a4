//! The helpers conversion-gateway's integration tests share, in one place:
//! each test binary (`tests/oauth`, `tests/intake`, `tests/store`,
//! `tests/axum`, `tests/pages`, the service's `server/tests/server`) depends on this crate instead of carrying copies.

mod events;
mod fixture;
pub mod hostile;
pub mod model;
pub mod official_client;
mod pages;
pub mod refresh_scenarios;
mod reply;
pub mod restartable;
mod stores;
mod temp_dir;

pub use events::conversion_body;
pub use fixture::*;
pub use pages::hidden;
pub use reply::{Reply, encode, form, param as url_param};
pub use stores::{DownStore, FlakyTokens, HeldApiKeys, HeldLookup};
pub use temp_dir::TempDir;
