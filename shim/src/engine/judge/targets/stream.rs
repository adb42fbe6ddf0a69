//! A fingerprint's canonical JSON written straight into SHA-256 by tc-core's one writer,
//! so a fingerprint over a million entries never holds them as a document.

use std::io::Write;

use serde_json::Value;
use sha2::{Digest, Sha256};
use tc_core::hash::{write_canonical, write_string};

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

    /// A JSON string, escaped as `canonical_json` escapes it.
    pub fn string(&mut self, s: &str) {
        // Writing into a hasher cannot fail.
        let _ = write_string(s, self);
    }

    /// `"key":` then `v` canonically; `comma` for every key but the first.
    pub fn key_value(&mut self, comma: bool, key: &str, v: &Value) {
        if comma {
            self.raw(",");
        }
        self.string(key);
        self.raw(":");
        // Writing into a hasher cannot fail.
        let _ = write_canonical(v, self);
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
    use tc_core::hash::canonical_json;

    #[test]
    fn the_same_bytes_as_canonical_json() {
        // Escapes, unicode beyond the BMP, keys sorted by code point, numbers, nesting.
        let name = "a\"\\\u{1}\u{7f}\u{2028}é\u{1F600}.md";
        let value = json!({"\u{1F600}": [1, -0.0, 1e300, u64::MAX, {"b": null, "a": [[]]}],
            "\u{FFFF}": "\n\t/", "": {}});
        let doc = json!({"kind": "tree\u{0}", "state": {
            "files": [[name, "x"], ["b", "symlink:/t"]],
            "glob": "*.md",
            "links": [["d", "e"]],
            "v": value,
        }});
        let mut f = Fp::new("tree\u{0}");
        f.open_array(false, "files");
        f.pair(name, "x");
        f.pair("b", "symlink:/t");
        f.raw("]");
        f.key_value(true, "glob", &json!("*.md"));
        f.key_value(true, "links", &json!([["d", "e"]]));
        f.key_value(true, "v", &value);
        assert_eq!(
            f.finish(),
            tc_core::hash::sha256_hex(canonical_json(&doc).as_bytes())
        );
    }
}
