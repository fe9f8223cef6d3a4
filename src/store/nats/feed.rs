//! The JetStream sink as the event feed: the stream read in order, in bulk,
//! through an ephemeral consumer per call, with cursors `js:SEQ:INDEX`.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream;
use async_trait::async_trait;

use crate::records::event::RecordedEvent;
use crate::store::error::StoreError;
use crate::store::feed::ForeignCursor;
use crate::store::feed::{EventFeed, FeedCursor, FeedPage};

use super::{EVENT_COUNT, FETCH_BYTES, FETCH_MESSAGES, Message, NatsEventSink, backend};

/// The feed of the stream: messages in stream order (JetStream orders them
/// as it stores them, so nothing commits behind a cursor), each message's
/// events in turn. A cursor `js:SEQ:INDEX` is the last event read.
///
/// Both calls read the stream in bulk, through an ephemeral consumer that
/// starts at the cursor's message and is deleted after the call; a call
/// with nothing after the cursor asks only for the stream's last sequence
/// (and, when the cursor is in that message, for the message).
/// [`EventFeed::skip_after`] fetches headers only and counts each message's
/// events from its `Cg-Events` header, so the webhook dispatcher passes the
/// stream by without reading a payload while no webhook wants conversions.
#[async_trait]
impl EventFeed for NatsEventSink {
    async fn read_after(&self, cursor: &FeedCursor, limit: usize) -> Result<FeedPage, StoreError> {
        let walked = self.walk(cursor, limit, Read::Events).await?;
        Ok(FeedPage::new(walked.events, walked.next))
    }

    async fn skip_after(
        &self,
        cursor: &FeedCursor,
        limit: usize,
    ) -> Result<(FeedCursor, usize), StoreError> {
        let walked = self.walk(cursor, limit, Read::Counts).await?;
        Ok((walked.next, walked.passed))
    }

    /// To the end of the stream, whatever `limit`: its last sequence, then
    /// its last message for the number of events in it (two requests,
    /// however many messages are passed). The number passed is the
    /// messages moved past, each counted once (the cursor's own message
    /// counts its events left).
    async fn pass_by(
        &self,
        cursor: &FeedCursor,
        limit: usize,
    ) -> Result<(FeedCursor, usize), StoreError> {
        let (cursor_message, read_up_to) = js_position(cursor)?;
        let last = self.last_sequence().await?;
        if last < cursor_message.max(1) {
            return Ok((cursor.clone(), 0));
        }
        let Some(message) = self.message(last).await? else {
            // Deleted between the two requests (the stream's limits): pass
            // by counting instead.
            return self.skip_after(cursor, limit).await;
        };
        let count = count_in(&message)?;
        let passed = if last > cursor_message {
            usize::try_from(last - cursor_message).unwrap_or(usize::MAX)
        } else {
            count.saturating_sub(read_up_to + 1)
        };
        if passed == 0 || count == 0 {
            return Ok((cursor.clone(), 0));
        }
        Ok((FeedCursor::new(format!("js:{last}:{}", count - 1)), passed))
    }
}

/// What a walk of the feed reads of each message.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Read {
    /// The events themselves.
    Events,
    /// How many there are: the headers, the body only of a message without
    /// a `Cg-Events` header.
    Counts,
}

/// Where a walk of the feed ended.
struct Walked {
    /// The events passed, when they were read.
    events: Vec<RecordedEvent>,
    /// How many events were passed.
    passed: usize,
    /// The cursor after them.
    next: FeedCursor,
}

/// One message of a fetch: its stream sequence, how many events it holds,
/// and those events when they were read.
struct Fetched {
    sequence: u64,
    count: usize,
    events: Vec<RecordedEvent>,
}

impl NatsEventSink {
    /// Passes at most `limit` events after `cursor`, in stream order.
    async fn walk(
        &self,
        cursor: &FeedCursor,
        limit: usize,
        read: Read,
    ) -> Result<Walked, StoreError> {
        let (cursor_message, read_up_to) = js_position(cursor)?;
        let mut walked = Walked {
            events: Vec::new(),
            passed: 0,
            next: cursor.clone(),
        };
        if limit == 0 {
            return Ok(walked);
        }
        // From the cursor's own message, which may hold events after the
        // one read (a cursor at the start names message 0, which none is).
        let mut at = cursor_message.max(1);
        let last = self.last_sequence().await?;
        if at > last {
            return Ok(walked);
        }
        if at == last && cursor_message == last {
            // The cursor is in the stream's last message, where a caller
            // that keeps up waits: its count alone tells whether anything
            // is left, without opening a consumer for it.
            let left = match self.message(last).await? {
                Some(message) => count_in(&message)? > read_up_to + 1,
                None => false,
            };
            if !left {
                return Ok(walked);
            }
        }
        let consumer = self.consumer_from(at, read).await?;
        let walking = async {
            while walked.passed < limit && at <= last {
                // Every message holds at least one event: asking for as many
                // messages as events are wanted never reads one too few.
                let messages = self.fetch(&consumer, limit - walked.passed, read).await?;
                let Some(fetched_last) = messages.last().map(|message| message.sequence) else {
                    break;
                };
                for message in messages {
                    let first = if message.sequence == cursor_message {
                        read_up_to + 1
                    } else {
                        0
                    };
                    let taken = message
                        .count
                        .saturating_sub(first)
                        .min(limit - walked.passed);
                    if taken == 0 {
                        continue;
                    }
                    walked.passed += taken;
                    walked.next =
                        FeedCursor::new(format!("js:{}:{}", message.sequence, first + taken - 1));
                    walked
                        .events
                        .extend(message.events.into_iter().skip(first).take(taken));
                    if walked.passed == limit {
                        break;
                    }
                }
                at = fetched_last + 1;
            }
            Ok::<(), StoreError>(())
        };
        let walked_through = walking.await;
        // Best effort: a consumer left behind is removed by the server once
        // inactive, and the messages were read either way.
        let name = consumer.cached_info().name.clone();
        let _ =
            tokio::time::timeout(self.options.timeout, self.stream.delete_consumer(&name)).await;
        walked_through.map(|()| walked)
    }

