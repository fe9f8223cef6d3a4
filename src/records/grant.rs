//! Grants: one authorization of one application by one account.

use std::fmt;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::account::AccountId;
use crate::records::client::ClientId;

/// The identifier of a grant. Every code and token issued under a grant
/// carries it, so that the whole grant can be revoked at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct GrantId(pub Uuid);

impl fmt::Display for GrantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// One authorization of one application by one account.
///
/// A grant is created when the user consents in the dialog and survives
/// every refresh; authorizing again creates a new grant. Revoking it revokes
/// every token issued under it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The identifier.
    pub id: GrantId,
    /// The application that was authorized.
    pub client_id: ClientId,
    /// The account that authorized it.
    pub account_id: AccountId,
    /// When the user consented.
    pub created_at: OffsetDateTime,
    /// When the grant was revoked, if it was.
    pub revoked_at: Option<OffsetDateTime>,
    /// When a refresh token of the grant was last exchanged for new tokens,
    /// if ever: for the account's list of connected applications.
    pub last_refreshed_at: Option<OffsetDateTime>,
}
