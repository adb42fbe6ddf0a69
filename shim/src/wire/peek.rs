//! What a writer needs to know of one outgoing message (its id, method, name, era and
//! what it cancels), read once: from the engine's own parse when it has one, else here.

use serde::Deserialize;
use serde_json::Value;

use crate::wire::era;
use crate::wire::mcp_headers;

/// What the adapter needs to know of one outgoing message.
#[derive(Debug, Default, PartialEq)]
pub struct Peek {
    pub id: Option<Value>,
    pub method: Option<String>,
    /// `Mcp-Name`'s value: `params.name` (tools/call, prompts/get) or `params.uri`
    /// (resources/read).
    pub name: Option<String>,
    /// A 2026-07-28 request's `_meta` protocol version.
    pub modern: Option<String>,
    /// `notifications/cancelled`'s `requestId`.
    pub cancels: Option<Value>,
}

#[derive(Deserialize)]
struct Raw {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<RawParams>,
}

#[derive(Deserialize)]
struct RawParams {
    #[serde(default)]
    name: Option<Value>,
    #[serde(default)]
    uri: Option<Value>,
    #[serde(default, rename = "_meta")]
    meta: Option<RawMeta>,
    #[serde(default, rename = "requestId")]
    request_id: Option<Value>,
}

/// The one member of `_meta` the adapter mirrors (the rest is skipped, not built).
#[derive(Deserialize)]
struct RawMeta {
    // `era::META_VERSION` (a literal: serde's attribute takes no constant).
    #[serde(default, rename = "io.modelcontextprotocol/protocolVersion")]
    version: Option<Value>,
}

impl Peek {
    /// Reads the envelope of an engine line; a line it cannot read is still sent, just
    /// without the headers that mirror its body.
    pub fn of(line: &[u8]) -> Peek {
        let Ok(raw) = serde_json::from_slice::<Raw>(line) else {
            return Peek::default();
        };
        let p = raw.params;
        let key = raw.method.as_deref().and_then(mcp_headers::name_key);
        let name = p.as_ref().and_then(|p| {
            let v = if key? == "uri" { &p.uri } else { &p.name };
            v.as_ref()?.as_str().map(String::from)
        });
        let modern = p.as_ref().and_then(|p| {
            p.meta
                .as_ref()?
                .version
                .as_ref()?
                .as_str()
                .map(String::from)
        });
        let cancels = p
            .and_then(|p| p.request_id)
            .filter(|_| raw.method.as_deref() == Some("notifications/cancelled"));
        Peek {
            id: raw.id,
            method: raw.method,
            name,
            modern,
            cancels,
        }
    }

    /// The same, from the message the engine parsed and sends as its bytes unchanged
    /// (nothing is read twice).
    pub fn of_value(msg: &Value) -> Peek {
        let method = msg.get("method").and_then(Value::as_str);
        let params = msg.get("params");
        let got = |v: Option<&Value>| v.filter(|v| !v.is_null()).cloned();
        let name = method.and_then(mcp_headers::name_key).and_then(|key| {
            let v = params?.get(if key == "uri" { "uri" } else { "name" })?;
            v.as_str().map(String::from)
        });
        let modern = params
            .and_then(|p| p.get("_meta")?.get(era::META_VERSION)?.as_str())
            .map(String::from);
        let cancels = got(params.and_then(|p| p.get("requestId")))
            .filter(|_| method == Some("notifications/cancelled"));
        Peek {
            id: got(msg.get("id")),
            method: method.map(String::from),
            name,
            modern,
            cancels,
        }
    }

    /// A request (method and id), not a notification or a response.
    pub fn is_request(&self) -> bool {
        self.method.is_some() && self.id.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `of_value` of a parsed message is `of` of its bytes, for every kind of message the
    /// engine sends.
    #[test]
    fn the_engine_s_parse_and_the_bytes_give_one_peek() {
        let v = crate::wire::era::META_VERSION;
        for m in [
            json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"a":[1]}}}),
            json!({"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"echo","_meta":{v:"2026-07-28","k":1}}}),
            json!({"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":"file:///a b","_meta":{v:"2026-07-28"}}}),
            json!({"jsonrpc":"2.0","id":5,"method":"prompts/get","params":{"name":7}}),
            json!({"jsonrpc":"2.0","id":null,"method":"tools/list"}),
            json!({"jsonrpc":"2.0","id":6,"method":"tools/list","params":{"_meta":{v:3}}}),
            json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3,"reason":"x"}}),
            json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"requestId":3}}),
            json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":null}}),
            json!({"jsonrpc":"2.0","id":7,"result":{"content":[]}}),
            json!({"jsonrpc":"2.0","id":8,"error":{"code":-1,"message":"m"}}),
        ] {
            assert_eq!(
                Peek::of(m.to_string().as_bytes()),
                Peek::of_value(&m),
                "{m}"
            );
        }
    }
}
