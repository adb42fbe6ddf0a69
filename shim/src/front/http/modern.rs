//! The 2026-07-28 era over HTTP: which POSTs belong to it, and the check that the routing
//! headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, a tool's `Mcp-Param-*`) say
//! what the body says.
//!
//! An intermediary may route on those headers; tc judges the body. A request whose
//! headers disagree with its body is refused (`-32020`) so that nothing on the way can be
//! shown one call while the gate judges another.

use axum::http::HeaderMap;
use serde_json::Value;

use crate::wire::era;
use crate::wire::mcp_headers;
use crate::wire::value::at;

/// JSON-RPC error: the routing headers disagree with the body.
pub use crate::wire::mcp_headers::HEADER_MISMATCH;

/// The versions an `initialize` handshake negotiates (everything else is the modern era).
pub const LEGACY_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// JSON-RPC error: the request itself is malformed (its `_meta` envelope, `inputResponses`).
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC error: no such method (answered with 404 on this era).
pub const METHOD_NOT_FOUND: i64 = -32601;

/// Methods the 2026-07-28 revision removed: a stateless request naming one gets 404
/// `-32601` here rather than whatever a legacy downstream would make of it.
const REMOVED_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

pub const VERSION_HEADER: &str = "mcp-protocol-version";
const METHOD_HEADER: &str = "mcp-method";
const NAME_HEADER: &str = "mcp-name";

/// Whether a POST is served statelessly: a non-handshake `MCP-Protocol-Version` header,
/// or a body carrying the per-request envelope.
pub fn is_modern(h: &HeaderMap, msg: &Value) -> bool {
    let header = h.get(VERSION_HEADER).map(|v| v.to_str().unwrap_or("?"));
    header.is_some_and(|v| !LEGACY_VERSIONS.contains(&v)) || era::request_meta(msg).is_some()
}

/// `Ok` when a stateless request is well formed: its `_meta` carries the two required
/// keys (`protocolVersion`, `clientCapabilities`), its method exists on this era, and
/// `inputResponses`, if sent, maps keys to result objects. Else the JSON-RPC error code
/// and why (checked before the routing headers, so a missing envelope reads as such).
pub fn check_request(msg: &Value) -> Result<(), (i64, String)> {
    let method = msg.get("method").and_then(Value::as_str);
    let (Some(method), Some(false)) = (method, msg.get("id").map(Value::is_null)) else {
        // A notification or response: no envelope is required of it.
        return Ok(());
    };
    let meta = at(msg, &["params", "_meta"]);
    let has = |k: &str, ok: fn(&Value) -> bool| meta.and_then(|m| m.get(k)).is_some_and(ok);
    for (key, ok) in [
        (era::META_VERSION, Value::is_string as fn(&Value) -> bool),
        (era::META_CAPS, Value::is_object),
    ] {
        if !has(key, ok) {
            let m = format!("a 2026-07-28 request needs params._meta[\"{key}\"]");
            return Err((INVALID_PARAMS, m));
        }
    }
    if REMOVED_METHODS.contains(&method) {
        let m = format!("method not found: {method} does not exist in the 2026-07-28 protocol");
        return Err((METHOD_NOT_FOUND, m));
    }
    let inputs = msg.get("params").and_then(|p| p.get("inputResponses"));
    let well_formed = |v: &Value| {
        v.as_object()
            .is_some_and(|o| o.values().all(Value::is_object))
    };
    if inputs.is_some_and(|v| !well_formed(v)) {
        let m = "params.inputResponses must map each input request key to a result object";
        return Err((INVALID_PARAMS, m.into()));
    }
    Ok(())
}

/// `Ok` when every routing header matches the body, with a `tools/call`'s `Mcp-Param-*`
/// headers decoded (for the engine to check against the tool's `x-mcp-header` arguments
/// once the tool is known, inside its admission bound); else why not.
pub fn check_headers(h: &HeaderMap, msg: &Value) -> Result<SentParams, HeaderMismatch> {
    check_routing(h, msg)?;
    if msg.get("method").and_then(Value::as_str) != Some("tools/call") {
        return Ok(None);
    }
    Ok(Some(mcp_headers::sent_params(h)?))
}

