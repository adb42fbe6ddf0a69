//! Where a path argument leads: resolved under the vault root, names matched under
//! Unicode NFC as the server does, symlinks followed to where a write would land.

use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};

use unicode_normalization::UnicodeNormalization;

use super::{Policy, PolicyError};

/// Why a path argument's names cannot be matched to the entries the server would touch.
#[derive(Debug, thiserror::Error)]
pub enum NameError {
    /// Several entries of one folder are the same name under Unicode NFC.
    #[error(
        "{name:?} is ambiguous in {}: several entries are the same name under Unicode \
         normalization ({}); use the exact name",
        folder.display(),
        entries.join(", ")
    )]
    Ambiguous {
        name: OsString,
        /// The folder, relative to the vault root.
        folder: PathBuf,
        entries: Vec<String>,
    },
}

/// The path starts with `~` (`~` or `~user`), which server-filesystem expands.
fn from_home(p: &Path) -> bool {
    p.components().next().is_some_and(
        |c| matches!(c, Component::Normal(n) if n.as_encoded_bytes().starts_with(b"~")),
    )
}

fn nfc(s: &OsStr) -> Option<String> {
    s.to_str().map(|s| s.nfc().collect())
}

impl Policy {
    /// Resolves one path argument under the root: relative → root-joined; `..`, absolute
    /// elsewhere or a symlink out of the root is refused.
    pub fn resolve(&self, arg: &str, raw: &str) -> Result<PathBuf, PolicyError> {
        let bad = |why: String| PolicyError::InvalidInput {
            arg: arg.into(),
            why,
        };
        if raw.contains('\0') {
            return Err(bad("contains a NUL byte".into()));
        }
        let p = Path::new(raw);
        // server-filesystem expands a leading `~`; judging `<root>/~/x` instead would
        // gate, ACL-check and fingerprint a path the server never touches.
        if from_home(p) {
            return Err(bad(format!(
                "{raw:?} starts with `~`: tc does not expand home directories; give the path \
                 relative to the vault root (or absolute under it)"
            )));
        }
        if p.components().any(|c| c == Component::ParentDir) {
            return Err(bad(format!(
                "{raw:?} contains `..`; paths must stay under the vault root"
            )));
        }
        let joined = if p.is_absolute() {
            p.to_path_buf()
        } else if self.root.as_os_str().is_empty() {
            // No local root (a remote vault): only an absolute local path means anything.
            return Err(bad(format!(
                "{raw:?} is not an absolute path, and this vault has no local root"
            )));
        } else {
            self.root.join(p)
        };
        let norm: PathBuf = joined
            .components()
            .filter(|c| *c != Component::CurDir)
            .collect();
        let under_root = norm.starts_with(&self.root) || norm.starts_with(&self.canon_root);
        if !under_root {
            return Err(bad(format!(
                "{raw:?} is outside the vault root {}",
                self.root.display()
            )));
        }
        let norm = self.real_names(norm).map_err(|why| PolicyError::Name {
            arg: arg.into(),
            why,
        })?;
        // Symlinks: the longest existing ancestor must canonicalize under the root.
        match real_path(&norm) {
            Some(real) if !real.starts_with(&self.canon_root) => {
                return Err(bad(format!(
                    "{raw:?} leaves the vault root through a symlink"
                )))
            }
            Some(_) => {}
            None => return Err(bad(format!("{raw:?} goes through a symlink loop"))),
        }
        Ok(norm)
    }

