//! The server's connections: an accept loop of its own on hyper, for the
//! bounds that `axum::serve` does not offer, so that idle and slow clients
//! cannot lock others out.
//!
//! ```text
//!  accept ──► a slot free? ──no──► close the connection waiting longest    (shedding.rs)
//!    │            │                (none waits: wait for a slot, or for a
//!    │           yes                busy connection to start waiting)      (make_room)
//!    ▼            ▼
//!  first byte within first_byte_timeout, or closed                         (serve_connection)
//!    │  (first_byte_timeout_under_pressure once over half the slots are taken)
//!    ▼
//!  hyper reads the headers within header_timeout, or closes   ─┐ waiting
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
//! - A deadline on graceful shutdown: after the signal, no new connection is
//!   accepted, the waiting connections are closed, the requests in flight
//!   are finished until the deadline, and the connections still open then
//!   are closed.
//!
//! Each request carries the client's address as axum's
//! `ConnectInfo<SocketAddr>`, which the sign-in throttle reads. The body
//! size limits, CORS, JSON errors and the per-request timeout are the
//! router's (`app.rs` and the library's `axum::router`); the request log
//! wraps the router (`app::logged`).

mod capacity;
mod shedding;

pub use capacity::{fit_open_files, listen};

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::response::Response;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::{Service, ServiceExt as _};

use shedding::{Answer, Connection, OpenConnections};

/// How connections are bounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a new connection may stay silent: one that has sent no byte
    /// by then is closed.
    pub first_byte_timeout: Duration,
    /// The same, for a connection accepted while more than half of
    /// `max_connections` are open, or still silent at this deadline while
    /// they are (at most `first_byte_timeout`).
    pub first_byte_timeout_under_pressure: Duration,
    /// How long a client may take to send a request's headers, counted from
    /// when hyper starts waiting for them: its first byte on a new
    /// connection, or the end of the previous answer on a kept-alive one. A
    /// slower client is disconnected, so this is also how long an idle
    /// kept-alive connection is kept.
    pub header_timeout: Duration,
    /// The most connections open at once. At the cap, the connection that
    /// has waited longest for a whole request is closed for a new one.
    pub max_connections: usize,
    /// How long a shutdown waits for the requests in flight before it
    /// closes their connections.
    pub shutdown_timeout: Duration,
}

impl Default for ConnectionLimits {
    /// 5 s (1 s under pressure) for the first byte, 10 s for headers,
    /// 16,384 connections, 30 s for a shutdown.
    fn default() -> Self {
        Self {
            // A client sends its request right after connecting; 5 s
            // covers a lost packet's retransmission on a slow mobile link
            // (TCP's initial retransmission timeout is 1 s, RFC 6298).
            first_byte_timeout: Duration::from_secs(5),
            // Once half the slots are taken, a connection that has not
            // spoken after 1 s is more likely an attacker's than a client's.
            first_byte_timeout_under_pressure: Duration::from_secs(1),
            // A browser or client library sends its headers in one packet;
            // 10 s leaves room for a slow mobile link.
            header_timeout: Duration::from_secs(10),
            // Tens of thousands of idle connections, as nginx or Envoy hold:
            // a waiting connection costs a few kilobytes (README, Security),
            // and the open-files limit is raised to fit at start.
            max_connections: 16_384,
            // The router's own request timeout (30 s): a request that
            // started before the signal can still be answered.
            shutdown_timeout: Duration::from_secs(30),
        }
    }
}

impl ConnectionLimits {
    /// How long a new connection may stay silent while `open` connections
    /// are open: the shorter timeout once more than half the slots are
    /// taken.
    pub fn first_byte_timeout(&self, open: usize) -> Duration {
        if open.saturating_mul(2) > self.max_connections {
            self.first_byte_timeout_under_pressure
                .min(self.first_byte_timeout)
        } else {
            self.first_byte_timeout
        }
    }
}

