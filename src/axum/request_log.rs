//! Request ids and the request log: one line per request, and the id that
//! ties a client's report to that line.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use ::axum::Router;
use ::axum::extract::Request;
use ::axum::middleware::{self, Next};
use ::axum::response::Response;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::HeaderValue;
use tower::{Layer as _, Service};

use crate::random::{OsRandom, RandomSource as _};

/// The header that carries a request's id, both ways: a client may send
/// one, and every answer carries the id its log line names.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// A request's id, in the request's extensions for the host's handlers
/// (`Extension<RequestId>`) under [`with_request_log`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestId(pub String);

/// `router` under the request log: one line per request (`tracing`, level
/// info, warn for a 5xx) with its id, method, path, status and latency in
/// milliseconds, and the id in the answer's `X-Request-Id`.
///
/// The id is the client's own `X-Request-Id` when it is 1 to 64 letters,
/// digits, `-`, `_` or `.` (safe to log and echo as it is), else a fresh
/// random one. The query string is never logged: it carries `api_key` on
/// `/platform/conversions` and may carry a `code` on `/auth/token`, and
/// keys in logs are a leak waiting to happen.
///
/// The log wraps the router as a whole: laid with `Router::layer`, it
/// would wrap each route instead, at the cost of another boxed copy of the
/// route for every request. Serve the result with
/// [`serve`](crate::axum::serve()) or axum's own.
pub fn with_request_log(
    router: Router,
) -> impl Service<Request, Response = Response, Error = Infallible, Future: Send + 'static>
+ Clone
+ Send
+ Sync
+ 'static {
    middleware::from_fn(log_request).layer(router)
}

/// Logs one request and echoes its id.
async fn log_request(mut request: Request, next: Next) -> Response {
    let request_id = request_id(&request);
    let method = request.method().clone();
    // The path only: see `with_request_log`.
    let path = request.uri().path().to_owned();
    request
        .extensions_mut()
        .insert(RequestId(request_id.clone()));
    let started = Instant::now();
    let mut response = next.run(request).await;
    let status = response.status().as_u16();
    let latency_ms = milliseconds(started.elapsed());
    if status >= 500 {
        tracing::warn!(request_id, %method, path, status, latency_ms, "request");
    } else {
        tracing::info!(request_id, %method, path, status, latency_ms, "request");
    }
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    response
}

/// `elapsed` in milliseconds, to the microsecond: `0.015`, where
/// `as_secs_f64() * 1000.0` logged `0.015489000000000001`, the binary
/// rounding of a nanosecond count nobody reads.
fn milliseconds(elapsed: Duration) -> f64 {
    // Exact below 2^53 µs (285 years); the division by 1,000 is then the
    // closest f64 to the decimal, which `Debug` prints in its shortest form.
    elapsed.as_micros() as f64 / 1000.0
}

/// A request's id: the client's when it is well-formed, else a fresh one.
fn request_id(request: &Request) -> String {
    request
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|value| value.to_str().ok())
        .filter(|id| is_well_formed(id))
        .map_or_else(fresh_id, str::to_owned)
}

/// 96 random bits, base64url: 16 characters, unique enough to find one
/// request in a log.
fn fresh_id() -> String {
    let mut bytes = [0u8; 12];
    OsRandom.fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Whether a client-sent id can be logged and echoed as it is.
fn is_well_formed(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use ::axum::Extension;
    use ::axum::body::{Body, to_bytes};
    use ::axum::routing::get;
    use tower::ServiceExt as _;

    use super::*;

    #[test]
    fn only_short_plain_ids_are_kept() {
        for good in ["abc", "req-42_x.y", &"a".repeat(64)] {
            assert!(is_well_formed(good), "{good}");
        }
        for bad in [
            "",
            "has space",
            "a\nb",
            &"a".repeat(65),
            "é",
            "a;b",
            "<script>",
        ] {
            assert!(!is_well_formed(bad), "{bad:?}");
        }
        assert!(is_well_formed(&fresh_id()), "{}", fresh_id());
    }

    #[test]
    fn latency_is_logged_in_milliseconds_to_the_microsecond() {
        for (elapsed, logged) in [
            (Duration::from_nanos(15_489), "0.015"),
            (Duration::from_nanos(999), "0.0"),
            (Duration::from_micros(1), "0.001"),
            (Duration::from_millis(2), "2.0"),
            (Duration::new(1, 234_567_891), "1234.567"),
        ] {
            assert_eq!(
                format!("{:?}", milliseconds(elapsed)),
                logged,
                "{elapsed:?}"
            );
        }
    }

    /// The id the answer to `request` carries, and the one its handler saw.
    async fn ids(request: http::Request<Body>) -> (String, String) {
        let app = Router::new().route(
            "/",
            get(|Extension(RequestId(id)): Extension<RequestId>| async move { id }),
        );
        let response = with_request_log(app).oneshot(request).await.unwrap();
        let header = response.headers()[REQUEST_ID_HEADER]
            .to_str()
            .unwrap()
            .to_owned();
        let body = to_bytes(response.into_body(), 1024).await.unwrap();
        (header, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn a_well_formed_client_id_is_kept_and_echoed() {
        let request = http::Request::get("/")
            .header(REQUEST_ID_HEADER, "req-42")
            .body(Body::empty())
            .unwrap();
        assert_eq!(ids(request).await, ("req-42".into(), "req-42".into()));
    }

    #[tokio::test]
    async fn a_malformed_client_id_is_replaced_by_a_fresh_one() {
        let request = http::Request::get("/")
            .header(REQUEST_ID_HEADER, "<script>")
            .body(Body::empty())
            .unwrap();
        let (header, seen) = ids(request).await;
        assert_eq!(header, seen);
        assert_eq!(header.len(), 16, "{header}");
        assert!(is_well_formed(&header), "{header}");
    }
}
