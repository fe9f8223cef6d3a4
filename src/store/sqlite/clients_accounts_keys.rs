//! [`ClientRegistry`], [`AccountStore`] and [`ApiKeyStore`] on SQLite: the
//! registered applications, the accounts, and their API keys.
//!
//! The per-account limit of API keys is counted and enforced in a
//! `BEGIN IMMEDIATE` transaction, under the write lock.

use async_trait::async_trait;
use sqlx::Sqlite;
use time::OffsetDateTime;

use crate::account::{Account, AccountId};
use crate::records::api_key::{ApiKeyId, ApiKeyRecord};
use crate::records::client::{Client, ClientId};
use crate::secret::SecretHash;
use crate::store::error::StoreError;
use crate::store::sql::records::{account_from, api_key_from, client_from};
use crate::store::sql::{Statement, backend, find_row, insert_row};
use crate::store::{AccountStore, ApiKeyStore, ClientRegistry};

use super::SqliteStore;
use super::columns::{Columns, json_text, micros, opt_micros, uuid_text};

#[async_trait]
impl ClientRegistry for SqliteStore {
    async fn ready(&self) -> Result<(), StoreError> {
        self.ping().await
    }

    async fn register_client(&self, client: &Client) -> Result<(), StoreError> {
        let statement = sqlx::query(
            "INSERT INTO clients
                 (id, name, secret_hash, redirect_uris, require_pkce, refresh_policy, active,
                  previous_secret_hash, previous_secret_valid_until)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(client.id.as_str())
        .bind(&client.name)
        .bind(client.secret_hash.as_bytes().as_slice())
        .bind(json_text(&client.redirect_uris)?)
        .bind(client.require_pkce)
        .bind(client.refresh_policy.map(|policy| policy.to_stored()))
        .bind(client.active)
        .bind(
            client
                .previous_secret
                .as_ref()
                .map(|previous| previous.hash.as_bytes().to_vec()),
        )
        .bind(opt_micros(
            client.previous_secret.as_ref().map(|p| p.valid_until),
        )?);
        let _turn = self.write_turn().await;
        insert_row(&self.writer, statement, "client", "register a client").await
    }

    async fn find_client(&self, id: &ClientId) -> Result<Option<Client>, StoreError> {
        let statement = sqlx::query(
            "SELECT id, name, secret_hash, redirect_uris, require_pkce, refresh_policy, active,
                    previous_secret_hash, previous_secret_valid_until
             FROM clients WHERE id = ?",
        )
        .bind(id.as_str());
        find_row(&self.reader, statement, "read a client", client_from).await
    }

    async fn rotate_client_secret(
        &self,
        id: &ClientId,
        secret_hash: &SecretHash,
        previous_valid_until: OffsetDateTime,
    ) -> Result<bool, StoreError> {
        // One statement: SQLite reads `secret_hash` on the right-hand side
        // before it writes the row, so the old secret becomes the previous.
        let statement = sqlx::query(
            "UPDATE clients SET previous_secret_hash = secret_hash,
                 previous_secret_valid_until = ?, secret_hash = ?
             WHERE id = ?",
        )
        .bind(micros(previous_valid_until)?)
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
        let statement = sqlx::query("UPDATE clients SET redirect_uris = ? WHERE id = ?")
            .bind(json_text(&redirect_uris)?)
            .bind(id.as_str());
        self.update_client(statement, "change redirect uris").await
    }

    async fn set_client_active(&self, id: &ClientId, active: bool) -> Result<bool, StoreError> {
        let statement = sqlx::query("UPDATE clients SET active = ? WHERE id = ?")
            .bind(active)
            .bind(id.as_str());
        self.update_client(statement, "switch a client").await
    }
}

impl SqliteStore {
    /// Runs `statement`, an `UPDATE` of one client; whether it found it.
    async fn update_client(
        &self,
        statement: Statement<'_, Sqlite>,
        action: &'static str,
    ) -> Result<bool, StoreError> {
        let _turn = self.write_turn().await;
        let done = statement
            .execute(&self.writer)
            .await
            .map_err(backend(action))?;
        Ok(done.rows_affected() > 0)
    }
}

#[async_trait]
impl AccountStore for SqliteStore {
    async fn ready(&self) -> Result<(), StoreError> {
        self.ping().await
    }

