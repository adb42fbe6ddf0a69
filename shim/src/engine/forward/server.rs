//! The server side: a downstream line goes to the client as its bytes when nothing about it
//! changes (the fast path), else parsed: its requests screened, its answers matched.

use std::sync::Arc;

use serde::Deserialize as _;
use serde_json::Value;

use crate::engine::admission::roots;
use crate::engine::forward::table::{Forwarded, Pending};
use crate::engine::outcome;
use crate::engine::{key, reserved_id, reserved_id_error, Shim};
use crate::wire::era;
use crate::wire::ids;
use crate::wire::jsonrpc;
use crate::wire::outbox::Known;
use crate::wire::value::at;

/// At most this many downstream requests wait for the client's answer at once.
const MAX_DOWN_REQUESTS: usize = 4096;

/// The members of a downstream line the gate routes by (see `pass_through`).
#[derive(serde::Deserialize)]
struct Envelope {
    #[serde(default)]
    id: Option<Value>,
    /// Whatever its value (`null` included): only `tools/list_changed` is looked at.
    #[serde(default, deserialize_with = "present_value")]
    method: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    result: bool,
    #[serde(default, deserialize_with = "present")]
    error: bool,
}

/// True for a member that is there, whatever its value (`null` included), skipped unbuilt.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(d).map(|_| true)
}

fn present_value<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

