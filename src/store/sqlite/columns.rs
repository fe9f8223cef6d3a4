//! How the SQLite store keeps values in SQLite's few column types: uuids
//! as hyphenated text, instants as integer microseconds since the Unix
//! epoch, hashes as BLOBs, lists and JSON values as JSON text; and reading
//! them back into records.

use sqlx::sqlite::SqliteRow;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::records::event::EventPayload;
use crate::store::error::StoreError;
use crate::store::sql::records::RecordColumns;
use crate::store::sql::{self, malformed};

/// An instant as stored: microseconds since the Unix epoch.
pub(super) fn micros(at: OffsetDateTime) -> Result<i64, StoreError> {
    i64::try_from((at - OffsetDateTime::UNIX_EPOCH).whole_microseconds())
        .map_err(|error| StoreError::backend("encode an instant", error))
}

/// An optional instant as stored.
pub(super) fn opt_micros(at: Option<OffsetDateTime>) -> Result<Option<i64>, StoreError> {
    at.map(micros).transpose()
}

/// A uuid as stored: hyphenated text.
pub(super) fn uuid_text(id: Uuid) -> String {
    id.hyphenated().to_string()
}

/// A list of strings as stored: a JSON array in a TEXT column.
pub(super) fn json_text<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|error| StoreError::backend("encode a list", error))
}

/// An instant read back from microseconds since the Unix epoch, if
/// `OffsetDateTime` can hold it.
pub(super) fn from_micros(micros: i64) -> Option<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(micros) * 1000).ok()
}

/// A row of SQLite, whose columns hold uuids as hyphenated text, instants
/// as integer microseconds, hashes as BLOBs, and lists and JSON values as
/// JSON text.
pub(super) type Columns = sql::Columns<SqliteRow>;

/// Reads SQLite's stored forms the same way from sqlx's rows ([`Columns`])
/// and from the writer of events' rusqlite rows ([`RowColumns`]): each has
/// an `action`, `get` and `parse_json`.
macro_rules! record_columns {
    ($row:ty) => {
        impl RecordColumns for $row {
            fn action(&self) -> &'static str {
                self.action
            }

            fn uuid(&self, column: &'static str) -> Result<Uuid, StoreError> {
                parse_uuid(self.action, column, &self.get::<String>(column)?)
            }

            fn optional_uuid(&self, column: &'static str) -> Result<Option<Uuid>, StoreError> {
                self.get::<Option<String>>(column)?
                    .map(|text| parse_uuid(self.action, column, &text))
                    .transpose()
            }

            fn uuids(&self, column: &'static str) -> Result<Vec<Uuid>, StoreError> {
                self.parse_json(column)
            }

            fn time(&self, column: &'static str) -> Result<OffsetDateTime, StoreError> {
                instant(self.action, column, self.get(column)?)
            }

            fn optional_time(
                &self,
                column: &'static str,
            ) -> Result<Option<OffsetDateTime>, StoreError> {
                self.get::<Option<i64>>(column)?
                    .map(|micros| instant(self.action, column, micros))
                    .transpose()
            }

            fn text(&self, column: &'static str) -> Result<String, StoreError> {
                self.get(column)
            }

            fn optional_text(&self, column: &'static str) -> Result<Option<String>, StoreError> {
                self.get(column)
            }

            fn flag(&self, column: &'static str) -> Result<bool, StoreError> {
                self.get(column)
            }

            fn integer(&self, column: &'static str) -> Result<i64, StoreError> {
                self.get(column)
            }

            fn optional_integer(&self, column: &'static str) -> Result<Option<i64>, StoreError> {
                self.get(column)
            }

            fn bytes(&self, column: &'static str) -> Result<Vec<u8>, StoreError> {
                self.get(column)
            }

            fn optional_bytes(&self, column: &'static str) -> Result<Option<Vec<u8>>, StoreError> {
                self.get(column)
            }

            fn strings(&self, column: &'static str) -> Result<Vec<String>, StoreError> {
                self.parse_json(column)
            }

            fn json(&self, column: &'static str) -> Result<serde_json::Value, StoreError> {
                self.parse_json(column)
            }

            fn payload(&self, column: &'static str) -> Result<EventPayload, StoreError> {
                self.parse_json(column).map(EventPayload::from_raw)
            }
        }
    };
}

record_columns!(Columns);
record_columns!(RowColumns<'_>);

/// A row read through the writer of events' own connection (rusqlite),
/// stored as [`Columns`] says.
pub(super) struct RowColumns<'r> {
    /// The row.
    row: &'r rusqlite::Row<'r>,
    /// What the caller was doing.
    action: &'static str,
}

impl<'r> RowColumns<'r> {
    /// `row`, read on behalf of `action`.
    pub(super) fn new(row: &'r rusqlite::Row<'r>, action: &'static str) -> Self {
        Self { row, action }
    }

    /// The column as rusqlite converts it.
    pub(super) fn get<T: rusqlite::types::FromSql>(
        &self,
        column: &'static str,
    ) -> Result<T, StoreError> {
        self.row
            .get(column)
            .map_err(|error| StoreError::backend(self.action, error))
    }

    /// A value parsed from the JSON text stored in `column`.
    fn parse_json<T: serde::de::DeserializeOwned>(
        &self,
        column: &'static str,
    ) -> Result<T, StoreError> {
        let text: String = self.get(column)?;
        serde_json::from_str(&text).map_err(|_| malformed(self.action, column))
    }
}

/// A uuid from the hyphenated text stored in `column`.
fn parse_uuid(action: &'static str, column: &'static str, text: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(text).map_err(|_| malformed(action, column))
}

/// An instant from the microseconds stored in `column`.
fn instant(
    action: &'static str,
    column: &'static str,
    micros: i64,
) -> Result<OffsetDateTime, StoreError> {
    from_micros(micros).ok_or_else(|| malformed(action, column))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_round_trip_through_microseconds() {
        let at = time::macros::datetime!(2026-03-01 12:00:00.123456 UTC);
        let stored = micros(at).unwrap();
        assert_eq!(stored, 1_772_366_400_123_456);
        assert_eq!(from_micros(stored), Some(at));
    }
}
