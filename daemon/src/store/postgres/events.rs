//! PostgreSQL: [`EventQueries`]. An event's id is its transaction's id << 16 plus its
//! rank (`tc_append_event`); reads in id order stop at the horizon (`schema::HORIZON`).

use tokio_postgres::types::ToSql;

use super::schema::{HORIZON, PRUNE_LOCK};
use super::tx::{uid, PgTx};
use crate::record::{EventRow, NewEvent};
use crate::store::queries::{EventQueries, EventSize, HistoryRow, Q};
use crate::store::rows::{self, EVENT_COLS, HISTORY_COLS};

/// One event's size as retention counts it ([`NewEvent::size`] counts inserts alike).
const EVENT_BYTES: &str = "(octet_length(kind) + octet_length(vault) + octet_length(tool)
    + octet_length(caller) + octet_length(args_hash) + octet_length(state_fp)
    + octet_length(detail) + 64)";

/// Appends one event with an id in its transaction's range; takes [`append_params`].
pub(super) const APPEND_EVENT: &str = "SELECT tc_append_event($1, $2, $3, $4, $5, $6, $7, $8, $9)";

/// [`APPEND_EVENT`]'s parameters for `ev`, in `tc_append_event`'s order (`owner`: its
/// owner's uid as stored, [`uid`]).
pub(super) fn append_params<'a>(
    at_ms: &'a i64,
    ev: &'a NewEvent,
    detail: &'a (dyn ToSql + Sync),
    owner: &'a Option<i64>,
) -> [&'a (dyn ToSql + Sync); 9] {
    [
        at_ms,
        &ev.kind,
        &ev.vault,
        &ev.tool,
        &ev.caller,
        &ev.args_hash,
        &ev.state_fp,
        detail,
        owner,
    ]
}

impl EventQueries for PgTx<'_> {
    fn insert_event(&self, ev: &NewEvent, detail: &str, at_ms: i64) -> Q<i64> {
        let owner = ev.owner_uid().map(uid);
        let r = self.one(APPEND_EVENT, &append_params(&at_ms, ev, &detail, &owner))?;
        Ok(r.try_get(0)?)
    }

    /// Only events below the horizon: an event above it may have a neighbour with a
    /// lower id whose transaction has not committed yet, and the caller's next read
    /// starts past whatever this one returns.
    fn events_after(&self, after: i64, limit: u32, owner: Option<u32>) -> Q<Vec<EventRow>> {
        let owner = owner.map(uid);
        let sql = format!(
            "SELECT {EVENT_COLS}, {HORIZON} AS tc_horizon FROM events
             WHERE id > $1 AND ($3::BIGINT IS NULL OR owner_uid = $3) ORDER BY id LIMIT $2"
        );
        self.below_horizon(&sql, &[&after, &i64::from(limit), &owner], rows::event_row)
    }

    /// Ids are sparse here (transaction ids), so the live rows plus the pruned ones.
    fn events_ever(&self) -> Q<i64> {
        Ok(self
            .one(
                "SELECT ((SELECT count(*) FROM events)
                   + (SELECT coalesce(sum(n), 0) FROM events_pruned))::BIGINT",
                &[],
            )?
            .try_get(0)?)
    }

    fn history(&self, kinds: &[&str], limit: u32, owner: Option<u32>) -> Q<Vec<HistoryRow>> {
        let owner = owner.map(uid);
        let sql = format!(
            "SELECT {HISTORY_COLS} FROM events
             WHERE kind = ANY($1) AND ($3::BIGINT IS NULL OR owner_uid = $3)
             ORDER BY id DESC LIMIT $2"
        );
        self.all_as(
            &sql,
            &[&kinds, &i64::from(limit), &owner],
            rows::history_row,
        )
    }

    /// Only events below the horizon, so that everything up to the last one returned is
    /// committed: `delete_events_through` then deletes exactly these rows, never one a
    /// follower has not been able to read yet (nor one uncounted).
    fn oldest_events(&self, limit: u32) -> Q<Vec<EventSize>> {
        let sql = format!(
            "SELECT id, at_ms, kind, {EVENT_BYTES}::BIGINT, {HORIZON} AS tc_horizon FROM events
             WHERE id < (SELECT max(id) FROM events) ORDER BY id LIMIT $1"
        );
        self.below_horizon(&sql, &[&i64::from(limit)], rows::event_size)
    }

    fn delete_events_through(&self, id: i64) -> Q<()> {
        self.exec("DELETE FROM events WHERE id <= $1", &[&id])
            .map(|_| ())
    }

    fn count_pruned(&self, kind: &str, reason: &str) -> Q<()> {
        self.exec(
            "INSERT INTO events_pruned (kind, reason, n) VALUES ($1, $2, 1)
             ON CONFLICT (kind, reason) DO UPDATE SET n = events_pruned.n + 1",
            &[&kind, &reason],
        )
        .map(|_| ())
    }

    fn event_totals(&self) -> Q<Vec<(String, u64, String)>> {
        let rows = self.all(
            "SELECT kind, sum(n)::BIGINT, '' FROM (SELECT kind, count(*) AS n FROM events GROUP BY kind
               UNION ALL SELECT kind, n FROM events_pruned) k GROUP BY kind
             UNION ALL SELECT '', sum(n)::BIGINT, reason FROM events_pruned GROUP BY reason",
            &[],
        )?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get::<_, i64>(1)? as u64, r.try_get(2)?)))
            .collect()
    }

    fn event_bytes(&self) -> Q<u64> {
        let sql = format!("SELECT coalesce(sum({EVENT_BYTES}), 0)::BIGINT FROM events");
        Ok(self.one(&sql, &[])?.try_get::<_, i64>(0)? as u64)
    }

    fn try_collect_lock(&self) -> Q<bool> {
        let r = self.one(
            "SELECT pg_try_advisory_xact_lock($1, hashtext(current_schema()))",
            &[&PRUNE_LOCK],
        )?;
        Ok(r.try_get(0)?)
    }
}
