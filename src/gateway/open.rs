//! [`Stores`] opened from a URL, as an operator names them in a flag or a
//! configuration file: `memory`, `sqlite:PATH` or `postgres://...`.
//!
//! Beside [`Stores`], which it builds, and above the stores it opens.
//! Parsing is pure and knows every kind of store whatever the crate's
//! features; opening a store whose feature is off fails with
//! [`OpenStoreError::NotBuiltIn`], so that a host's flag says why instead
//! of "unknown store".

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use std::sync::Arc;

use crate::gateway::Stores;
use crate::server_key::sqlite_files;
use crate::store::error::StoreError;
#[cfg(feature = "postgres")]
use crate::store::postgres::PgStore;
#[cfg(feature = "sqlite")]
use crate::store::sqlite::SqliteStore;

/// Where the stores live: `memory`, `sqlite:PATH` or
/// `postgres://USER@HOST/DB` (also `postgresql://`).
///
/// `Display` and `Debug` never show a PostgreSQL URL, which may hold a
/// password: it prints as `postgres`.
///
/// Exhaustive on purpose: hosts derive other settings from the kind of
/// store (the service puts its key file beside the SQLite file), and a new
/// kind should make each of them decide, not fall into a catch-all arm.
///
/// ```
/// use conversion_gateway::StoreUrl;
///
/// let url: StoreUrl = "sqlite:gateway.db".parse()?;
/// assert_eq!(url, StoreUrl::Sqlite("gateway.db".into()));
/// let url: StoreUrl = "postgres://app:secret@db.internal/gateway".parse()?;
/// assert_eq!(url.to_string(), "postgres");
/// # Ok::<(), conversion_gateway::StoreUrlError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// Every store in this process's memory ([`Stores::in_memory`]): nothing
    /// survives a restart.
    Memory,
    /// One SQLite database file (feature `sqlite`), created if missing.
    Sqlite(PathBuf),
    /// A PostgreSQL database (feature `postgres`), shared by every
    /// instance; the URL as given, password included.
    Postgres(String),
}

/// A store URL that is none of `memory`, `sqlite:PATH` or `postgres://...`.
///
/// Its message follows the name of the setting that held the URL, as in
/// `format!("--store {error}")`: "--store must be memory, sqlite:PATH or
/// postgres://..., not \"mysql://db\"".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreUrlError {
    /// `sqlite:` with no path after it.
    #[error("sqlite: needs a file path, e.g. sqlite:conversion-gateway.db")]
    MissingSqlitePath,
    /// Some other text; shown only when it cannot hold a password (no `@`).
    #[error("must be memory, sqlite:PATH or postgres://..., not {shown}")]
    Unrecognised {
        /// The text quoted, or a note that it is not shown.
        shown: String,
    },
}

/// A store that could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenStoreError {
    /// The URL names a store this build of the crate does not hold.
    #[error(
        "the {store} store is not built in: turn on the `{feature}` feature of conversion-gateway"
    )]
    NotBuiltIn {
        /// `sqlite` or `postgres`.
        store: &'static str,
        /// The crate feature that builds it in.
        feature: &'static str,
    },
    /// The SQLite database could not be opened or migrated.
    #[error("cannot open the SQLite store {}", path.display())]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// Why.
        #[source]
        source: StoreError,
    },
    /// The PostgreSQL database could not be reached or migrated (its URL
    /// is not repeated: it may hold a password).
    #[error("cannot open the PostgreSQL store")]
    Postgres {
        /// Why.
        #[source]
        source: StoreError,
    },
}

impl FromStr for StoreUrl {
    type Err = StoreUrlError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text == "memory" {
            Ok(StoreUrl::Memory)
        } else if let Some(path) = text.strip_prefix("sqlite:") {
            if path.is_empty() {
                return Err(StoreUrlError::MissingSqlitePath);
            }
            Ok(StoreUrl::Sqlite(PathBuf::from(path)))
        } else if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            Ok(StoreUrl::Postgres(text.to_owned()))
        } else {
            // A mistyped PostgreSQL URL ("postgress://app:secret@...") may
            // still hold a password.
            let shown = if text.contains('@') {
                "a URL with credentials (not shown)".to_owned()
            } else {
                format!("{text:?}")
            };
            Err(StoreUrlError::Unrecognised { shown })
        }
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Memory => f.write_str("memory"),
            StoreUrl::Sqlite(path) => write!(f, "sqlite:{}", path.display()),
            // The URL may hold a password: never printed.
            StoreUrl::Postgres(_) => f.write_str("postgres"),
        }
    }
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreUrl({self})")
    }
}

