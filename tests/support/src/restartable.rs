//! Stores that a test can restart: the long-lived scenarios (`official_client`)
//! and the model-based tests (`model`) close and reopen them between steps,
//! as a server restarted by its operator would.
//!
//! Memory keeps its state across a "restart" (nothing else could); SQLite
//! reopens its file; PostgreSQL (in `tests/store/postgres.rs`, behind its
//! feature) reconnects to its schema.

use std::sync::Arc;

use conversion_gateway::{SqliteStore, Stores};

use crate::TempDir;

/// A set of stores that can be closed and opened again on the same data.
#[async_trait::async_trait]
pub trait Restartable: Send + Sized + 'static {
    /// The name tests and messages give it (`memory`, `sqlite`, ...).
    const NAME: &'static str;

    /// Fresh, empty stores.
    async fn start() -> Self;

    /// The stores as they are open now.
    fn stores(&self) -> Stores;

    /// Closes the stores and opens them again on what they kept.
    async fn restart(&mut self);

    /// Closes the stores and removes what they kept.
    async fn stop(self);
}

/// The in-memory stores: a restart keeps their state, as a host that kept
/// its process would.
pub struct MemoryStores(Stores);

#[async_trait::async_trait]
impl Restartable for MemoryStores {
    const NAME: &'static str = "memory";

    async fn start() -> Self {
        Self(Stores::in_memory())
    }

    fn stores(&self) -> Stores {
        self.0.clone()
    }

    async fn restart(&mut self) {}

    async fn stop(self) {}
}

/// An SQLite file in a directory of its own: a restart closes the store
/// (its writer thread included) and opens the file again.
pub struct SqliteFile {
    dir: TempDir,
    store: Arc<SqliteStore>,
}

impl SqliteFile {
    async fn open(dir: &TempDir) -> Arc<SqliteStore> {
        Arc::new(
            SqliteStore::open(dir.path("gateway.db"))
                .await
                .expect("open the SQLite file"),
        )
    }
}

#[async_trait::async_trait]
impl Restartable for SqliteFile {
    const NAME: &'static str = "sqlite";

    async fn start() -> Self {
        let dir = TempDir::new("restartable-sqlite");
        let store = Self::open(&dir).await;
        Self { dir, store }
    }

    fn stores(&self) -> Stores {
        Stores::sharing(self.store.clone())
    }

    async fn restart(&mut self) {
        self.store.close().await;
        self.store = Self::open(&self.dir).await;
    }

    async fn stop(self) {
        self.store.close().await;
    }
}
