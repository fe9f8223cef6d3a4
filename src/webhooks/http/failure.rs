//! What a failed request of [`super::HttpWebhookTransport`] comes to: the
//! resolver's refusal, a timeout, or a short reason for the operator.

use std::error::Error;

use crate::webhooks::http::resolver::{chain, refusal_in};
use crate::webhooks::transport::SendOutcome;

/// The longest reason kept: a line of a log, not a dump.
const MAX_REASON_CHARS: usize = 200;

/// The outcome of a request that got no answer.
///
/// The reason names the kind of failure and its innermost cause (`Connection
/// refused`, a TLS alert, a certificate error). It never holds the URL (its
/// path or query may carry a receiver's token), a header or the body: the
/// URL is taken off the client's error, and the causes below it are
/// socket, TLS and HTTP-parsing errors, which do not quote the request.
pub(crate) fn outcome_of(error: reqwest::Error) -> SendOutcome {
    let error = error.without_url();
    if let Some(refused) = refusal_in(&error) {
        return SendOutcome::Refused(refused);
    }
    if error.is_timeout() {
        return SendOutcome::TimedOut;
    }
    let kind = if error.is_connect() {
        "connection failed"
    } else if error.is_builder() {
        "request not built"
    } else {
        "request failed"
    };
    SendOutcome::Failed(reason(kind, &error))
}

/// `kind` and the innermost cause of `error`, cut to [`MAX_REASON_CHARS`].
fn reason(kind: &str, error: &(dyn Error + 'static)) -> String {
    let innermost = chain(error).last().unwrap_or(error);
    let reason = format!("{kind}: {innermost}");
    match reason.char_indices().nth(MAX_REASON_CHARS) {
        Some((cut, _)) => reason[..cut].to_owned(),
        None => reason,
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    #[test]
    fn the_reason_is_the_innermost_cause_cut_short() {
        let refused = io::Error::new(io::ErrorKind::ConnectionRefused, "connection refused");
        assert_eq!(
            reason("connection failed", &refused),
            "connection failed: connection refused"
        );
        let long = io::Error::other("é".repeat(500));
        assert_eq!(
            reason("request failed", &long).chars().count(),
            MAX_REASON_CHARS
        );
    }
}
