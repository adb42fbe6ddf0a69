//! One PostgreSQL transaction as the rules see it ([`PgTx`]): a pooled connection and the
//! backend's runtime, each query run to completion (the rules are synchronous).

use deadpool_postgres::Object;
use tokio::runtime::Handle;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use crate::store::queries::Q;

/// The parameters of one query.
pub type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// A connection inside `BEGIN … COMMIT` (or autocommit, for reads).
pub struct PgTx<'a> {
    pub(super) client: &'a Object,
    pub(super) rt: &'a Handle,
}

impl PgTx<'_> {
    fn stmt(&self, sql: &str) -> Q<Statement> {
        Ok(self.rt.block_on(self.client.prepare_cached(sql))?)
    }

    /// At most one row.
    pub fn opt(&self, sql: &str, params: Params<'_>) -> Q<Option<Row>> {
        let st = self.stmt(sql)?;
        Ok(self.rt.block_on(self.client.query_opt(&st, params))?)
    }

    /// Exactly one row.
    pub fn one(&self, sql: &str, params: Params<'_>) -> Q<Row> {
        let st = self.stmt(sql)?;
        Ok(self.rt.block_on(self.client.query_one(&st, params))?)
    }

    /// Every row.
    pub fn all(&self, sql: &str, params: Params<'_>) -> Q<Vec<Row>> {
        let st = self.stmt(sql)?;
        Ok(self.rt.block_on(self.client.query(&st, params))?)
    }

    /// Rows changed.
    pub fn exec(&self, sql: &str, params: Params<'_>) -> Q<u64> {
        let st = self.stmt(sql)?;
        Ok(self.rt.block_on(self.client.execute(&st, params))?)
    }

    /// Statements without parameters (BEGIN, COMMIT, ROLLBACK).
    pub fn batch(&self, sql: &str) -> Q<()> {
        Ok(self.rt.block_on(self.client.batch_execute(sql))?)
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
