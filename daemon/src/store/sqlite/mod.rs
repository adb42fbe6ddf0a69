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
