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
//! size limits, CORS, JSON errors, logs and the per-request timeout are the
//! router's (`app.rs` and the library's `axum::router`).

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tower::ServiceExt as _;

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

/// Serves `router` on `listener` within `limits` until `shutdown` resolves,
/// then drains the connections and returns once none is left.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) -> Drained {
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
        let router = router.clone();
        let service = service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            router.clone().oneshot(request)
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
