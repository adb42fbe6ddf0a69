//! Lookups into `serde_json::Value`s on the per-message path: `Value::pointer` parses its
//! pointer string and allocates per segment (it unescapes `~0`/`~1`), which showed up in
//! profiles of every forwarded call; `at` walks fixed keys without allocating.

use serde_json::Value;

/// `v[k0][k1]…` through objects only; None as soon as a key is missing.
pub fn at<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().try_fold(v, |cur, k| cur.get(*k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn walks_objects_and_stops_at_missing_keys() {
        let v = json!({"params": {"name": "x", "arguments": {"a/b": 1}}});
        assert_eq!(at(&v, &["params", "name"]), Some(&json!("x")));
        assert_eq!(at(&v, &["params", "arguments", "a/b"]), Some(&json!(1)));
        assert_eq!(at(&v, &["params", "nope"]), None);
        assert_eq!(at(&v, &["params", "name", "deeper"]), None);
        assert_eq!(at(&v, &[]), Some(&v));
    }
}
