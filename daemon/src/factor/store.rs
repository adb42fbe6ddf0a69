//! The `factors` table: one row per human (uid) with their TOTP secret and the state of
//! its checks (last accepted step, consecutive failures, delay, lock).

use rusqlite::{params, Connection, OptionalExtension};

use crate::error::DaemonError;

/// One human's factor as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub secret: Vec<u8>,
    pub confirmed: bool,
    /// The last time step accepted (−1: none yet); only later steps are accepted.
    pub last_step: i64,
    /// Wrong (or replayed) codes since the last accepted one.
    pub failures: u32,
    /// No code is evaluated before this instant (ms since the epoch).
    pub next_try_at: i64,
    pub locked: bool,
    pub enrolled_at: i64,
}

/// The factor of `uid`, if one was enrolled.
pub fn load(tx: &Connection, uid: u32) -> Result<Option<Row>, DaemonError> {
    Ok(tx
        .prepare_cached(
            "SELECT secret, confirmed, last_step, failures, next_try_at, locked, enrolled_at
             FROM factors WHERE uid = ?1",
        )?
        .query_row(params![uid], |r| {
            Ok(Row {
                secret: r.get(0)?,
                confirmed: r.get(1)?,
                last_step: r.get(2)?,
                failures: r.get(3)?,
                next_try_at: r.get(4)?,
                locked: r.get(5)?,
                enrolled_at: r.get(6)?,
            })
        })
        .optional()?)
}

/// Writes `row` as the factor of `uid`, replacing any earlier one.
pub fn save(tx: &Connection, uid: u32, row: &Row) -> Result<(), DaemonError> {
    tx.prepare_cached(
        "INSERT OR REPLACE INTO factors
           (uid, secret, confirmed, last_step, failures, next_try_at, locked, enrolled_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        uid,
        row.secret,
        row.confirmed,
        row.last_step,
        row.failures,
        row.next_try_at,
        row.locked,
        row.enrolled_at
    ])?;
    Ok(())
}
