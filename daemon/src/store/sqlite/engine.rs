//! The SQLite engine: one connection in WAL with `synchronous=FULL`, owned by a store
//! thread that group-commits queued jobs; the counters derived from the event log.
//!
//! - [`SqliteStore`]: runs each write's rules over the connection as a [`Tx`], its events
//!   committed in the same transaction.

use std::cell::RefCell;
use std::path::Path;
use std::sync::{mpsc, Arc, Condvar, Mutex};

use rusqlite::{Connection, TransactionBehavior};

use super::schema::{MIGRATIONS, SCHEMA_VERSION};
use crate::error::{DaemonError, StoreError};
use crate::record::NewEvent;
use crate::store::queries::{EventQueries, Tx, Written};
use crate::store::signals::Signals;

/// The database, the in-memory counters, and the "events committed" signal
/// `ListEvents --follow` waits on.
///
/// [`SqliteStore::call`] jobs run in groups: every queued job goes into one `BEGIN IMMEDIATE`
/// transaction, each job's writes in their own savepoint (a failing job rolls back only
/// itself), the group commits once (one fsync for all of it under `synchronous=FULL`),
/// and only then does each job get its result. Concurrent redeems thus share an fsync,
/// and no reply can precede its commit.
///
/// Groups run on a dedicated `tcd-store` thread. With a [`SqliteStore::runner`] task on the
/// caller's runtime (tcd), a lone job arriving while that thread is idle runs inline on
/// the runtime thread instead (see there): a sequential client then pays no thread
/// hand-offs, while concurrent load still gets the pipelined thread.
///
/// [`SqliteStore::write`], [`SqliteStore::read`] and [`SqliteStore::append`] called inside a job join that
/// group; called from any other thread (unit tests, start-up) they run a transaction of
/// their own, waiting for the group in flight.
pub struct SqliteStore {
    shared: Arc<Shared>,
    jobs: Mutex<mpsc::Sender<Msg>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The runner's queue, once [`SqliteStore::runner`] was called: jobs go there first.
    front: std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<Msg>>,
}

/// What the store thread and direct callers share.
struct Shared {
    /// `None` while the store thread holds the connection for a group.
    conn: Mutex<Option<Connection>>,
    returned: Condvar,
    signals: Arc<Signals>,
    /// Jobs handed to the store thread and not finished yet (0: it is idle).
    on_thread: std::sync::atomic::AtomicUsize,
}

/// Runs on the store thread inside the group transaction; returns how to deliver its
/// result once the group's commit is known (`Some(error)` if the commit failed).
type Job = Box<dyn FnOnce() -> Deliver + Send>;
type Deliver = Box<dyn FnOnce(Option<&rusqlite::Error>) + Send>;

enum Msg {
    Job(Job),
    Stop,
}

/// At most this many jobs share one transaction (bounds the latency a group adds).
const MAX_GROUP: usize = 256;

/// The group in progress on this thread (only ever set on a store thread).
struct Group {
    store: *const Shared,
    conn: Connection,
    events: Vec<NewEvent>,
    last_event: i64,
    event_bytes: u64,
}

thread_local! {
    static GROUP: RefCell<Option<Group>> = const { RefCell::new(None) };
}

impl SqliteStore {
    /// Opens (creating) `path`, sets WAL + `synchronous=FULL`, migrates, and starts the
    /// store thread.
    pub fn open(path: &Path) -> Result<SqliteStore, DaemonError> {
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
        let signals = Arc::new(Signals::load(&conn)?);
        let shared = Arc::new(Shared {
            conn: Mutex::new(Some(conn)),
            returned: Condvar::new(),
            signals,
            on_thread: std::sync::atomic::AtomicUsize::new(0),
        });
        let (tx, rx) = mpsc::channel();
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("tcd-store".into())
            .spawn(move || store_thread(&thread_shared, &rx))?;
        Ok(SqliteStore {
            shared,
            jobs: Mutex::new(tx),
            thread: Mutex::new(Some(thread)),
            front: std::sync::OnceLock::new(),
        })
    }

