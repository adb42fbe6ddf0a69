//! A `tools/call`, on its own task: its turn in the barrier, then judge (gate entry, floor,
//! paths, `when`) → targets (`state_fp`) → a route for the human's approval → forward.

pub mod policy;
pub mod targets;
pub mod tools;

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Value};
use tc_core::config::{Gate, Targets};
use tc_core::ErrorCode;
use tc_proto::v1::Binding;

use crate::engine::confirm::continued::Wrap;
use crate::engine::confirm::form;
use crate::engine::confirm::Obtained;
use crate::engine::forward::{strip, stripped};
use crate::engine::judge::tools::Tool;
use crate::engine::refusal::judged::{
    floor_result, policy_result, reserved_argument_result, target_result, unlisted_result,
};
use crate::engine::refusal::Shown;
use crate::engine::{key, Call, SentParams, Shim};
use crate::wire::era;
use crate::wire::mcp_headers;
use crate::wire::outbox::Known;
use crate::wire::peek::Peek;
use crate::wire::value::at;
use policy::PolicyError;

/// What the judge found out about a call.
pub(in crate::engine) struct Judged {
    pub(in crate::engine) name: String,
    pub(in crate::engine) args: Value,
    /// The tool's gate entry, if it has one (whether or not its `when` holds).
    pub(in crate::engine) gate: Option<Gate>,
    /// Its path arguments, resolved under the vault root: what the ACL judges.
    pub(in crate::engine) paths: Vec<PathBuf>,
    /// The gate's `when` holds for these arguments.
    pub(in crate::engine) applies: bool,
    /// The server declares the tool read-only.
    pub(in crate::engine) read_only: bool,
    /// The definition it was judged by (None: the server did not list it).
    pub(in crate::engine) def: Option<Arc<Value>>,
}

impl Shim {
    /// Runs `handle_call` on its own task, holding one of `calls`' permits until it ends.
    pub(in crate::engine) fn spawn_call(
        self: &Arc<Self>,
        id: Value,
        msg: Value,
        line: Vec<u8>,
        sent: SentParams,
    ) {
        let permit = Arc::clone(&self.calls).try_acquire_owned().ok();
        let shim = Arc::clone(self);
        // Boxed before the spawn: the task moves (and, ended, overwrites) only a pointer,
        // not the call's whole state, several times per call.
        tokio::spawn(Box::pin(async move {
            let _running = permit;
            shim.handle_call(id, msg, line, sent).await
        }));
    }

    /// Handles one `tools/call` from the client (every step may answer it instead).
    async fn handle_call(self: Arc<Self>, id: Value, msg: Value, line: Vec<u8>, sent: SentParams) {
        // Everything below judges the call against the vault as it is now: no change made
        // through this shim may land between that and the downstream running it.
        self.wait_turn(&id).await;
        if self.lock().held.get(&key(&id)).is_some_and(|h| h.cancelled) {
            // Cancelled while it waited: judging it would only raise a request nobody gets.
            self.unhold(&id);
            self.gov.untrack(&key(&id));
            return;
        }
        let Some(name) = at(&msg, &["params", "name"])
            .and_then(Value::as_str)
            .map(String::from)
        else {
            // Without a string name there is nothing to judge, and a server that read a
            // number or a list as a name would run a call the gate never saw: refused.
            let text = "tools/call needs params.name, a string; the call was not run";
            let r =
                crate::engine::refusal::tool_error(ErrorCode::InvalidInput, text, json!({}), None);
            return self.answer(&id, r);
        };
        let Some(j) = self.judge(&id, &msg, name, sent).await else {
            return;
        };
        let no_params = json!({});
        let params = msg.get("params").unwrap_or(&no_params);
        // A call echoing a requestState is the second half of a confirmation that was
        // already offered: it is judged by its answer even if the gate's condition
        // stopped applying meanwhile (a decline must never turn into a plain forward).
        // Only the modern era defines requestState, but a re-send that lost its `_meta`
        // envelope is still that answer: the field alone decides.
        let resuming = form::request_state(params).is_some();
        let Some(gate) = j.gate.clone().filter(|_| j.applies || resuming) else {
            return self.forward_ungated(&id, &msg, line, &j).await;
        };
        // Boxed (as is every rare path below): a call's task is spawned, moved and dropped
        // whole, so its size is copied on every call, gated or not.
        if Box::pin(self.gated(&id, &msg, &j, &gate, resuming)).await {
            // Judged as if it had come without them: gated or not, token or not.
            let m = strip(&msg);
            let line = m.to_string().into_bytes();
            // Its headers were checked against these arguments already.
            Box::pin(Arc::clone(&self).handle_call(id.clone(), m, line, None)).await;
        }
    }

