//! Storage: one seam ([`queries`]) between the ledger's rules and the backends that keep
//! its rows: SQLite ([`sqlite`], the default) or PostgreSQL shared by replicas ([`postgres`]).
//!
//! - [`Store`]: runs a write's rules over one transaction ([`queries::Tx`]) and commits
//!   its events with it; reads; counters and the commit signal ([`signals::Signals`]).
//! - What a backend fails with is `error.rs`'s `StoreError` (mapped there, once); the
//!   store names nothing above it (`record.rs`, `error.rs` and its own modules only).

pub mod postgres;
pub mod queries;
pub mod rows;
pub mod signals;
pub mod sqlite;

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use crate::error::DaemonError;
use crate::record::{EventRow, NewEvent};
use postgres::PgStore;
use queries::{Tx, Written};
use signals::Signals;
use sqlite::SqliteStore;

/// The ledger's rows, in whichever backend the config names.
pub enum Store {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

impl Store {
    /// Opens (creating) the SQLite database at `path`.
    pub fn open(path: &Path) -> Result<Store, DaemonError> {
        Ok(Store::Sqlite(SqliteStore::open(path)?))
    }

    /// Whether several replicas share this store (secret rotation is then refused).
    pub fn is_shared(&self) -> bool {
        matches!(self, Store::Postgres(_))
    }

    /// What `tcctl status` shows of the store.
    pub fn describe(&self) -> String {
        match self {
            Store::Sqlite(_) => "sqlite".into(),
            Store::Postgres(p) => match p.replicas_seen() {
                Ok(n) => format!("{}, {n} replica(s) seen in the last 5 minutes", p.describe),
                Err(e) => format!("{} (unreachable: {e})", p.describe),
            },
        }
    }

    /// The task that feeds SQLite's store thread (see [`SqliteStore::runner`]); PostgreSQL
    /// needs none.
    pub fn runner(&self) -> Result<Pin<Box<dyn Future<Output = ()> + Send>>, DaemonError> {
        match self {
            Store::Sqlite(s) => Ok(Box::pin(s.runner()?)),
            Store::Postgres(_) => Ok(Box::pin(async {})),
        }
    }

