//! The guarded-mode second factor: one TOTP secret per human (RFC 6238), checked inside
//! the transaction of the approval it authorises, with failures, lockout and replays.
//!
//! - [`check`]: the gate every approval passes (Mint, Approve) in guarded mode.
//! - [`enroll`], [`confirm`], [`unlock`]: root's side (`tcctl enroll totp`, `tcctl unlock`).
//! - [`human_uid`]: who a `--user` names, and whether they are one of `[guarded] humans`.
//!
//! Events carry the uid and counts, never a code or the secret.

pub mod totp;

use rand::RngCore;
use serde_json::json;
use tc_core::codes::events;
use tc_core::Reason;

use crate::error::DaemonError;
use crate::record::NewEvent;
use crate::store::queries::{FactorRow as Row, Tx, Written};
use totp::Match;

/// Who approves (Mint, Approve): the peer's uid and, in guarded mode, the code they typed.
#[derive(Debug, Clone, Default)]
pub struct Approver {
    pub uid: u32,
    pub code: Option<String>,
}

/// Wrong codes in a row that lock a factor until root unlocks it.
pub const LOCK_AFTER: u32 = 10;
/// The delay after the first wrong code; it doubles with each further one, up to
/// [`MAX_DELAY_MS`]. Nine delays before the lock add up to 6.5 s: a human retyping is
/// never slowed, guessing in parallel gains nothing (a try inside the delay is not even
/// evaluated).
pub const FIRST_DELAY_MS: i64 = 100;
pub const MAX_DELAY_MS: i64 = 1_000;

/// The delay after the `failures`-th wrong code in a row.
pub fn delay_ms(failures: u32) -> i64 {
    let doublings = failures.saturating_sub(1).min(20);
    (FIRST_DELAY_MS << doublings).min(MAX_DELAY_MS)
}

/// A factor event, owned by the uid its detail names (the human sees their own).
fn event(kind: &'static str, detail: serde_json::Value) -> NewEvent {
    let owner = detail
        .get("uid")
        .and_then(serde_json::Value::as_u64)
        .and_then(|u| u32::try_from(u).ok());
    NewEvent {
        kind,
        detail,
        owner,
        ..Default::default()
    }
}

fn not_enrolled(uid: u32) -> DaemonError {
    DaemonError::refused(
        Reason::NotEnrolled,
        format!(
            "uid {uid} has no confirmed factor; root enrolls one with \
             `sudo tcctl enroll totp --user NAME`"
        ),
    )
}

/// Checks `code` for the human `uid` inside the caller's write (`Store::write`), so the
/// accepted step is recorded in the same commit as the approval it authorises. `Ok(Err)`
/// refuses *and commits* (a failure is counted even though nothing is approved).
pub fn check(
    tx: &dyn Tx,
    evs: &mut Vec<NewEvent>,
    uid: u32,
    code: Option<&str>,
    now_ms: i64,
) -> Written<()> {
    let Some(code) = code.filter(|c| !c.is_empty()) else {
        return Ok(Err(DaemonError::refused(
            Reason::FactorRequired,
            "guarded mode: an approval needs your code (tcctl reads it from your terminal)",
        )));
    };
    let Some(mut row) = tx.load_factor(uid, true)?.filter(|r| r.confirmed) else {
        return Ok(Err(not_enrolled(uid)));
    };
    Ok(attempt(tx, evs, uid, &mut row, code, now_ms)?.map(|_| ()))
}

/// One try of `code` against `row`: the lock and the delay first (neither evaluates the
/// code), then the window; records the outcome in `row` and in the table. Returns the
/// accepted step.
fn attempt(
    tx: &dyn Tx,
    evs: &mut Vec<NewEvent>,
    uid: u32,
    row: &mut Row,
    code: &str,
    now_ms: i64,
) -> Written<i64> {
    if row.locked {
        return Ok(Err(locked(uid)));
    }
    if now_ms < row.next_try_at {
        return Ok(Err(DaemonError::refused(
            Reason::FactorDelay,
            format!(
                "a wrong code was entered moments ago: the code was not checked; try again in {} ms",
                row.next_try_at - now_ms
            ),
        )));
    }
    let outcome = if totp::well_formed(code) {
        totp::check(&row.secret, code, now_ms, row.last_step)
    } else {
        Match::No
    };
    let refusal = match outcome {
        Match::Fresh(step) => {
            row.last_step = step;
            row.failures = 0;
            row.next_try_at = 0;
            tx.save_factor(uid, row)?;
            return Ok(Ok(step));
        }
        // Counted like a wrong code: a replay flood locks, and never fills the log.
        Match::Used => {
            evs.push(event(events::FACTOR_REPLAYED, json!({ "uid": uid })));
            DaemonError::refused(
                Reason::FactorReplayed,
                "this code was already used: wait for the next one (a reused code is logged as \
                 an alarm: it may have been read over your shoulder)",
            )
        }
        Match::No => DaemonError::refused(
            Reason::FactorInvalid,
            format!(
                "wrong code ({} of {LOCK_AFTER} in a row before the factor locks)",
                row.failures + 1
            ),
        ),
    };
    row.failures += 1;
    evs.push(event(
        events::FACTOR_FAILED,
        json!({ "uid": uid, "failures": row.failures, "replayed": outcome == Match::Used }),
    ));
    let refusal = if row.failures >= LOCK_AFTER {
        row.locked = true;
        evs.push(event(
            events::FACTOR_LOCKED,
            json!({ "uid": uid, "failures": row.failures }),
        ));
        locked(uid)
    } else {
        row.next_try_at = now_ms + delay_ms(row.failures);
        refusal
    };
    tx.save_factor(uid, row)?;
    Ok(Err(refusal))
}

