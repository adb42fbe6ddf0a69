//! The canonical `args_hash` (SHA-256 over sorted-key, whitespace-free JSON of
//! `{"tool", "arguments"}` with the gate's own fields removed) and hashing helpers.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Argument keys that belong to the confirmation mechanism, not to the tool.
pub const GATE_FIELDS: &[&str] = &["elicit_token", "requestState", "inputResponses", "cursor"];

/// Writes `v` as canonical JSON: object keys sorted by code point, no whitespace.
///
/// Sorting is done here rather than relying on `serde_json::Map`'s ordering, which
/// flips to insertion order if any crate in the build enables `preserve_order`.
pub fn canonical_json(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Removes the gate's own fields from a call's arguments (a copy; non-objects unchanged).
pub fn strip_gate_fields(arguments: &Value) -> Value {
    match arguments {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !GATE_FIELDS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The `args_hash` of a call: lowercase hex SHA-256.
pub fn args_hash(tool: &str, arguments: &Value) -> String {
    let doc = serde_json::json!({ "tool": tool, "arguments": strip_gate_fields(arguments) });
    sha256_hex(canonical_json(&doc).as_bytes())
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// True when `s` looks like a SHA-256 in lowercase hex (what `args_hash`/`state_fp` are).
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let v = json!({"b": 1, "a": {"z": [3, {"y": true, "x": null}], "c": "s"}});
        assert_eq!(
            canonical_json(&v),
            r#"{"a":{"c":"s","z":[3,{"x":null,"y":true}]},"b":1}"#
        );
    }

    #[test]
    fn args_hash_ignores_key_order_and_gate_fields() {
        let a = json!({"path": "/x", "content": "hi"});
        let b = json!({"content": "hi", "elicit_token": "t", "path": "/x", "cursor": "c"});
        assert_eq!(args_hash("write_file", &a), args_hash("write_file", &b));
        assert_ne!(args_hash("write_file", &a), args_hash("edit_file", &a));
        assert_ne!(
            args_hash("write_file", &a),
            args_hash("write_file", &json!({"path": "/x", "content": "ho"}))
        );
        assert!(is_sha256_hex(&args_hash("t", &a)));
    }

    #[test]
    fn args_hash_is_stable_across_versions() {
        // Pinned: tokens in the field were minted against this exact hash.
        assert_eq!(
            args_hash("t", &json!({})),
            sha256_hex(br#"{"arguments":{},"tool":"t"}"#)
        );
    }

    #[test]
    fn strings_are_escaped_canonically() {
        let v = json!({"k\"ey": "line\nbreak\u{1}"});
        assert_eq!(canonical_json(&v), r#"{"k\"ey":"line\nbreak\u0001"}"#);
    }
}
