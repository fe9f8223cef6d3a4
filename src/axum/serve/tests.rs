//! The accept loop in-process, on a router whose requests the test
//! holds in flight; tests/server checks the same bounds through the
//! binary and its flags.

use std::net::SocketAddr;
use std::time::Instant;

use axum::Router;
use axum::routing::get;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::{Notify, oneshot};

use super::*;

/// A route that answers with the client's address, and one that says when
/// it is entered and answers only when the test says so.
fn test_router(entered: Arc<Notify>, release: Arc<Notify>) -> Router {
    Router::new()
        .route(
            "/peer",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }),
        )
        .route(
            "/slow",
            get(move || async move {
                entered.notify_one();
                release.notified().await;
                "done"
            }),
        )
}

/// The serve loop on a loopback port with `limits`, until the sender is
/// used or dropped.
struct Running {
    address: SocketAddr,
    stop: oneshot::Sender<()>,
    served: tokio::task::JoinHandle<Drained>,
    entered: Arc<Notify>,
    release: Arc<Notify>,
}

async fn start_serving(limits: ConnectionLimits) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (stop, stopped) = oneshot::channel();
    let router = test_router(entered.clone(), release.clone());
    let served = tokio::spawn(serve(listener, router, limits, async {
        let _ = stopped.await;
    }));
    Running {
        address,
        stop,
        served,
        entered,
        release,
    }
}

/// Sends a GET on `stream` and reads the answer's head and body (the test
/// routes answer a few bytes with a Content-Length).
async fn get_on(stream: &mut TcpStream, path: &str) -> String {
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    read_answer(stream).await
}

/// Reads one answer: its head, then as many body bytes as it announces.
async fn read_answer(stream: &mut TcpStream) -> String {
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 1024];
    loop {
        let n = stream.read(&mut buffer).await.unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&bytes));
        bytes.extend_from_slice(&buffer[..n]);
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length: "))
                .map_or(0, |value| value.trim().parse().unwrap());
            if body.len() >= length {
                return text;
            }
        }
    }
}

#[tokio::test]
async fn requests_carry_the_client_address() {
    let running = start_serving(ConnectionLimits::default()).await;
    let mut stream = TcpStream::connect(running.address).await.unwrap();
    let answer = get_on(&mut stream, "/peer").await;
    let local = stream.local_addr().unwrap().to_string();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with(&local), "{local} not in {answer}");
    running.stop.send(()).unwrap();
    assert_eq!(running.served.await.unwrap(), Drained::All);
}

#[tokio::test]
async fn a_client_that_trickles_its_headers_is_cut_off_at_the_header_timeout() {
    let timeout = Duration::from_millis(500);
    let running = start_serving(ConnectionLimits {
        header_timeout: timeout,
        ..ConnectionLimits::default()
    })
    .await;
    let mut stream = TcpStream::connect(running.address).await.unwrap();
    let started = Instant::now();
    stream.write_all(b"GET /peer HTTP/1.1\r\n").await.unwrap();
    // One header byte every 50 ms, for up to 10 s, until the server hangs up.
    let header = b"X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    let mut answer = Vec::new();
    let closed_after = 'trickle: {
        for byte in header.iter().cycle().take(200) {
            let mut buffer = [0u8; 256];
            tokio::select! {
                read = stream.read(&mut buffer) => match read {
                    Ok(0) | Err(_) => break 'trickle started.elapsed(),
                    Ok(n) => answer.extend_from_slice(&buffer[..n]),
                },
                () = tokio::time::sleep(Duration::from_millis(50)) => {
                    if stream.write_all(&[*byte]).await.is_err() {
                        break 'trickle started.elapsed();
                    }
                }
            }
        }
        panic!("still open after {:?}", started.elapsed());
    };
    assert!(
        closed_after >= timeout && closed_after < timeout + Duration::from_secs(2),
        "closed after {closed_after:?}, the header timeout is {timeout:?}"
    );
    assert!(
        !String::from_utf8_lossy(&answer).contains("200 OK"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );

    // A client that sends its headers at once is served.
    let mut stream = TcpStream::connect(running.address).await.unwrap();
    let answer = get_on(&mut stream, "/peer").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    running.stop.send(()).unwrap();
    running.served.await.unwrap();
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed_at_the_header_timeout() {
    let timeout = Duration::from_millis(400);
    let running = start_serving(ConnectionLimits {
        header_timeout: timeout,
        ..ConnectionLimits::default()
    })
    .await;
    let mut stream = TcpStream::connect(running.address).await.unwrap();
    let answer = get_on(&mut stream, "/peer").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let answered = Instant::now();
    let mut buffer = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer)).await;
    let closed_after = answered.elapsed();
    assert!(matches!(read, Ok(Ok(0) | Err(_))), "{read:?}");
    // Not before the timeout, and at most a sweep's period (an eighth of
    // it, 50 ms) late, with room for a slow machine.
    assert!(
        closed_after >= timeout - Duration::from_millis(20)
            && closed_after < timeout + Duration::from_millis(350),
        "closed {closed_after:?} after the answer, the header timeout is {timeout:?}"
    );
    running.stop.send(()).unwrap();
    running.served.await.unwrap();
}

