//! The SQLite backend (the default): the engine ([`Store`]), its schema, and the typed
//! queries of [`crate::store::queries`] implemented on a `rusqlite::Connection`.

mod engine;
mod events;
mod factors;
mod page;
mod raised;
pub mod schema;
mod tokens;

pub use engine::SqliteStore;
pub use events::EVENT_BYTES;
pub use schema::{MIGRATIONS, SCHEMA_VERSION};

use crate::store::queries::Q;

/// Queries whose rows a [`crate::store::rows`] reader maps, on a cached statement.
pub(super) trait Select {
    /// The first row `sql` yields for `params`, read by `read`.
    fn first<T>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        read: impl Fn(&rusqlite::Row<'_>) -> Q<T>,
    ) -> Q<Option<T>>;

    /// Every row `sql` yields for `params`, each read by `read`.
    fn every<T>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        read: impl Fn(&rusqlite::Row<'_>) -> Q<T>,
    ) -> Q<Vec<T>>;
}

impl Select for rusqlite::Connection {
    fn first<T>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        read: impl Fn(&rusqlite::Row<'_>) -> Q<T>,
    ) -> Q<Option<T>> {
        let mut st = self.prepare_cached(sql)?;
        let mut rows = st.query(params)?;
        rows.next()?.map(read).transpose()
    }

    fn every<T>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        read: impl Fn(&rusqlite::Row<'_>) -> Q<T>,
    ) -> Q<Vec<T>> {
        let mut st = self.prepare_cached(sql)?;
        let mut rows = st.query(params)?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            out.push(read(r)?);
        }
        Ok(out)
    }
}
