//! Roots: the downstream works inside the vault root, whatever the client says. The shim
//! judges every path against the configured root, so the server must resolve against it.
//!
//! - The client's `roots` capability is removed from what the downstream sees (the legacy
//!   `initialize`, and every modern request's `_meta` capabilities), so a server that
//!   follows the client's roots (server-filesystem replaces its allowed directories with
//!   them) keeps the folder it was started on.
//! - A downstream that asks `roots/list` anyway is answered by the shim with the vault root;
//!   the question never reaches the client. A modern client's answer to a roots question
//!   (an `inputResponses` entry holding `roots`) is replaced by the same list.
//! - The client's `notifications/roots/list_changed` is not forwarded.

use std::path::Path;

use serde_json::{json, Map, Value};

use crate::wire::era::META_CAPS;

/// The method a server asks roots with.
pub const LIST: &str = "roots/list";

/// The client notification that would make a server ask again.
pub const LIST_CHANGED: &str = "notifications/roots/list_changed";

/// Removes what the client says about roots from a client message on its way downstream.
/// True when the message changed (it must then be forwarded re-serialized).
pub fn strip_client_roots(msg: &mut Value, root: &Path, vault: &str) -> bool {
    let Some(params) = msg.get_mut("params").and_then(Value::as_object_mut) else {
        return false;
    };
    let mut changed = false;
    if let Some(caps) = params
        .get_mut("capabilities")
        .and_then(Value::as_object_mut)
    {
        changed |= caps.remove("roots").is_some();
    }
    if let Some(caps) = params
        .get_mut("_meta")
        .and_then(|m| m.get_mut(META_CAPS))
        .and_then(Value::as_object_mut)
    {
        changed |= caps.remove("roots").is_some();
    }
    // The Python SDK also reads every field under its snake_case name.
    for field in ["inputResponses", "input_responses"] {
        if let Some(answers) = params.get_mut(field).and_then(Value::as_object_mut) {
            changed |= replace_root_answers(answers, root, vault);
        }
    }
    changed
}

/// Replaces every answer to a roots question (an object with a `roots` member) with the
/// vault root's list.
fn replace_root_answers(answers: &mut Map<String, Value>, root: &Path, vault: &str) -> bool {
    let mut changed = false;
    for a in answers.values_mut() {
        if a.get("roots").is_some() {
            *a = list_result(root, vault);
            changed = true;
        }
    }
    changed
}

/// The shim's answer to a downstream's `roots/list`: the vault root, and nothing else.
pub fn list_result(root: &Path, vault: &str) -> Value {
    json!({"roots": [{"uri": file_uri(root), "name": vault}]})
}

/// `file://` + the absolute path, percent-encoded byte by byte except for RFC 3986's
/// unreserved characters and `/` (so spaces, `%`, `#`, `?` and non-UTF-8 bytes survive).
pub fn file_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut s = String::from("file://");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = "/home/me/my notes";

    fn strip(mut m: Value) -> (bool, Value) {
        let c = strip_client_roots(&mut m, Path::new(ROOT), "notes");
        (c, m)
    }

    #[test]
    fn the_legacy_initialize_loses_its_roots_capability_only() {
        let (c, m) = strip(json!({"method": "initialize", "params": {
            "capabilities": {"roots": {"listChanged": true}, "elicitation": {}}}}));
        assert!(c);
        assert_eq!(m["params"]["capabilities"], json!({"elicitation": {}}));
    }

    #[test]
    fn a_modern_envelope_loses_its_roots_capability() {
        let (c, m) = strip(json!({"method": "tools/call", "params": {"name": "x",
            "_meta": {META_CAPS: {"roots": {}, "elicitation": {"form": {}}}}}}));
        assert!(c);
        assert_eq!(
            m["params"]["_meta"][META_CAPS],
            json!({"elicitation": {"form": {}}})
        );
    }

    #[test]
    fn a_roots_answer_becomes_the_vault_root() {
        let (c, m) = strip(json!({"method": "tools/call", "params": {"name": "x",
            "inputResponses": {"r": {"roots": [{"uri": "file:///"}]},
                               "confirm": {"action": "accept", "content": {"approve": true}}}}}));
        assert!(c);
        let r = &m["params"]["inputResponses"];
        assert_eq!(r["r"]["roots"][0]["uri"], "file:///home/me/my%20notes");
        assert_eq!(r["confirm"]["action"], "accept");
    }

    #[test]
    fn a_snake_case_roots_answer_is_replaced_too() {
        let (c, m) = strip(json!({"method": "tools/call", "params": {"name": "x",
            "input_responses": {"r": {"roots": [{"uri": "file:///"}]}}}}));
        assert!(c);
        assert_eq!(
            m["params"]["input_responses"]["r"]["roots"][0]["uri"],
            "file:///home/me/my%20notes"
        );
    }

    #[test]
    fn other_messages_are_untouched() {
        for m in [
            json!({"method": "tools/call", "params": {"name": "x", "arguments": {"roots": 1}}}),
            json!({"method": "ping"}),
            json!({"id": 1, "result": {"roots": []}}),
        ] {
            assert_eq!(strip(m.clone()), (false, m));
        }
    }

    #[test]
    fn file_uris_escape_what_a_uri_cannot_hold() {
        let p = Path::new("/a b/%#?/é");
        assert_eq!(file_uri(p), "file:///a%20b/%25%23%3F/%C3%A9");
    }
}
