//! The service's connections through its binary, on loopback: the
//! header timeout, the cap and which connections make room at it, the
//! first-byte timeout and its shorter value under pressure, thousands of
//! idle sockets held open while new clients are served, and graceful
//! shutdown with its deadline. The accept loop's finer cases run
//! in-process in the example's own tests (`cargo test --examples`).

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::support::Launch;

/// Sends a GET on `stream` and reads the answer's head and body.
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

/// Whether the server closed `stream` (within 10 s).
async fn closed(stream: &mut TcpStream) -> bool {
    let mut buffer = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer)).await;
    matches!(read, Ok(Ok(0) | Err(_)))
}

/// The head of a token request whose body (`{}` padded to 64 bytes) is
/// still to come: a request in flight for as long as the test likes.
const HALF_A_REQUEST: &[u8] = b"POST /auth/token HTTP/1.1\r\nHost: test\r\n\
Content-Type: application/json\r\nContent-Length: 64\r\n\r\n{";

/// Which of `streams` are still open with nothing to read, by index.
async fn still_open(streams: &[TcpStream]) -> Vec<bool> {
    // Let the runtime's reactor take in every close that has happened, so
    // that `try_read` knows of it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut buffer = [0u8; 64];
    streams
        .iter()
        .map(|stream| {
            matches!(
                stream.try_read(&mut buffer),
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock
            )
        })
        .collect()
}

/// The start of a request's headers, the rest still to come: a connection
/// that has not sent a whole request.
const HALF_THE_HEADERS: &[u8] = b"GET /nope HTTP/1.1\r\nHost: test\r\nX-Slow: a";

/// `GET /healthz` on a new connection: how long until the answer's end.
async fn time_a_new_client(address: std::net::SocketAddr) -> Duration {
    let started = Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(10), async {
        let mut stream = TcpStream::connect(address).await.unwrap();
        get_on(&mut stream, "/healthz").await
    })
    .await
    .expect("a new client is answered");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    started.elapsed()
}

#[tokio::test]
async fn at_the_cap_connections_without_a_whole_request_make_room_oldest_first() {
    // Long first-byte timeouts: what closes connections here is the cap.
    let server = Launch::memory(&[
        "--max-connections",
        "8",
        "--first-byte-timeout",
        "60",
        "--first-byte-timeout-under-pressure",
        "60",
    ])
    .start();
    // The oldest connection is busy: its request's headers are in, its
    // body is still coming.
    let mut busy = TcpStream::connect(server.address).await.unwrap();
    busy.write_all(HALF_A_REQUEST).await.unwrap();
    // Its headers have been read.
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Then 11 that have not sent a whole request: silent ones, and every
    // third half-way through its headers.
    let mut waiting = Vec::new();
    for index in 0..11 {
        let mut stream = TcpStream::connect(server.address).await.unwrap();
        if index % 3 == 1 {
            stream.write_all(HALF_THE_HEADERS).await.unwrap();
        }
        waiting.push(stream);
    }

    // A new client is answered promptly, though 12 connections asked for 8
    // slots.
    let elapsed = time_a_new_client(server.address).await;
    assert!(
        elapsed < Duration::from_secs(1),
        "answered after {elapsed:?}"
    );
    // Five made room, the oldest waiting ones (the new client's own
    // connection took the eighth slot and waits again after its answer).
    for (index, stream) in waiting[..5].iter_mut().enumerate() {
        assert!(closed(stream).await, "waiting connection {index} is open");
    }
    let open = still_open(&waiting[5..]).await;
    assert!(
        open.iter().all(|open| *open),
        "the newer six stay: {open:?}"
    );
    // The busy one was never closed: its request is answered.
    busy.write_all(&[b' '; 62]).await.unwrap();
    busy.write_all(b"}").await.unwrap();
    let answer = read_answer(&mut busy).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(
        server.logs().contains(
            "every connection slot is taken: closing the connections that have waited longest"
        ),
        "{}",
        server.logs()
    );
}

