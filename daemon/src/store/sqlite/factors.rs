//! SQLite: the `factors` table of [`FactorQueries`] (one TOTP factor per human uid; the
//! group's `BEGIN IMMEDIATE` already serialises its read-modify-write).

use rusqlite::{params, Connection, OptionalExtension};

use crate::store::queries::{FactorQueries, FactorRow, Q};

impl FactorQueries for Connection {
    fn load_factor(&self, uid: u32, _for_update: bool) -> Q<Option<FactorRow>> {
        Ok(self
            .prepare_cached(
                "SELECT secret, confirmed, last_step, failures, next_try_at, locked, enrolled_at
                 FROM factors WHERE uid = ?1",
            )?
            .query_row(params![uid], |r| {
                Ok(FactorRow {
                    secret: r.get(0)?,
                    confirmed: r.get(1)?,
                    last_step: r.get(2)?,
                    failures: r.get(3)?,
                    next_try_at: r.get(4)?,
                    locked: r.get(5)?,
                    enrolled_at: r.get(6)?,
                })
            })
            .optional()?)
    }

    fn save_factor(&self, uid: u32, row: &FactorRow) -> Q<()> {
        self.prepare_cached(
            "INSERT OR REPLACE INTO factors
               (uid, secret, confirmed, last_step, failures, next_try_at, locked, enrolled_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?
        .execute(params![
            uid,
            row.secret,
            row.confirmed,
            row.last_step,
            row.failures,
            row.next_try_at,
            row.locked,
            row.enrolled_at
        ])?;
        Ok(())
    }
}