    /// Judge: the gate entry, the floor (a destructive tool without one is refused), the
    /// paths under the root, whether `when` holds. None when the call was answered.
    async fn judge(
        &self,
        id: &Value,
        msg: &Value,
        name: String,
        sent: SentParams,
    ) -> Option<Judged> {
        if let Some(meta) = era::request_meta(msg) {
            if let Err(e) = self.ensure_down_era(meta).await {
                tracing::warn!("could not find out the downstream's era: {e}");
            }
        }
        let args = at(msg, &["params", "arguments"])
            .cloned()
            .unwrap_or_else(|| json!({}));
        let gate = self.policy.gate_entry(&name).cloned();
        if let Err(e) = self.ensure_tools(&name).await {
            tracing::warn!("could not list downstream tools before {name}: {e}");
            // Without the tool list the floor (destructiveHint) cannot be seen: fail closed
            // for every tool the policy does not already gate.
            if gate.is_none() {
                self.answer(id, unlisted_result(&name, &e));
                return None;
            }
        }
        let tool = self.known_tool(&name);
        if let Err(why) = self.check_params(sent.as_deref(), tool.as_ref(), &args) {
            self.answer_error(id, mcp_headers::HEADER_MISMATCH, why);
            return None;
        }
        let def = tool.as_ref().map(|t| &*t.def);
        if def.is_some_and(|d| d.get("outputSchema").is_some()) {
            if let Some(h) = self.lock().held.get_mut(&key(id)) {
                h.schema = true;
            }
        }
        if policy::is_floor(def) && gate.is_none() {
            self.answer(id, floor_result(&name, def));
            return None;
        }
        let paths = match self.resolve_paths(&name, tool.as_ref(), &args, gate.as_ref()) {
            Ok(p) => p,
            Err(e) => return self.refused(id, &e),
        };
        let applies = match &gate {
            Some(g) => match self.policy.applies(g, &args) {
                Ok(a) => a,
                Err(e) => return self.refused(id, &e),
            },
            None => false,
        };
        let read_only = policy::is_read_only(def);
        let def = tool.map(|t| t.def);
        Some(Judged {
            name,
            args,
            gate,
            paths,
            applies,
            read_only,
            def,
        })
    }

    /// The paths the call's file-naming arguments resolve to, with the tool's discovered
    /// arguments taken from the tool cache (found afresh for a tool not in it).
    fn resolve_paths(
        &self,
        name: &str,
        tool: Option<&Tool>,
        args: &Value,
        gate: Option<&Gate>,
    ) -> Result<Vec<PathBuf>, PolicyError> {
        let uncached;
        let discovered = match tool {
            Some(t) => t.paths(&self.policy),
            None => {
                uncached = self.policy.discover_args(name, None);
                &uncached[..]
            }
        };
        self.policy.resolve_discovered(discovered, args, gate)
    }

    /// A call no confirmation is asked for: the governor may page it; else the ACL, and out
    /// it goes (as the shim read it, when it has a gate entry or carries a token).
    async fn forward_ungated(&self, id: &Value, msg: &Value, line: Vec<u8>, j: &Judged) {
        // Governor: a paged tool is served page by page (its items ACL-checked one by one).
        let paged = self.gov.paged_items(&j.name).is_some();
        if paged && Box::pin(self.page_call(id, msg, &j.name, &j.args, j.read_only)).await {
            return;
        }
        if let Err(e) = self.policy.check_acl(&j.paths, j.read_only) {
            return self.answer(id, policy_result(&e));
        }
        let has_gate = j.gate.is_some();
        // A tool with a gate entry whose `when` did not hold goes out as the shim read
        // it (re-serialized: duplicate keys collapsed), so a server whose JSON parser
        // keeps another duplicate cannot act on a value the condition never judged.
        let sent = if has_gate || j.args.get("elicit_token").is_some() {
            (stripped(msg), Known::Nothing)
        } else {
            // Its bytes as they came: what the engine read of them is what they say.
            (line, Known::Request(Box::new(Peek::of_value(msg))))
        };
        // Its downstream may answer with a round of its own, which the re-sent call
        // must not present to the gate as an answer to our form. Only a modern call
        // can get one; the others keep the downstream answer's fast path.
        let wrap = (has_gate && era::request_meta(msg).is_some())
            .then(|| Wrap::unconfirmed(self.binding(&j.name, &j.args), self.is_lean(id)));
        self.forward_held(id, sent, None, wrap);
    }

