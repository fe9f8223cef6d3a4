//! The crate's own [`WebhookTransport`]: deliveries POSTed with reqwest over
//! rustls, checked against server-side request forgery before sending and
//! at each connection.

mod failure;
pub(crate) mod resolver;

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use reqwest::{Client, Response, redirect};

use crate::webhooks::destination::check_url;
use crate::webhooks::http::resolver::{CheckedResolver, Lookup, NameLookup};
use crate::webhooks::transport::{
    MAX_ANSWER_BYTES, OutgoingRequest, SendOutcome, WebhookTransport,
};

/// The `User-Agent` of every delivery: receivers can tell the sender and
/// its version apart in their logs.
const USER_AGENT: &str = concat!(env!("CARGO_PKG_NAME"), "/", env!("CARGO_PKG_VERSION"));

/// The longest `Retry-After` kept: an HTTP date is 29 characters, a number
/// of seconds fewer. A longer value is no `Retry-After` anyone can honour,
/// and the receiver is not to fill the attempt records with it.
const MAX_RETRY_AFTER_LEN: usize = 64;

/// Sends webhook deliveries over HTTPS with reqwest (feature `webhooks`).
///
/// One client serves every delivery, so connections to a receiver are
/// pooled. Each request is a POST of the body with
/// `Content-Type: application/json`, the request's headers and a
/// `User-Agent` naming this crate and its version; redirects are never
/// followed (a 3xx is the answer), proxies from the environment are not
/// used (a proxy would connect to addresses nobody checked), and the
/// request's timeout bounds the whole attempt: name lookup, connection,
/// sending and the answer.
///
/// Unless private destinations are allowed, a URL is refused
/// ([`SendOutcome::Refused`]) before anything is sent when it is not
/// `https` or its host is a non-public address or `localhost`
/// ([`check_url`]), and a host name is resolved at each new connection and
/// refused when any of its addresses is not public
/// ([`is_public_address`](crate::is_public_address)), so a name that later
/// resolves to an internal address (DNS rebinding) is caught. A pooled
/// connection is reused without a new lookup: it goes to an address
/// already checked.
///
/// Of an answer, the status and `Retry-After` count; at most
/// [`MAX_ANSWER_BYTES`] of its body are read, to let a short body end and
/// the connection be reused, and then dropped, never kept or logged. Once
/// the status has come, the attempt's outcome is that answer, even when the
/// body is longer than the bound or still coming at the timeout (then the
/// connection is closed).
///
/// It runs on tokio, in a runtime with its timer and I/O drivers enabled.
pub struct HttpWebhookTransport {
    client: Client,
    allow_private: bool,
}

impl HttpWebhookTransport {
    /// A transport resolving host names with the system's resolver;
    /// `allow_private` lets deliveries go to `http` URLs and non-public
    /// addresses (tests, receivers on a private network).
    ///
    /// # Errors
    /// [`HttpTransportError::Client`] when the HTTP client cannot be built:
    /// the system's store of trusted certificates cannot be read.
    pub fn new(allow_private: bool) -> Result<Self, HttpTransportError> {
        Self::build(Lookup::System, allow_private)
    }

    /// A transport resolving host names with `lookup` (the addresses of a
    /// name, none when it does not resolve) instead of the system's
    /// resolver: for tests, which make a name resolve to the address they
    /// need, and for hosts that pin receivers' names. The addresses are
    /// checked as [`HttpWebhookTransport::new`]'s are. `lookup` is called
    /// on the runtime's thread at each new connection, so it must not
    /// block.
    ///
    /// # Errors
    /// As [`HttpWebhookTransport::new`].
    pub fn with_lookup(
        allow_private: bool,
        lookup: NameLookup,
    ) -> Result<Self, HttpTransportError> {
        Self::build(Lookup::Given(lookup), allow_private)
    }

    fn build(lookup: Lookup, allow_private: bool) -> Result<Self, HttpTransportError> {
        let client = Client::builder()
            // Redirects are answers: following one would send the delivery
            // (and its signature) to a URL nobody registered or checked.
            .redirect(redirect::Policy::none())
            // A proxy resolves and connects on our behalf, out of reach of
            // the resolver's checks.
            .no_proxy()
            .https_only(!allow_private)
            .user_agent(USER_AGENT)
            .dns_resolver(Arc::new(CheckedResolver::new(lookup, allow_private)))
            .build()
            .map_err(|error| HttpTransportError::Client(Box::new(error)))?;
        Ok(HttpWebhookTransport {
            client,
            allow_private,
        })
    }
}

