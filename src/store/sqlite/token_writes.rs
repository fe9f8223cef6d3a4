//! The tokens' writes on the writer of events' connection (rusqlite): a
//! refresh token's rotation, an authorization code's redemption, and the
//! plain writes of the authorization flow (a grant, a code issued, an
//! access or a refresh token stored, a grant revoked), each run as a
//! [`write_task`](super::write_task) inside a group's transaction.
//! [`super::tokens`] queues them and says what they promise; this file is
//! their SQL.
//!
//! Why there: a rotation is a read and four writes under the write lock,
//! a redemption a conditional update (and a read when it finds the code
//! taken) and two inserts. Through sqlx each statement was a trip to sqlx's
//! thread for the connection and back to a task queued behind the intake's
//! requests on a busy runtime (seven trips for a rotation, with `BEGIN` and
//! `COMMIT`), all of them holding the write gate, then a sync of the log of
//! its own: under an intake flood every token refresh held up the events'
//! groups for that long. On the writer's thread the statements cost no
//! trip, and each write shares the group's one sync. A grant and its first
//! code, written when a user consents, were the last of the flow's writes
//! to take the gate and a sync of their own.
//!
//! The group's transaction began `IMMEDIATE` and the writer holds its turn
//! at the write gate, so what a rotation or a redemption reads cannot change before it
//! writes, whichever connection or process tries: of any number of callers
//! only one finds the token active, or the code untaken. The savepoint the
//! writer runs the task in makes each all or nothing: a failed insert rolls
//! the marks back.

use rusqlite::{Connection, OptionalExtension as _, params};
use time::OffsetDateTime;

use crate::records::grant::{Grant, GrantId};
use crate::records::tokens::{AccessTokenRecord, CodeRecord, RefreshTokenRecord};
use crate::secret::SecretHash;
use crate::store::error::StoreError;
use crate::store::sql::records::{code_from, code_tombstone, rotation_refused};
use crate::store::{CodeTake, Rotation};

use super::columns::{RowColumns, micros, opt_micros, uuid_text};
use super::statement_errors::{failed, insert_failed};

/// What [`rotate`] is doing, for its errors.
const ROTATE: &str = "rotate a refresh token";

/// What [`redeem`] is doing, for its errors.
const REDEEM: &str = "redeem an authorization code";

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
                    Ok(rotation_refused(&RowColumns::new(row, ROTATE)))
                })
                .optional()
        })
        .map_err(failed(ROTATE))?;
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
        .map_err(failed(ROTATE))?;
    connection
        .prepare_cached(
            "UPDATE grants SET last_refreshed_at = ?1
             WHERE id = (SELECT grant_id FROM refresh_tokens WHERE hash = ?2)",
        )
        .and_then(|mut statement| statement.execute(params![at, old]))
        .map_err(failed(ROTATE))?;
    insert_refresh(connection, successor, ROTATE)?;
    insert_access(connection, access, ROTATE)?;
    Ok(Rotation::Rotated)
}

/// Marks the authorization code hashed to `hash` taken and stores `refresh`
/// (active) and `access`, if the code is stored and not taken yet: then
/// [`CodeTake::Taken`] with the code. Otherwise changes nothing and says
/// why, as [`crate::TokenStore::redeem_code`] promises.
///
/// # Errors
/// [`StoreError::Duplicate`] if either token's hash is stored already,
/// [`StoreError::Backend`] (or `Rejected`) if a statement fails; the writer
/// then rolls the task's savepoint back, the code's mark included.
pub(super) fn redeem(
    connection: &Connection,
    hash: &SecretHash,
    refresh: &RefreshTokenRecord,
    access: &AccessTokenRecord,
) -> Result<CodeTake, StoreError> {
    let code = match take(connection, hash, REDEEM)? {
        CodeTake::Taken(code) => code,
        refused => return Ok(refused),
    };
    insert_refresh(connection, refresh, REDEEM)?;
    insert_access(connection, access, REDEEM)?;
    Ok(CodeTake::Taken(code))
}

/// Marks the authorization code hashed to `hash` taken, if it is stored
/// and not taken yet: then [`CodeTake::Taken`] with the code; otherwise
/// [`CodeTake::AlreadyTaken`] with its tombstone's grant and client, or
/// [`CodeTake::NotFound`]. `action` names a failure.
pub(super) fn take(
    connection: &Connection,
    hash: &SecretHash,
    action: &'static str,
) -> Result<CodeTake, StoreError> {
    let key = hash.as_bytes().as_slice();
    let taken = connection
        .prepare_cached(
            "UPDATE authorization_codes SET taken = 1
             WHERE hash = ?1 AND taken = 0
             RETURNING grant_id, client_id, account_id, redirect_uri, pkce_challenge,
                       issued_at, expires_at",
        )
        .and_then(|mut statement| {
            statement
                .query_row([key], |row| {
                    Ok(code_from(&RowColumns::new(row, action), *hash))
                })
                .optional()
        })
        .map_err(failed(action))?;
    if let Some(code) = taken {
        return code.map(CodeTake::Taken);
    }
    // Codes are never untaken, so a row found now is a tombstone (or, if
    // the purge deleted it meanwhile, none is found).
    let tombstone = connection
        .prepare_cached("SELECT grant_id, client_id FROM authorization_codes WHERE hash = ?1")
        .and_then(|mut statement| {
            statement
                .query_row([key], |row| {
                    Ok(code_tombstone(&RowColumns::new(row, action)))
                })
                .optional()
        })
        .map_err(failed(action))?;
    tombstone.unwrap_or(Ok(CodeTake::NotFound))
}

