//! The bounds of the accept loop, which a host sets from its own flags or
//! configuration.

use std::time::Duration;

/// How [`serve`](crate::axum::serve()) bounds its connections.
///
/// Start from `default()` and set the fields a host's configuration names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionLimits {
    /// How long a new connection may stay silent: one that has sent no byte
    /// by then is closed.
    pub first_byte_timeout: Duration,
    /// The same, for a connection accepted while more than half of
    /// `max_connections` are open, or still silent at this deadline while
    /// they are (at most `first_byte_timeout`).
    pub first_byte_timeout_under_pressure: Duration,
    /// How long a client may take to send a request's headers, counted from
    /// its first byte on a new connection, or from the end of the previous
    /// answer on a kept-alive one. A slower client is disconnected (at most
    /// an eighth of this late: the accept loop checks eight times per
    /// timeout), so this is also how long an idle kept-alive connection is
    /// kept.
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
