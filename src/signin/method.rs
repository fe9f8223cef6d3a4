//! Who is signed in: a [`SignInMethod`], our form ([`FormSignIn`]) or the
//! host's own session ([`HostSignIn`]), and what the pages know of a
//! request ([`PageRequest`]).

use std::net::IpAddr;
use std::sync::Arc;

use async_trait::async_trait;

use crate::account::AccountId;
use crate::signin::form::FormSignIn;
use crate::signin::password::PasswordVerifier;
use crate::signin::session::cookie;
use crate::signin::throttle::ThrottleLimits;
use crate::store::error::StoreError;

/// What the pages know of a request: its `Cookie` headers, every other
/// header, and the client's address. Built by the adapter; read by a
/// [`HostSignIn`] to find its own session.
#[derive(Clone, Debug, Default)]
pub struct PageRequest<'a> {
    /// The values of the `Cookie` headers.
    pub cookies: Vec<&'a str>,
    /// Every header as `(name, value)`, names in lower case.
    pub headers: Vec<(&'a str, &'a str)>,
    /// The client's address, when the adapter knows it (the sign-in form
    /// needs it: it throttles by address).
    pub peer: Option<IpAddr>,
}

impl<'a> PageRequest<'a> {
    /// The value of cookie `name`, if the request sent it.
    pub fn cookie(&self, name: &str) -> Option<&'a str> {
        cookie(&self.cookies, name)
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&'a str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| *value)
    }
}

/// An account signed in, as a [`HostSignIn`] (or our session cookie) tells.
#[derive(Clone, PartialEq, Eq)]
pub struct SignedIn {
    /// The account.
    pub account: AccountId,
    /// A value unique to the browser's session that other sites cannot
    /// read (the host's session cookie's value or id): the consent and
    /// account forms' CSRF tokens are bound to it, so it is a secret.
    pub session: String,
}

impl std::fmt::Debug for SignedIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignedIn")
            .field("account", &self.account)
            .field("session", &"***")
            .finish()
    }
}

/// A host's own sign-in: a platform that already signs its users in tells
/// the dialog and the account page who is signed in, from its own session
/// on the request; and where to send a browser with nobody signed in.
///
/// With a `HostSignIn`, the pages never show our sign-in form and never use
/// the throttle or a [`PasswordVerifier`]: the
/// host's sign-in does all of that.
#[async_trait]
pub trait HostSignIn: Send + Sync {
    /// The account signed in on `request`, `Ok(None)` if nobody is. Called
    /// by the pages on every request (the consent form is checked again on
    /// its post).
    ///
    /// # Errors
    /// The host's session store failed: the pages answer 503.
    async fn signed_in(&self, request: &PageRequest<'_>) -> Result<Option<SignedIn>, StoreError>;

    /// Where to send a browser that nobody is signed in on (303), so that it
    /// comes back to `return_to` (a path of ours, with its query) once
    /// signed in.
    fn sign_in_location(&self, return_to: &str) -> String;
}

/// How the pages learn who is signed in.
#[derive(Clone)]
pub enum SignInMethod {
    /// Our sign-in form, throttle, passwords and session cookie.
    Form(Arc<FormSignIn>),
    /// The host's own session; our form is never shown.
    Host(Arc<dyn HostSignIn>),
}

impl SignInMethod {
    /// Our form, its passwords checked by `passwords` and its failures
    /// throttled within `limits`.
    pub fn form(passwords: impl PasswordVerifier + 'static, limits: ThrottleLimits) -> Self {
        SignInMethod::Form(Arc::new(FormSignIn::new(Arc::new(passwords), limits)))
    }

    /// The host's own sign-in.
    pub fn host(host: impl HostSignIn + 'static) -> Self {
        SignInMethod::Host(Arc::new(host))
    }
}

impl std::fmt::Debug for SignInMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SignInMethod::Form(form) => f.debug_tuple("Form").field(form).finish(),
            SignInMethod::Host(_) => f.write_str("Host(..)"),
        }
    }
}
