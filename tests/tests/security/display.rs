//! End to end (issue 15, item 6): what the human reads is what the call does. A hostile
//! model puts terminal controls in an argument *name* (to erase the real arguments and
//! print a fake) and a bidi override in a value; `tcctl pending` and the confirmation
//! prompt show every such character as a visible marker, never raw.
//! Real tc-shim → real server-filesystem, real tcd, real tcctl.

use tc_tests::shim as support;

use serde_json::{json, Value};
use support::*;

/// The fake a name tries to print over the line once `\r ESC[2K` erased it.
const FAKE: &str = "edit_file path=\"notes/todo.md\" edits=[]";

/// tcd on a vault with `extra` keys, `write_file` and `edit_file` gated, secret.txt
/// written, and a raw client on its shim (not initialized: the tests choose how).
fn started(extra: &str) -> (Env, RawClient) {
    let mut env = Env::with(
        &Vault::filesystem("fs")
            .key(extra)
            .gate("write_file", r#"{ paths = ["path"] }"#)
            .gate("edit_file", r#"{ paths = ["path"] }"#),
    );
    env.start_tcd();
    std::fs::write(env.root.join("secret.txt"), "a").unwrap();
    let c = RawClient::start(&env.shim_argv("fs"));
    (env, c)
}

/// A hostile `edit_file`: a name carrying `\r ESC[2K` + a fake, a value with an RLO.
fn hostile_args() -> Value {
    json!({
        "path": "secret.txt",
        "edits": [{"oldText": "a", "newText": "b\u{202e}txt.exe"}],
        format!("\r\x1b[2K{FAKE}"): "x",
    })
}

/// Raw characters that must never reach a person: controls, bidi, invisible ones.
fn raw_hazards(s: &str) -> Vec<String> {
    s.chars()
        .filter(|&c| {
            let u = c as u32;
            (c.is_control() && c != '\n')
                || matches!(u, 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2069 | 0x061C | 0xFEFF | 0xE0000..=0xE007F)
        })
        .map(|c| format!("U+{:04X}", c as u32))
        .collect()
}

fn assert_escaped(what: &str, shown: &str) {
    assert!(
        raw_hazards(shown).is_empty(),
        "{what}: raw {:?} in {shown:?}",
        raw_hazards(shown)
    );
    // A name that is not a plain word is shown as a JSON string: the fake is visibly
    // inside the quotes of a name, its controls visible as escapes.
    assert!(
        shown.contains(r#""\r\u001b[2Kedit_file path=\"notes/todo.md\" edits=[]"="x""#),
        "{what}: {shown}"
    );
    assert!(shown.contains("⟨U+202E⟩"), "{what}: {shown}");
    assert!(
        !shown.contains("⟨U+27E8⟩"),
        "{what}: marker escaped twice: {shown}"
    );
    // The real target is still there, beside the (now visible) fake.
    assert!(shown.contains("secret.txt"), "{what}: {shown}");
}

#[test]
fn pending_shows_hostile_names_and_values_escaped() {
    let (env, mut c) = started("");
    c.initialize();
    let r = c.call_tool(1, "edit_file", hostile_args());
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
    let out = env.tcd.tcctl(&["pending"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert_escaped("tcctl pending", &text);
    // --json keeps the exact value for scripts, but as JSON escapes, not raw bytes.
    let out = env.tcd.tcctl(&["pending", "--json"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(raw_hazards(&text).is_empty(), "{text:?}");
    let v: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert!(v["summary"].as_str().unwrap().contains("⟨U+202E⟩"), "{v}");
    // The event log as a person reads it.
    let out = env.tcd.tcctl(&["events"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("tc.elicit.requested"), "{text}");
    assert!(raw_hazards(&text).is_empty(), "{text:?}");
    assert!(text.contains("b⟨U+202E⟩txt.exe"), "{text}");
}

#[test]
fn the_prompt_shows_hostile_names_and_values_escaped() {
    let (env, mut c) = started("legacy_elicitation_shim = true");
    c.request(
        json!("init"),
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"form": {}}},
               "clientInfo": {"name": "raw", "version": "1"}}),
    );
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    c.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": "write_file", "arguments": {
                       "path": "secret.txt", "content": "b\u{202e}txt.exe",
                       format!("\r\x1b[2K{FAKE}"): "x"}}}));
    let prompt = loop {
        let v = c.recv();
        if v["method"] == "elicitation/create" {
            break v;
        }
    };
    let msg = prompt["params"]["message"].as_str().unwrap();
    assert_escaped("elicitation message", msg);
    // Decline: nothing runs.
    c.send(&json!({"jsonrpc": "2.0", "id": prompt["id"], "result": {"action": "decline"}}));
    let r = c.recv();
    assert_eq!(r["id"], json!(1), "{r}");
    assert_eq!(
        std::fs::read_to_string(env.root.join("secret.txt")).unwrap(),
        "a"
    );
}
