//! Secrets issued by the crate: generation, redaction, constant-time equality
//! and keyed hashing for storage at rest.
//!
//! Every secret is `<prefix><43 characters>`: a short prefix naming its kind
//! (so a leaked string can be recognised by secret scanners and by people),
//! then 256 bits from the injected [`RandomSource`] in unpadded base64url. That
//! alphabet (`A-Z a-z 0-9 - _`) lies inside RFC 3986's unreserved set, so
//! percent-encoding never changes a secret and it survives query strings,
//! form bodies and HTTP Basic credentials untouched.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::random::RandomSource;

/// Bytes of entropy in every generated secret (256 bits).
pub const SECRET_ENTROPY_BYTES: usize = 32;

/// The kinds of secret the crate issues, each with its own prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SecretKind {
    /// A single-use authorization code (`cgac_`).
    AuthorizationCode,
    /// A bearer access token (`cgat_`).
    AccessToken,
    /// A refresh token (`cgrt_`).
    RefreshToken,
    /// An application's client secret (`cgcs_`).
    ClientSecret,
    /// An account's API key (`cgak_`).
    ApiKey,
}

impl SecretKind {
    /// The prefix that starts every secret of this kind.
    pub const fn prefix(self) -> &'static str {
        match self {
            SecretKind::AuthorizationCode => "cgac_",
            SecretKind::AccessToken => "cgat_",
            SecretKind::RefreshToken => "cgrt_",
            SecretKind::ClientSecret => "cgcs_",
            SecretKind::ApiKey => "cgak_",
        }
    }

    /// The domain-separation label mixed into the keyed hash, so that the hash
    /// of an access token can never match the hash of a refresh token.
    const fn hash_label(self) -> &'static [u8] {
        match self {
            SecretKind::AuthorizationCode => b"authorization-code\0",
            SecretKind::AccessToken => b"access-token\0",
            SecretKind::RefreshToken => b"refresh-token\0",
            SecretKind::ClientSecret => b"client-secret\0",
            SecretKind::ApiKey => b"api-key\0",
        }
    }
}

/// Writes `prefix + base64url(bytes)` for `SECRET_ENTROPY_BYTES` fresh bytes.
fn generate_secret(kind: SecretKind, random: &dyn RandomSource) -> String {
    let mut bytes = [0u8; SECRET_ENTROPY_BYTES];
    random.fill_bytes(&mut bytes);
    encode_secret(kind, &bytes)
}

fn encode_secret(kind: SecretKind, bytes: &[u8]) -> String {
    let mut out = String::with_capacity(kind.prefix().len() + 43);
    out.push_str(kind.prefix());
    URL_SAFE_NO_PAD.encode_string(bytes, &mut out);
    out
}

