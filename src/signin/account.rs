//! The account page's flows (`GET` and `POST /account/apps`): every
//! application the signed-in account has authorized, and the button that
//! disconnects one (revoking every token of that grant at once).
//!
//! It shares the dialog's sign-in (throttle and password checks), but keeps
//! a session of its own: its cookies have `Path=/account`, the dialog's
//! `Path=/auth/dialog`, so neither page's cookie reaches the other.

use uuid::Uuid;

use crate::records::grant::GrantId;
use crate::signin::flows::{
    ACCOUNT_COOKIE_PATH, APPS_PATH, PageFlows, Visitor, form_fields, is_form, refused,
};
use crate::signin::method::{PageRequest, SignInMethod};
use crate::signin::session::{LOGIN_COOKIE, same_token};
use crate::signin::view::{AppsList, Notice, PageReply, PageView, SignInForm};

/// The notice of a disconnect for a grant the account does not hold.
const NOT_CONNECTED: &str = "That application is not connected.";

impl PageFlows {
    /// `GET /account/apps`: the list to a signed-in browser, else the
    /// sign-in form (or the host's sign-in).
    pub async fn apps_page(&self, request: &PageRequest<'_>) -> PageReply {
        match self.visitor(request).await {
            Ok(Some(visitor)) => self.apps_list(visitor, None).await,
            Ok(None) => self.apps_sign_in(request, "", Notice::None),
            Err(error) => PageView::Unavailable(error).into(),
        }
    }

    /// `POST /account/apps`: the sign-in form (`action=login`) and the
    /// disconnect buttons (`action=disconnect`, `grant`). The adapter caps
    /// the body's size while reading it.
    pub async fn apps_form(
        &self,
        content_type: Option<&str>,
        body: &[u8],
        request: &PageRequest<'_>,
    ) -> PageReply {
        if !is_form(content_type) {
            return message(
                415,
                "Unsupported form",
                "This page only accepts its own forms.",
            );
        }
        let [action, csrf, email, password, grant] =
            form_fields(body, ["action", "csrf", "email", "password", "grant"]);
        match action.as_str() {
            "login" if matches!(self.method, SignInMethod::Form(_)) => {
                let nonce = request.cookie(LOGIN_COOKIE).unwrap_or_default();
                if nonce.is_empty() || !same_token(&self.keys.account_login_token(nonce), &csrf) {
                    return expired();
                }
                let Some(peer) = request.peer else {
                    return message(
                        500,
                        "Service unavailable",
                        "The service cannot tell where this sign-in comes from.",
                    );
                };
                match self.sign_in(&email, &password, peer).await {
                    Ok(Some(account)) => PageReply {
                        view: PageView::SeeOther(APPS_PATH.to_owned()),
                        set_cookies: self.start_session(&account, ACCOUNT_COOKIE_PATH),
                    },
                    Ok(None) => unknown_form(),
                    Err(refusal) => {
                        refused(refusal, |notice| self.apps_sign_in(request, &email, notice))
                    }
                }
            }
            "disconnect" => {
                let visitor = match self.visitor(request).await {
                    Ok(Some(visitor)) => visitor,
                    Ok(None) => return self.apps_sign_in(request, "", Notice::SessionExpired),
                    Err(error) => return PageView::Unavailable(error).into(),
                };
                if !same_token(&self.keys.account_token(&visitor.session), &csrf) {
                    return expired();
                }
                let Ok(grant) = Uuid::parse_str(&grant) else {
                    return self.apps_list(visitor, Some(NOT_CONNECTED)).await;
                };
                match self
                    .gateway
                    .disconnect_app(visitor.account.id, GrantId(grant))
                    .await
                {
                    // Post/redirect/get: a reload does not post again.
                    Ok(true) => PageView::SeeOther(APPS_PATH.to_owned()).into(),
                    Ok(false) => self.apps_list(visitor, Some(NOT_CONNECTED)).await,
                    Err(error) => PageView::Unavailable(error).into(),
                }
            }
            _ => unknown_form(),
        }
    }

    /// The list of connected applications.
    async fn apps_list(&self, visitor: Visitor, notice: Option<&'static str>) -> PageReply {
        let apps = match self.gateway.connected_apps(visitor.account.id).await {
            Ok(apps) => apps,
            Err(error) => return PageView::Unavailable(error).into(),
        };
        PageView::Apps(AppsList {
            csrf: self.keys.account_token(&visitor.session),
            account: visitor.account,
            apps,
            notice,
        })
        .into()
    }

    /// Our sign-in form for the account page, or the host's sign-in.
    fn apps_sign_in(&self, request: &PageRequest<'_>, email: &str, notice: Notice) -> PageReply {
        let form = SignInForm {
            client_name: None,
            action: APPS_PATH,
            query: String::new(),
            csrf: String::new(),
            email: email.to_owned(),
            notice,
        };
        self.sign_in_form(request, form, ACCOUNT_COOKIE_PATH, APPS_PATH)
    }
}

/// A page with a title and a paragraph.
fn message(status: u16, title: &'static str, message: &'static str) -> PageReply {
    PageView::Message {
        status,
        title,
        message,
    }
    .into()
}

/// A form this page does not know.
fn unknown_form() -> PageReply {
    message(400, "Unknown form", "This form is not one of this page's.")
}

/// An account form whose CSRF token does not match.
fn expired() -> PageReply {
    PageView::FormExpired {
        again: APPS_PATH.to_owned(),
    }
    .into()
}
