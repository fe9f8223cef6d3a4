//! A flow's [`PageReply`] as an axum response: the page from the
//! templates, its status, cookies and `Retry-After`, and the headers of
//! every page answer (no caching, no framing, a Content-Security-Policy
//! that allows the one style sheet and no script).

use axum::body::Body;
use axum::http::StatusCode;
use axum::http::header::{self, HeaderName, HeaderValue};
use axum::response::{IntoResponse as _, Response};

use crate::axum::pages::templates::Templates;
use crate::signin::view::{PageReply, PageView};

/// Renders `reply` with `templates`; `style_hash` is the policy's source
/// for their style sheet (`'sha256-…'`).
pub(crate) fn render(reply: PageReply, templates: &dyn Templates, style_hash: &str) -> Response {
    let page = |status: u16, title: &str, body: String, form_target: Option<&str>| {
        let html = templates.document(title, &body);
        let mut response = Response::new(Body::from(html));
        *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        page_headers(&mut response, style_hash, form_target);
        response
    };
    let mut retry_after = None;
    let mut response = match reply.view {
        PageView::SignIn(form) => {
            retry_after = form.notice.retry_after();
            page(
                form.notice.status(),
                "Sign in",
                templates.sign_in(&form),
                None,
            )
        }
        PageView::Consent(screen) => {
            // A redirect URI whose origin cannot be written in the policy
            // gets `*`: a blocked redirect would break the flow for that app.
            let target = csp_source(&screen.redirect_uri).unwrap_or_else(|| "*".to_owned());
            page(
                200,
                "Allow access?",
                templates.consent(&screen),
                Some(&target),
            )
        }
        PageView::Apps(list) => {
            let status = if list.notice.is_some() { 404 } else { 200 };
            page(
                status,
                "Connected applications",
                templates.apps(&list),
                None,
            )
        }
        PageView::SeeOther(location) => {
            let mut response = Response::new(Body::empty());
            *response.status_mut() = StatusCode::SEE_OTHER;
            append_header(&mut response, header::LOCATION, &location);
            page_headers(&mut response, style_hash, None);
            response
        }
        PageView::Redirect(answer) => {
            let mut response = answer.into_response();
            page_headers(&mut response, style_hash, None);
            response
        }
        PageView::DialogRefused { status, error } => {
            let (title, message) = templates.dialog_refused(&error);
            page(status, &title, templates.message(&title, &message), None)
        }
        PageView::FormExpired { again } => {
            page(403, "Form expired", templates.form_expired(&again), None)
        }
        PageView::Message {
            status,
            title,
            message,
        } => page(status, title, templates.message(title, message), None),
        PageView::Unavailable(error) => {
            report_failure(&error);
            let (title, message) = (
                "Service unavailable",
                "The service is temporarily unavailable. Please try again in a moment.",
            );
            page(503, title, templates.message(title, message), None)
        }
    };
    for cookie in &reply.set_cookies {
        append_header(&mut response, header::SET_COOKIE, cookie);
    }
    if let Some(seconds) = retry_after {
        append_header(&mut response, header::RETRY_AFTER, &seconds.to_string());
    }
    response
}

/// The headers of every page answer: never cached (they carry codes and
/// CSRF tokens), never framed (clickjacking a consent screen), and no
/// script, plugin or foreign style. `form_target` is the origin the consent
/// form's answer redirects to: browsers check a form's redirects against
/// `form-action` too, so the application's origin must be allowed there.
fn page_headers(response: &mut Response, style_hash: &str, form_target: Option<&str>) {
    let form_action = match form_target {
        Some(target) => format!("'self' {target}"),
        None => "'self'".to_owned(),
    };
    let policy = format!(
        "default-src 'none'; style-src {style_hash}; form-action {form_action}; frame-ancestors 'none'; base-uri 'none'"
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

/// Adds a header, unless its value is not valid HTTP (a value built from
/// a request, such as a `Location`, could hold a control character).
fn append_header(response: &mut Response, name: HeaderName, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        response.headers_mut().append(name, value);
    }
}

/// The CSP source of a redirect URI's origin (`https://app.example`, or
/// `com.example.app:` for a custom scheme), or `None` if it is not one that
/// can be written in a policy.
fn csp_source(uri: &str) -> Option<String> {
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

/// Logs a failure the browser is told only "unavailable" about: the store's
/// error and its sources are for the operator.
fn report_failure(error: &dyn std::error::Error) {
    let mut causes = Vec::new();
    let mut source = error.source();
    while let Some(cause) = source {
        causes.push(cause.to_string());
        source = cause.source();
    }
    tracing::error!(error = %error, causes = ?causes, "page failed");
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
}
