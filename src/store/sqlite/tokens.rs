//! [`TokenStore`] on SQLite: grants, authorization codes, access and
//! refresh tokens, and their purge.
//!
//! A code's redemption and a refresh token's rotation, each a read then
//! writes under the write lock, which clients ask for all day and the
//! intake's floods must not hold up, run on the writer of events' thread
//! inside one of its groups ([`token_writes`](super::token_writes)); so do
//! the code's take and the tokens' plain inserts they are made of, so that
//! each statement is written once. A code is taken by one conditional
//! `UPDATE ... WHERE taken = 0 RETURNING ...`. Grants, a code's insert and
//! the purge are written through sqlx, at the write gate.

use async_trait::async_trait;
use time::OffsetDateTime;

use crate::account::AccountId;
use crate::records::grant::{Grant, GrantId};
use crate::records::tokens::{AccessTokenRecord, CodeRecord, RefreshTokenRecord};
use crate::secret::SecretHash;
use crate::store::error::StoreError;
use crate::store::sql::records::{access_from, code_lookup, grant_from, refresh_from};
use crate::store::sql::{self, backend, find_row, insert_row};
use crate::store::{CodeLookup, CodeTake, Rotation, TokenStore};

use super::SqliteStore;
use super::columns::{Columns, micros, opt_micros, uuid_text};
use super::token_writes;

#[async_trait]
impl TokenStore for SqliteStore {
    async fn ready(&self) -> Result<(), StoreError> {
        self.ping().await
    }

