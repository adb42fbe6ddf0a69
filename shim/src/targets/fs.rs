//! Filesystem state for `paths`, `tree` and `matching` targets: existence, type,
//! content hashes and sorted directory listings, with a cap on how much is walked.

use std::path::Path;

use serde_json::{json, Value};
use tc_core::hash::sha256_hex;

use super::TargetError;

/// Most files a tree/matching target walks before refusing.
pub const MAX_FILES: usize = 100_000;

fn io(path: &Path, source: std::io::Error) -> TargetError {
    TargetError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Existence, type and content of one path (directories: sorted entry names with types).
pub fn path_state(p: &Path) -> Result<Value, TargetError> {
    let meta = match std::fs::metadata(p) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(json!({"kind": "missing"}))
        }
        Err(e) => return Err(io(p, e)),
    };
    if meta.is_file() {
        let bytes = std::fs::read(p).map_err(|e| io(p, e))?;
        Ok(json!({"kind": "file", "sha256": sha256_hex(&bytes), "len": bytes.len()}))
    } else if meta.is_dir() {
        let mut names = Vec::new();
        for e in std::fs::read_dir(p).map_err(|e| io(p, e))? {
            let e = e.map_err(|e| io(p, e))?;
            let kind = match e.file_type() {
                Ok(t) if t.is_dir() => "dir",
                Ok(t) if t.is_symlink() => "symlink",
                _ => "file",
            };
            names.push(format!("{}\t{kind}", e.file_name().to_string_lossy()));
        }
        names.sort();
        Ok(json!({"kind": "dir", "entries": names}))
    } else {
        Ok(json!({"kind": "other"}))
    }
}

/// Files under `dir` (relative paths, sorted) for which `keep(rel, content)` holds, with
/// content hashes, and symlinks for which `keep_link(rel)` holds, with their link text.
/// Links are never followed (they may point out of the root), but adding, removing or
/// retargeting one is part of the state.
pub fn walk(
    dir: &Path,
    keep: &dyn Fn(&str, &[u8]) -> bool,
    keep_link: &dyn Fn(&str) -> bool,
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
            if ft.is_dir() {
                stack.push(path);
                continue;
            }
            if !(ft.is_file() || ft.is_symlink()) {
                continue;
            }
            seen += 1;
            if seen > MAX_FILES {
                return Err(TargetError::TooMany(MAX_FILES));
            }
            let rel = path
                .strip_prefix(dir)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            if ft.is_symlink() {
                if keep_link(&rel) {
                    let to = std::fs::read_link(&path).map_err(|e2| io(&path, e2))?;
                    out.push(json!([rel, format!("symlink:{}", to.to_string_lossy())]));
                }
                continue;
            }
            let content = std::fs::read(&path).map_err(|e2| io(&path, e2))?;
            if keep(&rel, &content) {
                out.push(json!([rel, sha256_hex(&content)]));
            }
        }
    }
    out.sort_by(|a, b| a[0].as_str().cmp(&b[0].as_str()));
    Ok(out)
}
