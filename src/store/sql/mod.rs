//! What the SQLite and PostgreSQL stores share: turning sqlx errors into
//! [`StoreError`]s, running a statement that inserts or finds one row, the
//! batched purge loop, and the shape of a migration. Records are put
//! together from rows in [`records`] (webhooks and their deliveries in
//! [`webhook_records`]), once for both databases; the queue of the
//! group-commit writer is in [`group_commit`]; PostgreSQL cuts a
//! dispatched page into statements of bounded size in `page_runs`.
//!
//! Only what is the same in both dialects is here: each store keeps its
//! own SQL, its own migrations and the way it takes locks.

pub(crate) mod group_commit;
#[cfg(feature = "postgres")]
pub(crate) mod page_runs;
pub(crate) mod records;
pub(crate) mod webhook_records;

use sqlx::Database;
use sqlx::query::Query;

use crate::store::error::StoreError;

/// A stored value that does not decode into its record field.
#[derive(Debug, thiserror::Error)]
#[error("the stored {column} is malformed")]
struct MalformedColumn {
    /// The column's name.
    column: &'static str,
}

/// Maps a failed query: data the database refused is
/// [`StoreError::Rejected`], anything else [`StoreError::Backend`].
pub(crate) fn backend(action: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |error| {
        if is_data_error(&error) {
            StoreError::rejected(action, error)
        } else {
            StoreError::backend(action, error)
        }
    }
}

/// Maps a failed insert: a unique violation is [`StoreError::Duplicate`],
/// data the database refused [`StoreError::Rejected`], anything else
/// [`StoreError::Backend`].
pub(crate) fn insert_failed(
    what: &'static str,
    action: &'static str,
) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |error| {
        if is_unique_violation(&error) {
            StoreError::Duplicate { what }
        } else {
            backend(action)(error)
        }
    }
}

/// Whether a submission failed on its own data (a duplicate uuid, a value
/// the database refuses), so that its neighbours in a group may still be
/// recorded; any other failure is the connection's or the database's.
pub(crate) fn fails_on_data(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::Duplicate { .. } | StoreError::Rejected { .. }
    )
}

/// Whether a store operation failed because its connection was lost (the
/// server closed it, a backend was terminated, the socket broke, or a
/// write got no answer within its time limit, [`TimedOut`]): the same
/// operation may then succeed on a fresh connection. A pool that could not
/// give a connection in time is not one: the database is down or busy, and
/// a retry would only make the caller wait longer for its 503.
#[cfg(feature = "postgres")]
pub(crate) fn lost_connection(error: &StoreError) -> bool {
    let StoreError::Backend { source, .. } = error else {
        return false;
    };
    if source.is::<TimedOut>() {
        // No answer in time: the connection is given up as lost.
        return true;
    }
    match source.downcast_ref::<sqlx::Error>() {
        Some(sqlx::Error::Io(_) | sqlx::Error::Protocol(_)) => true,
        Some(sqlx::Error::Database(db)) => db.code().is_some_and(|code| ends_the_session(&code)),
        _ => false,
    }
}

/// Whether a PostgreSQL SQLSTATE says the session is gone: class 08
/// (connection exception); 57P01 to 57P03 (the server is shutting down or
/// terminated this backend); 25P03 (it ended the session of a transaction
/// idle past `idle_in_transaction_session_timeout`, a write's time limit).
#[cfg(feature = "postgres")]
fn ends_the_session(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "25P03")
}

/// Whether the database refused a statement because of the values in it,
/// so that running it again cannot succeed: PostgreSQL's SQLSTATE class 22
/// (data exception: a U+0000 in text, a value out of range) and
/// the integrity violations other than uniqueness (class 23); SQLite's
/// `SQLITE_TOOBIG`, `SQLITE_MISMATCH` and constraint failures other than
/// uniqueness. A connection lost, a timeout or a full disk is not one.
fn is_data_error(error: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = error else {
        return false;
    };
    match db.kind() {
        sqlx::error::ErrorKind::UniqueViolation => false,
        sqlx::error::ErrorKind::ForeignKeyViolation
        | sqlx::error::ErrorKind::NotNullViolation
        | sqlx::error::ErrorKind::CheckViolation => true,
        _ => db.code().is_some_and(|code| is_data_error_code(&code)),
    }
}

