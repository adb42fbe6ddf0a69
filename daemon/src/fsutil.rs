//! Private directories: created 0700, refused when they are symlinks or owned by
//! someone else (the socket and secret live in them).

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

/// Creates `dir` (and parents) with mode 0700, or tightens an existing one we own.
pub fn ensure_private_dir(dir: &Path) -> io::Result<()> {
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
            if m.permissions().mode() & 0o077 != 0 {
                fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
            // `recursive` applies the mode to every level it makes, but umask may mask it.
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        }
        Err(e) => Err(e),
    }
}
