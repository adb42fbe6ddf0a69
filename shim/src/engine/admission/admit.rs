//! Admission: what the gate refuses before acting on a line: a raw inner `\r` (either side),
//! a client request it cannot track faithfully (id, table, envelope) or whose id is taken.

use serde_json::Value;

use crate::engine::govern::governor::{PageReply, Track};
use crate::engine::{key, reserved_id, reserved_id_error, Shim};
use crate::wire::framing::{refusal_id, Rejected};
use crate::wire::ids::{self, IdKey, MAX_IN_FLIGHT, STALE_AFTER};
use crate::wire::jsonrpc;

/// Why a downstream line with a raw inner `\r` is not passed on.
const DOWN_INNER_CR: &str = "the downstream MCP server sent a message with a raw carriage \
     return inside it; tc-shim does not pass such a line on (a client could split it there)";

impl Shim {
    /// A client line holding a raw inner `\r`: answered with an error, never forwarded
    /// nor acted on.
    pub(in crate::engine) fn on_client_inner_cr(&self, line: &[u8]) {
        let e = Rejected::InnerCr;
        tracing::warn!("refusing a client line: {e}");
        self.send_client(&jsonrpc::error(&refusal_id(line), e.code(), e.to_string()));
    }

    /// A downstream line holding a raw inner `\r`: never passed to the client as its
    /// bytes. A request is answered with an error; a response fails whoever waits for
    /// it (so no client request hangs); anything else is dropped.
    pub(in crate::engine) fn on_child_inner_cr(&self, line: &[u8]) {
        let msg = serde_json::from_slice::<Value>(line).ok();
        let id = msg
            .as_ref()
            .and_then(|m| m.get("id"))
            .filter(|i| !i.is_null());
        let (Some(msg), Some(id)) = (msg.as_ref(), id) else {
            tracing::warn!("dropping a downstream line with a raw carriage return inside it");
            return;
        };
        if msg.get("method").is_some() {
            tracing::warn!("refusing a downstream request (id {id}): raw carriage return inside");
            let e = Rejected::InnerCr;
            let answer = jsonrpc::error(&ids::answer_id(id), e.code(), e.to_string());
            self.send_child(answer.to_string().into_bytes(), None);
            return;
        }
        tracing::warn!("{DOWN_INNER_CR} (id {id})");
        let err = jsonrpc::error(id, jsonrpc::INTERNAL_ERROR, DOWN_INNER_CR);
        let k = IdKey::of(id);
        if let Some(Track::Page(tx)) = self.gov.untrack(&k) {
            let _ = tx.send(PageReply::Full {
                msg: err,
                bytes: line.len(),
            });
            return;
        }
        let internal = id.as_str().and_then(|s| self.lock().out.own_answered(s));
        if let Some(tx) = internal {
            let _ = tx.send(err);
            return;
        }
        let pending = self.lock().out.answered(&k);
        if let Some(p) = pending {
            self.send_client(&jsonrpc::error(
                &p.id,
                jsonrpc::INTERNAL_ERROR,
                DOWN_INNER_CR,
            ));
        }
    }

    /// Whether a client request with this id may go on. Refused (and answered): an id a
    /// downstream could echo as another value, and any request while [`MAX_IN_FLIGHT`]
    /// are in flight and none of them is stale; stale ones make room, their callers
    /// answered with an error. Their governor entries go with them, and a late answer
    /// matches nothing and is dropped (see `on_child_line`), so it cannot pass the cap.
    pub(in crate::engine) fn admit(&self, id: &Value) -> bool {
        if let Err(why) = ids::check_request_id(id) {
            tracing::debug!("refusing a client request: {why}");
            self.send_client(&jsonrpc::error(
                &ids::answer_id(id),
                jsonrpc::INVALID_REQUEST,
                why.to_string(),
            ));
            return false;
        }
        let stale = {
            let mut st = self.lock();
            if st.in_flight() < MAX_IN_FLIGHT {
                return true;
            }
            st.out.take_stale(STALE_AFTER)
        };
        let room = !stale.is_empty();
        for (k, p) in stale {
            self.gov.untrack(&k);
            self.send_client(&jsonrpc::error(
                &p.id,
                jsonrpc::INTERNAL_ERROR,
                format!(
                    "tc-shim stopped waiting: the downstream did not answer within {} \
                     minutes while {MAX_IN_FLIGHT} requests were in flight",
                    STALE_AFTER.as_secs() / 60
                ),
            ));
        }
        if !room {
            tracing::debug!("refusing a client request: {MAX_IN_FLIGHT} requests in flight");
            self.send_client(&jsonrpc::error(
                id,
                jsonrpc::INTERNAL_ERROR,
                format!(
                    "too many requests in flight: tc-shim tracks at most {MAX_IN_FLIGHT} \
                     unanswered requests; this one was not sent. Wait for answers (or cancel \
                     requests) and retry"
                ),
            ));
        }
        room
    }

    /// A client request's own checks, once its id was admitted: `"jsonrpc": "2.0"`, an id
    /// outside the shim's namespace and not in use. False when refused (and answered).
    pub(in crate::engine) fn admit_request(&self, msg: &Value, i: &Value) -> bool {
        if msg.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            // A downstream drops such a request without a word (the TypeScript SDK
            // does): the call would hold its barrier place, and every change behind
            // it, for ever. Refused here, where it can be answered.
            self.send_client(&jsonrpc::error(
                i,
                jsonrpc::INVALID_REQUEST,
                "a request must carry \"jsonrpc\": \"2.0\"",
            ));
            return false;
        }
        if reserved_id(i) {
            // Our own requests downstream use these ids: a client request with one
            // could take the answer meant for the shim (a probe's, say).
            self.send_client(&reserved_id_error(i));
            return false;
        }
        let in_use = self.lock().in_use(&key(i));
        if in_use {
            // Reusing a live id would overwrite the call's state and its governor
            // entry (a cancelled call could come back to life, an answer escape
            // the cap): refuse the newcomer.
            self.send_client(&jsonrpc::error(
                i,
                jsonrpc::INVALID_REQUEST,
                "request id already in use by a request in flight",
            ));
            return false;
        }
        true
    }
}