/// Whether a database's error code names a refusal of the data: a
/// five-character SQLSTATE (PostgreSQL) of class 22 or 23, or an SQLite
/// extended result code whose primary code is `SQLITE_TOOBIG` (18),
/// `SQLITE_CONSTRAINT` (19) or `SQLITE_MISMATCH` (20).
fn is_data_error_code(code: &str) -> bool {
    // A SQLSTATE is always five characters ("22021", "22P05", "23505").
    if code.len() == 5 {
        return code.starts_with("22") || (code.starts_with("23") && code != "23505");
    }
    // SQLite's extended codes have at most four digits; the low byte is the
    // primary code.
    code.parse::<i32>().is_ok_and(sqlite_refuses_data)
}

/// Whether an SQLite extended result code names a refusal of the data: its
/// primary code (the low byte) is `SQLITE_TOOBIG` (18), `SQLITE_CONSTRAINT`
/// (19) or `SQLITE_MISMATCH` (20).
pub(crate) fn sqlite_refuses_data(extended: i32) -> bool {
    matches!(extended & 0xff, 18..=20)
}

/// Whether the database refused a write because of a unique index.
fn is_unique_violation(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.is_unique_violation())
}

/// A database that did not answer in time: a readiness check, or an
/// attempt at a write past its time limit.
#[derive(Debug, thiserror::Error)]
#[error("the database did not answer in time")]
pub(crate) struct TimedOut;

/// A malformed-column failure while reading `action`.
pub(crate) fn malformed(action: &'static str, column: &'static str) -> StoreError {
    StoreError::backend(action, MalformedColumn { column })
}

/// A schema migration: applied once, in order of `version`, by the store
/// that ships it.
pub(crate) struct Migration {
    /// Its number, recorded in `schema_version` once applied.
    pub(crate) version: i64,
    /// The statements.
    pub(crate) sql: &'static str,
}

/// One row, and what the caller was doing, to name in any failure. Each
/// store implements [`RecordColumns`] for it on its own row type.
pub(crate) struct Columns<R> {
    /// The row.
    row: R,
    /// What the caller was doing.
    pub(crate) action: &'static str,
}

impl<R: sqlx::Row> Columns<R> {
    /// `row`, read on behalf of `action`.
    pub(crate) fn new(row: R, action: &'static str) -> Self {
        Self { row, action }
    }

    /// The column as sqlx decodes it.
    pub(crate) fn get<'r, T>(&'r self, column: &'static str) -> Result<T, StoreError>
    where
        T: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        &'static str: sqlx::ColumnIndex<R>,
    {
        self.row.try_get(column).map_err(backend(self.action))
    }

    /// A value from the JSON text stored in `column` (both stores keep JSON
    /// as text): text that is not that value's JSON is a malformed row.
    pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(
        &self,
        column: &'static str,
    ) -> Result<T, StoreError>
    where
        String: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        &'static str: sqlx::ColumnIndex<R>,
    {
        let text: String = self.get(column)?;
        serde_json::from_str(&text).map_err(|_| malformed(self.action, column))
    }
}

/// A statement of `DB` with its arguments bound.
pub(crate) type Statement<'q, DB> = Query<'q, DB, <DB as Database>::Arguments<'q>>;

/// Runs `statement`, which inserts one `what` or more: a unique violation
/// is [`StoreError::Duplicate`].
pub(crate) async fn insert_row<'c, 'q, DB, E>(
    executor: E,
    statement: Statement<'q, DB>,
    what: &'static str,
    action: &'static str,
) -> Result<(), StoreError>
where
    DB: Database,
    E: sqlx::Executor<'c, Database = DB>,
    <DB as Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
{
    statement
        .execute(executor)
        .await
        .map_err(insert_failed(what, action))?;
    Ok(())
}

