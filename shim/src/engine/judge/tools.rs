//! Tools: the cache of the downstream's tool definitions (the floor never weakens), the
//! client's `tools/list` rewritten (floors hidden, `elicit_token` added), the lean facade's lists.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use serde_json::{json, Value};
use tc_core::ErrorCode;

use crate::engine::admission::lean;
use crate::engine::forward::internal::InternalError;
use crate::engine::judge::policy::{self, ArgSpec, Policy};
use crate::engine::refusal::Refusal;
use crate::engine::{Call, Shim};
use crate::wire::era;
use crate::wire::jsonrpc;
use crate::wire::mcp_headers::{self, DeclarationError, ParamHeader, ParamMismatch};

/// A tool as the downstream defined it, with the arguments of it that name files.
#[derive(Clone)]
pub(in crate::engine) struct Tool {
    pub(in crate::engine) def: Arc<Value>,
    /// Found on the tool's first call, then kept with this definition (not per call).
    paths: Arc<OnceLock<Vec<ArgSpec>>>,
    /// Its `x-mcp-header` parameters (or why they are invalid), likewise.
    params: Arc<OnceLock<Declared>>,
}

/// A tool's `x-mcp-header` declarations, or why they are invalid.
pub type Declared = Result<Arc<[ParamHeader]>, DeclarationError>;

impl Tool {
    pub(in crate::engine) fn new(def: Value) -> Tool {
        Tool {
            def: Arc::new(def),
            paths: Arc::default(),
            params: Arc::default(),
        }
    }

    /// The tool's arguments that name files, by [`Policy::discover_args`]: it depends only
    /// on the policy and the definition (whose `name` the cache learned it by).
    pub(in crate::engine) fn paths(&self, policy: &Policy) -> &[ArgSpec] {
        self.paths.get_or_init(|| {
            let name = self.def.get("name").and_then(Value::as_str);
            policy.discover_args(name.unwrap_or_default(), Some(&self.def))
        })
    }
}

impl Tool {
    /// The tool's `x-mcp-header` parameters, read from its definition once.
    fn params(&self) -> Declared {
        self.params
            .get_or_init(|| mcp_headers::declarations(&self.def).map(Arc::from))
            .clone()
    }
}

impl Shim {
    /// A tool's `x-mcp-header` parameters, for the HTTP downstream to mirror; None when
    /// the downstream does not list the tool. Every call was judged against a listing, so
    /// the cache is listed again only when a `list_changed` emptied it since (the call
    /// waited for its human meanwhile): a tool merely absent is not re-listed per call.
    pub async fn param_headers(&self, tool: &str) -> Option<Declared> {
        if !self.lock().tools.listed() {
            // Boxed: the listing's state would otherwise sit in every POST's task.
            let _ = Box::pin(self.list_all_tools()).await;
        }
        self.known_tool(tool).map(|t| t.params())
    }

