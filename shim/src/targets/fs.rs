//! Filesystem state for `paths`, `tree` and `matching` targets: existence, type,
//! content hashes and sorted directory listings, with a cap on how much is walked.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::{lossless, TargetError};
use crate::regular;

/// Most entries (files, links and folders) a tree/matching target walks before refusing.
pub const MAX_FILES: usize = 100_000;

/// Bytes read at a time while hashing a file: memory stays bounded whatever its size.
const CHUNK: usize = 64 * 1024;

fn io(path: &Path, source: std::io::Error) -> TargetError {
    TargetError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// What hashing one file found.
struct Hashed {
    sha256: String,
    len: u64,
    /// Whether the needle (if any) occurs in the content.
    contains: bool,
}

/// Hashes a regular file chunk by chunk and tells whether it contains `needle` (also
/// across chunk boundaries). A path swapped for a FIFO or a device after it was looked
/// at is refused ([`regular::open`]); `nofollow` refuses one swapped for a symlink
/// (walks never follow links).
fn hash_file(p: &Path, nofollow: bool, needle: Option<&[u8]>) -> Result<Hashed, TargetError> {
    let (mut f, _) = regular::open(p, nofollow)
        .map_err(|e| io(p, e))?
        .ok_or_else(|| {
            io(
                p,
                std::io::Error::other("changed into something other than a regular file"),
            )
        })?;
    let finder = needle.map(memchr::memmem::Finder::new);
    let keep = needle.map_or(0, |n| n.len().saturating_sub(1));
    let mut h = Sha256::new();
    let mut len = 0u64;
    let mut contains = needle.is_none();
    // The needle's length minus one of the previous chunk, then the new one.
    let mut buf = vec![0u8; keep + CHUNK];
    let mut carried = 0usize;
    loop {
        let n = match f.read(&mut buf[carried..]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(p, e)),
        };
        h.update(&buf[carried..carried + n]);
        len += n as u64;
        let filled = carried + n;
        if let Some(fi) = &finder {
            if !contains && fi.find(&buf[..filled]).is_some() {
                contains = true;
            }
        }
        carried = keep.min(filled);
        buf.copy_within(filled - carried..filled, 0);
    }
    Ok(Hashed {
        sha256: hex::encode(h.finalize()),
        len,
        contains,
    })
}

/// The kind a state records for a file type; FIFOs, sockets and devices each have their
/// own, so one replaced by another is drift. Those are never opened.
fn kind_of(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "dir"
    } else if t.is_symlink() {
        "symlink"
    } else if t.is_file() {
        "file"
    } else if t.is_fifo() {
        "fifo"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() {
        "char-device"
    } else if t.is_block_device() {
        "block-device"
    } else {
        "other"
    }
}

/// Existence, type and content of one path (directories: sorted entry names with types).
/// The path itself is looked at with `lstat`: a link records its target text and the
/// state of what it leads to, so a file swapped for a link to identical bytes is drift.
pub fn path_state(p: &Path) -> Result<Value, TargetError> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.file_type().is_symlink() => {
            let to = std::fs::read_link(p).map_err(|e| io(p, e))?;
            Ok(json!({
                "kind": "symlink",
                "to": lossless(to.as_os_str().as_bytes()),
                "leads_to": followed_state(p)?,
            }))
        }
        _ => followed_state(p),
    }
}

/// The links among the components of `p` below `base` (`p` itself included when
/// `with_last`), each as `[path relative to base, link text]`: a folder on the way
/// swapped for a link to an identical one changes where a call lands.
pub fn link_chain(base: &Path, p: &Path, with_last: bool) -> Result<Vec<Value>, TargetError> {
    let Ok(rel) = p.strip_prefix(base) else {
        return Ok(Vec::new());
    };
    let comps: Vec<_> = rel.components().collect();
    let n = if with_last {
        comps.len()
    } else {
        comps.len().saturating_sub(1)
    };
    let mut out = Vec::new();
    let mut cur = base.to_path_buf();
    let mut cur_rel = std::path::PathBuf::new();
    for c in &comps[..n] {
        cur.push(c);
        cur_rel.push(c);
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = std::fs::read_link(&cur).map_err(|e| io(&cur, e))?;
                out.push(json!([
                    lossless(cur_rel.as_os_str().as_bytes()),
                    lossless(to.as_os_str().as_bytes())
                ]));
            }
            Ok(_) => {}
            // Nothing further exists: no more links on the way.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            Err(e) if e.raw_os_error() == Some(nix::libc::ENOTDIR) => break,
            Err(e) => return Err(io(&cur, e)),
        }
    }
    Ok(out)
}