/// Why a 2026-07-28 request's headers do not say what its body says: refused with
/// `HEADER_MISMATCH`, since a server or gateway may route on the headers alone.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HeaderMismatch {
    #[error("{0} header appears more than once")]
    Repeated(&'static str),
    #[error("MCP-Protocol-Version header does not match the request's _meta protocol version")]
    Version,
    #[error("Mcp-Method header does not match the request's method")]
    Method,
    #[error("Mcp-Name header does not match the request's params.{0}")]
    Name(&'static str),
    #[error(transparent)]
    Param(#[from] mcp_headers::ParamMismatch),
}

/// A `tools/call`'s decoded `Mcp-Param-*` headers (lowercase name, value).
pub type SentParams = Option<Vec<(String, String)>>;

/// `Ok` when `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` match the body.
fn check_routing(h: &HeaderMap, msg: &Value) -> Result<(), HeaderMismatch> {
    for name in [VERSION_HEADER, METHOD_HEADER, NAME_HEADER] {
        if h.get_all(name).iter().count() > 1 {
            return Err(HeaderMismatch::Repeated(name));
        }
    }
    let header = |n: &str| h.get(n).map(|v| v.to_str().map_err(|_| ()));
    let body_version = era::request_meta(msg)
        .and_then(|m| m.get(era::META_VERSION))
        .and_then(Value::as_str);
    match (header(VERSION_HEADER), body_version) {
        (Some(Ok(v)), Some(b)) if v == b => {}
        _ => return Err(HeaderMismatch::Version),
    }
    let method = msg.get("method").and_then(Value::as_str);
    if method.is_none() {
        // A notification or response carries no routing headers to compare.
        return Ok(());
    }
    match header(METHOD_HEADER) {
        Some(Ok(m)) if Some(m) == method => {}
        _ => return Err(HeaderMismatch::Method),
    }
    let Some(key) = method.and_then(mcp_headers::name_key) else {
        return Ok(());
    };
    let Some(body) = at(msg, &["params", key]).and_then(Value::as_str) else {
        return Ok(());
    };
    match header(NAME_HEADER) {
        Some(Ok(n)) if mcp_headers::decode(n).as_deref() == Some(body) => Ok(()),
        _ => Err(HeaderMismatch::Name(key)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::mcp_headers::decode;
    use axum::http::HeaderValue;
    use base64::Engine as _;
    use serde_json::json;

    fn call(name: &str) -> Value {
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name,
            "arguments": {}, "_meta": {era::META_VERSION: era::MODERN_VERSION, era::META_CAPS: {}}}})
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn good(name: &str) -> HeaderMap {
        headers(&[
            (VERSION_HEADER, era::MODERN_VERSION),
            (METHOD_HEADER, "tools/call"),
            (NAME_HEADER, name),
        ])
    }

    #[test]
    fn matching_headers_pass_and_each_mismatch_is_named() {
        assert!(check_headers(&good("write_file"), &call("write_file")).is_ok());
        let e = check_headers(&good("read_file"), &call("write_file")).unwrap_err();
        assert_eq!(e, HeaderMismatch::Name("name"));
        assert!(e.to_string().contains("Mcp-Name"), "{e}");
        let mut h = good("write_file");
        h.insert(METHOD_HEADER, HeaderValue::from_static("tools/list"));
        let e = check_headers(&h, &call("write_file")).unwrap_err();
        assert_eq!(e, HeaderMismatch::Method);
        assert!(e.to_string().contains("Mcp-Method"));
        let mut h = good("write_file");
        h.remove(VERSION_HEADER);
        let e = check_headers(&h, &call("write_file")).unwrap_err();
        assert!(e.to_string().contains("Protocol"), "{e}");
        let mut h = good("write_file");
        h.append(NAME_HEADER, HeaderValue::from_static("write_file"));
        let e = check_headers(&h, &call("write_file")).unwrap_err();
        assert!(e.to_string().contains("more than once"), "{e}");
    }

    #[test]
    fn a_malformed_request_is_named_before_its_headers_are_compared() {
        assert!(check_request(&call("write_file")).is_ok());
        let mut no_meta = call("x");
        no_meta["params"].as_object_mut().unwrap().remove("_meta");
        assert_eq!(check_request(&no_meta).unwrap_err().0, INVALID_PARAMS);
        let mut no_caps = call("x");
        no_caps["params"]["_meta"]
            .as_object_mut()
            .unwrap()
            .remove(era::META_CAPS);
        assert_eq!(check_request(&no_caps).unwrap_err().0, INVALID_PARAMS);
        let mut ping = call("x");
        ping["method"] = json!("ping");
        assert_eq!(check_request(&ping).unwrap_err().0, METHOD_NOT_FOUND);
        for bad in [json!(null), json!(7), json!({"k": 12345})] {
            let mut c = call("x");
            c["params"]["inputResponses"] = bad;
            assert_eq!(check_request(&c).unwrap_err().0, INVALID_PARAMS);
        }
        let mut good = call("x");
        good["params"]["inputResponses"] = json!({"k": {"action": "decline"}});
        assert!(check_request(&good).is_ok());
        // A notification carries no envelope to check.
        assert!(check_request(&json!({"jsonrpc": "2.0"})).is_ok());
    }

    #[test]
    fn base64_names_decode_canonically() {
        let name = "écrire";
        let b64 = base64::engine::general_purpose::STANDARD.encode(name);
        let h = good(&format!("=?base64?{b64}?="));
        assert!(check_headers(&h, &call(name)).is_ok());
        assert_eq!(decode("=?base64?!!?="), None);
    }

    #[test]
    fn the_era_follows_the_header_or_the_envelope() {
        let plain = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        assert!(!is_modern(&HeaderMap::new(), &plain));
        assert!(!is_modern(
            &headers(&[(VERSION_HEADER, "2025-11-25")]),
            &plain
        ));
        assert!(is_modern(
            &headers(&[(VERSION_HEADER, "2026-07-28")]),
            &plain
        ));
        assert!(is_modern(&HeaderMap::new(), &call("x")));
    }
}
