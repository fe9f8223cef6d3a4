//! [`EventSink`] and [`EventFeed`] on a NATS JetStream stream (feature
//! `nats`), for hosts that run many instances and hand events to a stream
//! other systems consume. OAuth state, accounts and keys stay in a database
//! store; only events go to the stream. The sink is the feed of the stream
//! too: a host that sets [`Stores::feed`](crate::Stores::feed) to it has its
//! webhooks called from the stream, as the service does with `--events`.
//!
//! One message per submission, so that a batch is stored whole or not at
//! all: its JSON body is `{"batch_uuid", "events": [...]}` (each event as
//! [`RecordedEvent`] serialises), its subject `PREFIX.ACCOUNT` (one subject
//! per account), or `PREFIX.ACCOUNT.KEYHASH` when the request carried an
//! `Idempotency-Key`, so that the key's first message can be read back by
//! its subject. A submission is acknowledged only after JetStream
//! acknowledged it as stored (file storage). A `Cg-Events` header gives
//! the number of events in the message.
//!
//! Idempotency rests on JetStream's de-duplication: every message carries
//! a `Nats-Msg-Id` (the key's hash, or the first event's uuid), and the
//! stream's duplicate window is the idempotency retention. A retry within
//! the window is acknowledged as a duplicate with the first message's
//! sequence; that message is read back and the retry answered with its
//! `event_uuid`s, or refused if its fingerprint differs. A request with a
//! key first reads the key's latest message (the last on its subject): a
//! live claim answers it at once; one expired by its own time (the
//! retention) frees the key, even while the window, counted from when
//! JetStream stored the message, still holds its id, and the request goes
//! out under an id of the key's next generation (the key's first id and
//! that claim's expiry).

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, stream};
use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::records::event::{EventSubmission, IdempotencyClaim, RecordOutcome, RecordedEvent};
use crate::store::EventSink;
use crate::store::error::StoreError;
use crate::store::feed::ForeignCursor;
use crate::store::feed::{EventFeed, FeedCursor, FeedPage};

/// The header that holds a submission's idempotency fingerprint (hex).
const FINGERPRINT: &str = "Cg-Fingerprint";
/// The header that holds when a submission's idempotency claim expires
/// (Unix seconds).
const EXPIRES_AT: &str = "Cg-Claim-Expires-At";
/// The header that holds how many events a message carries, so that the
/// feed can pass messages by from their headers alone
/// ([`EventFeed::skip_after`]). A message written before it existed is
/// counted from its body.
const EVENT_COUNT: &str = "Cg-Events";
/// The most messages one fetch of the feed asks for.
const FETCH_MESSAGES: usize = 256;
/// The most bytes one fetch of the feed asks for: a message is at most the
/// server's `max_payload` (1 MiB by default), a batch's body at most 200 KiB.
const FETCH_BYTES: usize = 8 << 20;

/// How to reach and shape the stream.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct NatsOptions {
    /// The stream's name. Default `CONVERSIONS`.
    pub stream: String,
    /// The first token of every subject; the stream takes `PREFIX.>`.
    /// Default `conversions`.
    pub subject_prefix: String,
    /// The stream's duplicate window: how long an `Idempotency-Key` is
    /// remembered. Keep it equal to
    /// [`crate::GatewayConfig::idempotency_retention`]. Default 24 hours.
    pub duplicate_window: Duration,
    /// How long a publish may wait for JetStream's acknowledgement, and a
    /// connection or a read for an answer, before the call fails (and
    /// intake answers 503 with `Retry-After`). Default 2 seconds.
    pub timeout: Duration,
}

impl Default for NatsOptions {
    fn default() -> Self {
        Self {
            stream: "CONVERSIONS".to_owned(),
            subject_prefix: "conversions".to_owned(),
            duplicate_window: Duration::from_secs(24 * 3600),
            timeout: Duration::from_secs(2),
        }
    }
}

/// A JetStream stream name that is not letters, digits, `_` and `-`.
///
/// Its message follows the name of the setting, as in
/// `format!("--events-stream {error}")`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("must be letters, digits, _ and -, not {name:?}")]
pub struct StreamNameError {
    /// The name given.
    pub name: String,
}

impl NatsOptions {
    /// The defaults for the stream `name`, with subjects named after it in
    /// lower case (`CONVERSIONS` takes `conversions.>`), so that the
    /// streams of deployments sharing one NATS never overlap. A host sets
    /// [`NatsOptions::duplicate_window`] to its gateway's
    /// [`idempotency_retention`](crate::GatewayConfig::idempotency_retention)
    /// if it changed that.
    ///
    /// # Errors
    /// [`StreamNameError`] for an empty name or one with other characters
    /// than ASCII letters, digits, `_` and `-` (JetStream refuses `.`, `*`,
    /// `>` and whitespace; the rest are kept out of subjects too).
    pub fn for_stream(name: &str) -> Result<Self, StreamNameError> {
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(StreamNameError {
                name: name.to_owned(),
            });
        }
        Ok(Self {
            stream: name.to_owned(),
            subject_prefix: name.to_lowercase(),
            ..Self::default()
        })
    }
}

