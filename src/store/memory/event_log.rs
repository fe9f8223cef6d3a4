//! The memory event sink's log: every event in the order it was recorded
//! (the feed), kept compact, with an index by uuid.
//!
//! Why compact: a memory store keeps every event for as long as it lives,
//! and every byte it keeps is fresh memory, which the kernel zeroes and,
//! on a virtual machine, the host may have to back first. Kept as a
//! [`RecordedEvent`] in a B-tree by uuid, an event took 1.11 KB (a
//! 600-byte conversion); zeroing those pages was 16% of the memory
//! server's CPU under an intake flood (profiled with perf). On a VM whose
//! host charged 2.8 µs a KiB of fresh memory, keeping an event cost the
//! memory server more CPU than the rest of its request path over a bare
//! handler (`server/benches/intake_load/NOTES.md`).
//!
//! So an event's texts (its four short ones, the payload's JSON, the
//! client of a bearer channel) are copied one after the other into large
//! blocks of text, with no allocation, header or size-class rounding of
//! their own; its fixed-size part (uuids, instant, where its texts are)
//! sits packed in chunks; the B-tree holds only uuids and positions.
//! Measured by the resident set over an intake flood, a typical
//! conversion takes 730 bytes, 520 of them the payload's text, against
//! 880 with the texts in allocations of their own (a payload of 536
//! bytes with its reference counts took mimalloc's 640-byte size class).
//! The copy into the block costs less than the allocations it replaces;
//! on the VM above, the memory server's CPU a request fell 4% (eight
//! alternated runs, within the noise of any one).
//!
//! The blocks and chunks are fresh memory all the same, and the first
//! write to each page of it is a page fault in which the kernel zeroes it.
//! Once the last block (or chunk) is half full, the log asks for the next
//! one in reserve ([`Reserve`]), which the sink makes, and writes once,
//! after it has let go of its lock: the faults are no longer taken while
//! every other request waits for the lock.

use std::collections::BTreeMap;

use time::OffsetDateTime;
use uuid::Uuid;

use crate::account::AccountId;
use crate::records::client::ClientId;
use crate::records::event::{EventPayload, IntakeChannel, RecordedEvent};

use super::fresh_pages::{touched_string, touched_vec};

/// Events per chunk. The log grows a chunk at a time, so a long log is
/// never copied to a larger allocation while the sink's lock is held.
const CHUNK: usize = 4096;

/// Bytes per block of text. Blocks never grow (an event whose texts do not
/// fit starts the next one), so a block's text never moves.
const TEXT_BLOCK: usize = 1 << 20;

/// The most bytes of text one event can take: the offsets kept for it are
/// 32-bit. An HTTP body is far smaller; a host recording through the trait
/// directly gets [`EventTooLarge`] beyond this, or beyond the lower bound
/// it set (`MemoryEventSink::with_max_event_text`).
pub(super) const MAX_EVENT_TEXT: usize = u32::MAX as usize;

/// Every recorded event, in the order recorded, and where each uuid is.
#[derive(Default)]
pub(super) struct EventLog {
    /// The events' fixed-size parts, [`CHUNK`] to a chunk; only the last
    /// one has room.
    chunks: Vec<Vec<StoredEvent>>,
    /// The events' texts, in blocks of [`TEXT_BLOCK`] bytes (or one
    /// event's, if larger); only the last one has room.
    texts: Vec<String>,
    /// Each event's position in the log. A B-tree, not a hash map: a hash
    /// map that outgrows its table moves every entry to a new one while the
    /// sink's lock is held, and with a million events that stalled every
    /// request for about 400 ms (the memory store's p99 under `wrk`). A
    /// B-tree grows a node at a time, and the time-ordered (v7) uuids of new
    /// events all land in its last leaf.
    positions: BTreeMap<Uuid, usize>,
    /// The next block of text, touched outside the sink's lock
    /// ([`Reserve`]), once the last block is half full.
    spare_text: Option<String>,
    /// The next chunk, likewise.
    spare_chunk: Option<Vec<StoredEvent>>,
    /// Whether a [`Reserve`] was asked for ([`EventLog::reserve_wanted`])
    /// and not yet stocked: it is asked for once.
    reserve_asked: bool,
}