#[tokio::test]
async fn a_request_in_flight_outlasts_the_header_timeout() {
    let timeout = Duration::from_millis(200);
    let running = start_serving(ConnectionLimits {
        header_timeout: timeout,
        ..ConnectionLimits::default()
    })
    .await;
    let mut stream = TcpStream::connect(running.address).await.unwrap();
    stream
        .write_all(b"GET /slow HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    running.entered.notified().await;
    // Busy for five header timeouts: the sweep leaves it alone.
    tokio::time::sleep(timeout * 5).await;
    assert!(still_open(&stream), "a busy connection was closed");
    running.release.notify_one();
    let answer = read_answer(&mut stream).await;
    assert!(answer.ends_with("done"), "{answer}");
    running.stop.send(()).unwrap();
    running.served.await.unwrap();
}

/// Whether the server closed `stream` within 5 s.
async fn closed(stream: &mut TcpStream) -> bool {
    let mut buffer = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer)).await;
    matches!(read, Ok(Ok(0) | Err(_)))
}

/// Whether `stream` is still open with nothing to read.
fn still_open(stream: &TcpStream) -> bool {
    let mut buffer = [0u8; 64];
    matches!(stream.try_read(&mut buffer), Err(error) if error.kind() == io::ErrorKind::WouldBlock)
}

#[test]
fn the_sweep_runs_eight_times_per_header_timeout_within_bounds() {
    assert_eq!(
        sweep_period(Duration::from_millis(400)),
        Duration::from_millis(50)
    );
    assert_eq!(
        sweep_period(Duration::from_secs(10)),
        Duration::from_secs(1)
    );
    assert_eq!(
        sweep_period(Duration::from_millis(40)),
        Duration::from_millis(10)
    );
}

#[test]
fn the_first_byte_timeout_shortens_once_over_half_the_slots_are_taken() {
    let limits = ConnectionLimits {
        max_connections: 10,
        ..ConnectionLimits::default()
    };
    assert_eq!(limits.first_byte_timeout(0), Duration::from_secs(5));
    assert_eq!(limits.first_byte_timeout(5), Duration::from_secs(5));
    assert_eq!(limits.first_byte_timeout(6), Duration::from_secs(1));
    assert_eq!(limits.first_byte_timeout(10), Duration::from_secs(1));
    // Never longer under pressure than without.
    let odd = ConnectionLimits {
        first_byte_timeout_under_pressure: Duration::from_secs(60),
        ..limits
    };
    assert_eq!(odd.first_byte_timeout(10), Duration::from_secs(5));
}

#[tokio::test]
async fn at_the_cap_the_connection_waiting_longest_is_closed_for_a_new_one() {
    let running = start_serving(ConnectionLimits {
        max_connections: 2,
        ..ConnectionLimits::default()
    })
    .await;
    // Two connections, each served once and kept alive: both slots taken.
    let mut first = TcpStream::connect(running.address).await.unwrap();
    let mut second = TcpStream::connect(running.address).await.unwrap();
    assert!(
        get_on(&mut first, "/peer")
            .await
            .starts_with("HTTP/1.1 200")
    );
    assert!(
        get_on(&mut second, "/peer")
            .await
            .starts_with("HTTP/1.1 200")
    );

    // A third is served at once, in the place of the first.
    let mut third = TcpStream::connect(running.address).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(2), get_on(&mut third, "/peer"))
        .await
        .expect("served at once");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(closed(&mut first).await, "the first waited longest");
    assert!(still_open(&second), "the second stays");
    running.stop.send(()).unwrap();
    running.served.await.unwrap();
}

