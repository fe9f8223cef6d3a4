//! How the PostgreSQL store reads its rows: every column has a native type
//! (UUID, TIMESTAMPTZ, BYTEA, arrays) that sqlx decodes as the value itself,
//! so each accessor is a plain typed read, but JSON, which it keeps as
//! text (migration 10) and parses on the way out.

use sqlx::postgres::PgRow;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::records::event::EventPayload;
use crate::store::error::StoreError;
use crate::store::sql;
use crate::store::sql::records::RecordColumns;

/// A row of PostgreSQL, whose columns have native types (UUID,
/// TIMESTAMPTZ, BYTEA, arrays) that sqlx decodes as the values themselves,
/// and JSON as text.
pub(super) type Columns = sql::Columns<PgRow>;

impl RecordColumns for Columns {
    fn action(&self) -> &'static str {
        self.action
    }

    fn uuid(&self, column: &'static str) -> Result<Uuid, StoreError> {
        self.get(column)
    }

    fn optional_uuid(&self, column: &'static str) -> Result<Option<Uuid>, StoreError> {
        self.get(column)
    }

    fn uuids(&self, column: &'static str) -> Result<Vec<Uuid>, StoreError> {
        self.get(column)
    }

    fn time(&self, column: &'static str) -> Result<OffsetDateTime, StoreError> {
        self.get(column)
    }

    fn optional_time(&self, column: &'static str) -> Result<Option<OffsetDateTime>, StoreError> {
        self.get(column)
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
        self.get(column)
    }

    fn json(&self, column: &'static str) -> Result<serde_json::Value, StoreError> {
        self.parse_json(column)
    }

    fn payload(&self, column: &'static str) -> Result<EventPayload, StoreError> {
        self.parse_json(column).map(EventPayload::from_raw)
    }
}
