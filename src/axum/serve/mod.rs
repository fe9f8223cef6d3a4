//! The service's connections: an accept loop of its own on hyper, for the
//! bounds that axum's own `serve` does not offer, so that idle and slow
//! clients cannot lock others out. A host calls [`fit_open_files`],
//! [`listen`] and [`serve`] (see the [module docs](crate::axum)).
//!
//! ```text
//!  accept ──► a slot free? ──no──► close the connection waiting longest    (shedding.rs)
//!    │            │                (none waits: wait for a slot, or for a
//!    │           yes                busy connection to start waiting)      (make_room)
//!    ▼            ▼
//!  first byte within first_byte_timeout, or closed                         (Accepted::serve)
//!    │  (first_byte_timeout_under_pressure once over half the slots are taken)
//!    ▼
//!  hyper reads the headers; header_timeout after it started   ─┐ waiting
//!  waiting, the accept loop's sweep closes it                  │
//!    ▼                                                         │
//!  busy: the router answers; never closed to make room         │
//!    └──► answer written: waiting again (keep-alive) ──────────┘
//! ```
//!
//! - A cap on open connections (`max_connections`, 16,384 by default) that
//!   is not a cap on clients: while every slot is taken, a new connection
//!   takes the slot of the connection that has waited longest without
//!   sending a whole request (an idle or a slow one). Only when every
//!   connection is busy do new ones wait, in the listen backlog. The
//!   open-files limit and the backlog are sized for the cap at start
//!   (`capacity.rs`).
//! - A connection that has sent nothing costs no HTTP state: hyper only
//!   takes it over at its first byte, and it is closed if that does not
//!   come within the first-byte timeout.
//! - A deadline on reading each request's headers, so that a client that
//!   trickles them in is cut off instead of holding a connection for ever.
//!   The accept loop enforces it by sweeping the queue of waiting
//!   connections a few times per timeout (`close_waiting_since`), not with
//!   hyper's header timer, which armed a timer in tokio's wheel for every
//!   request: a flood of small requests spent about 2% of its CPU on it.
//! - A deadline on graceful shutdown: after the signal, no new connection is
//!   accepted, the waiting connections are closed, the requests in flight
//!   are finished until the deadline, and the connections still open then
//!   are closed.
//!
//! Each request carries the client's address as axum's
//! `ConnectInfo<SocketAddr>`, which a sign-in throttle reads. The body
//! size limits, CORS, JSON errors and the per-request timeout are the
//! router's ([`router`](crate::axum::router)); the request log wraps the
//! router ([`with_request_log`](crate::axum::with_request_log)).
//!
//! `limits.rs` holds the bounds ([`ConnectionLimits`]), `shedding.rs`
//! which connection is closed at the cap, `capacity.rs` what the operating
//! system must grant (open files, the listen backlog), `signal.rs` the
//! signals that start the shutdown ([`shutdown_signal`](crate::axum::shutdown_signal)),
//! `tests.rs` the loop in-process.

pub(crate) mod capacity;
pub(crate) mod limits;
mod shedding;
pub(crate) mod signal;

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ::axum::body::Body;
use ::axum::extract::{ConnectInfo, Request};
use ::axum::response::Response;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::{Service, ServiceExt as _};

use crate::axum::serve::limits::ConnectionLimits;
use crate::axum::serve::shedding::{Answer, Connection, OpenConnections};

/// How a shutdown of [`serve`] ended: one or the other, so a host's `match`
/// has no catch-all arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drained {
    /// Every connection finished its requests and closed in time.
    All,
    /// The deadline passed; this many connections were closed unfinished.
    Cut(usize),
}

/// How often, at most, the log says that every slot is taken.
const FULL_WARNING_EVERY: Duration = Duration::from_secs(60);

/// Serves `app` (the router, or the router under the request log) on
/// `listener` within `limits` until `shutdown` resolves, then drains the
/// connections and returns once none is left.
pub async fn serve<App>(
    listener: TcpListener,
    app: App,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) -> Drained
