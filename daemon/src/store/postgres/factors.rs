//! PostgreSQL: [`FactorQueries`]. A check reads its factor `FOR UPDATE`: replicas take
//! turns on one human's factor, so a step accepted on one is `factor_replayed` on the
//! next and failures add up across replicas toward the lock.

use super::tx::{uid, PgTx};
use crate::store::queries::{FactorQueries, FactorRow, Q};
use crate::store::rows::{self, FACTOR_COLS};

impl FactorQueries for PgTx<'_> {
    fn load_factor(&self, who: u32, for_update: bool) -> Q<Option<FactorRow>> {
        let lock = if for_update { " FOR UPDATE" } else { "" };
        let sql = format!("SELECT {FACTOR_COLS} FROM factors WHERE uid = $1{lock}");
        self.opt_as(&sql, &[&uid(who)], rows::factor_row)
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
