//! The queue of a group-commit writer, shared by both SQL stores: `record`
//! calls queue a [`Job`] and wait; the store's writer task takes whatever
//! has queued, stores it in one transaction, and [`answer`]s each job after
//! the COMMIT.
//!
//! A writer that runs on a thread of its own (SQLite's) answers through an
//! [`Answerer`], which hands each committed group to a task on the runtime.

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
///
/// A writer may take other work beside `record` calls (`W`, which a [`Job`]
/// converts into): SQLite's writer also runs the webhook outbox's writes in
/// its groups.
pub(crate) struct GroupQueue<W = Job>(mpsc::Sender<W>);

impl<W> Clone for GroupQueue<W> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<W> std::fmt::Debug for GroupQueue<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("GroupQueue").field(&self.0).finish()
    }
}

impl<W: From<Job>> GroupQueue<W> {
    /// A queue holding up to `capacity` waiting calls, and its receiving
    /// end for the writer task. The writer's receive ends when the last
    /// clone of the queue is dropped.
    pub(crate) fn new(capacity: usize) -> (Self, mpsc::Receiver<W>) {
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
        self.send(W::from(job), RECORD).await?;
        answer
            .await
            .map_err(|_| StoreError::backend(RECORD, GroupWriterGone))?
    }

    /// How many calls wait in the queue, not yet taken by the writer.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.0.max_capacity() - self.0.capacity()
    }

    /// Queues `work`, waiting for room; `action` names the failure if the
    /// writer has stopped.
    pub(crate) async fn send(&self, work: W, action: &'static str) -> Result<(), StoreError> {
        self.0
            .send(work)
            .await
            .map_err(|_| StoreError::backend(action, GroupWriterGone))
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

/// What came of a group: each job's own outcome, all committed, or one
/// error for all of them, nothing committed.
pub(crate) type GroupOutcome = Result<Vec<Result<RecordOutcome, StoreError>>, StoreError>;

/// Answers the groups of a writer that runs on a thread outside the
/// runtime, from a task on the runtime.
///
/// Why: a `oneshot` sent from outside the runtime wakes its task through
/// the runtime's global queue, which the workers share and look at only
/// now and then; every other wake-up from outside (sqlx's SQLite thread
/// answering a token refresh's statements) then queues behind a whole
/// group's answers, up to 256 of them. From a task on the runtime, the
/// answers go to its worker's own queue, and the writer wakes the runtime
/// once a group. The jobs are also dropped there, on the runtime's threads
/// that built them, rather than on the writer's. Measured side by side (the
/// intake bench's `--baseline`, 2026-11-29): the refreshes' p99 beside an
/// SQLite flood lower in 13 of 14 rounds at 64, 256 and 1,024 connections
/// (at 256, over a run: 15.3 ms against 18.6), requests a second within
/// the noise.
#[derive(Debug)]
pub(crate) struct Answerer {
    /// The answering task's queue; `None` without a multi-thread runtime.
    /// Unbounded, yet it holds no more jobs than callers wait for answers:
    /// a job enters it only after its group's COMMIT.
    task: Option<mpsc::UnboundedSender<(Vec<Job>, GroupOutcome)>>,
}

impl Answerer {
    /// Starts the answering task on the runtime this is called from, if it
    /// is a multi-thread runtime; otherwise groups are answered on the
    /// writer's thread. A current-thread runtime runs its tasks only while
    /// some thread drives it: a store opened on one, then used from
    /// another runtime, would wait for answers that never came.
    pub(crate) fn on_current_runtime() -> Self {
        use tokio::runtime::{Handle, RuntimeFlavor};
        let task = Handle::try_current()
            .ok()
            .filter(|runtime| runtime.runtime_flavor() == RuntimeFlavor::MultiThread)
            .map(|runtime| {
                let (task, mut groups) = mpsc::unbounded_channel();
                runtime.spawn(async move {
                    while let Some((mut jobs, outcome)) = groups.recv().await {
                        answer_group(&mut jobs, outcome);
                    }
                });
                task
            });
        Self { task }
    }

    /// Answers each of `jobs` (emptying it, its capacity kept for the next
    /// group): from the task, or here if there is none or it has stopped
    /// (its runtime shut down), so that no caller is left without an answer
    /// for that reason.
    pub(crate) fn answer(&self, jobs: &mut Vec<Job>, outcome: GroupOutcome) {
        let Some(task) = &self.task else {
            return answer_group(jobs, outcome);
        };
        let mut group = Vec::with_capacity(jobs.len());
        group.append(jobs);
        if let Err(refused) = task.send((group, outcome)) {
            let (mut group, outcome) = refused.0;
            answer_group(&mut group, outcome);
        }
    }
}

/// Hands each of `jobs` its part of `outcome`, emptying `jobs`.
fn answer_group(jobs: &mut Vec<Job>, outcome: GroupOutcome) {
    match outcome {
        Ok(outcomes) => answer(jobs, outcomes),
        Err(error) => answer_error(jobs, &error),
    }
}

/// The group-commit writer task has stopped (its runtime shut down).
#[derive(Debug, thiserror::Error)]
#[error("the group-commit writer has stopped")]
pub(crate) struct GroupWriterGone;

#[cfg(test)]
mod tests {
    use tokio::sync::oneshot::error::TryRecvError;

    use super::*;

    type Reply = oneshot::Receiver<Result<RecordOutcome, StoreError>>;

    /// `count` jobs with nothing to record, and where their answers arrive.
    fn jobs(count: usize) -> (Vec<Job>, Vec<Reply>) {
        (0..count)
            .map(|_| {
                let (reply, answer) = oneshot::channel();
                let submission = EventSubmission {
                    events: Vec::new(),
                    batch_uuid: None,
                    idempotency: None,
                };
                (Job { submission, reply }, answer)
            })
            .unzip()
    }

    /// Each job's own outcome: the first recorded, the second a duplicate.
    fn recorded_then_duplicate() -> GroupOutcome {
        Ok(vec![
            Ok(RecordOutcome::Recorded),
            Err(StoreError::Duplicate { what: "event" }),
        ])
    }

    /// The answers in `replies`, each of which must have come already.
    fn answered_at_once(replies: Vec<Reply>) -> Vec<Result<RecordOutcome, StoreError>> {
        replies
            .into_iter()
            .map(|mut reply| reply.try_recv().expect("answered"))
            .collect()
    }

    /// A multi-thread runtime of one worker.
    fn one_worker() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .expect("a runtime")
    }

    fn assert_recorded_then_duplicate(answers: &[Result<RecordOutcome, StoreError>]) {
        assert!(matches!(
            answers,
            [
                Ok(RecordOutcome::Recorded),
                Err(StoreError::Duplicate { what: "event" })
            ]
        ));
    }

    #[test]
    fn without_a_runtime_a_group_is_answered_on_the_writers_thread() {
        let answerer = Answerer::on_current_runtime();
        let (mut group, replies) = jobs(2);
        let capacity = group.capacity();
        answerer.answer(&mut group, recorded_then_duplicate());
        assert!(group.is_empty());
        assert_eq!(group.capacity(), capacity, "the writer's vector is kept");
        assert_recorded_then_duplicate(&answered_at_once(replies));

        // A group that failed: each job gets the same error.
        let (mut group, replies) = jobs(3);
        answerer.answer(
            &mut group,
            Err(StoreError::backend(RECORD, GroupWriterGone)),
        );
        for mut reply in replies {
            let answer = reply.try_recv().expect("answered");
            assert!(matches!(
                answer,
                Err(StoreError::Backend { action: RECORD, .. })
            ));
        }
    }

    #[test]
    fn on_a_multi_thread_runtime_a_group_is_answered_by_a_task_there() {
        let runtime = one_worker();
        let answerer = runtime.block_on(async { Answerer::on_current_runtime() });
        // The runtime's one worker, held until released.
        let (release, held) = std::sync::mpsc::channel::<()>();
        let (busy, worker_busy) = std::sync::mpsc::channel::<()>();
        runtime.spawn(async move {
            busy.send(()).expect("the test waits");
            held.recv().expect("released");
        });
        worker_busy.recv().expect("the worker is held");
        let (mut group, mut replies) = jobs(2);
        // Answered from outside the runtime, as the writer's thread does.
        answerer.answer(&mut group, recorded_then_duplicate());
        assert!(group.is_empty());
        // Not yet: the answering task needs the worker.
        assert!(matches!(replies[0].try_recv(), Err(TryRecvError::Empty)));
        release.send(()).expect("the worker waits");
        let answers = runtime.block_on(async {
            let mut answers = Vec::new();
            for reply in replies {
                answers.push(reply.await.expect("answered"));
            }
            answers
        });
        assert_recorded_then_duplicate(&answers);
    }

    #[test]
    fn a_queue_clones_and_debug_prints_whatever_it_carries() {
        /// Work that is neither `Clone` nor `Debug`.
        struct Opaque;
        impl From<Job> for Opaque {
            fn from(_: Job) -> Self {
                Self
            }
        }
        let (queue, mut taken) = GroupQueue::<Opaque>::new(4);
        let clone = queue.clone();
        assert!(format!("{clone:?}").starts_with("GroupQueue("));
        let runtime = one_worker();
        runtime.block_on(async {
            clone.send(Opaque, RECORD).await.expect("queued");
            assert_eq!(queue.waiting(), 1, "one queue behind both handles");
            assert!(taken.recv().await.is_some());
        });
    }

    #[test]
    fn on_a_current_thread_runtime_a_group_is_answered_at_once() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let answerer = runtime.block_on(async { Answerer::on_current_runtime() });
        let (mut group, replies) = jobs(2);
        // Nothing drives the runtime now; the answers come all the same.
        answerer.answer(&mut group, recorded_then_duplicate());
        assert_recorded_then_duplicate(&answered_at_once(replies));
    }

    #[test]
    fn once_the_runtime_is_gone_a_group_is_still_answered() {
        let runtime = one_worker();
        let answerer = runtime.block_on(async { Answerer::on_current_runtime() });
        drop(runtime);
        let (mut group, replies) = jobs(2);
        answerer.answer(&mut group, recorded_then_duplicate());
        assert_recorded_then_duplicate(&answered_at_once(replies));
    }
}
