//! The rules' connections: at most `pool_size` [`Driven`] connections, leased to one
//! blocking thread at a time, opened on demand and replaced when they end.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::connector::Connector;
use super::driven::Driven;
use crate::error::StoreError;

/// How long a rule waits for a free connection before the store is "unavailable".
const WAIT: Duration = Duration::from_secs(10);

/// A fixed-size pool of connections that the leasing thread drives itself.
pub struct Pool {
    connector: Connector,
    max: usize,
    state: Mutex<State>,
    freed: Condvar,
}

struct State {
    idle: Vec<Driven>,
    /// Connections open or being opened, leased or idle.
    open: usize,
}

/// One connection, leased; back to the pool on drop unless [`Lease::discard`]ed.
pub struct Lease<'a> {
    pool: &'a Pool,
    conn: Option<Driven>,
}

impl Pool {
    pub fn new(connector: Connector, max: usize) -> Pool {
        Pool {
            connector,
            max: max.max(1),
            state: Mutex::new(State {
                idle: Vec::new(),
                open: 0,
            }),
            freed: Condvar::new(),
        }
    }

    /// A live connection: an idle one that has not ended, else a new one while fewer than
    /// `max` are open, else the first one freed within [`WAIT`].
    pub fn get(&self) -> Result<Lease<'_>, StoreError> {
        let deadline = Instant::now() + WAIT;
        let mut st = self.lock();
        loop {
            if let Some(c) = st.idle.pop() {
                drop(st);
                if !c.ended() {
                    return Ok(self.lease(c));
                }
                drop(c); // outside the lock: its runtime shuts down
                st = self.lock();
                st.open -= 1;
                continue;
            }
            if st.open < self.max {
                st.open += 1;
                drop(st);
                return match Driven::connect(&self.connector) {
                    Ok(c) => Ok(self.lease(c)),
                    Err(e) => {
                        self.closed();
                        Err(e)
                    }
                };
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(StoreError::Unavailable(format!(
                    "no connection came free within {} s (all {} of pool_size are busy)",
                    WAIT.as_secs(),
                    self.max
                )));
            }
            st = self
                .freed
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn lease(&self, c: Driven) -> Lease<'_> {
        Lease {
            pool: self,
            conn: Some(c),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One connection less (discarded, or failed to open): a waiter may open another.
    fn closed(&self) {
        self.lock().open -= 1;
        self.freed.notify_one();
    }
}

impl Lease<'_> {
    pub fn conn(&self) -> &Driven {
        self.conn.as_ref().expect("leased until dropped")
    }

    /// Never hands this connection back: its state is unknown (a failed rollback, a
    /// commit whose outcome is unknown).
    pub fn discard(mut self) {
        drop(self.conn.take());
        self.pool.closed();
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let Some(c) = self.conn.take() else { return };
        if std::thread::panicking() {
            // A rule panicked, maybe inside BEGIN … : the next lease must not inherit
            // (and commit) what it wrote.
            drop(c);
            self.pool.closed();
            return;
        }
        self.pool.lock().idle.push(c);
        self.pool.freed.notify_one();
    }
}
