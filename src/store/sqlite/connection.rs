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
    Ok(connection)
}
