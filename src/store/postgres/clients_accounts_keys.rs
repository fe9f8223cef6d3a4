//! [`ClientRegistry`], [`AccountStore`] and [`ApiKeyStore`] on PostgreSQL:
//! the registered applications, the accounts, and their API keys.
//!
//! The per-account limit of API keys is counted and enforced in a
//! transaction holding an advisory lock on the account, so it holds across
//! server instances.

use async_trait::async_trait;
use sqlx::Postgres;
use time::OffsetDateTime;

use crate::account::{Account, AccountId};
use crate::records::api_key::{ApiKeyId, ApiKeyRecord};
use crate::records::client::{Client, ClientId};
use crate::secret::SecretHash;
use crate::store::error::StoreError;
use crate::store::sql::records::{RecordColumns as _, account_from, api_key_from, client_from};
use crate::store::sql::{Statement, backend, find_row, insert_row};
use crate::store::{AccountStore, ApiKeyStore, ClientRegistry};

use super::PgStore;
use super::columns::Columns;

/// The advisory-lock class under which an account's API keys are counted
/// ("cgak" in ASCII); the account is the second key.
const API_KEY_LOCK_CLASS: i32 = 0x6367_616b;

#[async_trait]
impl ClientRegistry for PgStore {
    async fn ready(&self) -> Result<(), StoreError> {
        self.ping().await
    }

    async fn register_client(&self, client: &Client) -> Result<(), StoreError> {
        let statement = sqlx::query(
            "INSERT INTO clients
                 (id, name, secret_hash, redirect_uris, require_pkce, refresh_policy, active,
                  previous_secret_hash, previous_secret_valid_until)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(client.id.as_str())
        .bind(&client.name)
        .bind(client.secret_hash.as_bytes().as_slice())
        .bind(&client.redirect_uris)
        .bind(client.require_pkce)
        .bind(client.refresh_policy.map(|policy| policy.to_stored()))
        .bind(client.active)
        .bind(
            client
                .previous_secret
                .as_ref()
                .map(|previous| previous.hash.as_bytes().to_vec()),
        )
        .bind(client.previous_secret.as_ref().map(|p| p.valid_until));
        insert_row(&self.pool, statement, "client", "register a client").await
    }

    async fn find_client(&self, id: &ClientId) -> Result<Option<Client>, StoreError> {
        let statement = sqlx::query(
            "SELECT id, name, secret_hash, redirect_uris, require_pkce, refresh_policy, active,
                    previous_secret_hash, previous_secret_valid_until
             FROM clients WHERE id = $1",
        )
        .bind(id.as_str());
        find_row(&self.pool, statement, "read a client", client_from).await
    }

    async fn rotate_client_secret(
        &self,
        id: &ClientId,
        secret_hash: &SecretHash,
        previous_valid_until: OffsetDateTime,
    ) -> Result<bool, StoreError> {
        // One statement: the right-hand side reads the row as it was, so
        // the old secret becomes the previous one; concurrent rotations
        // queue on the row lock.
        let statement = sqlx::query(
            "UPDATE clients SET previous_secret_hash = secret_hash,
                 previous_secret_valid_until = $1, secret_hash = $2
             WHERE id = $3",
        )
        .bind(previous_valid_until)
        .bind(secret_hash.as_bytes().as_slice())
        .bind(id.as_str());
        self.update_client(statement, "rotate a client secret")
            .await
    }

    async fn set_client_redirect_uris(
        &self,
        id: &ClientId,
        redirect_uris: &[String],
    ) -> Result<bool, StoreError> {
        let statement = sqlx::query("UPDATE clients SET redirect_uris = $1 WHERE id = $2")
            .bind(redirect_uris)
            .bind(id.as_str());
        self.update_client(statement, "change redirect uris").await
    }

    async fn set_client_active(&self, id: &ClientId, active: bool) -> Result<bool, StoreError> {
        let statement = sqlx::query("UPDATE clients SET active = $1 WHERE id = $2")
            .bind(active)
            .bind(id.as_str());
        self.update_client(statement, "switch a client").await
    }
}

impl PgStore {
    /// Runs `statement`, an `UPDATE` of one client; whether it found it.
    async fn update_client(
        &self,
        statement: Statement<'_, Postgres>,
        action: &'static str,
    ) -> Result<bool, StoreError> {
        let done = statement
            .execute(&self.pool)
            .await
            .map_err(backend(action))?;
        Ok(done.rows_affected() > 0)
    }
}

#[async_trait]
impl AccountStore for PgStore {
    async fn ready(&self) -> Result<(), StoreError> {
        self.ping().await
    }

