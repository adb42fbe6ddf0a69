//! Canonical JSON written straight into SHA-256, so a fingerprint over a million
//! entries never holds them as a document (same bytes as `canonical_json`).

use std::io::Write;

use serde_json::Value;
use sha2::{Digest, Sha256};
use tc_core::hash::canonical_json;

/// A fingerprint being written: `{"kind":<kind>,"state":{` … `}}`, the state's keys
/// written by the caller in sorted order.
pub struct Fp {
    h: Sha256,
    /// Whether the array being written has an element yet.
    first: bool,
}

impl Write for Fp {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.h.update(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Fp {
    pub fn new(kind: &str) -> Fp {
        let mut f = Fp {
            h: Sha256::new(),
            first: true,
        };
        f.raw("{\"kind\":");
        f.string(kind);
        f.raw(",\"state\":{");
        f
    }

    pub fn raw(&mut self, s: &str) {
        self.h.update(s.as_bytes());
    }

    /// A JSON string, escaped as `serde_json` (and so `canonical_json`) escapes it.
    pub fn string(&mut self, s: &str) {
        // Writing into a hasher cannot fail.
        let _ = serde_json::to_writer(&mut *self, s);
    }

    /// `"key":` then `v` canonically; `comma` for every key but the first.
    pub fn key_value(&mut self, comma: bool, key: &str, v: &Value) {
        if comma {
            self.raw(",");
        }
        self.string(key);
        self.raw(":");
        self.raw(&canonical_json(v));
    }

    /// Starts an array member `"key":[`.
    pub fn open_array(&mut self, comma: bool, key: &str) {
        if comma {
            self.raw(",");
        }
        self.string(key);
        self.raw(":[");
        self.first = true;
    }

    /// Writes the separator before an array element.
    pub fn element(&mut self) {
        if !self.first {
            self.raw(",");
        }
        self.first = false;
    }

    /// `["a","b"]` as an array element.
    pub fn pair(&mut self, a: &str, b: &str) {
        self.element();
        self.raw("[");
        self.string(a);
        self.raw(",");
        self.string(b);
        self.raw("]");
    }

    /// Closes the state and returns the fingerprint (lowercase hex).
    pub fn finish(mut self) -> String {
        self.raw("}}");
        hex::encode(self.h.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_same_bytes_as_canonical_json() {
        let doc = json!({"kind": "tree", "state": {
            "files": [["a\"\u{1}é.md", "x"], ["b", "symlink:/t"]],
            "glob": "*.md",
            "links": [["d", "e"]],
        }});
        let mut f = Fp::new("tree");
        f.open_array(false, "files");
        f.pair("a\"\u{1}é.md", "x");
        f.pair("b", "symlink:/t");
        f.raw("]");
        f.key_value(true, "glob", &json!("*.md"));
        f.key_value(true, "links", &json!([["d", "e"]]));
        assert_eq!(
            f.finish(),
            tc_core::hash::sha256_hex(canonical_json(&doc).as_bytes())
        );
    }
}
