//! `HttpWebhookTransport` against real receivers on 127.0.0.1 (axum, or a
//! raw socket where the answer must misbehave at the byte level), and its
//! refusals of destinations deliveries may not go to.
//!
//! Receivers are on loopback, so the transports that reach them allow
//! private destinations; the refusals use transports that do not.

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, TcpListener as StdTcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use conversion_gateway::{
    DestinationRefused, HttpWebhookTransport, OutgoingRequest, SendOutcome, WebhookOptions,
    WebhookTransport,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

/// The body of every delivery: JSON as the gateway writes it, with bytes a
/// careless client would re-encode (an escape, a non-ASCII character).
const BODY: &[u8] =
    "{\"type\":\"conversion.created\",\"data\":{\"name\":\"Zoë \\\"Z\\\"\"}}".as_bytes();

/// A secret the delivery carries in its signature header and URL, which
/// must never show in a reason.
const SECRET: &str = "whsec-s3cret";

/// Long enough for any loopback exchange, short enough to keep a failing
/// test quick.
const TIMEOUT: Duration = Duration::from_secs(5);

fn request(url: String, timeout: Duration) -> OutgoingRequest {
    OutgoingRequest {
        url,
        headers: vec![
            ("webhook-id", "msg_2xYz".to_owned()),
            ("webhook-timestamp", "1700000000".to_owned()),
            ("webhook-signature", format!("v1,{SECRET}")),
        ],
        body: BODY.to_vec(),
        timeout,
    }
}

/// A transport that may reach loopback receivers.
fn private() -> HttpWebhookTransport {
    HttpWebhookTransport::new(true).expect("the client builds")
}

/// A transport for public destinations only, whose lookup gives
/// `hooks.test` the addresses `addresses` (other names: none) and counts
/// its calls.
fn public_only(addresses: &[&str]) -> (HttpWebhookTransport, Arc<AtomicUsize>) {
    let addresses: Vec<IpAddr> = addresses
        .iter()
        .map(|address| address.parse().expect("an address"))
        .collect();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let transport = HttpWebhookTransport::with_lookup(
        false,
        Arc::new(move |name: &str| {
            counted.fetch_add(1, Ordering::SeqCst);
            if name == "hooks.test" {
                addresses.clone()
            } else {
                Vec::new()
            }
        }),
    )
    .expect("the client builds");
    (transport, calls)
}

/// One request as a receiver saw it.
#[derive(Debug)]
struct Received {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
}

/// Serves `app` on a port of 127.0.0.1 for the rest of the test.
async fn serve(app: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let address = listener.local_addr().expect("its address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

/// A receiver that records every request and answers each with `answer()`.
async fn recording<F>(answer: F) -> (SocketAddr, mpsc::UnboundedReceiver<Received>)
where
    F: Fn() -> Response + Clone + Send + Sync + 'static,
{
    let (sender, received) = mpsc::unbounded_channel();
    let app = Router::new().fallback(
        move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            let sender = sender.clone();
            let answer = answer.clone();
            async move {
                let _ = sender.send(Received {
                    method,
                    uri,
                    headers,
                    body,
                });
                answer()
            }
        },
    );
    (serve(app).await, received)
}

/// A port of 127.0.0.1 that accepts connections and never takes them, to
/// see whether anything connected.
fn watched_port() -> StdTcpListener {
    let listener = StdTcpListener::bind("127.0.0.1:0").expect("a port");
    listener.set_nonblocking(true).expect("non-blocking");
    listener
}

/// Fails if anything connected to `listener`: the kernel queues a
/// connection before the client's connect returns, so one made during an
/// attempt that has ended is there to accept.
fn assert_untouched(listener: &StdTcpListener) {
    match listener.accept() {
        Err(error) if error.kind() == ErrorKind::WouldBlock => {}
        other => panic!("something connected: {other:?}"),
    }
}

#[tokio::test]
async fn a_2xx_answer_comes_back_and_the_receiver_gets_the_exact_request() {
    let (address, mut received) = recording(|| StatusCode::NO_CONTENT.into_response()).await;
    let outcome = private()
        .post(&request(format!("http://{address}/in?app=7"), TIMEOUT))
        .await;
    assert_eq!(
        outcome,
        SendOutcome::Answered {
            status: 204,
            retry_after: None
        }
    );
    assert!(outcome.succeeded(), "{outcome:?}");
    assert_eq!(outcome.error(), None, "a 2xx is no failure");

    let seen = received.try_recv().expect("the receiver got the delivery");
    assert_eq!(seen.method, Method::POST);
    assert_eq!(seen.uri.to_string(), "/in?app=7");
    assert_eq!(seen.body, BODY);
    let header = |name: &str| {
        let values: Vec<_> = seen.headers.get_all(name).iter().collect();
        assert_eq!(values.len(), 1, "{name}: {values:?}");
        values[0].to_str().expect("text").to_owned()
    };
    assert_eq!(header("content-type"), "application/json");
    assert_eq!(
        header("user-agent"),
        format!("conversion-gateway/{}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(header("webhook-id"), "msg_2xYz");
    assert_eq!(header("webhook-timestamp"), "1700000000");
    assert_eq!(header("webhook-signature"), format!("v1,{SECRET}"));
    assert_eq!(header("content-length"), BODY.len().to_string());
}

#[tokio::test]
async fn a_500_is_an_answer_that_did_not_succeed() {
    let (address, _received) =
        recording(|| StatusCode::INTERNAL_SERVER_ERROR.into_response()).await;
    let outcome = private()
        .post(&request(format!("http://{address}/in"), TIMEOUT))
        .await;
    assert_eq!(
        outcome,
        SendOutcome::Answered {
            status: 500,
            retry_after: None
        }
    );
    assert_eq!(outcome.error().as_deref(), Some("status 500"));
}

#[tokio::test]
async fn a_503_brings_its_retry_after() {
    let (address, _received) = recording(|| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "120")],
        )
            .into_response()
    })
    .await;
    let outcome = private()
        .post(&request(format!("http://{address}/in"), TIMEOUT))
        .await;
    assert_eq!(
        outcome,
        SendOutcome::Answered {
            status: 503,
            retry_after: Some("120".to_owned())
        }
    );
}

