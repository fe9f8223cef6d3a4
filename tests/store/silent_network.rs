//! A TCP proxy in front of PostgreSQL that goes silent the way a network
//! does in a failover or a partition: the sockets stay open, and what is
//! sent over them is never delivered nor answered. Nothing is closed, so
//! neither end learns that the other is gone. It can also break a
//! connection right after a message was delivered.
#![cfg(all(
    feature = "test-util",
    feature = "postgres",
    feature = "external-tests"
))]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// When a connection goes silent: at the first message from the client
/// that holds a pattern, on any connection. A trap springs once.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Trap {
    /// The message is not delivered, and neither is anything after it, in
    /// either direction.
    Swallow(&'static [u8]),
    /// The message is delivered, then nothing after it, in either
    /// direction: the server acts on it, its answer is lost.
    DeliverThenSilence(&'static [u8]),
    /// The message is delivered, then both sockets are closed: the server
    /// acts on it, and the client finds its connection broken.
    DeliverThenClose(&'static [u8]),
}

/// The proxy, listening on loopback until the test's runtime ends.
pub(crate) struct SilentProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

/// What the proxy's connections share.
#[derive(Default)]
struct Shared {
    /// The trap set and not sprung yet, and how many messages that hold
    /// its pattern it still lets pass first.
    trap: Mutex<Option<(Trap, usize)>>,
    /// Whether every connection, and every new one, is silent.
    all_silent: AtomicBool,
}

impl SilentProxy {
    /// A proxy to `upstream`, forwarding faithfully until a trap springs.
    pub(crate) async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let shared = Arc::new(Shared::default());
        tokio::spawn({
            let shared = Arc::clone(&shared);
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let server = TcpStream::connect(upstream).await.expect("the upstream");
                    tokio::spawn(relay(client, server, Arc::clone(&shared)));
                }
            }
        });
        Self { addr, shared }
    }

    /// The address to connect to instead of the server's.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets `trap` for the next message that holds its pattern.
    pub(crate) fn set(&self, trap: Trap) {
        self.set_after(trap, 0);
    }

    /// Sets `trap` for the message that holds its pattern after `passing`
    /// more such messages have passed.
    pub(crate) fn set_after(&self, trap: Trap, passing: usize) {
        *self.shared.trap.lock().expect("trap") = Some((trap, passing));
    }

    /// Whether the trap set last has sprung.
    pub(crate) fn sprung(&self) -> bool {
        self.shared.trap.lock().expect("trap").is_none()
    }

    /// Every connection, open or new, goes silent.
    pub(crate) fn silence_all(&self) {
        self.shared.all_silent.store(true, Ordering::SeqCst);
    }
}

/// A connection's state: relaying, silent, or closed by a trap.
const OPEN: u8 = 0;
const SILENT: u8 = 1;
const CLOSED: u8 = 2;

/// Relays bytes both ways between `client` and `server` until a trap
/// springs. Once silent, what either end sends is read and dropped, and
/// each end's socket is held open even after the other end closes its
/// own. Once closed, both sockets are closed, what the server still
/// answers unread by the client.
async fn relay(client: TcpStream, server: TcpStream, shared: Arc<Shared>) {
    let state = Arc::new(AtomicU8::new(OPEN));
    let now = {
        let (state, shared) = (Arc::clone(&state), Arc::clone(&shared));
        move || {
            if shared.all_silent.load(Ordering::SeqCst) {
                SILENT.max(state.load(Ordering::SeqCst))
            } else {
                state.load(Ordering::SeqCst)
            }
        }
    };
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let upstream = {
        let now = now.clone();
        async move {
            let mut buffer = vec![0; 64 * 1024];
            while now() != CLOSED {
                let read = from_client.read(&mut buffer).await.unwrap_or(0);
                if read == 0 {
                    break;
                }
                let message = &buffer[..read];
                if now() != OPEN {
                    continue;
                }
                let (deliver, next) = match spring(&shared, message) {
                    None => (true, OPEN),
                    Some(Trap::Swallow(_)) => (false, SILENT),
                    Some(Trap::DeliverThenSilence(_)) => (true, SILENT),
                    Some(Trap::DeliverThenClose(_)) => (true, CLOSED),
                };
                if deliver && to_server.write_all(message).await.is_err() {
                    break;
                }
                state.store(next, Ordering::SeqCst);
            }
            if now() == SILENT {
                // A silent network tells the server nothing of the client
                // going away: the socket stays open.
                std::future::pending::<()>().await;
            }
        }
    };
    let downstream = async move {
        let mut buffer = vec![0; 64 * 1024];
        loop {
            let read = from_server.read(&mut buffer).await.unwrap_or(0);
            if read == 0 || now() == CLOSED {
                break;
            }
            if now() == OPEN && to_client.write_all(&buffer[..read]).await.is_err() {
                break;
            }
        }
        if now() == SILENT {
            // Nor the client of the server going away.
            std::future::pending::<()>().await;
        }
        drop(to_client);
    };
    tokio::join!(upstream, downstream);
}

/// The trap `message` springs, if it holds the pattern of the trap set
/// and that trap lets no more such messages pass; the trap is then spent.
fn spring(shared: &Shared, message: &[u8]) -> Option<Trap> {
    let mut set = shared.trap.lock().expect("trap");
    let (trap, passing) = set.as_mut()?;
    let pattern = match *trap {
        Trap::Swallow(pattern)
        | Trap::DeliverThenSilence(pattern)
        | Trap::DeliverThenClose(pattern) => pattern,
    };
    if !contains(message, pattern) {
        return None;
    }
    if *passing > 0 {
        *passing -= 1;
        return None;
    }
    set.take().map(|(trap, _)| trap)
}

/// Whether `haystack` holds `needle`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}
