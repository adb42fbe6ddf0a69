//! Forward: a client request or an approved call goes to the downstream (unless cancelled
//! meanwhile), a held call is answered by the shim, and the exit path fails what waits.

pub mod internal;
mod server;
pub(in crate::engine) mod table;

use serde_json::Value;
use tokio::sync::oneshot;

use crate::engine::confirm::continued::Wrap;
use crate::engine::confirm::holds::Held;
use crate::engine::judge::{stripped, Judged};
use crate::engine::refusal::judged::policy_result;
use crate::engine::refusal::Refusal;
use crate::engine::{key, Approval, Call, Shim};
use crate::wire::era;
use crate::wire::jsonrpc;
use crate::wire::outbox::Known;
use table::{Forwarded, Pending};

impl Shim {
    /// Forwards a client request downstream, remembering it so its response can be matched.
    pub(in crate::engine) fn forward_request(
        &self,
        id: &Value,
        kind: Pending,
        modern: Option<String>,
        line: Vec<u8>,
    ) {
        let f = Forwarded::plain(id, kind, modern);
        self.lock().out.forwarded(key(id), f);
        if !self.send_child(line, None) {
            self.lock().out.answered(&key(id));
            self.send_client(&jsonrpc::error(
                id,
                jsonrpc::INTERNAL_ERROR,
                "the downstream MCP server is not running",
            ));
        }
    }

    /// Forwards a held call unless it was cancelled meanwhile (checked under the state lock).
    pub(in crate::engine) fn forward_held(
        &self,
        id: &Value,
        (line, known): (Vec<u8>, Known),
        ack: Option<oneshot::Sender<()>>,
        wrap: Option<Wrap>,
    ) -> bool {
        // Confirm hands the call to forward under one lock: see `State::hand_over`.
        if self.lock().hand_over(id, wrap).is_none() {
            return false;
        }
        if !self.to_child.send_known(line, ack, known) {
            self.lock().out.answered(&key(id));
            self.send_client(&jsonrpc::error(
                id,
                jsonrpc::INTERNAL_ERROR,
                "the downstream MCP server is not running",
            ));
        }
        true
    }

    /// Runs a call a human approved: the ACL first (a refusal releases the approval), then
    /// the call as the shim judged it, and once it was written, RecordConsumed.
    pub(in crate::engine) async fn run_approved(
        &self,
        c: &Call<'_>,
        msg: &Value,
        approval: Approval,
        j: &Judged,
        resuming: bool,
    ) {
        // The human may have taken minutes; a server that redefined the tool meanwhile
        // would run a call judged (paths, ACL, floor) and approved by its old definition.
        if let Some(why) = Box::pin(self.redefined(&j.name, j.def.as_deref())).await {
            return self.refuse_redefined(c, &why).await;
        }
        if let Err(e) = self.policy.check_acl(&j.paths, j.read_only) {
            if let Some(r) = &approval.redemption {
                if let Err(re) = self.daemon.release(r, "acl").await {
                    tracing::warn!("release after ACL refusal failed: {re}");
                }
            }
            return self.refuse(c.id, policy_result(&e));
        }
        let (ack_tx, ack_rx) = oneshot::channel();
        let modern = era::request_meta(msg).is_some();
        let wrap = (modern || resuming).then(|| Wrap::approved(c));
        if !self.forward_held(c.id, (stripped(msg), Known::Nothing), Some(ack_tx), wrap) {
            if let Some(r) = &approval.redemption {
                if let Err(re) = self.daemon.release(r, "cancelled").await {
                    tracing::warn!("release after cancellation failed: {re}");
                }
            }
            return;
        }
        if ack_rx.await.is_ok() {
            let redemption = approval.redemption.as_deref().unwrap_or("");
            if let Err(e) = self
                .daemon
                .consumed(
                    c.binding.clone(),
                    c.shown.state_fp,
                    approval.route,
                    redemption,
                )
                .await
            {
                tracing::warn!("recording the consumed confirmation failed: {e}");
            }
        }
    }

    /// Why tool `name`'s definition is no longer `judged`, the one its call was judged
    /// by (a `tools/list_changed` came meanwhile), or None. Listed again when the cache
    /// was emptied, or lacks the tool (a client's own listing may hold one page only).
    pub(in crate::engine) async fn redefined(
        &self,
        name: &str,
        judged: Option<&Value>,
    ) -> Option<String> {
        let relist = || async {
            self.list_all_tools()
                .await
                .err()
                .map(|e| format!("its tool list could not be read again ({e})"))
        };
        if !self.lock().tools.listed() {
            if let Some(why) = relist().await {
                return Some(why);
            }
        }
        let mut now = self.tool_def(name);
        if now.is_none() && judged.is_some() {
            if let Some(why) = relist().await {
                return Some(why);
            }
            now = self.tool_def(name);
        }
        match (judged, now.as_deref()) {
            (a, b) if a == b => None,
            (Some(_), None) => Some(format!("the server no longer lists `{name}`")),
            (None, Some(_)) => Some(format!(
                "the server now lists `{name}`, which it did not when the call was judged"
            )),
            _ => Some(format!("the server changed the definition of `{name}`")),
        }
    }

    /// Answers an approved call whose tool was redefined: `replay_drift`, nothing run, the
    /// approval not given back (its retry is judged, and asks, afresh).
    async fn refuse_redefined(&self, c: &Call<'_>, why: &str) {
        tracing::warn!(tool = %c.shown.tool, "not running an approved call: the server redefined its tool since it was judged");
        let detail = serde_json::json!({ "why": format!("{why} after the call was judged") });
        let ev = tc_core::codes::events::NOT_OBTAINED;
        if let Err(e) = self
            .daemon
            .append_event(ev, c.binding, c.shown.state_fp, detail)
            .await
        {
            tracing::warn!("recording the redefined tool failed: {e}");
        }
        let text = format!(
            "tc-shim did not run `{}`: {why} (notifications/tools/list_changed) after this call \
             was judged and approved. Nothing was run and the approval is spent. Send the call \
             again if it is still wanted: it is judged against the new definition and needs a \
             new approval.",
            c.shown.tool
        );
        let r = Refusal::new(tc_core::ErrorCode::ReplayDrift, text, c.shown.details());
        self.refuse(c.id, r);
    }

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
    pub(in crate::engine) fn answer(&self, id: &Value, mut result: Value) {
        // Answered here: no downstream answer will come to cap.
        self.gov.untrack(&key(id));
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

    /// The downstream is gone: every pending call gets an error.
    pub(in crate::engine) fn fail_pending(&self) {
        let (pending, held) = {
            let mut st = self.lock();
            // Closed before the governor is cleared, under the same lock: a page request
            // checks `gone` and is tracked under it (`paged/io.rs`).
            let closed = st.close();
            self.gov.clear();
            closed
        };
        for (_, Forwarded { id, .. }) in pending {
            self.send_client(&jsonrpc::error(
                &id,
                jsonrpc::INTERNAL_ERROR,
                "the downstream MCP server exited before answering",
            ));
        }
        for (k, h) in held {
            if !h.cancelled {
                self.send_client(&jsonrpc::error(
                    &k.to_value(),
                    jsonrpc::INTERNAL_ERROR,
                    "the downstream MCP server exited before answering",
                ));
            }
        }
    }
}
