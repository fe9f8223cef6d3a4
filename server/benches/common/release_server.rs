//! The service's release binary for the benches that start it: built (or
//! found fresh) by cargo, and started on a free loopback port, ready once
//! it has written its demo credentials.

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The service's release binary, built (or found fresh) by cargo.
///
/// Built exactly as a user builds it (`cargo build --release`), not as the
/// bench's own build made it: that one unifies the features of the
/// dev-dependencies (tokio's `test-util` among them) into the service. It is
/// built in a target directory of its own, `release-server` under the
/// workspace's: in the shared one, the two builds gave the same units
/// different features, and each `cargo bench` rebuilt the library and the
/// service twice (some minutes) although nothing had changed.
pub fn build() -> PathBuf {
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or(root.join("target"), PathBuf::from)
        .join("release-server");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "-p",
            "conversion-gateway-server",
            "--bin",
            "conversion-gateway",
        ])
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .expect("run cargo");
    assert!(status.success(), "building the release server failed");
    target.join("release").join("conversion-gateway")
}

/// A server process a bench started, killed and waited for when dropped:
/// a bench that panics half-way (a server that does not start, a
/// registration refused) leaves no server running behind it.
pub struct Started(Child);

impl Started {
    /// Takes charge of `child`.
    pub fn new(child: Child) -> Self {
        Self(child)
    }

    /// The process id, for `/proc`.
    pub fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `binary` with `args` on a free loopback port, logging warnings to
/// `stderr`, its demo credentials written to `dir/NAME.demo.json`; returns
/// once that file exists (up to 30 s): the process, its address and the
/// credentials' path.
pub fn launch(
    binary: &Path,
    dir: &Path,
    name: &str,
    args: impl IntoIterator<Item = impl AsRef<OsStr>>,
    stderr: Stdio,
) -> (Started, SocketAddr, PathBuf) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let demo = dir.join(format!("{name}.demo.json"));
    let child = Command::new(binary)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(args)
        .arg("--demo-credentials")
        .arg(&demo)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map(Started::new)
        .expect("start the service");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !demo.is_file() {
        assert!(
            Instant::now() < deadline,
            "{name}: the server did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, SocketAddr::from(([127, 0, 0, 1], port)), demo)
}
