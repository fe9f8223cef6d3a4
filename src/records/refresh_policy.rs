//! What happens to a refresh token when it is used: strict rotation, reuse,
//! or the default that adapts to the client.

use std::str::FromStr;

use time::Duration;

/// What happens to a refresh token when it is used.
///
/// # Choosing a policy
///
/// RFC 9700 section 4.14.2 asks for refresh tokens that are either
/// sender-constrained or rotated, so that a stolen token is detected when
/// the thief and the client both use it; the clients here authenticate with
/// a secret (they are confidential clients), for which RFC 6749 section 10.4
/// already binds the refresh token to the client. Rotation is still worth
/// having: a leaked database of client secrets or a leaked token store of a
/// client is not unheard of. But the official client of the API this crate
/// serves never stores the refresh token a refresh returns: it presents its
/// first one forever. Strict rotation ([`RefreshPolicy::Rotate`]) locks it
/// out at its second refresh; never rotating ([`RefreshPolicy::Reuse`])
/// gives every client up theft detection.
///
/// [`RefreshPolicy::Adaptive`], the default, serves both. The first refresh
/// token of a grant (the one the code exchange issued) stays valid after a
/// refresh until the client first uses the successor it was given; until
/// then, each use of it answers that same successor (and a new access
/// token). A client that stores new refresh tokens shows it by using the
/// successor: from then on it is held to strict rotation, and presenting
/// any retired token of the grant (beyond the grace window) revokes the
/// grant. A client that never stores them keeps working with its first
/// token, as under [`RefreshPolicy::Reuse`]; and should a thief holding
/// that token rotate it, the client's next use of the retired first token
/// is detected as reuse and revokes the thief's tokens with the grant.
///
/// Others make comparable trade-offs: ory/fosite rotates strictly with an
/// optional grace period in which the old token keeps working; Okta rotates
/// with a configurable grace period (default 30 s) and revokes the grant on
/// reuse after it; Keycloak, with "Revoke Refresh Token" on, allows a
/// configurable number of reuses ("Refresh Token Max Reuse") before it
/// refuses one. The adaptive policy is a grace period that ends with the
/// client's behaviour instead of a clock, limited to the first token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefreshPolicy {
    /// Rotation that adapts to the client (the default): see the type's
    /// docs. Every refresh token but a grant's first is rotated as under
    /// [`RefreshPolicy::Rotate`]; the first stays valid until its successor
    /// is used.
    Adaptive {
        /// How long after a token was retired a use of it is taken for a
        /// concurrent refresh by the client rather than for theft.
        grace: Duration,
    },
    /// Strict rotation: each refresh returns a new refresh token and the old
    /// one stops working; a later use of a rotated token revokes the whole
    /// grant (reuse detection, RFC 9700 section 4.14.2), except within
    /// `grace` of the rotation, when the same successor is handed out again
    /// (concurrent refreshes by one client).
    Rotate {
        /// How long after a rotation a second use of the old token is taken
        /// for a concurrent refresh rather than for theft.
        grace: Duration,
    },
    /// The refresh token stays valid until revoked; each refresh returns it
    /// again. No theft detection; for clients that never store the refresh
    /// token they are given, where the host prefers this to
    /// [`RefreshPolicy::Adaptive`].
    Reuse,
}

impl Default for RefreshPolicy {
    fn default() -> Self {
        RefreshPolicy::Adaptive {
            grace: Duration::seconds(30),
        }
    }
}

/// Text that names no [`RefreshPolicy`]: none of `adaptive`, `rotate` and
/// `reuse`.
///
/// Its message follows the name of the setting, as in
/// `format!("--refresh-policy {error}")`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("must be adaptive, rotate or reuse, not {text:?}")]
pub struct RefreshPolicyParseError {
    /// The text given.
    pub text: String,
}

impl FromStr for RefreshPolicy {
    type Err = RefreshPolicyParseError;

