//! The token lifecycle as pure decisions: each function takes the loaded
//! records and `now`, and says what is allowed. No store, clock or random
//! source is touched here; [`crate::Gateway`] loads, calls these, persists.
//! Each refusal is a type of its own; the endpoint that asked turns it into
//! the error its clients expect.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use time::OffsetDateTime;

use crate::account::AccountId;
use crate::config::GatewayConfig;
use crate::records::client::ClientId;
use crate::records::grant::GrantId;
use crate::records::refresh_policy::RefreshPolicy;
use crate::records::tokens::{
    AccessTokenRecord, CodeRecord, PkceChallenge, RefreshState, RefreshTokenRecord,
};
use crate::secret::{AccessToken, RefreshToken, SecretHash, SecretHasher};

/// The account, application and grant a token acts for: who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The account the token acts on.
    pub account_id: AccountId,
    /// The application holding the token.
    pub client_id: ClientId,
    /// The grant the token was issued under.
    pub grant_id: GrantId,
}

/// Whether `text` is a valid PKCE code verifier or S256 challenge: 43 to 128
/// characters of RFC 3986's unreserved set (RFC 7636 sections 4.1 and 4.2).
pub(crate) fn is_pkce_value(text: &str) -> bool {
    (43..=128).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// Whether `verifier` matches `challenge` under method S256 (RFC 7636
/// section 4.6), compared in constant time.
pub(crate) fn pkce_matches(challenge: &PkceChallenge, verifier: &str) -> bool {
    if !is_pkce_value(verifier) {
        return false;
    }
    let computed = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    computed
        .as_bytes()
        .ct_eq(challenge.challenge.as_bytes())
        .into()
}

/// Why a code may not be exchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CodeRefusal {
    /// Issued to another client (RFC 6749 section 4.1.3: "ensure that the
    /// authorization code was issued to the authenticated confidential
    /// client").
    OtherClient,
    /// `redirect_uri` was sent and is not the one the code was issued for
    /// (section 4.1.3: "ensure that the redirect_uri parameter is present
    /// if [it] was included in the initial authorization request ... and if
    /// included ensure that their values are identical").
    OtherRedirectUri,
    /// `now` reached the code's expiry.
    Expired,
    /// The PKCE verifier is missing or wrong, or was sent for a code issued
    /// without a challenge (RFC 9700 section 2.1.1: accepting it would let
    /// an attacker downgrade PKCE away).
    VerifierMismatch,
}

/// Decides whether a just-consumed code may be exchanged by `client` now.
pub(crate) fn check_code_exchange(
    code: &CodeRecord,
    client: &ClientId,
    redirect_uri: Option<&str>,
    code_verifier: Option<&str>,
    now: OffsetDateTime,
) -> Result<(), CodeRefusal> {
    if code.client_id != *client {
        return Err(CodeRefusal::OtherClient);
    }
    if redirect_uri.is_some_and(|uri| uri != code.redirect_uri) {
        return Err(CodeRefusal::OtherRedirectUri);
    }
    if now >= code.expires_at {
        return Err(CodeRefusal::Expired);
    }
    match (&code.pkce, code_verifier) {
        (None, None) => Ok(()),
        (Some(challenge), Some(verifier)) if pkce_matches(challenge, verifier) => Ok(()),
        _ => Err(CodeRefusal::VerifierMismatch),
    }
}

/// Why a refresh token may not be used, whatever its rotation state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RefreshRefusal {
    /// Its grant was revoked.
    Revoked,
    /// It was issued to another client (RFC 6749 section 6: "validate the
    /// refresh token and ensure that it was issued to the authenticated
    /// client").
    OtherClient,
    /// Its lifetime has passed.
    Expired,
}