/// [`path_state`] of what `p` leads to (links followed).
fn followed_state(p: &Path) -> Result<Value, TargetError> {
    let meta = match std::fs::metadata(p) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(json!({"kind": "missing"}))
        }
        // A dangling link, or a link loop: what it leads to cannot be read.
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => return Ok(json!({"kind": "loop"})),
        Err(e) => return Err(io(p, e)),
    };
    if meta.is_file() {
        let h = hash_file(p, false, None)?;
        Ok(json!({"kind": "file", "sha256": h.sha256, "len": h.len}))
    } else if meta.is_dir() {
        let mut names = Vec::new();
        for e in std::fs::read_dir(p).map_err(|e| io(p, e))? {
            let e = e.map_err(|e| io(p, e))?;
            let t = e.file_type().map_err(|err| io(&e.path(), err))?;
            let kind = kind_of(t);
            names.push(format!("{}\t{kind}", lossless(e.file_name().as_bytes())));
        }
        names.sort();
        Ok(json!({"kind": "dir", "entries": names}))
    } else {
        Ok(json!({"kind": kind_of(meta.file_type())}))
    }
}

/// Files under `dir` (relative paths, sorted) for which `keep(rel)` holds and, if a
/// `needle` is given, whose content contains it, with content hashes; and symlinks for
/// which `keep_link(rel)` holds, with their link text. A file `keep` refuses is never
/// read. Links are never followed (they may point out of the root), but adding,
/// removing or retargeting one is part of the state.
pub fn walk(
    dir: &Path,
    keep: &dyn Fn(&Path) -> bool,
    needle: Option<&[u8]>,
    keep_link: &dyn Fn(&Path) -> bool,
) -> Result<Vec<Value>, TargetError> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    let mut seen = 0usize;
    while let Some(d) = stack.pop() {
        let rd = match std::fs::read_dir(&d) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && d == dir => return Ok(out),
            Err(e) => return Err(io(&d, e)),
        };
        for e in rd {
            let e = e.map_err(|e| io(&d, e))?;
            let path = e.path();
            let ft = e.file_type().map_err(|e2| io(&path, e2))?;
            if !(ft.is_dir() || ft.is_file() || ft.is_symlink()) {
                continue;
            }
            // Folders count too: a tree of empty folders is as costly to walk as files.
            seen += 1;
            if seen > MAX_FILES {
                return Err(TargetError::TooMany(MAX_FILES));
            }
            if ft.is_dir() {
                stack.push(path);
                continue;
            }
            // Globs see the name's bytes; the state records them losslessly.
            let rel_path = path.strip_prefix(dir).unwrap_or(&path);
            let rel = lossless(rel_path.as_os_str().as_bytes());
            if ft.is_symlink() {
                if keep_link(rel_path) {
                    let to = std::fs::read_link(&path).map_err(|e2| io(&path, e2))?;
                    let to = lossless(to.as_os_str().as_bytes());
                    out.push(json!([rel, format!("symlink:{to}")]));
                }
                continue;
            }
            if !keep(rel_path) {
                continue;
            }
            let h = hash_file(&path, true, needle)?;
            if h.contains {
                out.push(json!([rel, h.sha256]));
            }
        }
    }
    out.sort_by(|a, b| a[0].as_str().cmp(&b[0].as_str()));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `path_state` and `walk` look at a path's type before hashing it; if it is swapped
    /// for a FIFO or a link in between, the open itself must refuse, not block.
    #[test]
    fn a_path_swapped_for_a_fifo_or_a_link_is_refused_not_waited_on() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        std::fs::write(d.path().join("file"), "x").unwrap();
        std::os::unix::fs::symlink("file", d.path().join("link")).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let dir = d.path().to_path_buf();
        std::thread::spawn(move || {
            let fifo = hash_file(&dir.join("fifo"), false, None).map(|h| h.len);
            let link = hash_file(&dir.join("link"), true, None).map(|h| h.len);
            let zero = hash_file(Path::new("/dev/zero"), false, None).map(|h| h.len);
            tx.send((fifo.is_err(), link.is_err(), zero.is_err()))
                .unwrap();
        });
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("hashing must not block on a FIFO");
        assert_eq!(got, (true, true, true));
        assert_eq!(
            hash_file(&d.path().join("link"), false, None).unwrap().len,
            1
        );
    }
}
