//! Reads a git repository's HEAD oid and staged index entries (path, mode, blob id)
//! straight from `.git`, without the `git` binary; stat data is ignored on purpose.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::vault::regular;

/// Largest file read from a git dir: the index of a very large repository is a few
/// hundred MB; HEAD, refs and packed-refs are far smaller.
pub const MAX_READ: u64 = 512 << 20;

/// Longest name a v4 entry may decode to: PATH_MAX, as no longer path can be checked out.
pub const MAX_NAME: usize = 4096;

/// Decoded name bytes allowed per byte of index. v4 names are built from the previous
/// one, so a 64-byte entry can decode to a PATH_MAX name: without a bound a few MB of
/// index decode to GBs. Real indexes stay well under 2 (paths shorter than an entry).
pub const NAMES_PER_BYTE: usize = 8;

/// Errors reading a repository.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("{0}: not a git repository (no .git)")]
    NotARepo(PathBuf),
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("malformed git index {path}: {why}")]
    BadIndex { path: PathBuf, why: IndexError },
    /// A symbolic ref naming a path outside the git dir (absolute, or with `..`),
    /// which git itself never writes: refused rather than read.
    #[error("{gd}: ref {name:?} leaves the git directory")]
    BadRef { gd: PathBuf, name: String },
    /// A FIFO, socket or device where git keeps a file: never read (it could block the
    /// shim, or never end).
    #[error("{0}: not a regular file")]
    NotRegular(PathBuf),
    #[error("{path}: larger than {max} bytes")]
    TooLarge { path: PathBuf, max: u64 },
    /// Only SHA-1 repositories are read: a SHA-256 one has 32-byte ids in its index,
    /// and reading that with SHA-1 offsets fails only by luck.
    #[error("{config}: object format {format:?} is not supported (SHA-1 repositories only)")]
    ObjectFormat { config: PathBuf, format: String },
}

/// Why an index file was refused: one variant per check, so a caller (and a fuzz test)
/// can tell a truncation from a bad version without reading the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    #[error("missing DIRC signature")]
    Signature,
    #[error("unsupported index version {0}")]
    Version(u32),
    #[error("truncated")]
    Truncated,
    #[error("extended flag in a version 2 index")]
    ExtendedInV2,
    #[error("bad name-prefix varint")]
    Varint,
    #[error("name prefix longer than the previous name")]
    Prefix,
    #[error("unterminated name")]
    UnterminatedName,
    #[error("a name longer than {MAX_NAME} bytes")]
    NameTooLong,
    #[error("names decode to more than {NAMES_PER_BYTE} bytes per byte of index")]
    NamesTooLarge,
    /// An extension git itself must understand to read the entries (its signature does
    /// not start with A-Z) and this reader does not: `link` is a split index.
    #[error(
        "extension {:?} is not understood (a split index? `git update-index --no-split-index`)",
        String::from_utf8_lossy(.0)
    )]
    Extension([u8; 4]),
}

/// One staged entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub mode: u32,
    pub oid: String,
    pub stage: u8,
}

/// What a `git` target binds: HEAD and the staged entries, sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// HEAD's oid, or `ref:<name>` for an unborn branch.
    pub head: String,
    pub entries: Vec<Entry>,
}

fn read(path: &Path) -> Result<Vec<u8>, GitError> {
    read_opt(path)?.ok_or_else(|| GitError::Io {
        path: path.to_path_buf(),
        source: std::io::ErrorKind::NotFound.into(),
    })
}

