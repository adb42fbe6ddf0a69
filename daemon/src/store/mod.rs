//! Storage: one seam ([`queries`]) between the ledger's rules and the backends that keep
//! its rows; the SQLite engine ([`sqlite`]) is the default.
//!
//! - [`Store`]: runs a write's rules over one transaction ([`queries::Tx`]) and commits
//!   its events with it; counts events; signals commits to `--follow` streams.
//! - [`StoreError`]: what a backend fails with (mapped once, in `error.rs`).

pub mod queries;
pub mod sqlite;

pub use crate::record::{EventRow, NewEvent};
pub use sqlite::Store;

use crate::error::DaemonError;

/// What a [`Store::write`] closure returns: outer `Err` rolls back, inner `Err` commits
/// then refuses (a drifted token is spent *and* refused).
pub type Written<T> = Result<Result<T, DaemonError>, DaemonError>;

/// A backend's failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed (disk full, read-only, corruption).
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
}
