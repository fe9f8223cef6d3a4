//! [`TokenStore`] on PostgreSQL: grants, authorization codes, access and
//! refresh tokens, and their purge.
//!
//! Each operation that must be atomic is one statement: taking a code is a
//! conditional `UPDATE ... WHERE NOT taken RETURNING ...`, and a redemption
//! or a rotation is one statement whose conditional `UPDATE` feeds the
//! `INSERT`s of the new tokens, so the database's row lock decides the race.

use async_trait::async_trait;
use sqlx::Postgres;
use time::OffsetDateTime;

use crate::account::AccountId;
use crate::records::grant::{Grant, GrantId};
use crate::records::tokens::{AccessTokenRecord, CodeRecord, RefreshTokenRecord};
use crate::secret::SecretHash;
use crate::store::error::StoreError;
use crate::store::sql::records::{
    access_from, code_from, code_lookup, code_tombstone, grant_from, refresh_from, rotation_refused,
};
use crate::store::sql::{self, backend, find_row, insert_failed, insert_row};
use crate::store::{CodeLookup, CodeTake, Rotation, TokenStore};

use super::PgStore;
use super::columns::Columns;

/// A statement with its arguments bound.
type Statement<'q> = sql::Statement<'q, Postgres>;

/// Binds an access token's `hash, grant_id, client_id, account_id,
/// issued_at, expires_at`, in that order, after what `statement` has bound.
fn bind_access<'q>(statement: Statement<'q>, token: &'q AccessTokenRecord) -> Statement<'q> {
    statement
        .bind(token.hash.as_bytes().as_slice())
        .bind(token.grant_id.0)
        .bind(token.client_id.as_str())
        .bind(token.account_id.0)
        .bind(token.issued_at)
        .bind(token.expires_at)
}

/// Binds a refresh token's `hash, grant_id, client_id, account_id,
/// issued_at, expires_at, predecessor`, in that order, after what
/// `statement` has bound.
fn bind_refresh<'q>(statement: Statement<'q>, token: &'q RefreshTokenRecord) -> Statement<'q> {
    statement
        .bind(token.hash.as_bytes().as_slice())
        .bind(token.grant_id.0)
        .bind(token.client_id.as_str())
        .bind(token.account_id.0)
        .bind(token.issued_at)
        .bind(token.expires_at)
        .bind(
            token
                .predecessor
                .as_ref()
                .map(|hash| hash.as_bytes().as_slice()),
        )
}

#[async_trait]
impl TokenStore for PgStore {
    async fn ready(&self) -> Result<(), StoreError> {
        self.ping().await
    }

