//! The PostgreSQL backend: one database shared by several tcd replicas. Each write is one
//! READ COMMITTED transaction on a pooled connection; commits are announced with NOTIFY.
//!
//! - [`PgStore`]: connects (`connector`: URL, password file, TLS via rustls with
//!   `ca_file`), migrates under an advisory lock and checks that this replica's key is
//!   the one the database was keyed with (`connect`), and runs the rules' transactions
//!   ([`PgTx`]) on blocking threads, each driving its leased connection itself (`pool`,
//!   `driven`).
//! - `listen`: a dedicated LISTEN connection that wakes `--follow` streams on any
//!   replica's commit, reconnecting with backoff; `horizon` (with `held`): reads of the
//!   log stop where every older transaction has ended, so ids that commit out of order are
//!   never passed; `notify`: this replica's commits announced after they commit.

mod connect;
mod connector;
mod driven;
mod events;
mod factors;
mod grants;
mod held;
mod horizon;
#[cfg(test)]
mod horizon_tests;
mod listen;
mod notify;
mod page;
mod pool;
#[cfg(test)]
mod pool_tests;
mod raised;
pub mod schema;
#[cfg(test)]
pub mod testing;
mod tokens;
mod tx;

use std::sync::Arc;

use tc_core::config::PostgresConfig;
use tokio_postgres::types::ToSql;

pub use tx::PgTx;

use crate::error::{DaemonError, StoreError};
use crate::record::NewEvent;
use crate::store::queries::{Tx, Written};
use crate::store::signals::Signals;

/// The ledger in PostgreSQL, as one replica sees it.
pub struct PgStore {
    /// The rules' connections (`pool_size`), each driven by the thread that leased it.
    pool: Box<pool::Pool>,
    /// Drives the background tasks: LISTEN, the horizon's watcher and the notifier (shut
    /// down in the background on drop, so a store can be dropped from any context).
    rt: Option<tokio::runtime::Runtime>,
    signals: Arc<Signals>,
    /// Events reads left above the horizon, for the watcher that wakes the streams.
    held: Arc<held::Held>,
    /// Announces this replica's commits to the others (after the commit).
    notifier: Arc<notify::Notifier>,
    /// "host:port/database, schema N", for `tcctl status` and errors.
    pub(crate) describe: String,
    /// This replica's row in `replicas`.
    replica: String,
}