    /// A policy by its name, as an operator gives it: `adaptive`, `rotate`
    /// (each with the default grace window of 30 seconds) or `reuse`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let grace = RefreshPolicy::default().grace();
        match text {
            "adaptive" => Ok(RefreshPolicy::Adaptive { grace }),
            "rotate" => Ok(RefreshPolicy::Rotate { grace }),
            "reuse" => Ok(RefreshPolicy::Reuse),
            _ => Err(RefreshPolicyParseError {
                text: text.to_owned(),
            }),
        }
    }
}

impl RefreshPolicy {
    /// The policy as stores keep it: `adaptive:SECONDS`, `rotate:SECONDS`
    /// or `reuse`.
    pub fn to_stored(&self) -> String {
        match self {
            RefreshPolicy::Adaptive { grace } => format!("adaptive:{}", grace.whole_seconds()),
            RefreshPolicy::Rotate { grace } => format!("rotate:{}", grace.whole_seconds()),
            RefreshPolicy::Reuse => "reuse".to_owned(),
        }
    }

    /// A policy from its stored form ([`RefreshPolicy::to_stored`]), or
    /// `None` if `text` is not one.
    pub fn from_stored(text: &str) -> Option<Self> {
        let grace = |seconds: &str| {
            seconds
                .parse::<u32>()
                .ok()
                .map(|seconds| Duration::seconds(i64::from(seconds)))
        };
        match text.split_once(':') {
            Some(("adaptive", seconds)) => {
                grace(seconds).map(|grace| RefreshPolicy::Adaptive { grace })
            }
            Some(("rotate", seconds)) => {
                grace(seconds).map(|grace| RefreshPolicy::Rotate { grace })
            }
            None if text == "reuse" => Some(RefreshPolicy::Reuse),
            _ => None,
        }
    }

    /// How long after a token was retired a use of it is a concurrent
    /// refresh rather than reuse. Under [`RefreshPolicy::Reuse`], which
    /// retires nothing, zero: tokens retired before a host switched to it
    /// keep their meaning.
    pub fn grace(&self) -> Duration {
        match self {
            RefreshPolicy::Adaptive { grace } | RefreshPolicy::Rotate { grace } => *grace,
            RefreshPolicy::Reuse => Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_round_trip_through_their_stored_form() {
        for policy in [
            RefreshPolicy::Adaptive {
                grace: Duration::seconds(30),
            },
            RefreshPolicy::Rotate {
                grace: Duration::ZERO,
            },
            RefreshPolicy::Reuse,
        ] {
            assert_eq!(
                RefreshPolicy::from_stored(&policy.to_stored()),
                Some(policy)
            );
        }
        assert_eq!(
            RefreshPolicy::Rotate {
                grace: Duration::seconds(45)
            }
            .to_stored(),
            "rotate:45"
        );
        for bad in [
            "",
            "rotate",
            "rotate:",
            "rotate:-1",
            "adaptive:x",
            "reuse:1",
            "strict:1",
        ] {
            assert_eq!(RefreshPolicy::from_stored(bad), None, "{bad:?}");
        }
        assert_eq!(RefreshPolicy::Reuse.grace(), Duration::ZERO);
        assert_eq!(RefreshPolicy::default().grace(), Duration::seconds(30));
    }

    #[test]
    fn policies_parse_from_their_names_with_the_default_grace() {
        let grace = Duration::seconds(30);
        assert_eq!("adaptive".parse(), Ok(RefreshPolicy::Adaptive { grace }));
        assert_eq!("adaptive".parse(), Ok(RefreshPolicy::default()));
        assert_eq!("rotate".parse(), Ok(RefreshPolicy::Rotate { grace }));
        assert_eq!("reuse".parse(), Ok(RefreshPolicy::Reuse));
        let error = "strict".parse::<RefreshPolicy>().unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"must be adaptive, rotate or reuse, not "strict""#
        );
    }
}
