//! Writes other than events that ride in the writer of events' groups: the
//! webhook outbox's bookkeeping (a page dispatched, deliveries leased, an
//! attempt finished) and the tokens' writes: an access or refresh token
//! stored, a code redeemed, a refresh token rotated
//! ([`token_writes`](super::token_writes)).
//!
//! Why there: each of those writes is a short read-then-write under the
//! write lock. Through sqlx, each statement was a trip to sqlx's thread for
//! the connection (eight for an attempt), and each write a COMMIT of its own
//! with a sync of the log, taken in turn with the groups of events at the
//! write gate. Under an intake flood with one webhook registered, that
//! bookkeeping halved SQLite's rate (server/benches/intake_load/NOTES.md).
//! Run by the writer of events, a write is a few statements on the thread
//! that owns the connection, prepared once, inside the group's transaction:
//! it shares the group's one sync and waits for no turn of its own.
//!
//! Each task runs in a savepoint of its own: a task that fails is rolled
//! back alone and its caller gets the error, while the group's events and
//! other tasks are committed. Only a failure that ends the transaction
//! itself (SQLite rolls it back on some I/O errors and a full disk) fails
//! the whole group.

use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::store::error::StoreError;

/// A write the writer of events runs inside its group's transaction, then
/// answers once the group is committed (or has failed).
pub(super) trait WriteTask: Send {
    /// Does the write on `connection`, which is inside a savepoint the
    /// writer releases on `Ok` and rolls back on `Err`.
    ///
    /// # Errors
    /// Whatever the write failed with; the task then answers with it.
    fn run(&mut self, connection: &Connection) -> Result<(), StoreError>;

    /// Answers the caller: with what [`WriteTask::run`] produced if the
    /// group was committed, else with `group`'s error.
    fn answer(self: Box<Self>, group: Result<(), StoreError>);
}

/// A [`WriteTask`] made of a function, answering its result on a channel.
pub(super) struct Task<T, F> {
    /// The write; taken when it runs.
    write: Option<F>,
    /// What it produced, held until the COMMIT.
    produced: Option<Result<T, StoreError>>,
    /// Where the answer goes.
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Task<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
{
    /// The task of `write`, and where its answer arrives.
    pub(super) fn boxed(
        write: F,
    ) -> (Box<dyn WriteTask>, oneshot::Receiver<Result<T, StoreError>>) {
        let (reply, answer) = oneshot::channel();
        let task = Self {
            write: Some(write),
            produced: None,
            reply,
        };
        (Box::new(task), answer)
    }
}

impl<T, F> WriteTask for Task<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
{
    fn run(&mut self, connection: &Connection) -> Result<(), StoreError> {
        let Some(write) = self.write.take() else {
            // Run twice: a bug of the writer's, answered rather than
            // panicking on its thread.
            return Err(StoreError::backend("run a write", RunTwice));
        };
        // A write that panics fails alone, as one that returns an error:
        // the writer's thread, and with it every `record` call, goes on.
        let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| write(connection)))
            .unwrap_or_else(|_| Err(StoreError::backend("run a write", Panicked)));
        match written {
            Ok(value) => {
                self.produced = Some(Ok(value));
                Ok(())
            }
            Err(error) => {
                self.produced = Some(Err(error.clone()));
                Err(error)
            }
        }
    }

    fn answer(self: Box<Self>, group: Result<(), StoreError>) {
        let answer = match (group, self.produced) {
            (Err(error), _) => Err(error),
            (Ok(()), Some(produced)) => produced,
            (Ok(()), None) => Err(StoreError::backend("run a write", NeverRun)),
        };
        // A caller that stopped waiting has dropped its receiver; what was
        // committed stays committed.
        let _ = self.reply.send(answer);
    }
}

/// A task's write panicked; the writer rolled back what it wrote.
#[derive(Debug, thiserror::Error)]
#[error("a write task panicked")]
struct Panicked;

/// A task's write was asked to run a second time.
#[derive(Debug, thiserror::Error)]
#[error("a write task ran twice")]
struct RunTwice;

/// A task was answered as committed without having run.
#[derive(Debug, thiserror::Error)]
#[error("a write task was answered without running")]
struct NeverRun;

#[cfg(test)]
mod tests {
    use super::*;

    fn connection() -> Connection {
        Connection::open_in_memory().expect("an in-memory database")
    }

    #[test]
    fn a_committed_task_answers_what_it_produced() {
        let (mut task, mut answer) = Task::boxed(|c: &Connection| {
            let two: i64 = c
                .query_row("SELECT 1 + 1", [], |row| row.get(0))
                .map_err(|e| StoreError::backend("add", e))?;
            Ok(two)
        });
        task.run(&connection()).unwrap();
        assert!(answer.try_recv().is_err(), "no answer before the COMMIT");
        task.answer(Ok(()));
        assert_eq!(answer.try_recv().unwrap().unwrap(), 2);
    }

    #[test]
    fn a_failed_group_answers_its_error_whatever_the_task_produced() {
        let (mut task, mut answer) = Task::boxed(|_: &Connection| Ok(()));
        task.run(&connection()).unwrap();
        task.answer(Err(StoreError::backend("commit", NeverRun)));
        assert!(matches!(
            answer.try_recv().unwrap(),
            Err(StoreError::Backend {
                action: "commit",
                ..
            })
        ));
    }

    #[test]
    fn a_failed_task_answers_its_own_error() {
        let (mut task, mut answer) =
            Task::boxed(|_: &Connection| Err::<(), _>(StoreError::Duplicate { what: "x" }));
        assert!(matches!(
            task.run(&connection()),
            Err(StoreError::Duplicate { what: "x" })
        ));
        // The group committed without this task's rows.
        task.answer(Ok(()));
        assert!(matches!(
            answer.try_recv().unwrap(),
            Err(StoreError::Duplicate { what: "x" })
        ));
    }

    #[test]
    fn a_task_runs_once_and_never_answers_unrun_work_as_done() {
        let (mut task, _answer) = Task::boxed(|_: &Connection| Ok(7));
        task.run(&connection()).unwrap();
        assert!(matches!(
            task.run(&connection()),
            Err(StoreError::Backend { .. })
        ));

        let (task, mut unrun) = Task::boxed(|_: &Connection| Ok(7));
        task.answer(Ok(()));
        assert!(matches!(
            unrun.try_recv().unwrap(),
            Err(StoreError::Backend { .. })
        ));
    }
}