/// A submission as the stream keeps it.
#[derive(Serialize, Deserialize)]
struct Message {
    batch_uuid: Option<Uuid>,
    events: Vec<RecordedEvent>,
}

/// Events in a JetStream stream.
#[derive(Clone)]
pub struct NatsEventSink {
    jetstream: jetstream::Context,
    stream: stream::Stream,
    options: NatsOptions,
}

impl std::fmt::Debug for NatsEventSink {
    /// The stream only: a NATS URL may carry credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsEventSink")
            .field("stream", &self.options.stream)
            .field("subject_prefix", &self.options.subject_prefix)
            .finish_non_exhaustive()
    }
}

/// A failure of the JetStream sink, for [`StoreError::Backend`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct NatsFailure(String);

fn backend(action: &'static str, reason: impl std::fmt::Display) -> StoreError {
    StoreError::backend(action, NatsFailure(reason.to_string()))
}

impl NatsEventSink {
    /// Connects to the NATS server at `url` (`nats://HOST:PORT`) and creates
    /// the stream if it is missing (file storage, `PREFIX.>`, the duplicate
    /// window of `options`).
    ///
    /// # Errors
    /// [`StoreError::Backend`] if the server cannot be reached within the
    /// timeout, has no JetStream, or keeps a stream of this name whose
    /// duplicate window is shorter than asked (replays older than it would
    /// be recorded again).
    pub async fn connect(url: &str, options: NatsOptions) -> Result<Self, StoreError> {
        const ACTION: &str = "connect to NATS JetStream";
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(options.timeout)
            .request_timeout(Some(options.timeout))
            .retry_on_initial_connect()
            .max_reconnects(None)
            .connect(url);
        let client = tokio::time::timeout(options.timeout, client)
            .await
            .map_err(|_| backend(ACTION, "the NATS server did not answer in time"))?
            .map_err(|error| backend(ACTION, error.kind()))?;
        let jetstream = jetstream::new(client);
        let config = stream::Config {
            name: options.stream.clone(),
            subjects: vec![format!("{}.>", options.subject_prefix)],
            storage: stream::StorageType::File,
            duplicate_window: options.duplicate_window,
            allow_direct: true,
            ..Default::default()
        };
        let created = tokio::time::timeout(options.timeout, jetstream.get_or_create_stream(config));
        let mut stream = created
            .await
            .map_err(|_| backend(ACTION, "JetStream did not answer in time"))?
            .map_err(|error| backend(ACTION, error))?;
        let window = stream
            .info()
            .await
            .map_err(|error| backend(ACTION, error))?
            .config
            .duplicate_window;
        if window < options.duplicate_window {
            return Err(backend(
                ACTION,
                format!(
                    "the stream {} keeps message ids for {} s, less than the {} s asked: raise its duplicate window",
                    options.stream,
                    window.as_secs(),
                    options.duplicate_window.as_secs()
                ),
            ));
        }
        Ok(Self {
            jetstream,
            stream,
            options,
        })
    }

    /// The subject of `submission`'s message, and its message id.
    fn address(&self, submission: &EventSubmission) -> Option<(String, String)> {
        let first = submission.events.first()?;
        let account = first.account_id.0.simple();
        let prefix = &self.options.subject_prefix;
        Some(match &submission.idempotency {
            Some(claim) => {
                let hash = claim_hash(claim);
                (
                    format!("{prefix}.{account}.{hash}"),
                    format!("claim:{hash}"),
                )
            }
            None => (
                format!("{prefix}.{account}"),
                format!("event:{}", first.event_uuid),
            ),
        })
    }

    /// Reads message `sequence`; `None` if the stream holds none there.
    async fn message(
        &self,
        sequence: u64,
    ) -> Result<Option<jetstream::message::StreamMessage>, StoreError> {
        let read = self.stream.get_raw_message(sequence);
        self.found("read JetStream", read).await
    }

    /// The last message on `subject`, a key's latest claim; `None` if the
    /// stream holds none.
    async fn last_message(
        &self,
        subject: &str,
    ) -> Result<Option<jetstream::message::StreamMessage>, StoreError> {
        let read = self.stream.get_last_raw_message_by_subject(subject);
        self.found("check an idempotency claim", read).await
    }

