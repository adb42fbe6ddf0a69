//! A downstream's own `input_required` round on a gated tool: its `requestState` goes out
//! sealed in ours (never taken for an answer to our form), bound to this call, spent once.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tc_core::ErrorCode;
use tc_proto::v1::Binding;
use tokio::sync::oneshot;

use crate::daemon_client::DaemonError;
use crate::engine::confirm::holds::Held;
use crate::engine::judge::remove_token;
use crate::engine::judge::targets;
use crate::engine::refusal::judged::{policy_result, unreachable_result};
use crate::engine::refusal::Refusal;
use crate::engine::refusal::Shown;
use crate::engine::{key, Approval, Call, Shim};
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

/// What our state carries around a downstream's round (the daemon's `inner` bytes).
#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct Inner {
    /// The downstream's own requestState, exactly as it sent it (it may send none).
    state: Option<String>,
    /// The call had been approved (the state is sealed with the approved fingerprint).
    approved: bool,
    /// [`round_mac`] of this round, by this process: tcd's seal alone proves nothing
    /// about `approved`, since anything running as the human (in guarded mode, the
    /// agent's shell) may call SealState with any `inner`.
    #[serde(default)]
    mac: String,
}

/// This process's key for [`round_mac`], random per process and never written anywhere
/// (a round of an approved call cannot be continued by another tc-shim process).
fn round_key() -> &'static [u8; 32] {
    static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        let mut k = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut k);
        k
    })
}

/// HMAC of everything a round is: the call, the approved fingerprint, the downstream's
/// state and whether the call was approved.
fn round_tag(b: &Binding, fp: &str, state: Option<&str>, approved: bool) -> Vec<u8> {
    use hmac::Mac as _;
    let doc = json!([b.vault, b.tool, b.caller, b.args_hash, fp, state, approved]);
    let mut m = <hmac::Hmac<sha2::Sha256>>::new_from_slice(round_key()).expect("any key length");
    m.update(doc.to_string().as_bytes());
    m.finalize().into_bytes().to_vec()
}

/// [`round_tag`] in hex, as a round carries it.
fn round_mac(b: &Binding, fp: &str, state: Option<&str>, approved: bool) -> String {
    hex::encode(round_tag(b, fp, state, approved))
}

/// Whether `inner` is a round this process sealed for `b` at `fp` (constant time).
fn round_is_ours(b: &Binding, fp: &str, inner: &Inner) -> bool {
    let Ok(mac) = hex::decode(&inner.mac) else {
        return false;
    };
    let tag = round_tag(b, fp, inner.state.as_deref(), inner.approved);
    // Constant time, as every tag comparison in the workspace (security.rs checks).
    subtle::ConstantTimeEq::ct_eq(tag.as_slice(), mac.as_slice()).into()
}

/// A downstream round the client answered: what goes back to the downstream.
pub(in crate::engine) struct Round {
    state: Option<String>,
    approved: bool,
}

/// Why a downstream's round could not be sealed.
enum Unsealed {
    /// Too large to seal (or to ever come back through OpenState).
    TooLarge(String),
    Daemon(DaemonError),
}

/// How a re-sent call's requestState was judged.
pub(in crate::engine) enum Resumed {
    /// Our confirmation, approved.
    Approved(Approval),
    /// A downstream's round: it goes back to the downstream.
    Continue(Round),
    /// A downstream's round of a call that went out unconfirmed, whose gate applies now:
    /// the call needs a confirmation like any new one.
    Fresh,
    /// Answered already (declined, refused, offered again).
    Answered,
}

