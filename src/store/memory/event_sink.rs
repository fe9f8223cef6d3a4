//! [`EventSink`] and [`EventFeed`] in memory: the events in a compact log
//! ([`super::event_log`]) and the idempotency claims, under one lock.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use time::OffsetDateTime;
use uuid::Uuid;

use super::event_log::{self, EventLog, Reserve};
use super::{Budget, lock};
use crate::account::AccountId;
use crate::records::event::{
    EventSubmission, IdempotencyClaim, IdempotencyScope, RecordOutcome, RecordedEvent,
};
use crate::store::EventSink;
use crate::store::error::StoreError;
use crate::store::feed::position;
use crate::store::feed::{EventFeed, FeedCursor, FeedPage};

struct Claim {
    fingerprint: [u8; 32],
    expires_at: OffsetDateTime,
    event_uuids: Vec<Uuid>,
    batch_uuid: Option<Uuid>,
}

impl Claim {
    /// The answer to `claim` of the same key while this one holds.
    fn outcome_for(&self, claim: &IdempotencyClaim) -> RecordOutcome {
        if self.fingerprint == claim.fingerprint {
            RecordOutcome::Replayed {
                event_uuids: self.event_uuids.clone(),
                batch_uuid: self.batch_uuid,
            }
        } else {
            RecordOutcome::KeyReused
        }
    }
}

#[derive(Default)]
struct EventState {
    /// The events in the order they were recorded: the feed. An event's
    /// position is its index; a cursor is how many have been read.
    events: EventLog,
    /// Claims by account, credential and key.
    claims: HashMap<(AccountId, IdempotencyScope, String), Claim>,
}

/// The feed in memory: events are recorded under the lock, so the order
/// they were recorded in is the order they became visible.
#[async_trait]
impl EventFeed for MemoryEventSink {
    async fn read_after(&self, cursor: &FeedCursor, limit: usize) -> Result<FeedPage, StoreError> {
        let state = lock(&self.state);
        let (start, end, next) = feed_page(cursor, limit, state.events.len())?;
        Ok(FeedPage::new(state.events.range(start, end), next))
    }

    async fn skip_after(
        &self,
        cursor: &FeedCursor,
        limit: usize,
    ) -> Result<(FeedCursor, usize), StoreError> {
        let recorded = lock(&self.state).events.len();
        let (start, end, next) = feed_page(cursor, limit, recorded)?;
        Ok((next, end - start))
    }
}

/// The positions of the page of at most `limit` events after `cursor`,
/// `recorded` being recorded, and the cursor after it.
fn feed_page(
    cursor: &FeedCursor,
    limit: usize,
    recorded: usize,
) -> Result<(usize, usize, FeedCursor), StoreError> {
    let start = usize::try_from(position(cursor, "mem")?).unwrap_or(usize::MAX);
    let start = start.min(recorded);
    let end = start.saturating_add(limit).min(recorded);
    let next = if end == start {
        cursor.clone()
    } else {
        FeedCursor::new(format!("mem:{end}"))
    };
    Ok((start, end, next))
}

/// [`EventSink`] in memory.
pub struct MemoryEventSink {
    state: Mutex<EventState>,
    /// The most bytes of text (its short texts, the payload's JSON and the
    /// client's id) the sink keeps for one event.
    max_event_text: usize,
}

/// Records `submission` in `state`, as [`EventSink::record`] promises.
fn record_locked(
    state: &mut EventState,
    submission: &EventSubmission,
) -> Result<RecordOutcome, StoreError> {
    if let Some(claim) = &submission.idempotency {
        let id = (claim.account_id, claim.scope.clone(), claim.key.clone());
        if let Some(existing) = state
            .claims
            .get(&id)
            .filter(|existing| existing.expires_at > claim.created_at)
        {
            return Ok(existing.outcome_for(claim));
        }
    }
    if let [event] = submission.events.as_slice() {
        // One event: appending it is the check.
        if !state.events.push_new(event) {
            return Err(StoreError::Duplicate { what: "event" });
        }
    } else {
        // Check every uuid before appending any: all or nothing.
        let mut seen = std::collections::HashSet::new();
        for event in &submission.events {
            if !seen.insert(event.event_uuid) || state.events.contains(&event.event_uuid) {
                return Err(StoreError::Duplicate { what: "event" });
            }
        }
        for event in &submission.events {
            let appended = state.events.push_new(event);
            debug_assert!(appended, "checked above");
        }
    }
    if let Some(claim) = &submission.idempotency {
        state.claims.insert(
            (claim.account_id, claim.scope.clone(), claim.key.clone()),
            Claim {
                fingerprint: claim.fingerprint,
                expires_at: claim.expires_at,
                event_uuids: submission.events.iter().map(|e| e.event_uuid).collect(),
                batch_uuid: submission.batch_uuid,
            },
        );
    }
    Ok(RecordOutcome::Recorded)
}

