//! The queue of a group-commit writer, shared by both SQL stores: `record`
//! calls queue a [`Job`] and wait; the store's writer task takes whatever
//! has queued, stores it in one transaction, and [`answer`]s each job after
//! the COMMIT.

use tokio::sync::{mpsc, oneshot};

use crate::records::event::{EventSubmission, RecordOutcome};
use crate::store::error::StoreError;

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

/// Hands each job the same `error`, emptying `jobs`: nothing of theirs was
/// recorded.
pub(crate) fn answer_error(jobs: &mut Vec<Job>, error: &StoreError) {
    let outcomes = vec![Err(error.clone()); jobs.len()];
    answer(jobs, outcomes);
}

/// The group-commit writer task has stopped (its runtime shut down).
#[derive(Debug, thiserror::Error)]
#[error("the group-commit writer has stopped")]
struct GroupWriterGone;
