//! [`PageFlows`]: the state the dialog's and the account page's flows share
//! (the gateway, the keys of sessions and CSRF tokens, the sign-in method,
//! the clock and the random source), and the steps both take: who is
//! signed in, our sign-in form, starting a session.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use crate::account::Account;
use crate::clock::Clock;
use crate::gateway::Gateway;
use crate::random::{OsRandom, RandomSource, random_token};
use crate::server_key::ServerKey;
use crate::signin::form::{FormSignIn, SignInRefused};
use crate::signin::method::{PageRequest, SignInMethod, SignedIn};
use crate::signin::session::{
    LOGIN_COOKIE, PageKeys, SESSION_COOKIE, SESSION_SECONDS, login_nonce, set_cookie,
};
use crate::signin::view::{Notice, PageReply, PageView, SignInForm};
use crate::store::error::StoreError;

/// The dialog's path, and the path of its cookies.
pub(crate) const DIALOG_PATH: &str = "/auth/dialog";
/// The page of connected applications.
pub const APPS_PATH: &str = "/account/apps";
/// The path of the account pages' cookies: they keep a session of their
/// own, so neither the dialog's cookie nor theirs reaches the other.
pub const ACCOUNT_COOKIE_PATH: &str = "/account";

/// The flows of the dialog and of the account page, over one gateway.
/// Cheap to share behind an `Arc`; every method reads the clock once.
pub struct PageFlows {
    pub(crate) gateway: Arc<Gateway>,
    pub(crate) keys: PageKeys,
    pub(crate) method: SignInMethod,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) random: Arc<dyn RandomSource>,
    /// Whether cookies get `Secure` (the base URL is https).
    secure_cookies: bool,
}

impl fmt::Debug for PageFlows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageFlows")
            .field("method", &self.method)
            .field("secure_cookies", &self.secure_cookies)
            .finish_non_exhaustive()
    }
}

/// A signed-in browser: the account and the session its forms are bound to.
pub(crate) struct Visitor {
    pub(crate) account: Account,
    pub(crate) session: String,
}

impl PageFlows {
    /// The pages of `gateway`, with sessions and CSRF tokens keyed from
    /// `key`, who is signed in told by `method`, and session expiry and
    /// throttling windows read from `clock`. Session nonces come from the
    /// operating system ([`Self::with_random`] replaces it). Cookies get
    /// `Secure` when the gateway's base URL is `https://`.
    pub fn new(
        gateway: Arc<Gateway>,
        key: &ServerKey,
        method: SignInMethod,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let secure_cookies = gateway.config().base_url.starts_with("https://");
        Self {
            gateway,
            keys: PageKeys::new(key),
            method,
            clock,
            random: Arc::new(OsRandom),
            secure_cookies,
        }
    }

    /// Replaces the source of session and login nonces.
    pub fn with_random(mut self, random: Arc<dyn RandomSource>) -> Self {
        self.random = random;
        self
    }

    /// The gateway.
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    pub(crate) fn now(&self) -> i64 {
        self.clock.now().unix_timestamp()
    }

    /// A `Set-Cookie` value for a cookie of the pages under `path`.
    pub(crate) fn cookie_at(&self, path: &str, name: &str, value: &str, max_age: i64) -> String {
        set_cookie(name, value, path, max_age, self.secure_cookies)
    }

    /// Who is signed in on `request`, for an account that still exists.
    pub(crate) async fn visitor(
        &self,
        request: &PageRequest<'_>,
    ) -> Result<Option<Visitor>, StoreError> {
        let signed_in = match &self.method {
            SignInMethod::Form(_) => request.cookie(SESSION_COOKIE).and_then(|value| {
                let account = self.keys.open_session(value, self.now())?;
                Some(SignedIn {
                    account,
                    session: value.to_owned(),
                })
            }),
            SignInMethod::Host(host) => host.signed_in(request).await?,
        };
        let Some(signed_in) = signed_in else {
            return Ok(None);
        };
        let account = self.gateway.find_account(signed_in.account).await?;
        Ok(account.map(|account| Visitor {
            account,
            session: signed_in.session,
        }))
    }