    async fn insert_grant(&self, grant: &Grant) -> Result<(), StoreError> {
        let statement = sqlx::query(
            "INSERT INTO grants
                 (id, client_id, account_id, created_at, revoked_at, last_refreshed_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(grant.id.0)
        .bind(grant.client_id.as_str())
        .bind(grant.account_id.0)
        .bind(grant.created_at)
        .bind(grant.revoked_at)
        .bind(grant.last_refreshed_at);
        insert_row(&self.pool, statement, "grant", "insert a grant").await
    }

    async fn find_grant(&self, id: GrantId) -> Result<Option<Grant>, StoreError> {
        let statement = sqlx::query(
            "SELECT id, client_id, account_id, created_at, revoked_at, last_refreshed_at
             FROM grants WHERE id = $1",
        )
        .bind(id.0);
        find_row(&self.pool, statement, "read a grant", grant_from).await
    }

    async fn list_grants(&self, account: AccountId) -> Result<Vec<Grant>, StoreError> {
        // The id breaks ties between grants made in the same microsecond.
        sqlx::query(
            "SELECT id, client_id, account_id, created_at, revoked_at, last_refreshed_at
             FROM grants WHERE account_id = $1 AND revoked_at IS NULL
             ORDER BY created_at, id",
        )
        .bind(account.0)
        .fetch_all(&self.pool)
        .await
        .map_err(backend("list grants"))?
        .into_iter()
        .map(|row| grant_from(&Columns::new(row, "read a grant")))
        .collect()
    }

    async fn revoke_grant(&self, id: GrantId, at: OffsetDateTime) -> Result<bool, StoreError> {
        // One statement; COALESCE keeps the first revocation time.
        let done =
            sqlx::query("UPDATE grants SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2")
                .bind(at)
                .bind(id.0)
                .execute(&self.pool)
                .await
                .map_err(backend("revoke a grant"))?;
        Ok(done.rows_affected() > 0)
    }

    async fn insert_code(&self, code: &CodeRecord) -> Result<(), StoreError> {
        let statement = sqlx::query(
            "INSERT INTO authorization_codes
                 (hash, grant_id, client_id, account_id, redirect_uri, pkce_challenge,
                  issued_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(code.hash.as_bytes().as_slice())
        .bind(code.grant_id.0)
        .bind(code.client_id.as_str())
        .bind(code.account_id.0)
        .bind(&code.redirect_uri)
        .bind(code.pkce.as_ref().map(|pkce| pkce.challenge.as_str()))
        .bind(code.issued_at)
        .bind(code.expires_at);
        let action = "insert an authorization code";
        insert_row(&self.pool, statement, "authorization code", action).await
    }

    async fn take_code(&self, hash: &SecretHash) -> Result<CodeTake, StoreError> {
        const ACTION: &str = "take an authorization code";
        // One conditional statement. A concurrent caller, on any connection
        // or server, waits for the row lock, then re-checks `NOT taken` on
        // the committed row and matches nothing.
        let take = sqlx::query(
            "UPDATE authorization_codes SET taken = TRUE
             WHERE hash = $1 AND NOT taken
             RETURNING grant_id, client_id, account_id, redirect_uri, pkce_challenge,
                       issued_at, expires_at",
        )
        .bind(hash.as_bytes().as_slice());
        if let Some(code) = find_row(&self.pool, take, ACTION, |c| code_from(c, *hash)).await? {
            return Ok(CodeTake::Taken(code));
        }
        self.code_tombstone(hash, ACTION).await
    }

    async fn find_code(&self, hash: &SecretHash) -> Result<CodeLookup, StoreError> {
        let statement = sqlx::query(
            "SELECT grant_id, client_id, account_id, redirect_uri, pkce_challenge,
                    issued_at, expires_at, taken
             FROM authorization_codes WHERE hash = $1",
        )
        .bind(hash.as_bytes().as_slice());
        let action = "read an authorization code";
        Ok(
            find_row(&self.pool, statement, action, |c| code_lookup(c, *hash))
                .await?
                .unwrap_or(CodeLookup::NotFound),
        )
    }

    async fn redeem_code(
        &self,
        hash: &SecretHash,
        refresh: &RefreshTokenRecord,
        access: &AccessTokenRecord,
    ) -> Result<CodeTake, StoreError> {
        const ACTION: &str = "redeem an authorization code";
        // One statement, so one implicit transaction: the tokens are
        // inserted only from the row the UPDATE marked, and a failure of any
        // part (a duplicate hash, a lost connection) undoes every part.
        // Concurrent callers queue on the code's row lock and re-check
        // `NOT taken` on the committed row: one wins.
        let redeem = sqlx::query(
            "WITH taken AS (
                 UPDATE authorization_codes SET taken = TRUE
                 WHERE hash = $1 AND NOT taken
                 RETURNING grant_id, client_id, account_id, redirect_uri, pkce_challenge,
                           issued_at, expires_at
             ), refresh AS (
                 INSERT INTO refresh_tokens
                     (hash, grant_id, client_id, account_id, issued_at, expires_at, predecessor)
                 SELECT $2, $3, $4, $5, $6, $7, $8 FROM taken
             ), access AS (
                 INSERT INTO access_tokens
                     (hash, grant_id, client_id, account_id, issued_at, expires_at)
                 SELECT $9, $10, $11, $12, $13, $14 FROM taken
             )
             SELECT * FROM taken",
        )
        .bind(hash.as_bytes().as_slice());
        let redeem = bind_access(bind_refresh(redeem, refresh), access);
        let taken = redeem
            .fetch_optional(&self.pool)
            .await
            .map_err(insert_failed("token", ACTION))?;
        match taken {
            Some(row) => Ok(CodeTake::Taken(code_from(
                &Columns::new(row, ACTION),
                *hash,
            )?)),
            None => self.code_tombstone(hash, ACTION).await,
        }
    }

    async fn insert_access_token(&self, token: &AccessTokenRecord) -> Result<(), StoreError> {
        let statement = bind_access(
            sqlx::query(
                "INSERT INTO access_tokens
                     (hash, grant_id, client_id, account_id, issued_at, expires_at)
                 VALUES ($1, $2, $3, $4, $5, $6)",
            ),
            token,
        );
        let action = "insert an access token";
        insert_row(&self.pool, statement, "access token", action).await
    }

    async fn find_access_token(
        &self,
        hash: &SecretHash,
    ) -> Result<Option<AccessTokenRecord>, StoreError> {
        // `revoked` comes from the grant, so revoking the grant revokes every
        // token at once, those inserted later included. A token whose grant
        // is unknown cannot be traced to a live authorization: revoked.
        let statement = sqlx::query(
            "SELECT a.grant_id, a.client_id, a.account_id, a.issued_at, a.expires_at,
                    (g.id IS NULL OR g.revoked_at IS NOT NULL) AS revoked
             FROM access_tokens a LEFT JOIN grants g ON g.id = a.grant_id
             WHERE a.hash = $1",
        )
        .bind(hash.as_bytes().as_slice());
        let action = "read an access token";
        find_row(&self.pool, statement, action, |c| access_from(c, *hash)).await
    }

    async fn insert_refresh_token(&self, token: &RefreshTokenRecord) -> Result<(), StoreError> {
        let statement = bind_refresh(
            sqlx::query(
                "INSERT INTO refresh_tokens
                     (hash, grant_id, client_id, account_id, issued_at, expires_at, predecessor)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            ),
            token,
        );
        let action = "insert a refresh token";
        insert_row(&self.pool, statement, "refresh token", action).await
    }

    async fn find_refresh_token(
        &self,
        hash: &SecretHash,
    ) -> Result<Option<RefreshTokenRecord>, StoreError> {
        let statement = sqlx::query(
            "SELECT r.grant_id, r.client_id, r.account_id, r.issued_at, r.expires_at,
                    r.predecessor, r.rotated_at, r.successor,
                    s.rotated_at AS successor_used_at,
                    (g.id IS NULL OR g.revoked_at IS NOT NULL) AS revoked
             FROM refresh_tokens r
             LEFT JOIN grants g ON g.id = r.grant_id
             LEFT JOIN refresh_tokens s ON s.hash = r.successor
             WHERE r.hash = $1",
        )
        .bind(hash.as_bytes().as_slice());
        let action = "read a refresh token";
        find_row(&self.pool, statement, action, |c| refresh_from(c, *hash)).await
    }

    async fn rotate_refresh_token(
        &self,
        old: &SecretHash,
        successor: &RefreshTokenRecord,
        access: &AccessTokenRecord,
        at: OffsetDateTime,
    ) -> Result<Rotation, StoreError> {
        const ACTION: &str = "rotate a refresh token";
        // A token that is inserted while we look can make the conditional
        // statement match nothing and the look-up then find it active; the
        // statement is simply tried again.
        for _ in 0..3 {
            // One statement: the successor and the access token are inserted
            // only from the row the UPDATE marked, the UPDATE marks only an
            // active token of a live grant, and a failure of any part undoes
            // every part. Concurrent callers queue on the row lock and
            // re-check `rotated_at IS NULL` on the committed row: one wins.
            let rotate = sqlx::query(
                "WITH rotated AS (
                     UPDATE refresh_tokens r SET rotated_at = $2, successor = $3
                     WHERE r.hash = $1 AND r.rotated_at IS NULL
                       AND EXISTS (SELECT 1 FROM grants g
                                   WHERE g.id = r.grant_id AND g.revoked_at IS NULL)
                     RETURNING r.grant_id
                 ), refreshed AS (
                     UPDATE grants SET last_refreshed_at = $2
                     WHERE id IN (SELECT grant_id FROM rotated)
                 ), successor AS (
                     INSERT INTO refresh_tokens
                         (hash, grant_id, client_id, account_id, issued_at, expires_at,
                          predecessor)
                     SELECT $3, $4, $5, $6, $7, $8, $9 FROM rotated
                 )
                 INSERT INTO access_tokens
                     (hash, grant_id, client_id, account_id, issued_at, expires_at)
                 SELECT $10, $11, $12, $13, $14, $15 FROM rotated",
            )
            .bind(old.as_bytes().as_slice())
            .bind(at);
            let rotated = bind_access(bind_refresh(rotate, successor), access)
                .execute(&self.pool)
                .await
                .map_err(insert_failed("token", ACTION))?;
            if rotated.rows_affected() == 1 {
                return Ok(Rotation::Rotated);
            }
            let current = sqlx::query(
                "SELECT r.rotated_at, r.successor,
                        (g.id IS NULL OR g.revoked_at IS NOT NULL) AS revoked
                 FROM refresh_tokens r LEFT JOIN grants g ON g.id = r.grant_id
                 WHERE r.hash = $1",
            )
            .bind(old.as_bytes().as_slice());
            match find_row(&self.pool, current, ACTION, rotation_refused).await? {
                None => return Ok(Rotation::NotFound),
                Some(Some(refused)) => return Ok(refused),
                // Active after all: try again.
                Some(None) => {}
            }
        }
        Err(StoreError::backend(ACTION, RotationContended))
    }

    async fn purge_expired(
        &self,
        cutoff: OffsetDateTime,
        limit: usize,
    ) -> Result<usize, StoreError> {
        // Each DELETE is a transaction of its own, of at most `limit` rows,
        // found through the purge indexes: locks are held one short
        // statement at a time.
        const PURGES: [&str; 5] = [
            "DELETE FROM authorization_codes WHERE hash IN
                 (SELECT hash FROM authorization_codes WHERE expires_at < $1 LIMIT $2)",
            "DELETE FROM access_tokens WHERE hash IN
                 (SELECT hash FROM access_tokens WHERE expires_at < $1 LIMIT $2)",
            // A grant's first token (no predecessor) whose successor is
            // still active is honoured by the adaptive and reuse policies:
            // clients that never store a new refresh token present it for
            // as long as the grant lives, so it is never purged.
            "DELETE FROM refresh_tokens WHERE hash IN
                 (SELECT r.hash FROM refresh_tokens r
                  WHERE r.rotated_at < $1
                    AND NOT (r.predecessor IS NULL AND EXISTS
                        (SELECT 1 FROM refresh_tokens s
                         WHERE s.hash = r.successor AND s.rotated_at IS NULL))
                  LIMIT $2)",
            "DELETE FROM refresh_tokens WHERE hash IN
                 (SELECT hash FROM refresh_tokens WHERE expires_at < $1 LIMIT $2)",
            "DELETE FROM refresh_tokens WHERE hash IN
                 (SELECT r.hash FROM grants g JOIN refresh_tokens r ON r.grant_id = g.id
                  WHERE g.revoked_at < $1 LIMIT $2)",
        ];
        sql::purge(&self.pool, &PURGES, cutoff, limit, "purge expired tokens").await
    }
}

impl PgStore {
    /// What a code the caller could not take tells of it: its tombstone, or
    /// nothing if it never existed (or the purge deleted it meanwhile).
    async fn code_tombstone(
        &self,
        hash: &SecretHash,
        action: &'static str,
    ) -> Result<CodeTake, StoreError> {
        let tombstone =
            sqlx::query("SELECT grant_id, client_id FROM authorization_codes WHERE hash = $1")
                .bind(hash.as_bytes().as_slice());
        Ok(find_row(&self.pool, tombstone, action, code_tombstone)
            .await?
            .unwrap_or(CodeTake::NotFound))
    }
}

/// A refresh token stayed active and unrotatable through every attempt:
/// something keeps changing it under the store.
#[derive(Debug, thiserror::Error)]
#[error("the refresh token kept changing while it was being rotated")]
struct RotationContended;
