//! The server's connections: an accept loop of its own on hyper, for the
//! three bounds that `axum::serve` does not offer.
//!
//! - A deadline on reading each request's headers, so that a client that
//!   trickles them in (or opens a connection and sends nothing) is cut off
//!   instead of holding a connection for ever.
//! - A cap on open connections: while every slot is taken, new connections
//!   wait in the kernel's listen backlog, costing this process nothing.
//! - A deadline on graceful shutdown: after the signal, no new connection is
//!   accepted, the requests in flight are finished until the deadline, and
//!   the connections still open then are closed.
//!
//! Each request carries the client's address as axum's
//! `ConnectInfo<SocketAddr>`, which the sign-in throttle reads. The body
//! size limits, CORS, JSON errors and the per-request timeout are the
//! router's (`app.rs` and the library's `axum::router`); the request log
//! wraps the router (`app::logged`).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::response::Response;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tower::{Service, ServiceExt as _};

/// How connections are bounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a client may take to send a request's headers, counted from
    /// when the server starts waiting for them: a new connection, or the end
    /// of the previous answer on a kept-alive one. A slower client is
    /// disconnected, so this is also how long an idle connection is kept.
    pub header_timeout: Duration,
    /// The most connections open at once.
    pub max_connections: usize,
    /// How long a shutdown waits for the requests in flight before it
    /// closes their connections.
    pub shutdown_timeout: Duration,
}

impl Default for ConnectionLimits {
    /// 10 s for headers, 512 connections, 30 s for a shutdown.
    fn default() -> Self {
        Self {
            // A browser or client library sends its headers in one packet;
            // 10 s leaves room for a slow mobile link.
            header_timeout: Duration::from_secs(10),
            // Half of the usual default limit of 1024 open files, leaving
            // the rest to the store, the logs and the listener.
            max_connections: 512,
            // The router's own request timeout (30 s): a request that
            // started before the signal can still be answered.
            shutdown_timeout: Duration::from_secs(30),
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
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    tokio::pin!(shutdown);

    loop {
        // Forget finished connections, so the set holds only open ones.
        while connections.try_join_next().is_some() {}
        // A slot before accepting: while every slot is taken, connections
        // wait in the listen backlog, not in this process.
        let slot = tokio::select! {
            () = &mut shutdown => break,
            slot = slots.clone().acquire_owned() => slot.expect("the slots are never closed"),
        };
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
        // The answers are small: send them at once, not after Nagle's delay.
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service = service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            app.clone().oneshot(request.map(Body::new))
        });
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        connections.spawn(async move {
            // A client that hangs up or is too slow is not the server's
            // failure: no warning for it.
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection closed with an error");
            }
            drop(slot);
        });
    }

    // From here, new connections are refused.
    drop(listener);
    let open = connections.len();
    if open > 0 {
        tracing::info!(connections = open, "closing the open connections");
    }
    let drain = async {
        // Idle connections close at once, busy ones after their answer.
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

    #[tokio::test]
    async fn connections_beyond_the_cap_wait_until_one_closes() {
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

        // The third is let in by the kernel's backlog, but not served.
        let mut third = TcpStream::connect(running.address).await.unwrap();
        third
            .write_all(b"GET /peer HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .unwrap();
        let mut buffer = [0u8; 64];
        let early = tokio::time::timeout(Duration::from_millis(300), third.read(&mut buffer)).await;
        assert!(early.is_err(), "the third connection was served: {early:?}");
        // The second still is.
        assert!(
            get_on(&mut second, "/peer")
                .await
                .starts_with("HTTP/1.1 200")
        );

        // A slot frees: the third is served.
        drop(first);
        let answer = tokio::time::timeout(Duration::from_secs(10), read_answer(&mut third))
            .await
            .expect("served once a slot is free");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
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
