//! A TCP proxy in front of PostgreSQL that goes silent the way a network
//! does in a failover or a partition: the sockets stay open, and what is
//! sent over them is never delivered nor answered. Nothing is closed, so
//! neither end learns that the other is gone.
#![cfg(all(
    feature = "test-util",
    feature = "postgres",
    feature = "external-tests"
))]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
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
}

/// The proxy, listening on loopback until the test's runtime ends.
pub(crate) struct SilentProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

/// What the proxy's connections share.
#[derive(Default)]
struct Shared {
    /// The trap set and not sprung yet.
    trap: Mutex<Option<Trap>>,
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
        *self.shared.trap.lock().expect("trap") = Some(trap);
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

/// Relays bytes both ways between `client` and `server` until the
/// connection goes silent; from then on, what either end sends is read
/// and dropped, and each end's socket is held open even after the other
/// end closes its own.
async fn relay(client: TcpStream, server: TcpStream, shared: Arc<Shared>) {
    let silent = Arc::new(AtomicBool::new(false));
    let is_silent = {
        let (silent, shared) = (Arc::clone(&silent), Arc::clone(&shared));
        move || silent.load(Ordering::SeqCst) || shared.all_silent.load(Ordering::SeqCst)
    };
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let upstream = {
        let is_silent = is_silent.clone();
        async move {
            let mut buffer = vec![0; 64 * 1024];
            loop {
                let read = from_client.read(&mut buffer).await.unwrap_or(0);
                if read == 0 {
                    break;
                }
                let message = &buffer[..read];
                if !is_silent() {
                    let sprung = {
                        let mut trap = shared.trap.lock().expect("trap");
                        let hit = match *trap {
                            Some(Trap::Swallow(pattern)) => Some((pattern, false)),
                            Some(Trap::DeliverThenSilence(pattern)) => Some((pattern, true)),
                            None => None,
                        }
                        .filter(|(pattern, _)| contains(message, pattern));
                        if hit.is_some() {
                            *trap = None;
                        }
                        hit.map(|(_, deliver)| deliver)
                    };
                    match sprung {
                        Some(deliver) => {
                            if deliver {
                                let _ = to_server.write_all(message).await;
                            }
                            silent.store(true, Ordering::SeqCst);
                        }
                        None => {
                            if to_server.write_all(message).await.is_err() {
                                break;
                            }
                        }
                    }
                }
            }
            if is_silent() {
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
            if read == 0 {
                break;
            }
            if !is_silent() && to_client.write_all(&buffer[..read]).await.is_err() {
                break;
            }
        }
        if is_silent() {
            // Nor the client of the server going away.
            std::future::pending::<()>().await;
        }
        drop(to_client);
    };
    tokio::join!(upstream, downstream);
}

/// Whether `haystack` holds `needle`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}
