//! The client side: a client line is parsed (or comes parsed from a front, [`Parsed`]), its
//! roots taken out, admitted (`admit.rs`), noted by the governor, then dispatched by method
//! (a `tools/call` goes to `call.rs`).

mod admit;
mod eras;
pub mod lean;
pub mod roots;
pub(in crate::engine) mod session;
mod turn;

use std::sync::Arc;

use serde_json::{json, Value};
use tc_core::ErrorCode;

use crate::engine::confirm::holds::Held;
use crate::engine::forward::table::Pending;
use crate::engine::refusal::Refusal;
use crate::engine::state::Cancelled;
use crate::engine::{key, SentParams, Shim, OWN_ID_PREFIX};
use crate::wire::era::{self, Era};
use crate::wire::framing::{parse_message, refusal_id, Rejected};
use crate::wire::jsonrpc;
use crate::wire::value::at;

/// A client message a front has read already: the value [`parse_message`] made of `line`,
/// and `line`, one line without a raw `\r` or `\n` (what a stdio client line is once
/// framed). Built only here, so the engine judges exactly the bytes it forwards without
/// parsing them a second time.
pub struct Parsed {
    msg: Value,
    line: Vec<u8>,
    /// `Mcp-Param-*` headers that came with it over HTTP, to check against the tool.
    params: SentParams,
}

impl Parsed {
    /// Parses a message as a client sent it. A message spread over lines is forwarded
    /// re-serialized from the value judged (nothing else could be framed as one line).
    pub fn parse(bytes: Vec<u8>) -> Result<Parsed, Rejected> {
        let msg = parse_message(&bytes)?;
        let line = match memchr::memchr2(b'\n', b'\r', &bytes) {
            Some(_) => msg.to_string().into_bytes(),
            None => bytes,
        };
        Ok(Parsed {
            msg,
            line,
            params: None,
        })
    }

    /// The message with another id (a stateless request's engine-unique one): forwarded
    /// as the value now serializes.
    pub fn with_id(mut self, id: Value) -> Parsed {
        self.msg["id"] = id;
        self.line = self.msg.to_string().into_bytes();
        self
    }

    pub fn msg(&self) -> &Value {
        &self.msg
    }

    /// The `Mcp-Param-*` headers (lowercase name, decoded value) the message came with.
    pub fn with_params(mut self, params: Vec<(String, String)>) -> Parsed {
        self.params = Some(params.into_boxed_slice());
        self
    }
}

