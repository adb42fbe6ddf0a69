//! A string argument a server may read as JSON: the Python SDK's `pre_parse_json` turns
//! a string holding a JSON array or object into that value for any parameter not typed `str`.
//!
//! So `paths: "[\"private/key.txt\"]"` names `private/key.txt` to such a server, and the
//! policy judges both readings (the literal name and the items), or refuses under an ACL
//! what it cannot read the way a lenient JSON reader (Python's `json.loads`) would.

use serde_json::Value;

/// What a string argument holds besides its literal self.
#[derive(Debug, PartialEq, Eq)]
pub enum Embedded {
    /// Nothing a server would parse: the literal only.
    Plain,
    /// A JSON array of strings: each is a value too.
    Strings(Vec<String>),
    /// JSON the policy cannot judge as names (an object, non-string items), or text a
    /// lenient reader may parse where serde_json does not (lone surrogates, `NaN`).
    Unjudgeable(&'static str),
}

/// Reads `s` as Python's `json.loads` would, as far as names go.
pub fn embedded(s: &str) -> Embedded {
    let t = s.trim_start_matches([' ', '\t', '\n', '\r']);
    if !t.starts_with(['[', '{']) {
        return Embedded::Plain;
    }
    match serde_json::from_str::<Value>(s) {
        Ok(Value::Array(a)) if a.iter().all(Value::is_string) => Embedded::Strings(
            a.into_iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect(),
        ),
        Ok(Value::Array(_)) => {
            Embedded::Unjudgeable("it holds a JSON array with items that are not strings")
        }
        Ok(_) => Embedded::Unjudgeable("it holds a JSON object, which a server may read as one"),
        Err(e) => {
            let lenient = ["\\u", "NaN", "Infinity"].iter().any(|k| s.contains(k))
                || e.to_string().contains("recursion");
            if lenient {
                Embedded::Unjudgeable("it holds JSON that a server's reader may parse")
            } else {
                Embedded::Plain
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_in_strings_are_read_as_their_items() {
        assert_eq!(embedded("private/key.txt"), Embedded::Plain);
        assert_eq!(embedded("[draft] notes.md"), Embedded::Plain);
        assert_eq!(embedded("{x}.md"), Embedded::Plain);
        assert_eq!(
            embedded(" [\"a\", \"private/k\"] "),
            Embedded::Strings(vec!["a".into(), "private/k".into()])
        );
        for bad in [
            r#"{"path": "private/k"}"#,
            r#"["a", 1]"#,
            r#"["private/k", "\ud800"]"#,
            r#"["private/k", NaN]"#,
            &format!("{}\"private/k\"{}", "[".repeat(200), "]".repeat(200)),
        ] {
            assert!(
                matches!(embedded(bad), Embedded::Unjudgeable(_)),
                "{bad}: {:?}",
                embedded(bad)
            );
        }
    }
}
