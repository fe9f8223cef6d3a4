//! The dialog's flows (`GET` and `POST /auth/dialog`): the core decides
//! what the request is and where the browser goes back to
//! ([`Gateway::authorization_request`](crate::Gateway::authorization_request),
//! `approve`, `deny`); these decide who the browser is and which page or
//! redirect it gets.

use crate::oauth::dialog::{AuthorizationRequest, DialogError};
use crate::signin::flows::Visitor;
use crate::signin::flows::{DIALOG_PATH, PageFlows, form_fields, is_form, refused};
use crate::signin::method::{PageRequest, SignInMethod};
use crate::signin::session::{LOGIN_COOKIE, SESSION_COOKIE, same_token};
use crate::signin::view::{ConsentScreen, Notice, PageReply, PageView, SignInForm};

impl PageFlows {
    /// `GET /auth/dialog?query`: validates the request, then shows the
    /// sign-in form (or sends the browser to the host's sign-in), or the
    /// consent screen to a browser already signed in.
    pub async fn dialog_page(&self, query: &str, request: &PageRequest<'_>) -> PageReply {
        let authorization = match self.gateway.authorization_request(query).await {
            Ok(authorization) => authorization,
            Err(error) => return self.dialog_error(error),
        };
        match self.visitor(request).await {
            Ok(Some(visitor)) => self.consent(&authorization, query, visitor),
            Ok(None) => self.login_form(request, &authorization, query, "", Notice::None),
            Err(error) => PageView::Unavailable(error).into(),
        }
    }

    /// `POST /auth/dialog`: the sign-in form (`action=login`), the consent
    /// form (`action=consent`, `decision=allow|deny`) and "sign in with
    /// another account" (`action=switch`). Every one carries the dialog
    /// query, which is validated again, and a CSRF token bound to it.
    /// `content_type` and `body` are the request's.
    pub async fn dialog_form(
        &self,
        content_type: Option<&str>,
        body: &[u8],
        request: &PageRequest<'_>,
    ) -> PageReply {
        if !is_form(content_type) {
            return message(
                415,
                "Unsupported form",
                "This page only accepts the forms of the sign-in dialog.",
            );
        }
        let [action, query, csrf, email, password, decision] = form_fields(
            body,
            ["action", "query", "csrf", "email", "password", "decision"],
        );
        // The query goes back into a Location header: it must be what a
        // browser sends in a URL (visible ASCII), as it was when the dialog
        // was opened.
        if !query.bytes().all(|b| b.is_ascii_graphic() && b != b'#') {
            let error = DialogError::MalformedQuery("unexpected characters".into());
            return self.dialog_error(error);
        }
        let authorization = match self.gateway.authorization_request(&query).await {
            Ok(authorization) => authorization,
            Err(error) => return self.dialog_error(error),
        };
        let again = || PageView::SeeOther(format!("{DIALOG_PATH}?{query}"));
        match action.as_str() {
            "login" if matches!(self.method, SignInMethod::Form(_)) => {
                let nonce = request.cookie(LOGIN_COOKIE).unwrap_or_default();
                if nonce.is_empty() || !same_token(&self.keys.login_token(nonce, &query), &csrf) {
                    return expired(&query);
                }
                // Without the address there is no throttle: refused, never
                // counted with everyone else's.
                let Some(peer) = request.peer else {
                    return message(
                        500,
                        "Service unavailable",
                        "The service cannot tell where this sign-in comes from.",
                    );
                };
                match self.sign_in(&email, &password, peer).await {
                    // Post/redirect/get: reloading the consent screen never
                    // resends the password.
                    Ok(Some(account)) => PageReply {
                        view: again(),
                        set_cookies: self.start_session(&account, DIALOG_PATH),
                    },
                    Ok(None) => unknown_form(),
                    Err(refusal) => refused(refusal, |notice| {
                        self.login_form(request, &authorization, &query, &email, notice)
                    }),
                }
            }
            "consent" | "switch" => {
                let visitor = match self.visitor(request).await {
                    Ok(Some(visitor)) => visitor,
                    Ok(None) => {
                        let notice = Notice::SessionExpired;
                        return self.login_form(request, &authorization, &query, "", notice);
                    }
                    Err(error) => return PageView::Unavailable(error).into(),
                };
                if !same_token(&self.keys.consent_token(&visitor.session, &query), &csrf) {
                    return expired(&query);
                }
                if action == "switch" {
                    return match &self.method {
                        SignInMethod::Form(_) => PageReply {
                            view: again(),
                            set_cookies: vec![self.cookie_at(DIALOG_PATH, SESSION_COOKIE, "", 0)],
                        },
                        // The host's session is the host's to end.
                        SignInMethod::Host(host) => {
                            let return_to = format!("{DIALOG_PATH}?{query}");
                            PageView::SeeOther(host.sign_in_location(&return_to)).into()
                        }
                    };
                }
                let answer = match decision.as_str() {
                    "allow" => match self
                        .gateway
                        .approve(&authorization, visitor.account.id)
                        .await
                    {
                        Ok(approval) => self.gateway.answer(approval),
                        Err(error) => return PageView::Unavailable(error).into(),
                    },
                    "deny" => self.gateway.answer(self.gateway.deny(&authorization)),
                    _ => return message(400, "Choose an answer", "Please choose Allow or Deny."),
                };
                PageView::Redirect(answer).into()
            }
            _ => unknown_form(),
        }
    }

    /// Our sign-in form for the dialog, or the host's sign-in.
    fn login_form(
        &self,
        request: &PageRequest<'_>,
        authorization: &AuthorizationRequest,
        query: &str,
        email: &str,
        notice: Notice,
    ) -> PageReply {
        let form = SignInForm {
            client_name: Some(authorization.client_name().to_owned()),
            action: DIALOG_PATH,
            query: query.to_owned(),
            csrf: String::new(),
            email: email.to_owned(),
            notice,
        };
        let return_to = format!("{DIALOG_PATH}?{query}");
        self.sign_in_form(request, form, DIALOG_PATH, &return_to)
    }

    /// The consent screen, its CSRF token bound to the session and query.
    fn consent(
        &self,
        authorization: &AuthorizationRequest,
        query: &str,
        visitor: Visitor,
    ) -> PageReply {
        PageView::Consent(ConsentScreen {
            client_name: authorization.client_name().to_owned(),
            redirect_uri: authorization.redirect_uri().to_owned(),
            csrf: self.keys.consent_token(&visitor.session, query),
            account: visitor.account,
            query: query.to_owned(),
        })
        .into()
    }

    /// The dialog's answer for a refused request: a page for the user when
    /// the redirect URI cannot be trusted (RFC 6749 section 4.1.2.1), else
    /// the redirect to the application.
    fn dialog_error(&self, error: DialogError) -> PageReply {
        if let DialogError::Store(error) = error {
            return PageView::Unavailable(error).into();
        }
        let answer = self.gateway.answer(&error);
        if error.redirects() {
            return PageView::Redirect(answer).into();
        }
        PageView::DialogRefused {
            status: answer.status,
            error,
        }
        .into()
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

/// A form this page does not know (or our sign-in form, under a host's
/// sign-in).
fn unknown_form() -> PageReply {
    message(
        400,
        "Unknown form",
        "This form is not one of the sign-in dialog's.",
    )
}

/// A dialog form whose CSRF token does not match.
fn expired(query: &str) -> PageReply {
    PageView::FormExpired {
        again: format!("{DIALOG_PATH}?{query}"),
    }
    .into()
}
