//! Sign-in, consent and the account page, as library calls: who is signed
//! in, the sign-in form with its throttle and password checks, sessions and
//! CSRF tokens, and the flows of the dialog (`/auth/dialog`) and of the
//! page of connected applications (`/account/apps`). No framework and no
//! HTML here: each flow returns a [`PageReply`](crate::PageReply), which the `axum` feature's
//! pages (or a host's own adapter) render.
//!
//! ```text
//! GET  /auth/dialog?client_id&redirect_uri…   PageFlows::dialog_page
//!        no one signed in -> our sign-in form (login nonce cookie, CSRF token)
//!                            or 303 to the host's sign-in (HostSignIn)
//!        signed in        -> consent screen (CSRF token bound to the session)
//! POST /auth/dialog action=login              PageFlows::dialog_form -> FormSignIn:
//!        CSRF, LoginThrottle, the account store, PasswordVerifier
//!        -> 303 back to the dialog with a session cookie
//! POST /auth/dialog action=consent            decision=allow|deny
//!        -> 302 to the application with a code (Gateway::approve),
//!           or error=access_denied (Gateway::deny)
//! POST /auth/dialog action=switch             ends the session, 303 back
//! GET  /account/apps                           PageFlows::apps_page
//! POST /account/apps action=login|disconnect   PageFlows::apps_form
//! ```
//!
//! Who is signed in is a [`SignInMethod`](crate::SignInMethod): our form ([`FormSignIn`](crate::FormSignIn):
//! throttle, passwords, our session cookie), or a host's own session
//! ([`HostSignIn`](crate::HostSignIn), as Hydra's login and consent providers work), in which
//! case our form, throttle and passwords are not used at all.

pub(crate) mod account;
#[cfg(feature = "argon2")]
pub(crate) mod argon2;
pub(crate) mod dialog;
pub(crate) mod flows;
pub(crate) mod form;
pub(crate) mod method;
#[cfg(feature = "argon2")]
pub(crate) mod new_account;
pub(crate) mod password;
pub(crate) mod session;
pub(crate) mod throttle;
pub(crate) mod view;
