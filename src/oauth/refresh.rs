//! Refreshing (RFC 6749 section 6): load the presented token, decide under
//! the client's [`crate::RefreshPolicy`] ([`decide_refresh`]), and persist
//! the outcome in one store operation: rotate, hand out the successor again,
//! keep the token, or revoke the grant on reuse.

use crate::gateway::Gateway;
use crate::oauth::decisions::Caller;
use crate::oauth::decisions::{
    RefreshDecision, check_refresh_token, decide_refresh, is_active, refresh_token_record,
};
use crate::oauth::token_endpoint::TokenResponse;
use crate::oauth::token_error::TokenError;
use crate::records::client::Client;
use crate::records::grant::GrantId;
use crate::records::tokens::RefreshTokenRecord;
use crate::secret::{RefreshToken, SecretHash};
use crate::store::Rotation;
use crate::store::error::StoreError;

impl Gateway {
    /// The refresh grant for `client`, which presented `presented`.
    pub(super) async fn refresh(
        &self,
        client: &Client,
        presented: RefreshToken,
    ) -> Result<TokenResponse, TokenError> {
        let now = self.clock.now();
        let hash = presented.hash(&self.hasher);
        let policy = client.refresh_policy.unwrap_or(self.config.refresh_policy);
        let mut record = self.valid_refresh_token(&hash, client, now).await?;
        let caller = Caller {
            account_id: record.account_id,
            client_id: record.client_id.clone(),
            grant_id: record.grant_id,
        };
        let mut decision = decide_refresh(&record, policy, now);
        if decision == RefreshDecision::Rotate {
            let successor = presented.successor(&self.hasher);
            let successor_record = refresh_token_record(
                &successor,
                Some(hash),
                &caller,
                now,
                &self.config,
                &self.hasher,
            );
            let (access_token, access) = self.new_access_token(&caller, now);
            // One atomic step: should it fail, the presented token is still
            // active and the client's retry is a refresh like the first,
            // not a reuse.
            let timer = self
                .metrics
                .store_operation("tokens", "rotate_refresh_token");
            let rotation = self
                .stores
                .tokens
                .rotate_refresh_token(&hash, &successor_record, &access, now)
                .await?;
            timer.done();
            match rotation {
                Rotation::Rotated => {
                    self.metrics.refresh("rotated");
                    self.metrics.token_issued("refresh_token");
                    return Ok(self.stored_tokens(access_token, successor, caller));
                }
                // Lost a race with a concurrent refresh of the same token:
                // decide again on the token as the winner left it.
                Rotation::AlreadyRotated { .. } => {
                    record = self.valid_refresh_token(&hash, client, now).await?;
                    decision = decide_refresh(&record, policy, now);
                }
                Rotation::Revoked | Rotation::NotFound => {
                    return Err(TokenError::InvalidRefreshToken);
                }
            }
        }
        match decision {
            RefreshDecision::KeepToken => {
                let issued = self.issue_access(caller, presented, now).await;
                if issued.is_ok() {
                    self.metrics.refresh("kept");
                    self.metrics.token_issued("refresh_token");
                }
                issued
            }
            RefreshDecision::ReissueSuccessor(successor_hash) => {
                self.reissue_successor(caller, &presented, successor_hash, now)
                    .await
            }
            RefreshDecision::RevokeGrant => self.reused(caller.grant_id, now).await,
            // The token read back after a lost race is rotated; a store that
            // reports it rotated and then active is not keeping its
            // contract.
            RefreshDecision::Rotate => Err(TokenError::Store(StoreError::backend(
                "rotate a refresh token",
                RotationContended,
            ))),
        }
    }

    /// The refresh token hashed to `hash`, if it exists and `client` may use
    /// it now (its rotation state is decided separately).
    async fn valid_refresh_token(
        &self,
        hash: &SecretHash,
        client: &Client,
        now: time::OffsetDateTime,
    ) -> Result<RefreshTokenRecord, TokenError> {
        let timer = self.metrics.store_operation("tokens", "find_refresh_token");
        let found = self.stores.tokens.find_refresh_token(hash).await;
        timer.done();
        let record = found?.ok_or(TokenError::InvalidRefreshToken)?;
        // Revoked, another client's or expired: one answer for all, so that
        // the answer tells a thief nothing about the token it holds.
        check_refresh_token(&record, &client.id, now)
            .map_err(|_refusal| TokenError::InvalidRefreshToken)?;
        Ok(record)
    }

    /// Answers with the successor already issued for `presented`, and a new
    /// access token, if that successor is still the live one; otherwise the
    /// use of `presented` is reuse.
    async fn reissue_successor(
        &self,
        caller: Caller,
        presented: &RefreshToken,
        successor_hash: SecretHash,
        now: time::OffsetDateTime,
    ) -> Result<TokenResponse, TokenError> {
        // Successors are derived from their predecessor under the server
        // key, so the one issued can be handed out again without keeping it.
        let successor = presented.successor(&self.hasher);
        if successor.hash(&self.hasher) == successor_hash
            && self.successor_is_live(&successor_hash).await?
        {
            let issued = self.issue_access(caller, successor, now).await;
            if issued.is_ok() {
                self.metrics.refresh("grace_replay");
                self.metrics.token_issued("refresh_token");
            }
            return issued;
        }
        self.reused(caller.grant_id, now).await
    }

    /// Whether the refresh token hashed to `successor` is still the live
    /// one of its grant (stored, not rotated, its grant not revoked): only
    /// then is handing it out again a concurrent refresh and not reuse.
    pub(super) async fn successor_is_live(
        &self,
        successor: &SecretHash,
    ) -> Result<bool, StoreError> {
        let live = self.stores.tokens.find_refresh_token(successor).await?;
        Ok(live.is_some_and(|record| is_active(&record) && !record.revoked))
    }

    /// A retired refresh token used again: the grant is revoked, since the
    /// token may be in a thief's hands (RFC 9700 section 4.14.2).
    async fn reused(
        &self,
        grant_id: GrantId,
        now: time::OffsetDateTime,
    ) -> Result<TokenResponse, TokenError> {
        self.stores.tokens.revoke_grant(grant_id, now).await?;
        self.metrics.refresh("reuse_detected");
        Err(TokenError::InvalidRefreshToken)
    }
}

/// A refresh token stayed active and unrotatable: the store reported it
/// rotated by a concurrent caller, then read it back active.
#[derive(Debug, thiserror::Error)]
#[error("the refresh token kept changing while it was being rotated")]
struct RotationContended;