#[tokio::test]
async fn connections_beyond_the_cap_wait_while_every_one_is_busy() {
    let server = Launch::memory(&["--max-connections", "2"]).start();
    // Two requests in flight: both slots busy.
    let mut first = TcpStream::connect(server.address).await.unwrap();
    first.write_all(HALF_A_REQUEST).await.unwrap();
    let mut second = TcpStream::connect(server.address).await.unwrap();
    second.write_all(HALF_A_REQUEST).await.unwrap();
    // Their headers have been read.
    tokio::time::sleep(Duration::from_millis(200)).await;

    // The third is let in by the kernel, but not served.
    let mut third = TcpStream::connect(server.address).await.unwrap();
    third
        .write_all(b"GET /nope HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let mut buffer = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(300), third.read(&mut buffer)).await;
    assert!(early.is_err(), "the third connection was served: {early:?}");

    // The first is answered and waits again: it makes room for the third.
    first.write_all(&[b' '; 62]).await.unwrap();
    first.write_all(b"}").await.unwrap();
    let answer = read_answer(&mut first).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let answer = tokio::time::timeout(Duration::from_secs(10), read_answer(&mut third))
        .await
        .expect("served once a connection waits");
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    assert!(closed(&mut first).await, "the first made room");
    // The second, busy all along, is still answered.
    second.write_all(&[b' '; 62]).await.unwrap();
    second.write_all(b"}").await.unwrap();
    let answer = read_answer(&mut second).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_at_the_first_byte_timeout() {
    let server = Launch::memory(&["--first-byte-timeout", "1"]).start();
    let timeout = Duration::from_secs(1);
    let started = Instant::now();
    let mut silent = TcpStream::connect(server.address).await.unwrap();
    // One that speaks a little late, within the timeout, is served.
    let mut late = TcpStream::connect(server.address).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let answer = get_on(&mut late, "/nope").await;
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    assert!(closed(&mut silent).await, "the silent one is closed");
    let elapsed = started.elapsed();
    assert!(
        elapsed >= timeout && elapsed < timeout + Duration::from_secs(2),
        "closed after {elapsed:?}, the timeout is {timeout:?}"
    );
    // Once it has spoken, the header timeout (10 s) bounds it instead.
    assert_eq!(still_open(&[late]).await, [true]);
}

#[tokio::test]
async fn under_pressure_silent_connections_get_the_shorter_first_byte_timeout() {
    let server = Launch::memory(&[
        "--max-connections",
        "10",
        "--first-byte-timeout",
        "60",
        "--first-byte-timeout-under-pressure",
        "1",
    ])
    .start();
    let shorter = Duration::from_secs(1);
    // Eight silent connections of ten slots, 50 ms apart: each reaches the
    // shorter timeout on its own.
    let started = Instant::now();
    let mut silent = Vec::new();
    for _ in 0..8 {
        silent.push(TcpStream::connect(server.address).await.unwrap());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The oldest close at the shorter timeout while more than half the
    // slots are open: three of them.
    for (index, stream) in silent[..3].iter_mut().enumerate() {
        assert!(closed(stream).await, "silent connection {index} is open");
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed >= shorter && elapsed < shorter + Duration::from_secs(2),
        "closed after {elapsed:?}, the shorter timeout is {shorter:?}"
    );
    // Half the slots are open now: the others passed their shorter
    // deadline (50 ms apart) and keep the normal timeout.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let open = still_open(&silent[3..]).await;
    assert!(
        open.iter().all(|open| *open),
        "the newer five stay: {open:?}"
    );
}

#[tokio::test]
async fn new_clients_are_answered_within_a_second_while_5000_idle_sockets_are_open() {
    const IDLE: usize = 5000;
    // The test holds the sockets, and the server it starts inherits room
    // for as many (it raises its own limit to the hard one).
    open_files_at_least(IDLE as u64 + 1024);
    // The default cap; a first-byte timeout long enough that every socket
    // is still open when the new clients come.
    let server = Launch::memory(&["--first-byte-timeout", "60"]).start();

    let opening = Instant::now();
    let mut idle = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        idle.push(TcpStream::connect(server.address).await.unwrap());
    }
    let opened_in = opening.elapsed();

    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        slowest = slowest.max(time_a_new_client(server.address).await);
    }
    assert!(
        slowest < Duration::from_secs(1),
        "a new client waited {slowest:?} beside {IDLE} idle sockets (opened in {opened_in:?})"
    );
    let open = still_open(&idle).await.iter().filter(|open| **open).count();
    assert_eq!(open, IDLE, "idle sockets open");
}

/// For the idle sockets a test holds: only Unix counts sockets as open
/// files.
#[cfg(not(unix))]
fn open_files_at_least(_wanted: u64) {}

/// Raises this process's soft open-files limit to at least `wanted` (and
/// the hard limit too when it is lower: root may), for the idle sockets a
/// test holds.
#[cfg(unix)]
fn open_files_at_least(wanted: u64) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_none_or(|current| current >= wanted) {
        return;
    }
    let maximum = limit.maximum.map(|maximum| maximum.max(wanted));
    let raised = Rlimit {
        current: Some(wanted),
        maximum,
    };
    if let Err(error) = setrlimit(Resource::Nofile, raised) {
        panic!(
            "this test holds {wanted} sockets open, but the open-files limit is {limit:?} \
             and cannot be raised ({error}): raise it with `ulimit -n {wanted}`"
        );
    }
}

