//! The SQLite store: opening in WAL with `synchronous=FULL`, the versioned schema and
//! its migrations, transactions, the event log every change writes into, and the counters
//! derived from it.
//!
//! - [`Store`]: one connection behind a mutex (SQLite serializes writers anyway).
//! - [`NewEvent`]: an audit event, committed in the same transaction as its change.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use rusqlite::{params, Connection, Transaction, TransactionBehavior};
use tokio::sync::broadcast;

use crate::error::DaemonError;

/// Schema migrations; `PRAGMA user_version` is the index of the last one applied.
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: the initial schema.
    r#"
    CREATE TABLE raised (
        vault TEXT NOT NULL, caller TEXT NOT NULL, args_hash TEXT NOT NULL,
        tool TEXT NOT NULL, state_fp TEXT NOT NULL, summary TEXT NOT NULL,
        raised_at INTEGER NOT NULL, expires_at INTEGER NOT NULL,
        PRIMARY KEY (vault, caller, args_hash)
    );
    CREATE TABLE tokens (
        token_hash BLOB PRIMARY KEY,
        vault TEXT NOT NULL, tool TEXT NOT NULL, caller TEXT NOT NULL, args_hash TEXT NOT NULL,
        state_fp TEXT NOT NULL,
        created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL,
        consumed_at INTEGER, redemption_id TEXT
    );
    CREATE TABLE redemptions (
        id TEXT PRIMARY KEY, token_hash BLOB NOT NULL,
        redeemed_at INTEGER NOT NULL, released_at INTEGER, final_at INTEGER
    );
    CREATE TABLE consumed_states (
        nonce TEXT PRIMARY KEY, consumed_at INTEGER NOT NULL, expires_at INTEGER NOT NULL
    );
    CREATE INDEX consumed_states_expiry ON consumed_states (expires_at);
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT, at_ms INTEGER NOT NULL, kind TEXT NOT NULL,
        vault TEXT NOT NULL, tool TEXT NOT NULL, caller TEXT NOT NULL,
        args_hash TEXT NOT NULL, state_fp TEXT NOT NULL, detail TEXT NOT NULL
    );
    CREATE TABLE counters (
        name TEXT NOT NULL, labels TEXT NOT NULL, value INTEGER NOT NULL,
        PRIMARY KEY (name, labels)
    );
    "#,
    // 2: counters are derived from the event log at start and kept in memory (one less
    // write per event); a partial index keeps "live tokens" cheap for `Status`.
    r#"
    DROP TABLE counters;
    CREATE INDEX tokens_live ON tokens (expires_at) WHERE consumed_at IS NULL;
    "#,
    // 3: `redemptions` folds into `tokens` (a redeem writes one row instead of two rows
    // in two tables, each with its own B-trees). A token keeps its latest redemption:
    // `redemption_id`, its sequence number `redeemed`, `released_at`, `final_at`. New
    // redemption ids are `<tokens.id>.<seq>.<random>`, found by rowid with no index; ids
    // issued before this migration (no '.') are found through `legacy_redemptions`,
    // written only here. `id` is an explicit rowid so VACUUM cannot renumber it.
    r#"
    CREATE TABLE tokens_v3 (
        id INTEGER PRIMARY KEY,
        token_hash BLOB NOT NULL,
        vault TEXT NOT NULL, tool TEXT NOT NULL, caller TEXT NOT NULL, args_hash TEXT NOT NULL,
        state_fp TEXT NOT NULL,
        created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL,
        consumed_at INTEGER,
        redemption_id TEXT, redeemed INTEGER NOT NULL DEFAULT 0,
        released_at INTEGER, final_at INTEGER
    );
    INSERT INTO tokens_v3 (token_hash, vault, tool, caller, args_hash, state_fp, created_at,
                           expires_at, consumed_at, redemption_id, redeemed, released_at, final_at)
    SELECT t.token_hash, t.vault, t.tool, t.caller, t.args_hash, t.state_fp, t.created_at,
           t.expires_at, t.consumed_at, r.id,
           (SELECT count(*) FROM redemptions c WHERE c.token_hash = t.token_hash),
           r.released_at, r.final_at
    FROM tokens t
    -- The latest redemption: the one the token names while spent, else the newest row
    -- (released ones; v2 cleared tokens.redemption_id on release).
    LEFT JOIN redemptions r ON r.rowid = coalesce(
        (SELECT x.rowid FROM redemptions x WHERE x.id = t.redemption_id),
        (SELECT max(y.rowid) FROM redemptions y WHERE y.token_hash = t.token_hash))
    ORDER BY t.rowid;
    CREATE TABLE legacy_redemptions (id TEXT PRIMARY KEY, token_id INTEGER NOT NULL) WITHOUT ROWID;
    INSERT INTO legacy_redemptions (id, token_id)
    SELECT r.id, n.id FROM redemptions r JOIN tokens_v3 n ON n.token_hash = r.token_hash;
    DROP TABLE redemptions;
    DROP TABLE tokens;
    ALTER TABLE tokens_v3 RENAME TO tokens;
    CREATE UNIQUE INDEX tokens_hash ON tokens (token_hash);
    CREATE INDEX tokens_live ON tokens (expires_at) WHERE consumed_at IS NULL;
    "#,
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: usize = MIGRATIONS.len();

