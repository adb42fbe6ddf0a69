//! Filesystem state for `paths`, `tree` and `matching` targets: existence, type,
//! content hashes (through the stat cache), sorted directory listings and link chains.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::cache::Cache;
use super::{lossless, TargetError};
use crate::vault::regular;

/// Bytes read at a time while hashing a file: memory stays bounded whatever its size.
const CHUNK: usize = 64 * 1024;

pub(in crate::engine) fn io(path: &Path, source: std::io::Error) -> TargetError {
    TargetError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// What hashing one file found.
pub(in crate::engine) struct Hashed {
    pub sha256: [u8; 32],
    pub len: u64,
    /// Whether the needle (if any) occurs in the content.
    pub contains: bool,
    /// Whether the bytes were read (not all taken from the cache).
    pub read: bool,
}

/// The content hash of the regular file at `p` (and whether it contains `needle`),
/// from the cache while `meta` (the caller's `stat`/`lstat` of it) shows it unchanged;
/// else read, and recorded. `nofollow` as for [`hash_file`].
pub(in crate::engine) fn content(
    cache: &Cache,
    p: &Path,
    meta: &std::fs::Metadata,
    nofollow: bool,
    needle: Option<&[u8]>,
) -> Result<Hashed, TargetError> {
    let needle_sha: Option<[u8; 32]> = needle.map(|n| Sha256::digest(n).into());
    if let Some(sha) = cache.hash(meta) {
        let contains = match needle_sha {
            None => Some(true),
            Some(n) => cache.contains(sha, n),
        };
        if let Some(contains) = contains {
            return Ok(Hashed {
                sha256: sha,
                len: std::os::unix::fs::MetadataExt::size(meta),
                contains,
                read: false,
            });
        }
    }
    let read_at = std::time::SystemTime::now();
    let (h, fmeta) = hash_file(p, nofollow, needle)?;
    cache.put_hash(&fmeta, read_at, h.sha256);
    if let Some(n) = needle_sha {
        cache.put_contains(h.sha256, n, h.contains);
    }
    Ok(h)
}

/// Hashes a regular file chunk by chunk and tells whether it contains `needle` (also
/// across chunk boundaries). A path swapped for a FIFO or a device after it was looked
/// at is refused ([`regular::open`]); `nofollow` refuses one swapped for a symlink
/// (walks never follow links).
/// Also returns the `fstat` of the open file, taken before the first byte is read.
fn hash_file(
    p: &Path,
    nofollow: bool,
    needle: Option<&[u8]>,
) -> Result<(Hashed, std::fs::Metadata), TargetError> {
    let (mut f, meta) = regular::open(p, nofollow)
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
    let h = Hashed {
        sha256: h.finalize().into(),
        len,
        contains,
        read: true,
    };
    Ok((h, meta))
}

/// The kind a state records for a file type; FIFOs, sockets and devices each have their
/// own, so one replaced by another is drift. Those are never opened.
pub(in crate::engine) fn kind_of(t: std::fs::FileType) -> &'static str {
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
pub fn path_state(cache: &Cache, p: &Path) -> Result<Value, TargetError> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.file_type().is_symlink() => {
            let to = std::fs::read_link(p).map_err(|e| io(p, e))?;
            Ok(json!({
                "kind": "symlink",
                "to": lossless(to.as_os_str().as_bytes()),
                "leads_to": followed_state(cache, p)?,
            }))
        }
        _ => followed_state(cache, p),
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
fn followed_state(cache: &Cache, p: &Path) -> Result<Value, TargetError> {
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
        let h = content(cache, p, &meta, false, None)?;
        Ok(json!({"kind": "file", "sha256": hex::encode(h.sha256), "len": h.len}))
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
            let fifo = hash_file(&dir.join("fifo"), false, None).map(|h| h.0.len);
            let link = hash_file(&dir.join("link"), true, None).map(|h| h.0.len);
            let zero = hash_file(Path::new("/dev/zero"), false, None).map(|h| h.0.len);
            tx.send((fifo.is_err(), link.is_err(), zero.is_err()))
                .unwrap();
        });
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("hashing must not block on a FIFO");
        assert_eq!(got, (true, true, true));
        assert_eq!(
            hash_file(&d.path().join("link"), false, None)
                .unwrap()
                .0
                .len,
            1
        );
    }
}
