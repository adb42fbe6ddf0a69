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

/// The four binding columns of a row, from column `at` on (vault, tool, caller, args_hash).
pub(super) fn binding_at(
    r: &rusqlite::Row<'_>,
    at: usize,
) -> rusqlite::Result<crate::record::Binding> {
    Ok(crate::record::Binding {
        vault: r.get(at)?,
        tool: r.get(at + 1)?,
        caller: r.get(at + 2)?,
        args_hash: r.get(at + 3)?,
    })
}
