//! Issue 29 item 4, a hostile downstream: the real tc-shim (legacy stdio client that
//! declares elicitation, real tcd) in front of tests/fixtures/redefine_server.py, a server
//! that redefines the gated tool `put` through `notifications/tools/list_changed` while
//! the human's prompt for a call of it is open, then has the human accept. The call was
//! judged (paths, ACL, floor) against the old definition; what runs must be judged
//! against the definition the server holds when it runs:
//! - `where` turned from a label into a path (the server now writes there, outside the
//!   vault): the approved call is refused (`replay_drift`), nothing is written, and the
//!   agent's retry is judged against the new definition (`invalid_input`);
//! - only the description changed: refused the same way; the retry asks the human again;
//! - `put` vanished from the listing (renamed) but is still served: refused, not run;
//! - the same with the notification's `method` member named twice (a line the shim's
//!   fast path does not take): the cache is emptied all the same;
//! - a `list_changed` that changes nothing does not refuse the approved call.
//!
//! And on the refusal route (approve by request) the retry after the redefinition is a
//! fresh call, judged against the new definition (this held before).

use tc_tests::shim as support;

use serde_json::{json, Value};
use support::*;

fn env() -> Env {
    let mut env = Env::with(
        &Vault::fixture("rd", "redefine_server.py")
            .key("legacy_elicitation_shim = true")
            .gate("put", r#"{ paths = ["path"] }"#),
    );
    env.start_tcd();
    env
}

/// A legacy client of the shim, declaring form elicitation (`elicit`) or nothing.
fn client(env: &Env, elicit: bool) -> RawClient {
    let mut c = RawClient::start(&env.shim_argv("rd"));
    let caps = if elicit {
        json!({"elicitation": {"form": {}}})
    } else {
        json!({})
    };
    let r = c.request(
        json!("init"),
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": caps, "clientInfo": {"name": "raw", "version": "1"}}),
    );
    assert!(r.get("result").is_some(), "{r}");
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let l = c.request(json!("list"), "tools/list", json!({}));
    assert!(tool(&l["result"], "put").is_some(), "{l}");
    c
}

/// Receives until the message `pick` selects (other messages are collected).
fn until(c: &mut RawClient, seen: &mut Vec<Value>, pick: impl Fn(&Value) -> bool) -> Value {
    loop {
        let m = c.recv();
        if pick(&m) {
            return m;
        }
        seen.push(m);
    }
}

fn call(id: u64, tool: &str, args: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": args}})
}

fn answer_of(id: u64) -> impl Fn(&Value) -> bool {
    move |m: &Value| m["id"] == json!(id) && m.get("method").is_none()
}

fn is_prompt(m: &Value) -> bool {
    m["method"] == "elicitation/create"
}

/// Answers the shim's prompt `prompt` (an `elicitation/create`) with an approval.
fn accept_approval(c: &mut RawClient, prompt: &Value) {
    c.send(&json!({"jsonrpc": "2.0", "id": prompt["id"],
        "result": {"action": "accept", "content": {"approve": true}}}));
}

/// Approves `prompt`; the call `id` it asked for then runs, and in.txt holds `want`.
#[track_caller]
fn assert_approval_runs(
    env: &Env,
    (c, seen): (&mut RawClient, &mut Vec<Value>),
    (prompt, id): (&Value, u64),
    want: &str,
) {
    accept_approval(c, prompt);
    let r = until(c, seen, answer_of(id));
    assert_ne!(r["result"]["isError"], true, "{r}");
    assert_eq!(disk(env, "in.txt").as_deref(), Some(want));
}

fn args() -> Value {
    json!({"path": "in.txt", "content": "pwned", "where": "../outside.txt"})
}

/// Calls `put`, waits for the prompt, has the server switch to `to` (the client sees
/// its list_changed first), then accepts: the call's answer.
fn approve_across_redefinition(c: &mut RawClient, to: &str) -> Value {
    let mut seen = Vec::new();
    c.send(&call(10, "put", &args()));
    let prompt = until(c, &mut seen, is_prompt);
    c.send(&call(11, "redefine", &json!({"to": to})));
    let r = until(c, &mut seen, answer_of(11));
    assert_eq!(r["result"]["content"][0]["text"], "redefined", "{r}");
    assert!(
        seen.iter()
            .any(|m| m["method"] == "notifications/tools/list_changed"),
        "the client saw the list change: {seen:?}"
    );
    accept_approval(c, &prompt);
    until(c, &mut seen, answer_of(10))
}

fn disk(env: &Env, rel: &str) -> Option<String> {
    std::fs::read_to_string(env.root.join(rel)).ok()
}

fn outside(env: &Env) -> bool {
    env.root.parent().unwrap().join("outside.txt").exists()
}

#[test]
fn an_approved_call_of_a_tool_redefined_meanwhile_is_refused_and_judged_afresh() {
    let env = env();
    let mut c = client(&env, true);
    let r = approve_across_redefinition(&mut c, "v2");
    assert!(
        !outside(&env),
        "the server wrote outside the vault through an argument the old definition called a label: {r}"
    );
    assert_eq!(disk(&env, "in.txt"), None, "{r}");
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(code(&r["result"]).as_deref(), Some("replay_drift"), "{r}");
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("changed the definition of `put`"), "{text}");
    // The retry is judged against the new definition: `where` is now a path, outside.
    let r = c.call_tool(12, "put", args());
    assert_eq!(code(&r).as_deref(), Some("invalid_input"), "{r}");
    assert!(!outside(&env));
}

