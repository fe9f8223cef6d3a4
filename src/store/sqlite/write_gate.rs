//! Turns at SQLite's write lock, first come first served, for this
//! process's two writing connections.
//!
//! SQLite admits one writer at a time. The store writes through two
//! connections: sqlx's (clients, accounts, keys, webhooks, the purge) and
//! the events writer's thread (`event_writer`: events, the webhook
//! outbox's dispatches, leases and attempts, grants stored or revoked,
//! codes issued, taken or redeemed, and tokens stored or rotated). Left to
//! SQLite, the one that finds the lock taken waits in SQLite's busy
//! handler, which sleeps 1, 2, 5, 10 ... up to 100 ms between tries: under
//! an event flood the writer of events holds the lock most of the time, and
//! a token refresh lost the race again and again (measured: refresh p99 of
//! 107 to 332 ms). Here each writer takes a turn at a fair lock before it
//! takes SQLite's, so a write through sqlx waits at most for the group
//! being written: its events, and the outbox's and the tokens' writes that
//! ride in it (a dispatched page among them).
//! Other processes on the same file still meet SQLite's busy timeout.

use std::sync::Arc;

use tokio::sync::{Mutex, OwnedMutexGuard};

/// The lock both writing connections take before they write. Cloning
/// shares it.
#[derive(Clone, Debug, Default)]
pub(super) struct WriteGate(Arc<Mutex<()>>);

/// A writer's turn: the others wait until it is dropped.
pub(super) type Turn = OwnedMutexGuard<()>;

impl WriteGate {
    /// Waits for this writer's turn (tokio's mutex serves waiters in the
    /// order they came).
    pub(super) async fn turn(&self) -> Turn {
        Arc::clone(&self.0).lock_owned().await
    }

    /// Waits for this writer's turn, blocking the thread: for the writer of
    /// events, which runs on a thread of its own, outside the runtime.
    pub(super) fn blocking_turn(&self) -> Turn {
        Arc::clone(&self.0).blocking_lock_owned()
    }
}
