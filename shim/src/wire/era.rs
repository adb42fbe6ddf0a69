//! Protocol eras: the legacy handshake era (2025-06-18, 2025-11-25: `initialize`) and
//! the modern per-request era (2026-07-28: `server/discover`, `_meta` envelope on every
//! request), and the results the shim synthesizes when it bridges the two.

use crate::wire::value::at;
use serde_json::{json, Value};

/// `_meta` key carrying a modern request's protocol version.
pub const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key carrying a modern request's client capabilities.
pub const META_CAPS: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key on results naming the server software (modern era).
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// The modern protocol version the shim speaks.
pub const MODERN_VERSION: &str = "2026-07-28";
/// The legacy protocol version the shim uses for its own handshake with a legacy downstream.
pub const LEGACY_VERSION: &str = "2025-11-25";

/// Which protocol era a peer speaks on this connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// `initialize` handshake, stateful session.
    Legacy,
    /// No handshake; protocol version and capabilities on every request.
    Modern,
}

impl std::fmt::Display for Era {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Era::Legacy => "legacy",
            Era::Modern => "modern",
        })
    }
}

/// The modern protocol envelope of a request (`_meta` with at least the version key).
pub fn request_meta(msg: &Value) -> Option<&Value> {
    let meta = at(msg, &["params", "_meta"])?;
    meta.get(META_VERSION)?.as_str()?;
    Some(meta)
}

/// The protocol version named by a modern envelope.
pub fn meta_version(meta: &Value) -> String {
    meta.get(META_VERSION)
        .and_then(Value::as_str)
        .unwrap_or(MODERN_VERSION)
        .to_string()
}

/// Only the two protocol keys of an envelope (what the shim reuses for its own requests).
pub fn envelope(meta: &Value) -> Value {
    json!({
        META_VERSION: meta_version(meta),
        META_CAPS: meta.get(META_CAPS).cloned().unwrap_or_else(|| json!({})),
    })
}

/// The envelope the shim uses when no modern client request was seen yet.
pub fn default_envelope() -> Value {
    json!({ META_VERSION: MODERN_VERSION, META_CAPS: {} })
}

/// The `initialize` params of the shim's own handshake with a legacy downstream.
///
/// No client capabilities are advertised: the client on the other side is modern, and a
/// modern client on stdio does not accept server→client requests (sampling, roots,
/// elicitation), so the downstream must not be invited to send any.
pub fn initialize_params() -> Value {
    json!({
        "protocolVersion": LEGACY_VERSION,
        "capabilities": {},
        "clientInfo": { "name": "tc-shim", "version": env!("CARGO_PKG_VERSION") },
    })
}

/// A `DiscoverResult` standing for a legacy downstream, built from its `initialize` result.
pub fn discover_result(init: &Value) -> Value {
    let mut r = json!({
        "resultType": "complete",
        "supportedVersions": [MODERN_VERSION],
        "capabilities": init.get("capabilities").cloned().unwrap_or_else(|| json!({})),
        "ttlMs": 0,
        "cacheScope": "private",
    });
    if let Some(i) = init.get("instructions").filter(|i| i.is_string()) {
        r["instructions"] = i.clone();
    }
    if let Some(si) = init.get("serverInfo").filter(|s| s.is_object()) {
        r["_meta"] = json!({ META_SERVER_INFO: si });
    }
    r
}

/// JSON-RPC error code for an unsupported protocol version (2026-07-28).
pub const UNSUPPORTED_VERSION: i64 = -32022;

/// The `-32022` error for a modern request naming a version the shim does not speak.
pub fn unsupported_version(id: &Value, requested: &str) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id,
        "error": {
            "code": UNSUPPORTED_VERSION,
            "message": format!("unsupported protocol version {requested}"),
            "data": { "supported": [MODERN_VERSION], "requested": requested },
        }
    })
}

/// Methods whose 2026-07-28 results are cacheable (`ttlMs` and `cacheScope` required).
const CACHEABLE: &[&str] = &[
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// Completes a legacy downstream's result of `method` for a modern client: `resultType`
/// and, for cacheable results, immediately-stale private caching directives.
pub fn mark_complete(result: &mut Value, method: &str) -> bool {
    let Some(o) = result.as_object_mut() else {
        return false;
    };
    let mut changed = false;
    if !o.contains_key("resultType") {
        o.insert("resultType".into(), json!("complete"));
        changed = true;
    }
    if CACHEABLE.contains(&method) {
        for (k, v) in [("ttlMs", json!(0)), ("cacheScope", json!("private"))] {
            if !o.contains_key(k) {
                o.insert(k.into(), v);
                changed = true;
            }
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_detection() {
        let m = json!({"params": {"_meta": {META_VERSION: "2026-07-28", META_CAPS: {"x": {}}, "other": 1}}});
        let meta = request_meta(&m).unwrap();
        assert_eq!(meta_version(meta), "2026-07-28");
        assert_eq!(
            envelope(meta),
            json!({META_VERSION: "2026-07-28", META_CAPS: {"x": {}}})
        );
        assert!(request_meta(&json!({"params": {"_meta": {"progressToken": 1}}})).is_none());
        assert!(request_meta(&json!({"params": {"_meta": {META_VERSION: 5}}})).is_none());
        assert!(request_meta(&json!({"params": []})).is_none());
    }

    #[test]
    fn discover_from_initialize() {
        let init = json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {"listChanged": true}},
                          "serverInfo": {"name": "s", "version": "1"}});
        let d = discover_result(&init);
        assert_eq!(d["resultType"], "complete");
        assert_eq!(d["supportedVersions"], json!(["2026-07-28"]));
        assert_eq!(d["capabilities"]["tools"]["listChanged"], true);
        assert_eq!(d["_meta"][META_SERVER_INFO]["name"], "s");
        assert!(d.get("instructions").is_none());
        let mut r = json!({"tools": []});
        assert!(mark_complete(&mut r, "tools/list"));
        assert_eq!(r["resultType"], "complete");
        assert_eq!(r["ttlMs"], 0);
        assert_eq!(r["cacheScope"], "private");
        let mut r = json!({"content": []});
        assert!(mark_complete(&mut r, "tools/call"));
        assert!(r.get("ttlMs").is_none());
        let mut r = json!({"resultType": "input_required"});
        assert!(!mark_complete(&mut r, "tools/call"));
        assert!(!mark_complete(&mut json!(null), "tools/call"));
    }
}
