//! The engine's state: one part per stage (each stage's methods touch only its own), all
//! under one lock, and the few steps that must change two parts at once.

use std::collections::HashMap;

use serde_json::Value;

use crate::engine::admission::session::Session;
use crate::engine::barrier::Ticket;
use crate::engine::confirm::continued::Wrap;
use crate::engine::confirm::holds::{Held, Holds};
use crate::engine::forward::table::{Forwarded, Outstanding, Pending};
use crate::engine::judge::tools::ToolCache;
use crate::wire::ids::{IdKey, IdTable};

/// Every stage's state. One lock over all of it (`Shim::lock`), never held across an
/// await: a step that spans two parts (below) is then atomic without a lock order.
#[derive(Default)]
pub(in crate::engine) struct State {
    /// Admission's: the eras, the client's capabilities and envelope.
    pub(in crate::engine) session: Session,
    /// The judge's: the downstream's tool definitions.
    pub(in crate::engine) tools: ToolCache,
    /// Confirm's: calls held before forwarding, their wakers, the shim's own prompts.
    pub(in crate::engine) holds: Holds,
    /// Forward's: requests sent downstream and awaited, the downstream's questions.
    pub(in crate::engine) out: Outstanding,
}

/// What a client's `notifications/cancelled` reached.
pub(in crate::engine) enum Cancelled {
    /// A held call: marked (and woken if it waited on the human).
    Held,
    /// A forwarded call that keeps a barrier place: its grace timer starts.
    Forwarded(Ticket),
    /// Nothing the shim tracks, or a forwarded call already in its grace.
    Nothing,
}

impl State {
    /// Client requests in flight: held by confirm or forwarded.
    pub(in crate::engine) fn in_flight(&self) -> usize {
        self.out.len() + self.holds.len()
    }

    /// A client request with this id is in flight (held or forwarded).
    pub(in crate::engine) fn in_use(&self, k: &IdKey) -> bool {
        self.holds.contains(k) || self.out.contains(k)
    }

    /// A held call goes from confirm to forward, its barrier place with it: in one step,
    /// so a cancellation lands either before (nothing is sent: None) or after (its grace
    /// timer keeps the place). Returns whether it was modern.
    pub(in crate::engine) fn hand_over(&mut self, id: &Value, wrap: Option<Wrap>) -> Option<bool> {
        let k = IdKey::of(id);
        let held = self.holds.take(&k);
        if held.as_ref().is_some_and(|h| h.cancelled) {
            return None;
        }
        let modern = held.as_ref().is_some_and(|h| h.modern);
        let f = Forwarded {
            wrap,
            place: held.and_then(|h| h.place),
            ..Forwarded::plain(id, Pending::Plain, modern.then(|| "tools/call".into()))
        };
        self.out.forwarded(k, f);
        Some(modern)
    }

    /// The client cancelled request `k`: a held call is marked first; else a forwarded
    /// one starts its grace (both looked up in one step, so a call being handed over is
    /// found on exactly one side).
    pub(in crate::engine) fn cancel(&mut self, k: &IdKey) -> Cancelled {
        if self.holds.cancel(k) {
            return Cancelled::Held;
        }
        match self.out.start_grace(k) {
            Some(t) => Cancelled::Forwarded(t),
            None => Cancelled::Nothing,
        }
    }

    /// The downstream is gone: forward closes, and every call, forwarded or held, is
    /// returned to be failed.
    pub(in crate::engine) fn close(&mut self) -> (IdTable<Forwarded>, HashMap<IdKey, Held>) {
        (self.out.close(), self.holds.take_all())
    }
}