/// Decides whether a refresh token, as loaded, may be used by `client` now.
/// Its rotation state is judged separately, by [`decide_refresh`] under the
/// client's [`RefreshPolicy`].
pub(crate) fn check_refresh_token(
    token: &RefreshTokenRecord,
    client: &ClientId,
    now: OffsetDateTime,
) -> Result<(), RefreshRefusal> {
    if token.revoked {
        return Err(RefreshRefusal::Revoked);
    }
    if token.client_id != *client {
        return Err(RefreshRefusal::OtherClient);
    }
    if token.expires_at.is_some_and(|expires_at| now >= expires_at) {
        return Err(RefreshRefusal::Expired);
    }
    Ok(())
}

/// What a refresh with a token that passed [`check_refresh_token`] does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RefreshDecision {
    /// Issue a successor, stored with the new access token, and mark the
    /// presented token as rotated.
    Rotate,
    /// Answer with the presented token itself again
    /// ([`RefreshPolicy::Reuse`]).
    KeepToken,
    /// Answer with the successor already issued for the presented token, if
    /// it is still live: a concurrent refresh within the grace window, or
    /// the first token of a grant whose successor was never used
    /// ([`RefreshPolicy::Adaptive`]).
    ReissueSuccessor(SecretHash),
    /// A retired token used again: the grant is revoked (RFC 9700 section
    /// 4.14.2, "if a refresh token is compromised and subsequently used by
    /// both the attacker and the legitimate client, one of them will present
    /// an invalidated refresh token, which will inform the authorization
    /// server of the breach").
    RevokeGrant,
}

/// Decides what a refresh with `token` does at `now` under `policy`.
pub(crate) fn decide_refresh(
    token: &RefreshTokenRecord,
    policy: RefreshPolicy,
    now: OffsetDateTime,
) -> RefreshDecision {
    let (at, successor, successor_used_at) = match &token.state {
        RefreshState::Active => {
            return match policy {
                RefreshPolicy::Reuse => RefreshDecision::KeepToken,
                RefreshPolicy::Adaptive { .. } | RefreshPolicy::Rotate { .. } => {
                    RefreshDecision::Rotate
                }
            };
        }
        RefreshState::Rotated {
            at,
            successor,
            successor_used_at,
        } => (*at, *successor, *successor_used_at),
    };
    let first_of_grant = token.predecessor.is_none();
    let retired_at = match (policy, first_of_grant, successor_used_at) {
        // The adaptive policy keeps a grant's first token valid until the
        // client shows, by using the successor, that it stores new tokens.
        // So does reuse, which a host switches to for exactly the clients
        // that never store one: a first token rotated under the adaptive
        // policy before the switch must not lock such a client out.
        (RefreshPolicy::Adaptive { .. } | RefreshPolicy::Reuse, true, None) => {
            return RefreshDecision::ReissueSuccessor(successor);
        }
        (RefreshPolicy::Adaptive { .. } | RefreshPolicy::Reuse, true, Some(used_at)) => used_at,
        _ => at,
    };
    if now - retired_at <= policy.grace() {
        RefreshDecision::ReissueSuccessor(successor)
    } else {
        RefreshDecision::RevokeGrant
    }
}

/// Whether a refresh token is still in its active state.
pub(crate) fn is_active(token: &RefreshTokenRecord) -> bool {
    matches!(token.state, RefreshState::Active)
}

/// The record of a new access token for `caller`, issued `now`.
pub(crate) fn access_token_record(
    token: &AccessToken,
    caller: &Caller,
    now: OffsetDateTime,
    config: &GatewayConfig,
    hasher: &SecretHasher,
) -> AccessTokenRecord {
    AccessTokenRecord {
        hash: token.hash(hasher),
        grant_id: caller.grant_id,
        client_id: caller.client_id.clone(),
        account_id: caller.account_id,
        issued_at: now,
        expires_at: now + config.access_token_lifetime,
        revoked: false,
    }
}

