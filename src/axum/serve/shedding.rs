//! The open connections, and which one the accept loop closes when every
//! slot is taken.
//!
//! A connection is *waiting* while it has not sent a whole request: a new
//! one that has sent nothing yet, a kept-alive one between two requests, one
//! half-way through its headers. It is *busy* from the moment its request's
//! headers have arrived until its answer has been written. Waiting
//! connections queue in the order they started waiting; at capacity the
//! accept loop closes the one at the front, the connection that has been
//! waiting longest (nginx and Envoy shed idle connections first the same
//! way). A busy connection is never closed to make room.
//!
//! The same queue bounds how long a kept-alive connection may wait between
//! two requests: the accept loop sweeps it (`close_waiting_since`) and
//! closes every connection that has waited longer than the header timeout
//! since its last answer, with no timer a request. A new connection's first
//! wait is not the sweep's: the first-byte timeout bounds it, then a
//! deadline of its own task from its first byte (`mod.rs`).
//!
//! Closing a kept-alive connection can cross a request the client has just
//! sent on it; HTTP/1.1 allows for that (RFC 9112 section 9.3.1: "a client,
//! server, or proxy MAY close the transport connection at any time") and
//! clients retry an idempotent request on a fresh connection.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::Notify;
use tokio::sync::futures::Notified;
use tokio::time::Instant;

/// The two low bits of [`Connection::state`]; the bits above count its
/// requests, so that a queue entry of an earlier wait is told from the
/// current one.
const WAITING: u64 = 0;
const BUSY: u64 = 1;
const CLOSED: u64 = 2;
const TAG: u64 = 0b11;

fn state(tag: u64, epoch: u64) -> u64 {
    (epoch << 2) | tag
}

/// One open connection, shared by its task, its requests and the queue of
/// waiting connections.
pub(super) struct Connection {
    /// Waiting, busy or closed, and its epoch (see [`TAG`]).
    state: AtomicU64,
    /// Wakes the connection's task when the connection is to be closed.
    close: Notify,
}

impl Connection {
    /// Resolves once the connection has been chosen to be closed. Polled by
    /// the connection's own task; a choice made before the first poll is
    /// kept.
    pub(super) fn closing(&self) -> Notified<'_> {
        self.close.notified()
    }

    /// Whether the connection still waits as it did at `epoch`.
    fn waits_at(&self, epoch: u64) -> bool {
        self.state.load(Ordering::Acquire) == state(WAITING, epoch)
    }

    /// Closes the connection if it still waits as it did at `epoch`: never
    /// a busy one, nor one that has waited again since.
    fn close_if_waiting_at(&self, epoch: u64) -> bool {
        let closed = self
            .state
            .compare_exchange(
                state(WAITING, epoch),
                state(CLOSED, 0),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        if closed {
            // Stored if the task is not listening yet.
            self.close.notify_one();
        }
        closed
    }

    /// Closes the connection if it still waits for its first request;
    /// whether it did.
    pub(super) fn close_first_wait(&self) -> bool {
        self.close_if_waiting_at(0)
    }

    /// Marks the connection closed: its task has ended.
    pub(super) fn mark_closed(&self) {
        self.state.store(state(CLOSED, 0), Ordering::Release);
    }
}

/// A connection in the queue of waiting ones: the epoch it started waiting
/// at, and when.
struct Waiting {
    connection: Arc<Connection>,
    epoch: u64,
    since: Instant,
}

impl Waiting {
    /// Whether the connection has become busy, waited again or closed
    /// since this entry was queued.
    fn is_stale(&self) -> bool {
        !self.connection.waits_at(self.epoch)
    }
}

/// Every open connection that waits, oldest first, and a signal for the
/// accept loop when one starts waiting.
pub(super) struct OpenConnections {
    /// The waiting connections with the epoch they started waiting at, in
    /// that order (so also in the order of `since`: each entry takes its
    /// time under the lock). An entry whose connection has since become
    /// busy, waited again or closed is stale: skipped when met, dropped
    /// when the queue is compacted.
    waiting: Mutex<VecDeque<Waiting>>,
    /// Past this many entries the queue drops its stale ones: twice the
    /// connections that can be open, so compacting costs O(1) per entry.
    compact_at: usize,
    /// A connection has started waiting again (its answer was written).
    became_waiting: Notify,
}

