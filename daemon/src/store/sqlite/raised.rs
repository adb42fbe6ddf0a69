//! SQLite: the raised-request queries of [`RaisedQueries`] (the `raised` table, one row
//! per (vault, caller, args_hash)).

use rusqlite::{params, Connection};

use super::{change, select};
use crate::record::Binding;
use crate::store::queries::{NewRaised, PendingRow, RaisedQueries, RaisedRow, Q};
use crate::store::rows::{self, PENDING_COLS, RAISED_COLS};

impl RaisedQueries for Connection {
    fn raised_by_call(&self, b: &Binding) -> Q<Option<RaisedRow>> {
        let sql = format!(
            "SELECT {RAISED_COLS} FROM raised WHERE vault = ?1 AND caller = ?2 AND args_hash = ?3"
        );
        Ok(
            select(self, &sql, params![b.vault, b.caller, b.args_hash], |r| {
                rows::raised_row(r)
            })?
            .into_iter()
            .next(),
        )
    }

    fn raised_by_id(&self, id: &str) -> Q<Option<RaisedRow>> {
        let sql = format!("SELECT {RAISED_COLS} FROM raised WHERE request_id = ?1");
        Ok(select(self, &sql, params![id], |r| rows::raised_row(r))?
            .into_iter()
            .next())
    }

    fn upsert_raised(&self, r: &NewRaised<'_>) -> Q<()> {
        let b = r.binding;
        change(self, "INSERT INTO raised (vault, caller, args_hash, tool, state_fp, summary, raised_at, expires_at,
               request_id, args_json, covers, raised_by_uid, status, reason, token_id, expired_logged, preview,
               real_paths, grant_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 'pending', '', NULL, 0, ?13, ?14, '')
             ON CONFLICT (vault, caller, args_hash) DO UPDATE SET
               tool = excluded.tool, state_fp = excluded.state_fp, summary = excluded.summary,
               raised_at = excluded.raised_at, expires_at = excluded.expires_at,
               request_id = excluded.request_id, args_json = excluded.args_json,
               covers = excluded.covers, raised_by_uid = excluded.raised_by_uid,
               status = 'pending', reason = '', token_id = NULL, expired_logged = 0,
               preview = excluded.preview, real_paths = excluded.real_paths, grant_id = ''", params![
            b.vault, b.caller, b.args_hash, b.tool, r.state_fp, r.summary, r.raised_at,
            r.expires_at, r.request_id, r.args_json, r.covers, r.uid, r.preview, r.real_paths
        ])?;
        Ok(())
    }

    fn delete_raised(&self, b: &Binding) -> Q<()> {
        change(
            self,
            "DELETE FROM raised WHERE vault = ?1 AND caller = ?2 AND args_hash = ?3",
            params![b.vault, b.caller, b.args_hash],
        )?;
        Ok(())
    }

    fn mark_expired_logged(&self, b: &Binding) -> Q<()> {
        change(self, "UPDATE raised SET expired_logged = 1 WHERE vault = ?1 AND caller = ?2 AND args_hash = ?3", params![b.vault, b.caller, b.args_hash])?;
        Ok(())
    }

    fn count_raised(&self) -> Q<i64> {
        Ok(self
            .prepare_cached("SELECT count(*) FROM raised")?
            .query_row([], |r| r.get(0))?)
    }

    fn live_raised(&self, now: i64) -> Q<u64> {
        Ok(self
            .prepare_cached("SELECT count(*) FROM raised WHERE expires_at > ?1")?
            .query_row(params![now], |r| r.get::<_, i64>(0))? as u64)
    }

    fn set_approved(&self, id: &str, token_id: i64, exp: i64, grant: &str) -> Q<()> {
        change(self, "UPDATE raised SET status = 'approved', token_id = ?2, expires_at = ?3, grant_id = ?4 WHERE request_id = ?1", params![id, token_id, exp, grant])?;
        Ok(())
    }

    fn set_declined(&self, id: &str, reason: &str, until: i64) -> Q<()> {
        change(
            self,
            "UPDATE raised SET status = 'declined', reason = ?2, token_id = NULL,
               expires_at = max(expires_at, ?3) WHERE request_id = ?1",
            params![id, reason, until],
        )?;
        Ok(())
    }

    fn unlogged_expired(&self, cutoff: i64) -> Q<Vec<RaisedRow>> {
        let sql = format!(
            "SELECT {RAISED_COLS} FROM raised
                 WHERE expires_at <= ?1 AND status = 'pending' AND expired_logged = 0"
        );
        select(self, &sql, params![cutoff], |r| rows::raised_row(r))
    }

    fn delete_raised_before(&self, cutoff: i64) -> Q<()> {
        change(
            self,
            "DELETE FROM raised WHERE expires_at <= ?1",
            params![cutoff],
        )?;
        Ok(())
    }

    fn pending_rows(&self, since: i64, vault: &str) -> Q<Vec<PendingRow>> {
        let sql = format!(
            "SELECT {PENDING_COLS} FROM raised r
             WHERE r.expires_at > ?1 AND (?2 = '' OR r.vault = ?2) ORDER BY r.raised_at DESC"
        );
        select(self, &sql, params![since, vault], |r| rows::pending_row(r))
    }
}
