//! Operations: deleting what expired, and telling a load balancer whether
//! the stores answer.

use crate::gateway::Gateway;
use crate::store::error::StoreError;

/// What [`Gateway::readiness`] found: each store by name (`tokens`,
/// `clients`, `accounts`, `api_keys`, `events`), and whether it answered.
#[derive(Debug)]
#[non_exhaustive]
pub struct Readiness {
    /// Each store, with its failure if it did not answer.
    pub stores: Vec<(&'static str, Option<StoreError>)>,
}

impl Readiness {
    /// Whether every store answered.
    pub fn is_ready(&self) -> bool {
        self.stores.iter().all(|(_, failure)| failure.is_none())
    }

    /// The names of the stores that did not answer.
    pub fn failed(&self) -> Vec<&'static str> {
        self.stores
            .iter()
            .filter(|(_, failure)| failure.is_some())
            .map(|(name, _)| *name)
            .collect()
    }
}

/// What [`Gateway::purge_expired`] deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PurgeReport {
    /// Codes, access tokens and refresh tokens.
    pub tokens: usize,
    /// Idempotency claims.
    pub idempotency_claims: usize,
    /// Webhook deliveries that ended (delivered or given up).
    pub webhook_deliveries: usize,
    /// Queues of webhook deliveries whose first pending delivery a
    /// previous release left unmarked, made leasable again
    /// ([`WebhookStore::repair_queue_heads`](crate::WebhookStore::repair_queue_heads)).
    /// Not a deletion, but the same periodic upkeep; anything but 0 means
    /// an instance of an earlier release wrote to the store.
    pub queue_heads_repaired: usize,
}

impl Gateway {
    /// Deletes what stopped being usable more than
    /// [`GatewayConfig::purge_retention`](crate::config::GatewayConfig::purge_retention) ago: expired authorization codes
    /// and access tokens, rotated and expired refresh tokens, the refresh
    /// tokens of revoked grants, expired idempotency claims, and webhook
    /// deliveries that ended (delivered or given up). Events,
    /// accounts, clients, API keys and grants are kept. Then it repairs
    /// the webhook delivery queues an earlier release left unleasable
    /// ([`WebhookStore::repair_queue_heads`](crate::WebhookStore::repair_queue_heads)),
    /// one statement that marks nothing on a store only this release wrote.
    ///
    /// Deletes in batches of [`GatewayConfig::purge_batch`](crate::config::GatewayConfig::purge_batch), each a short
    /// statement of its own, until nothing is left, so that requests running
    /// beside it never wait long. A host calls it periodically (the example
    /// server: every ten minutes).
    ///
    /// # Errors
    /// The store's error; what was deleted before it stays deleted, and the
    /// next call carries on.
    pub async fn purge_expired(&self) -> Result<PurgeReport, StoreError> {
        let cutoff = self.clock.now() - self.config.purge_retention;
        let batch = self.config.purge_batch.max(1);
        let mut report = PurgeReport::default();
        loop {
            let deleted = self.stores.tokens.purge_expired(cutoff, batch).await?;
            report.tokens += deleted;
            if deleted < batch {
                break;
            }
        }
        loop {
            let deleted = self
                .stores
                .events
                .purge_expired_claims(cutoff, batch)
                .await?;
            report.idempotency_claims += deleted;
            if deleted < batch {
                break;
            }
        }
        loop {
            let deleted = self.stores.webhooks.purge_deliveries(cutoff, batch).await?;
            report.webhook_deliveries += deleted;
            if deleted < batch {
                break;
            }
        }
        report.queue_heads_repaired = self.stores.webhooks.repair_queue_heads().await?;
        Ok(report)
    }

    /// Asks every store whether its backend answers (a cheap round trip
    /// each, with a short timeout), for a load balancer's readiness check:
    /// an instance whose database is gone should get no traffic.
    pub async fn readiness(&self) -> Readiness {
        let stores = &self.stores;
        let mut checked = Vec::with_capacity(5);
        checked.push(("tokens", stores.tokens.ready().await.err()));
        checked.push(("clients", stores.clients.ready().await.err()));
        checked.push(("accounts", stores.accounts.ready().await.err()));
        checked.push(("api_keys", stores.api_keys.ready().await.err()));
        checked.push(("events", stores.events.ready().await.err()));
        Readiness { stores: checked }
    }
}