fn locked(uid: u32) -> DaemonError {
    DaemonError::refused(
        Reason::FactorLocked,
        format!(
            "{LOCK_AFTER} wrong codes in a row: the factor of uid {uid} is locked until root runs \
             `sudo tcctl unlock --user NAME`"
        ),
    )
}

/// A fresh 160-bit secret for `uid` (replacing any earlier factor: a reset), unconfirmed
/// until [`confirm`]. Returns the `otpauth://` URI (labelled `label`) and the base32
/// secret: the only time either leaves tcd.
pub fn enroll(
    tx: &dyn Tx,
    evs: &mut Vec<NewEvent>,
    uid: u32,
    label: &str,
    now_ms: i64,
) -> Result<(String, String), DaemonError> {
    let mut secret = vec![0u8; totp::SECRET_LEN];
    rand::rngs::OsRng.fill_bytes(&mut secret);
    let replaced = tx.load_factor(uid, true)?.is_some();
    tx.save_factor(
        uid,
        &Row {
            secret: secret.clone(),
            confirmed: false,
            last_step: -1,
            failures: 0,
            next_try_at: 0,
            locked: false,
            enrolled_at: now_ms,
        },
    )?;
    evs.push(event(
        events::FACTOR_ENROLLED,
        json!({ "uid": uid, "confirmed": false, "replaced": replaced }),
    ));
    Ok((totp::otpauth_uri(label, &secret), totp::base32(&secret)))
}

/// Confirms the factor [`enroll`] generated for `uid` with a code from the human's app;
/// wrong codes count, delay and lock as in [`check`].
pub fn confirm(
    tx: &dyn Tx,
    evs: &mut Vec<NewEvent>,
    uid: u32,
    code: &str,
    now_ms: i64,
) -> Written<()> {
    let Some(mut row) = tx.load_factor(uid, true)? else {
        return Ok(Err(DaemonError::refused(
            Reason::NotEnrolled,
            format!("uid {uid} has no factor to confirm; run `sudo tcctl enroll totp` first"),
        )));
    };
    if row.confirmed {
        return Ok(Err(DaemonError::refused(
            Reason::BadArgument,
            format!("the factor of uid {uid} is already confirmed (enroll again to replace it)"),
        )));
    }
    match attempt(tx, evs, uid, &mut row, code, now_ms)? {
        Err(e) => Ok(Err(e)),
        Ok(_) => {
            row.confirmed = true;
            tx.save_factor(uid, &row)?;
            evs.push(event(
                events::FACTOR_ENROLLED,
                json!({ "uid": uid, "confirmed": true }),
            ));
            Ok(Ok(()))
        }
    }
}

/// Lifts the lock (and the failure count and delay) of `uid`'s factor.
pub fn unlock(tx: &dyn Tx, evs: &mut Vec<NewEvent>, uid: u32) -> Result<(), DaemonError> {
    let Some(mut row) = tx.load_factor(uid, true)? else {
        return Err(DaemonError::refused(
            Reason::NotEnrolled,
            format!("uid {uid} has no factor"),
        ));
    };
    let was_locked = row.locked;
    row.locked = false;
    row.failures = 0;
    row.next_try_at = 0;
    tx.save_factor(uid, &row)?;
    evs.push(event(
        events::FACTOR_UNLOCKED,
        json!({ "uid": uid, "was_locked": was_locked }),
    ));
    Ok(())
}

/// The uid a user name or number names.
fn resolve(user: &str) -> Option<u32> {
    if !user.is_empty() && user.bytes().all(|b| b.is_ascii_digit()) {
        return user.parse().ok();
    }
    let u = nix::unistd::User::from_name(user).ok().flatten()?;
    Some(u.uid.as_raw())
}

/// The uid `user` (a name or a uid) names and the name to label its factor with, if it is
/// one of `humans` (the `[guarded] humans` of the daemon's config, names or uids).
pub fn human_uid(humans: &[String], user: &str) -> Result<(u32, String), DaemonError> {
    let Some(uid) = resolve(user) else {
        return Err(DaemonError::refused(
            Reason::BadArgument,
            format!("no such user: {user:?}"),
        ));
    };
    if !humans.iter().any(|h| resolve(h) == Some(uid)) {
        return Err(DaemonError::refused(
            Reason::NotPermitted,
            format!("{user:?} (uid {uid}) is not one of the [guarded] humans of tcd's config"),
        ));
    }
    let name = nix::unistd::User::from_uid(uid.into())
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |u| u.name);
    Ok((uid, name))
}

#[cfg(test)]
mod tests;