/// Fresh memory for an [`EventLog`]'s next block of text or chunk (or
/// both), written once ([`super::fresh_pages`]) by the caller that the log
/// asked for it, with no lock held, then handed over with
/// [`EventLog::stock`]. Without it, the block's and the chunk's pages were
/// faulted in by the copies into them, under the sink's lock, while every
/// other request waited for the kernel to zero 2 MiB.
pub(super) struct Reserve {
    /// A block of text, if the log wants one.
    text: Option<String>,
    /// A chunk, if the log wants one.
    chunk: Option<Vec<StoredEvent>>,
}

/// What an [`EventLog`] wants in reserve: a block of text, a chunk, or both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ReserveWanted {
    /// A block of text.
    text: bool,
    /// A chunk.
    chunk: bool,
}

impl Reserve {
    /// The memory `wanted`, each page of it written once: the expensive
    /// part, to be done with no lock held.
    pub(super) fn touched(wanted: ReserveWanted) -> Self {
        Self {
            text: wanted.text.then(|| touched_string(TEXT_BLOCK)),
            chunk: wanted
                .chunk
                .then(|| touched_vec(CHUNK, StoredEvent::FILLER)),
        }
    }
}

/// An event whose texts are larger than the sink keeps.
#[derive(Debug, thiserror::Error)]
#[error("an event's texts take {length} bytes, more than the {limit} kept")]
pub(super) struct EventTooLarge {
    /// The bytes of the event's texts.
    length: usize,
    /// The most the sink keeps.
    limit: usize,
}

impl EventLog {
    /// Whether `event`'s texts take at most `limit` bytes (and at most
    /// [`MAX_EVENT_TEXT`], whatever `limit` says).
    ///
    /// # Errors
    /// [`EventTooLarge`].
    pub(super) fn check_size(event: &RecordedEvent, limit: usize) -> Result<(), EventTooLarge> {
        text_length_fits(text_length(event), limit)
    }

    /// How many events are recorded.
    pub(super) fn len(&self) -> usize {
        self.positions.len()
    }

    /// Whether an event with `uuid` is recorded.
    pub(super) fn contains(&self, uuid: &Uuid) -> bool {
        self.positions.contains_key(uuid)
    }

    /// Appends `event` unless an event with its uuid is recorded: whether
    /// it was appended. The caller checked its size with
    /// [`EventLog::check_size`].
    ///
    /// One descent of the B-tree both refuses a recorded uuid and places a
    /// new one (a sink recording one event needs no separate check).
    pub(super) fn push_new(&mut self, event: &RecordedEvent) -> bool {
        let position = self.len();
        let std::collections::btree_map::Entry::Vacant(slot) =
            self.positions.entry(event.event_uuid)
        else {
            return false;
        };
        slot.insert(position);
        let (block, start, ends) = self.append_texts(event);
        if self.chunks.last().is_none_or(|chunk| chunk.len() == CHUNK) {
            let chunk = self
                .spare_chunk
                .take()
                .unwrap_or_else(|| Vec::with_capacity(CHUNK));
            self.chunks.push(chunk);
        }
        if let Some(chunk) = self.chunks.last_mut() {
            chunk.push(StoredEvent {
                event_uuid: event.event_uuid,
                account_id: event.account_id,
                received_at: event.received_at,
                block,
                start,
                ends,
                bearer: matches!(event.channel, IntakeChannel::Bearer { .. }),
            });
        }
        true
    }

    /// What the log wants in reserve, if it should be asked for now: a
    /// block of text once the last block is half full and no spare is
    /// kept, a chunk likewise. Answered once until [`EventLog::stock`]ed,
    /// so that one caller prepares it. A log that never fills half a block
    /// (a test's) asks for nothing.
    pub(super) fn reserve_wanted(&mut self) -> Option<ReserveWanted> {
        if self.reserve_asked {
            return None;
        }
        let wanted = ReserveWanted {
            text: self.spare_text.is_none()
                && self
                    .texts
                    .last()
                    .is_some_and(|block| block.len() > TEXT_BLOCK / 2),
            chunk: self.spare_chunk.is_none()
                && self
                    .chunks
                    .last()
                    .is_some_and(|chunk| chunk.len() > CHUNK / 2),
        };
        self.reserve_asked = wanted.text || wanted.chunk;
        self.reserve_asked.then_some(wanted)
    }

