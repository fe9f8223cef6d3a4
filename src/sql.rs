//! What the SQLite and PostgreSQL stores share: turning sqlx errors into
//! [`StoreError`]s, columns back into record fields, and the queue of the
//! group-commit writer.
//!
//! A column that cannot be turned back into its field (a hash of the wrong
//! length, a channel that is not JSON) means the database was written by
//! something else or damaged; it is reported as a backend failure, never a
//! panic, and never as "not found".

use tokio::sync::{mpsc, oneshot};

use crate::{EventSubmission, IntakeChannel, RecordOutcome, SecretHash, StoreError};

/// A stored value that does not decode into its record field.
#[derive(Debug, thiserror::Error)]
#[error("the stored {column} is malformed")]
struct MalformedColumn {
    /// The column's name.
    column: &'static str,
}

/// Maps a failed query to [`StoreError::Backend`].
pub(crate) fn backend(action: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |error| StoreError::backend(action, error)
}

/// Maps a failed insert: a unique violation is [`StoreError::Duplicate`],
/// anything else [`StoreError::Backend`].
pub(crate) fn insert_failed(
    what: &'static str,
    action: &'static str,
) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |error| {
        if is_unique_violation(&error) {
            StoreError::Duplicate { what }
        } else {
            StoreError::backend(action, error)
        }
    }
}

/// Whether the database refused a write because of a unique index.
fn is_unique_violation(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.is_unique_violation())
}

/// A malformed-column failure while reading `action`.
pub(crate) fn malformed(action: &'static str, column: &'static str) -> StoreError {
    StoreError::backend(action, MalformedColumn { column })
}

/// A hash read back from a 32-byte binary column.
pub(crate) fn hash_from_column(
    bytes: Vec<u8>,
    action: &'static str,
    column: &'static str,
) -> Result<SecretHash, StoreError> {
    let bytes: [u8; 32] = bytes.try_into().map_err(|_| malformed(action, column))?;
    Ok(SecretHash::from_bytes(bytes))
}

/// An idempotency fingerprint read back from a 32-byte binary column.
pub(crate) fn fingerprint_from_column(
    bytes: Vec<u8>,
    action: &'static str,
) -> Result<[u8; 32], StoreError> {
    bytes
        .try_into()
        .map_err(|_| malformed(action, "fingerprint"))
}

/// The channel of an event as stored: its serde JSON form, so that a
/// channel added later needs no migration.
pub(crate) fn channel_to_json(channel: &IntakeChannel) -> Result<serde_json::Value, StoreError> {
    serde_json::to_value(channel)
        .map_err(|error| StoreError::backend("encode an event channel", error))
}

/// A schema migration: applied once, in order of `version`, by the store
/// that ships it.
pub(crate) struct Migration {
    /// Its number, recorded in `schema_version` once applied.
    pub(crate) version: i64,
    /// The statements.
    pub(crate) sql: &'static str,
}

/// The channel of an event read back from its JSON form.
pub(crate) fn channel_from_json(
    value: serde_json::Value,
    action: &'static str,
) -> Result<IntakeChannel, StoreError> {
    serde_json::from_value(value).map_err(|_| malformed(action, "events.channel"))
}

/// What recording a submission does, named in its errors.
pub(crate) const RECORD: &str = "record events";

/// One `record` call waiting for the COMMIT of its group.
pub(crate) struct Job {
    /// What to record.
    pub(crate) submission: EventSubmission,
    /// Where the outcome goes, once committed.
    pub(crate) reply: oneshot::Sender<Result<RecordOutcome, StoreError>>,
}

/// The queue to a group-commit writer: a task that takes whatever `record`
/// calls have queued, stores them in one transaction and answers each after
/// the COMMIT, while the next group queues. Many writers then share one
/// disk flush instead of waiting for one each.
#[derive(Clone, Debug)]
pub(crate) struct GroupQueue(mpsc::Sender<Job>);

impl GroupQueue {
    /// A queue holding up to `capacity` waiting calls, and its receiving
    /// end for the writer task. The writer's receive ends when the last
    /// clone of the queue is dropped.
    pub(crate) fn new(capacity: usize) -> (Self, mpsc::Receiver<Job>) {
        let (sender, receiver) = mpsc::channel(capacity.max(1));
        (Self(sender), receiver)
    }

    /// Queues `submission` and waits for the writer's answer.
    pub(crate) async fn record(
        &self,
        submission: &EventSubmission,
    ) -> Result<RecordOutcome, StoreError> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            submission: submission.clone(),
            reply,
        };
        self.0
            .send(job)
            .await
            .map_err(|_| StoreError::backend(RECORD, GroupWriterGone))?;
        answer
            .await
            .map_err(|_| StoreError::backend(RECORD, GroupWriterGone))?
    }
}

/// Hands each job its outcome, emptying `jobs`.
pub(crate) fn answer(jobs: &mut Vec<Job>, outcomes: Vec<Result<RecordOutcome, StoreError>>) {
    for (job, outcome) in jobs.drain(..).zip(outcomes) {
        // A caller that gave up waiting has dropped its receiver; the
        // submission is recorded all the same, as it would be had the
        // caller been a moment slower to give up.
        let _ = job.reply.send(outcome);
    }
}

/// The group-commit writer task has stopped (its runtime shut down).
#[derive(Debug, thiserror::Error)]
#[error("the group-commit writer has stopped")]
struct GroupWriterGone;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_of_the_wrong_length_is_a_backend_error_not_a_panic() {
        let error = hash_from_column(vec![1; 31], "read a token", "hash").unwrap_err();
        assert!(matches!(error, StoreError::Backend { .. }));
        let source = std::error::Error::source(&error).expect("source");
        assert_eq!(source.to_string(), "the stored hash is malformed");
        assert_eq!(
            hash_from_column(vec![7; 32], "read a token", "hash").unwrap(),
            SecretHash::from_bytes([7; 32])
        );
    }

    #[test]
    fn channels_round_trip_through_json() {
        let channel = IntakeChannel::Bearer {
            client_id: crate::ClientId::new("cgid_x"),
        };
        let stored = channel_to_json(&channel).unwrap();
        assert_eq!(channel_from_json(stored, "read an event").unwrap(), channel);
        assert!(matches!(
            channel_from_json(
                serde_json::json!({"kind": "carrier_pigeon"}),
                "read an event"
            ),
            Err(StoreError::Backend { .. })
        ));
    }

    #[test]
    fn failures_other_than_unique_violations_are_backend_errors() {
        let error = insert_failed("event", "record events")(sqlx::Error::PoolTimedOut);
        assert!(matches!(
            error,
            StoreError::Backend {
                action: "record events",
                ..
            }
        ));
    }
}