/// The downstream's `requestState` if `msg` answers with a round of its own
/// (`resultType: "input_required"`): `Some(None)` for a round without a state.
pub(in crate::engine) fn downstream_round(msg: &Value) -> Option<Option<String>> {
    let r = msg.get("result")?;
    if r.get("resultType").and_then(Value::as_str) != Some("input_required") {
        return None;
    }
    Some(
        r.get("requestState")
            .and_then(Value::as_str)
            .map(String::from),
    )
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

    /// A re-sent call whose state (already verified, not yet spent, sealed at `sealed_fp`)
    /// carries `inner`: a round of an approved call must be one this process sealed; the
    /// state is spent, against the approved fingerprint if the call was approved (a
    /// changed target is `replay_drift`), and the downstream's round goes on.
    pub(in crate::engine) async fn continue_round(
        &self,
        c: &Call<'_>,
        state: &str,
        inner: &[u8],
        sealed_fp: &str,
        applies: bool,
    ) -> Resumed {
        let Ok(inner) = serde_json::from_slice::<Inner>(inner) else {
            // Sealed by tcd for this very call, so only a version skew or a bug gets here.
            let text = format!(
                "The requestState of `{}` could not be read back (a tc-shim of another version sealed \
                 it?). Nothing was run. Send the call again without requestState.",
                c.shown.tool
            );
            let mut d = c.shown.details();
            d["reason"] = json!("invalid");
            self.refuse(c.id, Refusal::new(ErrorCode::InvalidInput, text, d));
            return Resumed::Answered;
        };
        // A round of an approved call runs the call again under that approval: only if
        // this process sealed it (not a state forged through tcd's socket).
        if inner.approved && !round_is_ours(c.binding, sealed_fp, &inner) {
            let text = format!(
                "The requestState of `{}` claims a downstream round of an approved call, but this \
                 tc-shim did not seal it (made through tcd's socket, or by another tc-shim \
                 process). Nothing was run. Send the call again without requestState.",
                c.shown.tool
            );
            let mut d = c.shown.details();
            d["reason"] = json!("invalid");
            self.refuse(c.id, Refusal::new(ErrorCode::InvalidInput, text, d));
            return Resumed::Answered;
        }
        let current = if inner.approved { c.shown.state_fp } else { "" };
        if let Err(e) = self
            .daemon
            .open_state(state, c.binding.clone(), true, current)
            .await
        {
            return self.state_refused(c, &e).await;
        }
        if !inner.approved && applies {
            return Resumed::Fresh;
        }
        Resumed::Continue(Round {
            state: inner.state,
            approved: inner.approved,
        })
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
        if !self.forward_held(c.id, sent, Some(ack_tx), Some(wrap)) || !round.approved {
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
    fn only_an_input_required_answer_is_a_round() {
        let r = |v: Value| downstream_round(&json!({"jsonrpc": "2.0", "id": 1, "result": v}));
        assert_eq!(
            r(json!({"resultType": "input_required", "requestState": "s", "inputRequests": {}})),
            Some(Some("s".into()))
        );
        assert_eq!(
            r(json!({"resultType": "input_required", "inputRequests": {}})),
            Some(None)
        );
        assert_eq!(
            r(json!({"resultType": "complete", "requestState": "s"})),
            None
        );
        assert_eq!(r(json!({"content": []})), None);
        assert_eq!(
            downstream_round(&json!({"id": 1, "error": {"code": 1, "message": "x"}})),
            None
        );
    }

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

    #[test]
    fn inner_round_trips_and_refuses_unknown_fields() {
        let i = Inner {
            state: Some("s".into()),
            approved: true,
            mac: String::new(),
        };
        let b = serde_json::to_vec(&i).unwrap();
        assert_eq!(serde_json::from_slice::<Inner>(&b).unwrap(), i);
        assert!(
            serde_json::from_slice::<Inner>(br#"{"state":null,"approved":false,"x":1}"#).is_err()
        );
    }

    /// Review 3: only a round this process sealed, unchanged, is "ours".
    #[test]
    fn only_our_own_round_is_ours() {
        let b = Binding {
            vault: "v".into(),
            tool: "t".into(),
            caller: "stdio".into(),
            args_hash: "a".repeat(64),
        };
        let fp = "f".repeat(64);
        let mac = round_mac(&b, &fp, Some("s"), true);
        let ours = Inner {
            state: Some("s".into()),
            approved: true,
            mac: mac.clone(),
        };
        assert!(round_is_ours(&b, &fp, &ours));
        let forged = Inner {
            mac: String::new(),
            ..ours
        };
        assert!(!round_is_ours(&b, &fp, &forged));
        let other_state = Inner {
            state: Some("t".into()),
            approved: true,
            mac: mac.clone(),
        };
        assert!(!round_is_ours(&b, &fp, &other_state));
        let ours = Inner {
            state: Some("s".into()),
            approved: true,
            mac,
        };
        assert!(!round_is_ours(&b, &"0".repeat(64), &ours));
    }
}
