//! The bodies of `/healthz` and `/readyz`, schema-only mirrors of the
//! `json!` in `axum/operating.rs`.

use std::collections::BTreeMap;

use serde::Deserialize;
use utoipa::ToSchema;

/// The process serves.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Health {
    /// `ok`.
    pub(crate) status: HealthStatus,
}

/// The only health.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum HealthStatus {
    /// Serving.
    Ok,
}

/// Every store answered.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Ready {
    /// `ready`.
    pub(crate) status: ReadyStatus,
    /// Each store by name (`tokens`, `events`, ...), and its state.
    pub(crate) stores: BTreeMap<String, StoreState>,
}

/// The readiness of a ready instance.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ReadyStatus {
    /// Every store answers.
    Ready,
}

/// A store did not answer in time: route around this instance. Never why
/// (the cause is logged).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NotReady {
    /// `unavailable`.
    pub(crate) status: NotReadyStatus,
    /// Each store by name, and its state.
    pub(crate) stores: BTreeMap<String, StoreState>,
    /// The names of the stores that failed.
    #[schema(min_items = 1)]
    pub(crate) failed: Vec<String>,
}

/// The readiness of an instance that is not ready.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum NotReadyStatus {
    /// A store failed.
    Unavailable,
}

/// Whether a store answered.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum StoreState {
    /// It answered.
    Ok,
    /// It did not answer in time, or failed.
    Unavailable,
}