impl StoreUrl {
    /// Opens the stores: fresh ones in memory, or the database, created or
    /// migrated to this version's schema.
    ///
    /// # Errors
    ///
    /// [`OpenStoreError::NotBuiltIn`] for a store whose feature is off;
    /// [`OpenStoreError::Sqlite`] or [`OpenStoreError::Postgres`] when the
    /// database cannot be opened.
    pub async fn open(&self) -> Result<OpenedStore, OpenStoreError> {
        let opened = match self {
            StoreUrl::Memory => Opened::Memory(Stores::in_memory()),
            #[cfg(feature = "sqlite")]
            StoreUrl::Sqlite(path) => SqliteStore::open(path)
                .await
                .map(|store| Opened::Sqlite(Arc::new(store)))
                .map_err(|source| OpenStoreError::Sqlite {
                    path: path.clone(),
                    source,
                })?,
            #[cfg(not(feature = "sqlite"))]
            StoreUrl::Sqlite(_) => {
                return Err(OpenStoreError::NotBuiltIn {
                    store: "sqlite",
                    feature: "sqlite",
                });
            }
            #[cfg(feature = "postgres")]
            StoreUrl::Postgres(url) => PgStore::connect(url)
                .await
                .map(|store| Opened::Postgres(Arc::new(store)))
                .map_err(|source| OpenStoreError::Postgres { source })?,
            #[cfg(not(feature = "postgres"))]
            StoreUrl::Postgres(_) => {
                return Err(OpenStoreError::NotBuiltIn {
                    store: "postgres",
                    feature: "postgres",
                });
            }
        };
        Ok(OpenedStore { opened })
    }
}

impl StoreUrl {
    /// A file that belongs with the store, named by `suffix`: beside the
    /// SQLite database (its path and `suffix`: `gateway.db.key`), else
    /// `conversion-gateway` and `suffix` in the working directory
    /// (`conversion-gateway.key`).
    pub fn file_beside(&self, suffix: &str) -> PathBuf {
        let mut path = match self {
            StoreUrl::Sqlite(database) => database.as_os_str().to_owned(),
            StoreUrl::Memory | StoreUrl::Postgres(_) => "conversion-gateway".into(),
        };
        path.push(suffix);
        PathBuf::from(path)
    }

    /// Where the server key of this store lives unless a host says
    /// otherwise ([`ServerKey::load_or_create`](crate::server_key::ServerKey::load_or_create)
    /// reads or creates it): `.key` beside the SQLite database,
    /// `conversion-gateway.key` for PostgreSQL. `None` for the memory
    /// store, which keeps nothing a fresh key could not hash again.
    pub fn default_key_file(&self) -> Option<PathBuf> {
        match self {
            StoreUrl::Memory => None,
            StoreUrl::Sqlite(_) | StoreUrl::Postgres(_) => Some(self.file_beside(".key")),
        }
    }

    /// The files of this store that only its owner should read: the SQLite
    /// database and its write-ahead files ([`sqlite_files`]), to pass to
    /// [`exposed_files`](crate::server_key::exposed_files) with the key
    /// file. None for the others.
    pub fn private_files(&self) -> Vec<PathBuf> {
        match self {
            StoreUrl::Sqlite(database) => sqlite_files(database),
            StoreUrl::Memory | StoreUrl::Postgres(_) => Vec::new(),
        }
    }
}

/// Stores opened by [`StoreUrl::open`]: hands out [`Stores`], and is kept
/// to close them at shutdown.
pub struct OpenedStore {
    opened: Opened,
}

/// What was opened, for `close`.
enum Opened {
    Memory(Stores),
    #[cfg(feature = "sqlite")]
    Sqlite(Arc<SqliteStore>),
    #[cfg(feature = "postgres")]
    Postgres(Arc<PgStore>),
}

impl fmt::Debug for OpenedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.opened {
            Opened::Memory(_) => "memory",
            #[cfg(feature = "sqlite")]
            Opened::Sqlite(_) => "sqlite",
            #[cfg(feature = "postgres")]
            Opened::Postgres(_) => "postgres",
        };
        write!(f, "OpenedStore({kind})")
    }
}

impl OpenedStore {
    /// The stores, for [`Gateway::new`](crate::gateway::Gateway::new): each
    /// call shares the same ones.
    pub fn stores(&self) -> Stores {
        match &self.opened {
            Opened::Memory(stores) => stores.clone(),
            #[cfg(feature = "sqlite")]
            Opened::Sqlite(store) => Stores::sharing(store.clone()),
            #[cfg(feature = "postgres")]
            Opened::Postgres(store) => Stores::sharing(store.clone()),
        }
    }

