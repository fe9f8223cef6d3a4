//! What the operating system must grant for a cap of
//! [`ConnectionLimits::max_connections`]: a file
//! descriptor per connection (the open-files limit, `RLIMIT_NOFILE`) and a
//! listen backlog that absorbs a burst of new connections.

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket, lookup_host};

use crate::axum::serve::limits::ConnectionLimits;

/// File descriptors kept for what is not a client connection: the
/// listeners, the store's files and connections, the log, the runtime's own
/// (epoll, its wakers) and the connection accepted while the loop makes
/// room for it.
const RESERVED_FILES: u64 = 256;

/// `limits` with as many connections as the open-files limit allows.
///
/// On Unix, a soft limit below the cap (plus 256 descriptors for the
/// listeners, the stores and the runtime) is first raised to the hard
/// limit, as Go's runtime does at start; it is never lowered. A cap cut to
/// fit is logged as a warning that says how to raise the hard limit. Call
/// it once at start, before [`listen`], whose backlog follows the cap.
pub fn fit_open_files(limits: ConnectionLimits) -> ConnectionLimits {
    let wanted = u64::try_from(limits.max_connections)
        .unwrap_or(u64::MAX)
        .saturating_add(RESERVED_FILES);
    let open_files = raise_open_files_limit(wanted);
    if open_files.now > open_files.before {
        tracing::info!(
            from = open_files.before,
            to = open_files.now,
            "raised the open-files limit for the connection cap"
        );
    }
    let fitting = connections_within(open_files.now, limits.max_connections);
    if fitting < limits.max_connections {
        tracing::warn!(
            max_connections = fitting,
            asked = limits.max_connections,
            open_files = open_files.now,
            hard_limit = ?open_files.hard,
            "the open-files limit is too low for the connection cap: serving fewer connections at once; raise the hard limit (ulimit -Hn, or LimitNOFILE= in a systemd unit)"
        );
    }
    ConnectionLimits {
        max_connections: fitting,
        ..limits
    }
}

/// The listener for `limits`: `address` (a host or IP, and a port) bound
/// with a listen backlog as long as the connection cap (within 1024 and
/// 65535), so that a burst of new connections waits in the kernel, not in
/// refused SYNs.
///
/// # Errors
///
/// When the address resolves to nothing, or none of its addresses binds.
pub async fn listen(address: &str, limits: &ConnectionLimits) -> io::Result<TcpListener> {
    bind(address, listen_backlog(limits.max_connections)).await
}

/// How many connections fit under an open-files limit of `limit`, at most
/// `wanted`.
fn connections_within(limit: u64, wanted: usize) -> usize {
    let room = limit.saturating_sub(RESERVED_FILES).max(limit / 2).max(1);
    usize::try_from(room).unwrap_or(usize::MAX).min(wanted)
}

/// The listen backlog for a cap of `max_connections`: as many, within
/// 1024 and 65535. Linux lowers it to `net.core.somaxconn` (4096 since
/// Linux 5.4).
fn listen_backlog(max_connections: usize) -> u32 {
    u32::try_from(max_connections.clamp(1024, 65_535)).unwrap_or(65_535)
}

/// Binds `address` (a host or IP, and a port) with a listen backlog of
/// `backlog`: the first of its resolved addresses that binds.
///
/// # Errors
///
/// When the address resolves to nothing, or none of its addresses binds.
async fn bind(address: &str, backlog: u32) -> io::Result<TcpListener> {
    let mut last_error = None;
    for address in lookup_host(address).await? {
        match bind_one(address, backlog) {
            Ok(listener) => return Ok(listener),
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "the address resolves to nothing",
        )
    }))
}

fn bind_one(address: SocketAddr, backlog: u32) -> io::Result<TcpListener> {
    let socket = match address {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    // As `TcpListener::bind` does: a restart may bind the port while the
    // previous process's connections are in TIME_WAIT.
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(backlog)
}

/// The open-files limit before and after [`raise_open_files_limit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct OpenFiles {
    /// The soft limit the process started with.
    before: u64,
    /// The soft limit in force now.
    now: u64,
    /// The hard limit: the most an unprivileged process may raise it to.
    hard: Option<u64>,
}

/// Raises the soft open-files limit to the hard limit when it is below
/// `wanted` (a hard limit of "unlimited": to `wanted`), as Go's runtime does
/// at start. Never lowers it; a refusal is logged and leaves it as it was.
#[cfg(unix)]
fn raise_open_files_limit(wanted: u64) -> OpenFiles {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

    let limit = getrlimit(Resource::Nofile);
    // `None` is RLIM_INFINITY.
    let before = limit.current.unwrap_or(u64::MAX);
    let mut open_files = OpenFiles {
        before,
        now: before,
        hard: limit.maximum,
    };
    if before >= wanted {
        return open_files;
    }
    let raised = limit.maximum.unwrap_or(wanted).max(before);
    if raised > before {
        let new = Rlimit {
            current: Some(raised),
            maximum: limit.maximum,
        };
        match setrlimit(Resource::Nofile, new) {
            Ok(()) => open_files.now = raised,
            Err(error) => tracing::warn!(%error, to = raised, "cannot raise the open-files limit"),
        }
    }
    open_files
}

/// Elsewhere, the limit is not raised: it is taken to be `wanted`.
#[cfg(not(unix))]
fn raise_open_files_limit(wanted: u64) -> OpenFiles {
    OpenFiles {
        before: wanted,
        now: wanted,
        hard: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_keep_clear_of_the_reserved_files() {
        assert_eq!(connections_within(20_000, 16_384), 16_384);
        assert_eq!(connections_within(16_384, 16_384), 16_128);
        assert_eq!(connections_within(1024, 16_384), 768);
        // A tiny limit still leaves half of it to connections.
        assert_eq!(connections_within(256, 16_384), 128);
        assert_eq!(connections_within(0, 16_384), 1);
        assert_eq!(connections_within(u64::MAX, 10), 10);
    }

    #[test]
    fn the_backlog_follows_the_cap_within_bounds() {
        assert_eq!(listen_backlog(2), 1024);
        assert_eq!(listen_backlog(16_384), 16_384);
        assert_eq!(listen_backlog(1_000_000), 65_535);
    }

    #[cfg(unix)]
    #[test]
    fn the_limit_is_never_lowered() {
        let open_files = raise_open_files_limit(1);
        assert_eq!(open_files.now, open_files.before);
    }
}