impl OpenConnections {
    /// No connection yet, for at most `capacity` open at once.
    pub(super) fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            waiting: Mutex::new(VecDeque::new()),
            compact_at: capacity.saturating_mul(2).max(64),
            became_waiting: Notify::new(),
        })
    }

    /// A newly accepted connection, waiting for its first request.
    pub(super) fn open(&self) -> Arc<Connection> {
        let connection = Arc::new(Connection {
            state: AtomicU64::new(state(WAITING, 0)),
            close: Notify::new(),
        });
        self.push(connection.clone(), 0);
        connection
    }

    fn push(&self, connection: Arc<Connection>, epoch: u64) {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        if waiting.len() >= self.compact_at {
            waiting.retain(|entry| !entry.is_stale());
        }
        waiting.push_back(Waiting {
            connection,
            epoch,
            since: Instant::now(),
        });
    }

    /// Closes the connection that has waited longest, if any waits; whether
    /// one was closed. Its slot is free once its task has ended.
    pub(super) fn close_longest_waiting(&self) -> bool {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(entry) = waiting.pop_front() {
            if entry.connection.close_if_waiting_at(entry.epoch) {
                return true;
            }
        }
        false
    }

    /// Closes every connection that has been waiting for its next request
    /// since `cutoff` or earlier (the header timeout); how many. A first
    /// wait is left to its connection's own deadlines. Walks the queue from
    /// its front only as far as the first entry queued after `cutoff`,
    /// dropping the stale entries on its way.
    pub(super) fn close_waiting_since(&self, cutoff: Instant) -> usize {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        let due = waiting.partition_point(|entry| entry.since <= cutoff);
        let mut closed = 0;
        let mut first_waits = Vec::new();
        for entry in waiting.drain(..due) {
            if entry.epoch == 0 {
                if !entry.is_stale() {
                    first_waits.push(entry);
                }
            } else if entry.connection.close_if_waiting_at(entry.epoch) {
                closed += 1;
            }
        }
        // Still the oldest waits: back at the front, in their order.
        for entry in first_waits.into_iter().rev() {
            waiting.push_front(entry);
        }
        closed
    }

    /// Closes every waiting connection (at shutdown); how many.
    pub(super) fn close_all_waiting(&self) -> usize {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        waiting
            .drain(..)
            .filter(|entry| entry.connection.close_if_waiting_at(entry.epoch))
            .count()
    }

    /// Resolves after a busy connection has started waiting again (or at
    /// once, if one did since the last call).
    pub(super) fn became_waiting(&self) -> Notified<'_> {
        self.became_waiting.notified()
    }

    /// Marks `connection` busy until the returned guard is dropped: a request's
    /// headers have arrived. The guard goes with the answer's body, so the
    /// connection stays busy until the answer is written.
    pub(super) fn begin_request(
        self: &Arc<Self>,
        connection: &Arc<Connection>,
    ) -> Option<RequestInFlight> {
        let mut current = connection.state.load(Ordering::Acquire);
        loop {
            let epoch = current >> 2;
            let busy = match current & TAG {
                WAITING => state(BUSY, epoch),
                // hyper answers one request at a time and drops each
                // answer before reading the next; should the previous
                // guard still live, the new epoch makes its end a no-op.
                BUSY => state(BUSY, epoch + 1),
                // Chosen to be closed a moment ago: its task drops it.
                _ => return None,
            };
            match connection.state.compare_exchange_weak(
                current,
                busy,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Some(RequestInFlight {
                        connection: connection.clone(),
                        connections: self.clone(),
                        epoch: busy >> 2,
                    });
                }
                Err(actual) => current = actual,
            }
        }
    }
}

/// A request being answered; its connection waits again when this is
/// dropped.
pub(super) struct RequestInFlight {
    connection: Arc<Connection>,
    connections: Arc<OpenConnections>,
    epoch: u64,
}

impl Drop for RequestInFlight {
    fn drop(&mut self) {
        let next = self.epoch + 1;
        let waits = self
            .connection
            .state
            .compare_exchange(
                state(BUSY, self.epoch),
                state(WAITING, next),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        if waits {
            self.connections.push(self.connection.clone(), next);
            // A permit if the accept loop is not waiting: one extra turn of
            // its loop at most.
            self.connections.became_waiting.notify_one();
        }
    }
}

/// An answer's body, holding its request in flight until hyper has written
/// it and drops it.
pub(super) struct Answer<B> {
    body: B,
    _request: Option<RequestInFlight>,
}

impl<B> Answer<B> {
    pub(super) fn new(body: B, request: Option<RequestInFlight>) -> Self {
        Self {
            body,
            _request: request,
        }
    }
}

impl<B: Body + Unpin> Body for Answer<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(context)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn closed(connection: &Connection) -> bool {
        connection.state.load(Ordering::Acquire) & TAG == CLOSED
    }

    #[test]
    fn the_connection_waiting_longest_is_closed_first() {
        let connections = OpenConnections::new(8);
        let first = connections.open();
        let second = connections.open();
        let third = connections.open();
        assert!(connections.close_longest_waiting());
        assert!(closed(&first) && !closed(&second) && !closed(&third));
        assert!(connections.close_longest_waiting());
        assert!(closed(&second) && !closed(&third));
    }