    /// A task for the caller's runtime that receives every later [`SqliteStore::call`] first
    /// and decides where its group runs. A lone job (nothing else queued, the store thread
    /// idle) runs inline, blocking this runtime thread through its commit: deliberate, as
    /// its reply waits for that commit anyway, and it saves the two cross-thread wake-ups
    /// (to the store thread and back) that cost ~70 µs per call on a small VM. Anything
    /// more goes to the store thread, so under concurrent load requests keep being read
    /// while a group is in its fsync. Ends after [`SqliteStore::close`].
    pub fn runner(
        &self,
    ) -> Result<impl std::future::Future<Output = ()> + Send + 'static, DaemonError> {
        use std::sync::atomic::Ordering::SeqCst;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        self.front
            .set(tx)
            .map_err(|_| DaemonError::Internal("the store already has a runner".into()))?;
        let shared = self.shared.clone();
        let thread = self.jobs.lock().unwrap_or_else(|p| p.into_inner()).clone();
        Ok(async move {
            loop {
                let Some(first) = rx.recv().await else { return };
                // Let every other task that is ready (requests already read) queue its
                // job first, so they share a group.
                tokio::task::yield_now().await;
                let mut jobs = Vec::new();
                let mut stop = false;
                for msg in std::iter::once(first).chain(std::iter::from_fn(|| rx.try_recv().ok())) {
                    match msg {
                        Msg::Job(j) => jobs.push(j),
                        Msg::Stop => {
                            stop = true;
                            break;
                        }
                    }
                }
                if jobs.len() == 1 && !stop && shared.on_thread.load(SeqCst) == 0 {
                    run_group(&shared, jobs);
                } else {
                    shared.on_thread.fetch_add(jobs.len(), SeqCst);
                    for j in jobs {
                        // A failed send drops the job: its caller gets an error.
                        let _ = thread.send(Msg::Job(j));
                    }
                }
                if stop {
                    let _ = thread.send(Msg::Stop);
                    return;
                }
            }
        })
    }

    /// Queues a stop behind every job queued so far: they still run and are delivered,
    /// later [`SqliteStore::call`]s fail. With a runner, await it after this, then [`SqliteStore::join`].
    pub fn close(&self) {
        match self.front.get() {
            Some(front) => {
                let _ = front.send(Msg::Stop);
            }
            None => {
                let _ = self
                    .jobs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .send(Msg::Stop);
            }
        }
    }

    /// Waits for the store thread to end (after [`SqliteStore::close`]). Must not be called
    /// from a job, nor while a runner that has yet to pass the stop on is starved.
    pub fn join(&self) {
        let handle = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }

    /// Queues `f` (now, in call order) to run on the store thread as part of the next
    /// group; the future resolves to its result once that group has committed.
    pub fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> Result<T, DaemonError> + Send + 'static,
    ) -> impl std::future::Future<Output = Result<T, DaemonError>> + Send + 'static {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let result = f();
            Box::new(move |commit_failed: Option<&rusqlite::Error>| {
                let _ = tx.send(match commit_failed {
                    None => result,
                    Some(e) => Err(copy_error(e)),
                });
            })
        });
        let sent = match self.front.get() {
            Some(front) => front.send(Msg::Job(job)).is_ok(),
            None => {
                self.shared
                    .on_thread
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                self.jobs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .send(Msg::Job(job))
                    .is_ok()
            }
        };
        async move {
            if !sent {
                return Err(DaemonError::Internal("the store thread has stopped".into()));
            }
            rx.await
                .map_err(|_| DaemonError::Internal("the store thread dropped a request".into()))?
        }
    }

    /// Runs `f` in one transaction; its events commit with it or not at all.
    ///
    /// `f` returns `Err` to roll back, `Ok(Err(refusal))` to commit what it did and then
    /// refuse (a drifted token is spent *and* refused), `Ok(Ok(v))` to commit. Inside a
    /// [`SqliteStore::call`] job this is a savepoint of the group's transaction.
    pub fn write<T>(
        &self,
        f: impl FnOnce(&dyn Tx, &mut Vec<NewEvent>) -> Written<T>,
    ) -> Result<T, DaemonError> {
        self.write_logged(f)?.0
    }

    /// [`SqliteStore::write`], also returning the id of the last event it inserted (0: none).
    fn write_logged<T>(
        &self,
        f: impl FnOnce(&dyn Tx, &mut Vec<NewEvent>) -> Written<T>,
    ) -> Result<(Result<T, DaemonError>, i64), DaemonError> {
        let run = |conn: &Connection| -> Result<Done<T>, DaemonError> {
            let mut events = Vec::new();
            let result = f(conn, &mut events)?;
            let (mut last, mut bytes) = (0, 0);
            for ev in &events {
                let (id, b) = insert_event(conn, ev)?;
                (last, bytes) = (id, bytes + b);
            }
            Ok(Done {
                result,
                events,
                last,
                bytes,
            })
        };
        let mut run = Some(run);
        let grouped = GROUP.with(|g| {
            let mut g = g.borrow_mut();
            let group = g
                .as_mut()
                .filter(|g| std::ptr::eq(g.store, &*self.shared))?;
            Some(in_savepoint(group, run.take().expect("write runs once")))
        });
        if let Some(r) = grouped {
            return r;
        }
        let run = run.take().expect("write runs once");
        let Done {
            result,
            events,
            last,
            bytes,
        } = self.alone(|conn| {
            conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
            let done = run(conn).and_then(|d| {
                conn.prepare_cached("COMMIT")?.execute([])?;
                Ok(d)
            });
            if done.is_err() && !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            done
        })?;
        self.shared.signals.count(&events, bytes);
        self.shared.signals.committed(last);
        Ok((result, last))
    }

    /// Runs a read-only query (inside a job: in the group's transaction, so it sees the
    /// group's earlier writes; its result is delivered only after they commit).
    pub fn read<T>(
        &self,
        f: impl FnOnce(&dyn Tx) -> Result<T, DaemonError>,
    ) -> Result<T, DaemonError> {
        self.sql(|c| f(c))
    }

    /// [`SqliteStore::read`] on the connection itself (migrations' tests, schema checks).
    pub fn sql<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, DaemonError>,
    ) -> Result<T, DaemonError> {
        let mut f = Some(f);
        let grouped = GROUP.with(|g| {
            let g = g.borrow();
            let group = g
                .as_ref()
                .filter(|g| std::ptr::eq(g.store, &*self.shared))?;
            Some((f.take().expect("read runs once"))(&group.conn))
        });
        match grouped {
            Some(r) => r,
            None => self.alone(f.take().expect("read runs once")),
        }
    }

    /// Commits a single event with no other change.
    pub fn append(&self, ev: NewEvent) -> Result<i64, DaemonError> {
        let (result, id) = self.write_logged(|_, evs| {
            evs.push(ev);
            Ok(Ok(()))
        })?;
        result.map(|()| id)
    }

    /// Counters, the log's size and the commit signal.
    pub fn signals(&self) -> &Arc<Signals> {
        &self.shared.signals
    }

    /// Runs `f` on the connection from a thread that is not running a group: waits until
    /// the store thread has handed the connection back.
    fn alone<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, DaemonError>,
    ) -> Result<T, DaemonError> {
        let mut slot = self.shared.conn.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(conn) = slot.as_ref() {
                return f(conn);
            }
            slot = self
                .shared
                .returned
                .wait(slot)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        // Not joined: the last reference may be dropped on the store thread itself. The
        // thread finishes the jobs queued before this message, then exits.
        let _ = self
            .jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(Msg::Stop);
    }
}