    async fn insert_grant(&self, grant: &Grant) -> Result<(), StoreError> {
        let statement = sqlx::query(
            "INSERT INTO grants
                 (id, client_id, account_id, created_at, revoked_at, last_refreshed_at)
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(uuid_text(grant.id.0))
        .bind(grant.client_id.as_str())
        .bind(uuid_text(grant.account_id.0))
        .bind(micros(grant.created_at)?)
        .bind(opt_micros(grant.revoked_at)?)
        .bind(opt_micros(grant.last_refreshed_at)?);
        let _turn = self.write_turn().await;
        insert_row(&self.writer, statement, "grant", "insert a grant").await
    }

    async fn find_grant(&self, id: GrantId) -> Result<Option<Grant>, StoreError> {
        let statement = sqlx::query(
            "SELECT id, client_id, account_id, created_at, revoked_at, last_refreshed_at
             FROM grants WHERE id = ?",
        )
        .bind(uuid_text(id.0));
        find_row(&self.reader, statement, "read a grant", grant_from).await
    }

    async fn list_grants(&self, account: AccountId) -> Result<Vec<Grant>, StoreError> {
        // rowid breaks ties between grants made in the same microsecond.
        sqlx::query(
            "SELECT id, client_id, account_id, created_at, revoked_at, last_refreshed_at
             FROM grants WHERE account_id = ? AND revoked_at IS NULL
             ORDER BY created_at, rowid",
        )
        .bind(uuid_text(account.0))
        .fetch_all(&self.reader)
        .await
        .map_err(backend("list grants"))?
        .into_iter()
        .map(|row| grant_from(&Columns::new(row, "read a grant")))
        .collect()
    }

    async fn revoke_grant(&self, id: GrantId, at: OffsetDateTime) -> Result<bool, StoreError> {
        // One statement; COALESCE keeps the first revocation time.
        let _turn = self.write_turn().await;
        let done =
            sqlx::query("UPDATE grants SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?")
                .bind(micros(at)?)
                .bind(uuid_text(id.0))
                .execute(&self.writer)
                .await
                .map_err(backend("revoke a grant"))?;
        Ok(done.rows_affected() > 0)
    }

    async fn insert_code(&self, code: &CodeRecord) -> Result<(), StoreError> {
        let statement = sqlx::query(
            "INSERT INTO authorization_codes
                 (hash, grant_id, client_id, account_id, redirect_uri, pkce_challenge,
                  issued_at, expires_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(code.hash.as_bytes().as_slice())
        .bind(uuid_text(code.grant_id.0))
        .bind(code.client_id.as_str())
        .bind(uuid_text(code.account_id.0))
        .bind(&code.redirect_uri)
        .bind(code.pkce.as_ref().map(|pkce| pkce.challenge.as_str()))
        .bind(micros(code.issued_at)?)
        .bind(micros(code.expires_at)?);
        let action = "insert an authorization code";
        let _turn = self.write_turn().await;
        insert_row(&self.writer, statement, "authorization code", action).await
    }

    async fn take_code(&self, hash: &SecretHash) -> Result<CodeTake, StoreError> {
        // One conditional statement, on the writer of events' thread as a
        // redemption's: of any number of callers, only the one whose UPDATE
        // finds `taken = 0` gets the row back.
        let hash = *hash;
        self.events
            .write("take an authorization code", move |connection| {
                token_writes::take(connection, &hash, "take an authorization code")
            })
            .await
    }

    async fn find_code(&self, hash: &SecretHash) -> Result<CodeLookup, StoreError> {
        let statement = sqlx::query(
            "SELECT grant_id, client_id, account_id, redirect_uri, pkce_challenge,
                    issued_at, expires_at, taken
             FROM authorization_codes WHERE hash = ?",
        )
        .bind(hash.as_bytes().as_slice());
        let action = "read an authorization code";
        Ok(
            find_row(&self.reader, statement, action, |c| code_lookup(c, *hash))
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
        // On the writer of events' thread, in its next group's transaction,
        // as a rotation: of any number of callers only one finds the code
        // untaken; on failure the task's savepoint is rolled back, the code
        // stays untaken and neither token is stored.
        let (hash, refresh, access) = (*hash, refresh.clone(), access.clone());
        self.events
            .write("redeem an authorization code", move |connection| {
                token_writes::redeem(connection, &hash, &refresh, &access)
            })
            .await
    }

    async fn insert_access_token(&self, token: &AccessTokenRecord) -> Result<(), StoreError> {
        let token = token.clone();
        self.events
            .write("insert an access token", move |connection| {
                token_writes::insert_access(connection, &token, "insert an access token")
            })
            .await
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
             WHERE a.hash = ?",
        )
        .bind(hash.as_bytes().as_slice());
        let action = "read an access token";
        find_row(&self.reader, statement, action, |c| access_from(c, *hash)).await
    }

    async fn insert_refresh_token(&self, token: &RefreshTokenRecord) -> Result<(), StoreError> {
        let token = token.clone();
        self.events
            .write("insert a refresh token", move |connection| {
                token_writes::insert_refresh(connection, &token, "insert a refresh token")
            })
            .await
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
             WHERE r.hash = ?",
        )
        .bind(hash.as_bytes().as_slice());
        let action = "read a refresh token";
        find_row(&self.reader, statement, action, |c| refresh_from(c, *hash)).await
    }

    async fn rotate_refresh_token(
        &self,
        old: &SecretHash,
        successor: &RefreshTokenRecord,
        access: &AccessTokenRecord,
        at: OffsetDateTime,
    ) -> Result<Rotation, StoreError> {
        // On the writer of events' thread, in its next group's transaction
        // (`token_writes` says why): the group began `IMMEDIATE`, so of any
        // number of callers only one finds the token active; on failure the
        // task's savepoint is rolled back, the old token stays active and
        // neither new token is stored.
        let (old, successor, access) = (*old, successor.clone(), access.clone());
        self.events
            .write("rotate a refresh token", move |connection| {
                token_writes::rotate(connection, &old, &successor, &access, at)
            })
            .await
    }

    async fn purge_expired(
        &self,
        cutoff: OffsetDateTime,
        limit: usize,
    ) -> Result<usize, StoreError> {
        // Each DELETE is a transaction of its own, of at most `limit` rows:
        // the write lock is held for one short statement at a time.
        const PURGES: [&str; 5] = [
            "DELETE FROM authorization_codes WHERE rowid IN
                 (SELECT rowid FROM authorization_codes WHERE expires_at < ?1 LIMIT ?2)",
            "DELETE FROM access_tokens WHERE rowid IN
                 (SELECT rowid FROM access_tokens WHERE expires_at < ?1 LIMIT ?2)",
            // A grant's first token (no predecessor) whose successor is
            // still active is honoured by the adaptive and reuse policies:
            // clients that never store a new refresh token present it for
            // as long as the grant lives, so it is never purged.
            "DELETE FROM refresh_tokens WHERE rowid IN
                 (SELECT r.rowid FROM refresh_tokens r
                  WHERE r.rotated_at < ?1
                    AND NOT (r.predecessor IS NULL AND EXISTS
                        (SELECT 1 FROM refresh_tokens s
                         WHERE s.hash = r.successor AND s.rotated_at IS NULL))
                  LIMIT ?2)",
            "DELETE FROM refresh_tokens WHERE rowid IN
                 (SELECT rowid FROM refresh_tokens WHERE expires_at < ?1 LIMIT ?2)",
            "DELETE FROM refresh_tokens WHERE rowid IN
                 (SELECT r.rowid FROM grants g JOIN refresh_tokens r ON r.grant_id = g.id
                  WHERE g.revoked_at < ?1 LIMIT ?2)",
        ];
        let _turn = self.write_turn().await;
        sql::purge(
            &self.writer,
            &PURGES,
            micros(cutoff)?,
            limit,
            "purge expired tokens",
        )
        .await
    }
}