/// The record of a new refresh token for `caller`, issued `now`, as the
/// successor of `predecessor` (`None` for a grant's first token).
pub(crate) fn refresh_token_record(
    token: &RefreshToken,
    predecessor: Option<SecretHash>,
    caller: &Caller,
    now: OffsetDateTime,
    config: &GatewayConfig,
    hasher: &SecretHasher,
) -> RefreshTokenRecord {
    RefreshTokenRecord {
        hash: token.hash(hasher),
        grant_id: caller.grant_id,
        client_id: caller.client_id.clone(),
        account_id: caller.account_id,
        issued_at: now,
        expires_at: config.refresh_token_lifetime.map(|lifetime| now + lifetime),
        predecessor,
        state: RefreshState::Active,
        revoked: false,
    }
}

/// Decides whether a loaded access token authenticates its bearer now.
/// The token lives until `now` reaches `expires_at`: at exactly the lifetime
/// it has expired.
pub(crate) fn check_access_token(
    token: &AccessTokenRecord,
    now: OffsetDateTime,
) -> Result<Caller, AccessRefusal> {
    if token.revoked {
        return Err(AccessRefusal::Revoked);
    }
    if now >= token.expires_at {
        return Err(AccessRefusal::Expired);
    }
    Ok(Caller {
        account_id: token.account_id,
        client_id: token.client_id.clone(),
        grant_id: token.grant_id,
    })
}

/// Why a loaded access token does not authenticate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AccessRefusal {
    /// Its grant was revoked.
    Revoked,
    /// Its lifetime has passed.
    Expired,
}

#[cfg(test)]
mod tests {
    use time::Duration;
    use time::macros::datetime;
    use uuid::Uuid;

    use super::*;
    use crate::random::SeededRandom;

    const NOW: OffsetDateTime = datetime!(2026-01-01 00:00:00 UTC);

    fn caller() -> Caller {
        Caller {
            account_id: AccountId(Uuid::nil()),
            client_id: ClientId::new("app"),
            grant_id: GrantId(Uuid::nil()),
        }
    }

    fn code(pkce: Option<&str>) -> CodeRecord {
        CodeRecord {
            hash: SecretHash::from_bytes([0; 32]),
            grant_id: GrantId(Uuid::nil()),
            client_id: ClientId::new("app"),
            account_id: AccountId(Uuid::nil()),
            redirect_uri: "https://app.example/cb".into(),
            pkce: pkce.map(|c| PkceChallenge {
                challenge: c.into(),
            }),
            issued_at: NOW,
            expires_at: NOW + Duration::minutes(10),
        }
    }

    // RFC 7636 appendix B.
    const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
    const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

    #[test]
    fn pkce_matches_the_rfc_example() {
        let challenge = PkceChallenge {
            challenge: CHALLENGE.into(),
        };
        assert!(pkce_matches(&challenge, VERIFIER));
        assert!(!pkce_matches(&challenge, &VERIFIER.replace('d', "e")));
        assert!(!pkce_matches(&challenge, "short"));
        assert!(is_pkce_value(CHALLENGE));
        assert!(!is_pkce_value(&"a".repeat(129)));
        assert!(!is_pkce_value(&format!("{}!", &VERIFIER[..43])));
    }

    #[test]
    fn code_checks_client_redirect_expiry_and_pkce() {
        let app = ClientId::new("app");
        assert!(check_code_exchange(&code(None), &app, None, None, NOW).is_ok());
        assert!(matches!(
            check_code_exchange(&code(None), &ClientId::new("other"), None, None, NOW),
            Err(CodeRefusal::OtherClient)
        ));
        assert!(matches!(
            check_code_exchange(&code(None), &app, Some("https://evil.example"), None, NOW),
            Err(CodeRefusal::OtherRedirectUri)
        ));
        let last_moment = NOW + Duration::minutes(10) - Duration::nanoseconds(1);
        assert!(check_code_exchange(&code(None), &app, None, None, last_moment).is_ok());
        assert!(matches!(
            check_code_exchange(&code(None), &app, None, None, NOW + Duration::minutes(10)),
            Err(CodeRefusal::Expired)
        ));
        let with_pkce = code(Some(CHALLENGE));
        assert!(check_code_exchange(&with_pkce, &app, None, Some(VERIFIER), NOW).is_ok());
        assert!(matches!(
            check_code_exchange(&with_pkce, &app, None, None, NOW),
            Err(CodeRefusal::VerifierMismatch)
        ));
        assert!(matches!(
            check_code_exchange(&code(None), &app, None, Some(VERIFIER), NOW),
            Err(CodeRefusal::VerifierMismatch)
        ));
    }

