//! PostgreSQL: [`TokenQueries`]. Single use across replicas is the conditional UPDATE
//! (`... AND consumed_at IS NULL`) and the unique insert of a state's nonce: under READ
//! COMMITTED a second writer waits for the first's row lock, re-reads the row, and
//! finds nothing to change.

use super::tx::PgTx;
use crate::record::Binding;
use crate::store::queries::{NewToken, RedemptionRow, TokenQueries, TokenRow, Q};
use crate::store::rows::{self, REDEMPTION_COLS, TOKEN_COLS};

impl TokenQueries for PgTx<'_> {
    fn token_by_hash(&self, hash: &[u8]) -> Q<Option<TokenRow>> {
        let sql = format!("SELECT {TOKEN_COLS} FROM tokens WHERE token_hash = $1");
        self.opt_as(&sql, &[&hash], rows::token_row)
    }

    fn token_by_id(&self, id: i64) -> Q<Option<TokenRow>> {
        let sql = format!("SELECT {TOKEN_COLS} FROM tokens WHERE id = $1");
        self.opt_as(&sql, &[&id], rows::token_row)
    }

    fn insert_token(&self, t: &NewToken<'_>) -> Q<i64> {
        let b = t.binding;
        let row = self.one(
            "INSERT INTO tokens (token_hash, vault, tool, caller, args_hash, state_fp, created_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
            &[&t.hash, &b.vault, &b.tool, &b.caller, &b.args_hash, &t.state_fp, &t.created_at, &t.expires_at],
        )?;
        Ok(row.try_get(0)?)
    }

    fn spend_token(&self, id: i64, now: i64, redemption: Option<(&str, i64)>) -> Q<bool> {
        let n = match redemption {
            None => self.exec(
                "UPDATE tokens SET consumed_at = $2 WHERE id = $1 AND consumed_at IS NULL",
                &[&id, &now],
            )?,
            Some((rid, seq)) => self.exec(
                "UPDATE tokens SET consumed_at = $2, redemption_id = $3, redeemed = $4,
                   released_at = NULL, final_at = NULL
                 WHERE id = $1 AND consumed_at IS NULL",
                &[&id, &now, &rid, &seq],
            )?,
        };
        Ok(n == 1)
    }

    fn void_token(&self, id: i64, now: i64) -> Q<()> {
        self.spend_token(id, now, None).map(|_| ())
    }

    fn legacy_redemption(&self, _redemption_id: &str) -> Q<Option<i64>> {
        // A PostgreSQL ledger never issued pre-schema-3 ids.
        Ok(None)
    }

    fn redemption_of(&self, id: i64) -> Q<Option<RedemptionRow>> {
        let sql = format!("SELECT {REDEMPTION_COLS} FROM tokens WHERE id = $1");
        self.opt_as(&sql, &[&id], rows::redemption_row)
    }

    fn release_token(&self, id: i64, redemption_id: &str, now: i64) -> Q<u64> {
        self.exec(
            "UPDATE tokens SET consumed_at = NULL, released_at = $3
             WHERE id = $1 AND redemption_id = $2 AND released_at IS NULL AND final_at IS NULL",
            &[&id, &redemption_id, &now],
        )
    }

    fn finalize_redemption(&self, id: i64, rid: &str, b: &Binding, now: i64) -> Q<u64> {
        self.exec(
            "UPDATE tokens SET final_at = $3
             WHERE id = $1 AND redemption_id = $2 AND final_at IS NULL AND released_at IS NULL
               AND vault = $4 AND tool = $5 AND caller = $6 AND args_hash = $7",
            &[&id, &rid, &now, &b.vault, &b.tool, &b.caller, &b.args_hash],
        )
    }

    fn void_call_tokens(&self, b: &Binding, now: i64) -> Q<u64> {
        self.exec(
            "UPDATE tokens SET consumed_at = $5
             WHERE vault = $1 AND tool = $2 AND caller = $3 AND args_hash = $4 AND consumed_at IS NULL",
            &[&b.vault, &b.tool, &b.caller, &b.args_hash, &now],
        )
    }

    fn delete_unspent_tokens(&self) -> Q<u64> {
        self.exec("DELETE FROM tokens WHERE consumed_at IS NULL", &[])
    }

    fn live_tokens(&self, now: i64) -> Q<u64> {
        let r = self.one(
            "SELECT count(*) FROM tokens WHERE consumed_at IS NULL AND expires_at > $1",
            &[&now],
        )?;
        Ok(r.try_get::<_, i64>(0)? as u64)
    }

    fn collect_tokens(&self, old: i64) -> Q<u64> {
        self.exec(
            "DELETE FROM tokens WHERE expires_at < $1
               AND (consumed_at IS NULL OR consumed_at < $1)
               AND (released_at IS NULL OR released_at < $1)
               AND id < (SELECT max(id) FROM tokens)",
            &[&old],
        )
    }

    fn consume_state(&self, nonce: &str, now: i64, expires_at: i64) -> Q<bool> {
        Ok(self.exec(
            "INSERT INTO consumed_states (nonce, consumed_at, expires_at) VALUES ($1, $2, $3)
             ON CONFLICT (nonce) DO NOTHING",
            &[&nonce, &now, &expires_at],
        )? == 1)
    }

    fn collect_states(&self, before: i64) -> Q<()> {
        self.exec(
            "DELETE FROM consumed_states WHERE expires_at <= $1",
            &[&before],
        )
        .map(|_| ())
    }
}