/// Reads a regular file of the git dir whole; `None` only if it does not exist, so an
/// unreadable ref or index is an error, never taken for an absent one. A FIFO or a
/// device is refused unread ([`regular::open`]), and a file over [`MAX_READ`] before
/// it is read.
fn read_opt(path: &Path) -> Result<Option<Vec<u8>>, GitError> {
    let io = |source| GitError::Io {
        path: path.to_path_buf(),
        source,
    };
    let (f, meta) = match regular::open(path, false) {
        Ok(Some(opened)) => opened,
        Ok(None) => return Err(GitError::NotRegular(path.to_path_buf())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    let too_large = || GitError::TooLarge {
        path: path.to_path_buf(),
        max: MAX_READ,
    };
    if meta.len() > MAX_READ {
        return Err(too_large());
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    f.take(MAX_READ + 1).read_to_end(&mut out).map_err(io)?;
    if out.len() as u64 > MAX_READ {
        return Err(too_large());
    }
    Ok(Some(out))
}

/// A loose ref: `None` if there is none (a folder there holds refs like `main/x`).
fn read_loose(path: &Path) -> Result<Option<Vec<u8>>, GitError> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(None),
        Ok(_) => read_opt(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(GitError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Finds the git dir of the work tree at `repo` (`.git` dir, or a `gitdir:` file).
pub fn git_dir(repo: &Path) -> Result<PathBuf, GitError> {
    let dot = repo.join(".git");
    if dot.is_dir() {
        return Ok(dot);
    }
    if dot.is_file() {
        let text = String::from_utf8_lossy(&read(&dot)?).to_string();
        if let Some(rest) = text.trim().strip_prefix("gitdir:") {
            let p = PathBuf::from(rest.trim());
            return Ok(if p.is_absolute() { p } else { repo.join(p) });
        }
    }
    if repo.join("HEAD").is_file() && repo.join("objects").is_dir() {
        return Ok(repo.to_path_buf());
    }
    Err(GitError::NotARepo(repo.to_path_buf()))
}

fn resolve_ref(gd: &Path, name: &str, depth: u8) -> Result<String, GitError> {
    let p = Path::new(name);
    if p.is_absolute() || p.components().any(|c| c == std::path::Component::ParentDir) {
        return Err(GitError::BadRef {
            gd: gd.to_path_buf(),
            name: name.to_string(),
        });
    }
    if let Some(bytes) = read_loose(&gd.join(name))? {
        let text = String::from_utf8_lossy(&bytes).trim().to_string();
        if let Some(next) = text.strip_prefix("ref:") {
            if depth > 5 {
                return Ok(format!("ref:{}", next.trim()));
            }
            return resolve_ref(gd, next.trim(), depth + 1);
        }
        return Ok(text);
    }
    // Worktrees keep refs in the common dir.
    let common = common_dir(gd)?;
    if common != gd && read_loose(&common.join(name))?.is_some() {
        return resolve_ref(&common, name, depth + 1);
    }
    if let Some(packed) = read_opt(&common.join("packed-refs"))? {
        for line in String::from_utf8_lossy(&packed).lines() {
            if let Some((oid, r)) = line.split_once(' ') {
                if r == name && !oid.starts_with('#') {
                    return Ok(oid.to_string());
                }
            }
        }
    }
    Ok(format!("ref:{name}"))
}

/// The git dir shared by all worktrees (`commondir`), or `gd` itself.
fn common_dir(gd: &Path) -> Result<PathBuf, GitError> {
    Ok(match read_opt(&gd.join("commondir"))? {
        Some(c) => gd.join(String::from_utf8_lossy(&c).trim()),
        None => gd.to_path_buf(),
    })
}

/// Refuses a repository whose config names an object format other than SHA-1
/// (`[extensions] objectFormat = sha256`; the key occurs in no other section).
fn check_object_format(gd: &Path) -> Result<(), GitError> {
    let config = common_dir(gd)?.join("config");
    let Some(text) = read_opt(&config)? else {
        return Ok(());
    };
    for line in String::from_utf8_lossy(&text).lines() {
        let kv: String = line.chars().filter(|c| !c.is_whitespace()).collect();
        if let Some(format) = kv.to_ascii_lowercase().strip_prefix("objectformat=") {
            if format != "sha1" {
                return Err(GitError::ObjectFormat {
                    config,
                    format: format.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// HEAD's oid (or `ref:<name>` when the branch has no commit yet).
pub fn head(gd: &Path) -> Result<String, GitError> {
    let text = String::from_utf8_lossy(&read(&gd.join("HEAD"))?)
        .trim()
        .to_string();
    match text.strip_prefix("ref:") {
        Some(r) => resolve_ref(gd, r.trim(), 0),
        None => Ok(text),
    }
}

/// Reads the repository at `repo`.
pub fn snapshot(repo: &Path) -> Result<Snapshot, GitError> {
    let gd = git_dir(repo)?;
    check_object_format(&gd)?;
    let head = head(&gd)?;
    let index_path = gd.join("index");
    let entries = match read_opt(&index_path)? {
        Some(bytes) => parse_index(&bytes).map_err(|why| GitError::BadIndex {
            path: index_path.clone(),
            why,
        })?,
        None => Vec::new(),
    };
    Ok(Snapshot { head, entries })
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, IndexError> {
    b.get(at..at + 4)
        .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or(IndexError::Truncated)
}

/// Parses index versions 2, 3 and 4 (SHA-1 object ids), returning entries sorted by path.
pub fn parse_index(b: &[u8]) -> Result<Vec<Entry>, IndexError> {
    if b.get(0..4) != Some(b"DIRC") {
        return Err(IndexError::Signature);
    }
    let version = u32_at(b, 4)?;
    if !(2..=4).contains(&version) {
        return Err(IndexError::Version(version));
    }
    let count = u32_at(b, 8)? as usize;
    let mut at = 12usize;
    let mut out = Vec::with_capacity(count.min(1 << 16));
    let mut prev: Vec<u8> = Vec::new();
    let mut names = 0usize;
    for _ in 0..count {
        let start = at;
        let mode = u32_at(b, at + 24)?;
        let oid = b.get(at + 40..at + 60).ok_or(IndexError::Truncated)?;
        let flags = b
            .get(at + 60..at + 62)
            .map(|s| u16::from_be_bytes([s[0], s[1]]))
            .ok_or(IndexError::Truncated)?;
        at += 62;
        if flags & 0x4000 != 0 {
            if version < 3 {
                return Err(IndexError::ExtendedInV2);
            }
            at += 2;
        }
        let stage = ((flags >> 12) & 3) as u8;
        let name: Vec<u8> = if version == 4 {
            // Prefix compression: strip N bytes from the previous name, append the suffix.
            let mut c = *b.get(at).ok_or(IndexError::Truncated)?;
            at += 1;
            let mut strip: usize = (c & 0x7f) as usize;
            while c & 0x80 != 0 {
                c = *b.get(at).ok_or(IndexError::Truncated)?;
                at += 1;
                strip = strip
                    .checked_add(1)
                    .and_then(|v| v.checked_mul(128))
                    .and_then(|v| v.checked_add((c & 0x7f) as usize))
                    .ok_or(IndexError::Varint)?;
            }
            if strip > prev.len() {
                return Err(IndexError::Prefix);
            }
            let rest = b.get(at..).ok_or(IndexError::Truncated)?;
            let nul = rest
                .iter()
                .position(|&x| x == 0)
                .ok_or(IndexError::UnterminatedName)?;
            if prev.len() - strip + nul > MAX_NAME {
                return Err(IndexError::NameTooLong);
            }
            let mut name = prev[..prev.len() - strip].to_vec();
            name.extend_from_slice(&rest[..nul]);
            at += nul + 1;
            name
        } else {
            let rest = b.get(at..).ok_or(IndexError::Truncated)?;
            let nul = rest
                .iter()
                .position(|&x| x == 0)
                .ok_or(IndexError::UnterminatedName)?;
            let name = rest[..nul].to_vec();
            // Entry padded with 1..=8 NULs to a multiple of 8 bytes.
            let len = at + nul - start;
            at = start + (len + 8) / 8 * 8;
            name
        };
        if at > b.len() {
            return Err(IndexError::Truncated);
        }
        names += name.len();
        if names > b.len().saturating_mul(NAMES_PER_BYTE) {
            return Err(IndexError::NamesTooLarge);
        }
        out.push(Entry {
            path: crate::vault::names::lossless(&name),
            mode,
            oid: hex::encode(oid),
            stage,
        });
        prev = name;
    }
    // Extensions, then the checksum (not verified: the entries read above are what is
    // bound). With `link` (split index) the entries here only patch those of a
    // `sharedindex.*` file, and deletions are a bitmap in the extension, so it and any
    // other mandatory extension not understood are refused; `sdir` only says that
    // sparse folder entries (read above, with their tree ids) may occur.
    const CHECKSUM: usize = 20;
    while b.len() - at > CHECKSUM {
        let sig = b.get(at..at + 4).ok_or(IndexError::Truncated)?;
        let size = u32_at(b, at + 4)? as usize;
        let end = (at + 8)
            .checked_add(size)
            .filter(|&e| e <= b.len() - CHECKSUM)
            .ok_or(IndexError::Truncated)?;
        if !sig[0].is_ascii_uppercase() && sig != b"sdir" {
            return Err(IndexError::Extension([sig[0], sig[1], sig[2], sig[3]]));
        }
        at = end;
    }
    if b.len() - at != CHECKSUM {
        return Err(IndexError::Truncated);
    }
    out.sort_by(|a, b| (&a.path, a.stage).cmp(&(&b.path, b.stage)));
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn entry_v2(name: &str, mode: u32, oid: u8, ctime: u32) -> Vec<u8> {
        let mut e = Vec::new();
        e.extend_from_slice(&ctime.to_be_bytes());
        e.extend_from_slice(&[0; 20]);
        e.extend_from_slice(&mode.to_be_bytes());
        e.extend_from_slice(&[0; 12]);
        e.extend_from_slice(&[oid; 20]);
        e.extend_from_slice(&(name.len() as u16).to_be_bytes());
        e.extend_from_slice(name.as_bytes());
        let len = 62 + name.len();
        e.resize((len + 8) / 8 * 8, 0);
        e
    }

    fn index(version: u32, entries: &[Vec<u8>]) -> Vec<u8> {
        let mut b = b"DIRC".to_vec();
        b.extend_from_slice(&version.to_be_bytes());
        b.extend_from_slice(&(entries.len() as u32).to_be_bytes());
        for e in entries {
            b.extend_from_slice(e);
        }
        b.extend_from_slice(&[0; 20]);
        b
    }

    #[test]
    fn v2_entries_ignore_stat_data() {
        let a = index(
            2,
            &[
                entry_v2("a.txt", 0o100644, 1, 5),
                entry_v2("dir/b", 0o100755, 2, 5),
            ],
        );
        let b = index(
            2,
            &[
                entry_v2("a.txt", 0o100644, 1, 9),
                entry_v2("dir/b", 0o100755, 2, 7),
            ],
        );
        let pa = parse_index(&a).unwrap();
        assert_eq!(pa, parse_index(&b).unwrap());
        assert_eq!(pa[1].path, "dir/b");
        assert_eq!(pa[1].mode, 0o100755);
        assert_eq!(pa[0].oid, "01".repeat(20));
    }

    #[test]
    fn v4_prefix_compression() {
        let mut b = b"DIRC".to_vec();
        b.extend_from_slice(&4u32.to_be_bytes());
        b.extend_from_slice(&2u32.to_be_bytes());
        for (strip, suffix, oid) in [(0u8, "dir/aa", 1u8), (2, "bb", 2)] {
            b.extend_from_slice(&[0; 24]);
            b.extend_from_slice(&0o100644u32.to_be_bytes());
            b.extend_from_slice(&[0; 12]);
            b.extend_from_slice(&[oid; 20]);
            b.extend_from_slice(&6u16.to_be_bytes());
            b.push(strip);
            b.extend_from_slice(suffix.as_bytes());
            b.push(0);
        }
        b.extend_from_slice(&[0; 20]);
        let e = parse_index(&b).unwrap();
        assert_eq!(e[0].path, "dir/aa");
        assert_eq!(e[1].path, "dir/bb");
    }

    #[test]
    fn refs_outside_the_git_dir_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let gd = d.path().join(".git");
        std::fs::create_dir_all(gd.join("refs/heads")).unwrap();
        std::fs::write(d.path().join("outside"), "not a ref").unwrap();
        for head in [
            "ref: ../outside",
            "ref: /etc/hostname",
            "ref: refs/../../outside",
        ] {
            std::fs::write(gd.join("HEAD"), head).unwrap();
            assert!(
                matches!(super::head(&gd), Err(GitError::BadRef { .. })),
                "{head}"
            );
        }
        // A loop of symbolic refs ends; an ordinary ref still resolves.
        std::fs::write(gd.join("HEAD"), "ref: refs/heads/a").unwrap();
        std::fs::write(gd.join("refs/heads/a"), "ref: refs/heads/a").unwrap();
        assert_eq!(super::head(&gd).unwrap(), "ref:refs/heads/a");
        std::fs::write(gd.join("refs/heads/a"), "0123abcd\n").unwrap();
        assert_eq!(super::head(&gd).unwrap(), "0123abcd");
    }

    /// Runs git in `dir` (a test's repository); its stdout.
    pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
        let o = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap().trim().to_string()
    }

    /// Runs `f` on another thread; `None` if it did not finish within 20 s.
    fn within<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(f()).unwrap());
        rx.recv_timeout(std::time::Duration::from_secs(20)).ok()
    }

    fn bare_layout(d: &Path) -> PathBuf {
        let gd = d.join(".git");
        std::fs::create_dir_all(gd.join("refs/heads")).unwrap();
        std::fs::write(gd.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        gd
    }

    #[test]
    fn fifos_in_the_git_dir_are_refused_not_waited_on() {
        for name in [
            "index",
            "HEAD",
            "refs/heads/main",
            "packed-refs",
            "commondir",
        ] {
            let d = tempfile::tempdir().unwrap();
            let gd = bare_layout(d.path());
            let fifo = gd.join(name);
            let _ = std::fs::remove_file(&fifo);
            nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
            let repo = d.path().to_path_buf();
            let got = within(move || snapshot(&repo).map(|s| s.head));
            if got.is_none() {
                // Release the blocked reader before failing.
                let _ = std::fs::OpenOptions::new().write(true).open(&fifo);
            }
            let got = got.unwrap_or_else(|| panic!("{name} as a FIFO blocked the snapshot"));
            assert!(got.is_err(), "{name} as a FIFO: {got:?}");
        }
    }

    #[test]
    fn an_index_linked_to_a_device_is_refused_not_read_without_end() {
        let d = tempfile::tempdir().unwrap();
        let gd = bare_layout(d.path());
        std::os::unix::fs::symlink("/dev/zero", gd.join("index")).unwrap();
        let repo = d.path().to_path_buf();
        let got = within(move || snapshot(&repo).map(|s| s.entries.len()));
        assert!(got.expect("reading /dev/zero did not end").is_err());
    }

    #[test]
    fn an_index_larger_than_the_cap_is_refused_before_it_is_read() {
        let d = tempfile::tempdir().unwrap();
        let gd = bare_layout(d.path());
        let f = std::fs::File::create(gd.join("index")).unwrap();
        f.set_len((512 << 20) + 1).unwrap();
        let e = snapshot(d.path()).unwrap_err();
        assert!(e.to_string().contains("larger than"), "{e}");
    }

    /// Only "not found" means absent: a commondir, packed-refs or loose ref that exists
    /// but cannot be read must not make the branch look unborn (a constant fingerprint).
    #[test]
    fn unreadable_refs_are_errors_not_absent() {
        for name in ["commondir", "packed-refs"] {
            let d = tempfile::tempdir().unwrap();
            let gd = bare_layout(d.path());
            std::fs::create_dir(gd.join(name)).unwrap();
            let got = head(&gd);
            assert!(got.is_err(), "{name} as a folder: {got:?}");
        }
        let d = tempfile::tempdir().unwrap();
        let gd = bare_layout(d.path());
        let sock = std::os::unix::net::UnixListener::bind(gd.join("refs/heads/main")).unwrap();
        let got = head(&gd);
        assert!(got.is_err(), "a loose ref that is a socket: {got:?}");
        drop(sock);
        // A folder where a loose ref would be is git's own layout for `main/x`: absent.
        std::fs::remove_file(gd.join("refs/heads/main")).unwrap();
        std::fs::create_dir(gd.join("refs/heads/main")).unwrap();
        assert_eq!(head(&gd).unwrap(), "ref:refs/heads/main");
    }

    /// The layouts real git writes: a linked worktree (`.git` file), packed refs, a
    /// detached HEAD, a branch that does not exist; stat refreshes are not drift, a
    /// staged content change is.
    #[test]
    fn real_repositories() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().join("r");
        std::fs::create_dir(&r).unwrap();
        git(&r, &["init", "-q"]);
        std::fs::write(r.join("a.txt"), "one").unwrap();
        git(&r, &["add", "a.txt"]);
        git(&r, &["commit", "-qm", "one"]);
        let c1 = git(&r, &["rev-parse", "HEAD"]);
        let s1 = snapshot(&r).unwrap();
        assert_eq!(s1.head, c1);
        assert_eq!(s1.entries.len(), 1);

        // Stat-only refresh: same snapshot. Same size, new content, staged: drift.
        let mtime = std::fs::metadata(r.join("a.txt"))
            .unwrap()
            .modified()
            .unwrap();
        std::fs::write(r.join("a.txt"), "two").unwrap();
        std::fs::write(r.join("a.txt"), "one").unwrap();
        git(&r, &["update-index", "--refresh"]);
        assert_eq!(snapshot(&r).unwrap(), s1);
        std::fs::write(r.join("a.txt"), "two").unwrap();
        let f = std::fs::File::options()
            .write(true)
            .open(r.join("a.txt"))
            .unwrap();
        f.set_modified(mtime).unwrap();
        git(&r, &["add", "a.txt"]);
        let s2 = snapshot(&r).unwrap();
        assert_eq!(s2.head, c1);
        assert_ne!(s2.entries, s1.entries);

        // Packed refs only.
        git(&r, &["pack-refs", "--all"]);
        assert!(!r.join(".git/refs/heads/main").exists());
        assert_eq!(snapshot(&r).unwrap(), s2);

        // Detached HEAD, and a HEAD naming a missing branch (unborn).
        git(&r, &["checkout", "-q", "--detach"]);
        assert_eq!(snapshot(&r).unwrap().head, c1);
        git(&r, &["symbolic-ref", "HEAD", "refs/heads/nope"]);
        assert_eq!(snapshot(&r).unwrap().head, "ref:refs/heads/nope");
        git(&r, &["symbolic-ref", "HEAD", "refs/heads/main"]);

        // A linked worktree: `.git` is a `gitdir:` file; HEAD and the branch resolve
        // through commondir; its index is its own.
        git(&r, &["worktree", "add", "-q", "-b", "side", "../w"]);
        let w = d.path().join("w");
        assert!(w.join(".git").is_file());
        let sw = snapshot(&w).unwrap();
        assert_eq!(sw.head, c1);
        std::fs::write(w.join("b.txt"), "b").unwrap();
        git(&w, &["add", "b.txt"]);
        assert_eq!(snapshot(&w).unwrap().entries.len(), 2);
        git(&w, &["commit", "-qm", "b"]);
        assert_ne!(snapshot(&w).unwrap().head, c1);
        assert_eq!(snapshot(&r).unwrap().head, c1);
    }

    /// A v4 entry: strip `strip` bytes of the previous name, append `suffix`.
    fn entry_v4(strip: u8, suffix: &[u8]) -> Vec<u8> {
        let mut e = vec![0; 24];
        e.extend_from_slice(&0o100644u32.to_be_bytes());
        e.extend_from_slice(&[0; 12]);
        e.extend_from_slice(&[7; 20]);
        e.extend_from_slice(&0xfffu16.to_be_bytes());
        e.push(strip);
        e.extend_from_slice(suffix);
        e.push(0);
        e
    }

    /// v4 names are decoded from the previous one: 64 bytes on disk can each add a
    /// byte to a name that is copied whole every time (quadratic memory). A name
    /// longer than PATH_MAX, or names adding up to far more than the file, are refused.
    #[test]
    fn v4_names_cannot_grow_past_the_caps() {
        let mut es = vec![entry_v4(0, &[b'a'; 4000])];
        es.extend((0..2).map(|_| entry_v4(0, &[b'a'; 50])));
        let r = parse_index(&index(4, &es));
        assert_eq!(r, Err(IndexError::NameTooLong), "a 4100-byte name");

        let mut es = vec![entry_v4(0, &[b'd'; 4000])];
        es.extend((0..2000).map(|_| entry_v4(1, b"x")));
        let b = index(4, &es);
        let r = parse_index(&b);
        assert_eq!(
            r,
            Err(IndexError::NamesTooLarge),
            "{} bytes to 8 MB",
            b.len()
        );

        // Ordinary prefix sharing is fine.
        let es: Vec<_> = (0..2000u32)
            .map(|i| entry_v4(if i == 0 { 0 } else { 4 }, format!("{i:04}").as_bytes()))
            .collect();
        let mut es = es;
        es[0] = entry_v4(0, b"some/deep/folder/0000");
        assert_eq!(parse_index(&index(4, &es)).unwrap().len(), 2000);
    }

    /// An index with the given extensions (signature, data) between its entries and
    /// its checksum.
    fn with_extensions(exts: &[(&[u8; 4], &[u8])]) -> Vec<u8> {
        let mut b = index(2, &[entry_v2("a", 0o100644, 1, 0)]);
        b.truncate(b.len() - 20);
        for (sig, data) in exts {
            b.extend_from_slice(*sig);
            b.extend_from_slice(&(data.len() as u32).to_be_bytes());
            b.extend_from_slice(data);
        }
        b.extend_from_slice(&[0; 20]);
        b
    }

    /// Git must understand an extension whose signature does not start with A-Z
    /// ("link": split index, whose entries and deletions live outside this file).
    #[test]
    fn mandatory_extensions_that_are_not_understood_are_refused() {
        for sig in [b"link", b"abcd"] {
            let r = parse_index(&with_extensions(&[(b"TREE", b"xx"), (sig, b"data")]));
            assert_eq!(r, Err(IndexError::Extension(*sig)));
        }
        // Optional ones (A-Z) are skipped; `sdir` only marks sparse folder entries,
        // which are read (and bound) like any entry.
        for sig in [b"TREE", b"ZZZZ", b"sdir"] {
            assert_eq!(
                parse_index(&with_extensions(&[(sig, b"some data")]))
                    .unwrap()
                    .len(),
                1
            );
        }
        // An extension running past the checksum.
        let mut b = with_extensions(&[(b"TREE", b"xx")]);
        let at = b.len() - 20 - 2 - 4;
        b[at..at + 4].copy_from_slice(&1000u32.to_be_bytes());
        assert_eq!(parse_index(&b), Err(IndexError::Truncated));
        // No room for the checksum.
        let b = with_extensions(&[]);
        assert_eq!(parse_index(&b[..b.len() - 1]), Err(IndexError::Truncated));
    }

    /// With a split index, `git rm --cached` is recorded in the `link` extension's
    /// deletion bitmap and the shared entries are in `sharedindex.*`: reading only the
    /// entries of `.git/index` bound none of that.
    #[test]
    fn a_split_index_is_refused() {
        let d = tempfile::tempdir().unwrap();
        git(d.path(), &["init", "-q"]);
        for f in ["a.txt", "b.txt"] {
            std::fs::write(d.path().join(f), f).unwrap();
        }
        git(d.path(), &["add", "."]);
        git(d.path(), &["update-index", "--split-index"]);
        let before = snapshot(d.path()).map(|s| s.entries);
        git(d.path(), &["rm", "-q", "--cached", "a.txt"]);
        let after = snapshot(d.path()).map(|s| s.entries);
        assert!(
            matches!(&after, Err(GitError::BadIndex { why: IndexError::Extension(e), .. }) if e == b"link"),
            "{after:?}"
        );
        assert!(
            before.is_err() && after.is_err(),
            "split index read as {before:?} then {after:?}"
        );
    }

    /// A SHA-256 repository's index has 32-byte object ids: read with SHA-1 offsets,
    /// 12 bytes of each id are skipped and the flags, names and padding come from the
    /// wrong bytes. Such a repository is refused, whatever its entries happen to parse as.
    #[test]
    fn a_sha256_repository_is_refused() {
        let d = tempfile::tempdir().unwrap();
        git(d.path(), &["init", "-q", "--object-format=sha256"]);
        let mut seen = Vec::new();
        for i in 0..8 {
            std::fs::write(d.path().join(format!("f{i}")), format!("{i}")).unwrap();
            git(d.path(), &["add", "."]);
            for v in ["2", "3", "4"] {
                git(d.path(), &["update-index", "--index-version", v]);
                let r = snapshot(d.path());
                assert!(r.is_err(), "{i} files, version {v}, read as {r:?}");
                seen.push(r.unwrap_err().to_string());
            }
        }
        assert!(seen.iter().all(|e| e.contains("sha256")), "{seen:?}");
    }

    #[test]
    fn names_that_are_not_utf8_are_told_apart() {
        let mut a = entry_v2("x", 0o100644, 1, 0);
        let mut b = a.clone();
        a[62] = 0xff;
        b[62] = 0xfe;
        assert_ne!(parse_index(&index(2, &[a])), parse_index(&index(2, &[b])));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert_eq!(
            parse_index(b"DIRC\0\0\0\x02\0\0\0\x05"),
            Err(IndexError::Truncated)
        );
        assert_eq!(parse_index(b"nope"), Err(IndexError::Signature));
        assert_eq!(
            parse_index(b"DIRC\0\0\0\x09\0\0\0\x00"),
            Err(IndexError::Version(9))
        );
        let mut t = index(2, &[entry_v2("a", 0o100644, 1, 0)]);
        t.truncate(40);
        assert_eq!(parse_index(&t), Err(IndexError::Truncated));
    }
}