impl Default for MemoryEventSink {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
            max_event_text: event_log::MAX_EVENT_TEXT,
        }
    }
}

impl MemoryEventSink {
    /// An empty sink, which keeps events of up to 4 GiB of text (its
    /// offsets are 32-bit); an HTTP body is bounded far below that.
    pub fn new() -> Self {
        Self::default()
    }

    /// The sink keeping events of at most `bytes` of text (the offsets'
    /// 4 GiB at most, whatever `bytes` says). A larger event is refused
    /// with [`StoreError::Rejected`], and a submission holding one records
    /// nothing: for a host recording through the trait directly that bounds
    /// what one event may keep in memory.
    #[must_use]
    pub fn with_max_event_text(mut self, bytes: usize) -> Self {
        // `EventLog::check_size` applies the offsets' bound itself.
        self.max_event_text = bytes;
        self
    }

    /// How many events are recorded.
    pub fn len(&self) -> usize {
        lock(&self.state).events.len()
    }

    /// Whether no event is recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[async_trait]
impl EventSink for MemoryEventSink {
    async fn record(&self, submission: &EventSubmission) -> Result<RecordOutcome, StoreError> {
        for event in &submission.events {
            EventLog::check_size(event, self.max_event_text)
                .map_err(|error| StoreError::rejected("record events", error))?;
        }
        let mut state = lock(&self.state);
        let outcome = record_locked(&mut state, submission);
        let wanted = state.events.reserve_wanted();
        drop(state);
        if let Some(wanted) = wanted {
            // The log's next block and chunk, their pages faulted in here,
            // where no other request waits for it (`fresh_pages`).
            let reserve = Reserve::touched(wanted);
            lock(&self.state).events.stock(reserve);
        }
        outcome
    }

    async fn check_claim(
        &self,
        claim: &IdempotencyClaim,
    ) -> Result<Option<RecordOutcome>, StoreError> {
        let state = lock(&self.state);
        let id = (claim.account_id, claim.scope.clone(), claim.key.clone());
        Ok(state
            .claims
            .get(&id)
            .filter(|existing| existing.expires_at > claim.created_at)
            .map(|existing| existing.outcome_for(claim)))
    }

    async fn find_event(&self, event_uuid: Uuid) -> Result<Option<RecordedEvent>, StoreError> {
        Ok(lock(&self.state).events.find(&event_uuid))
    }

    async fn purge_expired_claims(
        &self,
        cutoff: OffsetDateTime,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let mut budget = Budget(limit);
        lock(&self.state)
            .claims
            .retain(|_, claim| !budget.spend(claim.expires_at < cutoff));
        Ok(limit - budget.0)
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;
    use crate::records::event::{EventPayload, IntakeChannel, RecordedEvent};

    /// A submission of one conversion `n` whose payload takes about
    /// `bytes` bytes.
    fn submission(n: u128, bytes: usize) -> EventSubmission {
        let filler = "x".repeat(bytes);
        EventSubmission {
            events: vec![RecordedEvent {
                event_uuid: Uuid::from_u128(n),
                account_id: AccountId(Uuid::from_u128(7)),
                received_at: datetime!(2026-03-01 12:00:00 UTC),
                event_type: "CONVERSION".to_owned(),
                event_family: "CDP".to_owned(),
                conversion_identifier: "signup".to_owned(),
                email: "ana@example.com".to_owned(),
                payload: EventPayload::from_value(&serde_json::json!({ "filler": filler })),
                channel: IntakeChannel::ApiKey,
            }],
            batch_uuid: None,
            idempotency: None,
        }
    }

    /// Past half a block and half a chunk, a `record` call stocks the log's
    /// reserve (after it let go of the lock), and every event reads back.
    #[tokio::test]
    async fn recording_past_half_a_block_and_a_chunk_stocks_the_reserve() {
        let sink = MemoryEventSink::new();
        sink.record(&submission(0, 10)).await.expect("recorded");
        assert_eq!(lock(&sink.state).events.spares(), (false, false));
        // 600 KiB of text in one event: past half a block.
        sink.record(&submission(1, 600 << 10))
            .await
            .expect("recorded");
        assert_eq!(lock(&sink.state).events.spares(), (true, false));
        for n in 2..=2100 {
            sink.record(&submission(n, 10)).await.expect("recorded");
        }
        assert_eq!(lock(&sink.state).events.spares(), (true, true));
        assert_eq!(sink.len(), 2101);
        let read = sink.find_event(Uuid::from_u128(2100)).await.expect("read");
        assert_eq!(read, Some(submission(2100, 10).events.remove(0)));
        // A duplicate is still refused, the reserve untouched.
        assert!(matches!(
            sink.record(&submission(5, 10)).await,
            Err(StoreError::Duplicate { what: "event" })
        ));
    }
}