#[tokio::test]
async fn a_redirect_is_the_answer_and_its_target_gets_nothing() {
    let (target, mut target_received) = recording(|| StatusCode::OK.into_response()).await;
    let location = format!("http://{target}/elsewhere");
    let (address, mut received) = recording(move || {
        (StatusCode::FOUND, [(header::LOCATION, location.clone())]).into_response()
    })
    .await;
    let outcome = private()
        .post(&request(format!("http://{address}/in"), TIMEOUT))
        .await;
    assert_eq!(
        outcome,
        SendOutcome::Answered {
            status: 302,
            retry_after: None
        }
    );
    assert!(!outcome.succeeded());
    assert_eq!(
        outcome.error().as_deref(),
        Some("redirect (302), not followed")
    );
    assert!(received.try_recv().is_ok(), "the receiver got the delivery");
    // A followed redirect would have been sent before `post` returned.
    let followed = target_received.try_recv();
    assert!(followed.is_err(), "the redirect was followed: {followed:?}");
}

#[tokio::test]
async fn a_receiver_that_never_answers_times_out_at_the_timeout() {
    let app = Router::new().fallback(|| async {
        std::future::pending::<()>().await;
        StatusCode::OK
    });
    let address = serve(app).await;
    let timeout = Duration::from_millis(300);
    let started = Instant::now();
    let outcome = private()
        .post(&request(format!("http://{address}/in"), timeout))
        .await;
    let took = started.elapsed();
    assert_eq!(outcome, SendOutcome::TimedOut);
    assert!(
        took >= timeout && took < timeout + Duration::from_secs(2),
        "took {took:?}"
    );
}

/// How a receiver frames its endless answer.
#[derive(Clone, Copy, Debug)]
enum Framing {
    /// `Transfer-Encoding: chunked`: the client cannot know the size before
    /// reading.
    Chunked,
    /// A `Content-Length` of 1 GiB.
    Declared,
}

/// The most an endless receiver writes before it gives up: what a client
/// reading everything would get.
const ENDLESS_CAP: u64 = 1 << 30;

