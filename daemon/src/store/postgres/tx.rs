//! One PostgreSQL transaction as the rules see it ([`PgTx`]): a pooled connection and the
//! backend's runtime, each query run to completion (the rules are synchronous).

use deadpool_postgres::Object;
use tokio::runtime::Handle;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use super::horizon::Held;
use crate::store::queries::Q;

/// The parameters of one query.
pub type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// A [`crate::store::rows`] reader of one PostgreSQL row.
pub type Read<T> = fn(&Row) -> Q<T>;

/// A connection inside `BEGIN … COMMIT` (or autocommit, for reads).
pub struct PgTx<'a> {
    pub(super) client: &'a Object,
    pub(super) rt: &'a Handle,
    /// `BEGIN` is due: it is pipelined with the first statement (one round trip less).
    pub(super) begin: std::cell::Cell<bool>,
    /// Where to note events a read left above the horizon (`horizon.rs`).
    pub(super) held: Option<&'a Held>,
}

/// Runs `f` to completion on this thread. The connections live on the store's runtime
/// (entered here for the pool's timers), so this works on any thread: a blocking thread
/// of tcd's runtime, a test's runtime worker, or no runtime at all. Unconstrained: on a
/// runtime worker an exhausted co-op budget would defer the wake-up to that runtime,
/// which this very call is blocking.
pub fn wait<F: std::future::Future>(rt: &Handle, f: F) -> F::Output {
    let _entered = rt.enter();
    futures_executor::block_on(tokio::task::unconstrained(f))
}

impl<'a> PgTx<'a> {
    /// A transaction's handle on `client` (`begun`: send `BEGIN` with the first statement;
    /// false for autocommit reads).
    pub fn new(client: &'a Object, rt: &'a Handle, begun: bool) -> PgTx<'a> {
        PgTx {
            client,
            rt,
            begin: std::cell::Cell::new(begun),
            held: None,
        }
    }

    /// Tells the watcher of events its reads left above the horizon.
    pub fn noting(mut self, held: &'a Held) -> PgTx<'a> {
        self.held = Some(held);
        self
    }

    /// Runs `f`, with the due `BEGIN` sent ahead of it on the same connection (requests
    /// go out in the order they are first polled).
    fn run<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Q<T> {
        if self.begin.replace(false) {
            let begin = self
                .client
                .batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED");
            let (b, r) = wait(self.rt, futures_util::future::join(begin, f));
            b?;
            return Ok(r?);
        }
        Ok(wait(self.rt, f)?)
    }

    /// Runs `sql` once per parameter list, then `COMMIT`, pipelined: sent back to back
    /// (with a due `BEGIN` ahead), so the whole tail of a transaction costs one round trip.
    /// Returns each statement's row, then the commit's outcome. A statement that fails
    /// aborts the transaction and its `COMMIT` then rolls back (PostgreSQL answers it
    /// without an error): the caller must treat any failed row as nothing committed.
    pub fn all_then_commit(&self, sql: &str, params: &[Params<'_>]) -> (Vec<Q<Row>>, Q<()>) {
        let st = match self.stmt(sql) {
            Ok(st) => st,
            // Nothing of the tail was sent: roll back (a failed rollback reads as an
            // unknown outcome, and the connection is not reused).
            Err(e) => return (vec![Err(e)], self.batch("ROLLBACK")),
        };
        let begin = self.begin.replace(false).then(|| {
            self.client
                .batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED")
        });
        let rows =
            futures_util::future::join_all(params.iter().map(|p| self.client.query_one(&st, p)));
        let commit = self.client.batch_execute("COMMIT");
        let begin = async {
            match begin {
                Some(b) => b.await,
                None => Ok(()),
            }
        };
        // join3 polls its futures in this order, and a request goes out on its first
        // poll: BEGIN, the statements and COMMIT leave back to back.
        let (begun, rows, commit) = wait(self.rt, futures_util::future::join3(begin, rows, commit));
        let mut rows: Vec<Q<Row>> = rows.into_iter().map(|r| r.map_err(Into::into)).collect();
        if let Err(e) = begun {
            rows.insert(0, Err(e.into()));
        }
        (rows, commit.map_err(Into::into))
    }

    /// Whether anything was sent since the transaction began (else there is nothing to
    /// commit or roll back).
    pub fn started(&self) -> bool {
        !self.begin.get()
    }

    fn stmt(&self, sql: &str) -> Q<Statement> {
        self.run(self.client.prepare_cached(sql))
    }

    /// At most one row.
    pub fn opt(&self, sql: &str, params: Params<'_>) -> Q<Option<Row>> {
        let st = self.stmt(sql)?;
        self.run(self.client.query_opt(&st, params))
    }

    /// Exactly one row.
    pub fn one(&self, sql: &str, params: Params<'_>) -> Q<Row> {
        let st = self.stmt(sql)?;
        self.run(self.client.query_one(&st, params))
    }

    /// Every row.
    pub fn all(&self, sql: &str, params: Params<'_>) -> Q<Vec<Row>> {
        let st = self.stmt(sql)?;
        self.run(self.client.query(&st, params))
    }

    /// At most one row, read by `read` ([`crate::store::rows`]).
    pub fn opt_as<T>(&self, sql: &str, params: Params<'_>, read: Read<T>) -> Q<Option<T>> {
        self.opt(sql, params)?.as_ref().map(read).transpose()
    }

    /// Every row, each read by `read`.
    pub fn all_as<T>(&self, sql: &str, params: Params<'_>, read: Read<T>) -> Q<Vec<T>> {
        self.all(sql, params)?.iter().map(read).collect()
    }

    /// Rows changed.
    pub fn exec(&self, sql: &str, params: Params<'_>) -> Q<u64> {
        let st = self.stmt(sql)?;
        self.run(self.client.execute(&st, params))
    }

    /// Statements without parameters (BEGIN, COMMIT, ROLLBACK).
    pub fn batch(&self, sql: &str) -> Q<()> {
        self.run(self.client.batch_execute(sql))
    }
}

/// A uid as stored (BIGINT).
pub fn uid(u: u32) -> i64 {
    i64::from(u)
}

/// A stored uid back (`None` for NULL or anything out of range).
pub fn uid_of(v: Option<i64>) -> Option<u32> {
    v.and_then(|v| u32::try_from(v).ok())
}
