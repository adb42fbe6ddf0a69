//! Answering a held call from inside the engine (a refusal, a result, an error) instead of
//! the downstream: only a call still held and not cancelled, rendered in one place.

use serde_json::Value;

use crate::engine::confirm::holds::Held;
use crate::engine::refusal::Refusal;
use crate::engine::{key, Shim};
use crate::wire::era;
use crate::wire::jsonrpc;

impl Shim {
    /// The held call came through the lean facade's `call_capability`.
    pub(in crate::engine) fn is_lean(&self, id: &Value) -> bool {
        self.lock().holds.get(&key(id)).is_some_and(|h| h.lean)
    }

    /// Takes a held call out of the table (it is being answered or forwarded).
    pub(in crate::engine) fn unhold(&self, id: &Value) -> Option<Held> {
        self.lock().holds.take(&key(id))
    }

    /// Answers a held call with a refusal, rendered for its tool (see [`Refusal::render`]).
    pub(in crate::engine) fn refuse(&self, id: &Value, r: Refusal) {
        let schema = self.lock().holds.get(&key(id)).is_some_and(|h| h.schema);
        self.answer(id, r.render(schema));
    }

    /// Answers a held call with a tool result.
    pub(in crate::engine) fn answer(&self, id: &Value, result: Value) {
        // Answered here: no downstream answer will come to cap.
        self.gov.untrack(&key(id));
        self.reply_held(id, result);
    }

    /// Sends `result` to a held call unless it was cancelled (completed for a modern
    /// one); the governor's tracking is the caller's to end.
    pub(in crate::engine) fn reply_held(&self, id: &Value, mut result: Value) {
        match self.unhold(id) {
            Some(Held {
                cancelled: true, ..
            }) => {}
            h => {
                if h.as_ref().is_some_and(|h| h.modern) {
                    era::mark_complete(&mut result, "tools/call");
                }
                self.send_client(&jsonrpc::response(id, result));
            }
        }
    }

    /// Answers a held call with a JSON-RPC error (the request itself is refused): only a
    /// call still held and not cancelled (the exit path may have answered it already).
    pub(in crate::engine) fn answer_error(&self, id: &Value, code: i64, message: String) {
        self.gov.untrack(&key(id));
        if self.unhold(id).is_some_and(|h| !h.cancelled) {
            self.send_client(&jsonrpc::error(id, code, message));
        }
    }
}