/// A receiver on a raw socket that answers one request with 200 and a body
/// that does not end (before [`ENDLESS_CAP`]), and says how many body
/// bytes it wrote before the client closed the connection.
async fn endless_receiver(framing: Framing) -> (SocketAddr, oneshot::Receiver<u64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let address = listener.local_addr().expect("its address");
    let (report, written) = oneshot::channel();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.expect("a connection");
        read_request(&mut stream).await;
        let head = match framing {
            Framing::Chunked => "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_owned(),
            Framing::Declared => {
                format!("HTTP/1.1 200 OK\r\ncontent-length: {ENDLESS_CAP}\r\n\r\n")
            }
        };
        let chunk = vec![b'x'; 64 * 1024];
        let mut sent = 0u64;
        let mut result = stream.write_all(head.as_bytes()).await;
        while result.is_ok() && sent < ENDLESS_CAP {
            result = match framing {
                Framing::Chunked => {
                    let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
                    framed.extend_from_slice(&chunk);
                    framed.extend_from_slice(b"\r\n");
                    stream.write_all(&framed).await
                }
                Framing::Declared => stream.write_all(&chunk).await,
            };
            sent += chunk.len() as u64;
        }
        let _ = report.send(sent);
    });
    (address, written)
}

/// Reads a request's head and its `Content-Length` bytes of body; `false`
/// if the connection ended (or failed) first.
async fn read_request(stream: &mut TcpStream) -> bool {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut wanted = None;
    loop {
        if let Some(wanted) = wanted
            && buffer.len() >= wanted
        {
            return true;
        }
        let read = stream.read(&mut chunk).await.unwrap_or(0);
        if read == 0 {
            return false;
        }
        buffer.extend_from_slice(&chunk[..read]);
        if wanted.is_none()
            && let Some(end) = buffer.windows(4).position(|window| window == b"\r\n\r\n")
        {
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .and_then(|value| value.trim().parse::<usize>().ok())
                .unwrap_or(0);
            wanted = Some(end + 4 + length);
        }
    }
}

#[tokio::test]
async fn an_endless_answer_is_not_read_to_its_end() {
    for framing in [Framing::Chunked, Framing::Declared] {
        let (address, written) = endless_receiver(framing).await;
        let started = Instant::now();
        let outcome = private()
            .post(&request(format!("http://{address}/in"), TIMEOUT))
            .await;
        let took = started.elapsed();
        assert_eq!(
            outcome,
            SendOutcome::Answered {
                status: 200,
                retry_after: None
            },
            "{framing:?}"
        );
        // Well before the timeout: the attempt stopped reading, it did not
        // wait for the deadline.
        assert!(took < Duration::from_secs(2), "{framing:?} took {took:?}");
        // The connection is closed, so the receiver's writes fail long
        // before the cap (what it wrote is what the sockets' buffers took).
        let written = tokio::time::timeout(TIMEOUT, written)
            .await
            .expect("the receiver saw the connection end")
            .expect("a count");
        assert!(written < 64 << 20, "{framing:?}: wrote {written} bytes");
    }
}