/// An audit event to commit alongside a state change. Never holds a token or secret.
#[derive(Debug, Default, Clone)]
pub struct NewEvent {
    pub kind: &'static str,
    pub vault: String,
    pub tool: String,
    pub caller: String,
    pub args_hash: String,
    pub state_fp: String,
    pub detail: serde_json::Value,
}

/// A committed event as read back.
#[derive(Debug, Clone)]
pub struct EventRow {
    pub id: i64,
    pub at_ms: i64,
    pub kind: String,
    pub vault: String,
    pub tool: String,
    pub caller: String,
    pub args_hash: String,
    pub state_fp: String,
    pub detail: String,
}

/// The database, the in-memory counters, and the "events committed" signal
/// `ListEvents --follow` waits on.
pub struct Store {
    conn: Mutex<Connection>,
    counters: Mutex<BTreeMap<(String, String), u64>>,
    committed: broadcast::Sender<i64>,
}

impl Store {
    /// Opens (creating) `path`, sets WAL + `synchronous=FULL`, and migrates.
    pub fn open(path: &Path) -> Result<Store, DaemonError> {
        let mut conn = Connection::open(path)?;
        // FULL: a commit (a spent token) is on disk before the reply leaves, so a
        // `kill -9` or power loss right after cannot resurrect the token.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        // Every statement is `prepare_cached`; the default 16 slots would evict some.
        conn.set_prepared_statement_cache_capacity(64);
        migrate(&mut conn)?;
        let mut counters = BTreeMap::new();
        {
            let mut st = conn.prepare("SELECT kind, count(*) FROM events GROUP BY kind")?;
            let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
            for row in rows {
                let (kind, n) = row?;
                for key in counter_keys(&kind) {
                    *counters.entry(key).or_insert(0) += n as u64;
                }
            }
        }
        let (committed, _) = broadcast::channel(64);
        Ok(Store {
            conn: Mutex::new(conn),
            counters: Mutex::new(counters),
            committed,
        })
    }