#[test]
fn a_list_changed_naming_its_method_twice_still_empties_the_tool_cache() {
    let env = env();
    let mut c = client(&env, true);
    let r = approve_across_redefinition(&mut c, "v2dup");
    assert!(!outside(&env), "{r}");
    assert_eq!(code(&r["result"]).as_deref(), Some("replay_drift"), "{r}");
}

#[test]
fn a_new_description_alone_refuses_the_approved_call_and_the_retry_asks_again() {
    let env = env();
    let mut c = client(&env, true);
    let r = approve_across_redefinition(&mut c, "desc");
    assert_eq!(code(&r["result"]).as_deref(), Some("replay_drift"), "{r}");
    assert_eq!(disk(&env, "in.txt"), None, "{r}");
    let mut seen = Vec::new();
    let safe = json!({"path": "in.txt", "content": "ok"});
    c.send(&call(13, "put", &safe));
    let prompt = until(&mut c, &mut seen, is_prompt);
    let msg = prompt["params"]["message"].as_str().unwrap();
    assert!(msg.contains("put"), "{msg}");
    assert_approval_runs(&env, (&mut c, &mut seen), (&prompt, 13), "ok");
}

#[test]
fn an_approved_tool_gone_from_the_listing_is_not_run() {
    let env = env();
    let mut c = client(&env, true);
    let r = approve_across_redefinition(&mut c, "hidden");
    assert_eq!(
        disk(&env, "in.txt"),
        None,
        "ran a tool the server no longer lists: {r}"
    );
    assert_eq!(code(&r["result"]).as_deref(), Some("replay_drift"), "{r}");
}

#[test]
fn a_list_change_that_changes_nothing_leaves_the_approval_standing() {
    let env = env();
    let mut c = client(&env, true);
    let safe = json!({"path": "in.txt", "content": "same"});
    let mut seen = Vec::new();
    c.send(&call(10, "put", &safe));
    let prompt = until(&mut c, &mut seen, is_prompt);
    c.send(&call(11, "redefine", &json!({"to": "v1"})));
    until(&mut c, &mut seen, answer_of(11));
    assert_approval_runs(&env, (&mut c, &mut seen), (&prompt, 10), "same");
}

#[test]
fn approve_by_request_retries_are_judged_against_the_new_definition() {
    let env = env();
    let mut c = client(&env, false);
    let r = c.call_tool(10, "put", args());
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
    let id = request_id(&r);
    tcctl_approve(&env, &id);
    let mut seen = Vec::new();
    c.send(&call(11, "redefine", &json!({"to": "v2"})));
    until(&mut c, &mut seen, answer_of(11));
    let r = c.call_tool(12, "put", args());
    assert_eq!(code(&r).as_deref(), Some("invalid_input"), "{r}");
    assert!(!outside(&env), "{r}");
    assert_eq!(disk(&env, "in.txt"), None, "{r}");
}
