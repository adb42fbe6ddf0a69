//! Retention of the audit log: events older than `events_max_age_days`, or beyond
//! `events_max_bytes`, are pruned oldest first in bounded batches on the store thread.
//!
//! - [`Retention`]: the policy; [`prune_batch`]: one batch (one savepoint of a group);
//!   [`prune`]: batches until nothing more is due, counted and logged.
//! - Only events are pruned: raised requests, tokens and consumed states (what a pending
//!   confirmation or a single-use check needs) have their own collection in the ledger,
//!   and nothing in them is derived from events.

use rusqlite::{params, Connection};

use crate::error::DaemonError;
use crate::ledger::Ledger;

/// Fixed bytes counted per event on top of its fields (rowid, timestamp, record header).
pub const ROW_OVERHEAD: u64 = 64;

/// The SQL expression of one event's size as retention counts it: the UTF-8 bytes of its
/// fields plus [`ROW_OVERHEAD`] (`store.rs` counts inserts the same way).
pub const EVENT_BYTES: &str = "(length(CAST(kind AS BLOB)) + length(CAST(vault AS BLOB))
    + length(CAST(tool AS BLOB)) + length(CAST(caller AS BLOB))
    + length(CAST(args_hash AS BLOB)) + length(CAST(state_fp AS BLOB))
    + length(CAST(detail AS BLOB)) + 64)";

/// At most this many events are deleted per batch (one savepoint, a few ms): a redeem
/// queued behind a batch waits for that little, never for the whole prune.
pub const BATCH: usize = 500;

/// How much the log may outgrow `max_bytes` before a commit wakes the collector early
/// (an eighth), so a flood is pruned within seconds, not at the next minute's tick.
pub fn wake_threshold(max_bytes: u64) -> u64 {
    max_bytes.saturating_add(max_bytes / 8)
}

/// The retention policy (`[daemon] events_max_age_days`, `events_max_bytes`).
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    pub max_age_ms: i64,
    pub max_bytes: u64,
}

impl Retention {
    pub fn from_config(d: &tc_core::config::DaemonConfig) -> Retention {
        Retention {
            max_age_ms: i64::from(d.events_max_age_days) * 86_400_000,
            max_bytes: d.events_max_bytes,
        }
    }
}

/// The counter key of events pruned for `reason` (`age` or `size`).
pub fn pruned_key(reason: &str) -> (String, String) {
    (
        "tc_events_pruned_total".into(),
        format!("reason=\"{reason}\""),
    )
}

/// What one batch (or a whole prune) deleted.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Pruned {
    pub age: u64,
    pub size: u64,
    pub bytes: u64,
    /// The batch was full: more may be due.
    pub more: bool,
}

impl Pruned {
    pub fn rows(&self) -> u64 {
        self.age + self.size
    }

    fn by_reason(&self) -> [(&'static str, u64); 2] {
        [("age", self.age), ("size", self.size)]
    }
}

/// Deletes, oldest first, at most [`BATCH`] events that are older than the age limit or
/// beyond the size cap (with `live_bytes` of events now), and adds them to
/// `events_pruned`. The newest event is never deleted: ids are `max(id) + 1`, so a
/// deleted newest row would hand its id out again (and `Status.events`, the number of
/// events ever written, would go back).
pub fn prune_batch(
    conn: &Connection,
    now_ms: i64,
    policy: Retention,
    live_bytes: u64,
) -> Result<Pruned, rusqlite::Error> {
    let cutoff = now_ms.saturating_sub(policy.max_age_ms);
    let mut st = conn.prepare_cached(&format!(
        "SELECT id, at_ms, kind, {EVENT_BYTES} FROM events
         WHERE id < (SELECT max(id) FROM events) ORDER BY id LIMIT ?1"
    ))?;
    let rows = st.query_map(params![BATCH as i64], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, i64>(3)?,
        ))
    })?;
    let mut out = Pruned::default();
    let mut last = None;
    let mut kinds: Vec<(String, &'static str)> = Vec::new();
    for row in rows {
        let (id, at_ms, kind, bytes) = row?;
        let reason = if at_ms < cutoff {
            "age"
        } else if live_bytes.saturating_sub(out.bytes) > policy.max_bytes {
            "size"
        } else {
            break;
        };
        if reason == "age" {
            out.age += 1;
        } else {
            out.size += 1;
        }
        out.bytes += bytes as u64;
        last = Some(id);
        kinds.push((kind, reason));
    }
    let Some(last) = last else {
        return Ok(out);
    };
    conn.prepare_cached("DELETE FROM events WHERE id <= ?1")?
        .execute(params![last])?;
    let mut add = conn.prepare_cached(
        "INSERT INTO events_pruned (kind, reason, n) VALUES (?1, ?2, 1)
         ON CONFLICT (kind, reason) DO UPDATE SET n = n + 1",
    )?;
    for (kind, reason) in &kinds {
        add.execute(params![kind, reason])?;
    }
    out.more = out.rows() == BATCH as u64;
    Ok(out)
}

/// Prunes batch by batch (each its own store job, so redeems interleave) until nothing
/// more is due; counts what went and logs one line when anything did.
pub async fn prune(
    ledger: &std::sync::Arc<Ledger>,
    policy: Retention,
) -> Result<Pruned, DaemonError> {
    let mut total = Pruned::default();
    loop {
        let l = ledger.clone();
        let p = ledger
            .store
            .call(move || {
                let live = l.store.event_bytes();
                l.store.write(|c, _| {
                    Ok(Ok(prune_batch(c, tc_core::now_ms(), policy, live)?))
                })
            })
            .await?;
        // Only now, with the batch committed, do the counters and the size move.
        ledger.store.note_pruned(p.bytes, &p.by_reason());
        total.age += p.age;
        total.size += p.size;
        total.bytes += p.bytes;
        if !p.more {
            break;
        }
        tokio::task::yield_now().await;
    }
    if total.rows() > 0 {
        tracing::info!(
            by_age = total.age,
            by_size = total.size,
            freed_bytes = total.bytes,
            kept_bytes = ledger.store.event_bytes(),
            max_age_days = policy.max_age_ms / 86_400_000,
            max_bytes = policy.max_bytes,
            "retention pruned {} events from the audit log",
            total.rows()
        );
    }
    Ok(total)
}
