//! The server key and the files that must stay private: the key file is
//! created readable by its owner only, so is a file written with
//! [`write_private_file`], and [`exposed_files`] finds a key
//! file or database that other users may read or write, for the host to
//! warn about (the library prints nothing).

use std::fmt;
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac as _};
use sha2::Sha256;

use crate::random::RandomSource;
use crate::secret::{SecretHash, SecretHasher};

/// The server's 32-byte secret: the key of the core's secret hashes, and the
/// root of the pages' cookie and CSRF keys (and of whatever else a host
/// derives with [`ServerKey::derive`]).
///
/// It must survive restarts: every stored token, code, client secret and API
/// key is a keyed hash that no other key can match again. Its `Debug` prints
/// `ServerKey(***)`.
#[derive(Clone)]
pub struct ServerKey([u8; 32]);

impl fmt::Debug for ServerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ServerKey(***)")
    }
}

impl ServerKey {
    /// A fresh key drawn from `random` (in production, [`crate::OsRandom`]).
    pub fn generate(random: &dyn RandomSource) -> Self {
        let mut key = [0u8; 32];
        random.fill_bytes(&mut key);
        Self(key)
    }

    /// Parses 64 hexadecimal digits (surrounding whitespace ignored).
    pub fn from_hex(hex: &str) -> Option<Self> {
        SecretHash::from_hex(hex.trim()).map(|hash| Self(*hash.as_bytes()))
    }

    /// Reads the key file at `path`, or creates it with a fresh key from
    /// `random` (readable by its owner only) if there is none. Returns the
    /// key and whether the file was created.
    ///
    /// # Errors
    /// The file cannot be read or created, or does not hold 64 hex digits.
    pub fn load_or_create(path: &Path, random: &dyn RandomSource) -> io::Result<(Self, bool)> {
        match create_private(path) {
            Ok(mut file) => {
                let key = Self::generate(random);
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
    /// replaces the service can keep its database with the same key.
    pub fn hasher(&self) -> SecretHasher {
        SecretHasher::new(self.0)
    }

    /// A subkey for one purpose. The core's hashes put their own labels
    /// first, so no subkey can equal one of them.
    pub fn derive(&self, purpose: &[u8]) -> [u8; 32] {
        // The label predates the library: changing it would change every
        // derived value (sessions, a host's demo data) of existing servers.
        mac_bytes(&self.0, &[b"conversion-gateway example server", purpose])
    }
}

/// The raw HMAC-SHA256 of `parts` under `key`, each part length-prefixed so
/// that no two different lists of parts are ever hashed as the same bytes:
/// the one keyed MAC of the pages (cookies, CSRF tokens, subkeys).
pub(crate) fn mac_bytes(key: &[u8; 32], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = <Hmac<Sha256> as hmac::Mac>::new_from_slice(key).expect("HMAC takes any key");
    for part in parts {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// A new file at `path` that only its owner can read or write (mode 0600
/// on Unix); fails if the file exists.
fn create_private(path: &Path) -> io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

/// Writes `contents` to the file at `path`, readable and writable by its
/// owner only (mode 0600 on Unix), replacing the file atomically: a reader
/// sees the old contents or the new, never half of them, and never with
/// wider permissions. For secrets a host hands to a person or a script
/// (credentials, API keys) in place of its log.
///
/// The contents go to a temporary file first (`path` with `.tmp` appended;
/// a leftover of an earlier attempt is removed), are synced to disk, then
/// renamed over `path`.
///
/// # Errors
/// The file or its temporary file cannot be written or renamed.
pub fn write_private_file(path: &Path, contents: &[u8]) -> io::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    match std::fs::remove_file(&temporary) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    let mut file = create_private(&temporary)?;
    file.write_all(contents)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temporary, path)
}

/// The SQLite database at `database` and the files SQLite keeps beside it
/// in WAL mode: the files to pass to [`exposed_files`] with the key file.
pub fn sqlite_files(database: &Path) -> Vec<PathBuf> {
    let mut files = vec![database.to_owned()];
    for suffix in ["-wal", "-shm"] {
        let mut path = database.as_os_str().to_owned();
        path.push(suffix);
        files.push(PathBuf::from(path));
    }
    files
}

/// A private file that users other than its owner may read or write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExposedFile {
    /// The file.
    pub path: PathBuf,
    /// Its permission bits, such as `0o644`.
    pub mode: u32,
}

/// Those of `paths` that users other than their owner may read or write:
/// the key file and the database hold what every token's hash depends on,
/// so a host warns about each (naming the file and its mode, never its
/// contents), for example with "run chmod 600 on it". Missing files, and
/// every file on a system without Unix permissions, are not exposed.
pub fn exposed_files(paths: &[PathBuf]) -> Vec<ExposedFile> {
    paths
        .iter()
        .filter_map(|path| {
            exposed_mode(path).map(|mode| ExposedFile {
                path: path.clone(),
                mode,
            })
        })
        .collect()
}

/// The permission bits of the file at `path` if its group or other users
/// may do anything with it.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SeededRandom;

    #[test]
    fn server_keys_are_64_hex_digits_and_never_printed() {
        let key = ServerKey::from_hex(&format!(" {} \n", "ab".repeat(32))).expect("hex");
        assert_eq!(key.0, [0xab; 32]);
        assert!(ServerKey::from_hex("abcd").is_none());
        assert_eq!(format!("{key:?}"), "ServerKey(***)");
    }

    #[test]
    fn a_key_file_is_created_once_then_read_back() {
        let dir = conversion_gateway_testkit::TempDir::new("key-file");
        let path = dir.path("gateway.key");
        let (created, fresh) = ServerKey::load_or_create(&path, &SeededRandom::new(1)).unwrap();
        assert!(fresh);
        let (read, fresh) = ServerKey::load_or_create(&path, &SeededRandom::new(2)).unwrap();
        assert!(!fresh);
        assert_eq!(created.0, read.0);
        #[cfg(unix)]
        assert_eq!(exposed_files(std::slice::from_ref(&path)), []);
        std::fs::write(&path, "not hex").unwrap();
        let error = ServerKey::load_or_create(&path, &SeededRandom::new(3)).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
    }

    #[test]
    fn a_private_file_is_replaced_whole_and_stays_private() {
        let dir = conversion_gateway_testkit::TempDir::new("private-file");
        let path = dir.path("demo.json");
        // A leftover temporary file of an interrupted write is no obstacle.
        std::fs::write(dir.path("demo.json.tmp"), "half").unwrap();
        write_private_file(&path, b"first").unwrap();
        write_private_file(&path, b"second").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "second");
        assert!(!dir.path("demo.json.tmp").exists());
        #[cfg(unix)]
        assert_eq!(exposed_files(std::slice::from_ref(&path)), []);
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

        // The database and its WAL files, each reported by name.
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
        assert_eq!(
            exposed_files(&files),
            [ExposedFile {
                path: dir.path("gateway.db-wal"),
                mode: 0o644
            }]
        );
    }
}
