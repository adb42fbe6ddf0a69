//! The calls confirm holds: every `tools/call` not yet forwarded (cancelled or not), the
//! wakers of those waiting on a human, and the shim's own prompts to the client.

use std::collections::HashMap;

use serde_json::Value;
use tokio::sync::oneshot;

use crate::engine::barrier::{Place, Ticket};
use crate::wire::ids::{self, IdKey};

/// A `tools/call` the shim holds before forwarding.
#[derive(Debug)]
pub(in crate::engine) struct Held {
    pub(in crate::engine) cancelled: bool,
    pub(in crate::engine) modern: bool,
    /// The tool declares an `outputSchema`: refusals go in `_meta`, not `structuredContent`.
    pub(in crate::engine) schema: bool,
    /// Sent as the lean facade's `call_capability`.
    pub(in crate::engine) lean: bool,
    /// Its place in the barrier (none for a read-only call), taken on arrival.
    pub(in crate::engine) place: Option<Place>,
}

/// Held calls, by id, and what wakes or answers those that wait on the client.
#[derive(Default)]
pub(in crate::engine) struct Holds {
    /// `tools/call`s the shim holds (not yet forwarded).
    held: HashMap<IdKey, Held>,
    /// Wakes a held call that waits on the human when the client cancels it.
    wakers: HashMap<IdKey, oneshot::Sender<()>>,
    /// The shim's own requests to the client (`elicitation/create`), by our id.
    prompts: HashMap<String, oneshot::Sender<Value>>,
}

impl Holds {
    /// Holds a call that just arrived (or a round its downstream answered with).
    pub(in crate::engine) fn hold(&mut self, k: IdKey, h: Held) {
        self.held.insert(k, h);
    }

    pub(in crate::engine) fn get(&self, k: &IdKey) -> Option<&Held> {
        self.held.get(k)
    }

    pub(in crate::engine) fn contains(&self, k: &IdKey) -> bool {
        self.held.contains_key(k)
    }

    pub(in crate::engine) fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether the held call was cancelled; None when it is not held (any more).
    pub(in crate::engine) fn cancelled(&self, k: &IdKey) -> Option<bool> {
        self.held.get(k).map(|h| h.cancelled)
    }

    /// Takes a held call out (it is being answered or forwarded).
    pub(in crate::engine) fn take(&mut self, k: &IdKey) -> Option<Held> {
        ids::take(&mut self.held, k)
    }

    /// Every held call (the downstream is gone).
    pub(in crate::engine) fn take_all(&mut self) -> HashMap<IdKey, Held> {
        std::mem::take(&mut self.held)
    }

    /// Its tool declares an `outputSchema`.
    pub(in crate::engine) fn set_schema(&mut self, k: &IdKey) {
        if let Some(h) = self.held.get_mut(k) {
            h.schema = true;
        }
    }

    /// Its barrier place: None gives it up (while it waits on a human), Some rejoins.
    pub(in crate::engine) fn set_place(&mut self, k: &IdKey, place: Option<Place>) {
        if let Some(h) = self.held.get_mut(k) {
            h.place = place;
        }
    }

    /// The ticket of its barrier place, if it holds one.
    pub(in crate::engine) fn ticket(&self, k: &IdKey) -> Option<Ticket> {
        self.held
            .get(k)
            .and_then(|h| h.place.as_ref().map(Place::ticket))
    }

    /// The client cancelled a held call: marked, and woken if it waits on the human.
    /// False when it is not held (it may have been forwarded).
    pub(in crate::engine) fn cancel(&mut self, k: &IdKey) -> bool {
        let Some(h) = self.held.get_mut(k) else {
            return false;
        };
        h.cancelled = true;
        if let Some(w) = self.wakers.remove(k) {
            let _ = w.send(());
        }
        true
    }

    /// Registers the wait of a held call on the human (`wake` fires when the client
    /// cancels it) and, when it asks the client itself, its prompt `rid`. Only a call
    /// held and not cancelled waits: otherwise nothing is registered and the call's
    /// state is returned (None: not held; Some(true): cancelled).
    pub(in crate::engine) fn wait(
        &mut self,
        k: IdKey,
        wake: oneshot::Sender<()>,
        prompt: Option<(String, oneshot::Sender<Value>)>,
    ) -> Result<(), Option<bool>> {
        match self.cancelled(&k) {
            Some(false) => {}
            other => return Err(other),
        }
        if let Some((rid, answer)) = prompt {
            self.prompts.insert(rid, answer);
        }
        self.wakers.insert(k, wake);
        Ok(())
    }

    /// The wait is over: its waker (and prompt `rid`, if any) go.
    pub(in crate::engine) fn end_wait(&mut self, k: &IdKey, rid: Option<&str>) {
        if let Some(rid) = rid {
            self.prompts.remove(rid);
        }
        self.wakers.remove(k);
    }

    /// Who waits for the client's answer to our prompt `rid` (taken: answered once).
    pub(in crate::engine) fn answered(&mut self, rid: &str) -> Option<oneshot::Sender<Value>> {
        self.prompts.remove(rid)
    }
}