    /// Runs `f` (the rules of one operation) where the backend runs writes; resolves to
    /// its result once its commit is known.
    pub fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> Result<T, DaemonError> + Send + 'static,
    ) -> impl Future<Output = Result<T, DaemonError>> + Send + 'static {
        enum Either<A, B> {
            A(A),
            B(B),
        }
        let job = match self {
            Store::Sqlite(s) => Either::A(s.call(f)),
            Store::Postgres(p) => Either::B(p.call(f)),
        };
        async move {
            match job {
                Either::A(j) => j.await,
                Either::B(j) => j.await,
            }
        }
    }

    /// Runs `f` in one transaction; its events commit with it or not at all.
    pub fn write<T>(
        &self,
        f: impl FnOnce(&dyn Tx, &mut Vec<NewEvent>) -> Written<T>,
    ) -> Result<T, DaemonError> {
        match self {
            Store::Sqlite(s) => s.write(f),
            Store::Postgres(p) => p.write_logged(f)?.0,
        }
    }

    /// Runs a read-only query.
    pub fn read<T>(
        &self,
        f: impl FnOnce(&dyn Tx) -> Result<T, DaemonError>,
    ) -> Result<T, DaemonError> {
        match self {
            Store::Sqlite(s) => s.read(f),
            Store::Postgres(p) => p.read(f),
        }
    }

    /// Raw SQL on SQLite's connection (unit tests of schema and migrations).
    #[cfg(test)]
    pub fn sql<T>(
        &self,
        f: impl FnOnce(&rusqlite::Connection) -> Result<T, DaemonError>,
    ) -> Result<T, DaemonError> {
        match self {
            Store::Sqlite(s) => s.sql(f),
            Store::Postgres(_) => Err(DaemonError::Internal("not a SQLite store".into())),
        }
    }

    /// The store a unit test runs on: SQLite in `dir`, or with `TC_TEST_POSTGRES_URL` set,
    /// a PostgreSQL schema of its own (the ledger's suite runs unchanged on both).
    #[cfg(test)]
    pub fn for_test(dir: &Path) -> Store {
        match std::env::var("TC_TEST_POSTGRES_URL") {
            Ok(url) if !url.is_empty() => {
                Store::Postgres(postgres::testing::schema_store(&url, dir))
            }
            _ => Store::open(&dir.join("cache.db")).expect("store"),
        }
    }

    /// One number read with plain SQL both backends understand (unit tests).
    #[cfg(test)]
    pub fn scalar(&self, sql: &str) -> Result<i64, DaemonError> {
        match self {
            Store::Sqlite(s) => s.sql(|c| {
                Ok(c.query_row(sql, [], |r| r.get::<_, Option<i64>>(0))?
                    .unwrap_or(0))
            }),
            Store::Postgres(p) => p.scalar(sql),
        }
    }

    /// A statement in plain SQL both backends understand (unit tests).
    #[cfg(test)]
    pub fn exec_sql(&self, sql: &str) -> Result<(), DaemonError> {
        match self {
            Store::Sqlite(s) => s.sql(|c| Ok(c.execute_batch(sql)?)),
            Store::Postgres(p) => p.exec_sql(sql),
        }
    }

    /// Commits a single event with no other change; returns its id.
    pub fn append(&self, ev: NewEvent) -> Result<i64, DaemonError> {
        match self {
            Store::Sqlite(s) => s.append(ev),
            Store::Postgres(p) => {
                let (r, id) = p.write_logged(|_, evs| {
                    evs.push(ev);
                    Ok(Ok(()))
                })?;
                r.map(|()| id)
            }
        }
    }

    /// Events with `id > after`, oldest first, at most `limit`.
    pub fn events_after(&self, after: i64, limit: u32) -> Result<Vec<EventRow>, DaemonError> {
        self.events_for(after, limit, None)
    }

    /// [`Store::events_after`], only those `owner` owns when given.
    pub fn events_for(
        &self,
        after: i64,
        limit: u32,
        owner: Option<u32>,
    ) -> Result<Vec<EventRow>, DaemonError> {
        self.read(|c| Ok(c.events_after(after, limit, owner)?))
    }

    /// Number of events ever committed (live and pruned).
    pub fn event_count(&self) -> Result<u64, DaemonError> {
        self.read(|c| Ok(c.events_ever()?.max(0) as u64))
    }

    /// Periodic upkeep: PostgreSQL re-reads the log's size (every replica writes it) and
    /// marks this replica seen.
    pub fn refresh(&self) -> Result<(), DaemonError> {
        match self {
            Store::Sqlite(_) => Ok(()),
            Store::Postgres(p) => p.refresh(),
        }
    }

    /// Queues a stop behind the jobs queued so far (SQLite's store thread).
    pub fn close(&self) {
        if let Store::Sqlite(s) = self {
            s.close();
        }
    }

    /// Waits for SQLite's store thread to end (after [`Store::close`]).
    pub fn join(&self) {
        if let Store::Sqlite(s) = self {
            s.join();
        }
    }

    /// Counters, the log's size and the commit signal.
    pub fn signals(&self) -> &Arc<Signals> {
        match self {
            Store::Sqlite(s) => s.signals(),
            Store::Postgres(p) => p.signals(),
        }
    }

    /// Subscribes to "events up to id N committed" (any replica's, with PostgreSQL).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<i64> {
        self.signals().subscribe()
    }

    /// The audit log's size as retention counts it.
    pub fn event_bytes(&self) -> u64 {
        self.signals().event_bytes()
    }

    /// Past `bytes` of events, a commit wakes [`Store::prune_wanted`] waiters.
    pub fn set_prune_threshold(&self, bytes: u64) {
        self.signals().set_prune_threshold(bytes)
    }

    /// Notified when the log outgrew the threshold.
    pub fn prune_wanted(&self) -> &tokio::sync::Notify {
        self.signals().prune_wanted()
    }

    /// After a prune committed: its bytes leave the size, its rows join the counters.
    pub fn note_pruned(&self, freed_bytes: u64, by_reason: &[(&'static str, u64)]) {
        self.signals().note_pruned(freed_bytes, by_reason)
    }

    /// Adds `n` to the in-memory counter `key`.
    pub fn bump(&self, key: (String, String), n: u64) {
        self.signals().bump(key, n)
    }

    /// All counters as (name, labels, value), sorted.
    pub fn counters(&self) -> Vec<(String, String, u64)> {
        self.signals().counters()
    }
}
