//! The daemon's domain errors and their single mapping to `tonic::Status`.
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
    Store(#[from] crate::store::StoreError),
    /// Filesystem or other I/O failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// A background task died.
    #[error("internal: {0}")]
    Internal(String),
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
fn unreachable(e: &crate::store::StoreError) -> bool {
    use crate::store::StoreError;
    match e {
        StoreError::Unavailable(_) => true,
        StoreError::Postgres(p) => p.is_closed() || p.as_db_error().is_none(),
        _ => false,
    }
}

/// A blob that does not open is `invalid`, whatever the cause (`seal.rs`).
impl From<crate::seal::SealError> for DaemonError {
    fn from(e: crate::seal::SealError) -> Self {
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
            DaemonError::Store(crate::store::StoreError::Sqlite(
                rusqlite::Error::SqliteFailure(f, _),
            )) if matches!(
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
    use crate::seal::SealError;

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
