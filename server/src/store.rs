//! Where the data lives: the `--store` choice, and the store it opens,
//! kept to close it (and checkpoint SQLite) at shutdown.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use conversion_gateway::Stores;

use crate::describe;

/// Where the data lives.
#[derive(Clone)]
pub enum StoreChoice {
    Memory,
    Sqlite(PathBuf),
    Postgres(String),
}

impl fmt::Display for StoreChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreChoice::Memory => f.write_str("memory"),
            StoreChoice::Sqlite(path) => write!(f, "sqlite:{}", path.display()),
            // The address may hold a password: never printed.
            StoreChoice::Postgres(_) => f.write_str("postgres"),
        }
    }
}

impl StoreChoice {
    pub fn parse(text: &str) -> Result<Self, String> {
        if text == "memory" {
            Ok(StoreChoice::Memory)
        } else if let Some(path) = text.strip_prefix("sqlite:") {
            if path.is_empty() {
                return Err(
                    "--store sqlite: needs a file path, e.g. sqlite:conversion-gateway.db".into(),
                );
            }
            Ok(StoreChoice::Sqlite(PathBuf::from(path)))
        } else if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            Ok(StoreChoice::Postgres(text.to_owned()))
        } else {
            Err(format!(
                "--store must be memory, sqlite:PATH or postgres://..., not {text:?}"
            ))
        }
    }
}

/// An opened store, kept to close it at shutdown.
pub enum OpenStore {
    Memory(Stores),
    Sqlite(Arc<conversion_gateway::SqliteStore>),
    Postgres(Arc<conversion_gateway::PgStore>),
}

impl OpenStore {
    pub async fn open(choice: &StoreChoice) -> Result<Self, String> {
        match choice {
            StoreChoice::Memory => Ok(OpenStore::Memory(Stores::in_memory())),
            StoreChoice::Sqlite(path) => conversion_gateway::SqliteStore::open(path)
                .await
                .map(|store| OpenStore::Sqlite(Arc::new(store)))
                .map_err(|error| {
                    format!(
                        "cannot open the SQLite store {}: {}",
                        path.display(),
                        describe(&error)
                    )
                }),
            StoreChoice::Postgres(url) => conversion_gateway::PgStore::connect(url)
                .await
                .map(|store| OpenStore::Postgres(Arc::new(store)))
                .map_err(|error| format!("cannot open the PostgreSQL store: {}", describe(&error))),
        }
    }

    pub fn stores(&self) -> Stores {
        match self {
            OpenStore::Memory(stores) => stores.clone(),
            OpenStore::Sqlite(store) => Stores::sharing(store.clone()),
            OpenStore::Postgres(store) => Stores::sharing(store.clone()),
        }
    }

    pub async fn close(&self) {
        match self {
            OpenStore::Memory(_) => {}
            OpenStore::Sqlite(store) => store.close().await,
            OpenStore::Postgres(store) => store.close().await,
        }
    }
}
