//! SQLite: the audit log's queries of [`EventQueries`]: inserts, reads, and what
//! retention weighs, deletes and counts as pruned.

use rusqlite::{params, Connection};

use super::{change, select};
use crate::record::{EventRow, NewEvent};
use crate::store::queries::{EventQueries, EventSize, HistoryRow, Q};
use crate::store::rows::{self, EVENT_COLS, HISTORY_COLS};

/// The SQL expression of one event's size as retention counts it: the UTF-8 bytes of its
/// fields plus [`crate::record::ROW_OVERHEAD`] ([`NewEvent::size`] counts inserts alike).
pub const EVENT_BYTES: &str = "(length(CAST(kind AS BLOB)) + length(CAST(vault AS BLOB))
    + length(CAST(tool AS BLOB)) + length(CAST(caller AS BLOB))
    + length(CAST(args_hash AS BLOB)) + length(CAST(state_fp AS BLOB))
    + length(CAST(detail AS BLOB)) + 64)";

impl EventQueries for Connection {
    fn insert_event(&self, ev: &NewEvent, detail: &str, at_ms: i64) -> Q<i64> {
        change(self, "INSERT INTO events (at_ms, kind, vault, tool, caller, args_hash, state_fp, detail, owner_uid)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)", params![
            at_ms,
            ev.kind,
            ev.vault,
            ev.tool,
            ev.caller,
            ev.args_hash,
            ev.state_fp,
            detail,
            ev.owner_uid()
        ])?;
        Ok(self.last_insert_rowid())
    }

    fn events_after(&self, after: i64, limit: u32, owner: Option<u32>) -> Q<Vec<EventRow>> {
        let sql = format!(
            "SELECT {EVENT_COLS} FROM events
                 WHERE id > ?1 AND (?3 IS NULL OR owner_uid = ?3) ORDER BY id LIMIT ?2"
        );
        select(self, &sql, params![after, limit, owner], |r| {
            rows::event_row(r)
        })
    }

    /// Ids are `max(id) + 1` and retention keeps the newest row: the newest id.
    fn events_ever(&self) -> Q<i64> {
        Ok(self
            .prepare_cached("SELECT coalesce(max(id), 0) FROM events")?
            .query_row([], |r| r.get(0))?)
    }

    fn history(&self, kinds: &[&str], limit: u32, owner: Option<u32>) -> Q<Vec<HistoryRow>> {
        let kinds = serde_json::to_string(kinds).unwrap_or_else(|_| "[]".into());
        let sql = format!(
            "SELECT {HISTORY_COLS} FROM events
                 WHERE kind IN (SELECT value FROM json_each(?1)) AND (?3 IS NULL OR owner_uid = ?3)
                 ORDER BY id DESC LIMIT ?2"
        );
        select(self, &sql, params![kinds, limit, owner], |r| {
            rows::history_row(r)
        })
    }

    fn oldest_events(&self, limit: u32) -> Q<Vec<EventSize>> {
        let sql = format!(
            "SELECT id, at_ms, kind, {EVENT_BYTES} FROM events
                 WHERE id < (SELECT max(id) FROM events) ORDER BY id LIMIT ?1"
        );
        select(self, &sql, params![limit], |r| rows::event_size(r))
    }

    fn delete_events_through(&self, id: i64) -> Q<()> {
        change(self, "DELETE FROM events WHERE id <= ?1", params![id])?;
        Ok(())
    }

    fn count_pruned(&self, kind: &str, reason: &str) -> Q<()> {
        change(
            self,
            "INSERT INTO events_pruned (kind, reason, n) VALUES (?1, ?2, 1)
             ON CONFLICT (kind, reason) DO UPDATE SET n = n + 1",
            params![kind, reason],
        )?;
        Ok(())
    }

    fn event_totals(&self) -> Q<Vec<(String, u64, String)>> {
        let mut st = self.prepare_cached(
            "SELECT kind, sum(n), '' FROM (SELECT kind, count(*) AS n FROM events GROUP BY kind
               UNION ALL SELECT kind, n FROM events_pruned) GROUP BY kind
             UNION ALL SELECT '', sum(n), reason FROM events_pruned GROUP BY reason",
        )?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)? as u64,
                r.get::<_, String>(2)?,
            ))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn event_bytes(&self) -> Q<u64> {
        Ok(self.query_row(
            &format!("SELECT coalesce(sum({EVENT_BYTES}), 0) FROM events"),
            [],
            |r| r.get::<_, i64>(0),
        )? as u64)
    }

    fn try_collect_lock(&self) -> Q<bool> {
        // One process owns the file: nobody else collects.
        Ok(true)
    }
}