    /// Keeps `reserve` for the next block and chunk (a part already kept
    /// is dropped), and takes requests for more again.
    pub(super) fn stock(&mut self, reserve: Reserve) {
        if let Some(text) = reserve.text {
            self.spare_text.get_or_insert(text);
        }
        if let Some(chunk) = reserve.chunk {
            self.spare_chunk.get_or_insert(chunk);
        }
        self.reserve_asked = false;
    }

    /// Whether a block of text and a chunk are kept in reserve.
    #[cfg(test)]
    pub(super) fn spares(&self) -> (bool, bool) {
        (self.spare_text.is_some(), self.spare_chunk.is_some())
    }

    /// The event with `uuid`, if recorded.
    pub(super) fn find(&self, uuid: &Uuid) -> Option<RecordedEvent> {
        let position = *self.positions.get(uuid)?;
        self.at(position)
    }

    /// The events at positions `start..end` (clamped to the log).
    pub(super) fn range(&self, start: usize, end: usize) -> Vec<RecordedEvent> {
        (start..end.min(self.len()))
            .filter_map(|position| self.at(position))
            .collect()
    }

    fn at(&self, position: usize) -> Option<RecordedEvent> {
        let stored = self.chunks.get(position / CHUNK)?.get(position % CHUNK)?;
        let block = self.texts.get(usize::try_from(stored.block).ok()?)?;
        Some(stored.to_recorded(block))
    }

    /// Copies `event`'s texts one after the other into the last block (a
    /// new one if they do not fit): the block's index, where they start in
    /// it, and where each ends, from that start.
    fn append_texts(&mut self, event: &RecordedEvent) -> (u32, u32, [u32; TEXTS]) {
        let total = text_length(event);
        let fits = self
            .texts
            .last()
            .is_some_and(|block| block.capacity() - block.len() >= total);
        if !fits {
            let block = match self.spare_text.take() {
                Some(spare) if spare.capacity() >= total => spare,
                spare => {
                    // Larger than a block: a block of its own, the spare
                    // kept for the next one.
                    self.spare_text = spare;
                    String::with_capacity(total.max(TEXT_BLOCK))
                }
            };
            self.texts.push(block);
        }
        let index = self.texts.len() - 1;
        let block = &mut self.texts[index];
        let start = block.len();
        let mut ends = [0; TEXTS];
        for (end, text) in ends.iter_mut().zip(texts_of(event)) {
            block.push_str(text);
            *end = offset(block.len() - start);
        }
        (offset(index), offset(start), ends)
    }
}

/// The bytes of all of `event`'s texts.
fn text_length(event: &RecordedEvent) -> usize {
    texts_of(event).iter().map(|text| text.len()).sum()
}

/// Whether texts of `length` bytes are within `limit` and fit the log's
/// offsets.
fn text_length_fits(length: usize, limit: usize) -> Result<(), EventTooLarge> {
    let limit = limit.min(MAX_EVENT_TEXT);
    if length <= limit {
        Ok(())
    } else {
        Err(EventTooLarge { length, limit })
    }
}

/// How many texts an event keeps (see [`texts_of`]).
const TEXTS: usize = 6;

/// `event`'s texts in the order the log keeps them: type, family,
/// conversion identifier, e-mail, the payload's JSON, and the client of a
/// bearer channel (empty for an API key).
fn texts_of(event: &RecordedEvent) -> [&str; TEXTS] {
    let client = match &event.channel {
        IntakeChannel::ApiKey => "",
        IntakeChannel::Bearer { client_id } => client_id.as_str(),
    };
    [
        event.event_type.as_str(),
        event.event_family.as_str(),
        event.conversion_identifier.as_str(),
        event.email.as_str(),
        event.payload.as_str(),
        client,
    ]
}

/// A block index or an offset in a block, which [`MAX_EVENT_TEXT`] and the
/// block's size keep within 32 bits (a block holds at most one event
/// larger than [`TEXT_BLOCK`], and 4,096 blocks of 1 MiB are 4 GiB: past
/// that, only the index grows, and `u32` blocks are 4 PiB).
fn offset(value: usize) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// The fixed-size part of a [`RecordedEvent`] as the log keeps it: 84
/// bytes, against 128 with its texts as strings of their own.
#[derive(Clone)]
struct StoredEvent {
    event_uuid: Uuid,
    account_id: AccountId,
    received_at: OffsetDateTime,
    /// The block of text that holds the event's texts.
    block: u32,
    /// Where they start in it.
    start: u32,
    /// Where each of them ends, from `start`, in [`texts_of`]'s order.
    ends: [u32; TEXTS],
    /// Whether the channel is a bearer token (of the client whose id is
    /// the last text) rather than an API key.
    bearer: bool,
}

