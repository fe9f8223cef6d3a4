//! The feed of recorded events: what consumers (contact updates,
//! automations, campaign counts) follow, in the order events were
//! committed, from a cursor they keep.

use std::fmt;

use async_trait::async_trait;

use crate::records::event::RecordedEvent;
use crate::store::error::StoreError;

/// Where a consumer is in the feed: opaque text that a store writes and
/// reads back, safe to keep in a file or a column. [`FeedCursor::start`] is
/// before the first event. A cursor of one store means nothing to another.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FeedCursor(String);

impl FeedCursor {
    /// Before the first event.
    pub fn start() -> Self {
        Self(String::new())
    }

    /// A cursor read back from where a consumer kept it.
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into().trim().to_owned())
    }

    /// The text to keep.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is [`FeedCursor::start`].
    pub fn is_start(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for FeedCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One read of the feed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FeedPage {
    /// The events after the cursor, in commit order.
    pub events: Vec<RecordedEvent>,
    /// Where the next read starts: after the last event of this page, or
    /// the cursor read from if the page is empty.
    pub next: FeedCursor,
}

impl FeedPage {
    /// A page of `events` ending at `next`.
    pub fn new(events: Vec<RecordedEvent>, next: FeedCursor) -> Self {
        Self { events, next }
    }
}

/// The most events [`EventFeed::skip_after`]'s default reads at once.
const SKIP_READ_PAGE: usize = 500;

/// The recorded events in commit order, for consumers.
///
/// Delivery is at least once: a consumer that keeps the cursor only after
/// handling a page reads a page again after a crash, never skips one. The
/// order holds across concurrent writers: a cursor never passes an event
/// whose transaction commits later with an earlier position, so an event
/// committed while a consumer reads is in a later page, never lost behind
/// the cursor.
#[async_trait]
pub trait EventFeed: Send + Sync {
    /// At most `limit` events committed after `cursor`, oldest first, and
    /// the cursor after them.
    ///
    /// # Errors
    /// [`StoreError::Rejected`] for a cursor this store did not write;
    /// `Backend` on failure.
    async fn read_after(&self, cursor: &FeedCursor, limit: usize) -> Result<FeedPage, StoreError>;

    /// The cursor [`EventFeed::read_after`] would give after at most
    /// `limit` events committed after `cursor`, and how many events that
    /// passes, without reading them: for a consumer with nothing to do for
    /// them (the webhook dispatcher while no webhook is registered, which
    /// would otherwise read every conversion back as it is recorded). The
    /// same order and the same guarantee as `read_after`. The default reads
    /// the events, 500 at a time so that a large `limit` never holds more
    /// than that many in memory; the SQL and memory stores of this crate
    /// read only their positions.
    ///
    /// # Errors
    /// As [`EventFeed::read_after`].
    async fn skip_after(
        &self,
        cursor: &FeedCursor,
        limit: usize,
    ) -> Result<(FeedCursor, usize), StoreError> {
        let (mut at, mut passed) = (cursor.clone(), 0);
        while passed < limit {
            let page = self
                .read_after(&at, (limit - passed).min(SKIP_READ_PAGE))
                .await?;
            if page.events.is_empty() {
                break;
            }
            passed += page.events.len();
            at = page.next;
        }
        Ok((at, passed))
    }

    /// A cursor past the events committed after `cursor`, and how many it
    /// passed, for a consumer with nothing to do for any of them (the
    /// webhook dispatcher while no webhook wants conversions). Unlike
    /// [`EventFeed::skip_after`] it need not count each event, so a store
    /// that can find its end cheaply jumps there: the JetStream sink reads
    /// its last message alone, and counts the messages it moved past (a
    /// batch is one). The same guarantee as `read_after`: no event that
    /// commits later is passed. The default is
    /// [`EventFeed::skip_after`]`(cursor, limit)`, exact and at most `limit`.
    ///
    /// # Errors
    /// As [`EventFeed::read_after`].
    async fn pass_by(
        &self,
        cursor: &FeedCursor,
        limit: usize,
    ) -> Result<(FeedCursor, usize), StoreError> {
        self.skip_after(cursor, limit).await
    }
}

/// The position in a cursor of the form `PREFIX:N`, for the stores that
/// number events with one integer; the start is 0.
pub(crate) fn position(cursor: &FeedCursor, prefix: &str) -> Result<u64, StoreError> {
    if cursor.is_start() {
        return Ok(0);
    }
    cursor
        .as_str()
        .strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix(':'))
        .and_then(|number| number.parse().ok())
        .ok_or_else(|| StoreError::rejected("read the event feed", ForeignCursor))
}

/// A cursor this store did not write.
#[derive(Debug, thiserror::Error)]
#[error("the feed cursor was not written by this store")]
pub(crate) struct ForeignCursor;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_read_back_from_their_prefix_only() {
        assert_eq!(position(&FeedCursor::start(), "mem").unwrap(), 0);
        assert_eq!(position(&FeedCursor::new("mem:42\n"), "mem").unwrap(), 42);
        for foreign in ["sqlite:42", "mem42", "mem:", "mem:-1", "mem:x", "42"] {
            assert!(
                matches!(
                    position(&FeedCursor::new(foreign), "mem"),
                    Err(StoreError::Rejected { .. })
                ),
                "{foreign}"
            );
        }
    }
}
