//! [`TokenStore`] on SQLite: grants, authorization codes, access and
//! refresh tokens, and their purge.
//!
//! A code's redemption and a refresh token's rotation, each a read then
//! writes under the write lock, which clients ask for all day and the
//! intake's floods must not hold up, run on the writer of events' thread
//! inside one of its groups ([`token_writes`](super::token_writes)); so do
//! the code's take and the tokens' plain inserts they are made of, so that
//! each statement is written once, and the rest of the flow's writes (a
//! grant and a code issued at consent, a grant revoked). A code is taken by
//! one conditional `UPDATE ... WHERE taken = 0 RETURNING ...`. Only the
//! purge is written through sqlx, at the write gate: a few short `DELETE`s
//! of at most its limit of rows each, which are not worth a group's wait.

use async_trait::async_trait;
use time::OffsetDateTime;

use crate::account::AccountId;
use crate::records::grant::{Grant, GrantId};
use crate::records::tokens::{AccessTokenRecord, CodeRecord, RefreshTokenRecord};
use crate::secret::SecretHash;
use crate::store::error::StoreError;
use crate::store::sql::records::{access_from, code_lookup, grant_from, refresh_from};
use crate::store::sql::{self, backend, find_row};
use crate::store::{CodeLookup, CodeTake, Rotation, TokenStore};

use super::SqliteStore;
use super::columns::{Columns, micros, uuid_text};
use super::token_writes;

#[async_trait]
impl TokenStore for SqliteStore {
    async fn ready(&self) -> Result<(), StoreError> {
        self.ping().await
    }

    async fn insert_grant(&self, grant: &Grant) -> Result<(), StoreError> {
        let grant = grant.clone();
        self.events
            .write("insert a grant", move |connection| {
                token_writes::insert_grant(connection, &grant)
            })
            .await
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
        self.events
            .write("revoke a grant", move |connection| {
                token_writes::revoke_grant(connection, id, at)
            })
            .await
    }

    async fn insert_code(&self, code: &CodeRecord) -> Result<(), StoreError> {
        let code = code.clone();
        self.events
            .write("insert an authorization code", move |connection| {
                token_writes::insert_code(connection, &code)
            })
            .await
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use time::macros::datetime;

    use super::*;
    use crate::random::{OsRandom, random_uuid};
    use crate::records::client::ClientId;
    use crate::records::tokens::PkceChallenge;
    use crate::secret::{AuthorizationCode, SecretHasher};

    /// A grant, not revoked, of a fresh client to a fresh account.
    fn new_grant() -> Grant {
        Grant {
            id: GrantId(random_uuid(&OsRandom)),
            client_id: ClientId::generate(&OsRandom),
            account_id: AccountId(random_uuid(&OsRandom)),
            created_at: datetime!(2026-03-01 12:00:00 UTC),
            revoked_at: None,
            last_refreshed_at: None,
        }
    }

    /// A code of `grant`, not taken.
    fn new_code(grant: &Grant) -> CodeRecord {
        CodeRecord {
            hash: AuthorizationCode::generate(&OsRandom).hash(&SecretHasher::new([7; 32])),
            grant_id: grant.id,
            client_id: grant.client_id.clone(),
            account_id: grant.account_id,
            redirect_uri: "https://app.example/callback".into(),
            pkce: Some(PkceChallenge {
                challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM".into(),
            }),
            issued_at: grant.created_at,
            expires_at: grant.created_at + time::Duration::minutes(10),
        }
    }

    /// Waits until `done` holds; fails the test after ten seconds.
    async fn until(done: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(tokio::time::Instant::now() < deadline, "never came to pass");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// The writes of consent (a grant and its code) and of a grant's
    /// revocation wait in the writer of events' queue while it writes a
    /// group, and are committed with its next one, not through sqlx at the
    /// write gate with a sync of their own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn grants_codes_and_revocations_ride_in_the_writers_groups() {
        let store = SqliteStore::open_temporary().await.expect("a store");
        let (grant, revoked) = (new_grant(), new_grant());
        store.insert_grant(&revoked).await.expect("stored");
        let code = new_code(&grant);

        // Hold the writer inside a group of its own.
        let (running, is_running) = std::sync::mpsc::channel::<()>();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let writer = store.events.clone();
        let held = tokio::spawn(async move {
            writer
                .write("hold", move |_| {
                    running.send(()).expect("the test waits");
                    released.recv().expect("released");
                    Ok(())
                })
                .await
        });
        tokio::task::block_in_place(|| is_running.recv()).expect("the hold runs");

        let revoked_at = datetime!(2026-03-02 08:00:00 UTC);
        let writes = {
            let store = store.clone();
            let (grant, code, revoked_id) = (grant.clone(), code.clone(), revoked.id);
            tokio::spawn(async move {
                let grant_and_code = async {
                    store.insert_grant(&grant).await?;
                    store.insert_code(&code).await
                };
                tokio::join!(grant_and_code, store.revoke_grant(revoked_id, revoked_at))
            })
        };
        // The grant's insert and the revocation queue behind the held group.
        until(|| store.events.waiting() == 2).await;
        release.send(()).expect("the hold waits");
        held.await.expect("joined").expect("the held group");
        let (inserted, was_revoked) = writes.await.expect("joined");
        inserted.expect("the grant and its code");
        assert!(was_revoked.expect("revoked"), "the grant is stored");

        assert_eq!(store.find_grant(grant.id).await.unwrap(), Some(grant));
        let stored = store.find_grant(revoked.id).await.unwrap().expect("stored");
        assert_eq!(stored.revoked_at, Some(revoked_at));
        assert_eq!(
            store.find_code(&code.hash).await.unwrap(),
            CodeLookup::Unused(code)
        );
    }

    /// Stored twice, a grant or a code is a duplicate, and nothing of the
    /// second write is kept; revoking an unknown grant changes nothing, and
    /// revoking again keeps the first revocation's time.
    #[tokio::test]
    async fn the_flows_writes_keep_their_answers_on_the_writer() {
        let store = SqliteStore::open_temporary().await.expect("a store");
        let grant = new_grant();
        store.insert_grant(&grant).await.expect("stored");
        let mut again = new_grant();
        again.id = grant.id;
        assert!(matches!(
            store.insert_grant(&again).await,
            Err(StoreError::Duplicate { what: "grant" })
        ));
        assert_eq!(
            store.find_grant(grant.id).await.unwrap(),
            Some(grant.clone())
        );

        let code = new_code(&grant);
        store.insert_code(&code).await.expect("stored");
        assert!(matches!(
            store.insert_code(&code).await,
            Err(StoreError::Duplicate {
                what: "authorization code"
            })
        ));

        let unknown = GrantId(random_uuid(&OsRandom));
        let first = datetime!(2026-03-02 08:00:00 UTC);
        assert!(!store.revoke_grant(unknown, first).await.unwrap());
        assert!(store.revoke_grant(grant.id, first).await.unwrap());
        let later = datetime!(2026-03-03 08:00:00 UTC);
        assert!(store.revoke_grant(grant.id, later).await.unwrap());
        let stored = store.find_grant(grant.id).await.unwrap().expect("stored");
        assert_eq!(stored.revoked_at, Some(first));
    }
}