    /// The message `read` finds, within the sink's timeout; `None` if the
    /// stream holds no such message.
    async fn found(
        &self,
        action: &'static str,
        read: impl Future<
            Output = Result<jetstream::message::StreamMessage, stream::LastRawMessageError>,
        >,
    ) -> Result<Option<jetstream::message::StreamMessage>, StoreError> {
        match tokio::time::timeout(self.options.timeout, read)
            .await
            .map_err(|_| backend(action, "JetStream did not answer in time"))?
        {
            Ok(message) => Ok(Some(message)),
            Err(error)
                if matches!(
                    error.kind(),
                    stream::LastRawMessageErrorKind::NoMessageFound
                ) =>
            {
                Ok(None)
            }
            Err(error) => Err(backend(action, error)),
        }
    }

    /// Publishes `body`, `submission`'s events, to `subject` under
    /// `message_id`, and waits for JetStream's acknowledgement.
    async fn publish(
        &self,
        subject: &str,
        message_id: &str,
        submission: &EventSubmission,
        body: Bytes,
    ) -> Result<jetstream::publish::PublishAck, StoreError> {
        const ACTION: &str = "publish events to JetStream";
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", message_id);
        headers.insert(EVENT_COUNT, submission.events.len().to_string().as_str());
        if let Some(claim) = &submission.idempotency {
            headers.insert(FINGERPRINT, hex(&claim.fingerprint).as_str());
            headers.insert(
                EXPIRES_AT,
                claim.expires_at.unix_timestamp().to_string().as_str(),
            );
        }
        // Refused at once while the client is not connected: a message
        // published then waits in the client's buffer and goes out once it
        // reconnects, after this call has answered that nothing was
        // recorded, and a caller's retry would be recorded beside it.
        // (Should the connection drop between this check and the publish,
        // or the acknowledgement be late, that can still happen; an
        // `Idempotency-Key` makes the retry safe.)
        let state = self.jetstream.client().connection_state();
        if state != async_nats::connection::State::Connected {
            return Err(backend(ACTION, "not connected to the NATS server"));
        }
        let publish = async {
            let ack = self
                .jetstream
                .publish_with_headers(subject.to_owned(), headers, body)
                .await
                .map_err(|error| backend(ACTION, error))?;
            // Stored once acked; on disk as the server's `sync_interval`
            // says (docs/intake.md, "The JetStream sink").
            ack.await.map_err(|error| backend(ACTION, error))
        };
        tokio::time::timeout(self.options.timeout, publish)
            .await
            .map_err(|_| backend(ACTION, "JetStream did not acknowledge in time"))?
    }
}

