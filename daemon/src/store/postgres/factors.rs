//! PostgreSQL: [`FactorQueries`]. A check reads its factor `FOR UPDATE`: replicas take
//! turns on one human's factor, so a step accepted on one is `factor_replayed` on the
//! next and failures add up across replicas toward the lock.

use super::tx::{uid, PgTx};
use crate::store::queries::{FactorQueries, FactorRow, Q};

impl FactorQueries for PgTx<'_> {
    fn load_factor(&self, who: u32, for_update: bool) -> Q<Option<FactorRow>> {
        let sql = if for_update {
            "SELECT secret, confirmed, last_step, failures, next_try_at, locked, enrolled_at
             FROM factors WHERE uid = $1 FOR UPDATE"
        } else {
            "SELECT secret, confirmed, last_step, failures, next_try_at, locked, enrolled_at
             FROM factors WHERE uid = $1"
        };
        let Some(r) = self.opt(sql, &[&uid(who)])? else {
            return Ok(None);
        };
        Ok(Some(FactorRow {
            secret: r.try_get(0)?,
            confirmed: r.try_get(1)?,
            last_step: r.try_get(2)?,
            failures: u32::try_from(r.try_get::<_, i64>(3)?).unwrap_or(u32::MAX),
            next_try_at: r.try_get(4)?,
            locked: r.try_get(5)?,
            enrolled_at: r.try_get(6)?,
        }))
    }

    fn save_factor(&self, who: u32, row: &FactorRow) -> Q<()> {
        self.exec(
            "INSERT INTO factors
               (uid, secret, confirmed, last_step, failures, next_try_at, locked, enrolled_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (uid) DO UPDATE SET secret = excluded.secret,
               confirmed = excluded.confirmed, last_step = excluded.last_step,
               failures = excluded.failures, next_try_at = excluded.next_try_at,
               locked = excluded.locked, enrolled_at = excluded.enrolled_at",
            &[
                &uid(who),
                &row.secret,
                &row.confirmed,
                &row.last_step,
                &i64::from(row.failures),
                &row.next_try_at,
                &row.locked,
                &row.enrolled_at,
            ],
        )
        .map(|_| ())
    }
}
