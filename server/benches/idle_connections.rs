//! What idle connections cost the service, and whether new clients
//! are still served beside them: the figures of the README's Security
//! section, measured on the release binary (`conversion-gateway`, memory
//! store) on Linux.
//!
//! 1. Memory: the server's resident memory (`VmRSS` in `/proc/PID/status`)
//!    with no client, then with `--idle` connections that have sent
//!    nothing, then with the same connections after one request each
//!    (kept alive, idle inside hyper). Each difference divided by the
//!    number of connections is the cost of one. Long timeouts keep them
//!    open while measured.
//! 2. Latency: a server with its default limits, `--hold` sockets kept open
//!    against it that never send a byte (each one the server closes at its
//!    first-byte timeout is opened again at once, as an attacker would),
//!    and meanwhile a new client every 100 ms for `--seconds`, each a fresh
//!    connection with one `GET /healthz`: the slowest and the median
//!    answer.
//!
//! ```text
//! cargo bench --bench idle_connections -- [--idle 10000] [--hold 5000] [--seconds 10]
//! ```
//!
//! Not part of CI: it builds the release server and holds thousands of
//! sockets for a while.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

#[path = "common/release_server.rs"]
mod release_server;

struct Options {
    idle: usize,
    hold: usize,
    seconds: u64,
}

impl Options {
    fn parse() -> Self {
        let mut options = Self {
            idle: 10_000,
            hold: 5_000,
            seconds: 10,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut number = || -> usize {
                args.next()
                    .and_then(|value| value.parse().ok())
                    .unwrap_or_else(|| panic!("{arg} needs a whole number"))
            };
            match arg.as_str() {
                "--idle" => options.idle = number(),
                "--hold" => options.hold = number(),
                "--seconds" => options.seconds = number() as u64,
                // cargo bench passes --bench.
                _ => {}
            }
        }
        options
    }
}

