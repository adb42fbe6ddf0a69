//! End to end, URL-mode elicitation (issue 17 item 4): a raw JSON-RPC client declaring
//! `elicitation: {url: {}}` → real tc-shim (legacy era, `legacy_elicitation_shim = true`,
//! `[approvals] listen` set) → real server-filesystem, real tcd, real `tcctl`. The shim
//! sends the request's page link; the call runs only under tcd's approval of that request.

use tc_tests::elicit::*;
use tc_tests::shim::*;

use std::process::Output;

use serde_json::{json, Value};

/// Each test its own port: the page (another part of tcd) may bind it once merged.
fn started(port: Option<u16>, caps: Value, ttl: Option<u32>) -> (Env, RawClient) {
    let env = url_env("legacy_elicitation_shim = true", port, ttl);
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

/// Sends the gated call (`id`) and returns the next message.
fn send_call(c: &mut RawClient, id: u64) -> Value {
    c.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                   "params": {"name": "write_file", "arguments": write_v1()}}));
    c.recv()
}

/// Sends the gated call (id 1) and returns the URL elicitation the shim sends, checked.
#[track_caller]
fn call_and_get_link(c: &mut RawClient, port: u16) -> (Value, String) {
    let m = send_call(c, 1);
    assert_eq!(m["method"], "elicitation/create", "{m}");
    let p = &m["params"];
    assert!(!p["elicitationId"].as_str().unwrap().is_empty(), "{m}");
    let id = url_request_id(p, port);
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

/// The scene most tests share: the page on its own port, a client declaring `caps`, the
/// gated call sent and its link checked. Returns the link's message and request id.
fn linked(caps: Value, ttl: Option<u32>) -> (Env, RawClient, Value, String) {
    let port = tc_tests::free_port();
    let (env, mut c) = started(Some(port), caps, ttl);
    let (m, id) = call_and_get_link(&mut c, port);
    (env, c, m, id)
}

/// [`linked`] with URL mode declared, the link answered with `action`.
fn answered(action: &str) -> (Env, RawClient, Value, String) {
    let (env, mut c, m, id) = linked(url_caps(), None);
    answer(&mut c, &m, json!({ "action": action }));
    (env, c, m, id)
}

/// The call's result, refused with `want`, and nothing written.
#[track_caller]
fn refused(env: &Env, c: &mut RawClient, want: &str) -> Value {
    let (r, _) = result_of_call(c);
    assert_code(&r, want);
    assert_note(env, "v0");
    r
}

#[test]
fn url_accept_then_page_approval_runs_the_call_once() {
    // The human opens the page: that approves nothing.
    let (env, mut c, m, id) = answered("accept");
    assert_note(&env, "v0");
    // The approval the page would give, through the same RPC.
    tcctl_approve(&env, &id);
    let (r, before) = result_of_call(&mut c);
    assert_ne!(r["isError"], true, "{r}");
    assert_note(&env, "v1");
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
    let again = send_call(&mut c, 2);
    assert_eq!(again["method"], "elicitation/create", "{again}");
    assert!(
        !again["params"]["url"].as_str().unwrap().ends_with(&id),
        "{again}"
    );
    assert_note(&env, "v0");
}

#[test]
fn approval_before_the_client_answers_also_runs_once() {
    // A human who saw `tcctl watch` approves before the client's consent dialog is answered.
    let (env, mut c, _, id) = linked(url_caps(), None);
    tcctl_approve(&env, &id);
    let (r, _) = result_of_call(&mut c);
    assert_wrote_v1_once(&env, &r);
}

#[test]
fn page_decline_is_approval_declined_with_the_reason() {
    let (env, mut c, _, id) = answered("accept");
    assert_ok(&tcctl(
        &env,
        &["decline", &id, "--reason", "not on a Friday"],
    ));
    let r = refused(&env, &mut c, "approval_declined");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("not on a Friday"), "{text}");
}

#[test]
fn client_decline_is_a_hard_stop_and_declines_in_tcd() {
    let (env, mut c, _, id) = answered("decline");
    refused(&env, &mut c, "approval_declined");
    // Declined in tcd too: the page (or tcctl) cannot approve it afterwards.
    let o = tcctl(&env, &["approve", &id, "--yes"]);
    assert!(!o.status.success(), "{o:?}");
    assert_note(&env, "v0");
}

#[test]
fn client_cancel_is_not_obtained() {
    let (env, mut c, _, _) = answered("cancel");
    refused(&env, &mut c, "approval_not_obtained");
    assert_eq!(events_of(&env, "tc.elicit.not_obtained"), 1);
}

#[test]
fn an_unanswered_request_reads_as_expired() {
    let (env, mut c, m, _) = linked(url_caps(), Some(2));
    answer(&mut c, &m, json!({"action": "accept"}));
    refused(&env, &mut c, "request_expired");
}

#[test]
fn form_and_url_prefers_the_page_and_form_only_keeps_the_form() {
    let (_env, mut c, m, _) = linked(json!({"elicitation": {"form": {}, "url": {}}}), None);
    answer(&mut c, &m, json!({"action": "cancel"}));
    let port = tc_tests::free_port();
    let (_env2, mut f) = started(Some(port), json!({"elicitation": {"form": {}}}), None);
    let p = send_call(&mut f, 1);
    assert_eq!(p["method"], "elicitation/create", "{p}");
    assert_eq!(p["params"]["mode"], "form", "{p}");
}

#[test]
fn url_without_a_configured_page_gets_the_cli_route() {
    let (env, mut c) = started(None, url_caps(), None);
    let m = send_call(&mut c, 1);
    assert_eq!(m["id"], 1, "no prompt may be sent: {m}");
    let r = &m["result"];
    assert_code(r, "elicit_required");
    assert!(sc(r)["details"]["request_id"].is_string(), "{r}");
    assert_note(&env, "v0");
}