macro_rules! secret_type {
    ($(#[$doc:meta])* $name:ident, $kind:expr) => {
        $(#[$doc])*
        ///
        /// Its `Debug` output is redacted and `==` runs in constant time.
        #[derive(Clone)]
        pub struct $name(String);

        impl $name {
            /// The kind of secret this type holds.
            pub const KIND: SecretKind = $kind;

            /// Generates a fresh secret from `random` (256 bits of entropy).
            pub fn generate(random: &dyn RandomSource) -> Self {
                Self(generate_secret($kind, random))
            }

            /// Wraps a value presented by a caller, as received.
            pub fn new(value: impl Into<String>) -> Self {
                Self(value.into())
            }

            /// The plaintext, for the one place that must send it: the answer
            /// that hands the secret to its owner. Never log it.
            pub fn expose(&self) -> &str {
                &self.0
            }

            /// The keyed hash under which stores keep this secret.
            pub fn hash(&self, hasher: &SecretHasher) -> SecretHash {
                hasher.hash($kind, &self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(concat!(stringify!($name), "(***)"))
            }
        }

        impl PartialEq for $name {
            fn eq(&self, other: &Self) -> bool {
                // Length is not secret (every generated value has the same one);
                // the content is compared without an early exit.
                self.0.as_bytes().ct_eq(other.0.as_bytes()).into()
            }
        }

        impl Eq for $name {}
    };
}

secret_type!(
    /// A single-use authorization code, delivered to the callback URL.
    AuthorizationCode,
    SecretKind::AuthorizationCode
);
secret_type!(
    /// A bearer access token.
    AccessToken,
    SecretKind::AccessToken
);
secret_type!(
    /// A refresh token, exchanged for a new access token.
    RefreshToken,
    SecretKind::RefreshToken
);
secret_type!(
    /// An application's client secret.
    ClientSecret,
    SecretKind::ClientSecret
);
secret_type!(
    /// An account's API key, sent in the `api_key` query parameter.
    ApiKey,
    SecretKind::ApiKey
);

impl RefreshToken {
    /// The refresh token that replaces this one on rotation.
    ///
    /// It is derived with the server key rather than drawn at random, so that a
    /// client refreshing twice concurrently with the same token (a refresh
    /// storm) can be handed the same successor again within the grace window,
    /// although stores keep only hashes. Only the holder of this token and the
    /// key can compute it; it carries the 256 bits of the original.
    pub fn successor(&self, hasher: &SecretHasher) -> RefreshToken {
        let digest = hasher.mac(b"refresh-token-successor\0", self.0.as_bytes());
        RefreshToken(encode_secret(SecretKind::RefreshToken, &digest))
    }
}

/// The keyed hash (HMAC-SHA256) of a secret: what stores keep instead of it.
///
/// A leaked database of these yields no usable credential without the server
/// key. `==` runs in constant time.
#[derive(Clone, Copy)]
pub struct SecretHash([u8; 32]);

impl SecretHash {
    /// Wraps raw hash bytes, as read back from a store.
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The raw hash bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Lowercase hexadecimal, for stores that keep text.
    pub fn to_hex(&self) -> String {
        use fmt::Write as _;
        let mut out = String::with_capacity(64);
        for byte in self.0 {
            let _ = write!(out, "{byte:02x}");
        }
        out
    }

    /// Parses 64 hexadecimal digits; `None` for anything else.
    pub fn from_hex(hex: &str) -> Option<Self> {
        let bytes = hex.as_bytes();
        if bytes.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            let text = std::str::from_utf8(pair).ok()?;
            out[i] = u8::from_str_radix(text, 16).ok()?;
        }
        Some(Self(out))
    }
}

impl PartialEq for SecretHash {
    fn eq(&self, other: &Self) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl Eq for SecretHash {}

// Written by hand beside the constant-time `PartialEq`: both look at the same
// 32 bytes, so equal hashes hash equally, as `HashMap` requires.
impl std::hash::Hash for SecretHash {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl fmt::Debug for SecretHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Enough to tell records apart in a test failure, not a full value.
        write!(f, "SecretHash({}…)", &self.to_hex()[..8])
    }
}

/// Computes the keyed hashes of secrets with the server's hashing key.
///
/// The key must be at least 32 random bytes, kept outside the database (an
/// environment variable or a secrets manager), and stable: changing it makes
/// every stored token, code, client secret and API key unusable.
#[derive(Clone)]
pub struct SecretHasher {
    mac: Hmac<Sha256>,
}

impl SecretHasher {
    /// A hasher keyed with `key` (32 random bytes).
    pub fn new(key: [u8; 32]) -> Self {
        // HMAC accepts keys of any length, so this cannot fail.
        let mac = <Hmac<Sha256> as Mac>::new_from_slice(&key).unwrap_or_else(|_| unreachable!());
        Self { mac }
    }

    /// A hasher with a fresh key from `random`: for tests and for hosts that
    /// keep nothing across restarts.
    pub fn generate(random: &dyn RandomSource) -> Self {
        let mut key = [0u8; 32];
        random.fill_bytes(&mut key);
        Self::new(key)
    }

    /// The hash of `secret`, a secret of kind `kind`.
    pub fn hash(&self, kind: SecretKind, secret: &str) -> SecretHash {
        SecretHash(self.mac(kind.hash_label(), secret.as_bytes()))
    }

    /// HMAC-SHA256 of `label` then `data` under the server key: a keyed
    /// hash for data that is not a secret but must not be reversible by a
    /// dictionary (a lead's e-mail in the rate limiter's keys). `label`
    /// ends with `\0` and differs from every secret kind's.
    pub(crate) fn mac(&self, label: &[u8], data: &[u8]) -> [u8; 32] {
        let mut mac = self.mac.clone();
        mac.update(label);
        mac.update(data);
        mac.finalize().into_bytes().into()
    }
}

impl fmt::Debug for SecretHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretHasher(***)")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::random::SeededRandom;

    fn is_unreserved(c: char) -> bool {
        c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~')
    }

    #[test]
    fn generated_secrets_use_the_url_safe_alphabet_and_their_prefix() {
        let random = SeededRandom::new(1);
        let token = AccessToken::generate(&random);
        let text = token.expose();
        assert!(text.starts_with("cgat_"));
        assert_eq!(
            text.len(),
            "cgat_".len() + 43,
            "256 bits in base64url is 43 chars"
        );
        assert!(text.chars().all(is_unreserved), "{text}");
        assert!(ApiKey::generate(&random).expose().starts_with("cgak_"));
        assert!(
            RefreshToken::generate(&random)
                .expose()
                .starts_with("cgrt_")
        );
        assert!(
            ClientSecret::generate(&random)
                .expose()
                .starts_with("cgcs_")
        );
        assert!(
            AuthorizationCode::generate(&random)
                .expose()
                .starts_with("cgac_")
        );
    }

    #[test]
    fn generated_secrets_are_unique() {
        let random = SeededRandom::new(7);
        let seen: HashSet<String> = (0..10_000)
            .map(|_| RefreshToken::generate(&random).expose().to_owned())
            .collect();
        assert_eq!(seen.len(), 10_000);
    }

    #[test]
    fn debug_output_is_redacted() {
        let random = SeededRandom::new(3);
        let key = ApiKey::generate(&random);
        let printed = format!("{key:?}");
        assert_eq!(printed, "ApiKey(***)");
        assert!(!printed.contains(&key.expose()[5..]));
        let hasher = SecretHasher::generate(&random);
        assert_eq!(format!("{hasher:?}"), "SecretHasher(***)");
    }

    #[test]
    fn hash_is_keyed_and_separated_by_kind() {
        let a = SecretHasher::new([1; 32]);
        let b = SecretHasher::new([2; 32]);
        assert_eq!(
            a.hash(SecretKind::AccessToken, "x"),
            a.hash(SecretKind::AccessToken, "x")
        );
        assert_ne!(
            a.hash(SecretKind::AccessToken, "x"),
            b.hash(SecretKind::AccessToken, "x")
        );
        assert_ne!(
            a.hash(SecretKind::AccessToken, "x"),
            a.hash(SecretKind::RefreshToken, "x")
        );
    }

    #[test]
    fn hash_does_not_contain_the_plaintext() {
        let random = SeededRandom::new(5);
        let hasher = SecretHasher::generate(&random);
        let token = AccessToken::generate(&random);
        let hex = token.hash(&hasher).to_hex();
        assert_eq!(hex.len(), 64);
        assert!(!hex.contains(&token.expose()[5..13]));
        assert_eq!(SecretHash::from_hex(&hex), Some(token.hash(&hasher)));
        assert_eq!(SecretHash::from_hex("zz"), None);
        assert_eq!(SecretHash::from_hex(&"g".repeat(64)), None);
    }

    #[test]
    fn equality_compares_content() {
        assert_eq!(ApiKey::new("cgak_abc"), ApiKey::new("cgak_abc"));
        assert_ne!(ApiKey::new("cgak_abc"), ApiKey::new("cgak_abd"));
        assert_ne!(ApiKey::new("cgak_abc"), ApiKey::new("cgak_ab"));
    }

    #[test]
    fn successor_is_deterministic_per_key_and_well_formed() {
        let random = SeededRandom::new(9);
        let hasher = SecretHasher::generate(&random);
        let token = RefreshToken::generate(&random);
        let next = token.successor(&hasher);
        assert_eq!(next, token.successor(&hasher));
        assert_ne!(next, token);
        assert_ne!(next, token.successor(&SecretHasher::new([0; 32])));
        assert!(next.expose().starts_with("cgrt_"));
        assert!(next.expose().chars().all(is_unreserved));
        assert_eq!(next.expose().len(), token.expose().len());
    }
}
