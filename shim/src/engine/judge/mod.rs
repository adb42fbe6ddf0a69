//! A `tools/call`, on its own task: its turn in the barrier, then judge (gate entry, floor,
//! paths, `when`) → targets (`state_fp`) → a route for the human's approval → forward.

pub mod policy;
pub mod targets;
pub mod tools;

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Value};
use tc_core::config::{Gate, Targets};
use tc_core::grant::RealPaths;
use tc_proto::v1::Binding;

use crate::engine::judge::tools::{check_params, Tool};
use crate::engine::refusal::judged::{floor_result, policy_result, unlisted_result};
use crate::engine::refusal::Refusal;
use crate::engine::{SentParams, Shim};
use crate::wire::mcp_headers::ParamMismatch;
use crate::wire::value::at;
use policy::Policy;
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
    /// The tool declares an `outputSchema` (a refusal goes in `_meta`).
    pub(in crate::engine) schema: bool,
}

/// Why the judge lets a call go no further: what `call.rs` answers it with.
pub(in crate::engine) enum Unjudged {
    /// Refused (the floor, the policy, a tool list that could not be read); `schema`:
    /// its tool declares an `outputSchema`, so the refusal goes in `_meta`.
    Refused { refusal: Refusal, schema: bool },
    /// Its `Mcp-Param-*` headers disagree with its arguments: a JSON-RPC error.
    Headers(ParamMismatch),
}

impl From<Refusal> for Unjudged {
    fn from(refusal: Refusal) -> Self {
        Unjudged::Refused {
            refusal,
            schema: false,
        }
    }
}

impl Shim {
    /// Judge a call: its tool learned from the downstream first (the judge's
    /// `ToolCache`), then [`Judge::judge`]. Answers nothing itself: a call it stops
    /// comes back as [`Unjudged`] for `call.rs` to answer.
    pub(in crate::engine) async fn judge(
        &self,
        msg: &Value,
        name: String,
        sent: SentParams,
    ) -> Result<Judged, Unjudged> {
        let args = at(msg, &["params", "arguments"])
            .cloned()
            .unwrap_or_else(|| json!({}));
        let gated = self.policy.gate_entry(&name).is_some();
        self.learn_tools(&name, gated).await?;
        let tool = self.known_tool(&name);
        let judge = Judge {
            policy: &self.policy,
        };
        judge.judge(name, args, tool, sent.as_deref())
    }

    /// The tool list judging needs first: without it the floor (destructiveHint) cannot
    /// be seen, so every tool the policy does not gate fails closed.
    async fn learn_tools(&self, name: &str, gated: bool) -> Result<(), Unjudged> {
        if let Err(e) = self.ensure_tools(name).await {
            tracing::warn!("could not list downstream tools before {name}: {e}");
            if !gated {
                return Err(unlisted_result(name, &e).into());
            }
        }
        Ok(())
    }
}

/// The judge proper: the vault's policy applied to one call whose tool definition is
/// known (or known not to be listed). No downstream I/O and nothing answered.
pub(in crate::engine) struct Judge<'a> {
    pub(in crate::engine) policy: &'a Policy,
}

impl Judge<'_> {
    /// The gate entry, the `Mcp-Param-*` headers (HTTP), the floor (a destructive tool
    /// without a gate entry is refused), the paths under the root, whether `when` holds.
    pub(in crate::engine) fn judge(
        &self,
        name: String,
        args: Value,
        tool: Option<Tool>,
        sent: Option<&[(String, String)]>,
    ) -> Result<Judged, Unjudged> {
        let gate = self.policy.gate_entry(&name).cloned();
        check_params(sent, tool.as_ref(), &args).map_err(Unjudged::Headers)?;
        let def = tool.as_ref().map(|t| &*t.def);
        let schema = def.is_some_and(|d| d.get("outputSchema").is_some());
        if policy::is_floor(def) && gate.is_none() {
            let refusal = floor_result(&name, def);
            return Err(Unjudged::Refused { refusal, schema });
        }
        let refused = |e: PolicyError| Unjudged::Refused {
            refusal: policy_result(&e),
            schema,
        };
        let paths = self.resolve_paths(&name, tool.as_ref(), &args, gate.as_ref());
        let paths = paths.map_err(refused)?;
        let applies = match &gate {
            Some(g) => self.policy.applies(g, &args).map_err(refused)?,
            None => false,
        };
        let read_only = policy::is_read_only(def);
        let def = tool.map(|t| t.def);
        Ok(Judged {
            name,
            args,
            gate,
            paths,
            applies,
            read_only,
            def,
            schema,
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
            Some(t) => t.paths(self.policy),
            None => {
                uncached = self.policy.discover_args(name, None);
                &uncached[..]
            }
        };
        self.policy.resolve_discovered(discovered, args, gate)
    }
}

impl Shim {
    /// Where a gated call's file-naming arguments really lead, for grants
    /// (`grant_paths.rs`): resolved when the call is raised, not for every gated call.
    pub(in crate::engine) fn real_paths(&self, name: &str, gate: &Gate, args: &Value) -> RealPaths {
        let tool = self.known_tool(name);
        let discovered = match &tool {
            Some(t) => t.paths(&self.policy).to_vec(),
            None => self.policy.discover_args(name, None),
        };
        let specs = self.policy.with_gate_args(&discovered, Some(gate));
        self.policy.real_paths(&specs, args)
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

    /// What an approval of this call is bound to: this vault, tool, caller and arguments.
    pub(in crate::engine) fn binding(&self, name: &str, args: &Value) -> Binding {
        Binding {
            vault: self.policy.vault.clone(),
            tool: name.to_string(),
            caller: self.caller.clone(),
            args_hash: tc_core::hash::args_hash(name, args),
        }
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

    #[test]
    fn the_judge_stops_a_floor_without_a_gate_and_judges_the_rest_without_io() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let gate = "[[vaults.gates]]\ntool = \"write_file\"\ntargets = { paths = [\"path\"] }\n";
        let p = policy::tests::policy(&root, gate);
        let judge = Judge { policy: &p };
        let rm =
            json!({"name": "rm", "annotations": {"destructiveHint": true}, "outputSchema": {}});
        match judge.judge("rm".into(), json!({}), Some(Tool::new(rm)), None) {
            Err(Unjudged::Refused { schema: true, .. }) => {}
            _ => panic!("a destructive tool without a gate entry is refused, in _meta"),
        }
        let escape = json!({"path": "../x"});
        let write = Tool::new(json!({"name": "write_file"}));
        match judge.judge("write_file".into(), escape, Some(write.clone()), None) {
            Err(Unjudged::Refused { schema: false, .. }) => {}
            _ => panic!("a path out of the root is refused"),
        }
        let Ok(j) = judge.judge(
            "write_file".into(),
            json!({"path": "a.md"}),
            Some(write),
            None,
        ) else {
            panic!("a gated call under the root is judged");
        };
        assert!(j.gate.is_some() && j.applies && !j.read_only && !j.schema);
        assert_eq!(j.paths, vec![root.join("a.md")]);
    }
}
