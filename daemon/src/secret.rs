//! The server secret and the keys derived from it: one HKDF label per use, so a token
//! hash, a request state and a cursor can never stand in for one another.
//!
//! - [`Secret`]: loads or creates `<cache_dir>/server-secrets/server.key` (O_EXCL, 0600),
//!   loads the `secret_file` replicas of one PostgreSQL ledger share, or a per-process
//!   random key with `--ephemeral`.
//! - [`Keys`]: the derived HMAC keys.

use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use hkdf::Hkdf;
use rand::RngCore;
use sha2::Sha256;

const SECRET_LEN: usize = 32;
const LABEL_TOKEN: &[u8] = b"tc/v1/token-hash";
const LABEL_STATE: &[u8] = b"tc/v1/request-state";
const LABEL_CURSOR: &[u8] = b"tc/v1/cursor";
const LABEL_BEARER: &[u8] = b"tc/v1/http-bearer";
/// The fixed label whose HMAC under the secret PostgreSQL keeps as the key check.
const LABEL_CHECK: &[u8] = b"tc/v1/key-check";

/// Where the key material came from; printed in the `elicit:` startup line.
#[derive(Debug, Clone)]
pub enum KeySource {
    /// `<cache_dir>/server-secrets/server.key`.
    File(PathBuf),
    /// `[daemon.postgres] secret_file`, shared by every replica (never rotated by tcd).
    Shared(PathBuf),
    /// `--ephemeral`: random, this process only.
    Ephemeral,
}

impl KeySource {
    /// The `elicit:` line logged at startup.
    pub fn elicit_line(&self) -> String {
        match self {
            KeySource::File(p) => format!(
                "elicit: request-state, cursor and token codecs keyed from {} (stable across restarts)",
                p.parent().map(|d| d.display().to_string()).unwrap_or_default()
            ),
            KeySource::Shared(p) => format!(
                "elicit: request-state, cursor and token codecs keyed from {} (shared by every replica of the PostgreSQL ledger)",
                p.display()
            ),
            KeySource::Ephemeral => "elicit: request-state, cursor and token codecs keyed from a per-process random key \
                 (--ephemeral): confirmations do not survive a restart and are not shared between processes"
                .to_string(),
        }
    }

    /// Short form for `Status`.
    pub fn describe(&self) -> String {
        match self {
            KeySource::File(p) | KeySource::Shared(p) => p.display().to_string(),
            KeySource::Ephemeral => "ephemeral".into(),
        }
    }
}

/// The HMAC keys derived from the secret.
pub struct Keys {
    pub token: [u8; 32],
    pub state: [u8; 32],
    pub cursor: [u8; 32],
    /// Signs the HS256 bearer tokens of HTTP callers (`MintToken`, `bearer.rs`).
    pub bearer: [u8; 32],
    /// HMAC(secret, [`LABEL_CHECK`]): what a shared ledger compares replicas' keys by.
    pub check: [u8; 32],
}

impl Keys {
    fn derive(secret: &[u8; SECRET_LEN]) -> Keys {
        let hk = Hkdf::<Sha256>::new(Some(b"tc-server-secret"), secret);
        let expand = |label: &[u8]| {
            let mut k = [0u8; 32];
            hk.expand(label, &mut k)
                .expect("32 bytes is a valid HKDF-SHA256 length");
            k
        };
        Keys {
            token: expand(LABEL_TOKEN),
            state: expand(LABEL_STATE),
            cursor: expand(LABEL_CURSOR),
            bearer: expand(LABEL_BEARER),
            check: {
                use hmac::{Hmac, Mac};
                let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("any key length");
                m.update(LABEL_CHECK);
                m.finalize().into_bytes().into()
            },
        }
    }
}

/// The loaded secret's keys and where they came from.
pub struct Secret {
    pub keys: Keys,
    pub source: KeySource,
}

/// Errors loading or creating the secret.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("secret {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("secret {path} has mode {mode:o}; it must be 0600 (fix with chmod 600, or remove it to void all confirmations)")]
    Mode { path: PathBuf, mode: u32 },
    #[error(
        "secret {path} is {len} bytes; expected {SECRET_LEN} (remove it to generate a new one)"
    )]
    Length { path: PathBuf, len: usize },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SecretError + '_ {
    move |source| SecretError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn random_secret() -> [u8; SECRET_LEN] {
    let mut s = [0u8; SECRET_LEN];
    rand::rngs::OsRng.fill_bytes(&mut s);
    s
}

impl Secret {
    /// A per-process random key.
    pub fn ephemeral() -> Secret {
        Secret {
            keys: Keys::derive(&random_secret()),
            source: KeySource::Ephemeral,
        }
    }

    /// The secret file path for a cache dir.
    pub fn path_in(cache_dir: &Path) -> PathBuf {
        cache_dir.join("server-secrets").join("server.key")
    }

