//! The pages' HTML, behind [`Templates`]: one method per page, each with
//! today's HTML as its default, so a host replaces only the pages it wants
//! ([`DefaultTemplates`] replaces none). Every value put in a page is
//! escaped with [`escape`].

use time::format_description::well_known::Rfc3339;

use crate::oauth::dialog::DialogError;
use crate::oauth::lifecycle::ConnectedApp;
use crate::signin::flows::{APPS_PATH, DIALOG_PATH};
use crate::signin::view::{AppsList, ConsentScreen, Notice, SignInForm};

/// The default pages' style sheet, inlined in every page.
pub const STYLE: &str = "\
:root{color-scheme:light dark;font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif}\
body{margin:0;padding:1rem;line-height:1.5}\
main{max-width:28rem;margin:1.5rem auto;padding:1.5rem;border:1px solid #8886;border-radius:12px}\
h1{font-size:1.4rem;margin:0 0 1rem}\
label{display:block;margin:.8rem 0 .3rem;font-weight:600}\
input{box-sizing:border-box;width:100%;padding:.65rem;font-size:1rem;border:1px solid #8888;border-radius:6px}\
button{font-size:1rem;padding:.7rem 1.3rem;margin:1rem .5rem 0 0;border-radius:6px;border:1px solid #1a5fb4;background:#1a5fb4;color:#fff;cursor:pointer}\
button.secondary{background:transparent;color:inherit;border-color:#8888}\
button.link{background:none;border:0;padding:0;color:inherit;text-decoration:underline;font-size:.9rem}\
.error{padding:.75rem;border-radius:6px;border:1px solid #c01c28;background:#c01c2822}\
.small{font-size:.9rem}\
code{word-break:break-all}";

/// The HTML of the dialog and the account pages. Each page method returns
/// the inside of the page; [`Templates::document`] wraps it.
///
/// The pages' Content-Security-Policy allows no script and exactly one
/// style sheet, [`Templates::style_sheet`], inlined by
/// [`Templates::document`]: a host that replaces one replaces both. Forms
/// must post the hidden fields the defaults post (`action`, `query`,
/// `csrf`, and `email`, `password`, `decision` or `grant`).
pub trait Templates: Send + Sync {
    /// The inline style sheet; the policy allows its SHA-256 hash only.
    fn style_sheet(&self) -> &str {
        STYLE
    }

    /// A whole page around `body`, titled `title`.
    fn document(&self, title: &str, body: &str) -> String {
        format!(
            r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · Conversion Gateway</title>
<style>{style}</style>
</head>
<body>
<main>
{body}
</main>
</body>
</html>
"#,
            title = escape(title),
            style = self.style_sheet(),
        )
    }

