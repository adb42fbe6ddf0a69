//! SQLite: the token and consumed-state queries of [`TokenQueries`] over the group's
//! connection (one writer at a time: `BEGIN IMMEDIATE` serialises every write).

use rusqlite::{params, Connection, OptionalExtension};

use super::{change, select};
use crate::record::Binding;
use crate::store::queries::{NewToken, RedemptionRow, TokenQueries, TokenRow, Q};
use crate::store::rows::{self, REDEMPTION_COLS, TOKEN_COLS};

impl TokenQueries for Connection {
    fn token_by_hash(&self, hash: &[u8]) -> Q<Option<TokenRow>> {
        let sql = format!("SELECT {TOKEN_COLS} FROM tokens WHERE token_hash = ?1");
        Ok(select(self, &sql, params![hash], |r| rows::token_row(r))?
            .into_iter()
            .next())
    }

    fn token_by_id(&self, id: i64) -> Q<Option<TokenRow>> {
        let sql = format!("SELECT {TOKEN_COLS} FROM tokens WHERE id = ?1");
        Ok(select(self, &sql, params![id], |r| rows::token_row(r))?
            .into_iter()
            .next())
    }

    fn insert_token(&self, t: &NewToken<'_>) -> Q<i64> {
        let b = t.binding;
        change(self, "INSERT INTO tokens (token_hash, vault, tool, caller, args_hash, state_fp, created_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)", params![
            t.hash, b.vault, b.tool, b.caller, b.args_hash, t.state_fp, t.created_at, t.expires_at
        ])?;
        Ok(self.last_insert_rowid())
    }

    fn spend_token(&self, id: i64, now: i64, redemption: Option<(&str, i64)>) -> Q<bool> {
        let n = match redemption {
            // Spent without a redemption: the latest one (if any) stays as it was.
            None => change(
                self,
                "UPDATE tokens SET consumed_at = ?2 WHERE id = ?1 AND consumed_at IS NULL",
                params![id, now],
            )?,
            Some((rid, seq)) => change(
                self,
                "UPDATE tokens SET consumed_at = ?2, redemption_id = ?3, redeemed = ?4,
                       released_at = NULL, final_at = NULL
                     WHERE id = ?1 AND consumed_at IS NULL",
                params![id, now, rid, seq],
            )?,
        };
        Ok(n == 1)
    }

    fn void_token(&self, id: i64, now: i64) -> Q<()> {
        self.spend_token(id, now, None).map(|_| ())
    }

    fn legacy_redemption(&self, redemption_id: &str) -> Q<Option<i64>> {
        Ok(self
            .prepare_cached("SELECT token_id FROM legacy_redemptions WHERE id = ?1")?
            .query_row(params![redemption_id], |r| r.get(0))
            .optional()?)
    }

    fn redemption_of(&self, id: i64) -> Q<Option<RedemptionRow>> {
        let sql = format!("SELECT {REDEMPTION_COLS} FROM tokens WHERE id = ?1");
        Ok(
            select(self, &sql, params![id], |r| rows::redemption_row(r))?
                .into_iter()
                .next(),
        )
    }

    fn release_token(&self, id: i64, redemption_id: &str, now: i64) -> Q<u64> {
        Ok(change(
            self,
            "UPDATE tokens SET consumed_at = NULL, released_at = ?3
                 WHERE id = ?1 AND redemption_id = ?2 AND released_at IS NULL AND final_at IS NULL",
            params![id, redemption_id, now],
        )? as u64)
    }

    fn finalize_redemption(&self, id: i64, redemption_id: &str, b: &Binding, now: i64) -> Q<u64> {
        Ok(change(
            self,
            "UPDATE tokens SET final_at = ?3
                 WHERE id = ?1 AND redemption_id = ?2 AND final_at IS NULL AND released_at IS NULL
                   AND vault = ?4 AND tool = ?5 AND caller = ?6 AND args_hash = ?7",
            params![
                id,
                redemption_id,
                now,
                b.vault,
                b.tool,
                b.caller,
                b.args_hash
            ],
        )? as u64)
    }

    fn void_call_tokens(&self, b: &Binding, now: i64) -> Q<u64> {
        Ok(change(self, "UPDATE tokens SET consumed_at = ?5
                 WHERE vault = ?1 AND tool = ?2 AND caller = ?3 AND args_hash = ?4 AND consumed_at IS NULL", params![b.vault, b.tool, b.caller, b.args_hash, now])? as u64)
    }

    fn delete_unspent_tokens(&self) -> Q<u64> {
        Ok(change(self, "DELETE FROM tokens WHERE consumed_at IS NULL", [])? as u64)
    }

    fn live_tokens(&self, now: i64) -> Q<u64> {
        Ok(self
            .prepare_cached(
                "SELECT count(*) FROM tokens WHERE consumed_at IS NULL AND expires_at > ?1",
            )?
            .query_row(params![now], |r| r.get::<_, i64>(0))? as u64)
    }

    fn collect_tokens(&self, old: i64) -> Q<u64> {
        // The newest row stays: ids are max(id)+1, and a reused id would make an old
        // redemption id name a new token.
        let n = change(
            self,
            "DELETE FROM tokens WHERE expires_at < ?1
                   AND (consumed_at IS NULL OR consumed_at < ?1)
                   AND (released_at IS NULL OR released_at < ?1)
                   AND id < (SELECT max(id) FROM tokens)",
            params![old],
        )?;
        if n > 0 {
            change(
                self,
                "DELETE FROM legacy_redemptions WHERE token_id NOT IN (SELECT id FROM tokens)",
                [],
            )?;
        }
        Ok(n as u64)
    }

    fn consume_state(&self, nonce: &str, now: i64, expires_at: i64) -> Q<bool> {
        Ok(change(
            self,
            "INSERT INTO consumed_states (nonce, consumed_at, expires_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (nonce) DO NOTHING",
            params![nonce, now, expires_at],
        )? == 1)
    }

    fn collect_states(&self, before: i64) -> Q<()> {
        change(
            self,
            "DELETE FROM consumed_states WHERE expires_at <= ?1",
            params![before],
        )?;
        Ok(())
    }
}
