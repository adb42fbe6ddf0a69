//! Reads a git repository's HEAD oid and staged index entries (path, mode, blob id)
//! straight from `.git`, without the `git` binary; stat data is ignored on purpose.
//! The index format is read in `index`, HEAD and refs in `refs`.

mod index;
mod refs;
#[cfg(test)]
pub(crate) mod tests;

pub use index::parse_index;
pub use refs::{git_dir, head};

use std::path::{Path, PathBuf};

use refs::{check_object_format, read_opt};

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
