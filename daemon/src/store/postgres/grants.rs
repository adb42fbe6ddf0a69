//! PostgreSQL: [`GrantQueries`]. A use is one conditional UPDATE: under READ COMMITTED a
//! second replica's update waits for the first's row lock, re-reads the row and finds the
//! last use gone, so a use count holds across replicas.

use super::tx::{uid, PgTx};
use crate::store::queries::{GrantQueries, GrantRow, Q};
use crate::store::rows::{self, GRANT_COLS};

/// Live at the time in parameter `now`: not revoked, not expired, uses left (or no count).
fn live(now: &str) -> String {
    format!("revoked_at IS NULL AND expires_at > {now} AND (uses_left IS NULL OR uses_left > 0)")
}

impl GrantQueries for PgTx<'_> {
    fn insert_grant(&self, g: &GrantRow) -> Q<()> {
        self.exec(
            "INSERT INTO grants (id, vault, tool, caller, scope, given_at, expires_at, uses_left,
               used, last_used_at, revoked_at, ended_logged, request_id, given_by_uid, raised_by_uid)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, NULL, NULL, false, $9, $10, $11)",
            &[
                &g.id, &g.vault, &g.tool, &g.caller, &g.scope, &g.given_at, &g.expires_at,
                &g.uses_left, &g.request_id, &g.given_by.map(uid), &g.raised_by.map(uid),
            ],
        )?;
        Ok(())
    }

    fn grant_by_id(&self, id: &str) -> Q<Option<GrantRow>> {
        let sql = format!("SELECT {GRANT_COLS} FROM grants WHERE id = $1 FOR UPDATE");
        self.opt_as(&sql, &[&id], rows::grant_row)
    }

    fn live_grants(&self, vault: &str, caller: &str, tool: &str, now: i64) -> Q<Vec<GrantRow>> {
        let sql = format!(
            "SELECT {GRANT_COLS} FROM grants
             WHERE vault = $1 AND caller = $2 AND tool = $3 AND {} ORDER BY given_at",
            live("$4")
        );
        self.all_as(&sql, &[&vault, &caller, &tool, &now], rows::grant_row)
    }

    fn use_grant(&self, id: &str, now: i64) -> Q<bool> {
        let sql = format!(
            "UPDATE grants SET used = used + 1, last_used_at = $2,
               uses_left = CASE WHEN uses_left IS NULL THEN NULL ELSE uses_left - 1 END
             WHERE id = $1 AND {}",
            live("$2")
        );
        Ok(self.exec(&sql, &[&id, &now])? == 1)
    }

    fn revoke_grant(&self, id: &str, now: i64) -> Q<bool> {
        let n = self.exec(
            "UPDATE grants SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
            &[&id, &now],
        )?;
        Ok(n == 1)
    }

    fn list_grants(&self, since: i64) -> Q<Vec<GrantRow>> {
        let sql = format!(
            "SELECT {GRANT_COLS} FROM grants
             WHERE expires_at > $1 OR revoked_at > $1 OR last_used_at > $1 ORDER BY given_at DESC"
        );
        self.all_as(&sql, &[&since], rows::grant_row)
    }

    fn unlogged_ended_grants(&self, now: i64) -> Q<Vec<GrantRow>> {
        let sql = format!(
            "SELECT {GRANT_COLS} FROM grants WHERE NOT ended_logged AND revoked_at IS NULL
               AND (expires_at <= $1 OR uses_left = 0) FOR UPDATE"
        );
        self.all_as(&sql, &[&now], rows::grant_row)
    }

    fn mark_grant_ended(&self, id: &str) -> Q<()> {
        self.exec(
            "UPDATE grants SET ended_logged = true WHERE id = $1",
            &[&id],
        )?;
        Ok(())
    }

    fn delete_grants_before(&self, before: i64) -> Q<()> {
        self.exec(
            "DELETE FROM grants WHERE expires_at <= $1 OR revoked_at <= $1",
            &[&before],
        )?;
        Ok(())
    }
}
