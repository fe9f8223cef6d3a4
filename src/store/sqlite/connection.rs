//! The rusqlite connections of the store's own threads (the writer of
//! events and the checkpointer): how they sync, and the log size past which
//! they checkpoint it themselves.

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

/// The size of the log, in pages, past which a committing connection
/// checkpoints it itself, as SQLite does by default at 1,000: the bound
/// on the log should the checkpointer fall behind (or fail). Under a
/// flood the checkpointer's copy never quite catches up with the writer,
/// so the log only starts over after such a checkpoint, which then has
/// only the pages since the checkpointer's last one left to copy.
pub(super) const WAL_PAGES_BOUND: u32 = 10_000;

/// How many prepared statements a connection keeps (rusqlite's cache).
const STATEMENTS_KEPT: usize = 64;

/// How the writer's connection syncs a commit.
#[derive(Clone, Copy, Debug)]
pub(super) enum Sync {
    /// `synchronous = FULL`: a commit is on disk before it is acknowledged.
    Full,
    /// `synchronous = OFF`: for a temporary database, which keeps nothing.
    Off,
}

/// A rusqlite connection to the database at `path`, for the store's own
/// threads: another process holding the write lock makes it wait up to
/// `busy_timeout`; it syncs as `sync` says, and checkpoints the log itself
/// only past [`WAL_PAGES_BOUND`] (the checkpointer does it before).
pub(super) fn open_connection(
    path: &Path,
    sync: Sync,
    busy_timeout: Duration,
) -> rusqlite::Result<Connection> {
    let connection = Connection::open(path)?;
    connection.busy_timeout(busy_timeout)?;
    let synchronous = match sync {
        Sync::Full => "FULL",
        Sync::Off => "OFF",
    };
    connection.pragma_update(None, "synchronous", synchronous)?;
    connection.pragma_update(None, "wal_autocheckpoint", WAL_PAGES_BOUND)?;
    // Savepoints (a batch, a keyed submission, a webhook write: each in one
    // of its own inside a group) keep the pages they change in a
    // sub-journal, which SQLite spills to a temporary file past 64 KiB:
    // under an intake flood with a webhook, writing that file was a quarter
    // of the writer's time (`perf`, 2026-12-06), for pages that are
    // dropped at the savepoint's end. In memory, it holds the pages one
    // submission or write changes that existed before it: for the largest,
    // a dispatched page of 500 deliveries of the intake's largest body
    // (200 KB by default) over pages a purge freed, about 100 MB, once.
    connection.pragma_update(None, "temp_store", "MEMORY")?;
    // The writer of events keeps every statement it runs prepared: its own
    // three, the webhook outbox's fifteen and the tokens' ten, past
    // rusqlite's default of 16, where a cycle through them would prepare
    // each again every time.
    connection.set_prepared_statement_cache_capacity(STATEMENTS_KEPT);
    Ok(connection)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `PRAGMA name` reads on `connection`.
    fn pragma(connection: &Connection, name: &str) -> i64 {
        connection
            .pragma_query_value(None, name, |row| row.get(0))
            .expect("the pragma")
    }

    #[test]
    fn the_threads_connections_sync_as_asked_and_keep_savepoints_in_memory() {
        let dir = conversion_gateway_testkit::TempDir::new("connection");
        let path = dir.path("gateway.db");
        let full = open_connection(&path, Sync::Full, Duration::from_secs(1)).unwrap();
        assert_eq!(pragma(&full, "synchronous"), 2, "FULL");
        // 2: MEMORY, so that a savepoint's sub-journal is never a file.
        assert_eq!(pragma(&full, "temp_store"), 2);
        assert_eq!(
            pragma(&full, "wal_autocheckpoint"),
            i64::from(WAL_PAGES_BOUND)
        );
        let off = open_connection(&path, Sync::Off, Duration::from_secs(1)).unwrap();
        assert_eq!(pragma(&off, "synchronous"), 0, "OFF");
    }
}
