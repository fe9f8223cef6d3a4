//! A TCP proxy between the service and a backing service (NATS,
//! PostgreSQL) that a test can break: cut every connection at once, reset
//! new ones as they come, or stop listening, as a server that is down does.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

/// What the proxy does with a new connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Forwards it to the target.
    All,
    /// Accepts it and drops it at once: the client sees a reset.
    Reset,
    /// Does not listen: the client's connect is refused
    /// (`ECONNREFUSED`), as when the service's process is down.
    Refused,
}

/// A proxy listening on [`Proxy::address`], forwarding to its target.
pub struct Proxy {
    /// Where clients connect.
    pub address: SocketAddr,
    /// Notified to cut every connection open at that moment.
    pub cut: Arc<Notify>,
    /// Connections forwarded so far.
    accepted: Arc<AtomicUsize>,
    /// What happens to new connections.
    admit: watch::Sender<Admit>,
}

impl Proxy {
    /// A proxy to `target` (`host:port`) on a free loopback port.
    pub async fn start(target: &str) -> Self {
        let listener = bind_below_ephemeral_ports().await;
        let address = listener.local_addr().expect("an address");
        let cut = Arc::new(Notify::new());
        let accepted = Arc::new(AtomicUsize::new(0));
        let (admit, admitting) = watch::channel(Admit::All);
        tokio::spawn(serve(
            listener,
            target.to_owned(),
            Arc::clone(&cut),
            Arc::clone(&accepted),
            admitting,
        ));
        Self {
            address,
            cut,
            accepted,
            admit,
        }
    }

    /// Sets what happens to new connections; connections already open
    /// stay (see [`Proxy::cut`]).
    pub fn admit(&self, admit: Admit) {
        self.admit.send_replace(admit);
    }

    /// Connections forwarded so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }
}

/// A listener on a free loopback port below the kernel's range of
/// ephemeral ports: while [`Admit::Refused`] leaves it closed, no outgoing
/// connection (the tests' own clients, the server's) can take it as its
/// source port, so it can always be bound again.
async fn bind_below_ephemeral_ports() -> TcpListener {
    const LOWEST: usize = 10_000;
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768_usize);
    let span = ephemeral.saturating_sub(LOWEST).max(1);
    // Spread the tests of one run (and of concurrent runs) over the span.
    let start = usize::try_from(std::process::id()).unwrap_or(0)
        + std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.subsec_nanos() as usize);
    for attempt in 0..span {
        let port = LOWEST + (start + attempt.wrapping_mul(7_919)) % span;
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)).await {
            return listener;
        }
    }
    panic!("no free loopback port between {LOWEST} and {ephemeral}");
}

/// Accepts and forwards until the test ends; while [`Admit::Refused`], the
/// port is closed, and it is bound again (same address) afterwards.
async fn serve(
    listener: TcpListener,
    target: String,
    cut: Arc<Notify>,
    accepted: Arc<AtomicUsize>,
    mut admitting: watch::Receiver<Admit>,
) {
    let address = listener.local_addr().expect("an address");
    let mut listener = Some(listener);
    loop {
        let admit = *admitting.borrow_and_update();
        let Some(open) = &listener else {
            if admit != Admit::Refused {
                listener = TcpListener::bind(address).await.ok();
                if listener.is_none() {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                continue;
            }
            if admitting.changed().await.is_err() {
                return;
            }
            continue;
        };
        if admit == Admit::Refused {
            listener = None;
            continue;
        }
        tokio::select! {
            connection = open.accept() => {
                let Ok((mut inbound, _)) = connection else { continue };
                if admit == Admit::Reset {
                    continue;
                }
                accepted.fetch_add(1, Ordering::Relaxed);
                let Ok(mut outbound) = TcpStream::connect(&target).await else {
                    continue;
                };
                let cut = Arc::clone(&cut);
                tokio::spawn(async move {
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        // Dropping both sockets resets the connection.
                        () = cut.notified() => {}
                    }
                });
            }
            changed = admitting.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}