    /// A call its gate applies to (or that resumes a confirmation): targets, a human's
    /// approval on a route, then run. True when it must be judged afresh without its state.
    async fn gated(
        &self,
        id: &Value,
        msg: &Value,
        j: &Judged,
        gate: &Gate,
        resuming: bool,
    ) -> bool {
        // The args_hash leaves out tc's own fields, so a gated call must not carry them
        // to the downstream: approved arguments plus an unbound extra would run.
        if let Some(k) = reserved_argument(&j.args) {
            self.answer(id, reserved_argument_result(&j.name, k));
            return false;
        }
        let binding = self.binding(&j.name, &j.args);
        let state_fp = match self.state_fp(gate, &j.args).await {
            Ok(fp) => fp,
            Err(e) => {
                self.answer(id, target_result(&j.name, &e));
                return false;
            }
        };
        let shown = Shown {
            vault: &self.policy.vault,
            tool: &j.name,
            caller: &self.caller,
            args_hash: &binding.args_hash,
            state_fp: &state_fp,
            lean: self.is_lean(id),
        };
        let call = Call {
            id,
            binding: &binding,
            shown: &shown,
            gate,
            args: &j.args,
        };
        match self.obtain(&call, msg, j, resuming).await {
            Obtained::Approved(a) => self.run_approved(&call, msg, a, j, resuming).await,
            Obtained::Fresh => return true,
            Obtained::Done => {}
        }
        false
    }

    /// Targets: the fingerprint of what the gate's confirmation covers, as it is now.
    pub(in crate::engine) async fn state_fp(
        &self,
        gate: &Gate,
        args: &Value,
    ) -> Result<String, String> {
        match &gate.targets {
            Some(Targets::Probe { tool, arguments }) => {
                let probe_args = targets::probe_arguments(arguments, args);
                let r = self
                    .internal("tools/call", json!({"name": tool, "arguments": probe_args}))
                    .await?;
                Ok(targets::probe_fp(tool, &probe_args, &r))
            }
            Some(t) => targets::local_fp(&self.policy, t, args).map_err(|e| e.to_string()),
            None => Err("the gate declares no targets".into()),
        }
    }

    /// Answers a call the policy refused; None, for [`Shim::judge`] to return.
    fn refused<T>(&self, id: &Value, e: &PolicyError) -> Option<T> {
        self.answer(id, policy_result(e));
        None
    }

    /// What an approval of this call is bound to: this vault, tool, caller and arguments.
    fn binding(&self, name: &str, args: &Value) -> Binding {
        Binding {
            vault: self.policy.vault.clone(),
            tool: name.to_string(),
            caller: self.caller.clone(),
            args_hash: tc_core::hash::args_hash(name, args),
        }
    }

    /// The held call came through the lean facade's `call_capability`.
    fn is_lean(&self, id: &Value) -> bool {
        self.lock().held.get(&key(id)).is_some_and(|h| h.lean)
    }
}

/// The first of tc's own fields other than `elicit_token` (which the shim strips) found
/// in a call's arguments.
fn reserved_argument(args: &Value) -> Option<&'static str> {
    tc_core::hash::GATE_FIELDS
        .iter()
        .copied()
        .filter(|k| *k != "elicit_token")
        .find(|k| args.get(k).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_arguments_are_tc_fields_other_than_the_token() {
        assert_eq!(
            reserved_argument(&json!({"elicit_token": "x", "a": 1})),
            None
        );
        assert_eq!(reserved_argument(&json!({"cursor": "c"})), Some("cursor"));
        assert_eq!(
            reserved_argument(&json!({"requestState": null})),
            Some("requestState")
        );
        assert_eq!(reserved_argument(&json!("not an object")), None);
    }
}