fn main() {
    if !cfg!(target_os = "linux") {
        println!("idle_connections reads /proc: Linux only");
        return;
    }
    let options = Options::parse();
    open_files_at_least((options.idle.max(options.hold) + 1024) as u64);
    let binary = release_server::build();
    let dir = std::env::temp_dir().join(format!("idle-connections-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        memory(&binary, &dir, options.idle).await;
        latency(&binary, &dir, options.hold, options.seconds).await;
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// Part 1: resident memory per idle connection.
async fn memory(binary: &Path, dir: &Path, idle: usize) {
    let long = "600";
    let server = Server::start(
        binary,
        dir,
        "memory",
        &[
            "--first-byte-timeout",
            long,
            "--first-byte-timeout-under-pressure",
            long,
            "--header-timeout",
            long,
            "--max-connections",
            &(idle + 16).to_string(),
        ],
    );
    // A few requests first, so that the runtime's and the router's own
    // first allocations are in the baseline.
    for _ in 0..10 {
        one_request(server.address).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let none = server.rss_kib();
    let files = server.open_files();

    let mut sockets = Vec::with_capacity(idle);
    for _ in 0..idle {
        sockets.push(TcpStream::connect(server.address).await.expect("connect"));
    }
    server.wait_for_open_files(files + idle);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let silent = server.rss_kib();

    for socket in &mut sockets {
        let answer = get(socket, "/healthz").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let kept_alive = server.rss_kib();
    let per = |kib: u64| (kib.saturating_sub(none) as f64 * 1024.0) / idle as f64;
    println!("resident memory of the release server (VmRSS), {idle} connections:");
    println!("  none:                          {none:>8} KiB");
    println!(
        "  silent (no byte sent):         {silent:>8} KiB  ({:.0} bytes each)",
        per(silent)
    );
    println!(
        "  idle after one request each:   {kept_alive:>8} KiB  ({:.0} bytes each)",
        per(kept_alive)
    );
    drop(sockets);
    server.stop();
}

/// Part 2: new clients beside `hold` sockets that never speak.
async fn latency(binary: &Path, dir: &Path, hold: usize, seconds: u64) {
    let server = Server::start(binary, dir, "latency", &[]);
    let address = server.address;
    let files = server.open_files();
    let stop = Arc::new(AtomicBool::new(false));
    let reopened = Arc::new(AtomicUsize::new(0));
    let opening = Instant::now();
    let mut holders = Vec::new();
    // Each holder keeps its share open, reopening what the server closes.
    let holder_count = 50;
    for index in 0..holder_count {
        let share = hold / holder_count + usize::from(index < hold % holder_count);
        let (stop, reopened) = (stop.clone(), reopened.clone());
        holders.push(tokio::spawn(async move {
            let mut sockets = Vec::with_capacity(share);
            for _ in 0..share {
                sockets.push(TcpStream::connect(address).await.expect("connect"));
            }
            while !stop.load(Ordering::Relaxed) {
                for socket in &mut sockets {
                    let mut buffer = [0u8; 16];
                    let closed = match socket.try_read(&mut buffer) {
                        Ok(_) => true,
                        Err(error) => error.kind() != std::io::ErrorKind::WouldBlock,
                    };
                    if closed {
                        *socket = TcpStream::connect(address).await.expect("reconnect");
                        reopened.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }));
    }
    // Every socket accepted (a few may be closing and reopening).
    server.wait_for_open_files(files + hold * 99 / 100);
    println!(
        "\n{hold} silent sockets open against the default server in {:?}",
        opening.elapsed()
    );

    let mut times = Vec::new();
    let until = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < until {
        let started = Instant::now();
        one_request(address).await;
        times.push(started.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for holder in holders {
        holder.await.expect("a holder");
    }
    times.sort();
    println!(
        "new clients over {seconds} s: {} answered, median {:?}, slowest {:?}; \
         the server closed {} silent sockets meanwhile (reopened at once)",
        times.len(),
        times[times.len() / 2],
        times[times.len() - 1],
        reopened.load(Ordering::Relaxed)
    );
    server.stop();
}

/// A new connection and one `GET /healthz` on it.
async fn one_request(address: SocketAddr) {
    let mut stream = TcpStream::connect(address).await.expect("connect");
    let answer = tokio::time::timeout(Duration::from_secs(30), get(&mut stream, "/healthz"))
        .await
        .expect("an answer within 30 s");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// A GET on `stream`, and its answer (head and `Content-Length` bytes).
async fn get(stream: &mut TcpStream, path: &str) -> String {
    let request = format!("GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 1024];
    loop {
        let n = stream.read(&mut buffer).await.expect("read");
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&bytes));
        bytes.extend_from_slice(&buffer[..n]);
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length: "))
                .map_or(0, |value| value.trim().parse().expect("a length"));
            if body.len() >= length {
                return text;
            }
        }
    }
}

/// The release server, started on a free loopback port; killed on drop.
struct Server {
    child: release_server::Started,
    address: SocketAddr,
}

impl Server {
    fn start(binary: &Path, dir: &Path, name: &str, extra: &[&str]) -> Self {
        let args = ["--store", "memory"].iter().chain(extra);
        let (child, address, _) = release_server::launch(binary, dir, name, args, Stdio::inherit());
        Self { child, address }
    }

    /// `VmRSS`, in KiB.
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the server's /proc status");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("a VmRSS line")
    }

    fn open_files(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .expect("the server's /proc fd")
            .count()
    }

    /// Waits (up to 60 s) until the server holds `files` open files: every
    /// connection accepted.
    fn wait_for_open_files(&self, files: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.open_files() < files {
            assert!(
                Instant::now() < deadline,
                "the server holds {} of {files} files",
                self.open_files()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server and waits for it to end.
    fn stop(self) {
        drop(self);
    }
}

/// Raises this process's soft open-files limit to at least `wanted` (the
/// hard one too if lower: root may); the servers it starts inherit it.
#[cfg(unix)]
fn open_files_at_least(wanted: u64) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_none_or(|current| current >= wanted) {
        return;
    }
    let raised = Rlimit {
        current: Some(wanted),
        maximum: limit.maximum.map(|maximum| maximum.max(wanted)),
    };
    setrlimit(Resource::Nofile, raised).unwrap_or_else(|error| {
        panic!("cannot raise the open-files limit {limit:?} to {wanted}: {error}")
    });
}

#[cfg(not(unix))]
fn open_files_at_least(_wanted: u64) {}
