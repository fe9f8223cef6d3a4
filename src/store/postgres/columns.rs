//! How the PostgreSQL store reads its rows: every column has a native type
//! (UUID, TIMESTAMPTZ, BYTEA, arrays, JSON) that sqlx decodes as the value
//! itself, so each accessor is a plain typed read.

use sqlx::postgres::PgRow;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::records::event::EventPayload;
use crate::store::error::StoreError;
use crate::store::sql;
use crate::store::sql::records::RecordColumns;

/// A row of PostgreSQL, whose columns all have native types (UUID,
/// TIMESTAMPTZ, BYTEA, arrays, JSON) that sqlx decodes as the values
/// themselves.
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
        self.get(column)
    }

    fn payload(&self, column: &'static str) -> Result<EventPayload, StoreError> {
        let raw: sqlx::types::Json<Box<serde_json::value::RawValue>> = self.get(column)?;
        Ok(EventPayload::from_raw(raw.0))
    }
}
