//! The HTTP front's conversations: legacy sessions by their `MCP-Session-Id`, stateless
//! callers by name; each bound to its caller, capped in number, expired when idle.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::RngCore;

use super::conv::Conv;

/// The table is full: the front answers 503.
#[derive(Debug)]
pub struct Full;

/// Why a session cannot be opened.
#[derive(Debug, PartialEq)]
pub enum NoRoom {
    /// Every place is taken (503).
    Table,
    /// This caller holds its share already (429): one caller cannot fill the table.
    Caller,
}

pub struct Table {
    sessions: Mutex<HashMap<String, Arc<Conv>>>,
    callers: Mutex<HashMap<String, Arc<Conv>>>,
    /// Sessions being opened (their downstream started, `initialize` not yet answered):
    /// counted against the cap, so a burst of `initialize`s cannot start more servers.
    opening: AtomicUsize,
    /// The same, by caller (for the per-caller quota).
    opening_by: Mutex<HashMap<String, usize>>,
    max: usize,
    per_caller: usize,
    idle: u64,
}

/// A place in the table held while a session of `caller` opens; given back when dropped.
pub struct Slot<'a> {
    table: &'a Table,
    caller: String,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.table.opening.fetch_sub(1, Ordering::AcqRel);
        let mut by = lock(&self.table.opening_by);
        if let Some(n) = by.get_mut(&self.caller) {
            *n -= 1;
            if *n == 0 {
                by.remove(&self.caller);
            }
        }
    }
}

/// Any of the table's maps, poisoned or not (a panic elsewhere leaves them consistent).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Table {
    pub fn new(max: usize, per_caller: usize, idle_secs: u64) -> Table {
        Table {
            sessions: Mutex::new(HashMap::new()),
            callers: Mutex::new(HashMap::new()),
            opening: AtomicUsize::new(0),
            opening_by: Mutex::new(HashMap::new()),
            max,
            per_caller,
            idle: idle_secs,
        }
    }

    /// Open conversations. One lock at a time: `caller_conv` nests callers → sessions, so
    /// nothing may hold sessions while it takes callers.
    fn len(&self) -> usize {
        let sessions = lock(&self.sessions).len();
        let callers = lock(&self.callers).len();
        sessions + callers
    }

    /// A place for one more session of `caller`, held while it opens (before its
    /// downstream starts): within the table's cap and the caller's share.
    pub fn reserve(&self, caller: &str) -> Result<Slot<'_>, NoRoom> {
        let before = self.opening.fetch_add(1, Ordering::AcqRel);
        let mine_opening = {
            let mut by = lock(&self.opening_by);
            let n = by.entry(caller.to_string()).or_insert(0);
            *n += 1;
            *n - 1
        };
        let slot = Slot {
            table: self,
            caller: caller.to_string(),
        };
        if self.len() + before >= self.max {
            return Err(NoRoom::Table);
        }
        let mine = lock(&self.sessions)
            .values()
            .filter(|c| c.caller == caller)
            .count();
        if mine + mine_opening >= self.per_caller {
            return Err(NoRoom::Caller);
        }
        Ok(slot)
    }

    /// Adds a legacy session in the place `slot` held; its id is 128 random bits, hex.
    pub fn add_session(&self, conv: Arc<Conv>, slot: Slot<'_>) -> String {
        let mut b = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut b);
        let id = hex::encode(b);
        lock(&self.sessions).insert(id.clone(), conv);
        drop(slot);
        id
    }

    /// The session `id` if it exists, is live and belongs to `caller`. Another caller's
    /// session reads as unknown (404): an id alone proves nothing.
    pub fn session(&self, id: &str, caller: &str) -> Option<Arc<Conv>> {
        let mut t = lock(&self.sessions);
        let c = t.get(id)?;
        if c.is_gone() {
            t.remove(id);
            return None;
        }
        (c.caller == caller).then(|| Arc::clone(c))
    }

    /// Ends the session `id` of `caller`; false if there is none.
    pub fn end_session(&self, id: &str, caller: &str) -> bool {
        let mut t = lock(&self.sessions);
        match t.get(id) {
            Some(c) if c.caller == caller => {
                let c = t.remove(id).expect("present");
                drop(t);
                c.close();
                true
            }
            _ => false,
        }
    }

    /// The stateless conversation of `caller`, opened by `open` when there is none.
    pub fn caller_conv(
        &self,
        caller: &str,
        open: impl FnOnce() -> anyhow::Result<Arc<Conv>>,
    ) -> anyhow::Result<Result<Arc<Conv>, Full>> {
        // Held across the look-up and the open, so two first requests of one caller
        // start one conversation, not two (the loser's exchange would be cut off).
        let mut t = lock(&self.callers);
        if let Some(c) = t.get(caller).filter(|c| !c.is_gone()) {
            return Ok(Ok(Arc::clone(c)));
        }
        let opening = self.opening.load(Ordering::Acquire);
        if lock(&self.sessions).len() + t.len() + opening >= self.max {
            return Ok(Err(Full));
        }
        let c = open()?;
        if let Some(old) = t.insert(caller.to_string(), Arc::clone(&c)) {
            old.close();
        }
        Ok(Ok(c))
    }

    /// Closes what has been idle past the configured time.
    pub fn sweep(&self) {
        for m in [&self.sessions, &self.callers] {
            let stale: Vec<Arc<Conv>> = {
                let mut t = lock(m);
                let keys: Vec<String> = t
                    .iter()
                    .filter(|(_, c)| c.is_gone() || c.idle_for(self.idle))
                    .map(|(k, _)| k.clone())
                    .collect();
                keys.iter().filter_map(|k| t.remove(k)).collect()
            };
            for c in stale {
                c.close();
            }
        }
    }

    /// Closes everything (shutdown).
    pub fn close_all(&self) {
        for m in [&self.sessions, &self.callers] {
            let all: Vec<Arc<Conv>> = lock(m).drain().map(|(_, c)| c).collect();
            for c in all {
                c.close();
            }
        }
    }

    /// Runs [`Table::sweep`] every `every` until the table is dropped.
    pub fn start_sweeper(self: &Arc<Self>, every: Duration) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match weak.upgrade() {
                    Some(t) => t.sweep(),
                    None => break,
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_being_opened_hold_their_place_against_the_cap() {
        let t = Table::new(2, 2, 60);
        let a = t.reserve("a").expect("first place");
        let b = t.reserve("b").expect("second place");
        assert_eq!(
            t.reserve("c").err(),
            Some(NoRoom::Table),
            "a third opening must not start a server"
        );
        drop(a);
        let c = t.reserve("c").expect("a place given back is free again");
        assert_eq!(t.reserve("a").err(), Some(NoRoom::Table));
        drop((b, c));
        assert_eq!(t.opening.load(Ordering::Acquire), 0);
        assert!(lock(&t.opening_by).is_empty());
    }

    #[test]
    fn one_caller_opening_sessions_stops_at_its_share() {
        let t = Table::new(10, 2, 60);
        let a1 = t.reserve("alice").unwrap();
        let _a2 = t.reserve("alice").unwrap();
        assert_eq!(t.reserve("alice").err(), Some(NoRoom::Caller));
        let _b = t.reserve("bob").expect("another caller still has room");
        drop(a1);
        assert!(t.reserve("alice").is_ok());
    }
}
