//! The daemon's Unix socket: systemd socket activation when `LISTEN_FDS` is set, else
//! our own bind in a 0700 directory, stale sockets removed, the socket chmod 0600.
//! Guarded mode ([`Reach::Shared`]): a 0755 directory and a 0666 socket, because the
//! listed humans connect too and who may do what is decided by SO_PEERCRED.

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;

/// A bound listener, and the path to remove on shutdown (None when systemd owns it).
pub struct Bound {
    pub listener: UnixListener,
    pub cleanup: Option<PathBuf>,
    pub activated: bool,
}

/// Who may reach the socket file (not who may use it: that is `auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Personal mode: tcd's own user (0700 directory, 0600 socket).
    Private,
    /// Guarded mode: every local user (0755 directory, 0666 socket).
    Shared,
}

/// Takes the activated socket, or binds `path`.
pub fn bind(path: &Path, reach: Reach) -> anyhow::Result<Bound> {
    let mut fds = listenfd::ListenFd::from_env();
    if let Ok(Some(std)) = fds.take_unix_listener(0) {
        std.set_nonblocking(true)?;
        let listener = UnixListener::from_std(std)?;
        if let Ok(addr) = listener.local_addr() {
            if addr.as_pathname() != Some(path) {
                tracing::warn!(activated = ?addr.as_pathname(), configured = %path.display(),
                    "socket-activated path differs from the configured socket; clients use the configured one");
            }
        }
        return Ok(Bound {
            listener,
            cleanup: None,
            activated: true,
        });
    }
    let dir = path
        .parent()
        .ok_or_else(|| anyhow::anyhow!("socket path {} has no parent", path.display()))?;
    match reach {
        Reach::Private => crate::fsutil::ensure_private_dir(dir),
        Reach::Shared => crate::fsutil::ensure_shared_dir(dir),
    }
    .map_err(|e| anyhow::anyhow!("socket directory {}: {e}", dir.display()))?;
    let listener = match UnixListener::bind(path) {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            remove_if_stale(path)?;
            UnixListener::bind(path)?
        }
        Err(e) => return Err(anyhow::anyhow!("cannot bind {}: {e}", path.display())),
    };
    let mode = match reach {
        Reach::Private => 0o600,
        Reach::Shared => 0o666,
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(Bound {
        listener,
        cleanup: Some(path.to_path_buf()),
        activated: false,
    })
}

/// A leftover socket nobody answers on is removed; a live one means tcd is running.
fn remove_if_stale(path: &Path) -> anyhow::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.file_type().is_socket() {
        anyhow::bail!(
            "{} exists and is not a socket; refusing to replace it",
            path.display()
        );
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => anyhow::bail!("tcd is already running at {}", path.display()),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            tracing::info!(socket = %path.display(), "removing stale socket");
            std::fs::remove_file(path)?;
            Ok(())
        }
        Err(e) => anyhow::bail!("{} is in use and not answering ({e})", path.display()),
    }
}
