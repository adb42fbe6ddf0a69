//! The daemon's errors: its domain errors ([`DaemonError`]), what a store backend fails
//! with ([`StoreError`]), and their single mapping to `tonic::Status` (a leaf).
//!
//! Refusals carry a [`Reason`] in the `tc-reason` metadata; internal faults are logged
//! here and sent as a generic message so no SQL or key material reaches a client.

use tc_core::Reason;
use tonic::{Code, Status};

/// Everything a daemon operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// A domain refusal the client can act on.
    #[error("{message}")]
    Refused { reason: Reason, message: String },
    /// The store failed (disk full, read-only, corruption, connection lost).
    #[error("database: {0}")]
    Store(#[from] StoreError),
    /// Filesystem or other I/O failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// A background task died.
    #[error("internal: {0}")]
    Internal(String),
}

/// A store backend's failure (`store/`).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed (disk full, read-only, corruption).
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL refused a statement or lost the connection.
    #[error("postgresql: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    /// The database cannot be reached (the message names it).
    #[error("{0}")]
    Unavailable(String),
    /// `[daemon.postgres]` cannot be used as given.
    #[error("{0}")]
    Config(String),
    /// This replica's key is not the one the shared ledger is keyed with.
    #[error("{0}")]
    KeyMismatch(String),
}

impl DaemonError {
    /// Shorthand for a refusal.
    pub fn refused(reason: Reason, message: impl Into<String>) -> Self {
        DaemonError::Refused {
            reason,
            message: message.into(),
        }
    }
}

impl From<rusqlite::Error> for DaemonError {
    fn from(e: rusqlite::Error) -> Self {
        DaemonError::Store(e.into())
    }
}

/// Whether `e` means the database cannot be reached now (retry later), as opposed to a
/// fault; the message names the store, never SQL or key material.
fn unreachable(e: &StoreError) -> bool {
    match e {
        StoreError::Unavailable(_) => true,
        StoreError::Postgres(p) => p.is_closed() || p.as_db_error().is_none(),
        _ => false,
    }
}

/// A blob that does not open is `invalid`, whatever the cause (`seal.rs`).
impl From<tc_seal::SealError> for DaemonError {
    fn from(e: tc_seal::SealError) -> Self {
        DaemonError::refused(Reason::Invalid, e.to_string())
    }
}

/// The gRPC code each refusal travels under; clients read the reason, people the code.
fn code_for(reason: Reason) -> Code {
    match reason {
        Reason::Unknown | Reason::NoRaisedRequest => Code::NotFound,
        Reason::Expired | Reason::Spent | Reason::StateFpMismatch | Reason::BindingMismatch => {
            Code::FailedPrecondition
        }
        Reason::ReplayDrift => Code::Aborted,
        Reason::Invalid | Reason::Foreign | Reason::RequestMismatch | Reason::BadArgument => {
            Code::InvalidArgument
        }
        Reason::RateLimited | Reason::FactorDelay => Code::ResourceExhausted,
        Reason::Declined
        | Reason::NotApproved
        | Reason::NotEnrolled
        | Reason::FactorLocked
        | Reason::GrantRefused
        | Reason::Revoked => Code::FailedPrecondition,
        Reason::FactorRequired | Reason::FactorInvalid | Reason::FactorReplayed => {
            Code::Unauthenticated
        }
        Reason::NotPermitted => Code::PermissionDenied,
    }
}

impl From<DaemonError> for Status {
    fn from(e: DaemonError) -> Status {
        match e {
            DaemonError::Refused { reason, message } => {
                tc_proto::refusal(code_for(reason), reason, message)
            }
            DaemonError::Store(StoreError::Sqlite(rusqlite::Error::SqliteFailure(f, _)))
                if matches!(
                    f.code,
                    rusqlite::ErrorCode::DiskFull | rusqlite::ErrorCode::ReadOnly
                ) =>
            {
                tracing::error!(error = %f, "database cannot be written");
                Status::resource_exhausted(
                    "tcd cannot write its database (disk full or read-only); nothing was recorded",
                )
            }
            DaemonError::Store(e) if unreachable(&e) => {
                tracing::error!(error = %e, "the store is unreachable");
                Status::unavailable(format!(
                    "tcd's ledger store is unreachable; nothing was recorded or spent ({e})"
                ))
            }
            other => {
                tracing::error!(error = %other, "internal error");
                Status::internal("tcd internal error (details in the daemon's log)")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tc_seal::SealError;

    #[test]
    fn every_blob_that_does_not_open_is_refused_as_invalid() {
        for e in [SealError::NotIssued, SealError::Malformed] {
            match DaemonError::from(e) {
                DaemonError::Refused { reason, .. } => assert_eq!(reason, Reason::Invalid),
                other => panic!("expected a refusal, got {other:?}"),
            }
        }
    }
}
