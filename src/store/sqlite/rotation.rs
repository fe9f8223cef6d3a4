//! The rotation of a refresh token, written by the writer's thread inside
//! a group of events ([`super::event_writer`]).
//!
//! Why there and not on sqlx's writer connection like the other token
//! writes: a refresh is the token write that comes during a flood of
//! events, and a write of its own made the writer of events wait. Its
//! `BEGIN IMMEDIATE` transaction took the write lock for five statements,
//! each a trip to sqlx's connection thread and back to a tokio task queued
//! behind the flood's requests, then its own disk flush. Measured with the
//! intake bench on SQLite: 40 refreshes a second (the bench's refresher)
//! cost the events 10% of their rate (72% of the memory store without it,
//! 61 to 64% with it). In a group the rotation's statements run one after
//! the other on the thread that owns the connection, and it shares the
//! group's flush.

use rusqlite::{Connection, OptionalExtension as _, params};
use time::OffsetDateTime;
use tokio::sync::oneshot;

use crate::records::tokens::{AccessTokenRecord, RefreshTokenRecord};
use crate::secret::SecretHash;
use crate::store::Rotation;
use crate::store::error::StoreError;
use crate::store::sql::records::rotation_refused_by;
use crate::store::sql::{malformed, sqlite_refuses_data};

use super::columns::{from_micros, micros, opt_micros, uuid_text};
use super::connection::{is_unique_violation, sqlite_code};

/// What rotating a refresh token does, named in its errors.
pub(super) const ROTATE: &str = "rotate a refresh token";

/// A [`crate::TokenStore::rotate_refresh_token`] call waiting for the
/// COMMIT of its group.
pub(super) struct RotationJob {
    /// The hash of the refresh token presented.
    pub(super) old: SecretHash,
    /// The token that replaces it.
    pub(super) successor: RefreshTokenRecord,
    /// The access token issued with it.
    pub(super) access: AccessTokenRecord,
    /// When the rotation happens.
    pub(super) at: OffsetDateTime,
    /// Where the outcome goes, once committed.
    pub(super) reply: oneshot::Sender<Result<Rotation, StoreError>>,
}

/// Rotates `job`'s token on `connection`, which is inside a write
/// transaction (holding SQLite's write lock since its `BEGIN IMMEDIATE`,
/// so that of any number of rotations of one token only one can see it
/// active) that the caller commits, or rolls back on `Err`: the old token
/// is retired and both new tokens stored together, or nothing is.
pub(super) fn rotate_in(
    connection: &Connection,
    job: &RotationJob,
) -> Result<Rotation, StoreError> {
    let mut current = connection
        .prepare_cached(
            "SELECT r.rotated_at, r.successor,
                    (g.id IS NULL OR g.revoked_at IS NOT NULL) AS revoked
             FROM refresh_tokens r LEFT JOIN grants g ON g.id = r.grant_id
             WHERE r.hash = ?1",
        )
        .map_err(failed)?;
    let row = current
        .query_row(params![job.old.as_bytes().as_slice()], |row| {
            Ok((
                row.get::<_, Option<i64>>(0)?,
                row.get::<_, Option<Vec<u8>>>(1)?,
                row.get::<_, bool>(2)?,
            ))
        })
        .optional()
        .map_err(failed)?;
    let Some((rotated_at, successor, revoked)) = row else {
        return Ok(Rotation::NotFound);
    };
    let rotated_at = rotated_at
        .map(|micros| from_micros(micros).ok_or_else(|| malformed(ROTATE, "rotated_at")))
        .transpose()?;
    if let Some(refused) = rotation_refused_by(revoked, rotated_at, successor, ROTATE)? {
        return Ok(refused);
    }
    let at = micros(job.at)?;
    let old = job.old.as_bytes().as_slice();
    connection
        .prepare_cached("UPDATE refresh_tokens SET rotated_at = ?1, successor = ?2 WHERE hash = ?3")
        .and_then(|mut statement| {
            statement.execute(params![at, job.successor.hash.as_bytes().as_slice(), old])
        })
        .map_err(failed)?;
    connection
        .prepare_cached(
            "UPDATE grants SET last_refreshed_at = ?1
             WHERE id = (SELECT grant_id FROM refresh_tokens WHERE hash = ?2)",
        )
        .and_then(|mut statement| statement.execute(params![at, old]))
        .map_err(failed)?;
    insert_refresh(connection, &job.successor)?;
    insert_access(connection, &job.access)?;
    Ok(Rotation::Rotated)
}

/// Inserts the successor, active.
fn insert_refresh(connection: &Connection, token: &RefreshTokenRecord) -> Result<(), StoreError> {
    let mut statement = connection
        .prepare_cached(
            "INSERT INTO refresh_tokens
                 (hash, grant_id, client_id, account_id, issued_at, expires_at, predecessor)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .map_err(failed)?;
    statement
        .execute(params![
            token.hash.as_bytes().as_slice(),
            uuid_text(token.grant_id.0),
            token.client_id.as_str(),
            uuid_text(token.account_id.0),
            micros(token.issued_at)?,
            opt_micros(token.expires_at)?,
            token
                .predecessor
                .as_ref()
                .map(|hash| hash.as_bytes().as_slice()),
        ])
        .map_err(|error| insert_failed(error, "refresh token"))?;
    Ok(())
}

/// Inserts the access token issued with the successor.
fn insert_access(connection: &Connection, token: &AccessTokenRecord) -> Result<(), StoreError> {
    let mut statement = connection
        .prepare_cached(
            "INSERT INTO access_tokens
                 (hash, grant_id, client_id, account_id, issued_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .map_err(failed)?;
    statement
        .execute(params![
            token.hash.as_bytes().as_slice(),
            uuid_text(token.grant_id.0),
            token.client_id.as_str(),
            uuid_text(token.account_id.0),
            micros(token.issued_at)?,
            micros(token.expires_at)?,
        ])
        .map_err(|error| insert_failed(error, "access token"))?;
    Ok(())
}

/// A failed statement of a rotation: data SQLite refused is
/// [`StoreError::Rejected`], anything else [`StoreError::Backend`].
pub(super) fn failed(error: rusqlite::Error) -> StoreError {
    match sqlite_code(&error) {
        Some(code) if sqlite_refuses_data(code) => StoreError::rejected(ROTATE, error),
        _ => StoreError::backend(ROTATE, error),
    }
}

/// A failed insert of a new token: a hash already stored is
/// [`StoreError::Duplicate`] (as sqlx's inserts of the other token writes
/// answer it); otherwise as [`failed`].
fn insert_failed(error: rusqlite::Error, what: &'static str) -> StoreError {
    if is_unique_violation(&error) {
        StoreError::Duplicate { what }
    } else {
        failed(error)
    }
}
