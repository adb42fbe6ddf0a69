//! The canonical `args_hash` (SHA-256 over sorted-key, whitespace-free JSON of
//! `{"tool", "arguments"}` with the gate's own fields removed) and hashing helpers.

use std::io::{self, Write};

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Argument keys that belong to the confirmation mechanism, not to the tool.
pub const GATE_FIELDS: &[&str] = &["elicit_token", "requestState", "inputResponses", "cursor"];

/// `v` as canonical JSON: object keys sorted by code point, no whitespace.
///
/// Sorting is done here rather than relying on `serde_json::Map`'s ordering, which
/// flips to insertion order if any crate in the build enables `preserve_order`.
pub fn canonical_json(v: &Value) -> String {
    let mut out = Vec::new();
    // A Vec refuses no write, and every byte written is serde_json's UTF-8.
    write_canonical(v, &mut out).expect("writing into a Vec");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// Writes `v` as canonical JSON (see [`canonical_json`]) into `out`: the one writer, so
/// a document hashed as it streams (the shim's fingerprints) has the same bytes as one
/// built whole.
pub fn write_canonical<W: Write + ?Sized>(v: &Value, out: &mut W) -> io::Result<()> {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.write_all(b"{")?;
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                write_string(k, out)?;
                out.write_all(b":")?;
                write_canonical(&map[k], out)?;
            }
            out.write_all(b"}")
        }
        Value::Array(items) => {
            out.write_all(b"[")?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                write_canonical(item, out)?;
            }
            out.write_all(b"]")
        }
        scalar => serde_json::to_writer(out, scalar).map_err(io::Error::from),
    }
}

/// Writes `s` as a JSON string, escaped as [`write_canonical`] escapes strings and keys.
pub fn write_string<W: Write + ?Sized>(s: &str, out: &mut W) -> io::Result<()> {
    serde_json::to_writer(out, s).map_err(io::Error::from)
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

    /// Values whose spelling could drift between two writers: escapes, unicode beyond
    /// the BMP, keys that sort differently by code point than by UTF-16, numbers.
    fn tricky() -> Value {
        json!({
            "z": [1, -1, 0.1, 1.0, -0.0, 1e300, 18446744073709551615u64, i64::MIN],
            "\u{1F600}": {"b": [[], {}], "a": [null, true, false]},
            "\u{FFFF}": "\u{2028}\u{7f}/\\\"\u{8}\u{c}\n\r\t\u{1f}",
            "é": "\u{1F600}é",
            "": "",
        })
    }

    #[test]
    fn tricky_values_have_one_spelling() {
        // Pinned by hand: serde_json's escapes (short forms, else lowercase \u00XX; `/`,
        // DEL and U+2028 as they are), keys by code point (U+FFFF before U+1F600, which
        // UTF-16 order would swap), numbers as serde_json prints them (`1e+300`).
        let want = concat!(
            r#"{"":"","z":[1,-1,0.1,1.0,-0.0,1e+300,18446744073709551615,-9223372036854775808],"#,
            "\"é\":\"\u{1F600}é\",",
            "\"\u{FFFF}\":\"\u{2028}\u{7f}/\\\\\\\"\\b\\f\\n\\r\\t\\u001f\",",
            "\"\u{1F600}\":{\"a\":[null,true,false],\"b\":[[],{}]}}",
        );
        assert_eq!(canonical_json(&tricky()), want);
    }

    #[test]
    fn the_streaming_writer_is_the_string_writer() {
        // One byte at a time, as a hasher may take it: the same bytes.
        struct Bytewise(Vec<u8>);
        impl Write for Bytewise {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                self.0.extend(b.first());
                Ok(b.len().min(1))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut out = Bytewise(Vec::new());
        write_canonical(&tricky(), &mut out).unwrap();
        assert_eq!(out.0, canonical_json(&tricky()).into_bytes());
    }
}