/// Runs `statement` and puts the row it finds, if any, together with
/// `record`.
pub(crate) async fn find_row<'c, 'q, DB, E, T>(
    executor: E,
    statement: Statement<'q, DB>,
    action: &'static str,
    record: impl FnOnce(&Columns<DB::Row>) -> Result<T, StoreError>,
) -> Result<Option<T>, StoreError>
where
    DB: Database,
    E: sqlx::Executor<'c, Database = DB>,
    <DB as Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
{
    statement
        .fetch_optional(executor)
        .await
        .map_err(backend(action))?
        .map(|row| record(&Columns::new(row, action)))
        .transpose()
}

/// The count of rows a statement changed, which sqlx reports on each
/// database's own result type.
pub(crate) trait RowsAffected {
    /// How many rows the statement inserted, updated or deleted.
    fn rows_affected(&self) -> u64;
}

#[cfg(feature = "sqlite")]
impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
    fn rows_affected(&self) -> u64 {
        self.rows_affected()
    }
}

#[cfg(feature = "postgres")]
impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows_affected(&self) -> u64 {
        self.rows_affected()
    }
}

/// Runs each of the purge `statements` in turn (the first parameter the
/// cutoff, the second how many rows it may still delete) until `limit`
/// rows are deleted in all; returns how many were.
///
/// Each statement is a transaction of its own: locks are held one short
/// statement at a time, never for the whole purge.
pub(crate) async fn purge<'c, DB, E, C>(
    executor: E,
    statements: &[&'static str],
    cutoff: C,
    limit: usize,
    action: &'static str,
) -> Result<usize, StoreError>
where
    DB: Database,
    DB::QueryResult: RowsAffected,
    E: sqlx::Executor<'c, Database = DB> + Copy,
    C: sqlx::Encode<'static, DB> + sqlx::Type<DB> + Copy + Send + 'static,
    i64: sqlx::Encode<'static, DB> + sqlx::Type<DB>,
    <DB as Database>::Arguments<'static>: sqlx::IntoArguments<'static, DB>,
{
    let mut deleted = 0;
    for statement in statements {
        let left = limit - deleted;
        if left == 0 {
            break;
        }
        let done = sqlx::query(statement)
            .bind(cutoff)
            .bind(i64::try_from(left).unwrap_or(i64::MAX))
            .execute(executor)
            .await
            .map_err(backend(action))?;
        deleted += usize::try_from(done.rows_affected())
            .unwrap_or(left)
            .min(left);
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "postgres")]
    #[test]
    fn a_lost_session_is_told_from_a_failed_statement() {
        for code in ["08006", "08003", "57P01", "57P02", "57P03", "25P03"] {
            assert!(ends_the_session(code), "{code} ends the session");
        }
        for code in ["40001", "40P01", "53100", "23505", "22021", "57014"] {
            assert!(!ends_the_session(code), "{code} leaves the session");
        }
        // A write past its time limit is given up as lost; a pool with no
        // connection to give is not a lost one.
        assert!(lost_connection(&StoreError::backend("write", TimedOut)));
        assert!(!lost_connection(&StoreError::backend(
            "write",
            sqlx::Error::PoolTimedOut
        )));
        assert!(!lost_connection(&StoreError::Duplicate { what: "event" }));
    }

    #[test]
    fn data_refusals_are_told_from_outages_by_their_codes() {
        // PostgreSQL: a U+0000 in text, a NOT NULL or CHECK.
        for code in ["22021", "22P05", "22001", "23502", "23514"] {
            assert!(is_data_error_code(code), "{code} refuses the data");
        }
        // PostgreSQL: uniqueness, a dropped connection, a serialisation
        // failure, a shutdown, a full disk.
        for code in ["23505", "08006", "40001", "57P01", "53100"] {
            assert!(!is_data_error_code(code), "{code} is not about the data");
        }
        // SQLite: TOOBIG, CONSTRAINT_CHECK (275), MISMATCH; against BUSY,
        // IOERR_FSYNC (1034), FULL.
        for code in ["18", "275", "20"] {
            assert!(is_data_error_code(code), "{code} refuses the data");
        }
        for code in ["5", "1034", "13"] {
            assert!(!is_data_error_code(code), "{code} is not about the data");
        }
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
