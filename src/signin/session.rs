//! The pages' memory of a browser: the signed session cookie of a
//! signed-in account, the login form's nonce cookie, and the CSRF tokens of
//! every form, all keyed from the server key ([`PageKeys`]), and the rules
//! of the cookies ([`set_cookie`]).
//!
//! Nothing is stored on the server: a session is its cookie, an HMAC over
//! the account, the expiry and a random nonce.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use subtle::ConstantTimeEq as _;

use crate::account::AccountId;
use crate::random::{RandomSource, random_token};
use crate::server_key::{ServerKey, mac_bytes};

/// Lifetime of a login session and of the login form's nonce, in seconds.
pub const SESSION_SECONDS: i64 = 600;

/// The cookie of a signed-in browser.
pub const SESSION_COOKIE: &str = "cg_session";
/// The cookie the login form's CSRF token is bound to.
pub const LOGIN_COOKIE: &str = "cg_login";

/// The keys of the pages' cookies and forms, derived from the server key.
pub struct PageKeys {
    /// Signs session cookies.
    session: [u8; 32],
    /// Makes CSRF tokens.
    csrf: [u8; 32],
}

impl std::fmt::Debug for PageKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PageKeys(***)")
    }
}

/// HMAC-SHA256 of `parts`, each length-prefixed so that no two different
/// lists of parts are ever hashed as the same bytes.
fn mac(key: &[u8; 32], parts: &[&[u8]]) -> String {
    URL_SAFE_NO_PAD.encode(mac_bytes(key, parts))
}

/// Constant-time equality of a token we made and one a request presented.
pub fn same_token(expected: &str, presented: &str) -> bool {
    expected.as_bytes().ct_eq(presented.as_bytes()).into()
}

impl PageKeys {
    /// The keys derived from `key`.
    pub fn new(key: &ServerKey) -> Self {
        Self {
            session: key.derive(b"dialog session"),
            csrf: key.derive(b"dialog csrf"),
        }
    }

    /// `account_id|expires|nonce|mac`: the session cookie's value. The
    /// random nonce makes every session (and so its CSRF tokens) unique,
    /// even two of one account started in the same second; it is drawn
    /// from `random`.
    pub fn session_value(
        &self,
        account: AccountId,
        expires: i64,
        random: &dyn RandomSource,
    ) -> String {
        let (account, expires, nonce) = (
            account.to_string(),
            expires.to_string(),
            random_token(random, 16),
        );
        let tag = mac(
            &self.session,
            &[
                b"session",
                account.as_bytes(),
                expires.as_bytes(),
                nonce.as_bytes(),
            ],
        );
        format!("{account}|{expires}|{nonce}|{tag}")
    }

    /// The account of a session cookie that this server signed and that has
    /// not expired at `now` (Unix seconds).
    pub fn open_session(&self, value: &str, now: i64) -> Option<AccountId> {
        let mut fields = value.split('|');
        let (account, expires, nonce, tag) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
        );
        let expected = mac(
            &self.session,
            &[
                b"session",
                account.as_bytes(),
                expires.as_bytes(),
                nonce.as_bytes(),
            ],
        );
        if fields.next().is_some() || !same_token(&expected, tag) {
            return None;
        }
        let expires: i64 = expires.parse().ok()?;
        (now < expires).then_some(AccountId(account.parse().ok()?))
    }

    /// The login form's CSRF token: bound to the browser's login nonce
    /// cookie and to the dialog request.
    pub fn login_token(&self, nonce: &str, query: &str) -> String {
        mac(&self.csrf, &[b"login", nonce.as_bytes(), query.as_bytes()])
    }

    /// The CSRF token of the account pages' sign-in form: bound to the
    /// browser's login nonce cookie.
    pub fn account_login_token(&self, nonce: &str) -> String {
        mac(&self.csrf, &[b"account-login", nonce.as_bytes()])
    }

    /// The CSRF token of the account pages' forms: bound to the session.
    pub fn account_token(&self, session: &str) -> String {
        mac(&self.csrf, &[b"account", session.as_bytes()])
    }

    /// The consent form's CSRF token: bound to the session and to the dialog
    /// request.
    pub fn consent_token(&self, session: &str, query: &str) -> String {
        mac(
            &self.csrf,
            &[b"consent", session.as_bytes(), query.as_bytes()],
        )
    }
}

/// The value of cookie `name` in a request's `Cookie` headers (each of
/// `headers` is the value of one), if the request sent it.
pub fn cookie<'h>(headers: &[&'h str], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// The login nonce a browser sent in its `Cookie` headers, if it is one
/// this server could have made (22 base64url characters).
pub fn login_nonce<'h>(headers: &[&'h str]) -> Option<&'h str> {
    cookie(headers, LOGIN_COOKIE).filter(|nonce| {
        nonce.len() == 22
            && nonce
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

/// A `Set-Cookie` value for one of the pages' cookies: only sent back to
/// the pages under `path` (the dialog's, or the account's: each keeps its
/// own session), never to scripts, not on cross-site posts, and over HTTPS
/// only when the service is on HTTPS.
pub fn set_cookie(name: &str, value: &str, path: &str, max_age: i64, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{name}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Lax{secure}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::OsRandom;

    #[test]
    fn sessions_open_only_when_signed_by_this_key_and_unexpired() {
        let keys = |hex: &str| PageKeys::new(&ServerKey::from_hex(&hex.repeat(32)).unwrap());
        let (ours, theirs) = (keys("01"), keys("02"));
        let account = AccountId(uuid::Uuid::from_u128(7));
        let value = ours.session_value(account, 1_000, &OsRandom);
        assert_eq!(ours.open_session(&value, 999), Some(account));
        assert_eq!(ours.open_session(&value, 1_000), None, "expired");
        assert_eq!(theirs.open_session(&value, 999), None, "another key");
        assert_eq!(ours.open_session(&format!("{value}|x"), 999), None);
        let longer = value.replacen("|1000|", "|9999|", 1);
        assert_eq!(
            ours.open_session(&longer, 999),
            None,
            "the expiry is signed"
        );
        assert_ne!(
            value,
            ours.session_value(account, 1_000, &OsRandom),
            "every session is unique"
        );
        assert_ne!(ours.login_token("n", "q"), ours.consent_token("n", "q"));
    }

    #[test]
    fn cookies_are_found_by_exact_name() {
        let headers = ["a=1; cg_login=x; cg_session=y", "other=2"];
        assert_eq!(cookie(&headers, "cg_session"), Some("y"));
        assert_eq!(cookie(&headers, "other"), Some("2"));
        assert_eq!(cookie(&headers, "cg"), None);
        assert_eq!(login_nonce(&headers), None, "not one we could have made");
        let ours = ["cg_login=abcdefghijklmnopqrstuv"];
        assert_eq!(login_nonce(&ours), Some("abcdefghijklmnopqrstuv"));
    }
}
