//! The server key and the files that must stay private: the key file is
//! created readable by its owner only, and at start the server warns about
//! a key file or SQLite database that other users may read or write.

use std::fmt;
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};

use conversion_gateway::{OsRandom, RandomSource as _, SecretHash, SecretHasher};

use crate::session::mac_bytes;

/// The server's 32-byte secret: the key of the core's secret hashes, and the
/// root of the dialog's cookie and CSRF keys and of the demo data.
///
/// It must survive restarts: every stored token, code, client secret and API
/// key is a keyed hash that no other key can match again.
#[derive(Clone)]
pub struct ServerKey([u8; 32]);

impl fmt::Debug for ServerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ServerKey(***)")
    }
}

impl ServerKey {
    /// A fresh key from the operating system's random source.
    pub fn generate() -> Self {
        let mut key = [0u8; 32];
        OsRandom.fill_bytes(&mut key);
        Self(key)
    }

    /// Parses 64 hexadecimal digits (surrounding whitespace ignored).
    pub fn from_hex(hex: &str) -> Option<Self> {
        SecretHash::from_hex(hex.trim()).map(|hash| Self(*hash.as_bytes()))
    }

    /// Reads the key file at `path`, or creates it with a fresh key (readable
    /// by its owner only) if there is none. Returns the key and whether the
    /// file was created.
    ///
    /// # Errors
    /// The file cannot be read or created, or does not hold 64 hex digits.
    pub fn load_or_create(path: &Path) -> io::Result<(Self, bool)> {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        match options.open(path) {
            Ok(mut file) => {
                let key = Self::generate();
                let hex = SecretHash::from_bytes(key.0).to_hex();
                file.write_all(format!("{hex}\n").as_bytes())?;
                // On disk before anything is hashed with it.
                file.sync_all()?;
                Ok((key, true))
            }
            // Another process may have created it first: read theirs.
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                let mut text = String::new();
                std::fs::File::open(path)?.read_to_string(&mut text)?;
                let key = Self::from_hex(&text).ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "the key file {} must hold 64 hexadecimal digits",
                            path.display()
                        ),
                    )
                })?;
                Ok((key, false))
            }
            Err(error) => Err(error),
        }
    }

    /// The hasher of the core's secrets: the key itself, so that a host that
    /// replaces this server can keep its database with the same key.
    pub fn hasher(&self) -> SecretHasher {
        SecretHasher::new(self.0)
    }

    /// A subkey for one purpose. The core's hashes put their own labels
    /// first, so no subkey can equal one of them.
    pub fn derive(&self, purpose: &[u8]) -> [u8; 32] {
        mac_bytes(&self.0, &[b"conversion-gateway example server", purpose])
    }
}

/// The SQLite database and the files SQLite keeps beside it in WAL mode.
pub fn sqlite_files(database: &Path) -> Vec<PathBuf> {
    let mut files = vec![database.to_owned()];
    for suffix in ["-wal", "-shm"] {
        let mut path = database.as_os_str().to_owned();
        path.push(suffix);
        files.push(PathBuf::from(path));
    }
    files
}

/// The permission bits (`0o644`) of the file at `path` if its group or
/// other users may do anything with it, `None` if not or if there is no
/// such file (or on a system without Unix permissions).
fn exposed_mode(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
        (mode & 0o077 != 0).then_some(mode)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// Warns, naming the file and its mode (never its contents), about each of
/// `paths` that users other than its owner may read or write: the key file
/// and the database hold what every token's hash depends on. Returns how
/// many it warned about.
pub fn warn_if_exposed(paths: &[PathBuf]) -> usize {
    let mut warned = 0;
    for path in paths {
        if let Some(mode) = exposed_mode(path) {
            tracing::warn!(
                path = %path.display(),
                mode = format_args!("{mode:o}"),
                "users other than the owner may read or write this file: run chmod 600 on it"
            );
            warned += 1;
        }
    }
    warned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_keys_are_64_hex_digits_and_never_printed() {
        let key = ServerKey::from_hex(&format!(" {} \n", "ab".repeat(32))).expect("hex");
        assert_eq!(key.0, [0xab; 32]);
        assert!(ServerKey::from_hex("abcd").is_none());
        assert_eq!(format!("{key:?}"), "ServerKey(***)");
    }

    #[cfg(unix)]
    #[test]
    fn files_are_exposed_when_their_group_or_others_have_any_permission() {
        use std::os::unix::fs::PermissionsExt as _;
        let set_mode = |path: &Path, mode| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        let dir = conversion_gateway_testkit::TempDir::new("modes");
        let file = dir.path("gateway.db");
        std::fs::write(&file, "").unwrap();
        for (mode, exposed) in [
            (0o600, false),
            (0o400, false),
            (0o700, false),
            (0o640, true),
            (0o604, true),
            (0o660, true),
            (0o602, true),
            (0o610, true),
        ] {
            set_mode(&file, mode);
            let found = exposed_mode(&file);
            assert_eq!(found.is_some(), exposed, "mode {mode:o}: {found:?}");
            if exposed {
                assert_eq!(found, Some(mode));
            }
        }
        assert_eq!(exposed_mode(&dir.path("missing")), None);

        // The database and its WAL files, each warned about by name.
        let files = sqlite_files(&file);
        assert_eq!(
            files,
            [
                file.clone(),
                dir.path("gateway.db-wal"),
                dir.path("gateway.db-shm")
            ]
        );
        std::fs::write(&files[1], "").unwrap();
        set_mode(&files[1], 0o644);
        set_mode(&file, 0o600);
        let logs = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let sink = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || Sink(sink.clone()))
            .with_ansi(false)
            .finish();
        let warned = tracing::subscriber::with_default(subscriber, || warn_if_exposed(&files));
        assert_eq!(warned, 1);
        let logs = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
        assert!(logs.contains("gateway.db-wal"), "{logs}");
        assert!(!logs.contains("gateway.db-shm"), "{logs}");
    }

    /// A log writer into a shared buffer.
    #[cfg(unix)]
    struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    #[cfg(unix)]
    impl io::Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
}
