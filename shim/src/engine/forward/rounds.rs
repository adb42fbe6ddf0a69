//! A gated call's way out when its downstream may answer with a round of its own: the
//! call goes out wrapped, such a round reaches the client sealed in our state, and the
//! client's answer goes back to the downstream.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Value};
use tc_core::ErrorCode;
use tc_proto::v1::Binding;
use tokio::sync::oneshot;

use crate::daemon_client::DaemonError;
use crate::engine::confirm::continued::Round;
use crate::engine::confirm::holds::Held;
use crate::engine::judge::remove_token;
use crate::engine::judge::targets;
use crate::engine::outcome::Ran;
use crate::engine::refusal::judged::{policy_result, unreachable_result};
use crate::engine::refusal::Refusal;
use crate::engine::refusal::Shown;
use crate::engine::rounds::{downstream_round, round_mac, Inner};
use crate::engine::{key, Call, Shim};
use crate::wire::era;
use crate::wire::jsonrpc;
use crate::wire::outbox::Known;

/// RecordConsumed's route for a downstream round of an approved call: the handler runs
/// again, under the approval the first run had.
const ROUTE: &str = "continuation";

/// A gated-tool call on its way downstream, kept with its pending entry in case the
/// downstream answers it with a round of its own.
pub(in crate::engine) struct Wrap {
    binding: Binding,
    /// The fingerprint the call was approved against; None if its gate's condition did
    /// not hold, so it went out unconfirmed.
    approved_fp: Option<String>,
    lean: bool,
}

impl Wrap {
    /// For a call that was confirmed against `c`'s fingerprint.
    pub(in crate::engine) fn approved(c: &Call<'_>) -> Wrap {
        Wrap {
            binding: c.binding.clone(),
            approved_fp: Some(c.shown.state_fp.to_string()),
            lean: c.shown.lean,
        }
    }

    /// For a call whose gate did not apply.
    pub(in crate::engine) fn unconfirmed(binding: Binding, lean: bool) -> Wrap {
        Wrap {
            binding,
            approved_fp: None,
            lean,
        }
    }
}

/// Why a downstream's round could not be sealed.
enum Unsealed {
    /// Too large to seal (or to ever come back through OpenState).
    TooLarge(String),
    Daemon(DaemonError),
}

/// The re-sent call as the downstream gets it: without our token, with its own
/// requestState in place of ours, and with the client's answers to its questions.
fn continued(msg: &Value, state: Option<&str>) -> Vec<u8> {
    let mut m = msg.clone();
    remove_token(&mut m);
    if let Some(p) = m.get_mut("params").and_then(Value::as_object_mut) {
        match state {
            Some(s) => p.insert("requestState".into(), json!(s)),
            None => p.remove("requestState"),
        };
    }
    m.to_string().into_bytes()
}

impl Shim {
    /// A downstream answer to a wrapped call: a round of its own goes to the client under
    /// our state (sealed on a task of its own: the reader does not wait on the daemon);
    /// anything else is handed back to be sent as it is. While it is sealed the call is
    /// held again, so its id stays in use and a cancellation drops the round.
    pub(in crate::engine) fn wrap_answer(
        self: &Arc<Self>,
        id: Value,
        msg: Value,
        w: Wrap,
    ) -> Option<Value> {
        let Some(inner_state) = downstream_round(&msg) else {
            return Some(msg);
        };
        self.lock().holds.hold(
            key(&id),
            Held {
                cancelled: false,
                modern: false,
                schema: false,
                lean: w.lean,
                // Its place was released with the answer: the round is the client's now.
                place: None,
            },
        );
        let permit = Arc::clone(&self.calls).try_acquire_owned().ok();
        let shim = Arc::clone(self);
        tokio::spawn(async move {
            let _running = permit;
            let result = shim.seal_round(&id, msg, inner_state, &w).await;
            // Only to a call still held: not cancelled meanwhile, nor answered by the
            // exit path (the downstream went away).
            if shim.unhold(&id).is_some_and(|h| !h.cancelled) {
                shim.send_client(&jsonrpc::response(&id, result));
            }
        });
        None
    }

