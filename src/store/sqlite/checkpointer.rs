//! Checkpoints of the write-ahead log on a thread of their own, off the
//! writer of events' path.
//!
//! In WAL mode a commit appends pages to the log; a checkpoint copies them
//! back into the database file and syncs it, so that the log can start
//! over. Left to SQLite, the connection whose commit takes the log past
//! 1,000 pages runs the checkpoint inside that commit: under an event flood
//! that was the writer of events, every few thousand events, and every
//! `record` call queued meanwhile waited for it (profiled: 16% of the
//! writer's time). SQLite lets another connection do it instead ("run
//! checkpoints from a separate thread", the documentation of
//! `sqlite3_wal_autocheckpoint`): a `PASSIVE` checkpoint copies what it can
//! without taking the write lock, so the writer goes on appending while the
//! other core copies.
//!
//! Durability does not move: a commit is acknowledged once the log holds it
//! (synced, with `synchronous = FULL`); a checkpoint only moves committed
//! pages from the log to the database file.

use std::path::Path;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::Duration;

use rusqlite::Connection;

use crate::store::error::StoreError;

use super::connection::{Sync, open_connection};

/// How many events are committed between two checkpoints: about a
/// megabyte of log (a typical conversion and its index entries take a
/// quarter to a third of a 4 KiB page).
const EVENTS_PER_CHECKPOINT: usize = 1_000;

/// The handle of the checkpointer's thread; dropping it ends the thread
/// (after the checkpoint in hand, if any), which closes its connection.
#[derive(Debug)]
pub(super) struct Checkpointer {
    nudge: SyncSender<()>,
    /// Events committed since the thread was last nudged.
    since_nudge: usize,
}

impl Checkpointer {
    /// Opens a connection to the database at `path` (synced as the
    /// writer's, `sync`: with `FULL`, a checkpoint syncs the file it copied
    /// into) and starts the thread.
    ///
    /// # Errors
    /// [`StoreError::Backend`] if the database cannot be opened or the
    /// thread cannot be started.
    pub(super) fn start(
        path: &Path,
        sync: Sync,
        busy_timeout: Duration,
    ) -> Result<Self, StoreError> {
        const ACTION: &str = "open the SQLite checkpointer";
        let connection = open_connection(path, sync, busy_timeout)
            .map_err(|error| StoreError::backend(ACTION, error))?;
        let (nudge, nudges) = sync_channel(1);
        std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || run(&connection, &nudges))
            .map_err(|error| StoreError::backend(ACTION, error))?;
        Ok(Self {
            nudge,
            since_nudge: 0,
        })
    }

    /// Counts `events` just committed, and asks for a checkpoint, without
    /// waiting for it, once [`EVENTS_PER_CHECKPOINT`] have been. A nudge
    /// that finds one already waiting is the same nudge; should the thread
    /// be gone (it panicked), the writers' own checkpoint at
    /// [`WAL_PAGES_BOUND`](super::connection::WAL_PAGES_BOUND) still bounds the log.
    pub(super) fn committed(&mut self, events: usize) {
        self.since_nudge += events;
        if self.since_nudge >= EVENTS_PER_CHECKPOINT {
            let _ = self.nudge.try_send(());
            self.since_nudge = 0;
        }
    }
}

/// Runs a passive checkpoint for each nudge, until the handle is dropped.
fn run(connection: &Connection, nudges: &Receiver<()>) {
    while nudges.recv().is_ok() {
        // A checkpoint that fails (the disk is full, another process
        // holds a lock it needs) leaves the log as it was: the next nudge
        // tries again, and the bound above still holds.
        let _ = connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
    }
}
