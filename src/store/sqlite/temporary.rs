//! The database file of a temporary store: created private in the system's
//! temporary directory, removed (with SQLite's write-ahead log and
//! shared-memory files) when dropped.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Numbers the temporary files of this process.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// A new, empty file that is removed when this is dropped.
#[derive(Debug)]
pub(super) struct TemporaryFile(PathBuf);

impl TemporaryFile {
    /// Creates an empty file, readable and writable by its owner only,
    /// under a name no other file has.
    pub(super) fn create() -> std::io::Result<Self> {
        let directory = std::env::temp_dir();
        loop {
            // The process id and a counter make the name unique on this
            // machine; `create_new` below guards against a leftover.
            let name = format!(
                "conversion-gateway-{}-{}.sqlite",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            );
            let path = directory.join(name);
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            match options.open(&path) {
                Ok(_) => return Ok(Self(path)),
                // A file left by an earlier process with the same id.
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(error) => return Err(error),
            }
        }
    }

    /// Where the file is.
    pub(super) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TemporaryFile {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut path = self.0.clone().into_os_string();
            path.push(suffix);
            // Nothing to do about a file that cannot be removed: it is in
            // the temporary directory, which the system cleans.
            let _ = std::fs::remove_file(path);
        }
    }
}
