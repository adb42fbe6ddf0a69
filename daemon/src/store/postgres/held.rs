//! What reads leave above the events horizon ([`Held`]): the newest such event, for the
//! watcher in `horizon.rs` to wake the streams for, and how long a read waits first.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use tokio::sync::Notify;

/// How long a read waits for events above the horizon (older transactions still
/// running) before it returns those below: tc's own transactions last milliseconds.
pub const SETTLE_MAX: Duration = Duration::from_secs(1);

/// The newest event a read left above the horizon (0: none), for the watcher; and how
/// long reads wait for the horizon ([`SETTLE_MAX`]; a unit test shortens it).
pub struct Held {
    newest: AtomicI64,
    wake: Notify,
    settle_ms: AtomicU64,
}

impl Default for Held {
    fn default() -> Held {
        Held {
            newest: AtomicI64::new(0),
            wake: Notify::new(),
            settle_ms: AtomicU64::new(SETTLE_MAX.as_millis() as u64),
        }
    }
}

impl Held {
    /// Reads wait at most `ms` for the horizon (a test that holds it back on purpose
    /// must not hold back the parallel tests on the same server for long).
    #[cfg(test)]
    pub fn settle_for(&self, ms: u64) {
        self.settle_ms.store(ms, SeqCst);
    }

    /// How long a read waits for the horizon.
    pub fn settle(&self) -> Duration {
        Duration::from_millis(self.settle_ms.load(SeqCst))
    }

    /// A read left `id` above the horizon: the watcher is woken for it.
    pub fn note(&self, id: i64) {
        self.newest.fetch_max(id, SeqCst);
        self.wake.notify_one();
    }

    /// Waits until a read notes an id.
    pub async fn noted(&self) {
        self.wake.notified().await
    }

    /// The newest id noted and not yet passed (0: none).
    pub fn newest(&self) -> i64 {
        self.newest.load(SeqCst)
    }

    /// The horizon passed `id`: forgotten, unless a newer id was noted meanwhile.
    pub fn passed(&self, id: i64) {
        let _ = self.newest.compare_exchange(id, 0, SeqCst, SeqCst);
    }
}
