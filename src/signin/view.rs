//! What a page flow decided ([`PageReply`]): a view to render, or where the
//! browser goes, with the cookies to set. Rendering is the adapter's (the
//! `axum` feature's pages, through their templates).

use crate::account::Account;
use crate::answer::HttpAnswer;
use crate::oauth::dialog::DialogError;
use crate::oauth::lifecycle::ConnectedApp;
use crate::store::error::StoreError;

/// A flow's answer: a view and the `Set-Cookie` values to send with it.
#[derive(Debug)]
pub struct PageReply {
    /// What to show, or where the browser goes.
    pub view: PageView,
    /// Complete `Set-Cookie` header values (name, value, path and the
    /// cookie rules of [`crate::set_cookie`]).
    pub set_cookies: Vec<String>,
}

impl From<PageView> for PageReply {
    fn from(view: PageView) -> Self {
        Self {
            view,
            set_cookies: Vec::new(),
        }
    }
}

/// What a page flow shows, or where it sends the browser.
#[derive(Debug)]
#[non_exhaustive]
pub enum PageView {
    /// Our sign-in form (status and `Retry-After` from its notice).
    SignIn(SignInForm),
    /// The dialog's consent screen (200).
    Consent(ConsentScreen),
    /// The account's connected applications (200, or 404 with a notice).
    Apps(AppsList),
    /// `303 See Other` to this location: back to the page after a form, or
    /// to the host's sign-in.
    SeeOther(String),
    /// The dialog's answer to the application: a redirect with a code, with
    /// `error=access_denied`, or with a request error the application must
    /// be told (RFC 6749 section 4.1.2.1).
    Redirect(HttpAnswer),
    /// A dialog request refused and shown to the user, never redirected:
    /// its client or redirect URI cannot be trusted.
    DialogRefused {
        /// The answer's status.
        status: u16,
        /// Why.
        error: DialogError,
    },
    /// A form whose CSRF token does not match (403), with the address that
    /// opens its page again.
    FormExpired {
        /// The page to open again (path and query).
        again: String,
    },
    /// A page with a title and one paragraph (an unknown form, a form that
    /// is not a form, no decision).
    Message {
        /// The status.
        status: u16,
        /// The title.
        title: &'static str,
        /// The paragraph.
        message: &'static str,
    },
    /// The store failed: the user sees "unavailable" (503); the error is
    /// for the operator's log.
    Unavailable(StoreError),
}

/// Our sign-in form, on the dialog or on the account page.
#[derive(Debug)]
pub struct SignInForm {
    /// The application asking, on the dialog; `None` on the account page.
    pub client_name: Option<String>,
    /// Where the form posts (the page's path).
    pub action: &'static str,
    /// The dialog's query, sent back as a hidden field (empty on the
    /// account page).
    pub query: String,
    /// The CSRF token, a hidden field.
    pub csrf: String,
    /// The e-mail to fill in again after a refusal.
    pub email: String,
    /// What to show above the form.
    pub notice: Notice,
}

/// The consent screen: the application, the account, Allow and Deny.
#[derive(Debug)]
pub struct ConsentScreen {
    /// The application's name.
    pub client_name: String,
    /// Where the answer goes.
    pub redirect_uri: String,
    /// The signed-in account.
    pub account: Account,
    /// The dialog's query, a hidden field of both forms.
    pub query: String,
    /// The CSRF token, bound to the session and the query.
    pub csrf: String,
}

/// The account's connected applications.
#[derive(Debug)]
pub struct AppsList {
    /// The signed-in account.
    pub account: Account,
    /// Its applications.
    pub apps: Vec<ConnectedApp>,
    /// The disconnect forms' CSRF token, bound to the session.
    pub csrf: String,
    /// A notice above the list ("That application is not connected.").
    pub notice: Option<&'static str>,
}

/// What the sign-in page shows above its form, and how it is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Notice {
    /// Nothing: the form is shown for the first time (200).
    None,
    /// The e-mail or the password was wrong (400).
    WrongPassword,
    /// The session ended before a form of a signed-in page was posted (400).
    SessionExpired,
    /// Throttled: too many failures (429).
    TooManyAttempts {
        /// Seconds until the next attempt is admitted.
        retry_after: u64,
    },
    /// Every password check slot stayed taken (503).
    Busy {
        /// Seconds to wait.
        retry_after: u64,
    },
}

impl Notice {
    /// The HTTP status of a sign-in page with this notice.
    pub fn status(&self) -> u16 {
        match self {
            Notice::None => 200,
            Notice::WrongPassword | Notice::SessionExpired => 400,
            Notice::TooManyAttempts { .. } => 429,
            Notice::Busy { .. } => 503,
        }
    }

    /// The `Retry-After` seconds of a sign-in page with this notice.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Notice::None | Notice::WrongPassword | Notice::SessionExpired => None,
            Notice::TooManyAttempts { retry_after } | Notice::Busy { retry_after } => {
                Some(*retry_after)
            }
        }
    }
}