    /// Loads the secret under `cache_dir`, creating it once (O_EXCL, 0600) if absent.
    pub fn load_or_create(cache_dir: &Path) -> Result<Secret, SecretError> {
        let path = Self::path_in(cache_dir);
        let dir = path.parent().expect("secret path has a parent");
        crate::fsutil::ensure_private_dir(dir).map_err(io_err(dir))?;
        let bytes = match read_secret(&path)? {
            Some(b) => b,
            None => match create_secret(&path, &random_secret()) {
                Ok(b) => b,
                // Another tcd won the O_EXCL race: use what it wrote.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_secret(&path)?
                    .ok_or_else(|| SecretError::Io {
                        path: path.clone(),
                        source: e,
                    })?,
                Err(e) => return Err(SecretError::Io { path, source: e }),
            },
        };
        Ok(Secret {
            keys: Keys::derive(&bytes),
            source: KeySource::File(path),
        })
    }

    /// Loads a provisioned key file (32 bytes, mode 0600) that is never created here.
    pub fn load_shared(path: &Path) -> Result<Secret, SecretError> {
        let Some(bytes) = read_secret(path)? else {
            return Err(SecretError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no such file: provision it once (head -c 32 /dev/urandom > FILE; chmod 600 FILE) \
                     and give every replica the same copy",
                ),
            });
        };
        Ok(Secret {
            keys: Keys::derive(&bytes),
            source: KeySource::Shared(path.to_path_buf()),
        })
    }

    /// Replaces the secret with a fresh one (atomic rename); returns the new keys.
    pub fn rotate(&mut self) -> Result<(), SecretError> {
        let fresh = random_secret();
        if let KeySource::File(path) = &self.source {
            let tmp = path.with_extension("key.new");
            let _ = fs::remove_file(&tmp);
            create_secret(&tmp, &fresh).map_err(io_err(&tmp))?;
            fs::rename(&tmp, path).map_err(io_err(path))?;
            if let Some(dir) = path.parent() {
                fs::File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(io_err(dir))?;
            }
        }
        self.keys = Keys::derive(&fresh);
        Ok(())
    }
}

fn read_secret(path: &Path) -> Result<Option<[u8; SECRET_LEN]>, SecretError> {
    let mut f = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(SecretError::Io {
                path: path.into(),
                source: e,
            })
        }
    };
    let mode = f.metadata().map_err(io_err(path))?.permissions().mode() & 0o777;
    if mode != 0o600 {
        return Err(SecretError::Mode {
            path: path.into(),
            mode,
        });
    }
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).map_err(io_err(path))?;
    let len = buf.len();
    buf.try_into().map(Some).map_err(|_| SecretError::Length {
        path: path.into(),
        len,
    })
}

fn create_secret(path: &Path, bytes: &[u8; SECRET_LEN]) -> std::io::Result<[u8; SECRET_LEN]> {
    // Written under a temporary name and linked into place only once complete and on
    // disk: a full disk or a crash mid-write must not leave a short key behind that
    // blocks every later start. `hard_link` fails with AlreadyExists like O_EXCL did.
    let tmp = path.with_extension(format!("key.tmp{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::hard_link(&tmp, path)
    })();
    let _ = fs::remove_file(&tmp);
    written?;
    if let Some(dir) = path.parent() {
        fs::File::open(dir)?.sync_all()?;
    }
    Ok(*bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_with_mode_0600_and_stable() {
        let dir = tempfile::tempdir().unwrap();
        let a = Secret::load_or_create(dir.path()).unwrap();
        let path = Secret::path_in(dir.path());
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            fs::metadata(path.parent().unwrap())
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700
        );
        let b = Secret::load_or_create(dir.path()).unwrap();
        assert_eq!(a.keys.state, b.keys.state);
        assert_ne!(a.keys.state, a.keys.cursor);
        assert_ne!(a.keys.state, a.keys.token);
        assert_ne!(a.keys.bearer, a.keys.token);
        assert_ne!(a.keys.bearer, a.keys.state);
        assert_ne!(a.keys.bearer, a.keys.cursor);
    }

    #[test]
    fn loose_mode_and_wrong_length_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        Secret::load_or_create(dir.path()).unwrap();
        let path = Secret::path_in(dir.path());
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            Secret::load_or_create(dir.path()),
            Err(SecretError::Mode { .. })
        ));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        fs::write(&path, b"short").unwrap();
        assert!(matches!(
            Secret::load_or_create(dir.path()),
            Err(SecretError::Length { .. })
        ));
    }

    #[test]
    fn rotation_changes_keys_and_persists() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = Secret::load_or_create(dir.path()).unwrap();
        let before = a.keys.state;
        a.rotate().unwrap();
        assert_ne!(before, a.keys.state);
        let b = Secret::load_or_create(dir.path()).unwrap();
        assert_eq!(a.keys.state, b.keys.state);
    }
}