/// The hash that names a claim: account, scope and key, in hex.
fn claim_hash(claim: &IdempotencyClaim) -> String {
    let mut hasher = Sha256::new();
    hasher.update(claim.account_id.0.as_bytes());
    hasher.update(claim.scope.to_stored().as_bytes());
    hasher.update([0]);
    hasher.update(claim.key.as_bytes());
    hasher
        .finalize()
        .iter()
        .take(16)
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// When the claim a message carries expires (Unix seconds).
fn expiry_of(message: &jetstream::message::StreamMessage) -> Result<i64, StoreError> {
    message
        .headers
        .get(EXPIRES_AT)
        .and_then(|value| value.as_str().parse().ok())
        .ok_or_else(|| {
            backend(
                "read an idempotency claim",
                "a claim's message has no expiry",
            )
        })
}

/// What a claim's first message answers `claim`: its `event_uuid`s if the
/// fingerprints match, else a reused key; `None` if it expired.
fn outcome_for(
    message: &jetstream::message::StreamMessage,
    claim: &IdempotencyClaim,
) -> Result<Option<RecordOutcome>, StoreError> {
    const ACTION: &str = "read an idempotency claim";
    if expiry_of(message)? <= claim.created_at.unix_timestamp() {
        return Ok(None);
    }
    let header = |name: &str| {
        message
            .headers
            .get(name)
            .map(|value| value.as_str().to_owned())
    };
    if header(FINGERPRINT).as_deref() != Some(hex(&claim.fingerprint).as_str()) {
        return Ok(Some(RecordOutcome::KeyReused));
    }
    let body: Message =
        serde_json::from_slice(&message.payload).map_err(|error| backend(ACTION, error))?;
    Ok(Some(RecordOutcome::Replayed {
        event_uuids: body.events.iter().map(|e| e.event_uuid).collect(),
        batch_uuid: body.batch_uuid,
    }))
}

#[async_trait]
impl EventSink for NatsEventSink {
    /// The stream's state, asked of JetStream within the timeout.
    async fn ready(&self) -> Result<(), StoreError> {
        const ACTION: &str = "check that JetStream answers";
        let mut stream = self.stream.clone();
        tokio::time::timeout(self.options.timeout, stream.info())
            .await
            .map_err(|_| backend(ACTION, "JetStream did not answer in time"))?
            .map_err(|error| backend(ACTION, error))?;
        Ok(())
    }

    async fn record(&self, submission: &EventSubmission) -> Result<RecordOutcome, StoreError> {
        const ACTION: &str = "publish events to JetStream";
        let Some((subject, message_id)) = self.address(submission) else {
            return Ok(RecordOutcome::Recorded);
        };
        let body: Bytes = serde_json::to_vec(&Message {
            batch_uuid: submission.batch_uuid,
            events: submission.events.clone(),
        })
        .map_err(|error| backend(ACTION, error))?
        .into();
        let Some(claim) = &submission.idempotency else {
            let ack = self
                .publish(&subject, &message_id, submission, body)
                .await?;
            return if ack.duplicate {
                // The first event's uuid was published before.
                Err(StoreError::Duplicate { what: "event" })
            } else {
                Ok(RecordOutcome::Recorded)
            };
        };
        // Tried again only when another request with the key published
        // between the read and the publish below with a claim that has
        // expired since, which takes a stream whose messages are deleted.
        for _ in 0..3 {
            // The key's latest claim decides, read before publishing: a
            // live one answers this request. An expired one leaves the key
            // free, as on the other stores, and names the id of the next
            // claim. Not the key's first id, which JetStream may still hold
            // (its duplicate window counts from when it stored the message,
            // and may be longer than the retention) or may have forgotten
            // while a later claim still holds (then this request would be
            // recorded beside that claim's).
            let generation_id = match self.last_message(&subject).await? {
                None => message_id.clone(),
                Some(latest) => match outcome_for(&latest, claim)? {
                    Some(outcome) => return Ok(outcome),
                    None => format!("{message_id}:{}", expiry_of(&latest)?),
                },
            };
            let ack = self
                .publish(&subject, &generation_id, submission, body.clone())
                .await?;
            if !ack.duplicate {
                return Ok(RecordOutcome::Recorded);
            }
            // Another request with the key published this generation's
            // claim first: it answers this one.
            let first = self
                .message(ack.sequence)
                .await?
                .ok_or_else(|| backend(ACTION, "the first message of a key is gone"))?;
            if let Some(outcome) = outcome_for(&first, claim)? {
                return Ok(outcome);
            }
        }
        Err(backend(
            ACTION,
            "an idempotency key's claims changed under every publish",
        ))
    }

    async fn check_claim(
        &self,
        claim: &IdempotencyClaim,
    ) -> Result<Option<RecordOutcome>, StoreError> {
        let subject = format!(
            "{}.{}.{}",
            self.options.subject_prefix,
            claim.account_id.0.simple(),
            claim_hash(claim)
        );
        match self.last_message(&subject).await? {
            Some(message) => outcome_for(&message, claim),
            None => Ok(None),
        }
    }

    /// A stream is read in order, not by key: finding one event means
    /// scanning, which this sink refuses rather than do on a request.
    /// Consumers read the stream ([`EventFeed`]).
    async fn find_event(&self, _event_uuid: Uuid) -> Result<Option<RecordedEvent>, StoreError> {
        Err(backend(
            "find an event",
            "the JetStream sink does not look events up by uuid: read them from the stream",
        ))
    }

    /// Nothing to purge: JetStream forgets message ids after the stream's
    /// duplicate window.
    async fn purge_expired_claims(
        &self,
        _cutoff: OffsetDateTime,
        _limit: usize,
    ) -> Result<usize, StoreError> {
        Ok(0)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_names_its_subjects_in_lower_case() {
        let options = NatsOptions::for_stream("Leads_EU-1").unwrap();
        assert_eq!(options.stream, "Leads_EU-1");
        assert_eq!(options.subject_prefix, "leads_eu-1");
        assert_eq!(
            options.duplicate_window,
            NatsOptions::default().duplicate_window
        );
        let default = NatsOptions::for_stream("CONVERSIONS").unwrap();
        assert_eq!(
            default.subject_prefix,
            NatsOptions::default().subject_prefix
        );
    }

    #[test]
    fn a_stream_name_is_letters_digits_underscores_and_dashes() {
        for name in ["", "a.b", "a*", "a>", "a b", "é"] {
            let error = NatsOptions::for_stream(name).unwrap_err();
            assert_eq!(
                error.to_string(),
                format!("must be letters, digits, _ and -, not {name:?}")
            );
        }
    }
}