    /// Learns tool definitions from a `tools/list` result and rewrites it for the client.
    pub(in crate::engine) fn rewrite_tools_list(&self, result: &mut Value) {
        let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) else {
            return;
        };
        let mut learned = Vec::new();
        tools.retain_mut(|t| {
            let Some(name) = t.get("name").and_then(Value::as_str).map(String::from) else { return true };
            let tool = Tool::new(t.clone());
            if self.remote_downstream {
                if let Err(why) = tool.params() {
                    tracing::warn!(tool = %name, "excluding tool from tools/list: invalid x-mcp-header declaration ({why})");
                    learned.push((name, tool));
                    return false;
                }
            }
            learned.push((name.clone(), tool));
            let gated = self.policy.gate_entry(&name).is_some();
            if policy::is_floor(Some(t)) && !gated {
                tracing::warn!(tool = %name, "hiding destructive tool with no gate entry; add: {}", policy::missing_gate_hint(&name, Some(t)));
                return false;
            }
            if gated {
                add_elicit_token(t);
            }
            self.gov.advertise_cursor(&name, t);
            true
        });
        self.lock().tools.learn(learned);
    }

    /// Makes sure tool annotations are known, listing the downstream's tools ourselves if needed.
    /// Knowing every tool matters for the floor: a tool missing from the cache (on a
    /// page the client never fetched, or added after `list_changed`) triggers a full
    /// re-list rather than being forwarded as if it were not destructive.
    pub(in crate::engine) async fn ensure_tools(&self, name: &str) -> Result<(), InternalError> {
        if self.lock().tools.has(name) {
            return Ok(());
        }
        // Boxed: the listing's state would otherwise sit in every call's task.
        Box::pin(self.list_all_tools()).await.map(|_| ())
    }

    /// Lists every downstream tool (all pages), caching the definitions.
    pub(in crate::engine) async fn list_all_tools(&self) -> Result<Vec<Value>, InternalError> {
        let mut cursor: Option<Value> = None;
        let mut all: HashMap<String, Tool> = HashMap::new();
        for _ in 0..100 {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let r = self.internal("tools/list", params).await?;
            for t in r
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(n) = t.get("name").and_then(Value::as_str) {
                    learn_tool(&mut all, n.to_string(), Tool::new(t.clone()));
                }
            }
            match r.get("nextCursor") {
                Some(c) if !c.is_null() => cursor = Some(c.clone()),
                _ => break,
            }
        }
        let mut list: Vec<Value> = all.values().map(|v| (*v.def).clone()).collect();
        list.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        self.lock().tools.learn(all);
        Ok(list)
    }

    /// The lean facade's `tools/list`: its two tools, answered by the shim.
    pub(in crate::engine) async fn lean_tools_list(self: Arc<Self>, id: Value, modern: bool) {
        let mut result = json!({ "tools": lean::tools() });
        if modern {
            era::mark_complete(&mut result, "tools/list");
        }
        self.send_client(&jsonrpc::response(&id, result));
    }

    /// The lean facade's `list_capabilities`: the downstream's tools as the client
    /// would see them in `tools/list` (floors without a gate hidden, `elicit_token` added).
    pub(in crate::engine) async fn list_capabilities(self: Arc<Self>, id: Value) {
        match self.list_all_tools().await {
            Ok(tools) => {
                let visible = tools
                    .into_iter()
                    .filter_map(|mut t| {
                        let name = t.get("name").and_then(Value::as_str)?.to_string();
                        let gated = self.policy.gate_entry(&name).is_some();
                        if policy::is_floor(Some(&t)) && !gated {
                            return None;
                        }
                        if gated {
                            add_elicit_token(&mut t);
                        }
                        Some(t)
                    })
                    .collect();
                self.answer(&id, lean::catalogue(visible));
            }
            Err(e) => self.refuse(
                &id,
                Refusal::new(
                    ErrorCode::InvalidInput,
                    format!("tc-shim could not read the server's tool list: {e}"),
                    json!({}),
                ),
            ),
        }
    }

    /// The cached definition of a tool.
    pub(in crate::engine) fn tool_def(&self, name: &str) -> Option<Arc<Value>> {
        self.known_tool(name).map(|t| t.def)
    }

    /// The cached tool: its definition and the arguments of it that name files.
    pub(in crate::engine) fn known_tool(&self, name: &str) -> Option<Tool> {
        self.lock().tools.get(name)
    }
}

/// The judge's cache of the downstream's tool definitions: None until the first
/// listing, emptied by `list_changed`. Tools are shared, so a lookup per call does not
/// copy a schema.
#[derive(Default)]
pub(in crate::engine) struct ToolCache {
    tools: Option<HashMap<String, Tool>>,
}

impl ToolCache {
    /// A listing was learned since the cache was last emptied.
    pub(in crate::engine) fn listed(&self) -> bool {
        self.tools.is_some()
    }

    pub(in crate::engine) fn has(&self, name: &str) -> bool {
        self.tools.as_ref().is_some_and(|t| t.contains_key(name))
    }

    pub(in crate::engine) fn get(&self, name: &str) -> Option<Tool> {
        self.tools.as_ref().and_then(|m| m.get(name).cloned())
    }

    /// Definitions may have changed (`list_changed`): the next judgment re-lists.
    pub(in crate::engine) fn forget(&mut self) {
        self.tools = None;
    }

    /// Caches the definitions of a listing (see [`learn_tool`]: the floor never weakens).
    pub(in crate::engine) fn learn(&mut self, learned: impl IntoIterator<Item = (String, Tool)>) {
        let map = self.tools.get_or_insert_with(HashMap::new);
        for (k, v) in learned {
            learn_tool(map, k, v);
        }
    }
}