    /// The downstream's round as the client gets it: under our state, within the
    /// response cap; or the refusal that stands in for it.
    async fn seal_round(&self, id: &Value, msg: Value, state: Option<String>, w: &Wrap) -> Value {
        let b = &w.binding;
        let fp = w.approved_fp.clone().unwrap_or_else(targets::none_fp);
        let shown = Shown {
            vault: &b.vault,
            tool: &b.tool,
            caller: &b.caller,
            args_hash: &b.args_hash,
            state_fp: &fp,
            lean: w.lean,
        };
        let sealed = self.seal_inner(w, &fp, state).await;
        // Its state cannot go out bare: the re-sent call would be taken for an answer to
        // our form. Nothing ran that a refusal hides (the downstream only asked).
        let refusal = match sealed {
            Ok(ours) => {
                let mut result = msg.get("result").cloned().unwrap_or_default();
                result["requestState"] = json!(ours);
                // Ours is longer than the downstream's: the cap applies to what goes out.
                let bytes = jsonrpc::response(id, result.clone()).to_string().len();
                if bytes <= self.gov.cap {
                    return result;
                }
                self.overflow_refusal(&b.tool, &b.args_hash, bytes as u64)
            }
            Err(Unsealed::TooLarge(why)) => {
                let text = format!(
                    "The server asked a question of its own while running `{}`, but tc cannot carry \
                     its requestState ({why}). Nothing was run. Tell the human: this server's own \
                     question cannot pass through tc's gate.",
                    b.tool
                );
                let mut d = shown.details();
                d["reason"] = json!("bad_argument");
                Refusal::new(ErrorCode::InvalidInput, text, d)
            }
            Err(Unsealed::Daemon(DaemonError::Unreachable { socket, why })) => unreachable_result(
                &format!(
                    "The server asked a question of its own while running `{}`, and tc carries \
                     its state through the tc daemon",
                    b.tool
                ),
                &shown,
                &socket,
                &why,
            ),
            Err(Unsealed::Daemon(e)) => self.daemon_result(&e, &shown),
        };
        let schema = self
            .tool_def(&b.tool)
            .is_some_and(|d| d.get("outputSchema").is_some());
        let mut result = refusal.render(schema);
        era::mark_complete(&mut result, "tools/call");
        result
    }

    /// Seals the downstream's round (its state, whether the call was approved, our MAC)
    /// inside a state of ours at `fp`.
    async fn seal_inner(
        &self,
        w: &Wrap,
        fp: &str,
        state: Option<String>,
    ) -> Result<String, Unsealed> {
        let len = state.as_ref().map_or(0, String::len);
        if len > tc_core::MAX_SEALED_LEN {
            // Could never come back through OpenState: not worth a round trip to tcd.
            return Err(Unsealed::TooLarge(format!(
                "{len} bytes; a sealed state is at most {} bytes",
                tc_core::MAX_SEALED_LEN
            )));
        }
        let b = &w.binding;
        let approved = w.approved_fp.is_some();
        let mac = round_mac(b, fp, state.as_deref(), approved);
        let inner = Inner {
            state,
            approved,
            mac,
        };
        let bytes = serde_json::to_vec(&inner).expect("Inner serializes");
        match self.daemon.seal_state(b.clone(), fp, bytes).await {
            Ok(ours) => Ok(ours),
            Err(e) if e.reason() == Some(tc_core::Reason::BadArgument) => {
                Err(Unsealed::TooLarge(e.to_string()))
            }
            Err(e) => Err(Unsealed::Daemon(e)),
        }
    }

    /// Sends a downstream round back to the downstream (ACL first, as for every forward)
    /// and, for an approved call, records the handler's run.
    pub(in crate::engine) async fn forward_continued(
        &self,
        c: &Call<'_>,
        msg: &Value,
        round: Round,
        paths: &[PathBuf],
        read_only: bool,
    ) {
        if let Err(e) = self.policy.check_acl(paths, read_only) {
            return self.refuse(c.id, policy_result(&e));
        }
        let wrap = if round.approved {
            Wrap::approved(c)
        } else {
            Wrap::unconfirmed(c.binding.clone(), c.shown.lean)
        };
        let (ack_tx, ack_rx) = oneshot::channel();
        let line = continued(msg, round.state.as_deref());
        let sent = (line, Known::Nothing);
        let ran = round.approved.then(|| Ran::of(self, c, ROUTE));
        if !self.forward_held(c.id, sent, Some(ack_tx), Some(wrap), ran) || !round.approved {
            return;
        }
        if ack_rx.await.is_ok() {
            let s = c.shown;
            if let Err(e) = self
                .daemon
                .consumed(c.binding.clone(), s.state_fp, ROUTE, "")
                .await
            {
                tracing::warn!("recording the continued run failed: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_downstream_gets_its_own_state_and_answers_without_our_token() {
        let msg = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
            "name": "delete_file",
            "arguments": {"path": "a", "elicit_token": "t"},
            "requestState": "ours",
            "inputResponses": {"k": {"action": "accept"}},
            "_meta": {"m": 1},
        }});
        let out: Value = serde_json::from_slice(&continued(&msg, Some("theirs"))).unwrap();
        assert_eq!(out["params"]["requestState"], "theirs");
        assert_eq!(out["params"]["arguments"], json!({"path": "a"}));
        assert_eq!(out["params"]["inputResponses"]["k"]["action"], "accept");
        assert_eq!(out["params"]["_meta"]["m"], 1);
        assert_eq!(out["id"], 9);
        let out: Value = serde_json::from_slice(&continued(&msg, None)).unwrap();
        assert!(out["params"].get("requestState").is_none(), "{out}");
    }
}