impl Shim {
    /// Handles one line from the downstream; the id it answers, when it is a response.
    pub(in crate::engine) fn on_child_line(self: &Arc<Self>, line: Vec<u8>) -> Option<Value> {
        let mut answers = None;
        if self.pass_through(&line, &mut answers) {
            match &answers {
                // Unchanged, so its own id is the client's: the front need not read it.
                Some(id) => {
                    let known = Known::Answers(ids::IdKey::of(id));
                    self.to_client.send_known(line, None, known)
                }
                None => self.to_client.send(line, None),
            };
            return answers;
        }
        let msg: Value = match serde_json::from_slice(&line) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!("dropping malformed line from the downstream: {e}");
                return None;
            }
        };
        if !self.screen_child_request(&msg) {
            return None;
        }
        let is_response = msg.get("method").is_none()
            && (msg.get("result").is_some() || msg.get("error").is_some());
        if is_response {
            if let Some(id) = msg.get("id").cloned() {
                self.on_child_answer(id.clone(), msg, line);
                return Some(id);
            }
        }
        self.to_client.send(line, None);
        None
    }

    /// A downstream request or notification before the client sees it: reserved and
    /// untrackable ids refused, `roots/list` answered here, a request's id noted so the
    /// client's answer may go back. False when it goes no further.
    fn screen_child_request(&self, msg: &Value) -> bool {
        let Some(m) = msg.get("method") else {
            return true;
        };
        if let Some(id) = msg.get("id").filter(|i| reserved_id(i)) {
            // The client's answer to it would be taken as the answer to the shim's own
            // prompt of that id: a server could approve its own gated call. Refused.
            tracing::warn!("refusing a downstream request with a reserved id {id}");
            self.send_child(reserved_id_error(id).to_string().into_bytes(), None);
            return false;
        }
        let id = msg.get("id").filter(|i| !i.is_null());
        if let Some(id) = id {
            // Held in down_requests until the client answers: the client's rules (ids.rs)
            // bound what one server can make the shim keep.
            if let Err(why) = ids::check_request_id(id) {
                tracing::warn!("refusing a downstream request: {why}");
                let e = jsonrpc::error(
                    &ids::answer_id(id),
                    jsonrpc::INVALID_REQUEST,
                    why.to_string(),
                );
                self.send_child(e.to_string().into_bytes(), None);
                return false;
            }
        }
        if m == "notifications/tools/list_changed" {
            // As on the fast path: a line it refused (a member named twice) still tells the
            // client to re-list, so the cache must not outlive it.
            self.lock().tools.forget();
        }
        if m == roots::LIST {
            // Answered here, never asked of the client (roots.rs).
            if let Some(id) = id {
                let r = roots::list_result(&self.policy.root, &self.policy.vault);
                self.send_child(jsonrpc::response(id, r).to_string().into_bytes(), None);
            }
            return false;
        }
        if id.is_some_and(|id| !self.note_down_request(id)) {
            return false;
        }
        if m == "notifications/cancelled" {
            // The downstream withdrew its question: the client's answer may no longer go.
            if let Some(rid) = at(msg, &["params", "requestId"]) {
                self.lock().out.unasked(&key(rid));
            }
        }
        true
    }

    /// A downstream answer: the governor's cap first, then whoever waits for it (the
    /// shim's own request, or a client request matched by value, its id spelled back).
    fn on_child_answer(self: &Arc<Self>, id: Value, msg: Value, line: Vec<u8>) {
        // What the server said, before the cap may stand in for it.
        let outcome = outcome::answered(&msg);
        // Governor: the byte cap, and answers to its own page requests.
        let Some(mut msg) = self.govern_response(&id, line.len(), msg) else {
            return;
        };
        if let Some(internal) = id.as_str().and_then(|s| self.lock().out.own_answered(s)) {
            let _ = internal.send(msg);
            return;
        }
        if id.is_null() {
            // An error about a line the downstream could not read: no request
            // to match, nothing the cap covers.
            self.to_client.send(line, None);
            return;
        }
        let pending = self.lock().out.answered(&key(&id));
        let Some(mut p) = pending else {
            // No request waits for it (a late answer to one the shim stopped
            // waiting for, or never sent): passing it on could pass the cap.
            tracing::warn!("dropping a downstream answer to unknown id {id}");
            return;
        };
        // Matched by value: the client gets its id back as it wrote it.
        let respelled = p.id != id;
        if respelled {
            msg["id"] = p.id.clone();
        }
        if let Some(w) = p.wrap.take() {
            match self.wrap_answer(p.id.clone(), msg, w) {
                Some(m) => msg = m,
                // A round of its own: the call goes on (its next run has its own outcome).
                None => {
                    if let Some(r) = p.ran.take() {
                        r.goes_on();
                    }
                    return;
                }
            }
        }
        if let Some(r) = p.ran.take() {
            r.settle(outcome);
        }
        if p.kind == Pending::Initialize {
            self.note_down_init(&msg);
        }
        let rewritten = self.rewrite_answer(&p, &mut msg);
        if respelled || rewritten {
            self.send_client(&msg);
        } else {
            self.to_client.send(line, None);
        }
    }

    /// The answer to the client's own `initialize`: the downstream is legacy, at the
    /// version this answer agrees to.
    fn note_down_init(&self, msg: &Value) {
        let v = at(msg, &["result", "protocolVersion"])
            .and_then(Value::as_str)
            .map(String::from);
        if let Some(v) = v {
            // The client asked for its newest version; this answer is the
            // one it agrees to, and our own prompts must be shaped for it.
            self.lock().session.agreed(v);
        }
        self.note_eras();
    }

    /// Rewrites an answer's result for the client: a `tools/list` (learned, floors hidden,
    /// tokens added), a modern request's result from a legacy downstream (completed).
    /// True when it changed.
    fn rewrite_answer(&self, p: &Forwarded, msg: &mut Value) -> bool {
        let down_legacy = self.lock().session.down_legacy();
        let mut changed = false;
        if let Some(result) = msg.get_mut("result") {
            if p.kind == Pending::ToolsList {
                self.rewrite_tools_list(result);
                changed = true;
            }
            if let (Some(m), true) = (&p.modern, down_legacy) {
                changed |= era::mark_complete(result, m);
            }
        }
        changed
    }

    /// The fast path for a downstream line that goes to the client unchanged: a request
    /// or notification, or the answer to a plain forwarded request that the governor lets
    /// pass. Decided from the line's envelope alone, without building the whole value
    /// (results can be file contents); anything else (not an object, duplicate members,
    /// answers the shim rewrites or consumes) takes the full path.
    /// `answers` is set to the id of an answer that passes.
    fn pass_through(&self, line: &[u8], answers: &mut Option<Value>) -> bool {
        if line.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return false;
        }
        // Only UTF-8 goes out as it came (the envelope's parse skips strings unchecked).
        let Ok(text) = std::str::from_utf8(line) else {
            return false;
        };
        let Ok(env) = serde_json::from_str::<Envelope>(text) else {
            return false;
        };
        if let Some(m) = env.method {
            return self.pass_request(env.id.as_ref(), &m);
        }
        let (true, Some(id)) = (env.result || env.error, env.id) else {
            return true;
        };
        let passes = self.pass_answer(&id, line.len());
        if passes {
            *answers = Some(id);
        }
        passes
    }

    /// [`Shim::pass_through`] of a request or notification (method `m`).
    fn pass_request(&self, id: Option<&Value>, m: &Value) -> bool {
        let bad_id = |id: &Value| reserved_id(id) || ids::check_request_id(id).is_err();
        if id.is_some_and(bad_id) || m == roots::LIST || m == "notifications/cancelled" {
            return false;
        }
        // A full table: the full path refuses it (once).
        if id.is_some_and(|id| !self.try_note_down_request(id)) {
            return false;
        }
        if m == "notifications/tools/list_changed" {
            // Definitions may have changed (a tool may have become destructive): the
            // next call re-lists instead of judging the floor from the old list.
            self.lock().tools.forget();
        }
        true
    }

    /// [`Shim::pass_through`] of an answer (`len` bytes) to request `id`.
    fn pass_answer(&self, id: &Value, len: usize) -> bool {
        let k = key(id);
        let mut st = self.lock();
        if id.as_str().is_some_and(|s| st.out.is_own(s)) {
            return false;
        }
        let down_legacy = st.session.down_legacy();
        match st.out.get(&k) {
            Some(p)
                if p.kind == Pending::Plain
                    && p.id == *id
                    && p.wrap.is_none()
                    && p.ran.is_none()
                    && !(p.modern.is_some() && down_legacy) => {}
            // Rewritten by the shim, or not a client request's (the governor's own page
            // requests, late answers): the full path sorts them out.
            _ => return false,
        }
        if !self.gov.passes(&k, len) {
            return false;
        }
        st.out.answered(&k);
        true
    }

    /// Notes a downstream request about to be shown to the client, so its answer may go
    /// back. A table full of unanswered questions refuses the newcomer (answered here with
    /// an error) rather than growing without bound.
    fn note_down_request(&self, id: &Value) -> bool {
        if self.try_note_down_request(id) {
            return true;
        }
        tracing::warn!(
            "refusing a downstream request: {MAX_DOWN_REQUESTS} already wait on the client"
        );
        let e = jsonrpc::error(
            id,
            jsonrpc::INTERNAL_ERROR,
            format!("tc-shim: {MAX_DOWN_REQUESTS} requests already wait for the client's answer"),
        );
        self.send_child(e.to_string().into_bytes(), None);
        false
    }

    /// [`Shim::note_down_request`] without the refusal: false when the table is full.
    fn try_note_down_request(&self, id: &Value) -> bool {
        self.lock().out.asked(key(id), MAX_DOWN_REQUESTS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(line: &str) -> Option<(Option<Value>, bool, bool, bool)> {
        serde_json::from_str::<Envelope>(line)
            .ok()
            .map(|e| (e.id, e.method.is_some(), e.result, e.error))
    }

    #[test]
    fn envelope_sees_members_whatever_their_value() {
        assert_eq!(
            env(r#"{"jsonrpc":"2.0","id":7,"result":null,"x":{"deep":[1,2]}}"#),
            Some((Some(json!(7)), false, true, false))
        );
        assert_eq!(
            env(r#"{"id":"a","method":null}"#),
            Some((Some(json!("a")), true, false, false))
        );
        assert_eq!(
            env(r#"{"id":1,"error":{"code":-1,"message":"m"}}"#),
            Some((Some(json!(1)), false, false, true))
        );
        assert_eq!(
            env(r#"{"method":"notifications/x"}"#),
            Some((None, true, false, false))
        );
    }

    #[test]
    fn envelope_refuses_what_the_full_path_must_judge() {
        // Duplicate members: which one counts is the full parser's call.
        assert_eq!(env(r#"{"id":1,"id":2,"result":{}}"#), None);
        assert_eq!(env(r#"{"id":1,"result":{},"result":{}}"#), None);
        assert_eq!(env("not json"), None);
    }
}
