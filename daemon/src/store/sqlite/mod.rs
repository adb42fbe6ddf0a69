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

/// The first row `st` yields for `params`, read by `read` ([`crate::store::rows`]).
pub(super) fn first<T>(
    mut st: rusqlite::CachedStatement<'_>,
    params: impl rusqlite::Params,
    read: impl Fn(&rusqlite::Row<'_>) -> Q<T>,
) -> Q<Option<T>> {
    let mut rows = st.query(params)?;
    rows.next()?.map(read).transpose()
}

/// Every row `st` yields for `params`, each read by `read`.
pub(super) fn every<T>(
    mut st: rusqlite::CachedStatement<'_>,
    params: impl rusqlite::Params,
    read: impl Fn(&rusqlite::Row<'_>) -> Q<T>,
) -> Q<Vec<T>> {
    let mut rows = st.query(params)?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(read(r)?);
    }
    Ok(out)
}
