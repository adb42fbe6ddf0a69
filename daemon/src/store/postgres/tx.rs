//! One PostgreSQL transaction as the rules see it ([`PgTx`]): a leased connection this
//! thread drives, each query run to completion (the rules are synchronous).

use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use super::driven::Driven;
use super::held::Held;
use crate::store::queries::Q;

/// The parameters of one query.
pub type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// A [`crate::store::rows`] reader of one PostgreSQL row.
pub type Read<T> = fn(&Row) -> Q<T>;

/// A connection inside `BEGIN … COMMIT` (or autocommit, for reads).
pub struct PgTx<'a> {
    pub(super) conn: &'a Driven,
    /// `BEGIN` is due: it is pipelined with the first statement (one round trip less).
    pub(super) begin: std::cell::Cell<bool>,
    /// Where to note events a read left above the horizon (`horizon.rs`).
    pub(super) held: Option<&'a Held>,
}

impl<'a> PgTx<'a> {
    /// A transaction's handle on `client` (`begun`: send `BEGIN` with the first statement;
    /// false for autocommit reads).
    pub fn new(conn: &'a Driven, begun: bool) -> PgTx<'a> {
        PgTx {
            conn,
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
    fn run<T: Send>(
        &self,
        f: impl std::future::Future<Output = Result<T, tokio_postgres::Error>> + Send,
    ) -> Q<T> {
        let (begun, r) = self
            .conn
            .run(futures_util::future::join(self.due_begin(), f));
        begun?;
        Ok(r?)
    }

    /// The transaction's `BEGIN` if it is still due (then no longer), else nothing. A
    /// request goes out on its first poll, so what is joined after this leaves behind it.
    fn due_begin(
        &self,
    ) -> impl std::future::Future<Output = Result<(), tokio_postgres::Error>> + Send + '_ {
        let begin = self.begin.replace(false).then(|| {
            self.client()
                .batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED")
        });
        async move {
            match begin {
                Some(b) => b.await,
                None => Ok(()),
            }
        }
    }

    fn client(&self) -> &tokio_postgres::Client {
        self.conn.client()
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
        let begin = self.due_begin();
        let rows =
            futures_util::future::join_all(params.iter().map(|p| self.client().query_one(&st, p)));
        let commit = self.client().batch_execute("COMMIT");
        // join3 polls its futures in this order, and a request goes out on its first
        // poll: BEGIN, the statements and COMMIT leave back to back.
        let (begun, rows, commit) = self
            .conn
            .run(futures_util::future::join3(begin, rows, commit));
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

    /// `sql` prepared once per connection. A cached statement costs nothing, so a due
    /// `BEGIN` still goes out with the first real statement.
    fn stmt(&self, sql: &str) -> Q<Statement> {
        if let Some(st) = self.conn.cached(sql) {
            return Ok(st);
        }
        let st = self.run(self.client().prepare(sql))?;
        self.conn.remember(sql, &st);
        Ok(st)
    }

    /// At most one row.
    pub fn opt(&self, sql: &str, params: Params<'_>) -> Q<Option<Row>> {
        let st = self.stmt(sql)?;
        self.run(self.client().query_opt(&st, params))
    }

    /// Exactly one row.
    pub fn one(&self, sql: &str, params: Params<'_>) -> Q<Row> {
        let st = self.stmt(sql)?;
        self.run(self.client().query_one(&st, params))
    }

    /// Every row.
    pub fn all(&self, sql: &str, params: Params<'_>) -> Q<Vec<Row>> {
        let st = self.stmt(sql)?;
        self.run(self.client().query(&st, params))
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
        self.run(self.client().execute(&st, params))
    }

    /// Statements without parameters (BEGIN, COMMIT, ROLLBACK).
    pub fn batch(&self, sql: &str) -> Q<()> {
        self.run(self.client().batch_execute(sql))
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