    #[test]
    fn access_tokens_expire_at_exactly_their_lifetime() {
        let config = GatewayConfig::new("https://api.example");
        let hasher = SecretHasher::new([1; 32]);
        let token = AccessToken::generate(&SeededRandom::new(1));
        let record = access_token_record(&token, &caller(), NOW, &config, &hasher);
        let just_before = NOW + Duration::seconds(86_400) - Duration::nanoseconds(1);
        assert_eq!(check_access_token(&record, just_before), Ok(caller()));
        assert_eq!(
            check_access_token(&record, NOW + Duration::seconds(86_400)),
            Err(AccessRefusal::Expired)
        );
        let revoked = AccessTokenRecord {
            revoked: true,
            ..record
        };
        assert_eq!(
            check_access_token(&revoked, NOW),
            Err(AccessRefusal::Revoked)
        );
    }

    fn rotated(
        predecessor: Option<SecretHash>,
        successor_used_at: Option<OffsetDateTime>,
    ) -> RefreshTokenRecord {
        let config = GatewayConfig::new("https://api.example");
        let hasher = SecretHasher::new([1; 32]);
        let token = RefreshToken::generate(&SeededRandom::new(3));
        RefreshTokenRecord {
            state: RefreshState::Rotated {
                at: NOW,
                successor: SecretHash::from_bytes([9; 32]),
                successor_used_at,
            },
            ..refresh_token_record(&token, predecessor, &caller(), NOW, &config, &hasher)
        }
    }

    const SUCCESSOR: SecretHash = SecretHash::from_bytes([9; 32]);

    #[test]
    fn active_tokens_rotate_unless_the_policy_reuses_them() {
        let config = GatewayConfig::new("https://api.example");
        let hasher = SecretHasher::new([1; 32]);
        let token = RefreshToken::generate(&SeededRandom::new(4));
        let active = refresh_token_record(&token, None, &caller(), NOW, &config, &hasher);
        let grace = Duration::seconds(30);
        for policy in [
            RefreshPolicy::Adaptive { grace },
            RefreshPolicy::Rotate { grace },
        ] {
            assert_eq!(
                decide_refresh(&active, policy, NOW),
                RefreshDecision::Rotate
            );
        }
        assert_eq!(
            decide_refresh(&active, RefreshPolicy::Reuse, NOW),
            RefreshDecision::KeepToken
        );
    }

    #[test]
    fn strict_rotation_allows_a_retired_token_only_within_the_grace_window() {
        let policy = RefreshPolicy::Rotate {
            grace: Duration::seconds(30),
        };
        // Under strict rotation the first token of a grant is no different.
        for predecessor in [None, Some(SecretHash::from_bytes([5; 32]))] {
            let token = rotated(predecessor, None);
            assert_eq!(
                decide_refresh(&token, policy, NOW + Duration::seconds(30)),
                RefreshDecision::ReissueSuccessor(SUCCESSOR)
            );
            assert_eq!(
                decide_refresh(&token, policy, NOW + Duration::seconds(31)),
                RefreshDecision::RevokeGrant
            );
        }
    }

