//! The lean facade (`lean = true`): the client sees two tools, `list_capabilities` and
//! `call_capability {name, arguments}`; a call is rewritten into the inner tool's own
//! `tools/call`, so gating binds to the inner tool's name and arguments exactly.

use crate::wire::value::at;
use serde_json::{json, Value};

/// Lists the inner tools.
pub const LIST: &str = "list_capabilities";
/// Calls one inner tool.
pub const CALL: &str = "call_capability";

/// What a `tools/call` of the facade asks for.
#[derive(Debug)]
pub enum FacadeCall {
    /// `list_capabilities`.
    List,
    /// `call_capability`, rewritten as the inner tool's `tools/call` message.
    Call(Value),
    /// `call_capability` without a usable name.
    Bad(String),
}

/// The facade's two tool definitions.
pub fn tools() -> Value {
    json!([
        {
            "name": LIST,
            "description": "List this server's capabilities (tools) with their descriptions and input schemas. Call one with call_capability.",
            "inputSchema": { "type": "object", "properties": {} },
            "annotations": { "readOnlyHint": true },
        },
        {
            "name": CALL,
            "description": "Call one capability from list_capabilities by name, with its arguments. A capability that needs human confirmation says so in its result.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "name": { "type": "string", "description": "The capability's name, from list_capabilities." },
                    "arguments": { "type": "object", "description": "The capability's arguments, as its input schema describes them." },
                },
                "required": ["name"],
            },
        },
    ])
}

/// Classifies a `tools/call` message; `None` when it is not for a facade tool.
pub fn facade_call(msg: &Value) -> Option<FacadeCall> {
    match at(msg, &["params", "name"]).and_then(Value::as_str)? {
        LIST => Some(FacadeCall::List),
        CALL => Some(rewrite(msg)),
        _ => None,
    }
}

fn rewrite(msg: &Value) -> FacadeCall {
    let outer = at(msg, &["params", "arguments"]);
    let Some(name) = outer.and_then(|a| a.get("name")).and_then(Value::as_str) else {
        return FacadeCall::Bad(format!(
            "{CALL} needs a string `name` (one of the capabilities from {LIST})"
        ));
    };
    if name == LIST || name == CALL {
        return FacadeCall::Bad(format!("`{name}` is not a capability"));
    }
    let inner_args = match outer.and_then(|a| a.get("arguments")) {
        None | Some(Value::Null) => json!({}),
        Some(a @ Value::Object(_)) => a.clone(),
        Some(_) => return FacadeCall::Bad(format!("{CALL}'s `arguments` must be an object")),
    };
    let mut inner = msg.clone();
    // Everything else in params (`_meta`, `requestState`, `inputResponses`) stays.
    inner["params"]["name"] = json!(name);
    inner["params"]["arguments"] = inner_args;
    FacadeCall::Call(inner)
}

/// The `list_capabilities` result.
pub fn catalogue(tools: Vec<Value>) -> Value {
    let caps = json!({ "capabilities": tools });
    json!({
        "content": [{ "type": "text", "text": caps.to_string() }],
        "structuredContent": caps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_call_capability_into_the_inner_call() {
        let m = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": CALL, "arguments": {"name": "write_file", "arguments": {"path": "a", "elicit_token": "t"}},
            "_meta": {"k": 1}, "requestState": "s"}});
        let Some(FacadeCall::Call(inner)) = facade_call(&m) else {
            panic!()
        };
        assert_eq!(inner["id"], 7);
        assert_eq!(inner["params"]["name"], "write_file");
        assert_eq!(
            inner["params"]["arguments"],
            json!({"path": "a", "elicit_token": "t"})
        );
        assert_eq!(inner["params"]["_meta"], json!({"k": 1}));
        assert_eq!(inner["params"]["requestState"], "s");
        let no_args = json!({"params": {"name": CALL, "arguments": {"name": "x"}}});
        let Some(FacadeCall::Call(inner)) = facade_call(&no_args) else {
            panic!()
        };
        assert_eq!(inner["params"]["arguments"], json!({}));
        for bad in [
            json!({"params": {"name": CALL}}),
            json!({"params": {"name": CALL, "arguments": {"name": 3}}}),
            json!({"params": {"name": CALL, "arguments": {"name": CALL}}}),
            json!({"params": {"name": CALL, "arguments": {"name": "x", "arguments": [1]}}}),
        ] {
            assert!(
                matches!(facade_call(&bad), Some(FacadeCall::Bad(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            facade_call(&json!({"params": {"name": LIST}})),
            Some(FacadeCall::List)
        ));
        assert!(facade_call(&json!({"params": {"name": "write_file"}})).is_none());
    }
}