/// Inserts `token` as an active refresh token, whatever its `state` says.
pub(super) fn insert_refresh(
    connection: &Connection,
    token: &RefreshTokenRecord,
    action: &'static str,
) -> Result<(), StoreError> {
    let (issued, expires) = (micros(token.issued_at)?, opt_micros(token.expires_at)?);
    connection
        .prepare_cached(
            "INSERT INTO refresh_tokens
                 (hash, grant_id, client_id, account_id, issued_at, expires_at, predecessor)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .and_then(|mut statement| {
            statement.execute(params![
                token.hash.as_bytes().as_slice(),
                uuid_text(token.grant_id.0),
                token.client_id.as_str(),
                uuid_text(token.account_id.0),
                issued,
                expires,
                token
                    .predecessor
                    .as_ref()
                    .map(|hash| hash.as_bytes().as_slice()),
            ])
        })
        .map_err(insert_failed("refresh token", action))?;
    Ok(())
}

/// Inserts `token` as an access token.
pub(super) fn insert_access(
    connection: &Connection,
    token: &AccessTokenRecord,
    action: &'static str,
) -> Result<(), StoreError> {
    let (issued, expires) = (micros(token.issued_at)?, micros(token.expires_at)?);
    connection
        .prepare_cached(
            "INSERT INTO access_tokens
                 (hash, grant_id, client_id, account_id, issued_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .and_then(|mut statement| {
            statement.execute(params![
                token.hash.as_bytes().as_slice(),
                uuid_text(token.grant_id.0),
                token.client_id.as_str(),
                uuid_text(token.account_id.0),
                issued,
                expires,
            ])
        })
        .map_err(insert_failed("access token", action))?;
    Ok(())
}

/// Inserts `grant`.
///
/// # Errors
/// [`StoreError::Duplicate`] if its id is stored already; otherwise as
/// [`failed`].
pub(super) fn insert_grant(connection: &Connection, grant: &Grant) -> Result<(), StoreError> {
    const ACTION: &str = "insert a grant";
    let created = micros(grant.created_at)?;
    let (revoked, refreshed) = (
        opt_micros(grant.revoked_at)?,
        opt_micros(grant.last_refreshed_at)?,
    );
    connection
        .prepare_cached(
            "INSERT INTO grants
                 (id, client_id, account_id, created_at, revoked_at, last_refreshed_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .and_then(|mut statement| {
            statement.execute(params![
                uuid_text(grant.id.0),
                grant.client_id.as_str(),
                uuid_text(grant.account_id.0),
                created,
                revoked,
                refreshed,
            ])
        })
        .map_err(insert_failed("grant", ACTION))?;
    Ok(())
}

/// Marks the grant `id` revoked at `at`, unless it was revoked before (the
/// first revocation's time is kept): whether the grant is stored, as
/// [`crate::TokenStore::revoke_grant`] answers.
pub(super) fn revoke_grant(
    connection: &Connection,
    id: GrantId,
    at: OffsetDateTime,
) -> Result<bool, StoreError> {
    const ACTION: &str = "revoke a grant";
    let at = micros(at)?;
    let changed = connection
        .prepare_cached("UPDATE grants SET revoked_at = COALESCE(revoked_at, ?1) WHERE id = ?2")
        .and_then(|mut statement| statement.execute(params![at, uuid_text(id.0)]))
        .map_err(failed(ACTION))?;
    Ok(changed > 0)
}

/// Inserts `code`, not taken.
///
/// # Errors
/// [`StoreError::Duplicate`] if its hash is stored already; otherwise as
/// [`failed`].
pub(super) fn insert_code(connection: &Connection, code: &CodeRecord) -> Result<(), StoreError> {
    const ACTION: &str = "insert an authorization code";
    let (issued, expires) = (micros(code.issued_at)?, micros(code.expires_at)?);
    connection
        .prepare_cached(
            "INSERT INTO authorization_codes
                 (hash, grant_id, client_id, account_id, redirect_uri, pkce_challenge,
                  issued_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )
        .and_then(|mut statement| {
            statement.execute(params![
                code.hash.as_bytes().as_slice(),
                uuid_text(code.grant_id.0),
                code.client_id.as_str(),
                uuid_text(code.account_id.0),
                code.redirect_uri,
                code.pkce.as_ref().map(|pkce| pkce.challenge.as_str()),
                issued,
                expires,
            ])
        })
        .map_err(insert_failed("authorization code", ACTION))?;
    Ok(())
}