impl fmt::Debug for HttpWebhookTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpWebhookTransport")
            .field("allow_private", &self.allow_private)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl WebhookTransport for HttpWebhookTransport {
    async fn post(&self, request: &OutgoingRequest) -> SendOutcome {
        let url = match check_url(&request.url, self.allow_private) {
            Ok(url) => url,
            Err(refused) => return SendOutcome::Refused(refused),
        };
        let headers = match headers_of(request) {
            Ok(headers) => headers,
            Err(reason) => return SendOutcome::Failed(reason),
        };
        let started = Instant::now();
        let sending = self
            .client
            .post(url)
            .headers(headers)
            .body(request.body.clone())
            .send();
        let response = match tokio::time::timeout(request.timeout, sending).await {
            Err(_elapsed) => return SendOutcome::TimedOut,
            Ok(Err(error)) => return failure::outcome_of(error),
            Ok(Ok(response)) => response,
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .filter(|value| value.len() <= MAX_RETRY_AFTER_LEN)
            .map(str::to_owned);
        let remaining = request.timeout.saturating_sub(started.elapsed());
        // The body is read only to end the exchange cleanly: neither a
        // timeout nor an error while reading it changes the answer.
        let _ = tokio::time::timeout(remaining, drain(response)).await;
        SendOutcome::Answered {
            status,
            retry_after,
        }
    }
}

/// The request's headers, then `Content-Type: application/json` (which a
/// request's own headers do not override).
///
/// # Errors
/// A reason naming the header that is not valid HTTP (never its value).
fn headers_of(request: &OutgoingRequest) -> Result<HeaderMap, String> {
    let mut headers = HeaderMap::with_capacity(request.headers.len() + 1);
    for (name, value) in &request.headers {
        let invalid = || format!("request not built: invalid header {name:?}");
        let header_name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid())?;
        let header_value = HeaderValue::from_str(value).map_err(|_| invalid())?;
        headers.append(header_name, header_value);
    }
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(headers)
}

/// Reads and drops the answer's body until it ends or passes
/// [`MAX_ANSWER_BYTES`]; returning drops the response, which closes a
/// connection whose body was not read to its end.
async fn drain(mut response: Response) {
    // A declared length over the bound: not worth a byte.
    if response
        .content_length()
        .is_some_and(|length| length > MAX_ANSWER_BYTES as u64)
    {
        return;
    }
    let mut read = 0usize;
    while let Ok(Some(chunk)) = response.chunk().await {
        read = read.saturating_add(chunk.len());
        if read > MAX_ANSWER_BYTES {
            return;
        }
    }
}

/// Why an [`HttpWebhookTransport`] could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpTransportError {
    /// The HTTP client could not be built (its TLS configuration: the
    /// system's trusted certificates could not be loaded).
    #[error("the webhook HTTP client could not be built")]
    Client(#[source] Box<dyn std::error::Error + Send + Sync>),
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn request(headers: Vec<(&'static str, String)>) -> OutgoingRequest {
        OutgoingRequest {
            url: "https://hooks.example.com/in".to_owned(),
            headers,
            body: b"{}".to_vec(),
            timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn content_type_is_json_whatever_the_request_says() {
        let headers = headers_of(&request(vec![
            ("webhook-id", "msg_1".to_owned()),
            ("content-type", "text/plain".to_owned()),
        ]))
        .unwrap();
        assert_eq!(headers.get_all(CONTENT_TYPE).iter().count(), 1);
        assert_eq!(headers[CONTENT_TYPE], "application/json");
        assert_eq!(headers["webhook-id"], "msg_1");
    }

    #[test]
    fn an_invalid_header_is_named_without_its_value() {
        let reason = headers_of(&request(vec![(
            "webhook-signature",
            "v1,secret\r\nx: y".to_owned(),
        )]))
        .unwrap_err();
        assert_eq!(
            reason,
            "request not built: invalid header \"webhook-signature\""
        );
        assert!(headers_of(&request(vec![("bad name", "v".to_owned())])).is_err());
    }

    #[test]
    fn its_debug_names_the_setting_and_nothing_of_the_client() {
        let transport = HttpWebhookTransport::new(true).unwrap();
        assert_eq!(
            format!("{transport:?}"),
            "HttpWebhookTransport { allow_private: true, .. }"
        );
    }

    #[test]
    fn the_user_agent_names_the_crate_and_its_version() {
        assert_eq!(
            USER_AGENT,
            format!("conversion-gateway/{}", env!("CARGO_PKG_VERSION"))
        );
    }
}