    #[test]
    fn reuse_keeps_the_meaning_of_tokens_retired_before_the_switch() {
        // Reuse retires nothing, but tokens retired before keep their
        // meaning: a later token, rotated, is reuse at once.
        let later = rotated(Some(SecretHash::from_bytes([5; 32])), None);
        assert_eq!(
            decide_refresh(&later, RefreshPolicy::Reuse, NOW),
            RefreshDecision::ReissueSuccessor(SUCCESSOR)
        );
        assert_eq!(
            decide_refresh(&later, RefreshPolicy::Reuse, NOW + Duration::seconds(1)),
            RefreshDecision::RevokeGrant
        );
        // A grant's first token, rotated under the adaptive policy and
        // never followed: honoured as the adaptive policy honours it, so a
        // host switching such a client to reuse does not lock it out.
        let first = rotated(None, None);
        assert_eq!(
            decide_refresh(&first, RefreshPolicy::Reuse, NOW + Duration::days(30)),
            RefreshDecision::ReissueSuccessor(SUCCESSOR)
        );
        // Once its successor was used, the first token is retired from then.
        let used_at = NOW + Duration::days(2);
        let retired = rotated(None, Some(used_at));
        assert_eq!(
            decide_refresh(&retired, RefreshPolicy::Reuse, used_at),
            RefreshDecision::ReissueSuccessor(SUCCESSOR)
        );
        assert_eq!(
            decide_refresh(
                &retired,
                RefreshPolicy::Reuse,
                used_at + Duration::seconds(1)
            ),
            RefreshDecision::RevokeGrant
        );
    }

    #[test]
    fn adaptive_rotation_keeps_the_first_token_until_its_successor_is_used() {
        let policy = RefreshPolicy::Adaptive {
            grace: Duration::seconds(30),
        };
        let first = rotated(None, None);
        assert_eq!(
            decide_refresh(&first, policy, NOW + Duration::days(30)),
            RefreshDecision::ReissueSuccessor(SUCCESSOR),
            "an unused successor keeps the first token valid"
        );
        let used_at = NOW + Duration::days(2);
        let retired = rotated(None, Some(used_at));
        assert_eq!(
            decide_refresh(&retired, policy, used_at + Duration::seconds(30)),
            RefreshDecision::ReissueSuccessor(SUCCESSOR),
            "within the grace window of its retirement"
        );
        assert_eq!(
            decide_refresh(&retired, policy, used_at + Duration::seconds(31)),
            RefreshDecision::RevokeGrant,
            "the first token after its successor was used is reuse"
        );
        // Every later token rotates strictly, from its own rotation.
        let later = rotated(Some(SecretHash::from_bytes([5; 32])), None);
        assert_eq!(
            decide_refresh(&later, policy, NOW + Duration::seconds(30)),
            RefreshDecision::ReissueSuccessor(SUCCESSOR)
        );
        assert_eq!(
            decide_refresh(&later, policy, NOW + Duration::seconds(31)),
            RefreshDecision::RevokeGrant
        );
    }

    #[test]
    fn refresh_tokens_check_revocation_client_and_expiry() {
        let mut config = GatewayConfig::new("https://api.example");
        config.refresh_token_lifetime = Some(Duration::days(30));
        let hasher = SecretHasher::new([1; 32]);
        let token = RefreshToken::generate(&SeededRandom::new(2));
        let record = refresh_token_record(&token, None, &caller(), NOW, &config, &hasher);
        let app = ClientId::new("app");
        assert_eq!(check_refresh_token(&record, &app, NOW), Ok(()));
        let last_moment = NOW + Duration::days(30) - Duration::nanoseconds(1);
        assert_eq!(check_refresh_token(&record, &app, last_moment), Ok(()));
        assert_eq!(
            check_refresh_token(&record, &ClientId::new("other"), NOW),
            Err(RefreshRefusal::OtherClient)
        );
        assert_eq!(
            check_refresh_token(&record, &app, NOW + Duration::days(30)),
            Err(RefreshRefusal::Expired)
        );
        let revoked = RefreshTokenRecord {
            revoked: true,
            ..record
        };
        assert_eq!(
            check_refresh_token(&revoked, &app, NOW),
            Err(RefreshRefusal::Revoked)
        );
    }
}
