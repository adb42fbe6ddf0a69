//! PostgreSQL: [`RaisedQueries`]. A write reads its raised row `FOR UPDATE`, so two
//! replicas answering the same request (approve, decline, a retry) take turns on it.

use super::tx::{uid, PgTx};
use crate::record::Binding;
use crate::store::queries::{NewRaised, PendingRow, RaisedQueries, RaisedRow, Q};
use crate::store::rows::{self, PENDING_COLS, RAISED_COLS};

impl RaisedQueries for PgTx<'_> {
    fn raised_by_call(&self, b: &Binding) -> Q<Option<RaisedRow>> {
        let sql = format!(
            "SELECT {RAISED_COLS} FROM raised WHERE vault = $1 AND caller = $2 AND args_hash = $3 FOR UPDATE"
        );
        self.opt_as(&sql, &[&b.vault, &b.caller, &b.args_hash], rows::raised_row)
    }

    fn raised_by_id(&self, id: &str) -> Q<Option<RaisedRow>> {
        let sql = format!("SELECT {RAISED_COLS} FROM raised WHERE request_id = $1 FOR UPDATE");
        self.opt_as(&sql, &[&id], rows::raised_row)
    }

    fn upsert_raised(&self, r: &NewRaised<'_>) -> Q<()> {
        let b = r.binding;
        let raiser = r.uid.map(uid);
        self.exec(
            "INSERT INTO raised (vault, caller, args_hash, tool, state_fp, summary, raised_at, expires_at,
               request_id, args_json, covers, raised_by_uid, status, reason, token_id, expired_logged, preview,
               real_paths, grant_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 'pending', '', NULL, false, $13, $14, '')
             ON CONFLICT (vault, caller, args_hash) DO UPDATE SET
               tool = excluded.tool, state_fp = excluded.state_fp, summary = excluded.summary,
               raised_at = excluded.raised_at, expires_at = excluded.expires_at,
               request_id = excluded.request_id, args_json = excluded.args_json,
               covers = excluded.covers, raised_by_uid = excluded.raised_by_uid,
               status = 'pending', reason = '', token_id = NULL, expired_logged = false,
               preview = excluded.preview, real_paths = excluded.real_paths, grant_id = ''",
            &[
                &b.vault, &b.caller, &b.args_hash, &b.tool, &r.state_fp, &r.summary, &r.raised_at,
                &r.expires_at, &r.request_id, &r.args_json, &r.covers, &raiser, &r.preview,
                &r.real_paths,
            ],
        )?;
        Ok(())
    }

    fn delete_raised(&self, b: &Binding) -> Q<()> {
        self.exec(
            "DELETE FROM raised WHERE vault = $1 AND caller = $2 AND args_hash = $3",
            &[&b.vault, &b.caller, &b.args_hash],
        )
        .map(|_| ())
    }

    fn mark_expired_logged(&self, b: &Binding) -> Q<()> {
        self.exec(
            "UPDATE raised SET expired_logged = true WHERE vault = $1 AND caller = $2 AND args_hash = $3",
            &[&b.vault, &b.caller, &b.args_hash],
        )
        .map(|_| ())
    }

    fn count_raised(&self) -> Q<i64> {
        Ok(self.one("SELECT count(*) FROM raised", &[])?.try_get(0)?)
    }

    fn live_raised(&self, now: i64) -> Q<u64> {
        let r = self.one("SELECT count(*) FROM raised WHERE expires_at > $1", &[&now])?;
        Ok(r.try_get::<_, i64>(0)? as u64)
    }

    fn set_approved(&self, id: &str, token_id: i64, exp: i64, grant: &str) -> Q<()> {
        self.exec(
            "UPDATE raised SET status = 'approved', token_id = $2, expires_at = $3, grant_id = $4
             WHERE request_id = $1",
            &[&id, &token_id, &exp, &grant],
        )
        .map(|_| ())
    }

    fn set_declined(&self, id: &str, reason: &str, until: i64) -> Q<()> {
        self.exec(
            "UPDATE raised SET status = 'declined', reason = $2, token_id = NULL,
               expires_at = GREATEST(expires_at, $3) WHERE request_id = $1",
            &[&id, &reason, &until],
        )
        .map(|_| ())
    }

    fn unlogged_expired(&self, cutoff: i64) -> Q<Vec<RaisedRow>> {
        let sql = format!(
            "SELECT {RAISED_COLS} FROM raised
             WHERE expires_at <= $1 AND status = 'pending' AND NOT expired_logged FOR UPDATE"
        );
        self.all_as(&sql, &[&cutoff], rows::raised_row)
    }

    fn delete_raised_before(&self, cutoff: i64) -> Q<()> {
        self.exec("DELETE FROM raised WHERE expires_at <= $1", &[&cutoff])
            .map(|_| ())
    }

    fn pending_rows(&self, since: i64, vault: &str) -> Q<Vec<PendingRow>> {
        let sql = format!(
            "SELECT {PENDING_COLS} FROM raised r
             WHERE r.expires_at > $1 AND ($2 = '' OR r.vault = $2) ORDER BY r.raised_at DESC"
        );
        self.all_as(&sql, &[&since, &vault], rows::pending_row)
    }
}