    /// The HTML of a sign-in page's notice (empty for [`Notice::None`]).
    fn notice(&self, notice: Notice) -> String {
        let alert = |text: &str| format!(r#"<p class="error" role="alert">{text}</p>"#);
        match notice {
            Notice::WrongPassword => {
                alert("The e-mail or the password is wrong. Please try again.")
            }
            Notice::SessionExpired => alert("Your sign-in expired. Please sign in again."),
            Notice::TooManyAttempts { retry_after } => alert(&format!(
                "Too many failed sign-in attempts. For your account's safety, please try again in {}.",
                wait_text(retry_after)
            )),
            Notice::Busy { retry_after } => alert(&format!(
                "The service is busy. Please try again in {}.",
                wait_text(retry_after)
            )),
            _ => String::new(),
        }
    }

    /// Our sign-in form ("Sign in"), on the dialog or the account page.
    fn sign_in(&self, form: &SignInForm) -> String {
        let (intro, query) = match &form.client_name {
            Some(app) => (
                format!(
                    "<p><strong>{}</strong> wants to access your account. Sign in to continue.</p>",
                    escape(app)
                ),
                format!(
                    "\n<input type=\"hidden\" name=\"query\" value=\"{}\">",
                    escape(&form.query)
                ),
            ),
            None => (
                "<p>Sign in to see the applications connected to your account.</p>".to_owned(),
                String::new(),
            ),
        };
        format!(
            r#"<h1>Sign in</h1>
{intro}
{notice}
<form method="post" action="{action}">
<input type="hidden" name="action" value="login">{query}
<input type="hidden" name="csrf" value="{csrf}">
<label for="email">E-mail</label>
<input id="email" name="email" type="email" value="{email}" autocomplete="username" required autofocus>
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required>
<button type="submit">Sign in</button>
</form>"#,
            notice = self.notice(form.notice),
            action = form.action,
            csrf = escape(&form.csrf),
            email = escape(&form.email),
        )
    }

    /// The consent screen ("Allow access?"): the application, the account,
    /// Allow and Deny, and "sign in with another account".
    fn consent(&self, screen: &ConsentScreen) -> String {
        let hidden = format!(
            r#"<input type="hidden" name="query" value="{query}">
<input type="hidden" name="csrf" value="{csrf}">"#,
            query = escape(&screen.query),
            csrf = escape(&screen.csrf),
        );
        format!(
            r#"<h1>Allow access?</h1>
<p><strong>{app}</strong> asks to access the account <strong>{account}</strong> ({email}).</p>
<p>If you allow it, it can send conversion events and use the API for this account until the access is revoked.</p>
<p class="small">You will be sent back to <code>{redirect}</code>.</p>
<form method="post" action="{DIALOG_PATH}">
<input type="hidden" name="action" value="consent">
{hidden}
<button type="submit" name="decision" value="allow">Allow</button>
<button type="submit" name="decision" value="deny" class="secondary">Deny</button>
</form>
<form method="post" action="{DIALOG_PATH}">
<input type="hidden" name="action" value="switch">
{hidden}
<button type="submit" class="link">Not you? Sign in with another account</button>
</form>"#,
            app = escape(&screen.client_name),
            account = escape(&screen.account.name),
            email = escape(&screen.account.email),
            redirect = escape(&screen.redirect_uri),
        )
    }

    /// The account's connected applications ("Connected applications"),
    /// each with a disconnect button.
    fn apps(&self, list: &AppsList) -> String {
        let csrf = escape(&list.csrf);
        let rows: String = list
            .apps
            .iter()
            .map(|connected| app_row(connected, &csrf))
            .collect();
        let apps = if list.apps.is_empty() {
            "<p>No application is connected to this account.</p>".to_owned()
        } else {
            format!(
                "<table>\n<thead><tr><th>Application</th><th>Authorized</th><th>Last refreshed</th><th></th></tr></thead>\n<tbody>\n{rows}</tbody>\n</table>"
            )
        };
        let notice = list.notice.map_or_else(String::new, |text| {
            format!(r#"<p class="error" role="alert">{}</p>"#, escape(text))
        });
        format!(
            r#"<h1>Connected applications</h1>
<p>The applications that <strong>{account}</strong> ({email}) has allowed to use the API. Disconnecting one revokes its access at once; it would have to ask again.</p>
{notice}
{apps}"#,
            account = escape(&list.account.name),
            email = escape(&list.account.email),
        )
    }

    /// The title and paragraph of a dialog request refused and shown to
    /// the user.
    fn dialog_refused(&self, error: &DialogError) -> (String, String) {
        let (title, message) = match error {
            DialogError::MissingClientId => (
                "Incomplete link",
                "This sign-in link does not say which application is asking (client_id is missing). Please go back to the application and try again.",
            ),
            DialogError::UnknownClient => (
                "Unknown application",
                "No application is registered with this client_id. The link may be wrong or out of date: please tell the developer of the application that sent you here.",
            ),
            DialogError::MissingRedirectUri => (
                "Incomplete link",
                "This sign-in link does not say where to send you back (redirect_uri is missing). Please go back to the application and try again.",
            ),
            DialogError::ConflictingRedirectUri => (
                "Conflicting return addresses",
                "This sign-in link names two different addresses to send you back to (redirect_uri and redirect_url). For your safety, you were not sent to either.",
            ),
            DialogError::UnregisteredRedirectUri => (
                "Unregistered return address",
                "The application asked to send you back to an address (redirect_uri) it has not registered. For your safety, you were not sent there and nothing was shared. Please tell the developer of the application.",
            ),
            DialogError::MalformedQuery(_) => (
                "Malformed link",
                "This sign-in link could not be read. Please go back to the application and try again.",
            ),
            // Redirected or answered 503 before a template is asked; a
            // future variant is shown by its own (secret-free) message.
            _ => return ("Request refused".to_owned(), error.to_string()),
        };
        (title.to_owned(), message.to_owned())
    }

    /// A page with a title and one paragraph.
    fn message(&self, title: &str, message: &str) -> String {
        format!("<h1>{}</h1>\n<p>{}</p>", escape(title), escape(message))
    }

    /// A form whose CSRF token does not match ("Form expired"), with a
    /// link to `again`, which opens its page again.
    fn form_expired(&self, again: &str) -> String {
        let link = if again.starts_with(APPS_PATH) {
            "Open the page again"
        } else {
            "Open the sign-in page again"
        };
        format!(
            r#"<h1>Form expired</h1>
<p>This form has expired or was not sent from this site, so it was not accepted.</p>
<p><a href="{again}">{link}</a></p>"#,
            again = escape(again),
        )
    }
}

/// Today's pages, every method its default.
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultTemplates;

impl Templates for DefaultTemplates {}

/// One application's row: its name, dates and the disconnect form.
fn app_row(connected: &ConnectedApp, csrf: &str) -> String {
    let date = |at: time::OffsetDateTime| at.format(&Rfc3339).unwrap_or_default();
    format!(
        r#"<tr><td>{name}</td><td><time>{authorized}</time></td><td>{refreshed}</td><td>
<form method="post" action="{APPS_PATH}">
<input type="hidden" name="action" value="disconnect">
<input type="hidden" name="grant" value="{grant}">
<input type="hidden" name="csrf" value="{csrf}">
<button type="submit" class="secondary">Disconnect</button>
</form></td></tr>
"#,
        name = escape(&connected.name),
        authorized = date(connected.authorized_at),
        refreshed = connected.last_refreshed_at.map_or_else(
            || "never".to_owned(),
            |at| format!("<time>{}</time>", date(at))
        ),
        grant = connected.grant_id,
    )
}

/// Escapes text for HTML content and quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// "3 seconds", "14 minutes": a wait as a person reads it, rounded up.
pub fn wait_text(seconds: u64) -> String {
    match seconds {
        1 => "1 second".to_owned(),
        0..=90 => format!("{seconds} seconds"),
        _ => format!("{} minutes", seconds.div_ceil(60)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_text_and_attribute_values() {
        assert_eq!(
            escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn waits_read_as_seconds_then_minutes() {
        assert_eq!(wait_text(1), "1 second");
        assert_eq!(wait_text(90), "90 seconds");
        assert_eq!(wait_text(840), "14 minutes");
        assert_eq!(wait_text(900), "15 minutes");
    }
}
