//! Collection: the ledger's expired rows ([`Ledger::gc`]) and retention of the audit log
//! (events older than `events_max_age_days`, or beyond `events_max_bytes`, oldest first).
//!
//! - [`Retention`]: the policy; [`prune_batch`]: one batch (one savepoint of a group);
//!   [`prune`]: batches until nothing more is due, counted and logged.
//! - Only events are pruned by retention: raised requests, tokens and consumed states
//!   (what a pending confirmation or a single-use check needs) are collected by `gc`,
//!   and nothing in them is derived from events.

use crate::error::DaemonError;
use crate::ledger::{Ledger, TOKEN_RETENTION_MS};
pub use crate::record::{pruned_key, ROW_OVERHEAD};
use crate::store::queries::Tx;

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
    tx: &dyn Tx,
    now_ms: i64,
    policy: Retention,
    live_bytes: u64,
) -> Result<Pruned, DaemonError> {
    if !tx.try_collect_lock()? {
        return Ok(Pruned::default()); // another replica is pruning
    }
    let cutoff = now_ms.saturating_sub(policy.max_age_ms);
    let rows = tx.oldest_events(BATCH as u32)?;
    let mut out = Pruned::default();
    let mut last = None;
    let mut kinds: Vec<(String, &'static str)> = Vec::new();
    for row in rows {
        let (id, at_ms, kind, bytes) = (row.id, row.at_ms, row.kind, row.bytes);
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
        out.bytes += bytes;
        last = Some(id);
        kinds.push((kind, reason));
    }
    let Some(last) = last else {
        return Ok(out);
    };
    tx.delete_events_through(last)?;
    for (kind, reason) in &kinds {
        tx.count_pruned(kind, reason)?;
    }
    out.more = out.rows() == BATCH as u64;
    Ok(out)
}

impl Ledger {
    /// Deletes rows nothing can use any more: request-state nonces a day past their
    /// expiry (the seal's own expiry already refuses those states), raised requests an
    /// hour past expiry (`mint` refuses them at expiry; kept that hour so a retry is told
    /// "expired" rather than asked afresh; kept longer, a flood of raises at the rate
    /// limit would pile up a day of them), and tokens [`TOKEN_RETENTION_MS`] past both their
    /// expiry and their last redemption. Events are pruned by `retention.rs`.
    pub fn gc(&self) -> Result<(), DaemonError> {
        self.gc_at(tc_core::now_ms())
    }

    pub(crate) fn gc_at(&self, now: i64) -> Result<(), DaemonError> {
        self.store.write(|tx, evs| {
            if !tx.try_collect_lock()? {
                return Ok(Ok(())); // another replica is collecting
            }
            // Raised requests: an hour past expiry, logging the unanswered ones as expired.
            crate::approvals::sweep(tx, evs, now)?;
            // A day past expiry, not at it: if the wall clock steps back after a
            // collection, an already used state would otherwise open again.
            tx.collect_states(now - 86_400_000)?;
            // A deleted token is refused as `unknown` instead of `spent`: refused all the
            // same. Its redemption can no longer be released or recorded, which only a call
            // running for longer than the retention would notice.
            tx.collect_tokens(now - TOKEN_RETENTION_MS)?;
            Ok(Ok(()))
        })
    }
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
                l.store
                    .write(|c, _| Ok(Ok(prune_batch(c, tc_core::now_ms(), policy, live)?)))
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::record::Binding;
    use crate::record::NewEvent;
    use crate::secret::Secret;
    use crate::store::Store;

    const DAY: i64 = 86_400_000;

    fn ledger(dir: &std::path::Path) -> Arc<Ledger> {
        let store = Store::for_test(dir);
        Arc::new(Ledger::new(store, Secret::ephemeral(), 300))
    }

    fn append(l: &Ledger, n: usize, detail: &str) {
        for _ in 0..n {
            l.store
                .append(NewEvent {
                    kind: "k",
                    detail: serde_json::json!({ "d": detail }),
                    ..Default::default()
                })
                .unwrap();
        }
    }

    fn ids(l: &Ledger) -> Vec<i64> {
        let evs = l.store.events_after(0, 100_000).unwrap();
        evs.iter().map(|e| e.id).collect()
    }

    fn counter(l: &Ledger, name: &str, labels: &str) -> Option<u64> {
        let c = l.store.counters();
        c.into_iter()
            .find(|(n, lb, _)| n == name && lb == labels)
            .map(|(_, _, v)| v)
    }

    fn age_all_but_last(l: &Ledger, by_ms: i64) {
        l.store
            .exec_sql(&format!(
                "UPDATE events SET at_ms = at_ms - {by_ms} WHERE id < (SELECT max(id) FROM events)"
            ))
            .unwrap();
    }

    /// Events past the age limit go, in batches of at most BATCH, the newest always
    /// stays, the size and counters follow, and all of it survives a reopen: the kind
    /// counter still counts the pruned events.
    #[tokio::test]
    async fn old_events_are_pruned_in_batches_and_counters_survive() {
        let dir = tempfile::tempdir().unwrap();
        let l = ledger(dir.path());
        append(&l, 1200, "x");
        // Ids as written (SQLite: 1, 2, ...; PostgreSQL: sparse, increasing).
        let all = ids(&l);
        age_all_but_last(&l, 100 * DAY);
        let policy = Retention {
            max_age_ms: 90 * DAY,
            max_bytes: u64::MAX,
        };
        let before = l.store.event_bytes();
        // One batch deletes at most BATCH rows and says more are due.
        let live = l.store.event_bytes();
        let one = l
            .store
            .write(|c, _| Ok(Ok(prune_batch(c, tc_core::now_ms(), policy, live)?)))
            .unwrap();
        assert_eq!((one.age, one.size, one.more), (BATCH as u64, 0, true));
        l.store.note_pruned(one.bytes, &one.by_reason());
        let rest = prune(&l, policy).await.unwrap();
        assert_eq!(rest.age, 1200 - 1 - BATCH as u64);
        assert!(!rest.more);
        assert_eq!(ids(&l), vec![all[1199]], "the newest event is kept");
        let row = ROW_OVERHEAD + "k".len() as u64 + r#"{"d":"x"}"#.len() as u64;
        assert_eq!(before, 1200 * row);
        assert_eq!(l.store.event_bytes(), row);
        assert_eq!(
            counter(&l, "tc_events_pruned_total", "reason=\"age\""),
            Some(1199)
        );
        // Nothing more is due: a second prune deletes nothing.
        assert_eq!(prune(&l, policy).await.unwrap().rows(), 0);
        append(&l, 1, "x");
        let now = ids(&l);
        assert_eq!(now[..1], [all[1199]]);
        assert!(
            now.len() == 2 && now[1] > all[1199],
            "ids continue: {now:?}"
        );

        drop(l);
        let l = ledger(dir.path());
        assert_eq!(
            counter(&l, "tc_events_total", "kind=\"k\""),
            Some(1201),
            "counters never go backwards"
        );
        assert_eq!(
            counter(&l, "tc_events_pruned_total", "reason=\"age\""),
            Some(1199)
        );
        assert_eq!(l.store.event_bytes(), 2 * row, "size recomputed at open");
    }

    /// Over the size cap the oldest events go until the log fits, and no more; young
    /// events under the cap are left alone.
    #[tokio::test]
    async fn the_log_is_pruned_oldest_first_to_its_size_cap() {
        let dir = tempfile::tempdir().unwrap();
        let l = ledger(dir.path());
        let detail = "y".repeat(900);
        append(&l, 300, &detail);
        let all = ids(&l);
        let row = l.store.event_bytes() / 300;
        let policy = Retention {
            max_age_ms: 90 * DAY,
            max_bytes: 100 * row,
        };
        let p = prune(&l, policy).await.unwrap();
        assert_eq!((p.age, p.size), (0, 200));
        assert_eq!(ids(&l), all[200..]);
        assert_eq!(l.store.event_bytes(), 100 * row);
        assert_eq!(
            counter(&l, "tc_events_pruned_total", "reason=\"size\""),
            Some(200)
        );
        assert_eq!(counter(&l, "tc_events_total", "kind=\"k\""), Some(300));
        assert_eq!(prune(&l, policy).await.unwrap().rows(), 0);
    }

    /// Pruning every event touches nothing a confirmation needs: a raised request is
    /// still mintable, a token minted before still redeems once (and only once).
    #[tokio::test]
    async fn pruning_leaves_raised_requests_and_tokens_alone() {
        let dir = tempfile::tempdir().unwrap();
        let l = ledger(dir.path());
        let b = |n: &str| Binding {
            vault: "v".into(),
            tool: "t".into(),
            caller: "c".into(),
            args_hash: tc_core::hash::sha256_hex(n.as_bytes()),
        };
        let fp = tc_core::hash::sha256_hex(b"fp");
        l.raise(&b("minted"), &fp, "s").unwrap();
        let (token, _, _) = l.mint(&b("minted"), None, &Default::default()).unwrap();
        l.raise(&b("pending"), &fp, "s").unwrap();
        append(&l, 10, "x");
        age_all_but_last(&l, 365 * DAY);
        let policy = Retention {
            max_age_ms: DAY,
            max_bytes: u64::MAX,
        };
        assert_eq!(prune(&l, policy).await.unwrap().age, 12);
        l.redeem(&token, &b("minted"), &fp).unwrap();
        assert!(l.redeem(&token, &b("minted"), &fp).is_err(), "single use");
        l.mint(&b("pending"), None, &Default::default()).unwrap();
    }
}