/// Checks the `Mcp-Param-*` headers a call came with (HTTP front) against its tool's
/// `x-mcp-header` arguments; a call without such headers (stdio) passes.
pub(in crate::engine) fn check_params(
    sent: Option<&[(String, String)]>,
    tool: Option<&Tool>,
    args: &Value,
) -> Result<(), ParamMismatch> {
    let Some(sent) = sent else {
        return Ok(());
    };
    let decls = match tool.map(Tool::params) {
        Some(Ok(d)) => d,
        // Unknown tool, or declarations a client may not use (the HTTP downstream
        // refuses that call): nothing declared to compare.
        _ => Arc::from([]),
    };
    mcp_headers::check_params(sent, &decls, Some(args))
}

/// Caches a tool definition. A destructive one is never replaced by a non-destructive
/// one (a list naming a tool twice, or pages that disagree): the floor holds until the
/// server says `list_changed`, which empties the cache.
fn learn_tool(map: &mut HashMap<String, Tool>, name: String, tool: Tool) {
    if map
        .get(&name)
        .is_some_and(|old| policy::is_floor(Some(&old.def)) && !policy::is_floor(Some(&tool.def)))
    {
        return;
    }
    map.insert(name, tool);
}

/// Adds the optional `elicit_token` argument to a gated tool's input schema.
fn add_elicit_token(tool: &mut Value) {
    let Some(schema) = tool.get_mut("inputSchema").and_then(Value::as_object_mut) else {
        return;
    };
    let props = schema.entry("properties").or_insert_with(|| json!({}));
    if let Some(p) = props.as_object_mut() {
        p.insert(
            "elicit_token".into(),
            json!({"type": "string", "description": "Single-use confirmation token from `tcctl elicit`, given to you by the human. Omit it on the first call."}),
        );
    }
}

impl Shim {
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
    pub(in crate::engine) async fn refuse_redefined(&self, c: &Call<'_>, why: &str) {
        tracing::warn!(tool = %c.shown.tool, "not running an approved call: the server redefined its tool since it was judged");
        let logged = format!("{why} after the call was judged");
        self.log_not_obtained(c, &logged, "redefined").await;
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_keeps_the_discovery_of_its_own_definition() {
        let d = tempfile::tempdir().unwrap();
        let p = crate::engine::judge::policy::tests::policy(
            d.path(),
            "[[vaults.paths]]\ntool = \"t\"\nargs = [\"spot\"]\nkind = \"path\"\n",
        );
        let names = |a: &[ArgSpec]| a.iter().map(|a| a.name.clone()).collect::<Vec<_>>();
        let v1 = json!({"name": "t", "inputSchema": {"properties": {"target_file": {"type": "string"}}}});
        let v2 =
            json!({"name": "t", "inputSchema": {"properties": {"dest_dir": {"type": "string"}}}});
        for def in [v1.clone(), v2.clone(), json!({"name": "u"})] {
            let t = Tool::new(def.clone());
            let name = def["name"].as_str().unwrap();
            let fresh = p.discover_args(name, Some(&def));
            assert_eq!(names(t.paths(&p)), names(&fresh), "{def}");
            assert_eq!(names(t.clone().paths(&p)), names(&fresh), "kept: {def}");
        }
        let t = Tool::new(json!({"name": "t"}));
        assert!(
            t.paths(&p).iter().any(|a| a.name == "spot"),
            "declared by tool name"
        );
        // A new definition of the tool (a re-list) is judged by its own arguments.
        let mut m = HashMap::new();
        let has =
            |m: &HashMap<String, Tool>, arg: &str| m["t"].paths(&p).iter().any(|a| a.name == arg);
        learn_tool(&mut m, "t".into(), Tool::new(v1));
        assert!(has(&m, "target_file") && !has(&m, "dest_dir"));
        learn_tool(&mut m, "t".into(), Tool::new(v2));
        assert!(has(&m, "dest_dir") && !has(&m, "target_file"));
    }

    #[test]
    fn a_destructive_definition_is_not_replaced_by_a_plain_one() {
        let hard = Tool::new(json!({"name": "t", "annotations": {"destructiveHint": true}}));
        let plain = Tool::new(json!({"name": "t"}));
        let mut m = HashMap::new();
        learn_tool(&mut m, "t".into(), hard.clone());
        learn_tool(&mut m, "t".into(), plain.clone());
        assert!(policy::is_floor(m.get("t").map(|v| &*v.def)));
        let mut m = HashMap::new();
        learn_tool(&mut m, "t".into(), plain);
        learn_tool(&mut m, "t".into(), hard);
        assert!(policy::is_floor(m.get("t").map(|v| &*v.def)));
    }
}
