//! HEAD and refs of a git dir (loose, packed, through a worktree's common dir), each
//! file read only if it is a regular file under the size cap.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::{GitError, MAX_READ};
use crate::vault::regular;

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
pub(super) fn read_opt(path: &Path) -> Result<Option<Vec<u8>>, GitError> {
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
pub(super) fn check_object_format(gd: &Path) -> Result<(), GitError> {
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