    async fn insert_account(&self, account: &Account) -> Result<(), StoreError> {
        // The primary key and the UNIQUE e-mail both answer `Duplicate`.
        let statement = sqlx::query(
            "INSERT INTO accounts (id, name, email, password_hash, custom_fields)
             VALUES (?, ?, ?, ?, ?)",
        )
        .bind(uuid_text(account.id.0))
        .bind(&account.name)
        .bind(&account.email)
        .bind(account.password_hash.as_deref())
        .bind(json_text(&account.custom_fields)?);
        let _turn = self.write_turn().await;
        insert_row(&self.writer, statement, "account", "insert an account").await
    }

    async fn find_account(&self, id: AccountId) -> Result<Option<Account>, StoreError> {
        let statement = sqlx::query(
            "SELECT id, name, email, password_hash, custom_fields FROM accounts WHERE id = ?",
        )
        .bind(uuid_text(id.0));
        find_row(&self.reader, statement, "read an account", |c| {
            account_from(c)
        })
        .await
    }

    async fn find_account_by_email(&self, email: &str) -> Result<Option<Account>, StoreError> {
        let statement = sqlx::query(
            "SELECT id, name, email, password_hash, custom_fields FROM accounts WHERE email = ?",
        )
        .bind(email);
        find_row(&self.reader, statement, "read an account", |c| {
            account_from(c)
        })
        .await
    }
}

#[async_trait]
impl ApiKeyStore for SqliteStore {
    async fn ready(&self) -> Result<(), StoreError> {
        self.ping().await
    }

    async fn insert_api_key(
        &self,
        key: &ApiKeyRecord,
        max_per_account: usize,
    ) -> Result<bool, StoreError> {
        const ACTION: &str = "insert an api key";
        // Count and insert under the write lock: two callers cannot both see
        // room for the last key.
        let (_turn, mut tx) = self.write_transaction(ACTION).await?;
        let exists: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM api_keys WHERE id = ? OR hash = ?)")
                .bind(uuid_text(key.id.0))
                .bind(key.hash.as_bytes().as_slice())
                .fetch_one(&mut *tx)
                .await
                .map_err(backend(ACTION))?;
        if exists {
            return Err(StoreError::Duplicate { what: "api key" });
        }
        let held: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM api_keys WHERE account_id = ?")
            .bind(uuid_text(key.account_id.0))
            .fetch_one(&mut *tx)
            .await
            .map_err(backend(ACTION))?;
        if usize::try_from(held).unwrap_or(usize::MAX) >= max_per_account {
            return Ok(false);
        }
        let statement = sqlx::query(
            "INSERT INTO api_keys (id, account_id, hash, label, active, created_at)
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(uuid_text(key.id.0))
        .bind(uuid_text(key.account_id.0))
        .bind(key.hash.as_bytes().as_slice())
        .bind(&key.label)
        .bind(key.active)
        .bind(micros(key.created_at)?);
        insert_row(&mut *tx, statement, "api key", ACTION).await?;
        tx.commit().await.map_err(backend(ACTION))?;
        Ok(true)
    }

    async fn find_api_key(&self, hash: &SecretHash) -> Result<Option<ApiKeyRecord>, StoreError> {
        let statement = sqlx::query(
            "SELECT id, account_id, hash, label, active, created_at FROM api_keys WHERE hash = ?",
        )
        .bind(hash.as_bytes().as_slice());
        find_row(&self.reader, statement, "read an api key", |c| {
            api_key_from(c)
        })
        .await
    }

    async fn set_api_key_active(&self, id: ApiKeyId, active: bool) -> Result<bool, StoreError> {
        let _turn = self.write_turn().await;
        let done = sqlx::query("UPDATE api_keys SET active = ? WHERE id = ?")
            .bind(active)
            .bind(uuid_text(id.0))
            .execute(&self.writer)
            .await
            .map_err(backend("switch an api key"))?;
        Ok(done.rows_affected() > 0)
    }

    async fn list_api_keys(&self, account: AccountId) -> Result<Vec<ApiKeyRecord>, StoreError> {
        // rowid breaks ties between keys created in the same microsecond:
        // insertion order.
        sqlx::query(
            "SELECT id, account_id, hash, label, active, created_at FROM api_keys
             WHERE account_id = ? ORDER BY created_at, rowid",
        )
        .bind(uuid_text(account.0))
        .fetch_all(&self.reader)
        .await
        .map_err(backend("list api keys"))?
        .into_iter()
        .map(|row| api_key_from(&Columns::new(row, "read an api key")))
        .collect()
    }
}