    /// Replaces each name that does not exist byte-for-byte by the one existing entry of
    /// its folder equal to it under Unicode NFC, as server-filesystem does: otherwise
    /// the NFD spelling of an existing file would be judged new. Several → ambiguous.
    fn real_names(&self, norm: PathBuf) -> Result<PathBuf, NameError> {
        let base = if norm.starts_with(&self.root) {
            &self.root
        } else {
            &self.canon_root
        };
        let Ok(rest) = norm.strip_prefix(base) else {
            return Ok(norm);
        };
        let mut out = base.clone();
        let mut comps = rest.components();
        for c in comps.by_ref() {
            let name = c.as_os_str();
            let direct = out.join(name);
            if std::fs::symlink_metadata(&direct).is_ok() {
                out = direct;
                continue;
            }
            let Some(want) = nfc(name) else {
                out = direct;
                break;
            };
            let found: Vec<_> = match std::fs::read_dir(&out) {
                Ok(entries) => entries
                    .filter_map(|e| e.ok().map(|e| e.file_name()))
                    .filter(|n| nfc(n).as_deref() == Some(want.as_str()))
                    .collect(),
                Err(_) => Vec::new(),
            };
            match found.as_slice() {
                [one] => out.push(one),
                [] => {
                    out = direct;
                    break;
                }
                many => {
                    return Err(NameError::Ambiguous {
                        name: name.to_os_string(),
                        folder: self.relative(&out).to_path_buf(),
                        entries: many.iter().map(|n| n.to_string_lossy().into()).collect(),
                    });
                }
            }
        }
        out.extend(comps);
        Ok(out)
    }

    /// The root `p` is written under (as configured, or canonical).
    pub fn base_of(&self, p: &Path) -> &Path {
        if p.starts_with(&self.root) {
            &self.root
        } else {
            &self.canon_root
        }
    }

    /// The path relative to the root (for ACL globs and fingerprints).
    pub fn relative<'a>(&self, p: &'a Path) -> &'a Path {
        p.strip_prefix(&self.root)
            .or_else(|_| p.strip_prefix(&self.canon_root))
            .unwrap_or(p)
    }

    /// Where a path under the root really leads, relative to the root (as written when
    /// that cannot be known).
    pub(in crate::engine) fn real_relative(&self, p: &Path) -> PathBuf {
        real_path(p)
            .and_then(|r| r.strip_prefix(&self.canon_root).ok().map(Path::to_path_buf))
            .unwrap_or_else(|| self.relative(p).to_path_buf())
    }
}

/// Where a path really leads: its longest existing ancestor canonicalized, plus the
/// rest as written. A dangling symlink on the way is followed too (a write through it
/// creates its target). None: nothing of it exists, not even `/`, or symlinks loop.
pub(super) fn real_path(p: &Path) -> Option<PathBuf> {
    real_path_hops(p, 0)
}

fn real_path_hops(p: &Path, hops: u32) -> Option<PathBuf> {
    if hops > 40 {
        return None;
    }
    let mut probe = p;
    loop {
        if let Ok(c) = std::fs::canonicalize(probe) {
            return Some(match p.strip_prefix(probe) {
                Ok(rest) if !rest.as_os_str().is_empty() => c.join(rest),
                _ => c,
            });
        }
        // canonicalize fails on a symlink whose target does not exist yet.
        if let Ok(target) = std::fs::read_link(probe) {
            let base = probe.parent().unwrap_or(Path::new("/"));
            let mut next = walked(base, &target);
            if let Ok(rest) = p.strip_prefix(probe) {
                if !rest.as_os_str().is_empty() {
                    next = walked(&next, rest);
                }
            }
            return real_path_hops(&next, hops + 1);
        }
        probe = probe.parent()?;
    }
}

/// `base` joined with `rel` as the kernel walks it: a `..` steps out of where the path so
/// far really leads (through any symlink on it), not out of its text, so a link to
/// `sub/../../x` where `sub` → `d1/d2` leads to `d1/x`, not to `../x`. Where the path so
/// far does not exist, `..` is applied to the text (as [`lexical`]); `.` is dropped.
fn walked(base: &Path, rel: &Path) -> PathBuf {
    let mut out = lexical(base);
    for c in rel.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if let Ok(real) = std::fs::canonicalize(&out) {
                    out = real;
                }
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// `p` with `.` dropped and `..` applied to the part before it, as a server's
/// `path.resolve` reads a path that does not exist yet.
pub(super) fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}