    /// Closes the database once no request runs any more: SQLite's writer
    /// finishes what it was given and checkpoints its write-ahead log into
    /// the database file; PostgreSQL's connections are closed. Nothing to
    /// do in memory.
    pub async fn close(&self) {
        match &self.opened {
            Opened::Memory(_) => {}
            #[cfg(feature = "sqlite")]
            Opened::Sqlite(store) => store.close().await,
            #[cfg(feature = "postgres")]
            Opened::Postgres(store) => store.close().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<StoreUrl, StoreUrlError> {
        text.parse()
    }

    #[test]
    fn the_three_kinds_of_store_parse() {
        assert_eq!(parsed("memory"), Ok(StoreUrl::Memory));
        assert_eq!(
            parsed("sqlite:dir/x.db"),
            Ok(StoreUrl::Sqlite(PathBuf::from("dir/x.db")))
        );
        for url in ["postgres://app@db/gw", "postgresql://app@db/gw"] {
            assert_eq!(parsed(url), Ok(StoreUrl::Postgres(url.to_owned())));
        }
    }

    #[test]
    fn a_sqlite_url_needs_a_path() {
        assert_eq!(parsed("sqlite:"), Err(StoreUrlError::MissingSqlitePath));
    }

    #[test]
    fn anything_else_is_refused_with_the_text_quoted() {
        for text in ["", "Memory", "mysql://db/gw", "sqlite"] {
            let error = parsed(text).unwrap_err();
            assert!(
                error.to_string().ends_with(&format!("not {text:?}")),
                "{error}"
            );
        }
    }

    #[test]
    fn a_postgres_password_is_never_printed() {
        let url = parsed("postgres://app:hunter2@db.internal/gw").unwrap();
        assert_eq!(url.to_string(), "postgres");
        assert_eq!(format!("{url:?}"), "StoreUrl(postgres)");
        // Nor when the scheme is mistyped.
        let error = parsed("postgress://app:hunter2@db.internal/gw").unwrap_err();
        assert!(!error.to_string().contains("hunter2"), "{error}");
        assert!(!format!("{error:?}").contains("hunter2"), "{error:?}");
    }

    #[test]
    fn a_sqlite_url_prints_as_it_was_written() {
        let url = parsed("sqlite:dir/x.db").unwrap();
        assert_eq!(url.to_string(), "sqlite:dir/x.db");
        assert_eq!(parsed(&url.to_string()), Ok(url));
    }

    #[test]
    fn the_key_and_other_files_go_beside_the_sqlite_database() {
        let sqlite = parsed("sqlite:dir/x.db").unwrap();
        assert_eq!(
            sqlite.file_beside(".demo.json"),
            PathBuf::from("dir/x.db.demo.json")
        );
        assert_eq!(
            sqlite.default_key_file(),
            Some(PathBuf::from("dir/x.db.key"))
        );
        assert_eq!(sqlite.private_files(), sqlite_files("dir/x.db".as_ref()));
        let postgres = parsed("postgres://app@db/gw").unwrap();
        assert_eq!(
            postgres.default_key_file(),
            Some(PathBuf::from("conversion-gateway.key"))
        );
        assert_eq!(postgres.private_files(), Vec::<PathBuf>::new());
        assert_eq!(StoreUrl::Memory.default_key_file(), None);
        assert_eq!(
            StoreUrl::Memory.file_beside(".demo.json"),
            PathBuf::from("conversion-gateway.demo.json")
        );
    }

    #[tokio::test]
    async fn memory_opens_one_set_of_stores() {
        let opened = StoreUrl::Memory.open().await.unwrap();
        let account = crate::account::Account::new(
            "Acme",
            "owner@acme.example",
            &crate::random::SeededRandom::new(1),
        );
        opened
            .stores()
            .accounts
            .insert_account(&account)
            .await
            .unwrap();
        let found = opened.stores().accounts.find_account(account.id).await;
        assert_eq!(found.unwrap().map(|found| found.id), Some(account.id));
        opened.close().await;
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn sqlite_opens_the_file_and_keeps_what_was_written_after_close() {
        let dir = std::env::temp_dir().join(format!(
            "cg-open-{}-{}",
            std::process::id(),
            crate::random::random_uuid(&crate::random::OsRandom)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let url = StoreUrl::Sqlite(dir.join("gateway.db"));
        let account = crate::account::Account::new(
            "Acme",
            "owner@acme.example",
            &crate::random::SeededRandom::new(1),
        );
        let opened = url.open().await.unwrap();
        opened
            .stores()
            .accounts
            .insert_account(&account)
            .await
            .unwrap();
        opened.close().await;

        let reopened = url.open().await.unwrap();
        let found = reopened.stores().accounts.find_account(account.id).await;
        assert_eq!(found.unwrap().map(|found| found.id), Some(account.id));
        reopened.close().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn a_sqlite_file_that_cannot_be_created_names_its_path() {
        let url = StoreUrl::Sqlite(PathBuf::from("/nonexistent/dir/gateway.db"));
        let error = url.open().await.unwrap_err();
        assert!(
            matches!(&error, OpenStoreError::Sqlite { path, .. } if path == std::path::Path::new("/nonexistent/dir/gateway.db")),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            "cannot open the SQLite store /nonexistent/dir/gateway.db"
        );
    }

    #[cfg(not(feature = "postgres"))]
    #[tokio::test]
    async fn a_store_whose_feature_is_off_says_which_feature() {
        let url = parsed("postgres://app:hunter2@db/gw").unwrap();
        let error = url.open().await.unwrap_err();
        assert_eq!(
            error.to_string(),
            "the postgres store is not built in: turn on the `postgres` feature of conversion-gateway"
        );
    }
}