impl StoredEvent {
    /// What a chunk in reserve is written with before it is emptied.
    const FILLER: Self = Self {
        event_uuid: Uuid::nil(),
        account_id: AccountId(Uuid::nil()),
        received_at: OffsetDateTime::UNIX_EPOCH,
        block: 0,
        start: 0,
        ends: [0; TEXTS],
        bearer: false,
    };

    /// The event as it was recorded, its texts read from `block`.
    fn to_recorded(&self, block: &str) -> RecordedEvent {
        let start = self.start as usize;
        let mut texts = [""; TEXTS];
        let mut from = start;
        for (text, &end) in texts.iter_mut().zip(&self.ends) {
            let to = start + end as usize;
            *text = block.get(from..to).unwrap_or_default();
            from = to;
        }
        let [
            event_type,
            event_family,
            conversion_identifier,
            email,
            payload,
            client,
        ] = texts;
        RecordedEvent {
            event_uuid: self.event_uuid,
            account_id: self.account_id,
            received_at: self.received_at,
            event_type: event_type.to_owned(),
            event_family: event_family.to_owned(),
            conversion_identifier: conversion_identifier.to_owned(),
            email: email.to_owned(),
            // It was JSON when it was recorded.
            payload: EventPayload::from_written_json(payload.to_owned()),
            channel: if self.bearer {
                IntakeChannel::Bearer {
                    client_id: ClientId::new(client),
                }
            } else {
                IntakeChannel::ApiKey
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;
    use crate::records::client::ClientId;

    fn event(n: u128, channel: IntakeChannel) -> RecordedEvent {
        RecordedEvent {
            event_uuid: Uuid::from_u128(n),
            account_id: AccountId(Uuid::from_u128(7)),
            received_at: datetime!(2026-03-01 12:00:00.123456 UTC),
            event_type: "CONVERSION".to_owned(),
            event_family: "CDP".to_owned(),
            conversion_identifier: format!("signup-{n}"),
            email: "ana@example.com".to_owned(),
            payload: EventPayload::from_value(&serde_json::json!({"n": n.to_string()})),
            channel,
        }
    }

    #[test]
    fn an_event_reads_back_as_recorded_texts_and_channel_included() {
        let bearer = IntakeChannel::Bearer {
            client_id: ClientId::new("app"),
        };
        let mut log = EventLog::default();
        let mut recorded = Vec::new();
        for (n, original) in [event(1, IntakeChannel::ApiKey), event(2, bearer)]
            .into_iter()
            .enumerate()
        {
            let mut odd = original.clone();
            // Empty and non-ASCII texts keep their bounds.
            odd.event_uuid = Uuid::from_u128(100 + u128::try_from(n).expect("small"));
            odd.event_family = String::new();
            odd.email = "joão@exemplo.com.br".to_owned();
            recorded.extend([original, odd]);
        }
        for event in &recorded {
            assert!(log.push_new(event));
        }
        for event in &recorded {
            assert_eq!(log.find(&event.event_uuid).as_ref(), Some(event));
        }
        assert_eq!(log.range(0, 4), recorded);
    }

    #[test]
    fn texts_that_do_not_fit_start_a_block_and_larger_ones_have_their_own() {
        let mut log = EventLog::default();
        let mut big = event(1, IntakeChannel::ApiKey);
        // Larger than a block: a block of its own, exactly its size.
        let filler = "x".repeat(TEXT_BLOCK);
        big.payload = EventPayload::from_value(&serde_json::json!({ "filler": filler }));
        let small = event(2, IntakeChannel::ApiKey);
        assert!(log.push_new(&small));
        assert!(log.push_new(&big));
        assert!(log.push_new(&event(3, IntakeChannel::ApiKey)));
        assert_eq!(
            log.texts.len(),
            3,
            "the small event after the big one needs a new block"
        );
        assert_eq!(log.texts[1].len(), texts_of(&big).concat().len());
        // Fill the third block to within a byte of its end: the next event
        // goes to a fourth.
        let room = TEXT_BLOCK - log.texts[2].len();
        let mut filling = event(4, IntakeChannel::ApiKey);
        let others: usize = texts_of(&filling).iter().map(|t| t.len()).sum();
        filling.email = "e".repeat(filling.email.len() + room - others - 1);
        assert!(log.push_new(&filling));
        assert_eq!(log.texts.len(), 3);
        assert_eq!(log.texts[2].len(), TEXT_BLOCK - 1);
        assert!(log.push_new(&event(5, IntakeChannel::ApiKey)));
        assert_eq!(log.texts.len(), 4);
        for n in 1..=5 {
            let found = log.find(&Uuid::from_u128(n)).expect("recorded");
            let expected = match n {
                1 => big.clone(),
                4 => filling.clone(),
                n => event(n, IntakeChannel::ApiKey),
            };
            assert_eq!(found.payload.as_str(), expected.payload.as_str());
            assert_eq!(found, expected);
        }
    }

    /// Event `n` whose texts take about `bytes` bytes.
    fn event_of(n: u128, bytes: usize) -> RecordedEvent {
        let mut event = event(n, IntakeChannel::ApiKey);
        event.email = "e".repeat(bytes);
        event
    }

    #[test]
    fn a_block_is_asked_for_once_past_half_full_and_its_spare_is_the_next_block() {
        let mut log = EventLog::default();
        assert_eq!(log.reserve_wanted(), None, "an empty log keeps no reserve");
        // Exactly half a block: not past half.
        let others = text_length(&event_of(1, 0));
        assert!(log.push_new(&event_of(1, TEXT_BLOCK / 2 - others)));
        assert_eq!(log.texts[0].len(), TEXT_BLOCK / 2);
        assert_eq!(log.reserve_wanted(), None, "half a block is not past half");
        assert!(log.push_new(&event_of(2, 0)));
        let wanted = ReserveWanted {
            text: true,
            chunk: false,
        };
        assert_eq!(log.reserve_wanted(), Some(wanted));
        assert_eq!(log.reserve_wanted(), None, "asked for once");
        let reserve = Reserve::touched(wanted);
        let spare = reserve.text.as_ref().expect("a block").as_ptr();
        assert!(reserve.chunk.is_none());
        log.stock(reserve);
        assert_eq!(log.reserve_wanted(), None, "kept in reserve");
        // An event larger than a block has a block of its own: the spare
        // waits for the next block.
        assert!(log.push_new(&event_of(3, TEXT_BLOCK + 1)));
        assert_eq!(log.texts.len(), 2);
        assert!(log.spare_text.is_some());
        assert!(log.push_new(&event_of(4, 10)));
        assert_eq!(log.texts.len(), 3);
        assert_eq!(log.texts[2].as_ptr(), spare, "the spare is the next block");
        assert!(log.spare_text.is_none());
        // The new block is not yet half full: nothing is asked for.
        assert_eq!(log.reserve_wanted(), None);
        for n in 1..=4 {
            assert!(log.find(&Uuid::from_u128(n)).is_some());
        }
        assert_eq!(log.find(&Uuid::from_u128(4)), Some(event_of(4, 10)));
    }

    #[test]
    fn a_chunk_is_asked_for_once_past_half_full_and_its_spare_is_the_next_chunk() {
        let mut log = EventLog::default();
        let half = u128::try_from(CHUNK / 2).expect("small");
        for n in 1..=half {
            assert!(log.push_new(&event(n, IntakeChannel::ApiKey)));
        }
        assert_eq!(log.reserve_wanted(), None);
        assert!(log.push_new(&event(half + 1, IntakeChannel::ApiKey)));
        let wanted = ReserveWanted {
            text: false,
            chunk: true,
        };
        assert_eq!(log.reserve_wanted(), Some(wanted));
        let reserve = Reserve::touched(wanted);
        let spare = reserve.chunk.as_ref().expect("a chunk").as_ptr();
        assert!(reserve.text.is_none());
        log.stock(reserve);
        let full = u128::try_from(CHUNK).expect("small");
        for n in half + 2..=full + 1 {
            assert!(log.push_new(&event(n, IntakeChannel::ApiKey)));
        }
        assert_eq!(log.chunks.len(), 2);
        assert_eq!(log.chunks[1].as_ptr(), spare, "the spare is the next chunk");
        assert_eq!(log.chunks[1].capacity(), CHUNK);
        let last = Uuid::from_u128(full + 1);
        assert_eq!(
            log.find(&last),
            Some(event(full + 1, IntakeChannel::ApiKey))
        );
    }

    #[test]
    fn a_part_already_kept_is_not_replaced_by_a_later_reserve() {
        let mut log = EventLog::default();
        let first = Reserve::touched(ReserveWanted {
            text: true,
            chunk: true,
        });
        let (text, chunk) = (
            first.text.as_ref().expect("a block").as_ptr(),
            first.chunk.as_ref().expect("a chunk").as_ptr(),
        );
        log.stock(first);
        log.stock(Reserve::touched(ReserveWanted {
            text: true,
            chunk: true,
        }));
        assert_eq!(
            log.spare_text.as_ref().map(|text| text.as_ptr()),
            Some(text)
        );
        assert_eq!(log.spare_chunk.as_ref().map(Vec::as_ptr), Some(chunk));
    }

    #[test]
    fn an_event_is_kept_in_84_bytes_beside_its_texts() {
        // The point of the layout: see the module's documentation.
        assert_eq!(std::mem::size_of::<StoredEvent>(), 84);
    }

    #[test]
    fn only_events_within_the_limit_and_32_bit_offsets_can_be_kept() {
        let typical = event(1, IntakeChannel::ApiKey);
        let length = text_length(&typical);
        assert!(EventLog::check_size(&typical, length).is_ok());
        let refused = EventLog::check_size(&typical, length - 1).expect_err("one byte over");
        assert_eq!(
            refused.to_string(),
            format!(
                "an event's texts take {length} bytes, more than the {} kept",
                length - 1
            )
        );
        // The offsets' bound, on lengths (4 GiB of text would take the
        // machine's memory to build): a larger limit does not lift it.
        assert!(text_length_fits(MAX_EVENT_TEXT, usize::MAX).is_ok());
        if let Some(over) = MAX_EVENT_TEXT.checked_add(1) {
            let refused = text_length_fits(over, usize::MAX).expect_err("over 32 bits");
            assert_eq!(refused.limit, MAX_EVENT_TEXT);
        }
        assert_eq!(MAX_EVENT_TEXT, 4_294_967_295);
    }

    #[test]
    fn a_recorded_uuid_is_refused_and_leaves_the_log_as_it_was() {
        let mut log = EventLog::default();
        let first = event(1, IntakeChannel::ApiKey);
        assert!(log.push_new(&first));
        let mut again = event(2, IntakeChannel::ApiKey);
        again.event_uuid = first.event_uuid;
        assert!(!log.push_new(&again));
        assert_eq!(log.len(), 1);
        assert_eq!(log.texts[0].len(), text_length(&first), "no text kept");
        assert_eq!(log.find(&first.event_uuid), Some(first.clone()));
        assert_eq!(log.range(0, 5), [first]);
    }

    #[test]
    fn events_are_found_by_uuid_and_read_in_order_across_chunks() {
        let mut log = EventLog::default();
        let count = CHUNK * 2 + 3;
        for n in 0..count {
            let n = u128::try_from(n).expect("small");
            assert!(log.push_new(&event(n, IntakeChannel::ApiKey)));
        }
        assert_eq!(log.len(), count);
        assert!(log.contains(&Uuid::from_u128(0)));
        assert!(!log.contains(&Uuid::from_u128(u128::MAX)));
        let last = Uuid::from_u128(u128::try_from(count - 1).expect("small"));
        assert_eq!(log.find(&last).map(|e| e.event_uuid), Some(last));
        assert_eq!(log.find(&Uuid::from_u128(u128::MAX)), None);
        // A range across the chunks' boundary, then one past the end.
        let around = log.range(CHUNK - 1, CHUNK + 1);
        let uuids: Vec<u128> = around.iter().map(|e| e.event_uuid.as_u128()).collect();
        let boundary = u128::try_from(CHUNK).expect("small");
        assert_eq!(uuids, [boundary - 1, boundary]);
        assert_eq!(log.range(count - 1, count + 5).len(), 1);
        assert!(log.range(count, count + 5).is_empty());
    }
}
