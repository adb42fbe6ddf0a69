//! One `tools/call`, on its own task, through the engine's stages in order: its turn in
//! the barrier, judge (`judge`), then either forward as it is or, gated, targets → a
//! human's approval (`confirm`) → run (`forward`). The order lives here and nowhere else.

use std::sync::Arc;

use serde_json::{json, Value};
use tc_core::config::Gate;
use tc_core::ErrorCode;

use crate::engine::confirm::{form, progress_token, Obtained};
use crate::engine::forward::rounds::Wrap;
use crate::engine::judge::{reserved_argument, strip, stripped, Judged, Unjudged};
use crate::engine::refusal::judged::policy_result;
use crate::engine::refusal::judged::{reserved_argument_result, target_result};
use crate::engine::refusal::Refusal;
use crate::engine::refusal::Shown;
use crate::engine::{key, Call, SentParams, Shim};
use crate::wire::era;
use crate::wire::mcp_headers;
use crate::wire::outbox::Known;
use crate::wire::peek::Peek;
use crate::wire::value::at;

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
        if self.lock().holds.cancelled(&key(&id)) == Some(true) {
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
            let r = Refusal::new(ErrorCode::InvalidInput, text, json!({}));
            return self.refuse(&id, r);
        };
        // The downstream's era first, for a modern call: its tool list is asked in it.
        if let Some(meta) = era::request_meta(&msg) {
            if let Err(e) = self.ensure_down_era(meta).await {
                tracing::warn!("could not find out the downstream's era: {e}");
            }
        }
        let j = match self.judge(&msg, name, sent).await {
            Ok(j) => j,
            Err(u) => return self.unjudged(&id, u),
        };
        if j.schema {
            self.lock().holds.set_schema(&key(&id));
        }
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

    /// Answers a call the judge stopped.
    fn unjudged(&self, id: &Value, u: Unjudged) {
        match u {
            Unjudged::Refused { refusal, schema } => {
                if schema {
                    self.lock().holds.set_schema(&key(id));
                }
                self.refuse(id, refusal)
            }
            Unjudged::Headers(why) => {
                self.answer_error(id, mcp_headers::HEADER_MISMATCH, why.to_string())
            }
        }
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
            return self.refuse(id, policy_result(&e));
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
        self.forward_held(id, sent, None, wrap, None);
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
            self.refuse(id, reserved_argument_result(&j.name, k));
            return false;
        }
        let binding = self.binding(&j.name, &j.args);
        let state_fp = match self.state_fp(gate, &j.args).await {
            Ok(fp) => fp,
            Err(e) => {
                self.refuse(id, target_result(&j.name, &e));
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
        let raised = std::sync::OnceLock::new();
        let call = Call {
            id,
            binding: &binding,
            shown: &shown,
            gate,
            args: &j.args,
            raised: &raised,
            progress: progress_token(msg),
        };
        match self.obtain(&call, msg, j, resuming).await {
            Obtained::Approved(a) => {
                // The human may have taken minutes; a server that redefined the tool
                // meanwhile would run a call judged (paths, ACL, floor) and approved by its
                // old definition: the judge looks again before forward runs it.
                match Box::pin(self.redefined(&j.name, j.def.as_deref())).await {
                    Some(why) => self.refuse_redefined(&call, &why).await,
                    None => self.run_approved(&call, msg, a, j, resuming).await,
                }
            }
            Obtained::Continue(round) => {
                self.forward_continued(&call, msg, round, &j.paths, j.read_only)
                    .await
            }
            Obtained::Fresh => return true,
            Obtained::Done => {}
        }
        false
    }
}
