//! The SQLite backend (the default): the engine ([`Store`]), its schema, and the typed
//! queries of [`crate::store::queries`] implemented on a `rusqlite::Connection`.

mod engine;
mod events;
mod factors;
mod grants;
mod page;
mod raised;
pub mod schema;
mod tokens;

pub use engine::SqliteStore;
pub use events::EVENT_BYTES;
pub use schema::{MIGRATIONS, SCHEMA_VERSION};

use crate::store::queries::Q;

/// Every row `sql` yields for `params`, each read by `read` (a [`crate::store::rows`]
/// reader), over a cached statement.
pub(super) fn select<T>(
    c: &rusqlite::Connection,
    sql: &str,
    params: impl rusqlite::Params,
    read: impl Fn(&rusqlite::Row<'_>) -> Q<T>,
) -> Q<Vec<T>> {
    let mut st = c.prepare_cached(sql)?;
    let mut rows = st.query(params)?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(read(r)?);
    }
    Ok(out)
}

/// Runs a change over a cached statement; the number of rows it changed.
pub(super) fn change(
    c: &rusqlite::Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Q<usize> {
    Ok(c.prepare_cached(sql)?.execute(params)?)
}
