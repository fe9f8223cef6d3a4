//! A refresh token's rotation on the writer of events' connection
//! (rusqlite), run as a [`write_task`](super::write_task) inside a group's
//! transaction. [`super::tokens`] queues it and says what it promises; this
//! file is its SQL.
//!
//! Why there: a rotation is a read and four writes under the write lock.
//! Through sqlx each statement was a trip to sqlx's thread for the
//! connection and back to a task queued behind the intake's requests on a
//! busy runtime, seven trips with `BEGIN` and `COMMIT`, all of them holding
//! the write gate, then a sync of the log of its own: under an intake flood
//! every token refresh held up the events' groups for that long. On the
//! writer's thread the statements cost no trip, and the rotation shares the
//! group's one sync.
//!
//! The group's transaction began `IMMEDIATE` and the writer holds its turn
//! at the write gate, so what the rotation reads cannot change before it
//! writes, whichever connection or process tries: of any number of callers
//! only one finds the token active. The savepoint the writer runs the task
//! in makes it all or nothing: a failed insert rolls the marks back.

use rusqlite::{Connection, OptionalExtension as _, params};
use time::OffsetDateTime;

use crate::records::tokens::{AccessTokenRecord, RefreshTokenRecord};
use crate::secret::SecretHash;
use crate::store::Rotation;
use crate::store::error::StoreError;
use crate::store::sql::records::rotation_refused;

use super::columns::{RowColumns, micros, opt_micros, uuid_text};
use super::statement_errors::{failed, insert_failed};

/// What [`rotate`] is doing, for its errors.
const ACTION: &str = "rotate a refresh token";

/// Marks the refresh token `old` rotated at `at` by `successor`, stores
/// `successor` (active) and `access`, and notes the refresh on the grant,
/// if `old` is active and its grant is not revoked; otherwise changes
/// nothing and says why, as [`crate::TokenStore::rotate_refresh_token`]
/// promises.
///
/// # Errors
/// [`StoreError::Duplicate`] if either new token's hash is stored already,
/// [`StoreError::Backend`] (or `Rejected`, for data SQLite refuses) if a
/// statement fails; the writer then rolls the task's savepoint back, the
/// old token's mark included.
pub(super) fn rotate(
    connection: &Connection,
    old: &SecretHash,
    successor: &RefreshTokenRecord,
    access: &AccessTokenRecord,
    at: OffsetDateTime,
) -> Result<Rotation, StoreError> {
    let old = old.as_bytes().as_slice();
    let found = connection
        .prepare_cached(
            "SELECT r.rotated_at, r.successor,
                    (g.id IS NULL OR g.revoked_at IS NOT NULL) AS revoked
             FROM refresh_tokens r LEFT JOIN grants g ON g.id = r.grant_id
             WHERE r.hash = ?1",
        )
        .and_then(|mut statement| {
            statement
                .query_row([old], |row| {
                    Ok(rotation_refused(&RowColumns::new(row, ACTION)))
                })
                .optional()
        })
        .map_err(failed(ACTION))?;
    let Some(refused) = found else {
        return Ok(Rotation::NotFound);
    };
    if let Some(refused) = refused? {
        return Ok(refused);
    }
    let at = micros(at)?;
    let successor_hash = successor.hash.as_bytes().as_slice();
    connection
        .prepare_cached("UPDATE refresh_tokens SET rotated_at = ?1, successor = ?2 WHERE hash = ?3")
        .and_then(|mut statement| statement.execute(params![at, successor_hash, old]))
        .map_err(failed(ACTION))?;
    connection
        .prepare_cached(
            "UPDATE grants SET last_refreshed_at = ?1
             WHERE id = (SELECT grant_id FROM refresh_tokens WHERE hash = ?2)",
        )
        .and_then(|mut statement| statement.execute(params![at, old]))
        .map_err(failed(ACTION))?;
    let (issued, expires) = (
        micros(successor.issued_at)?,
        opt_micros(successor.expires_at)?,
    );
    connection
        .prepare_cached(
            "INSERT INTO refresh_tokens
                 (hash, grant_id, client_id, account_id, issued_at, expires_at, predecessor)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .and_then(|mut statement| {
            statement.execute(params![
                successor_hash,
                uuid_text(successor.grant_id.0),
                successor.client_id.as_str(),
                uuid_text(successor.account_id.0),
                issued,
                expires,
                successor
                    .predecessor
                    .as_ref()
                    .map(|hash| hash.as_bytes().as_slice()),
            ])
        })
        .map_err(insert_failed("refresh token", ACTION))?;
    let (issued, expires) = (micros(access.issued_at)?, micros(access.expires_at)?);
    connection
        .prepare_cached(
            "INSERT INTO access_tokens
                 (hash, grant_id, client_id, account_id, issued_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .and_then(|mut statement| {
            statement.execute(params![
                access.hash.as_bytes().as_slice(),
                uuid_text(access.grant_id.0),
                access.client_id.as_str(),
                uuid_text(access.account_id.0),
                issued,
                expires,
            ])
        })
        .map_err(insert_failed("access token", ACTION))?;
    Ok(Rotation::Rotated)
}
