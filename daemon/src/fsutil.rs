//! Private directories: created 0700, refused when they are symlinks or owned by
//! someone else (the socket and secret live in them); and guarded mode's socket
//! directory, which the humans must traverse (0755: access is decided by SO_PEERCRED).

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

/// Creates `dir` (and parents) with mode 0700, or tightens an existing one we own.
pub fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    ensure_dir(dir, 0o700, 0o077)
}

/// Guarded mode's socket directory: ours, no symlink, writable by us alone (0755 when
/// made here; group/other write bits are removed), so no one can plant a socket in it.
pub fn ensure_shared_dir(dir: &Path) -> io::Result<()> {
    ensure_dir(dir, 0o755, 0o022)
}

/// `dir` owned by us with none of the `forbidden` bits (tightened to `mode` if it has
/// any), created with `mode` when missing.
fn ensure_dir(dir: &Path, mode: u32, forbidden: u32) -> io::Result<()> {
    match fs::symlink_metadata(dir) {
        Ok(m) => {
            if m.file_type().is_symlink() {
                return Err(io::Error::other(format!(
                    "{} is a symlink; refusing to use it",
                    dir.display()
                )));
            }
            if !m.is_dir() {
                return Err(io::Error::other(format!(
                    "{} is not a directory",
                    dir.display()
                )));
            }
            let me = nix::unistd::geteuid().as_raw();
            if m.uid() != me {
                return Err(io::Error::other(format!(
                    "{} is owned by uid {}, not by this user (uid {me})",
                    dir.display(),
                    m.uid()
                )));
            }
            if m.permissions().mode() & forbidden != 0 {
                fs::set_permissions(dir, fs::Permissions::from_mode(mode))?;
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(mode)
                .create(dir)?;
            // `recursive` applies the mode to every level it makes, but umask may mask it.
            fs::set_permissions(dir, fs::Permissions::from_mode(mode))
        }
        Err(e) => Err(e),
    }
}