where
    App: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    App::Future: Send + 'static,
{
    let limits = ConnectionLimits {
        max_connections: limits.max_connections.max(1),
        ..limits
    };
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let open = OpenConnections::new(limits.max_connections);
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut http = http1::Builder::new();
    // The header deadline is the sweep's below, not hyper's timer.
    http.header_read_timeout(None);
    let http = Arc::new(http);
    let mut warned_full: Option<Instant> = None;
    let mut sweep = tokio::time::interval(sweep_period(limits.header_timeout));
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);

    loop {
        // Forget finished connections, so the set holds only open ones.
        while connections.try_join_next().is_some() {}
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            now = sweep.tick() => {
                close_after_header_timeout(&open, now, limits.header_timeout);
                continue;
            }
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) if is_connection_error(&error) => continue,
                // Out of file descriptors or memory: retrying at once would
                // spin, so wait a moment (and still hear the signal).
                Err(error) => {
                    tracing::error!(%error, "cannot accept a connection; retrying in 1 s");
                    tokio::select! {
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            },
        };
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                if warned_full.is_none_or(|at| at.elapsed() >= FULL_WARNING_EVERY) {
                    tracing::warn!(
                        max_connections = limits.max_connections,
                        "every connection slot is taken: closing the connections that have waited longest for a request"
                    );
                    warned_full = Some(Instant::now());
                }
                // While this waits, newer connections wait in the backlog.
                tokio::select! {
                    () = &mut shutdown => break,
                    slot = make_room(&slots, &open) => slot,
                }
            }
        };
        // The answers are small: send them at once, not after Nagle's delay.
        let _ = stream.set_nodelay(true);
        let connection = Accepted {
            accepted: Instant::now(),
            connection: open.open(),
            open: open.clone(),
            limits,
            slots: slots.clone(),
            _slot: slot,
        };
        connections.spawn(connection.serve(
            stream,
            peer,
            app.clone(),
            http.clone(),
            graceful.watcher(),
        ));
    }

    // From here, new connections are refused.
    drop(listener);
    let left = connections.len();
    if left > 0 {
        tracing::info!(connections = left, "closing the open connections");
    }
    // Those that wait close at once; busy ones after their answer.
    open.close_all_waiting();
    let drain = async {
        graceful.shutdown().await;
        while connections.join_next().await.is_some() {}
    };
    let drained = tokio::time::timeout(limits.shutdown_timeout, drain).await;
    if drained.is_ok() {
        return Drained::All;
    }
    let cut = connections.len();
    tracing::warn!(
        connections = cut,
        "shutdown deadline passed: closing the connections still open"
    );
    connections.shutdown().await;
    Drained::Cut(cut)
}

