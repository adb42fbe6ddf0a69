//! End to end, URL-mode elicitation (issue 17 item 4): a raw JSON-RPC client declaring
//! `elicitation: {url: {}}` → real tc-shim (legacy era, `legacy_elicitation_shim = true`,
//! `[approvals] listen` set) → real server-filesystem, real tcd, real `tcctl`. The shim
//! sends the request's page link; the call runs only under tcd's approval of that request.

use tc_tests::shim as support;

use tc_tests::elicit;

use std::process::Output;

use elicit::*;
use serde_json::{json, Value};
use support::*;

/// Each test its own port: the page (another part of tcd) may bind it once merged.
fn started(port: Option<u16>, caps: Value, ttl: Option<u32>) -> (Env, RawClient) {
    let mut env = fs_vault("legacy_elicitation_shim = true", None);
    if let Some(p) = port {
        let text = std::fs::read_to_string(&env.config).unwrap();
        let text = format!("{text}\n[approvals]\nlisten = \"127.0.0.1:{p}\"\n");
        std::fs::write(&env.config, text).unwrap();
    }
    if let Some(t) = ttl {
        set_ttl(&env, t);
    }
    env.start_tcd();
    std::fs::write(env.root.join("note.txt"), "v0").unwrap();
    let mut c = RawClient::start(&env.shim_argv("fs"));
    let r = c.request(
        json!("init"),
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": caps,
               "clientInfo": {"name": "raw-url", "version": "1"}}),
    );
    assert!(r.get("result").is_some(), "{r}");
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    (env, c)
}

fn url_caps() -> Value {
    json!({"elicitation": {"url": {}}})
}

fn write_v1() -> Value {
    json!({"path": "note.txt", "content": "v1"})
}

/// Sends the gated call (id 1) and returns the URL elicitation the shim sends, checked.
#[track_caller]
fn call_and_get_link(c: &mut RawClient, port: u16) -> (Value, String) {
    c.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": "write_file", "arguments": write_v1()}}));
    let m = c.recv();
    assert_eq!(m["method"], "elicitation/create", "{m}");
    let p = &m["params"];
    assert_eq!(p["mode"], "url", "{m}");
    assert!(p.get("requestedSchema").is_none(), "{m}");
    let url = p["url"].as_str().unwrap();
    let prefix = format!("http://127.0.0.1:{port}/requests/");
    let id = url
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{url}"))
        .to_string();
    assert_eq!(id.len(), 8, "{url}");
    assert!(!p["elicitationId"].as_str().unwrap().is_empty(), "{m}");
    let msg = p["message"].as_str().unwrap();
    assert!(
        msg.contains("`write_file`") && msg.contains("`fs`") && msg.contains(&id),
        "{msg}"
    );
    (m, id)
}

fn answer(c: &mut RawClient, elicit: &Value, result: Value) {
    c.send(&json!({"jsonrpc": "2.0", "id": elicit["id"], "result": result}));
}

/// Reads lines until the response to id 1; returns it and what came before.
fn result_of_call(c: &mut RawClient) -> (Value, Vec<Value>) {
    let mut before = Vec::new();
    loop {
        let m = c.recv();
        if m["id"] == json!(1) && m.get("method").is_none() {
            return (m["result"].clone(), before);
        }
        before.push(m);
    }
}

fn tcctl(env: &Env, args: &[&str]) -> Output {
    env.tcd.tcctl(args)
}

#[track_caller]
fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn url_accept_then_page_approval_runs_the_call_once() {
    let port = tc_tests::free_port();
    let (env, mut c) = started(Some(port), url_caps(), None);
    let (m, id) = call_and_get_link(&mut c, port);
    // The human opens the page: that approves nothing.
    answer(&mut c, &m, json!({"action": "accept"}));
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
    // The approval the page would give, through the same RPC.
    ok(&tcctl(&env, &["approve", &id, "--yes"]));
    let (r, before) = result_of_call(&mut c);
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));
    // The client learns the out-of-band step finished, for the elicitation it was shown.
    assert!(
        before
            .iter()
            .any(|b| b["method"] == "notifications/elicitation/complete"
                && b["params"]["elicitationId"] == m["params"]["elicitationId"]),
        "{before:?}"
    );
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 1);
    // Spent: the identical call asks afresh (a new link), it does not run again.
    std::fs::write(env.root.join("note.txt"), "v0").unwrap();
    c.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                   "params": {"name": "write_file", "arguments": write_v1()}}));
    let again = c.recv();
    assert_eq!(again["method"], "elicitation/create", "{again}");
    assert!(
        !again["params"]["url"].as_str().unwrap().ends_with(&id),
        "{again}"
    );
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
}