    #[test]
    fn a_busy_connection_is_never_closed() {
        let connections = OpenConnections::new(8);
        let busy = connections.open();
        let idle = connections.open();
        let request = connections.begin_request(&busy).expect("it was waiting");
        assert!(connections.close_longest_waiting());
        assert!(closed(&idle), "the idle one goes");
        assert!(!connections.close_longest_waiting(), "nothing else waits");
        assert!(!closed(&busy));
        // Answered, it waits again, now the longest.
        drop(request);
        assert!(connections.close_longest_waiting());
        assert!(closed(&busy));
    }

    #[test]
    fn a_connection_answered_again_queues_behind_those_that_waited_meanwhile() {
        let connections = OpenConnections::new(8);
        let keeps_asking = connections.open();
        let silent = connections.open();
        drop(connections.begin_request(&keeps_asking));
        assert!(connections.close_longest_waiting());
        assert!(
            closed(&silent),
            "waiting since it opened, before the other's answer"
        );
        assert!(!closed(&keeps_asking));
    }

    #[test]
    fn a_connection_chosen_to_close_takes_no_request() {
        let connections = OpenConnections::new(8);
        let connection = connections.open();
        assert!(connections.close_longest_waiting());
        assert!(connections.begin_request(&connection).is_none());
        assert!(closed(&connection));
    }

    #[test]
    fn a_late_guard_of_an_earlier_request_leaves_the_current_one_busy() {
        let connections = OpenConnections::new(8);
        let connection = connections.open();
        let earlier = connections.begin_request(&connection).unwrap();
        let current = connections.begin_request(&connection).unwrap();
        drop(earlier);
        assert!(!connections.close_longest_waiting(), "still busy");
        drop(current);
        assert!(connections.close_longest_waiting());
    }

    #[test]
    fn stale_entries_are_dropped_so_the_queue_stays_bounded() {
        let connections = OpenConnections::new(4);
        let connection = connections.open();
        for _ in 0..10_000 {
            drop(connections.begin_request(&connection));
        }
        let length = connections.waiting.lock().unwrap().len();
        assert!(length <= 64, "{length} entries for one connection");
        assert!(connections.close_longest_waiting());
        assert!(!connections.close_longest_waiting());
    }

    #[test]
    fn a_shutdown_closes_every_waiting_connection_and_no_busy_one() {
        let connections = OpenConnections::new(8);
        let busy = connections.open();
        let _request = connections.begin_request(&busy).unwrap();
        let idle: Vec<_> = (0..3).map(|_| connections.open()).collect();
        assert_eq!(connections.close_all_waiting(), 3);
        assert!(idle.iter().all(|connection| closed(connection)));
        assert!(!closed(&busy));
    }

    /// A connection that has been answered once and waits for its next
    /// request.
    fn kept_alive(connections: &Arc<OpenConnections>) -> Arc<Connection> {
        let connection = connections.open();
        drop(connections.begin_request(&connection));
        connection
    }

    #[tokio::test(start_paused = true)]
    async fn the_sweep_closes_only_connections_waiting_since_the_cutoff() {
        let connections = OpenConnections::new(8);
        let oldest = kept_alive(&connections);
        tokio::time::advance(Duration::from_secs(1)).await;
        let busy = kept_alive(&connections);
        let _request = connections.begin_request(&busy).unwrap();
        let answered = kept_alive(&connections);
        tokio::time::advance(Duration::from_secs(1)).await;
        let newest = kept_alive(&connections);
        let cutoff = Instant::now() - Duration::from_millis(500);

        assert_eq!(connections.close_waiting_since(cutoff), 2);
        assert!(closed(&oldest) && closed(&answered));
        assert!(!closed(&busy), "a busy connection is never swept");
        assert!(!closed(&newest), "it started waiting after the cutoff");
        // The walk dropped every entry before the cutoff; the newest's two
        // (its first wait, stale, and its wait now) are left.
        let queued = connections.waiting.lock().unwrap().len();
        assert_eq!(queued, 2);
        assert_eq!(connections.close_waiting_since(cutoff), 0);
        assert_eq!(connections.close_waiting_since(Instant::now()), 1);
        assert!(closed(&newest));
    }

    #[tokio::test(start_paused = true)]
    async fn the_sweep_leaves_first_waits_to_their_own_deadlines() {
        let connections = OpenConnections::new(8);
        let new = connections.open();
        let kept_alive = connections.open();
        drop(connections.begin_request(&kept_alive));
        let newer = connections.open();
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(connections.close_waiting_since(Instant::now()), 1);
        assert!(closed(&kept_alive));
        assert!(!closed(&new) && !closed(&newer));
        // They keep their places for the cap, oldest first.
        assert!(connections.close_longest_waiting());
        assert!(closed(&new) && !closed(&newer));
        assert!(connections.close_longest_waiting());
        assert!(closed(&newer));
    }

    #[test]
    fn a_connection_closed_by_its_task_is_not_counted_as_shed() {
        let connections = OpenConnections::new(8);
        let gone = connections.open();
        gone.mark_closed();
        assert!(!connections.close_longest_waiting());
    }
}
