//! JSON-RPC 2.0 envelopes the shim writes itself: a response, an error, and the
//! standard error codes it uses.

use serde_json::{json, Value};

/// JSON-RPC parse error code.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC invalid request code.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC internal error code.
pub const INTERNAL_ERROR: i64 = -32603;

/// A successful JSON-RPC response.
pub fn response(id: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

/// A JSON-RPC error response.
pub fn error(id: &Value, code: i64, message: impl Into<String>) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message.into() } })
}