#[tokio::test]
async fn a_client_that_trickles_its_headers_is_cut_off_at_the_header_timeout() {
    let server = Launch::memory(&["--header-timeout", "1"]).start();
    let timeout = Duration::from_secs(1);
    let mut stream = TcpStream::connect(server.address).await.unwrap();
    let started = Instant::now();
    stream.write_all(b"GET /nope HTTP/1.1\r\n").await.unwrap();
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
    let answer = String::from_utf8_lossy(&answer);
    assert!(!answer.contains("404"), "{answer:?}");

    // A client that sends its headers at once is served.
    let mut stream = TcpStream::connect(server.address).await.unwrap();
    let answer = get_on(&mut stream, "/nope").await;
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
}

#[tokio::test]
async fn a_shutdown_finishes_the_requests_in_flight_and_refuses_new_connections() {
    let server = Launch::memory(&[]).start();
    let mut busy = TcpStream::connect(server.address).await.unwrap();
    busy.write_all(HALF_A_REQUEST).await.unwrap();
    // Its headers have been read.
    tokio::time::sleep(Duration::from_millis(200)).await;
    // An idle kept-alive connection is closed at once.
    let mut idle = TcpStream::connect(server.address).await.unwrap();
    assert!(get_on(&mut idle, "/nope").await.starts_with("HTTP/1.1 404"));
    // The busy request has been read up to its body.
    tokio::time::sleep(Duration::from_millis(200)).await;

    server.terminate();
    server.wait_for_log("shutting down");
    assert!(closed(&mut idle).await, "the idle connection is closed");
    // The listener is closed: no new connection.
    server.wait_for_log("closing the open connections");
    let refused = TcpStream::connect(server.address).await;
    assert!(refused.is_err(), "connected after the shutdown began");

    // The request in flight is answered.
    busy.write_all(&[b' '; 62]).await.unwrap();
    busy.write_all(b"}").await.unwrap();
    let answer = read_answer(&mut busy).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("CANNOT_BE_NULL"), "{answer}");
    let (status, logs) = server.wait_exit();
    assert!(status.success(), "{status}: {logs}");
    assert!(logs.contains("INFO conversion_gateway: stopped"), "{logs}");
}

#[tokio::test]
async fn a_shutdown_closes_what_is_still_open_at_the_deadline() {
    let server = Launch::memory(&["--shutdown-timeout", "1"]).start();
    let mut stuck = TcpStream::connect(server.address).await.unwrap();
    stuck.write_all(HALF_A_REQUEST).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let started = Instant::now();
    server.terminate();
    let (status, logs) = server.wait_exit();
    assert!(status.success(), "{status}: {logs}");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(
        logs.contains("stopped; some requests were cut off connections=1"),
        "{logs}"
    );
    assert!(closed(&mut stuck).await, "the stuck connection is closed");
}

#[tokio::test]
async fn a_sigterm_right_after_the_listening_line_is_a_graceful_shutdown() {
    // The signal handlers are installed before the server says it
    // listens: a SIGTERM at once must not kill the process.
    for _ in 0..5 {
        let server = Launch::memory(&[]).start();
        let (status, logs) = server.stop();
        assert!(status.success(), "{status}: {logs}");
        assert!(logs.contains("stopped"), "{logs}");
    }
}
