//! SQLite: the `factors` table of [`FactorQueries`] (one TOTP factor per human uid; the
//! group's `BEGIN IMMEDIATE` already serialises its read-modify-write).

use rusqlite::{params, Connection};

use super::{change, select};
use crate::store::queries::{FactorQueries, FactorRow, Q};
use crate::store::rows::{self, FACTOR_COLS};

impl FactorQueries for Connection {
    fn load_factor(&self, uid: u32, _for_update: bool) -> Q<Option<FactorRow>> {
        let sql = format!("SELECT {FACTOR_COLS} FROM factors WHERE uid = ?1");
        Ok(select(self, &sql, params![uid], |r| rows::factor_row(r))?
            .into_iter()
            .next())
    }

    fn save_factor(&self, uid: u32, row: &FactorRow) -> Q<()> {
        change(
            self,
            "INSERT OR REPLACE INTO factors
               (uid, secret, confirmed, last_step, failures, next_try_at, locked, enrolled_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                uid,
                row.secret,
                row.confirmed,
                row.last_step,
                row.failures,
                row.next_try_at,
                row.locked,
                row.enrolled_at
            ],
        )?;
        Ok(())
    }
}