/// How often the accept loop looks for connections past their header
/// timeout: eight times per timeout, so a connection is closed at most an
/// eighth of it late; between 10 ms and 1 s.
fn sweep_period(header_timeout: Duration) -> Duration {
    (header_timeout / 8).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// Closes every connection that has waited for a whole request for
/// `header_timeout` or longer at `now`.
fn close_after_header_timeout(open: &OpenConnections, now: Instant, header_timeout: Duration) {
    let Some(cutoff) = now.checked_sub(header_timeout) else {
        return;
    };
    let closed = open.close_waiting_since(cutoff);
    if closed > 0 {
        // As hyper's own header timeout did: a slow client is not the
        // server's failure.
        tracing::debug!(
            connections = closed,
            "closed connections that sent no whole request within the header timeout"
        );
    }
}

/// A slot for a connection accepted while every slot is taken: frees the
/// slot of the connection that has waited longest for a request, or, if
/// every connection is busy, waits for a slot or for a connection to start
/// waiting.
async fn make_room(slots: &Arc<Semaphore>, open: &OpenConnections) -> OwnedSemaphorePermit {
    loop {
        let became_waiting = open.became_waiting();
        let closed_one = open.close_longest_waiting();
        tokio::select! {
            slot = slots.clone().acquire_owned() => {
                return slot.expect("the slots are never closed");
            }
            () = became_waiting, if !closed_one => {}
        }
    }
}

/// An accepted connection and what its task needs.
struct Accepted {
    /// When it was accepted, for its first-byte timeout.
    accepted: Instant,
    connection: Arc<Connection>,
    open: Arc<OpenConnections>,
    limits: ConnectionLimits,
    slots: Arc<Semaphore>,
    /// Freed when the task ends.
    _slot: OwnedSemaphorePermit,
}

impl Drop for Accepted {
    fn drop(&mut self) {
        self.connection.mark_closed();
    }
}

impl Accepted {
    /// The connection's task: waits for its first byte, then lets hyper
    /// serve it, until it closes or is chosen to be closed.
    async fn serve<App>(
        self,
        stream: TcpStream,
        peer: SocketAddr,
        app: App,
        http: Arc<http1::Builder>,
        watcher: Watcher,
    ) where
        App: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
        App::Future: Send + 'static,
    {
        let closing = self.connection.closing();
        tokio::pin!(closing);
        let mut first_byte = [0u8; 1];
        // Until its first byte, a connection is only a socket: hyper's
        // buffers and timers are not spent on a client that never speaks.
        tokio::select! {
            biased;
            () = &mut closing => return,
            // `readable()` reports a new socket ready at once; a peek
            // waits for a byte (0: the client hung up without one).
            peeked = stream.peek(&mut first_byte) => if !matches!(peeked, Ok(1..)) { return },
            () = self.first_byte_deadline() => {
                tracing::debug!(%peer, "closed a connection that sent nothing");
                return;
            }
        }
        // Its first request's headers get the header timeout from their
        // first byte; the accept loop's sweep bounds the waits after it.
        let first_headers =
            first_headers_deadline(self.connection.clone(), self.limits.header_timeout);
        let (connection, open) = (self.connection.clone(), self.open.clone());
        let service = service_fn(move |mut request: hyper::Request<Incoming>| {
            let in_flight = open.begin_request(&connection);
            request.extensions_mut().insert(ConnectInfo(peer));
            let answer = app.clone().oneshot(request.map(Body::new));
            async move {
                let response = match answer.await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                Ok::<_, Infallible>(response.map(|body| Answer::new(body, in_flight)))
            }
        });
        let serving = watcher.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::select! {
            biased;
            () = &mut closing => {}
            () = first_headers => {
                tracing::debug!(%peer, "closed a connection that sent no whole request within the header timeout");
            }
            // A client that hangs up or is too slow is not the server's
            // failure: no warning for it.
            served = serving => if let Err(error) = served {
                tracing::debug!(%error, "connection closed with an error");
            },
        }
    }

    /// Resolves when the connection has been silent too long: at
    /// the shorter timeout if more than half the slots are taken then, else
    /// at the normal one.
    async fn first_byte_deadline(&self) {
        let accepted = self.accepted;
        let limits = &self.limits;
        let shorter = limits
            .first_byte_timeout_under_pressure
            .min(limits.first_byte_timeout);
        tokio::time::sleep_until(accepted + shorter).await;
        let open = limits.max_connections - self.slots.available_permits();
        tokio::time::sleep_until(accepted + limits.first_byte_timeout(open)).await;
    }
}

/// Resolves if `connection` still waits for its first request's headers
/// `header_timeout` from now (its first byte), closing it; otherwise never.
/// One timer a connection, not a request: the waits after its first answer
/// are the accept loop's sweep's.
async fn first_headers_deadline(connection: Arc<Connection>, header_timeout: Duration) {
    tokio::time::sleep(header_timeout).await;
    if !connection.close_first_wait() {
        std::future::pending::<()>().await;
    }
}

/// An error of one connection (its client gave up before it was accepted),
/// not of the listener.
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

#[cfg(test)]
mod tests;
