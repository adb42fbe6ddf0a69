//! The engine's state: one part per stage (each stage's methods touch only its own), all
//! under one lock, and the few steps that must change two parts at once.

use std::collections::HashMap;

use serde_json::Value;

use crate::engine::admission::session::Session;
use crate::engine::barrier::Ticket;
use crate::engine::confirm::holds::{Held, Holds};
use crate::engine::forward::rounds::Wrap;
use crate::engine::forward::table::{Forwarded, Outstanding, Pending};
use crate::engine::judge::tools::ToolCache;
use crate::engine::outcome::Ran;
use crate::wire::ids::{IdKey, IdTable};
use tc_core::codes::Outcome;

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
    pub(in crate::engine) fn hand_over(
        &mut self,
        id: &Value,
        wrap: Option<Wrap>,
        ran: Option<Box<Ran>>,
    ) -> Option<bool> {
        let k = IdKey::of(id);
        let held = self.holds.take(&k);
        if held.as_ref().is_some_and(|h| h.cancelled) {
            // Cancelled before it went out: nothing ran.
            if let Some(r) = ran {
                r.settle(Outcome::Denied);
            }
            return None;
        }
        let modern = held.as_ref().is_some_and(|h| h.modern);
        let f = Forwarded {
            wrap,
            ran,
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use tokio::sync::oneshot;

    use super::*;
    use crate::engine::barrier::{Barrier, Kind};

    fn held(cancelled: bool, place: Option<crate::engine::barrier::Place>) -> Held {
        Held {
            cancelled,
            modern: true,
            schema: false,
            lean: false,
            place,
        }
    }

    #[test]
    fn a_held_call_is_handed_over_with_its_place_unless_cancelled() {
        let b = Arc::new(Barrier::default());
        let mut st = State::default();
        let (one, two) = (json!(1), json!("2"));
        let place = b.place(Kind::Exclusive);
        let t = place.ticket();
        st.holds.hold(IdKey::of(&one), held(false, Some(place)));
        st.holds.hold(IdKey::of(&two), held(true, None));
        assert_eq!(st.hand_over(&one, None, None), Some(true));
        assert!(!st.holds.contains(&IdKey::of(&one)));
        let f = st.out.get(&IdKey::of(&one)).unwrap();
        assert_eq!(f.place.as_ref().map(|p| p.ticket()), Some(t));
        assert_eq!(f.modern.as_deref(), Some("tools/call"));
        // Cancelled while held: taken out and not forwarded.
        assert_eq!(st.hand_over(&two, None, None), None);
        assert!(!st.in_use(&IdKey::of(&two)));
        assert_eq!(st.in_flight(), 1);
    }

    #[test]
    fn a_cancel_marks_a_held_call_and_starts_a_forwarded_calls_grace_once() {
        let b = Arc::new(Barrier::default());
        let mut st = State::default();
        let (one, two) = (json!(1), json!(2));
        st.holds.hold(IdKey::of(&one), held(false, None));
        let (wake, woken) = oneshot::channel();
        assert!(st.holds.wait(IdKey::of(&one), wake, None).is_ok());
        assert!(matches!(st.cancel(&IdKey::of(&one)), Cancelled::Held));
        assert_eq!(st.holds.cancelled(&IdKey::of(&one)), Some(true));
        assert!(woken.blocking_recv().is_ok(), "its waiter is woken");
        st.holds
            .hold(IdKey::of(&two), held(false, Some(b.place(Kind::Shared))));
        st.hand_over(&two, None, None);
        assert!(matches!(
            st.cancel(&IdKey::of(&two)),
            Cancelled::Forwarded(_)
        ));
        assert!(matches!(st.cancel(&IdKey::of(&two)), Cancelled::Nothing));
        assert!(matches!(
            st.cancel(&IdKey::of(&json!(3))),
            Cancelled::Nothing
        ));
    }
}
