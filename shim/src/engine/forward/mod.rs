//! Forward: a client request or an approved call goes to the downstream (unless cancelled
//! meanwhile), a held call is answered by the shim, and the exit path fails what waits.

pub mod internal;
pub(in crate::engine) mod rounds;
mod server;
pub(in crate::engine) mod table;

use serde_json::Value;
use tokio::sync::oneshot;

use crate::engine::forward::rounds::Wrap;
use crate::engine::judge::{stripped, Judged};
use crate::engine::outcome::Ran;
use crate::engine::refusal::judged::policy_result;
use crate::engine::{key, Approval, Call, Shim};
use crate::wire::era;
use crate::wire::jsonrpc;
use crate::wire::outbox::Known;
use table::{Forwarded, Pending};
use tc_core::codes::Outcome;

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
        ran: Option<Box<Ran>>,
    ) -> bool {
        // Confirm hands the call to forward under one lock: see `State::hand_over`.
        if self.lock().hand_over(id, wrap, ran).is_none() {
            return false;
        }
        if !self.to_child.send_known(line, ack, known) {
            // Never written: nothing ran.
            let f = self.lock().out.answered(&key(id));
            if let Some(r) = f.and_then(|f| f.ran) {
                r.settle(Outcome::Denied);
            }
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
        if let Err(e) = self.policy.check_acl(&j.paths, j.read_only) {
            if let Some(r) = &approval.redemption {
                if let Err(re) = self.daemon.release(r, "acl").await {
                    tracing::warn!("release after ACL refusal failed: {re}");
                }
            }
            self.record_denied(c, "acl");
            return self.refuse(c.id, policy_result(&e));
        }
        let (ack_tx, ack_rx) = oneshot::channel();
        let modern = era::request_meta(msg).is_some();
        let wrap = (modern || resuming).then(|| Wrap::approved(c));
        let ran = Some(Ran::of(self, c, approval.route));
        let sent = (stripped(msg), Known::Nothing);
        if !self.forward_held(c.id, sent, Some(ack_tx), wrap, ran) {
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