impl Shim {
    /// Handles one line from the client.
    pub(in crate::engine) fn on_client_line(self: &Arc<Self>, line: Vec<u8>) {
        let msg: Value = match parse_message(&line) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!("client sent a line that is not a JSON-RPC message: {e}");
                // A request that only named a member twice is answered under its id (its
                // client would wait for ever), unless that member is the id itself.
                let id = match &e {
                    Rejected::Duplicate(d) if !d.is_top_level_id() => refusal_id(&line),
                    _ => Value::Null,
                };
                self.send_client(&jsonrpc::error(&id, e.code(), e.to_string()));
                return;
            }
        };
        self.on_client_message(msg, line, None);
    }

    /// Handles one client message a front parsed already: every check a line gets after
    /// its parse applies.
    pub fn client_parsed(self: &Arc<Self>, p: Parsed) {
        self.on_client_message(p.msg, p.line, p.params);
    }

    /// A parsed client line: its roots taken out, admitted, governed, dispatched.
    fn on_client_message(self: &Arc<Self>, mut msg: Value, line: Vec<u8>, params: SentParams) {
        let line = self.take_roots(&mut msg, line);
        let method = msg.get("method").and_then(Value::as_str);
        let id = msg.get("id").filter(|i| !i.is_null()).cloned();
        let meta = era::request_meta(&msg).cloned();
        if !self.admitted(&msg, method, id.as_ref(), meta.as_ref()) {
            return;
        }
        // Governor: note capped requests; a resources/read over the cap is answered here.
        if self.govern_request(method, id.as_ref(), &msg) {
            return;
        }
        self.dispatch(msg, line, id, meta, params);
    }

    /// The bytes to forward: re-serialized when the client's roots were taken out.
    fn take_roots(&self, msg: &mut Value, line: Vec<u8>) -> Vec<u8> {
        // The downstream works inside the vault root, whatever the client says (roots.rs).
        match roots::strip_client_roots(msg, &self.policy.root, &self.policy.vault) {
            true => msg.to_string().into_bytes(),
            false => line,
        }
    }

    /// Admission, in order: the id and the in-flight table (`admit.rs`), the era of a
    /// modern message (noted, and refused if unknown), then a request's own checks.
    /// False when the message was refused (and answered).
    fn admitted(
        &self,
        msg: &Value,
        method: Option<&str>,
        id: Option<&Value>,
        meta: Option<&Value>,
    ) -> bool {
        let request = method.and(id);
        // An id a downstream could echo as another value, or a full table: refused first.
        if request.is_some_and(|i| !self.admit(i)) {
            return false;
        }
        if let (Some(m), Some(id)) = (meta, id) {
            self.lock().session.note_envelope(m);
            self.set_client_era(Era::Modern, era::meta_version(m));
            let v = era::meta_version(m);
            if v != era::MODERN_VERSION {
                // We cannot gate an era we do not know: refuse rather than guess.
                self.send_client(&era::unsupported_version(id, &v));
                return false;
            }
        }
        request.is_none_or(|i| self.admit_request(msg, i))
    }

    /// Acts on an admitted client message, by method.
    fn dispatch(
        self: &Arc<Self>,
        msg: Value,
        line: Vec<u8>,
        id: Option<Value>,
        meta: Option<Value>,
        params: SentParams,
    ) {
        let modern = meta.is_some();
        match (msg.get("method").and_then(Value::as_str), id) {
            (None, Some(id)) => self.on_client_answer(id, msg, line),
            (Some(roots::LIST_CHANGED), id) => self.on_roots_changed(id),
            (Some("initialize"), Some(id)) => self.on_initialize(id, &msg, line),
            (Some("server/discover"), Some(id)) => {
                let meta = meta.unwrap_or_else(era::default_envelope);
                self.set_client_era(Era::Modern, era::meta_version(&meta));
                tokio::spawn(Arc::clone(self).handle_discover(id, meta, line));
            }
            (Some("tools/call"), Some(id)) => self.on_call(id, msg, line, modern, params),
            (Some("tools/list"), Some(id)) if self.policy.lean => {
                tokio::spawn(Arc::clone(self).lean_tools_list(id, modern));
            }
            (Some(m), Some(id)) => {
                let m = m.to_string();
                self.on_request(id, m, meta, line);
            }
            (Some("tools/call"), None) => self.on_call_without_id(&msg),
            (Some("notifications/cancelled"), None) => self.on_cancelled(&msg, line),
            _ => {
                self.send_child(line, None);
            }
        }
    }

    /// A response: to one of our own prompts, else to a downstream's request.
    fn on_client_answer(&self, id: Value, msg: Value, line: Vec<u8>) {
        match id.as_str().filter(|s| s.starts_with(OWN_ID_PREFIX)) {
            Some(s) => {
                let waiting = self.lock().holds.answered(s);
                match waiting {
                    Some(tx) => {
                        let _ = tx.send(msg);
                    }
                    // A late answer to a prompt we already withdrew: it was
                    // ours, the downstream never sent that request.
                    None => tracing::debug!("dropping a late answer to {s}"),
                }
            }
            // Only to a request the downstream made and the client was shown: an
            // answer to anything else (a question the shim answered itself, such
            // as roots/list, or one never asked) would put words in its mouth.
            None if self.lock().out.unasked(&key(&id)) => {
                self.send_child(line, None);
            }
            None => tracing::warn!(
                "dropping the client's answer to {id}: the downstream is not waiting for it"
            ),
        }
    }

    /// `roots/list_changed`: never forwarded, the vault root is fixed.
    fn on_roots_changed(&self, id: Option<Value>) {
        tracing::debug!("not forwarding the client's roots/list_changed: the vault root is fixed");
        if let Some(id) = id {
            self.send_client(&jsonrpc::error(
                &id,
                jsonrpc::INVALID_REQUEST,
                "roots/list_changed is a notification, and tc-shim does not forward it: the vault root is fixed",
            ));
        }
    }

    /// The client's `initialize`: the client is legacy; its capabilities pick the route.
    fn on_initialize(&self, id: Value, msg: &Value, line: Vec<u8>) {
        let v = at(msg, &["params", "protocolVersion"])
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string();
        self.set_client_era(Era::Legacy, v);
        let caps = at(msg, &["params", "capabilities"]).cloned();
        self.lock().session.set_client_caps(caps);
        self.forward_request(&id, Pending::Initialize, None, line)
    }

    /// A `tools/call`: held (with its place in the barrier) until judged on its own task;
    /// the lean facade's calls are unwrapped first.
    fn on_call(
        self: &Arc<Self>,
        id: Value,
        msg: Value,
        line: Vec<u8>,
        modern: bool,
        params: SentParams,
    ) {
        let facade = self.policy.lean.then(|| lean::facade_call(&msg)).flatten();
        let place = self.place_for(&msg, facade.as_ref());
        self.lock().holds.hold(
            key(&id),
            Held {
                cancelled: false,
                modern,
                schema: false,
                lean: facade.is_some(),
                place,
            },
        );
        match facade {
            None => {
                self.spawn_call(id, msg, line, params);
            }
            Some(lean::FacadeCall::List) => {
                tokio::spawn(Arc::clone(self).list_capabilities(id));
            }
            Some(lean::FacadeCall::Call(inner)) => {
                let line = inner.to_string().into_bytes();
                self.spawn_call(id, inner, line, params);
            }
            Some(lean::FacadeCall::Bad(why)) => {
                self.refuse(&id, Refusal::new(ErrorCode::InvalidInput, why, json!({})))
            }
        }
    }

    /// Any other request: forwarded, once the downstream's era is known for a modern one.
    fn on_request(self: &Arc<Self>, id: Value, m: String, meta: Option<Value>, line: Vec<u8>) {
        let kind = if m == "tools/list" {
            Pending::ToolsList
        } else {
            Pending::Plain
        };
        let modern = meta.is_some();
        match meta {
            Some(meta) if self.lock().session.down_era().is_none() => {
                tokio::spawn(Arc::clone(self).forward_modern(id, kind, meta, m, line));
            }
            _ => self.forward_request(&id, kind, modern.then_some(m), line),
        }
    }

    /// No id (a notification) or `"id": null`: it could not be answered, so it could not be
    /// gated either; a downstream that ran it would run it unconfirmed.
    fn on_call_without_id(&self, msg: &Value) {
        tracing::warn!("dropping a tools/call without an id: tc only runs calls it can answer");
        if msg.get("id").is_some() {
            self.send_client(&jsonrpc::error(
                &Value::Null,
                jsonrpc::INVALID_REQUEST,
                "tools/call needs a string or number id",
            ));
        }
    }

    /// `notifications/cancelled`: a held call is marked (and woken if it waits on the
    /// human); a forwarded one starts its grace timer. Forwarded either way.
    fn on_cancelled(self: &Arc<Self>, msg: &Value, line: Vec<u8>) {
        if let Some(rid) = at(msg, &["params", "requestId"]) {
            // One step over confirm's and forward's parts (`State::cancel`).
            let cancelled = self.lock().cancel(&key(rid));
            match cancelled {
                Cancelled::Held => return,
                Cancelled::Forwarded(t) => self.release_after_grace(key(rid), t),
                Cancelled::Nothing => {}
            }
        }
        self.send_child(line, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parsed_message_forwards_the_bytes_it_was_parsed_from() {
        let line = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#;
        let p = Parsed::parse(line.to_vec()).unwrap();
        assert_eq!(p.line, line);
        assert_eq!(p.msg, parse_message(line).unwrap());
    }

    #[test]
    fn a_message_over_lines_is_forwarded_as_the_value_judged() {
        for body in [
            "{\"id\":1,\n\"method\":\"ping\"}",
            "{\"id\":1,\r\"method\":\"ping\"}",
            "{\"id\":1,\"method\":\"ping\"}\r\n",
        ] {
            let p = Parsed::parse(body.as_bytes().to_vec()).unwrap();
            assert!(
                !p.line.contains(&b'\n') && !p.line.contains(&b'\r'),
                "{body:?}"
            );
            assert_eq!(parse_message(&p.line).unwrap(), p.msg, "{body:?}");
            assert_eq!(p.msg, parse_message(body.as_bytes()).unwrap());
        }
    }

    #[test]
    fn what_parse_message_refuses_is_refused() {
        for body in ["[1]", "7", "{", ""] {
            assert!(Parsed::parse(body.as_bytes().to_vec()).is_err(), "{body:?}");
        }
    }

    #[test]
    fn a_new_id_is_in_the_bytes_forwarded() {
        let p = Parsed::parse(br#"{"id":"a","method":"m"}"#.to_vec()).unwrap();
        let p = p.with_id(serde_json::json!("tc-http-1"));
        assert_eq!(p.msg["id"], "tc-http-1");
        assert_eq!(parse_message(&p.line).unwrap(), p.msg);
    }
}
