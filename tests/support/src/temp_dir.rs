//! A fresh directory per test, removed when the test ends.

use std::path::{Path, PathBuf};

/// A new, empty directory under the system's temporary directory, named
/// after the test and unique to this process and moment; removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates `cg-{name}-{pid}-{nanos}`.
    pub fn new(name: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("a clock after 1970")
            .as_nanos();
        let path = std::env::temp_dir().join(format!("cg-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path).expect("create a temporary directory");
        Self(path)
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.0
    }

    /// A path inside the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
