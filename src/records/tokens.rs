//! Stored records of authorization codes, access tokens and refresh tokens.
//!
//! Each record holds the keyed hash of its secret, never the secret.

use time::OffsetDateTime;

use crate::account::AccountId;
use crate::records::client::ClientId;
use crate::records::grant::GrantId;
use crate::secret::SecretHash;

/// A PKCE code challenge (RFC 7636) bound to an authorization code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PkceChallenge {
    /// The challenge: `BASE64URL(SHA256(code_verifier))` for method `S256`.
    pub challenge: String,
}

/// A stored authorization code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeRecord {
    /// The keyed hash of the code.
    pub hash: SecretHash,
    /// The grant the code belongs to (created at consent).
    pub grant_id: GrantId,
    /// The application the code was issued to.
    pub client_id: ClientId,
    /// The account that consented.
    pub account_id: AccountId,
    /// The redirect URI the code was delivered to.
    pub redirect_uri: String,
    /// The PKCE challenge, when the authorization request carried one.
    pub pkce: Option<PkceChallenge>,
    /// When the code was issued.
    pub issued_at: OffsetDateTime,
    /// When the code stops being exchangeable.
    pub expires_at: OffsetDateTime,
}

/// A stored access token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessTokenRecord {
    /// The keyed hash of the token.
    pub hash: SecretHash,
    /// The grant it was issued under.
    pub grant_id: GrantId,
    /// The application it was issued to.
    pub client_id: ClientId,
    /// The account it acts on.
    pub account_id: AccountId,
    /// When it was issued.
    pub issued_at: OffsetDateTime,
    /// When it expires (issue time plus the configured lifetime, 86400 s).
    pub expires_at: OffsetDateTime,
    /// Whether its grant has been revoked. Stores fill this in on every read
    /// from the grant's state; it is ignored on insert.
    pub revoked: bool,
}

/// Where a refresh token stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RefreshState {
    /// Usable (unless its grant is revoked or it has expired).
    Active,
    /// A successor was issued for it. Kept as a tombstone so that a later
    /// use is recognised as reuse of the grant (RFC 9700 section 4.14), or,
    /// for the first token of a grant under
    /// [`crate::RefreshPolicy::Adaptive`], still valid until its successor
    /// is used.
    Rotated {
        /// When the successor was issued.
        at: OffsetDateTime,
        /// The hash of the successor.
        successor: SecretHash,
        /// When the successor was itself first used to refresh (its own
        /// rotation time), if it was. Stores fill this in on every read
        /// from the successor's record; it is ignored on writes.
        successor_used_at: Option<OffsetDateTime>,
    },
}

/// A stored refresh token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefreshTokenRecord {
    /// The keyed hash of the token.
    pub hash: SecretHash,
    /// The grant it was issued under.
    pub grant_id: GrantId,
    /// The application it was issued to.
    pub client_id: ClientId,
    /// The account it acts on.
    pub account_id: AccountId,
    /// When it was issued.
    pub issued_at: OffsetDateTime,
    /// When it expires; `None` (the default policy) for never.
    pub expires_at: Option<OffsetDateTime>,
    /// The token it succeeded, or `None` for the first refresh token of its
    /// grant (the one a code exchange issued).
    pub predecessor: Option<SecretHash>,
    /// Whether it has been rotated. Inserted records are `Active`.
    pub state: RefreshState,
    /// Whether its grant has been revoked. Stores fill this in on every read
    /// from the grant's state; it is ignored on insert.
    pub revoked: bool,
}
