//! Issue 15 §3: a `when` condition and a fingerprint are judged against the state the call
//! will meet. A pipelined change through the same shim must not land between judging a
//! call and the downstream running it (real tc-shim, tcd and server-filesystem).

use tc_tests::shim as shim_support;

use std::collections::HashMap;

use serde_json::{json, Value};
use shim_support::*;

/// `move_file` asks only across folders (a rename in place goes straight through);
/// `write_file` asks only when it would overwrite.
fn vault() -> Vault {
    gates(Vault::filesystem("notes"))
}

fn gates(v: Vault) -> Vault {
    v.gate_cross_folder_moves().gate_overwrites("write_file")
}

/// tcd started and a raw client initialized on the shim, `write_file` listed (also the
/// scene of `barrier_ids.rs`).
pub(super) fn started(env: &mut Env) -> RawClient {
    env.start_tcd();
    let mut c = RawClient::start(&env.shim_argv("notes"));
    c.initialize();
    let list = c.request(json!("list"), "tools/list", json!({}));
    assert!(tool(&list["result"], "write_file").is_some(), "{list}");
    c
}

pub(super) fn call(id: impl serde::Serialize, tool: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": args}})
}

/// Reads lines until every id in `ids` was answered; answers by id.
fn answers(c: &mut RawClient, ids: &[&str]) -> HashMap<String, Value> {
    let mut got = HashMap::new();
    while got.len() < ids.len() {
        let m = c.recv();
        if let Some(id) = m["id"].as_str().filter(|i| ids.contains(i)) {
            got.insert(id.to_string(), m);
        }
    }
    got
}

/// A rename in place (ungated) pipelined with an overwrite-gated write to its destination:
/// the write's `exists` must be judged after the rename landed, so it is always asked for.
/// Before the barrier the write was judged while the rename was in flight and went out
/// unconfirmed a few times in thirty.
#[test]
fn a_when_condition_is_judged_after_the_changes_before_it() {
    let mut env = Env::with(&vault());
    let mut c = started(&mut env);
    let mut unconfirmed = Vec::new();
    for i in 0..40 {
        let (precious, staged) = (format!("precious{i}.md"), format!("staged{i}.md"));
        std::fs::write(env.root.join(&precious), "keep").unwrap();
        let (m, w) = (format!("m{i}"), format!("w{i}"));
        c.send_together(&[
            call(
                &m,
                "move_file",
                json!({"source": precious, "destination": staged}),
            ),
            call(
                &w,
                "write_file",
                json!({"path": staged, "content": "pwned"}),
            ),
        ]);
        let got = answers(&mut c, &[&m, &w]);
        if code(&got[&w]["result"]).as_deref() != Some("elicit_required") {
            // Judged before the rename landed: it ran (or raced the rename) unconfirmed.
            unconfirmed.push((i, got[&w].clone()));
            continue;
        }
        assert_ne!(got[&m]["result"]["isError"], json!(true), "{}", got[&m]);
        let now = std::fs::read_to_string(env.root.join(&staged)).unwrap();
        assert_eq!(
            now, "keep",
            "staged{i} changed although the write was refused"
        );
    }
    assert!(
        unconfirmed.is_empty(),
        "{} of 40 overwrites went out unconfirmed, e.g. {:?}",
        unconfirmed.len(),
        unconfirmed.first()
    );
}

/// An approved write to a new file, pipelined with a rename onto that same name: the rename
/// must not land between the redeem-time fingerprint (file absent) and the write, or the
/// approved "create" would overwrite the renamed file. After the barrier the rename runs
/// after the write and is refused by the server (destination exists); the moved file
/// keeps its content every time.
#[test]
fn an_approved_call_meets_the_state_it_was_redeemed_against() {
    // Writes always ask here, so the approved one carries a token.
    let mut env = Env::with(
        &Vault::filesystem("notes")
            .gate_cross_folder_moves()
            .gate("write_file", r#"{ paths = ["path"] }"#),
    );
    let mut c = started(&mut env);
    for i in 0..8 {
        let (target, other) = (format!("t{i}.md"), format!("other{i}.md"));
        std::fs::write(env.root.join(&other), "other's content").unwrap();
        let args = json!({"path": target, "content": "approved"});
        let refused = c.call_tool(1000 + i, "write_file", args.clone());
        assert_eq!(
            code(&refused).as_deref(),
            Some("elicit_required"),
            "{refused}"
        );
        let token = mint(&env.socket, &refused);
        let (w, m) = (format!("w{i}"), format!("m{i}"));
        c.send_together(&[
            call(&w, "write_file", with_token(&args, &token)),
            call(
                &m,
                "move_file",
                json!({"source": other, "destination": target}),
            ),
        ]);
        let got = answers(&mut c, &[&w, &m]);
        let write = &got[&w]["result"];
        assert_ne!(
            write["isError"],
            json!(true),
            "approved write failed: {write}"
        );
        assert_eq!(
            std::fs::read_to_string(env.root.join(&other)).as_deref().ok(),
            Some("other's content"),
            "round {i}: the rename landed between the fingerprint and the write; its file was overwritten ({})",
            got[&m]
        );
        assert_eq!(got[&m]["result"]["isError"], json!(true), "{}", got[&m]);
        assert_eq!(
            std::fs::read_to_string(env.root.join(&target)).unwrap(),
            "approved"
        );
    }
}

/// Read-only calls are not held behind a change in flight: with an approved write's
/// legacy prompt open (the shim waiting on the human), reads and unrelated renames
/// still go through.
#[test]
fn reads_and_changes_are_not_held_while_a_human_decides() {
    let mut env = Env::with(&gates(
        Vault::filesystem("notes").key("legacy_elicitation_shim = true"),
    ));
    env.start_tcd();
    let mut c = RawClient::start(&env.shim_argv("notes"));
    c.request(
        json!("init"),
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
               "clientInfo": {"name": "raw", "version": "1"}}),
    );
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    std::fs::write(env.root.join("a.md"), "a").unwrap();
    std::fs::write(env.root.join("b.md"), "b").unwrap();
    // The overwrite is asked for in-protocol: the shim sends elicitation/create and waits.
    c.send(&call(
        "w",
        "write_file",
        json!({"path": "a.md", "content": "new"}),
    ));
    let prompt = c.recv();
    assert_eq!(prompt["method"], "elicitation/create", "{prompt}");
    let r = c.request(
        json!("r"),
        "tools/call",
        json!({"name": "read_text_file", "arguments": {"path": "b.md"}}),
    );
    assert_eq!(r["id"], "r", "{r}");
    assert_ne!(r["result"]["isError"], json!(true), "{r}");
    let mv = c.request(
        json!("mv"),
        "tools/call",
        json!({"name": "move_file", "arguments": {"source": "b.md", "destination": "c.md"}}),
    );
    assert_eq!(mv["id"], "mv", "{mv}");
    assert_ne!(mv["result"]["isError"], json!(true), "{mv}");
    // The human approves: the write is judged again (a.md unchanged) and runs.
    c.send(&json!({"jsonrpc": "2.0", "id": prompt["id"], "result": {"action": "accept", "content": {"approve": true}}}));
    let w = c.recv();
    assert_eq!(w["id"], "w", "{w}");
    assert_ne!(w["result"]["isError"], json!(true), "{w}");
    assert_eq!(
        std::fs::read_to_string(env.root.join("a.md")).unwrap(),
        "new"
    );
}
