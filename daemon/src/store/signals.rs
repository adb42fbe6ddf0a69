//! What a store tells the rest of tcd besides query results, whatever the backend: the
//! in-memory counters, the log's size, and "events up to id N committed".
//!
//! With PostgreSQL these are per replica: counters count what this replica committed
//! (plus the totals at its start); commits of other replicas arrive through NOTIFY.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use tokio::sync::broadcast;

use crate::error::DaemonError;
use crate::record::{counter_keys, pruned_key, NewEvent};
use crate::store::queries::Tx;

/// Counters, the log's size and the commit signal.
pub struct Signals {
    counters: Mutex<BTreeMap<(String, String), u64>>,
    committed: broadcast::Sender<i64>,
    /// The audit log's size as retention counts it ([`NewEvent::size`]).
    event_bytes: AtomicU64,
    /// Past this many event bytes, a commit wakes the collector (`prune_wanted`).
    prune_at: AtomicU64,
    prune_wanted: tokio::sync::Notify,
}

impl Signals {
    /// Counters and size as the database holds them now.
    pub fn load(tx: &dyn Tx) -> Result<Signals, DaemonError> {
        let mut counters = BTreeMap::new();
        for (kind, n, reason) in tx.event_totals()? {
            let keys = if reason.is_empty() {
                counter_keys(&kind)
            } else {
                vec![pruned_key(&reason)]
            };
            for key in keys {
                *counters.entry(key).or_insert(0) += n;
            }
        }
        let (committed, _) = broadcast::channel(64);
        Ok(Signals {
            counters: Mutex::new(counters),
            committed,
            event_bytes: AtomicU64::new(tx.event_bytes()?),
            prune_at: AtomicU64::new(u64::MAX),
            prune_wanted: tokio::sync::Notify::new(),
        })
    }

    /// Counts committed events (and their bytes; past the threshold, wakes the collector).
    pub fn count(&self, events: &[NewEvent], bytes: u64) {
        let mut c = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        for ev in events {
            for key in counter_keys(ev.kind) {
                *c.entry(key).or_insert(0) += 1;
            }
        }
        drop(c);
        let total = self.event_bytes.fetch_add(bytes, Relaxed) + bytes;
        if bytes > 0 && total > self.prune_at.load(Relaxed) {
            self.prune_wanted.notify_one();
        }
    }

    /// Tells `--follow` streams that events up to `id` are committed.
    pub fn committed(&self, id: i64) {
        if id > 0 {
            let _ = self.committed.send(id);
        }
    }

    /// Subscribes to "events up to id N committed".
    pub fn subscribe(&self) -> broadcast::Receiver<i64> {
        self.committed.subscribe()
    }

    /// The audit log's size as retention counts it, as of the last commit.
    pub fn event_bytes(&self) -> u64 {
        self.event_bytes.load(Relaxed)
    }

    /// Replaces the size (re-read from a database other replicas also write).
    pub fn set_event_bytes(&self, bytes: u64) {
        self.event_bytes.store(bytes, Relaxed);
    }

    /// Past `bytes` of events, a commit wakes [`Signals::prune_wanted`] waiters.
    pub fn set_prune_threshold(&self, bytes: u64) {
        self.prune_at.store(bytes, Relaxed);
    }

    /// Notified when the log outgrew the threshold (a permit is kept for the next waiter).
    pub fn prune_wanted(&self) -> &tokio::sync::Notify {
        &self.prune_wanted
    }

    /// After a prune committed: its bytes leave the size, its rows join the counters.
    pub fn note_pruned(&self, freed_bytes: u64, by_reason: &[(&'static str, u64)]) {
        let _ = self
            .event_bytes
            .fetch_update(Relaxed, Relaxed, |b| Some(b.saturating_sub(freed_bytes)));
        for (reason, n) in by_reason {
            self.bump(pruned_key(reason), *n);
        }
    }

    /// Adds `n` to the in-memory counter `key` (name, labels); not persisted.
    pub fn bump(&self, key: (String, String), n: u64) {
        let mut c = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        *c.entry(key).or_insert(0) += n;
    }

    /// All counters as (name, labels, value), sorted.
    pub fn counters(&self) -> Vec<(String, String, u64)> {
        let c = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        c.iter()
            .map(|((n, l), v)| (n.clone(), l.clone(), *v))
            .collect()
    }
}