/// What one write did, before its commit: its result, events, last event id and their bytes.
struct Done<T> {
    result: Result<T, DaemonError>,
    events: Vec<NewEvent>,
    last: i64,
    bytes: u64,
}

/// One write of a group, in its own savepoint so that its failure undoes only itself.
fn in_savepoint<T>(
    group: &mut Group,
    f: impl FnOnce(&Connection) -> Result<Done<T>, DaemonError>,
) -> Result<(Result<T, DaemonError>, i64), DaemonError> {
    let conn = &group.conn;
    conn.prepare_cached("SAVEPOINT tc_write")?.execute([])?;
    match f(conn) {
        Ok(Done {
            result,
            events,
            last,
            bytes,
        }) => {
            conn.prepare_cached("RELEASE tc_write")?.execute([])?;
            group.events.extend(events);
            group.event_bytes += bytes;
            if last > 0 {
                group.last_event = last;
            }
            Ok((result, last))
        }
        Err(e) => {
            conn.prepare_cached("ROLLBACK TO tc_write")?.execute([])?;
            conn.prepare_cached("RELEASE tc_write")?.execute([])?;
            Err(e)
        }
    }
}

/// The store thread: one group per wake-up, every queued job in it.
fn store_thread(shared: &Shared, rx: &mpsc::Receiver<Msg>) {
    let mut stopping = false;
    while !stopping {
        let Ok(first) = rx.recv() else { return };
        let mut jobs = Vec::new();
        match first {
            Msg::Job(j) => jobs.push(j),
            Msg::Stop => return,
        }
        while jobs.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(Msg::Job(j)) => jobs.push(j),
                Ok(Msg::Stop) => {
                    stopping = true;
                    break;
                }
                Err(_) => break,
            }
        }
        let n = jobs.len();
        run_group(shared, jobs);
        shared
            .on_thread
            .fetch_sub(n, std::sync::atomic::Ordering::SeqCst);
    }
}

