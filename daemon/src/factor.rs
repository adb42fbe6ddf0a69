//! The guarded-mode second factor: one TOTP secret per human (RFC 6238), checked inside
//! the transaction of the approval it authorises, with failures, lockout and replays.
//!
//! Skeleton: until the factor store exists every check fails closed.

use rusqlite::Connection;
use tc_core::Reason;

use crate::error::DaemonError;
use crate::store::NewEvent;

/// Who approves (Mint, Approve): the peer's uid and, in guarded mode, the code they typed.
#[derive(Debug, Clone, Default)]
pub struct Approver {
    pub uid: u32,
    pub code: Option<String>,
}

/// Checks `code` for the human `uid` inside the caller's write (`Store::write`), so the
/// accepted step is recorded in the same commit as the approval it authorises. `Ok(Err)`
/// refuses *and commits* (a failure is counted even though nothing is approved).
pub fn check(
    tx: &Connection,
    evs: &mut Vec<NewEvent>,
    uid: u32,
    code: Option<&str>,
    now_ms: i64,
) -> Result<Result<(), DaemonError>, DaemonError> {
    let _ = (tx, evs, uid, now_ms);
    Ok(Err(match code {
        None => DaemonError::refused(
            Reason::FactorRequired,
            "guarded mode: an approval needs your code",
        ),
        Some(_) => DaemonError::refused(Reason::NotEnrolled, "no factor is enrolled"),
    }))
}
