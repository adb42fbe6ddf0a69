//! SQLite: the `grants` table of [`GrantQueries`] (the group's `BEGIN IMMEDIATE` already
//! serialises a use's read-modify-write; the conditional UPDATE keeps it single anyway).

use rusqlite::{params, Connection};

use super::{change, select};
use crate::store::queries::{GrantQueries, GrantRow, Q};
use crate::store::rows::{self, GRANT_COLS};

/// Live at the time in parameter `now`: not revoked, not expired, uses left (or no count).
fn live(now: &str) -> String {
    format!("revoked_at IS NULL AND expires_at > {now} AND (uses_left IS NULL OR uses_left > 0)")
}

impl GrantQueries for Connection {
    fn insert_grant(&self, g: &GrantRow) -> Q<()> {
        change(
            self,
            "INSERT INTO grants (id, vault, tool, caller, scope, given_at, expires_at, uses_left,
               used, last_used_at, revoked_at, ended_logged, request_id, given_by_uid, raised_by_uid)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0, NULL, NULL, 0, ?9, ?10, ?11)",
            params![
                g.id, g.vault, g.tool, g.caller, g.scope, g.given_at, g.expires_at, g.uses_left,
                g.request_id, g.given_by, g.raised_by
            ],
        )?;
        Ok(())
    }

    fn grant_by_id(&self, id: &str) -> Q<Option<GrantRow>> {
        let sql = format!("SELECT {GRANT_COLS} FROM grants WHERE id = ?1");
        Ok(select(self, &sql, params![id], |r| rows::grant_row(r))?
            .into_iter()
            .next())
    }

    fn live_grants(&self, vault: &str, caller: &str, tool: &str, now: i64) -> Q<Vec<GrantRow>> {
        let sql = format!(
            "SELECT {GRANT_COLS} FROM grants
             WHERE vault = ?1 AND caller = ?2 AND tool = ?3 AND {} ORDER BY given_at",
            live("?4")
        );
        select(self, &sql, params![vault, caller, tool, now], |r| {
            rows::grant_row(r)
        })
    }

    fn use_grant(&self, id: &str, now: i64) -> Q<bool> {
        let sql = format!(
            "UPDATE grants SET used = used + 1, last_used_at = ?2,
               uses_left = CASE WHEN uses_left IS NULL THEN NULL ELSE uses_left - 1 END
             WHERE id = ?1 AND {}",
            live("?2")
        );
        Ok(change(self, &sql, params![id, now])? == 1)
    }

    fn revoke_grant(&self, id: &str, now: i64) -> Q<bool> {
        let n = change(
            self,
            "UPDATE grants SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
            params![id, now],
        )?;
        Ok(n == 1)
    }

    fn list_grants(&self, since: i64) -> Q<Vec<GrantRow>> {
        let sql = format!(
            "SELECT {GRANT_COLS} FROM grants
             WHERE expires_at > ?1 OR revoked_at > ?1 OR last_used_at > ?1 ORDER BY given_at DESC"
        );
        select(self, &sql, params![since], |r| rows::grant_row(r))
    }

    fn unlogged_ended_grants(&self, now: i64) -> Q<Vec<GrantRow>> {
        let sql = format!(
            "SELECT {GRANT_COLS} FROM grants WHERE ended_logged = 0 AND revoked_at IS NULL
               AND (expires_at <= ?1 OR uses_left = 0)"
        );
        select(self, &sql, params![now], |r| rows::grant_row(r))
    }

    fn mark_grant_ended(&self, id: &str) -> Q<()> {
        change(
            self,
            "UPDATE grants SET ended_logged = 1 WHERE id = ?1",
            params![id],
        )?;
        Ok(())
    }

    fn delete_grants_before(&self, before: i64) -> Q<()> {
        change(
            self,
            "DELETE FROM grants WHERE expires_at <= ?1 OR revoked_at <= ?1",
            params![before],
        )?;
        Ok(())
    }
}
