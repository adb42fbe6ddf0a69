//! This replica's NOTIFY, sent after its commits, not inside them: PostgreSQL's NOTIFY
//! takes a database-wide lock at commit and holds it through the commit's WAL flush, so
//! writers that notify in their own transaction commit one at a time, on every replica.
//!
//! Writers note their newest event id ([`Notifier::note`]) after the commit; one task
//! sends it in a transaction of its own that does not wait for its flush
//! (`synchronous_commit = off`: a notification lost in a server crash is caught up by
//! every LISTEN connection's reconnect), coalescing what committed meanwhile.

use std::sync::atomic::{AtomicI64, Ordering::SeqCst};
use std::sync::Arc;

use std::time::Duration;

use deadpool_postgres::Pool;
use tokio::sync::Notify;

use super::schema::CHANNEL;

/// After an announcement, the next one waits at least this long: under load each replica
/// then sends forty a second at most, whatever its commit rate (every one wakes
/// every replica's LISTEN connection), and a follower on another replica learns of a
/// commit at most this much later.
const GAP: Duration = Duration::from_millis(25);

/// The newest event id committed and not yet announced (0: none).
#[derive(Default)]
pub struct Notifier {
    newest: AtomicI64,
    wake: Notify,
}

impl Notifier {
    /// Events up to `id` committed here: announce them to the other replicas.
    pub fn note(&self, id: i64) {
        if id > 0 {
            self.newest.fetch_max(id, SeqCst);
            self.wake.notify_one();
        }
    }
}

/// Until the runtime ends: announces each noted id (the newest, if several were noted
/// while the previous announcement was on its way or within [`GAP`] of it).
pub async fn run(pool: Pool, n: Arc<Notifier>, describe: String) {
    loop {
        n.wake.notified().await;
        let id = n.newest.swap(0, SeqCst);
        if id == 0 {
            continue;
        }
        // An integer, formatted: nothing to quote.
        let sql = format!(
            "BEGIN; SET LOCAL synchronous_commit TO off; SELECT pg_notify('{CHANNEL}', '{id}'); COMMIT"
        );
        let sent = match pool.get().await {
            Ok(c) => c.batch_execute(&sql).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = sent {
            // The events are committed; other replicas read them at their next wake-up
            // (another commit, their LISTEN reconnect, or their periodic check).
            tracing::warn!(store = %describe, error = %e, "could not announce a commit to the other replicas");
        }
        tokio::time::sleep(GAP).await;
    }
}