    async fn insert_account(&self, account: &Account) -> Result<(), StoreError> {
        // The primary key and the UNIQUE e-mail both answer `Duplicate`.
        let statement = sqlx::query(
            "INSERT INTO accounts (id, name, email, password_hash, custom_fields)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(account.id.0)
        .bind(&account.name)
        .bind(&account.email)
        .bind(account.password_hash.as_deref())
        .bind(&account.custom_fields);
        insert_row(&self.pool, statement, "account", "insert an account").await
    }

    async fn find_account(&self, id: AccountId) -> Result<Option<Account>, StoreError> {
        let statement = sqlx::query(
            "SELECT id, name, email, password_hash, custom_fields FROM accounts WHERE id = $1",
        )
        .bind(id.0);
        find_row(&self.pool, statement, "read an account", |c| {
            account_from(c)
        })
        .await
    }

    async fn find_account_by_email(&self, email: &str) -> Result<Option<Account>, StoreError> {
        let statement = sqlx::query(
            "SELECT id, name, email, password_hash, custom_fields FROM accounts WHERE email = $1",
        )
        .bind(email);
        find_row(&self.pool, statement, "read an account", |c| {
            account_from(c)
        })
        .await
    }
}

/// The second key of an account's advisory lock: its uuid folded to 32
/// bits. Two accounts that fold alike only queue behind each other.
fn account_lock_key(account: AccountId) -> i32 {
    let bytes = account.0.as_bytes();
    let mut folded = [0u8; 4];
    for (i, byte) in bytes.iter().enumerate() {
        folded[i % 4] ^= byte;
    }
    i32::from_be_bytes(folded)
}

#[async_trait]
impl ApiKeyStore for PgStore {
    async fn ready(&self) -> Result<(), StoreError> {
        self.ping().await
    }

    async fn insert_api_key(
        &self,
        key: &ApiKeyRecord,
        max_per_account: usize,
    ) -> Result<bool, StoreError> {
        const ACTION: &str = "insert an api key";
        let mut tx = self.pool.begin().await.map_err(backend(ACTION))?;
        // Count and insert while holding the account's lock, released at
        // COMMIT: a concurrent caller, on any server, counts after us.
        sqlx::query("SELECT pg_advisory_xact_lock($1, $2)")
            .bind(API_KEY_LOCK_CLASS)
            .bind(account_lock_key(key.account_id))
            .execute(&mut *tx)
            .await
            .map_err(backend(ACTION))?;
        let row = sqlx::query(
            "SELECT EXISTS (SELECT 1 FROM api_keys WHERE id = $1 OR hash = $2) AS duplicate,
                    (SELECT count(*) FROM api_keys WHERE account_id = $3) AS held",
        )
        .bind(key.id.0)
        .bind(key.hash.as_bytes().as_slice())
        .bind(key.account_id.0)
        .fetch_one(&mut *tx)
        .await
        .map_err(backend(ACTION))?;
        let c = Columns::new(row, ACTION);
        if c.flag("duplicate")? {
            return Err(StoreError::Duplicate { what: "api key" });
        }
        let held: i64 = c.get("held")?;
        if usize::try_from(held).unwrap_or(usize::MAX) >= max_per_account {
            return Ok(false);
        }
        let statement = sqlx::query(
            "INSERT INTO api_keys (id, account_id, hash, label, active, created_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(key.id.0)
        .bind(key.account_id.0)
        .bind(key.hash.as_bytes().as_slice())
        .bind(&key.label)
        .bind(key.active)
        .bind(key.created_at);
        insert_row(&mut *tx, statement, "api key", ACTION).await?;
        tx.commit().await.map_err(backend(ACTION))?;
        Ok(true)
    }

    async fn find_api_key(&self, hash: &SecretHash) -> Result<Option<ApiKeyRecord>, StoreError> {
        let statement = sqlx::query(
            "SELECT id, account_id, hash, label, active, created_at FROM api_keys WHERE hash = $1",
        )
        .bind(hash.as_bytes().as_slice());
        find_row(&self.pool, statement, "read an api key", |c| {
            api_key_from(c)
        })
        .await
    }

    async fn set_api_key_active(&self, id: ApiKeyId, active: bool) -> Result<bool, StoreError> {
        let done = sqlx::query("UPDATE api_keys SET active = $1 WHERE id = $2")
            .bind(active)
            .bind(id.0)
            .execute(&self.pool)
            .await
            .map_err(backend("switch an api key"))?;
        Ok(done.rows_affected() > 0)
    }

    async fn list_api_keys(&self, account: AccountId) -> Result<Vec<ApiKeyRecord>, StoreError> {
        // seq breaks ties between keys created in the same microsecond:
        // insertion order.
        sqlx::query(
            "SELECT id, account_id, hash, label, active, created_at FROM api_keys
             WHERE account_id = $1 ORDER BY created_at, seq",
        )
        .bind(account.0)
        .fetch_all(&self.pool)
        .await
        .map_err(backend("list api keys"))?
        .into_iter()
        .map(|row| api_key_from(&Columns::new(row, "read an api key")))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;

    #[test]
    fn account_lock_keys_fold_the_whole_uuid() {
        let a = AccountId(Uuid::from_bytes([1; 16]));
        let b = AccountId(Uuid::from_bytes([
            1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2,
        ]));
        assert_ne!(account_lock_key(a), account_lock_key(b));
        assert_eq!(account_lock_key(a), 0);
    }
}
