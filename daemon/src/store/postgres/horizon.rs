//! The events horizon (`schema::HORIZON`): reads of the log in id order stop below it,
//! waiting a little for events above it, and a watcher wakes `--follow` streams once
//! events that were held back pass it (their writers' older neighbours may commit silently).

use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;

use super::held::{Held, SETTLE_MAX};
use super::schema::HORIZON;
use super::tx::{Params, PgTx, Read};
use crate::store::queries::Q;
use crate::store::signals::Signals;

const FIRST_PAUSE: Duration = Duration::from_millis(1);
const MAX_PAUSE: Duration = Duration::from_millis(50);
/// The watcher's polling, once a read gave up waiting (a long transaction elsewhere on
/// the server holds the horizon back).
const WATCH_FIRST: Duration = Duration::from_millis(20);
const WATCH_MAX: Duration = Duration::from_secs(1);

impl PgTx<'_> {
    /// The rows of `sql` that are below the horizon, read by `read`. `sql` returns rows
    /// in id order with `id` first and the horizon, as `tc_horizon`, last (both of the
    /// statement's own snapshot). While a row is above it, reads again, for up to
    /// [`SETTLE_MAX`]; then returns the rows below and tells the watcher which id to
    /// wake the streams for.
    pub fn below_horizon<T>(&self, sql: &str, params: Params<'_>, read: Read<T>) -> Q<Vec<T>> {
        let settle = self.held.map_or(SETTLE_MAX, Held::settle);
        let start = Instant::now();
        let mut pause = FIRST_PAUSE;
        loop {
            let rows = self.all(sql, params)?;
            let mut below = Vec::with_capacity(rows.len());
            let mut held = None;
            for r in &rows {
                let (id, horizon): (i64, i64) = (r.try_get(0)?, r.try_get("tc_horizon")?);
                if id >= horizon {
                    held = match rows.last() {
                        Some(last) => Some(last.try_get::<_, i64>(0)?),
                        None => None,
                    };
                    break;
                }
                below.push(read(r)?);
            }
            let Some(held) = held else { return Ok(below) };
            if start.elapsed() >= settle {
                if let Some(h) = self.held {
                    h.note(held);
                }
                return Ok(below);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }
}

/// Until the runtime ends: whenever a read gave up on events above the horizon, polls
/// it (backing off) and, once it passed them, tells the streams those ids are readable.
pub async fn watch(pool: Pool, held: Arc<Held>, signals: Arc<Signals>) {
    let sql = format!("SELECT {HORIZON}");
    loop {
        held.noted().await;
        let mut pause = WATCH_FIRST;
        loop {
            let target = held.newest();
            if target == 0 {
                break;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(WATCH_MAX);
            let horizon = match pool.get().await {
                Ok(c) => c
                    .query_one(&sql, &[])
                    .await
                    .and_then(|r| r.try_get::<_, i64>(0)),
                Err(_) => continue, // the store is unreachable: try again later
            };
            if matches!(horizon, Ok(h) if h > target) {
                // A newer held id noted meanwhile keeps the loop going.
                held.passed(target);
                signals.committed(target);
                pause = WATCH_FIRST;
            }
        }
    }
}