#[tokio::test]
async fn connections_beyond_the_cap_wait_while_every_one_is_busy() {
    let running = start_serving(ConnectionLimits {
        max_connections: 2,
        ..ConnectionLimits::default()
    })
    .await;
    // Two requests in flight: both slots busy.
    let mut first = TcpStream::connect(running.address).await.unwrap();
    first
        .write_all(b"GET /slow HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    running.entered.notified().await;
    let mut second = TcpStream::connect(running.address).await.unwrap();
    second
        .write_all(b"GET /slow HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    running.entered.notified().await;

    // The third is let in by the kernel, but not served.
    let mut third = TcpStream::connect(running.address).await.unwrap();
    third
        .write_all(b"GET /peer HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let mut buffer = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(300), third.read(&mut buffer)).await;
    assert!(early.is_err(), "the third connection was served: {early:?}");

    // The first is answered, and then waits: it makes room for the third.
    running.release.notify_one();
    let answer = read_answer(&mut first).await;
    assert!(answer.ends_with("done"), "{answer}");
    let answer = tokio::time::timeout(Duration::from_secs(5), read_answer(&mut third))
        .await
        .expect("served once a connection waits");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(closed(&mut first).await, "the first made room");
    // The second, busy all along, is still answered.
    running.release.notify_one();
    let answer = read_answer(&mut second).await;
    assert!(answer.ends_with("done"), "{answer}");
    running.stop.send(()).unwrap();
    running.served.await.unwrap();
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_at_the_first_byte_timeout() {
    let timeout = Duration::from_millis(300);
    let running = start_serving(ConnectionLimits {
        first_byte_timeout: timeout,
        ..ConnectionLimits::default()
    })
    .await;
    let started = Instant::now();
    let mut silent = TcpStream::connect(running.address).await.unwrap();
    // One that speaks a little late, within the timeout, is served.
    let mut late = TcpStream::connect(running.address).await.unwrap();
    tokio::time::sleep(timeout / 2).await;
    assert!(get_on(&mut late, "/peer").await.starts_with("HTTP/1.1 200"));
    assert!(closed(&mut silent).await, "the silent one is closed");
    let elapsed = started.elapsed();
    assert!(
        elapsed >= timeout && elapsed < timeout + Duration::from_secs(2),
        "closed after {elapsed:?}, the timeout is {timeout:?}"
    );
    // Once served, the header timeout is what bounds it.
    assert!(still_open(&late));
    running.stop.send(()).unwrap();
    running.served.await.unwrap();
}

#[tokio::test]
async fn under_pressure_silent_connections_get_the_shorter_first_byte_timeout() {
    let shorter = Duration::from_millis(300);
    let running = start_serving(ConnectionLimits {
        max_connections: 10,
        first_byte_timeout: Duration::from_secs(30),
        first_byte_timeout_under_pressure: shorter,
        ..ConnectionLimits::default()
    })
    .await;
    let started = Instant::now();
    // Eight of ten slots: over half.
    let mut silent = Vec::new();
    for _ in 0..8 {
        silent.push(TcpStream::connect(running.address).await.unwrap());
    }
    // The oldest go at the shorter timeout until no more than half are
    // open; the rest keep the normal one.
    for stream in &mut silent[..3] {
        assert!(closed(stream).await, "closed under pressure");
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed >= shorter && elapsed < shorter + Duration::from_secs(2),
        "closed after {elapsed:?}, the shorter timeout is {shorter:?}"
    );
    tokio::time::sleep(shorter).await;
    let open = silent[3..]
        .iter()
        .filter(|stream| still_open(stream))
        .count();
    assert_eq!(open, 5, "half the slots keep the normal timeout");
    running.stop.send(()).unwrap();
    running.served.await.unwrap();
}

#[tokio::test]
async fn a_shutdown_finishes_the_requests_in_flight_and_refuses_new_connections() {
    let running = start_serving(ConnectionLimits::default()).await;
    let mut busy = TcpStream::connect(running.address).await.unwrap();
    busy.write_all(b"GET /slow HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    running.entered.notified().await;
    // An idle kept-alive connection is closed at once.
    let mut idle = TcpStream::connect(running.address).await.unwrap();
    assert!(get_on(&mut idle, "/peer").await.starts_with("HTTP/1.1 200"));

    running.stop.send(()).unwrap();
    let mut buffer = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(10), idle.read(&mut buffer)).await;
    assert!(
        matches!(read, Ok(Ok(0) | Err(_))),
        "the idle connection is closed: {read:?}"
    );
    // The listener is closed: no new connection.
    let refused = TcpStream::connect(running.address).await;
    assert!(refused.is_err(), "connected after the shutdown began");
    assert!(!running.served.is_finished(), "a request is in flight");

    running.release.notify_one();
    let answer = read_answer(&mut busy).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("done"), "{answer}");
    let drained = tokio::time::timeout(Duration::from_secs(10), running.served)
        .await
        .expect("the server stops once the request is answered")
        .unwrap();
    assert_eq!(drained, Drained::All);
}

#[tokio::test]
async fn a_shutdown_closes_what_is_still_open_at_the_deadline() {
    let deadline = Duration::from_millis(300);
    let running = start_serving(ConnectionLimits {
        shutdown_timeout: deadline,
        ..ConnectionLimits::default()
    })
    .await;
    let mut stuck = TcpStream::connect(running.address).await.unwrap();
    stuck
        .write_all(b"GET /slow HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    running.entered.notified().await;

    let started = Instant::now();
    running.stop.send(()).unwrap();
    let drained = tokio::time::timeout(Duration::from_secs(10), running.served)
        .await
        .expect("the server stops at the deadline")
        .unwrap();
    assert_eq!(drained, Drained::Cut(1));
    assert!(started.elapsed() >= deadline, "{:?}", started.elapsed());
    let mut buffer = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(10), stuck.read(&mut buffer)).await;
    assert!(
        matches!(read, Ok(Ok(0) | Err(_))),
        "the stuck connection is closed unanswered: {read:?}"
    );
}
