//! The dialog's HTML: one page template with an inline style sheet, the
//! escaping of every value put in it, and the headers of every dialog
//! answer (no caching, no framing, a Content-Security-Policy that allows
//! that one style sheet and no script).

use std::sync::LazyLock;

use axum::body::Body;
use axum::http::StatusCode;
use axum::http::header::{self, HeaderName, HeaderValue};
use axum::response::{IntoResponse as _, Response};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use conversion_gateway::HttpAnswer;
use sha2::{Digest as _, Sha256};

const STYLE: &str = "\
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

/// The Content-Security-Policy source of the inline style sheet: its hash,
/// so that no other style (and no script at all) can run on the pages.
static STYLE_HASH: LazyLock<String> = LazyLock::new(|| {
    format!(
        "'sha256-{}'",
        STANDARD.encode(Sha256::digest(STYLE.as_bytes()))
    )
});

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

/// The CSP source of a redirect URI's origin (`https://app.example`, or
/// `com.example.app:` for a custom scheme), or `None` if it is not one that
/// can be written in a policy.
pub fn csp_source(uri: &str) -> Option<String> {
    let (scheme, rest) = uri.split_once(':')?;
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if !scheme_ok {
        return None;
    }
    let Some(rest) = rest.strip_prefix("//") else {
        return Some(format!("{scheme}:"));
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit('@').next()?;
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c));
    host_ok.then(|| format!("{scheme}://{host}"))
}

/// "3 seconds", "14 minutes": a wait as a person reads it, rounded up.
pub fn wait_text(seconds: u64) -> String {
    match seconds {
        1 => "1 second".to_owned(),
        0..=90 => format!("{seconds} seconds"),
        _ => format!("{} minutes", seconds.div_ceil(60)),
    }
}

/// The headers of every dialog answer: never cached (they carry codes and
/// CSRF tokens), never framed (clickjacking a consent screen), and no script,
/// plugin or foreign style. `form_target` is the origin the consent form's
/// answer redirects to: browsers check a form's redirects against
/// `form-action` too, so the application's origin must be allowed there.
fn page_headers(response: &mut Response, form_target: Option<&str>) {
    let form_action = match form_target {
        Some(target) => format!("'self' {target}"),
        None => "'self'".to_owned(),
    };
    let policy = format!(
        "default-src 'none'; style-src {}; form-action {form_action}; frame-ancestors 'none'; base-uri 'none'",
        *STYLE_HASH
    );
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if let Ok(policy) = HeaderValue::from_str(&policy) {
        headers.insert(header::CONTENT_SECURITY_POLICY, policy);
    }
}

/// An HTML page of the dialog.
pub fn page(status: u16, title: &str, body: &str, form_target: Option<&str>) -> Response {
    let html = format!(
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · Conversion Gateway</title>
<style>{STYLE}</style>
</head>
<body>
<main>
{body}
</main>
</body>
</html>
"#,
        title = escape(title),
    );
    let mut response = Response::new(Body::from(html));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    page_headers(&mut response, form_target);
    response
}

/// A page with a title and one paragraph.
pub fn message_page(status: u16, title: &str, message: &str) -> Response {
    let body = format!("<h1>{}</h1>\n<p>{}</p>", escape(title), escape(message));
    page(status, title, &body, None)
}

/// The page for a form whose CSRF token does not match (403), with a link
/// that opens the dialog again.
pub fn csrf_refused(query: &str) -> Response {
    let body = format!(
        r#"<h1>Form expired</h1>
<p>This form has expired or was not sent from this site, so it was not accepted.</p>
<p><a href="/auth/dialog?{query}">Open the sign-in page again</a></p>"#,
        query = escape(query),
    );
    page(403, "Form expired", &body, None)
}

/// A redirect from the dialog (to the application, with a code or an
/// error), with the dialog's headers.
pub fn redirect(answer: HttpAnswer) -> Response {
    let mut response = answer.into_response();
    page_headers(&mut response, None);
    response
}

/// `303 See Other` back to the dialog for this request.
pub fn see_other(query: &str) -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SEE_OTHER;
    append_header(
        &mut response,
        header::LOCATION,
        &format!("/auth/dialog?{query}"),
    );
    page_headers(&mut response, None);
    response
}

/// Adds a header, unless its value is not valid HTTP (a value built from
/// a request, such as a `Location`, could hold a control character).
pub fn append_header(response: &mut Response, name: HeaderName, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        response.headers_mut().append(name, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csp_sources_are_origins_or_schemes() {
        let source = |uri| csp_source(uri);
        assert_eq!(
            source("http://127.0.0.1:9/callback").as_deref(),
            Some("http://127.0.0.1:9")
        );
        assert_eq!(
            source("https://u:p@app.example/cb?x#y").as_deref(),
            Some("https://app.example")
        );
        assert_eq!(
            source("com.example.app:/callback").as_deref(),
            Some("com.example.app:")
        );
        assert_eq!(source("https://app.example;script-src *"), None);
        assert_eq!(source("1http://x"), None);
        assert_eq!(source("no-colon"), None);
    }

    #[test]
    fn escaping_covers_text_and_attribute_values() {
        assert_eq!(
            escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }
}
