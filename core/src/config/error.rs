//! Why a configuration could not be used: [`ConfigError`], and every rule a parsed
//! file breaks ([`Problems`]), each at its key and in its vault and gate.

use std::fmt;
use std::path::PathBuf;

use crate::paths::PathError;

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// TOML syntax, wrong type, or unknown key (the message names the key).
    #[error("invalid config {path}: {message}")]
    Parse { path: PathBuf, message: String },
    /// Parsed, but values break rules: every one found, not only the first, so one edit
    /// can fix them all.
    #[error("invalid config {path}: {problems}")]
    Invalid { path: PathBuf, problems: Problems },
    /// An explicitly named config file does not exist.
    #[error("config file {path} does not exist (named by {by})")]
    Missing { path: PathBuf, by: &'static str },
    /// No default location could be derived.
    #[error(transparent)]
    Path(#[from] PathError),
}

/// The rules a parsed file breaks, in file order (never empty in a
/// [`ConfigError::Invalid`]). Shown on one line when there is one, else one per line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Problems(pub Vec<Problem>);

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "{one}"),
            many => {
                write!(f, "{} problems:", many.len())?;
                many.iter().try_for_each(|p| write!(f, "\n  {p}"))
            }
        }
    }
}

/// One broken rule: the key (`vaults[0].gates[1].targets`), the vault and gate it is in by
/// id and tool (what a person looks for in the file), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub key: String,
    /// The `id` of the `[[vaults]]` table the key is in.
    pub vault: Option<String>,
    /// The `tool` of the `[[vaults.gates]]` table the key is in.
    pub tool: Option<String>,
    pub reason: String,
}

impl fmt::Display for Problem {
    /// `key (vault "id", gate "tool"): reason`. The id and tool are quoted as Rust
    /// strings, so a control character in the file cannot rewrite the terminal.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.key)?;
        match (&self.vault, &self.tool) {
            (Some(v), Some(t)) => write!(f, " (vault {v:?}, gate {t:?})")?,
            (Some(v), None) => write!(f, " (vault {v:?})")?,
            (None, Some(t)) => write!(f, " (gate {t:?})")?,
            (None, None) => {}
        }
        write!(f, ": {}", self.reason)
    }
}
