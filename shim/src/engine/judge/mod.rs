//! A `tools/call`, on its own task: its turn in the barrier, then judge (gate entry, floor,
//! paths, `when`) → targets (`state_fp`) → a route for the human's approval → forward.

pub mod policy;
pub mod targets;
pub mod tools;

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Value};
use tc_core::config::{Gate, Targets};
use tc_proto::v1::Binding;

use crate::engine::judge::tools::Tool;
use crate::engine::refusal::judged::{floor_result, policy_result, unlisted_result};
use crate::engine::{key, SentParams, Shim};
use crate::wire::era;
use crate::wire::mcp_headers;
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
    /// Judge: the gate entry, the floor (a destructive tool without one is refused), the
    /// paths under the root, whether `when` holds. None when the call was answered.
    pub(in crate::engine) async fn judge(
        &self,
        id: &Value,
        msg: &Value,
        name: String,
        sent: SentParams,
    ) -> Option<Judged> {
        let args = at(msg, &["params", "arguments"])
            .cloned()
            .unwrap_or_else(|| json!({}));
        let gate = self.policy.gate_entry(&name).cloned();
        if !self.learn_downstream(id, msg, &name, gate.is_some()).await {
            return None;
        }
        let tool = self.known_tool(&name);
        if let Err(why) = self.check_params(sent.as_deref(), tool.as_ref(), &args) {
            self.answer_error(id, mcp_headers::HEADER_MISMATCH, why.to_string());
            return None;
        }
        let def = tool.as_ref().map(|t| &*t.def);
        if def.is_some_and(|d| d.get("outputSchema").is_some()) {
            self.lock().holds.set_schema(&key(id));
        }
        if policy::is_floor(def) && gate.is_none() {
            self.refuse(id, floor_result(&name, def));
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

    /// What judging needs of the downstream first: its era (for a modern call) and its
    /// tool list. False when the call was refused: without the list the floor
    /// (destructiveHint) cannot be seen, so every tool the policy does not gate fails closed.
    async fn learn_downstream(&self, id: &Value, msg: &Value, name: &str, gated: bool) -> bool {
        if let Some(meta) = era::request_meta(msg) {
            if let Err(e) = self.ensure_down_era(meta).await {
                tracing::warn!("could not find out the downstream's era: {e}");
            }
        }
        if let Err(e) = self.ensure_tools(name).await {
            tracing::warn!("could not list downstream tools before {name}: {e}");
            if !gated {
                self.refuse(id, unlisted_result(name, &e));
                return false;
            }
        }
        true
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

    /// Targets: the fingerprint of what the gate's confirmation covers, as it is now.
    pub(in crate::engine) async fn state_fp(
        &self,
        gate: &Gate,
        args: &Value,
    ) -> Result<String, targets::FingerprintError> {
        match &gate.targets {
            Some(Targets::Probe { tool, arguments }) => {
                let probe_args = targets::probe_arguments(arguments, args);
                let r = self
                    .internal("tools/call", json!({"name": tool, "arguments": probe_args}))
                    .await?;
                Ok(targets::probe_fp(tool, &probe_args, &r))
            }
            Some(t) => Ok(targets::local_fp(&self.policy, t, args)?),
            None => Err(targets::FingerprintError::NoTargets),
        }
    }

    /// Answers a call the policy refused; None, for [`Shim::judge`] to return.
    fn refused<T>(&self, id: &Value, e: &PolicyError) -> Option<T> {
        self.refuse(id, policy_result(e));
        None
    }

    /// What an approval of this call is bound to: this vault, tool, caller and arguments.
    pub(in crate::engine) fn binding(&self, name: &str, args: &Value) -> Binding {
        Binding {
            vault: self.policy.vault.clone(),
            tool: name.to_string(),
            caller: self.caller.clone(),
            args_hash: tc_core::hash::args_hash(name, args),
        }
    }

    /// The held call came through the lean facade's `call_capability`.
    pub(in crate::engine) fn is_lean(&self, id: &Value) -> bool {
        self.lock().holds.get(&key(id)).is_some_and(|h| h.lean)
    }
}

/// The first of tc's own fields other than `elicit_token` (which the shim strips) found
/// in a call's arguments.
pub(in crate::engine) fn reserved_argument(args: &Value) -> Option<&'static str> {
    tc_core::hash::GATE_FIELDS
        .iter()
        .copied()
        .filter(|k| *k != "elicit_token")
        .find(|k| args.get(k).is_some())
}

/// The call as the downstream gets it: without our token, and without our requestState
/// and answers (they were addressed to the shim, not to the server).
pub(in crate::engine) fn stripped(msg: &Value) -> Vec<u8> {
    let mut m = strip(msg);
    remove_token(&mut m);
    m.to_string().into_bytes()
}

/// Removes `elicit_token` from the call's arguments: it is addressed to the shim.
pub(in crate::engine) fn remove_token(msg: &mut Value) {
    if let Some(a) = msg
        .pointer_mut("/params/arguments")
        .and_then(Value::as_object_mut)
    {
        a.remove("elicit_token");
    }
}

/// The call without a requestState and its answers (the token stays: it is the call's).
pub(in crate::engine) fn strip(msg: &Value) -> Value {
    let mut m = msg.clone();
    if let Some(p) = m.get_mut("params").and_then(Value::as_object_mut) {
        // The snake_case spellings too: the Python SDK reads every field under both.
        for f in [
            "requestState",
            "inputResponses",
            "request_state",
            "input_responses",
        ] {
            p.remove(f);
        }
    }
    m
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