/// A receiver on a raw socket that answers every request of every
/// connection with `answer`, keeping connections open, and counts the
/// connections it accepted.
async fn keep_alive_receiver(answer: Vec<u8>) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let address = listener.local_addr().expect("its address");
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let answer = answer.clone();
            tokio::spawn(async move {
                // Until the client closes it (a request of nothing).
                while read_request(&mut stream).await {
                    if stream.write_all(&answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (address, connections)
}

/// A 200 answer with a body of `length` bytes, declared or chunked (in
/// 16 KiB chunks).
fn answer_of(length: usize, framing: Framing) -> Vec<u8> {
    match framing {
        Framing::Declared => {
            let mut answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {length}\r\n\r\n");
            answer.push_str(&"x".repeat(length));
            answer.into_bytes()
        }
        Framing::Chunked => {
            let mut answer = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_owned();
            let mut left = length;
            while left > 0 {
                let size = left.min(16 * 1024);
                answer.push_str(&format!("{size:x}\r\n{}\r\n", "x".repeat(size)));
                left -= size;
            }
            answer.push_str("0\r\n\r\n");
            answer.into_bytes()
        }
    }
}

/// An answer whose body ends within 64 KiB (docs/webhooks.md: "at most
/// 64 KiB of an answer is read"; exactly that many included) is read to
/// its end, so the next delivery to the same receiver reuses the
/// connection; a longer one closes it.
#[tokio::test]
async fn a_short_answer_is_read_to_its_end_and_the_connection_reused() {
    const MAX_ANSWER_BYTES: usize = 64 * 1024;
    assert_eq!(conversion_gateway::MAX_ANSWER_BYTES, MAX_ANSWER_BYTES);
    let cases = [
        (100, Framing::Declared, 1),
        (MAX_ANSWER_BYTES, Framing::Declared, 1),
        (MAX_ANSWER_BYTES, Framing::Chunked, 1),
        (MAX_ANSWER_BYTES + 1, Framing::Declared, 2),
        (MAX_ANSWER_BYTES + 1, Framing::Chunked, 2),
    ];
    for (length, framing, expected) in cases {
        let (address, connections) = keep_alive_receiver(answer_of(length, framing)).await;
        let transport = private();
        for _ in 0..2 {
            let outcome = transport
                .post(&request(format!("http://{address}/in"), TIMEOUT))
                .await;
            assert_eq!(
                outcome,
                SendOutcome::Answered {
                    status: 200,
                    retry_after: None
                },
                "{length} bytes, {framing:?}"
            );
        }
        assert_eq!(
            connections.load(Ordering::SeqCst),
            expected,
            "{length} bytes, {framing:?}: connections"
        );
    }
}

#[tokio::test]
async fn a_closed_port_fails_with_a_reason_that_holds_no_secret() {
    let port = StdTcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a port")
        .port();
    let outcome = private()
        .post(&request(
            format!("http://127.0.0.1:{port}/in?token={SECRET}"),
            TIMEOUT,
        ))
        .await;
    match outcome {
        SendOutcome::Failed(reason) => {
            assert!(reason.starts_with("connection failed"), "{reason}");
            assert!(!reason.contains(SECRET), "{reason}");
            assert!(!reason.contains("/in"), "{reason}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn a_name_goes_to_the_addresses_its_lookup_gives() {
    let (address, mut received) = recording(|| StatusCode::OK.into_response()).await;
    let transport = HttpWebhookTransport::with_lookup(
        true,
        Arc::new(|name: &str| {
            if name == "hooks.test" {
                vec![IpAddr::from([127, 0, 0, 1])]
            } else {
                Vec::new()
            }
        }),
    )
    .expect("the client builds");
    let outcome = transport
        .post(&request(
            format!("http://hooks.test:{}/in", address.port()),
            TIMEOUT,
        ))
        .await;
    assert!(outcome.succeeded(), "{outcome:?}");
    let seen = received.try_recv().expect("the receiver got the delivery");
    assert_eq!(
        seen.headers[header::HOST],
        format!("hooks.test:{}", address.port())
    );
}

#[tokio::test]
async fn urls_that_are_not_https_to_a_public_host_are_refused_before_any_lookup() {
    let listener = watched_port();
    let port = listener.local_addr().expect("its address").port();
    let (transport, lookups) = public_only(&["93.184.215.14"]);
    for (url, refused) in [
        (
            format!("http://hooks.test:{port}/in"),
            DestinationRefused::Scheme,
        ),
        (
            format!("http://127.0.0.1:{port}/in"),
            DestinationRefused::Scheme,
        ),
        (
            format!("https://127.0.0.1:{port}/in"),
            DestinationRefused::PrivateAddress,
        ),
        (
            format!("https://[::1]:{port}/in"),
            DestinationRefused::PrivateAddress,
        ),
        (
            "https://169.254.169.254/latest/meta-data".to_owned(),
            DestinationRefused::PrivateAddress,
        ),
        (
            format!("https://localhost:{port}/in"),
            DestinationRefused::PrivateAddress,
        ),
        (
            format!("https://0x7f000001:{port}/in"),
            DestinationRefused::PrivateAddress,
        ),
        (
            format!("https://user:pass@hooks.test:{port}/in"),
            DestinationRefused::Malformed,
        ),
    ] {
        let outcome = transport.post(&request(url.clone(), TIMEOUT)).await;
        assert_eq!(outcome, SendOutcome::Refused(refused), "{url}");
    }
    assert_eq!(lookups.load(Ordering::SeqCst), 0);
    assert_untouched(&listener);
}

#[tokio::test]
async fn a_name_with_any_private_address_is_refused_at_connection() {
    let listener = watched_port();
    let port = listener.local_addr().expect("its address").port();
    for addresses in [
        &["127.0.0.1"][..],
        &["10.0.0.1"][..],
        &["169.254.169.254"][..],
        &["::1"][..],
        &["93.184.215.14", "127.0.0.1"][..],
    ] {
        let (transport, lookups) = public_only(addresses);
        let outcome = transport
            .post(&request(format!("https://hooks.test:{port}/in"), TIMEOUT))
            .await;
        assert_eq!(
            outcome,
            SendOutcome::Refused(DestinationRefused::PrivateAddress),
            "{addresses:?}"
        );
        assert_eq!(lookups.load(Ordering::SeqCst), 1, "{addresses:?}");
    }
    assert_untouched(&listener);
}

#[tokio::test]
async fn a_name_is_looked_up_again_at_each_delivery() {
    // The client keeps no answer of a lookup: a name's addresses may change
    // between deliveries (DNS rebinding), and each new connection is
    // checked on the addresses of the moment.
    let listener = watched_port();
    let port = listener.local_addr().expect("its address").port();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let transport = HttpWebhookTransport::with_lookup(
        false,
        Arc::new(move |_: &str| {
            if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                Vec::new()
            } else {
                vec![IpAddr::from([127, 0, 0, 1])]
            }
        }),
    )
    .expect("the client builds");
    let url = format!("https://hooks.test:{port}/in");
    assert_eq!(
        transport.post(&request(url.clone(), TIMEOUT)).await,
        SendOutcome::Refused(DestinationRefused::Unresolvable)
    );
    assert_eq!(
        transport.post(&request(url, TIMEOUT)).await,
        SendOutcome::Refused(DestinationRefused::PrivateAddress)
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_untouched(&listener);
}

#[tokio::test]
async fn a_name_that_does_not_resolve_is_refused() {
    let (transport, lookups) = public_only(&[]);
    let outcome = transport
        .post(&request("https://hooks.test/in".to_owned(), TIMEOUT))
        .await;
    assert_eq!(
        outcome,
        SendOutcome::Refused(DestinationRefused::Unresolvable)
    );
    assert_eq!(lookups.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_name_with_only_public_addresses_passes_the_resolver() {
    // Nothing answers HTTPS for hooks.test at a public address from a test
    // machine: the connection or the TLS handshake fails (or, behind a
    // firewall that drops packets, times out). Either way it was tried.
    let (transport, lookups) = public_only(&["1.1.1.1"]);
    let outcome = transport
        .post(&request(
            "https://hooks.test/in".to_owned(),
            Duration::from_secs(2),
        ))
        .await;
    match outcome {
        SendOutcome::Failed(_) | SendOutcome::TimedOut => {}
        other => panic!("expected a failed attempt, got {other:?}"),
    }
    assert_eq!(lookups.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn webhook_options_over_http_give_the_registration_and_the_transport_one_setting() {
    // Private destinations allowed: the loopback receiver gets the delivery.
    let options = WebhookOptions::over_http(true).expect("a client");
    assert!(options.allow_private);
    let (address, mut received) = recording(|| StatusCode::NO_CONTENT.into_response()).await;
    let url = format!("http://{address}/in");
    let outcome = options.transport.post(&request(url, TIMEOUT)).await;
    assert!(outcome.succeeded(), "{outcome:?}");
    assert!(received.try_recv().is_ok(), "the receiver got the delivery");

    // Refused: neither plain http nor a loopback address is reached.
    let options = WebhookOptions::over_http(false).expect("a client");
    assert!(!options.allow_private);
    let listener = watched_port();
    let port = listener.local_addr().expect("its address").port();
    let outcome = options
        .transport
        .post(&request(format!("https://127.0.0.1:{port}/in"), TIMEOUT))
        .await;
    assert_eq!(
        outcome,
        SendOutcome::Refused(DestinationRefused::PrivateAddress)
    );
    assert_untouched(&listener);
}
