//! What forward has sent downstream and waits on: client requests by id (with their
//! barrier places), the shim's own requests, and the downstream's questions to the client.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::oneshot;

use crate::engine::barrier::{Place, Ticket};
use crate::engine::forward::rounds::Wrap;
use crate::engine::outcome::Ran;
use crate::wire::ids::{IdKey, IdTable};

/// What the answer to a forwarded client request needs done to it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in crate::engine) enum Pending {
    Plain,
    ToolsList,
    /// The client's own `initialize`: its answer fixes the downstream era as legacy.
    Initialize,
}

/// A client request forwarded downstream and not yet answered.
pub(in crate::engine) struct Forwarded {
    pub(in crate::engine) id: Value,
    pub(in crate::engine) kind: Pending,
    /// The method, when the request carried the modern envelope (its result must then
    /// be completed if the downstream is legacy).
    pub(in crate::engine) modern: Option<String>,
    /// A call of a tool with a gate entry: a round the downstream answers with is
    /// wrapped in our state (`continued.rs`).
    pub(in crate::engine) wrap: Option<Wrap>,
    /// An approved call: its outcome is recorded when its answer comes (or never does).
    pub(in crate::engine) ran: Option<Box<Ran>>,
    /// A `tools/call`'s place in the barrier, released when this entry goes away.
    pub(in crate::engine) place: Option<Place>,
    /// The client cancelled it and the grace timer runs (one timer per call, however many
    /// cancellations come).
    pub(in crate::engine) grace: bool,
}

impl Forwarded {
    /// A request forwarded as it came (no wrap, no barrier place).
    pub(in crate::engine) fn plain(id: &Value, kind: Pending, modern: Option<String>) -> Self {
        Forwarded {
            id: id.clone(),
            kind,
            modern,
            wrap: None,
            ran: None,
            place: None,
            grace: false,
        }
    }
}

/// Everything sent downstream that an answer is still awaited for.
#[derive(Default)]
pub(in crate::engine) struct Outstanding {
    /// Client requests forwarded downstream and not yet answered, by canonical id.
    pending: IdTable<Forwarded>,
    /// The shim's own requests to the downstream.
    internal: HashMap<String, oneshot::Sender<Value>>,
    /// Ids of the downstream's requests shown to the client and not yet answered: the only
    /// answers the client may send downstream.
    down_requests: HashSet<IdKey>,
    /// The downstream's stdout closed.
    child_gone: bool,
}

impl Outstanding {
    /// Notes a request sent (or about to be) downstream.
    pub(in crate::engine) fn forwarded(&mut self, k: IdKey, f: Forwarded) {
        self.pending.insert(k, f);
    }

    /// The forwarded request an answer is for (taken: answered once).
    pub(in crate::engine) fn answered(&mut self, k: &IdKey) -> Option<Forwarded> {
        self.pending.remove(k)
    }

    pub(in crate::engine) fn get(&self, k: &IdKey) -> Option<&Forwarded> {
        self.pending.get(k)
    }

    pub(in crate::engine) fn contains(&self, k: &IdKey) -> bool {
        self.pending.contains_key(k)
    }

    pub(in crate::engine) fn len(&self) -> usize {
        self.pending.len()
    }

    pub(in crate::engine) fn keys(&self) -> impl Iterator<Item = &IdKey> {
        self.pending.keys()
    }

    /// Forwarded requests older than `age`, taken out to make room.
    pub(in crate::engine) fn take_stale(&mut self, age: Duration) -> Vec<(IdKey, Forwarded)> {
        self.pending.take_older(age, Instant::now())
    }

    /// The client cancelled forwarded request `k`: the ticket of the place it keeps, for
    /// its grace timer, the first time only (None: no place, or a timer already runs).
    pub(in crate::engine) fn start_grace(&mut self, k: &IdKey) -> Option<Ticket> {
        let p = self.pending.get_mut(k).filter(|p| !p.grace)?;
        let t = p.place.as_ref().map(Place::ticket)?;
        p.grace = true;
        Some(t)
    }

    /// The grace ran out: request `k` gives its place up, if it is still the same call
    /// (its id may have been answered and reused meanwhile).
    pub(in crate::engine) fn end_grace(&mut self, k: &IdKey, t: Ticket) {
        if let Some(p) = self.pending.get_mut(k) {
            if p.place.as_ref().is_some_and(|p| p.ticket() == t) {
                p.place = None;
            }
        }
    }

    /// Notes the shim's own request `id`; false (nothing noted) once the downstream is gone.
    pub(in crate::engine) fn own(&mut self, id: String, tx: oneshot::Sender<Value>) -> bool {
        if self.child_gone {
            return false;
        }
        self.internal.insert(id, tx);
        true
    }

    /// Who waits for the answer to the shim's own request `id` (taken).
    pub(in crate::engine) fn own_answered(&mut self, id: &str) -> Option<oneshot::Sender<Value>> {
        self.internal.remove(id)
    }

    pub(in crate::engine) fn is_own(&self, id: &str) -> bool {
        self.internal.contains_key(id)
    }

    /// Some of the shim's own requests wait (their answers are not capped).
    pub(in crate::engine) fn own_waiting(&self) -> bool {
        !self.internal.is_empty()
    }

    /// The downstream is gone: nothing more goes out, its own requests fail (their senders
    /// dropped), and the forwarded requests are returned to be failed.
    pub(in crate::engine) fn close(&mut self) -> IdTable<Forwarded> {
        self.child_gone = true;
        self.internal.clear();
        std::mem::take(&mut self.pending)
    }

    pub(in crate::engine) fn gone(&self) -> bool {
        self.child_gone
    }

    /// Notes a downstream request shown to the client; false when `max` already wait.
    pub(in crate::engine) fn asked(&mut self, k: IdKey, max: usize) -> bool {
        if self.down_requests.len() < max {
            self.down_requests.insert(k);
            return true;
        }
        false
    }

    /// The downstream's request `k` was answered or withdrawn: true when it was waiting.
    pub(in crate::engine) fn unasked(&mut self, k: &IdKey) -> bool {
        self.down_requests.remove(k)
    }
}
