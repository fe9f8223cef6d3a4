//! What a failed statement on the store's own rusqlite connections (the
//! writer of events' and the checkpointer's) is, as a [`StoreError`]: the
//! same classes as the sqlx statements' (`crate::store::sql`), so that a
//! caller cannot tell which connection ran its write.

use crate::store::error::StoreError;
use crate::store::sql::sqlite_refuses_data;

/// SQLite's extended result codes for a unique key already stored:
/// `SQLITE_CONSTRAINT_PRIMARYKEY` and `SQLITE_CONSTRAINT_UNIQUE`.
const UNIQUE_VIOLATIONS: [i32; 2] = [1555, 2067];

/// A failed statement, named by `action`: data SQLite refused (a check, a
/// trigger's `RAISE`, a value too large) is [`StoreError::Rejected`];
/// anything else [`StoreError::Backend`].
pub(super) fn failed(action: &'static str) -> impl Fn(rusqlite::Error) -> StoreError {
    move |error| match sqlite_code(&error) {
        Some(code) if sqlite_refuses_data(code) => StoreError::rejected(action, error),
        _ => StoreError::backend(action, error),
    }
}

/// A failed insert of a `what`: a key already stored is
/// [`StoreError::Duplicate`]; otherwise as [`failed`].
pub(super) fn insert_failed(
    what: &'static str,
    action: &'static str,
) -> impl Fn(rusqlite::Error) -> StoreError {
    move |error| match sqlite_code(&error) {
        Some(code) if UNIQUE_VIOLATIONS.contains(&code) => StoreError::Duplicate { what },
        _ => failed(action)(error),
    }
}

/// SQLite's extended result code of a failed statement.
fn sqlite_code(error: &rusqlite::Error) -> Option<i32> {
    match error {
        rusqlite::Error::SqliteFailure(failure, _) => Some(failure.extended_code),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use rusqlite::Connection;

    /// A connection to a fresh in-memory database with one keyed table.
    fn table() -> Connection {
        let connection = Connection::open_in_memory().unwrap();
        connection
            .execute_batch(
                "CREATE TABLE t (k INTEGER PRIMARY KEY, u TEXT UNIQUE, c INTEGER CHECK (c > 0))",
            )
            .unwrap();
        connection
            .execute("INSERT INTO t VALUES (1, 'a', 1)", [])
            .unwrap();
        connection
    }

    #[test]
    fn a_key_already_stored_is_a_duplicate_of_what_was_inserted() {
        let connection = table();
        for statement in [
            "INSERT INTO t VALUES (1, 'b', 1)",
            "INSERT INTO t VALUES (2, 'a', 1)",
        ] {
            let error = connection.execute(statement, []).unwrap_err();
            let mapped = insert_failed("row", "insert a row")(error);
            assert!(
                matches!(mapped, StoreError::Duplicate { what: "row" }),
                "{statement}: {mapped:?}"
            );
        }
    }

    #[test]
    fn refused_data_is_rejected_and_the_rest_a_backend_failure() {
        let connection = table();
        let check = connection
            .execute("INSERT INTO t VALUES (2, 'b', 0)", [])
            .unwrap_err();
        assert!(matches!(
            insert_failed("row", "insert a row")(check),
            StoreError::Rejected { .. }
        ));
        let missing = connection
            .execute("INSERT INTO nowhere VALUES (1)", [])
            .unwrap_err();
        assert!(matches!(
            insert_failed("row", "insert a row")(missing),
            StoreError::Backend { .. }
        ));
        let not_sqlite = rusqlite::Error::InvalidQuery;
        assert!(matches!(
            failed("read")(not_sqlite),
            StoreError::Backend { .. }
        ));
    }
}