/// How a shutdown ended.
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
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let http = Arc::new(http);
    let mut warned_full: Option<Instant> = None;
    tokio::pin!(shutdown);

    loop {
        // Forget finished connections, so the set holds only open ones.
        while connections.try_join_next().is_some() {}
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
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
mod tests {
    //! The accept loop in-process, on a router whose requests the test
    //! holds in flight; tests/server checks the same bounds through the
    //! binary and its flags.

    use std::net::SocketAddr;
    use std::time::Instant;

    use axum::Router;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpStream;
    use tokio::sync::{Notify, oneshot};

    use super::*;

    /// A route that answers with the client's address, and one that says when
    /// it is entered and answers only when the test says so.
    fn test_router(entered: Arc<Notify>, release: Arc<Notify>) -> Router {
        Router::new()
            .route(
                "/peer",
                get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }),
            )
            .route(
                "/slow",
                get(move || async move {
                    entered.notify_one();
                    release.notified().await;
                    "done"
                }),
            )
    }

    /// The serve loop on a loopback port with `limits`, until the sender is
    /// used or dropped.
    struct Running {
        address: SocketAddr,
        stop: oneshot::Sender<()>,
        served: tokio::task::JoinHandle<Drained>,
        entered: Arc<Notify>,
        release: Arc<Notify>,
    }

    async fn start_serving(limits: ConnectionLimits) -> Running {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let (stop, stopped) = oneshot::channel();
        let router = test_router(entered.clone(), release.clone());
        let served = tokio::spawn(serve(listener, router, limits, async {
            let _ = stopped.await;
        }));
        Running {
            address,
            stop,
            served,
            entered,
            release,
        }
    }

    /// Sends a GET on `stream` and reads the answer's head and body (the test
    /// routes answer a few bytes with a Content-Length).
    async fn get_on(stream: &mut TcpStream, path: &str) -> String {
        let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        read_answer(stream).await
    }

    /// Reads one answer: its head, then as many body bytes as it announces.
    async fn read_answer(stream: &mut TcpStream) -> String {
        let mut bytes = Vec::new();
        let mut buffer = [0u8; 1024];
        loop {
            let n = stream.read(&mut buffer).await.unwrap();
            assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&bytes));
            bytes.extend_from_slice(&buffer[..n]);
            let text = String::from_utf8_lossy(&bytes).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length: usize = head
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length: "))
                    .map_or(0, |value| value.trim().parse().unwrap());
                if body.len() >= length {
                    return text;
                }
            }
        }
    }

    #[tokio::test]
    async fn requests_carry_the_client_address() {
        let running = start_serving(ConnectionLimits::default()).await;
        let mut stream = TcpStream::connect(running.address).await.unwrap();
        let answer = get_on(&mut stream, "/peer").await;
        let local = stream.local_addr().unwrap().to_string();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with(&local), "{local} not in {answer}");
        running.stop.send(()).unwrap();
        assert_eq!(running.served.await.unwrap(), Drained::All);
    }

    #[tokio::test]
    async fn a_client_that_trickles_its_headers_is_cut_off_at_the_header_timeout() {
        let timeout = Duration::from_millis(500);
        let running = start_serving(ConnectionLimits {
            header_timeout: timeout,
            ..ConnectionLimits::default()
        })
        .await;
        let mut stream = TcpStream::connect(running.address).await.unwrap();
        let started = Instant::now();
        stream.write_all(b"GET /peer HTTP/1.1\r\n").await.unwrap();
        // One header byte every 50 ms, for up to 10 s, until the server hangs up.
        let header = b"X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
        let mut answer = Vec::new();
        let closed_after = 'trickle: {
            for byte in header.iter().cycle().take(200) {
                let mut buffer = [0u8; 256];
                tokio::select! {
                    read = stream.read(&mut buffer) => match read {
                        Ok(0) | Err(_) => break 'trickle started.elapsed(),
                        Ok(n) => answer.extend_from_slice(&buffer[..n]),
                    },
                    () = tokio::time::sleep(Duration::from_millis(50)) => {
                        if stream.write_all(&[*byte]).await.is_err() {
                            break 'trickle started.elapsed();
                        }
                    }
                }
            }
            panic!("still open after {:?}", started.elapsed());
        };
        assert!(
            closed_after >= timeout && closed_after < timeout + Duration::from_secs(2),
            "closed after {closed_after:?}, the header timeout is {timeout:?}"
        );
        assert!(
            !String::from_utf8_lossy(&answer).contains("200 OK"),
            "{:?}",
            String::from_utf8_lossy(&answer)
        );

        // A client that sends its headers at once is served.
        let mut stream = TcpStream::connect(running.address).await.unwrap();
        let answer = get_on(&mut stream, "/peer").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        running.stop.send(()).unwrap();
        running.served.await.unwrap();
    }

    /// Whether the server closed `stream` within 5 s.
    async fn closed(stream: &mut TcpStream) -> bool {
        let mut buffer = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer)).await;
        matches!(read, Ok(Ok(0) | Err(_)))
    }

    /// Whether `stream` is still open with nothing to read.
    fn still_open(stream: &TcpStream) -> bool {
        let mut buffer = [0u8; 64];
        matches!(stream.try_read(&mut buffer), Err(error) if error.kind() == io::ErrorKind::WouldBlock)
    }

    #[test]
    fn the_first_byte_timeout_shortens_once_over_half_the_slots_are_taken() {
        let limits = ConnectionLimits {
            max_connections: 10,
            ..ConnectionLimits::default()
        };
        assert_eq!(limits.first_byte_timeout(0), Duration::from_secs(5));
        assert_eq!(limits.first_byte_timeout(5), Duration::from_secs(5));
        assert_eq!(limits.first_byte_timeout(6), Duration::from_secs(1));
        assert_eq!(limits.first_byte_timeout(10), Duration::from_secs(1));
        // Never longer under pressure than without.
        let odd = ConnectionLimits {
            first_byte_timeout_under_pressure: Duration::from_secs(60),
            ..limits
        };
        assert_eq!(odd.first_byte_timeout(10), Duration::from_secs(5));
    }

    #[tokio::test]
    async fn at_the_cap_the_connection_waiting_longest_is_closed_for_a_new_one() {
        let running = start_serving(ConnectionLimits {
            max_connections: 2,
            ..ConnectionLimits::default()
        })
        .await;
        // Two connections, each served once and kept alive: both slots taken.
        let mut first = TcpStream::connect(running.address).await.unwrap();
        let mut second = TcpStream::connect(running.address).await.unwrap();
        assert!(
            get_on(&mut first, "/peer")
                .await
                .starts_with("HTTP/1.1 200")
        );
        assert!(
            get_on(&mut second, "/peer")
                .await
                .starts_with("HTTP/1.1 200")
        );

        // A third is served at once, in the place of the first.
        let mut third = TcpStream::connect(running.address).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(2), get_on(&mut third, "/peer"))
            .await
            .expect("served at once");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(closed(&mut first).await, "the first waited longest");
        assert!(still_open(&second), "the second stays");
        running.stop.send(()).unwrap();
        running.served.await.unwrap();
    }

    #[tokio::test]
    async fn connections_beyond_the_cap_wait_while_every_one_is_busy() {
        let running = start_serving(ConnectionLimits {
            max_connections: 2,
            ..ConnectionLimits::default()
        })
        .await;
        // Two requests in flight: both slots busy.
        let mut first = TcpStream::connect(running.address).await.unwrap();
        first
            .write_all(b"GET /slow HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .unwrap();
        running.entered.notified().await;
        let mut second = TcpStream::connect(running.address).await.unwrap();
        second
            .write_all(b"GET /slow HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .unwrap();
        running.entered.notified().await;

        // The third is let in by the kernel, but not served.
        let mut third = TcpStream::connect(running.address).await.unwrap();
        third
            .write_all(b"GET /peer HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .unwrap();
        let mut buffer = [0u8; 64];
        let early = tokio::time::timeout(Duration::from_millis(300), third.read(&mut buffer)).await;
        assert!(early.is_err(), "the third connection was served: {early:?}");

        // The first is answered, and then waits: it makes room for the third.
        running.release.notify_one();
        let answer = read_answer(&mut first).await;
        assert!(answer.ends_with("done"), "{answer}");
        let answer = tokio::time::timeout(Duration::from_secs(5), read_answer(&mut third))
            .await
            .expect("served once a connection waits");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(closed(&mut first).await, "the first made room");
        // The second, busy all along, is still answered.
        running.release.notify_one();
        let answer = read_answer(&mut second).await;
        assert!(answer.ends_with("done"), "{answer}");
        running.stop.send(()).unwrap();
        running.served.await.unwrap();
    }

    #[tokio::test]
    async fn a_connection_that_sends_nothing_is_closed_at_the_first_byte_timeout() {
        let timeout = Duration::from_millis(300);
        let running = start_serving(ConnectionLimits {
            first_byte_timeout: timeout,
            ..ConnectionLimits::default()
        })
        .await;
        let started = Instant::now();
        let mut silent = TcpStream::connect(running.address).await.unwrap();
        // One that speaks a little late, within the timeout, is served.
        let mut late = TcpStream::connect(running.address).await.unwrap();
        tokio::time::sleep(timeout / 2).await;
        assert!(get_on(&mut late, "/peer").await.starts_with("HTTP/1.1 200"));
        assert!(closed(&mut silent).await, "the silent one is closed");
        let elapsed = started.elapsed();
        assert!(
            elapsed >= timeout && elapsed < timeout + Duration::from_secs(2),
            "closed after {elapsed:?}, the timeout is {timeout:?}"
        );
        // Once served, the header timeout is what bounds it.
        assert!(still_open(&late));
        running.stop.send(()).unwrap();
        running.served.await.unwrap();
    }

    #[tokio::test]
    async fn under_pressure_silent_connections_get_the_shorter_first_byte_timeout() {
        let shorter = Duration::from_millis(300);
        let running = start_serving(ConnectionLimits {
            max_connections: 10,
            first_byte_timeout: Duration::from_secs(30),
            first_byte_timeout_under_pressure: shorter,
            ..ConnectionLimits::default()
        })
        .await;
        let started = Instant::now();
        // Eight of ten slots: over half.
        let mut silent = Vec::new();
        for _ in 0..8 {
            silent.push(TcpStream::connect(running.address).await.unwrap());
        }
        // The oldest go at the shorter timeout until no more than half are
        // open; the rest keep the normal one.
        for stream in &mut silent[..3] {
            assert!(closed(stream).await, "closed under pressure");
        }
        let elapsed = started.elapsed();
        assert!(
            elapsed >= shorter && elapsed < shorter + Duration::from_secs(2),
            "closed after {elapsed:?}, the shorter timeout is {shorter:?}"
        );
        tokio::time::sleep(shorter).await;
        let open = silent[3..]
            .iter()
            .filter(|stream| still_open(stream))
            .count();
        assert_eq!(open, 5, "half the slots keep the normal timeout");
        running.stop.send(()).unwrap();
        running.served.await.unwrap();
    }

    #[tokio::test]
    async fn a_shutdown_finishes_the_requests_in_flight_and_refuses_new_connections() {
        let running = start_serving(ConnectionLimits::default()).await;
        let mut busy = TcpStream::connect(running.address).await.unwrap();
        busy.write_all(b"GET /slow HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .unwrap();
        running.entered.notified().await;
        // An idle kept-alive connection is closed at once.
        let mut idle = TcpStream::connect(running.address).await.unwrap();
        assert!(get_on(&mut idle, "/peer").await.starts_with("HTTP/1.1 200"));

        running.stop.send(()).unwrap();
        let mut buffer = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(10), idle.read(&mut buffer)).await;
        assert!(
            matches!(read, Ok(Ok(0) | Err(_))),
            "the idle connection is closed: {read:?}"
        );
        // The listener is closed: no new connection.
        let refused = TcpStream::connect(running.address).await;
        assert!(refused.is_err(), "connected after the shutdown began");
        assert!(!running.served.is_finished(), "a request is in flight");

        running.release.notify_one();
        let answer = read_answer(&mut busy).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("done"), "{answer}");
        let drained = tokio::time::timeout(Duration::from_secs(10), running.served)
            .await
            .expect("the server stops once the request is answered")
            .unwrap();
        assert_eq!(drained, Drained::All);
    }

    #[tokio::test]
    async fn a_shutdown_closes_what_is_still_open_at_the_deadline() {
        let deadline = Duration::from_millis(300);
        let running = start_serving(ConnectionLimits {
            shutdown_timeout: deadline,
            ..ConnectionLimits::default()
        })
        .await;
        let mut stuck = TcpStream::connect(running.address).await.unwrap();
        stuck
            .write_all(b"GET /slow HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .unwrap();
        running.entered.notified().await;

        let started = Instant::now();
        running.stop.send(()).unwrap();
        let drained = tokio::time::timeout(Duration::from_secs(10), running.served)
            .await
            .expect("the server stops at the deadline")
            .unwrap();
        assert_eq!(drained, Drained::Cut(1));
        assert!(started.elapsed() >= deadline, "{:?}", started.elapsed());
        let mut buffer = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(10), stuck.read(&mut buffer)).await;
        assert!(
            matches!(read, Ok(Ok(0) | Err(_))),
            "the stuck connection is closed unanswered: {read:?}"
        );
    }
}