fn run_group(shared: &Shared, jobs: Vec<Job>) {
    let conn = {
        let mut slot = shared.conn.lock().unwrap_or_else(|p| p.into_inner());
        slot.take()
            .expect("only the store thread takes the connection")
    };
    let begun = conn.execute_batch("BEGIN IMMEDIATE");
    GROUP.with(|g| {
        *g.borrow_mut() = Some(Group {
            store: shared,
            conn,
            events: Vec::new(),
            last_event: 0,
            event_bytes: 0,
        })
    });
    let mut deliveries = Vec::with_capacity(jobs.len());
    let mut panicked = false;
    let mut failure = begun.err();
    if failure.is_none() {
        for job in jobs {
            // A panicking job leaves the transaction in an unknown state: the whole group
            // is rolled back and every job in it gets an error.
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)) {
                Ok(d) => deliveries.push(d),
                Err(_) => panicked = true,
            }
        }
    }
    let group = GROUP
        .with(|g| g.borrow_mut().take())
        .expect("the group is still set");
    if failure.is_none() {
        let end = if panicked { "ROLLBACK" } else { "COMMIT" };
        if let Err(e) = group.conn.execute_batch(end) {
            let _ = group.conn.execute_batch("ROLLBACK");
            failure = Some(e);
        } else if panicked {
            failure = Some(rusqlite::Error::InvalidQuery);
        }
    }
    let Group {
        conn,
        events,
        last_event,
        event_bytes,
        ..
    } = group;
    {
        let mut slot = shared.conn.lock().unwrap_or_else(|p| p.into_inner());
        *slot = Some(conn);
        shared.returned.notify_all();
    }
    if let Some(e) = &failure {
        tracing::error!(error = %e, "a group of writes could not be committed");
    } else {
        shared.signals.count(&events, event_bytes);
        shared.signals.committed(last_event);
    }
    // Only now, with the group durable (or known lost), does any job learn its result.
    for d in deliveries {
        d(failure.as_ref());
    }
}

/// A fresh copy of a commit failure for each job of the group (rusqlite errors are not
/// `Clone`); SQLite's code is kept so disk-full still maps to `resource_exhausted`.
fn copy_error(e: &rusqlite::Error) -> DaemonError {
    match e {
        rusqlite::Error::SqliteFailure(f, m) => DaemonError::Store(StoreError::Sqlite(
            rusqlite::Error::SqliteFailure(*f, m.clone()),
        )),
        other => DaemonError::Internal(format!("commit failed: {other}")),
    }
}

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
        // Each migration's pages would sit in the WAL until the automatic checkpoint: a
        // fresh database would start with ~200 KiB of copies, more than a nearly full disk
        // may hold. Moved into the database at once, the WAL never holds more than one.
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        tracing::info!(version = i + 1, "database migrated");
    }
    Ok(())
}

/// Inserts `ev`; returns its id and its size as retention counts it.
fn insert_event(tx: &Connection, ev: &NewEvent) -> Result<(i64, u64), DaemonError> {
    let detail = ev.detail_text();
    let id = tx.insert_event(ev, &detail, tc_core::now_ms())?;
    Ok((id, ev.size(&detail)))
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