    /// The answer to a browser that nobody is signed in on: our sign-in
    /// form (with a login nonce cookie, kept if the browser has one, so two
    /// open tabs do not invalidate each other's form), or the host's
    /// sign-in.
    pub(crate) fn sign_in_form(
        &self,
        request: &PageRequest<'_>,
        form: SignInForm,
        cookie_path: &str,
        return_to: &str,
    ) -> PageReply {
        if let SignInMethod::Host(host) = &self.method {
            return PageView::SeeOther(host.sign_in_location(return_to)).into();
        }
        let nonce = login_nonce(&request.cookies)
            .map_or_else(|| random_token(&*self.random, 16), str::to_owned);
        let csrf = if form.client_name.is_some() {
            self.keys.login_token(&nonce, &form.query)
        } else {
            self.keys.account_login_token(&nonce)
        };
        PageReply {
            view: PageView::SignIn(SignInForm { csrf, ..form }),
            set_cookies: vec![self.cookie_at(cookie_path, LOGIN_COOKIE, &nonce, SESSION_SECONDS)],
        }
    }

    /// Checks our sign-in form's e-mail and password; `Ok(None)` with a
    /// host's sign-in, which has no form.
    pub(crate) async fn sign_in(
        &self,
        email: &str,
        password: &str,
        peer: IpAddr,
    ) -> Result<Option<Account>, SignInRefused> {
        let SignInMethod::Form(form) = &self.method else {
            return Ok(None);
        };
        let form: &FormSignIn = form;
        form.sign_in(&self.gateway, email, password, peer, self.now())
            .await
            .map(Some)
    }

    /// The cookies that start a session for `account` on the pages under
    /// `path`, and end the login nonce there, which has served.
    pub(crate) fn start_session(&self, account: &Account, path: &str) -> Vec<String> {
        let session =
            self.keys
                .session_value(account.id, self.now() + SESSION_SECONDS, &*self.random);
        vec![
            self.cookie_at(path, SESSION_COOKIE, &session, SESSION_SECONDS),
            self.cookie_at(path, LOGIN_COOKIE, "", 0),
        ]
    }
}

/// A form body's fields: unknown fields are ignored, and a field sent twice
/// keeps its first value.
pub(crate) fn form_fields<const N: usize>(body: &[u8], names: [&str; N]) -> [String; N] {
    let mut fields: [String; N] = std::array::from_fn(|_| String::new());
    for (name, value) in form_urlencoded::parse(body) {
        if let Some(i) = names.iter().position(|known| *known == name)
            && fields[i].is_empty()
        {
            fields[i] = value.into_owned();
        }
    }
    fields
}

/// Whether a `Content-Type` is a URL-encoded form's.
pub(crate) fn is_form(content_type: Option<&str>) -> bool {
    content_type.is_some_and(|value| {
        let essence = value.split(';').next().unwrap_or_default().trim();
        essence.eq_ignore_ascii_case("application/x-www-form-urlencoded")
    })
}

/// A sign-in that could not go through, as the page's reply: the sign-in
/// form again (`form`) with the refusal's notice, or "unavailable".
pub(crate) fn refused(refusal: SignInRefused, form: impl FnOnce(Notice) -> PageReply) -> PageReply {
    match refusal {
        SignInRefused::Notice(notice) => form(notice),
        SignInRefused::Store(error) => PageView::Unavailable(error).into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_fields_keep_the_first_value_and_ignore_others() {
        let [a, b] = form_fields(b"b=2&x=9&a=1&a=3", ["a", "b"]);
        assert_eq!((a.as_str(), b.as_str()), ("1", "2"));
        assert!(is_form(Some(
            "Application/X-WWW-Form-Urlencoded; charset=utf-8"
        )));
        assert!(!is_form(Some("application/json")));
        assert!(!is_form(None));
    }
}
