//! Opening a file that must be a regular one, for every fingerprint read (targets and
//! the git dir). Its own module so the fuzz crate, which compiles `gitindex.rs`, has it.

use std::fs::{File, Metadata};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Opens `path` for reading if it is a regular file; `Ok(None)` if it is something
/// else. It is opened non-blocking and checked with `fstat` on the open descriptor, so
/// a path swapped for a FIFO after it was looked at blocks nothing and a device (or a
/// link to `/dev/zero`) is never read without end; `nofollow` also refuses a symlink.
pub fn open(path: &Path, nofollow: bool) -> std::io::Result<Option<(File, Metadata)>> {
    let mut flags = nix::libc::O_NONBLOCK;
    if nofollow {
        flags |= nix::libc::O_NOFOLLOW;
    }
    let f = File::options().read(true).custom_flags(flags).open(path)?;
    let meta = f.metadata()?;
    Ok(meta.is_file().then_some((f, meta)))
}
