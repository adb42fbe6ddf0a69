//! The token and secret files push targets name: read once at start, refused unless
//! they are regular files owned by tcd's user that no one else may read.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Why a target's token or secret file cannot be used. Never holds the file's content.
#[derive(Debug, thiserror::Error)]
#[error("{key} {path}: {why}")]
pub struct FileError {
    /// The config key, e.g. `notify.webhook "hook" secret_file`.
    pub key: String,
    pub path: PathBuf,
    pub why: String,
}

/// The longest token or secret file read (a token is a line, not a document).
const MAX_LEN: u64 = 4096;

/// The first line of `path`, trimmed, checked like tcd's other secret files: a regular
/// file (not a symlink), owned by tcd's effective user, with no group or other bits.
pub fn read_private(key: &str, path: &Path) -> Result<String, FileError> {
    let err = |why: String| FileError {
        key: key.to_string(),
        path: path.to_path_buf(),
        why,
    };
    let meta = std::fs::symlink_metadata(path).map_err(|e| err(e.to_string()))?;
    if !meta.file_type().is_file() {
        return Err(err(
            "is not a regular file (a symlink is refused too)".into()
        ));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(err(format!(
            "is owned by uid {}, not by tcd's user (uid {me}): chown it",
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(err(format!(
            "mode {:04o} lets group or others read it: chmod 600",
            meta.mode() & 0o7777
        )));
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_LEN).read_to_string(&mut text))
        .map_err(|e| err(e.to_string()))?;
    let line = text.lines().next().unwrap_or("").trim().to_string();
    if line.is_empty() {
        return Err(err("is empty: its first line is the value".into()));
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn only_a_private_file_of_ours_is_read_and_its_content_is_never_in_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("token");
        std::fs::write(&f, "tk_s3cr3t\nignored\n").unwrap();
        let set = |m| std::fs::set_permissions(&f, std::fs::Permissions::from_mode(m)).unwrap();
        set(0o644);
        let e = read_private("k", &f).unwrap_err().to_string();
        assert!(e.contains("chmod 600") && !e.contains("s3cr3t"), "{e}");
        set(0o600);
        assert_eq!(read_private("k", &f).unwrap(), "tk_s3cr3t");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert!(read_private("k", &link)
            .unwrap_err()
            .to_string()
            .contains("symlink"));
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(read_private("k", &empty)
            .unwrap_err()
            .to_string()
            .contains("empty"));
        let missing = read_private("notify.x", &dir.path().join("nope")).unwrap_err();
        assert!(missing.to_string().starts_with("notify.x "), "{missing}");
    }
}
