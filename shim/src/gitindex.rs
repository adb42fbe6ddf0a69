//! Reads a git repository's HEAD oid and staged index entries (path, mode, blob id)
//! straight from `.git`, without the `git` binary; stat data is ignored on purpose.

use std::path::{Path, PathBuf};

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
    std::fs::read(path).map_err(|source| GitError::Io {
        path: path.to_path_buf(),
        source,
    })
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
    let loose = gd.join(name);
    if loose.is_file() {
        let text = String::from_utf8_lossy(&read(&loose)?).trim().to_string();
        if let Some(next) = text.strip_prefix("ref:") {
            if depth > 5 {
                return Ok(format!("ref:{}", next.trim()));
            }
            return resolve_ref(gd, next.trim(), depth + 1);
        }
        return Ok(text);
    }
    // Worktrees keep refs in the common dir.
    let common = match std::fs::read_to_string(gd.join("commondir")) {
        Ok(c) => gd.join(c.trim()),
        Err(_) => gd.to_path_buf(),
    };
    if common != gd && common.join(name).is_file() {
        return resolve_ref(&common, name, depth + 1);
    }
    if let Ok(packed) = std::fs::read_to_string(common.join("packed-refs")) {
        for line in packed.lines() {
            if let Some((oid, r)) = line.split_once(' ') {
                if r == name && !oid.starts_with('#') {
                    return Ok(oid.to_string());
                }
            }
        }
    }
    Ok(format!("ref:{name}"))
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
    let head = head(&gd)?;
    let index_path = gd.join("index");
    let entries = match std::fs::read(&index_path) {
        Ok(bytes) => parse_index(&bytes).map_err(|why| GitError::BadIndex {
            path: index_path.clone(),
            why,
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(source) => {
            return Err(GitError::Io {
                path: index_path,
                source,
            })
        }
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
        out.push(Entry {
            path: String::from_utf8_lossy(&name).into_owned(),
            mode,
            oid: hex::encode(oid),
            stage,
        });
        prev = name;
    }
    out.sort_by(|a, b| (&a.path, a.stage).cmp(&(&b.path, b.stage)));
    Ok(out)
}

#[cfg(test)]
mod tests {
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