    /// The sequence of the stream's last message (0 while it has none).
    async fn last_sequence(&self) -> Result<u64, StoreError> {
        const ACTION: &str = "read the event feed";
        let stream = self.stream.clone();
        let info = tokio::time::timeout(self.options.timeout, stream.get_info())
            .await
            .map_err(|_| backend(ACTION, "JetStream did not answer in time"))?
            .map_err(|error| backend(ACTION, error))?;
        Ok(info.state.last_sequence)
    }

    /// An ephemeral consumer of the stream from sequence `start` on, for
    /// one walk: no acknowledgements, headers only when only the counts
    /// are read.
    async fn consumer_from(
        &self,
        start: u64,
        read: Read,
    ) -> Result<jetstream::consumer::Consumer<jetstream::consumer::pull::Config>, StoreError> {
        use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
        const ACTION: &str = "read the event feed";
        let created = self.stream.create_consumer(pull::Config {
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: start,
            },
            ack_policy: AckPolicy::None,
            headers_only: read == Read::Counts,
            // Deleted after the walk; this bounds the life of one whose
            // reader went away before.
            inactive_threshold: Duration::from_secs(60),
            ..Default::default()
        });
        tokio::time::timeout(self.options.timeout, created)
            .await
            .map_err(|_| backend(ACTION, "JetStream did not answer in time"))?
            .map_err(|error| backend(ACTION, error))
    }

    /// The next messages of `consumer`, at most `want` of them (fewer if
    /// the stream holds fewer; none for a sequence it deleted).
    async fn fetch(
        &self,
        consumer: &jetstream::consumer::Consumer<jetstream::consumer::pull::Config>,
        want: usize,
        read: Read,
    ) -> Result<Vec<Fetched>, StoreError> {
        use futures_util::StreamExt as _;
        const ACTION: &str = "read the event feed";
        let work = async {
            let mut batch = consumer
                .fetch()
                .max_messages(want.min(FETCH_MESSAGES))
                .max_bytes(FETCH_BYTES)
                .messages()
                .await
                .map_err(|error| backend(ACTION, error))?;
            let mut fetched = Vec::new();
            while let Some(message) = batch.next().await {
                let message = message.map_err(|error| backend(ACTION, error))?;
                let sequence = message
                    .info()
                    .map_err(|error| backend(ACTION, error))?
                    .stream_sequence;
                let counted = message.headers.as_ref().and_then(counted_events);
                fetched.push(match (read, counted) {
                    (Read::Counts, Some(count)) => Fetched {
                        sequence,
                        count,
                        events: Vec::new(),
                    },
                    (Read::Events, _) => events_of(sequence, &message.payload)?,
                    // Written before the header existed: its body tells.
                    (Read::Counts, None) => match self.message(sequence).await? {
                        Some(whole) => Fetched {
                            sequence,
                            count: count_in(&whole)?,
                            events: Vec::new(),
                        },
                        // Deleted since the fetch: nothing to pass there.
                        None => continue,
                    },
                });
            }
            Ok(fetched)
        };
        tokio::time::timeout(self.options.timeout, work)
            .await
            .map_err(|_| backend(ACTION, "JetStream did not answer in time"))?
    }
}

/// The number of events a message's `Cg-Events` header gives, if it has one.
fn counted_events(headers: &HeaderMap) -> Option<usize> {
    headers
        .get(EVENT_COUNT)
        .and_then(|count| count.as_str().parse().ok())
}

/// How many events `message` holds: its `Cg-Events` header, or its body.
fn count_in(message: &jetstream::message::StreamMessage) -> Result<usize, StoreError> {
    match counted_events(&message.headers) {
        Some(count) => Ok(count),
        None => events_of(message.sequence, &message.payload).map(|fetched| fetched.count),
    }
}

/// The events of message `sequence`, from its body.
fn events_of(sequence: u64, payload: &[u8]) -> Result<Fetched, StoreError> {
    let body: Message =
        serde_json::from_slice(payload).map_err(|error| backend("read the event feed", error))?;
    Ok(Fetched {
        sequence,
        count: body.events.len(),
        events: body.events,
    })
}

/// The sequence and event index in a cursor `js:SEQ:INDEX`; the start is
/// `(0, 0)`.
fn js_position(cursor: &FeedCursor) -> Result<(u64, usize), StoreError> {
    if cursor.is_start() {
        return Ok((0, 0));
    }
    cursor
        .as_str()
        .strip_prefix("js:")
        .and_then(|rest| rest.split_once(':'))
        .and_then(|(sequence, index)| Some((sequence.parse().ok()?, index.parse().ok()?)))
        .filter(|(sequence, _)| *sequence > 0)
        .ok_or_else(|| StoreError::rejected("read the event feed", ForeignCursor))
}