    /// Runs `f` in one IMMEDIATE transaction; its events commit with it or not at all.
    ///
    /// `f` returns `Err` to roll back, `Ok(Err(refusal))` to commit what it did and then
    /// refuse (a drifted token is spent *and* refused), `Ok(Ok(v))` to commit.
    pub fn write<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>, &mut Vec<NewEvent>) -> Written<T>,
    ) -> Result<T, DaemonError> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut events = Vec::new();
        let result = f(&tx, &mut events)?;
        let mut last = 0;
        for ev in &events {
            last = insert_event(&tx, ev)?;
        }
        tx.commit()?;
        self.count(&events);
        if last > 0 {
            let _ = self.committed.send(last);
        }
        result
    }

    /// Runs a read-only query.
    pub fn read<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, DaemonError>,
    ) -> Result<T, DaemonError> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        f(&conn)
    }

    /// Commits a single event with no other change.
    pub fn append(&self, ev: NewEvent) -> Result<i64, DaemonError> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let id = insert_event(&tx, &ev)?;
        tx.commit()?;
        self.count(std::slice::from_ref(&ev));
        let _ = self.committed.send(id);
        Ok(id)
    }

    /// Subscribes to "events up to id N committed".
    pub fn subscribe(&self) -> broadcast::Receiver<i64> {
        self.committed.subscribe()
    }

    /// Events with `id > after`, oldest first, at most `limit`.
    pub fn events_after(&self, after: i64, limit: u32) -> Result<Vec<EventRow>, DaemonError> {
        self.read(|c| {
            let mut st = c.prepare_cached(
                "SELECT id, at_ms, kind, vault, tool, caller, args_hash, state_fp, detail
                 FROM events WHERE id > ?1 ORDER BY id LIMIT ?2",
            )?;
            let rows = st.query_map(params![after, limit], |r| {
                Ok(EventRow {
                    id: r.get(0)?,
                    at_ms: r.get(1)?,
                    kind: r.get(2)?,
                    vault: r.get(3)?,
                    tool: r.get(4)?,
                    caller: r.get(5)?,
                    args_hash: r.get(6)?,
                    state_fp: r.get(7)?,
                    detail: r.get(8)?,
                })
            })?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }

    /// All counters as (name, labels, value), sorted.
    pub fn counters(&self) -> Vec<(String, String, u64)> {
        let c = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        c.iter()
            .map(|((n, l), v)| (n.clone(), l.clone(), *v))
            .collect()
    }

    /// Number of events ever committed (ids are AUTOINCREMENT and never deleted).
    pub fn event_count(&self) -> Result<u64, DaemonError> {
        self.read(|c| {
            Ok(c.prepare_cached("SELECT coalesce(max(id), 0) FROM events")?
                .query_row([], |r| r.get::<_, i64>(0))? as u64)
        })
    }

    fn count(&self, events: &[NewEvent]) {
        let mut c = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        for ev in events {
            for key in counter_keys(ev.kind) {
                *c.entry(key).or_insert(0) += 1;
            }
        }
    }
}

/// The counters one event of `kind` adds to.
fn counter_keys(kind: &str) -> Vec<(String, String)> {
    let mut keys = vec![("tc_events_total".to_string(), format!("kind=\"{kind}\""))];
    if kind == tc_core::codes::events::OVERFLOW {
        keys.push(("governor_truncations_total".to_string(), String::new()));
    }
    keys
}

/// What a [`Store::write`] closure returns: outer `Err` rolls back, inner `Err` commits then refuses.
pub type Written<T> = Result<Result<T, DaemonError>, DaemonError>;

fn migrate(conn: &mut Connection) -> Result<(), DaemonError> {
    let current: usize =
        conn.pragma_query_value(None, "user_version", |r| r.get::<_, i64>(0))? as usize;
    if current > SCHEMA_VERSION {
        return Err(DaemonError::Internal(format!(
            "database schema version {current} is newer than this tcd understands ({SCHEMA_VERSION}); upgrade tcd"
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current) {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Exclusive)?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
        tracing::info!(version = i + 1, "database migrated");
    }
    Ok(())
}

fn insert_event(tx: &Transaction<'_>, ev: &NewEvent) -> Result<i64, DaemonError> {
    let detail = if ev.detail.is_null() {
        "{}".to_string()
    } else {
        ev.detail.to_string()
    };
    tx.prepare_cached(
        "INSERT INTO events (at_ms, kind, vault, tool, caller, args_hash, state_fp, detail)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        tc_core::now_ms(),
        ev.kind,
        ev.vault,
        ev.tool,
        ev.caller,
        ev.args_hash,
        ev.state_fp,
        detail
    ])?;
    Ok(tx.last_insert_rowid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrates_once_and_refuses_a_newer_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache.db");
        drop(Store::open(&path).unwrap());
        drop(Store::open(&path).unwrap());
        let c = Connection::open(&path).unwrap();
        let v: i64 = c
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v as usize, SCHEMA_VERSION);
        let mode: String = c
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        c.pragma_update(None, "user_version", 99).unwrap();
        drop(c);
        assert!(Store::open(&path).is_err());
    }

    #[test]
    fn an_aborted_write_commits_no_event() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("db")).unwrap();
        let r: Result<(), _> = s.write(|_, evs| {
            evs.push(NewEvent {
                kind: "x",
                ..Default::default()
            });
            Err(DaemonError::Internal("no".into()))
        });
        assert!(r.is_err());
        assert!(s.events_after(0, 10).unwrap().is_empty());
        s.write(|_, evs| {
            evs.push(NewEvent {
                kind: "y",
                ..Default::default()
            });
            Ok(Ok(()))
        })
        .unwrap();
        assert_eq!(s.events_after(0, 10).unwrap()[0].kind, "y");
    }
}