#[test]
fn approval_before_the_client_answers_also_runs_once() {
    // A human who saw `tcctl watch` approves before the client's consent dialog is answered.
    let port = tc_tests::free_port();
    let (env, mut c) = started(Some(port), url_caps(), None);
    let (_m, id) = call_and_get_link(&mut c, port);
    ok(&tcctl(&env, &["approve", &id, "--yes"]));
    let (r, _) = result_of_call(&mut c);
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 1);
}

#[test]
fn page_decline_is_approval_declined_with_the_reason() {
    let port = tc_tests::free_port();
    let (env, mut c) = started(Some(port), url_caps(), None);
    let (m, id) = call_and_get_link(&mut c, port);
    answer(&mut c, &m, json!({"action": "accept"}));
    ok(&tcctl(
        &env,
        &["decline", &id, "--reason", "not on a Friday"],
    ));
    let (r, _) = result_of_call(&mut c);
    assert_eq!(code(&r).as_deref(), Some("approval_declined"), "{r}");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("not on a Friday"), "{text}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
}

#[test]
fn client_decline_is_a_hard_stop_and_declines_in_tcd() {
    let port = tc_tests::free_port();
    let (env, mut c) = started(Some(port), url_caps(), None);
    let (m, id) = call_and_get_link(&mut c, port);
    answer(&mut c, &m, json!({"action": "decline"}));
    let (r, _) = result_of_call(&mut c);
    assert_eq!(code(&r).as_deref(), Some("approval_declined"), "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
    // Declined in tcd too: the page (or tcctl) cannot approve it afterwards.
    let o = tcctl(&env, &["approve", &id, "--yes"]);
    assert!(!o.status.success(), "{o:?}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
}

#[test]
fn client_cancel_is_not_obtained() {
    let port = tc_tests::free_port();
    let (env, mut c) = started(Some(port), url_caps(), None);
    let (m, _id) = call_and_get_link(&mut c, port);
    answer(&mut c, &m, json!({"action": "cancel"}));
    let (r, _) = result_of_call(&mut c);
    assert_eq!(code(&r).as_deref(), Some("approval_not_obtained"), "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
    assert_eq!(events_of(&env, "tc.elicit.not_obtained"), 1);
}

#[test]
fn an_unanswered_request_reads_as_expired() {
    let port = tc_tests::free_port();
    let (env, mut c) = started(Some(port), url_caps(), Some(2));
    let (m, _id) = call_and_get_link(&mut c, port);
    answer(&mut c, &m, json!({"action": "accept"}));
    let (r, _) = result_of_call(&mut c);
    assert_eq!(code(&r).as_deref(), Some("request_expired"), "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
}

#[test]
fn form_and_url_prefers_the_page_and_form_only_keeps_the_form() {
    let port = tc_tests::free_port();
    let (_env, mut c) = started(
        Some(port),
        json!({"elicitation": {"form": {}, "url": {}}}),
        None,
    );
    let (m, _) = call_and_get_link(&mut c, port);
    answer(&mut c, &m, json!({"action": "cancel"}));
    let (_env2, mut f) = started(Some(port + 10), json!({"elicitation": {"form": {}}}), None);
    f.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": "write_file", "arguments": write_v1()}}));
    let p = f.recv();
    assert_eq!(p["method"], "elicitation/create", "{p}");
    assert_eq!(p["params"]["mode"], "form", "{p}");
}

#[test]
fn url_without_a_configured_page_gets_the_cli_route() {
    let (env, mut c) = started(None, url_caps(), None);
    c.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": "write_file", "arguments": write_v1()}}));
    let m = c.recv();
    assert_eq!(m["id"], 1, "no prompt may be sent: {m}");
    let r = &m["result"];
    assert_eq!(code(r).as_deref(), Some("elicit_required"), "{r}");
    assert!(sc(r)["details"]["request_id"].is_string(), "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
}
