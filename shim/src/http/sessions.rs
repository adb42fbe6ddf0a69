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

pub struct Table {
    sessions: Mutex<HashMap<String, Arc<Conv>>>,
    callers: Mutex<HashMap<String, Arc<Conv>>>,
    /// Sessions being opened (their downstream started, `initialize` not yet answered):
    /// counted against the cap, so a burst of `initialize`s cannot start more servers.
    opening: AtomicUsize,
    max: usize,
    idle: u64,
}

/// A place in the table held while a session opens; given back when dropped.
pub struct Slot<'a>(&'a Table);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.opening.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Table {
    pub fn new(max: usize, idle_secs: u64) -> Table {
        Table {
            sessions: Mutex::new(HashMap::new()),
            callers: Mutex::new(HashMap::new()),
            opening: AtomicUsize::new(0),
            max,
            idle: idle_secs,
        }
    }

    fn lock<'a>(
        m: &'a Mutex<HashMap<String, Arc<Conv>>>,
    ) -> std::sync::MutexGuard<'a, HashMap<String, Arc<Conv>>> {
        m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Open conversations. One lock at a time: `caller_conv` nests callers → sessions, so
    /// nothing may hold sessions while it takes callers.
    fn len(&self) -> usize {
        let sessions = Self::lock(&self.sessions).len();
        let callers = Self::lock(&self.callers).len();
        sessions + callers
    }

    /// A place for one more session, held while it opens (before its downstream starts).
    pub fn reserve(&self) -> Option<Slot<'_>> {
        let before = self.opening.fetch_add(1, Ordering::AcqRel);
        let slot = Slot(self);
        (self.len() + before < self.max).then_some(slot)
    }

    /// Adds a legacy session in the place `slot` held; its id is 128 random bits, hex.
    pub fn add_session(&self, conv: Arc<Conv>, slot: Slot<'_>) -> String {
        let mut b = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut b);
        let id = hex::encode(b);
        Self::lock(&self.sessions).insert(id.clone(), conv);
        drop(slot);
        id
    }

    /// The session `id` if it exists, is live and belongs to `caller`. Another caller's
    /// session reads as unknown (404): an id alone proves nothing.
    pub fn session(&self, id: &str, caller: &str) -> Option<Arc<Conv>> {
        let mut t = Self::lock(&self.sessions);
        let c = t.get(id)?;
        if c.is_gone() {
            t.remove(id);
            return None;
        }
        (c.caller == caller).then(|| Arc::clone(c))
    }

    /// Ends the session `id` of `caller`; false if there is none.
    pub fn end_session(&self, id: &str, caller: &str) -> bool {
        let mut t = Self::lock(&self.sessions);
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
        let mut t = Self::lock(&self.callers);
        if let Some(c) = t.get(caller).filter(|c| !c.is_gone()) {
            return Ok(Ok(Arc::clone(c)));
        }
        let opening = self.opening.load(Ordering::Acquire);
        if Self::lock(&self.sessions).len() + t.len() + opening >= self.max {
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
                let mut t = Self::lock(m);
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
            let all: Vec<Arc<Conv>> = Self::lock(m).drain().map(|(_, c)| c).collect();
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
        let t = Table::new(2, 60);
        let a = t.reserve().expect("first place");
        let b = t.reserve().expect("second place");
        assert!(
            t.reserve().is_none(),
            "a third opening must not start a server"
        );
        drop(a);
        let c = t.reserve().expect("a place given back is free again");
        assert!(t.reserve().is_none());
        drop((b, c));
        assert_eq!(t.opening.load(Ordering::Acquire), 0);
    }
}