impl PgStore {
    /// Connects, migrates, checks the key (`key_check`: the HMAC of a fixed label under
    /// the replica's key) and starts listening. Blocks; call it outside any runtime's
    /// worker (tcd: before serving, from a blocking section).
    pub fn open(cfg: &PostgresConfig, key_check: &[u8; 32]) -> Result<PgStore, DaemonError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tcd-pg")
            .enable_all()
            .build()?;
        let conn = connector::Connector::new(cfg)?;
        let describe = conn.describe();
        let pool = Box::new(pool::Pool::new(conn.clone(), cfg.pool_size as usize));
        let first = connect::first_client(&pool, &describe)?;
        let tx = PgTx::new(first.conn(), false);
        let version = connect::migrate(&tx)?;
        connect::check_key(&tx, key_check, &describe)?;
        let replica = connect::register(&tx)?;
        let signals = Arc::new(Signals::load(&tx)?);
        drop(first);
        // Two connections for the background tasks (the LISTEN task has its own).
        let background = conn.pool(2)?;
        let handle = rt.handle().clone();
        handle.spawn(listen::run(conn, signals.clone(), describe.clone()));
        let held = Arc::new(held::Held::default());
        handle.spawn(horizon::watch(
            background.clone(),
            held.clone(),
            signals.clone(),
        ));
        let notifier = Arc::new(notify::Notifier::default());
        handle.spawn(notify::run(background, notifier.clone(), describe.clone()));
        Ok(PgStore {
            pool,
            rt: Some(rt),
            signals,
            held,
            notifier,
            describe: format!("postgresql {describe}, schema {version}"),
            replica,
        })
    }

    /// A leased connection, or `unavailable` naming the store.
    fn client(&self) -> Result<pool::Lease<'_>, DaemonError> {
        self.pool.get().map_err(|e| match e {
            StoreError::Unavailable(e) => {
                StoreError::Unavailable(format!("{}: {e}", self.describe)).into()
            }
            e => e.into(),
        })
    }

    /// Runs `f` on a blocking thread of the caller's runtime, which drives the connections
    /// it leases itself; resolves after its commit.
    pub fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> Result<T, DaemonError> + Send + 'static,
    ) -> impl std::future::Future<Output = Result<T, DaemonError>> + Send + 'static {
        let job = tokio::task::spawn_blocking(|| driven::on_store_thread(f));
        async move {
            job.await
                .map_err(|e| DaemonError::Internal(format!("a store job died: {e}")))?
        }
    }

    /// One transaction: `f`'s changes and its events commit together (or not at all).
    pub fn write_logged<T>(
        &self,
        f: impl FnOnce(&dyn Tx, &mut Vec<NewEvent>) -> Written<T>,
    ) -> Result<(Result<T, DaemonError>, i64), DaemonError> {
        let client = self.client()?;
        let tx = PgTx::new(client.conn(), true).noting(&self.held);
        let mut events = Vec::new();
        let result = match f(&tx, &mut events) {
            Ok(r) => r,
            Err(e) => {
                if tx.started() && tx.batch("ROLLBACK").is_err() {
                    // Never hand a connection in an unknown state back to the pool.
                    client.discard();
                }
                return Err(e);
            }
        };
        if !tx.started() && events.is_empty() {
            return Ok((result, 0)); // nothing was sent: nothing to commit
        }
        let (last, bytes) = match log_and_commit(&tx, &events) {
            Ok(logged) => logged,
            Err(Tail::RolledBack(e)) => return Err(e.into()),
            Err(Tail::Unsure(e)) => {
                client.discard();
                // The commit may or may not have happened: whatever this write spent stays
                // spent from the caller's point of view (it is told to stop, never to run).
                return Err(StoreError::Unavailable(format!(
                    "{}: the commit's outcome is unknown ({e}); treated as spent, nothing runs",
                    self.describe
                ))
                .into());
            }
        };
        self.signals.count(&events, bytes);
        self.signals.committed(last);
        self.notifier.note(last);
        Ok((result, last))
    }

    /// A read outside any transaction (each statement sees what is committed).
    pub fn read<T>(
        &self,
        f: impl FnOnce(&dyn Tx) -> Result<T, DaemonError>,
    ) -> Result<T, DaemonError> {
        let client = self.client()?;
        f(&PgTx::new(client.conn(), false).noting(&self.held))
    }

    /// Counters, the log's size and the commit signal (this replica's).
    pub fn signals(&self) -> &Arc<Signals> {
        &self.signals
    }

    /// Re-reads the log's size (other replicas write it too) and marks this replica seen.
    pub fn refresh(&self) -> Result<(), DaemonError> {
        self.read(|c| {
            self.signals.set_event_bytes(c.event_bytes()?);
            Ok(())
        })?;
        let client = self.client()?;
        let tx = PgTx::new(client.conn(), false);
        connect::seen(&tx, &self.replica)
    }

    /// Replicas that marked themselves seen within the last five minutes.
    pub fn replicas_seen(&self) -> Result<u64, DaemonError> {
        let client = self.client()?;
        connect::replicas_seen(&PgTx::new(client.conn(), false))
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// How the tail of a write (its events and `COMMIT`) failed.
enum Tail {
    /// An event statement failed: PostgreSQL rolled the transaction back at `COMMIT`.
    RolledBack(StoreError),
    /// The commit's outcome is not known (the connection failed): treated as spent,
    /// never as "run it again".
    Unsure(StoreError),
}

/// Inserts `events` (ids in this transaction's own id range, see `schema::HORIZON`) and
/// commits: one `tc_append_event` per event and the `COMMIT`, pipelined in one round
/// trip. No lock, and no NOTIFY inside (`notify.rs` says why): concurrent writers commit
/// in any order, readers wait for the horizon instead. Returns (last id, bytes).
fn log_and_commit(tx: &PgTx<'_>, events: &[NewEvent]) -> Result<(i64, u64), Tail> {
    let now = tc_core::now_ms();
    let details: Vec<String> = events.iter().map(NewEvent::detail_text).collect();
    let owners: Vec<Option<i64>> = events.iter().map(|e| e.owner_uid().map(tx::uid)).collect();
    let params: Vec<[&(dyn ToSql + Sync); 9]> = events
        .iter()
        .zip(&details)
        .zip(&owners)
        .map(|((ev, detail), owner)| events::append_params(&now, ev, detail, owner))
        .collect();
    let lists: Vec<&[&(dyn ToSql + Sync)]> = params.iter().map(|p| &p[..]).collect();
    let (rows, commit) = tx.all_then_commit(events::APPEND_EVENT, &lists);
    commit.map_err(Tail::Unsure)?;
    let mut last = 0;
    for row in rows {
        last = row
            .and_then(|r| Ok(r.try_get(0)?))
            .map_err(Tail::RolledBack)?;
    }
    let bytes = events.iter().zip(&details).map(|(ev, d)| ev.size(d)).sum();
    Ok((last, bytes))
}
