//! End to end, route 3u (issue 17 item 4 on the 2026-07-28 era): the Python `mcp` 2.3
//! `mcp.Client(mode="auto")`, declaring URL-mode elicitation, → real tc-shim (stdio) → real
//! server-filesystem, real tcd with `[approvals] listen` set, real `tcctl`. Round 1 embeds
//! the request's page link; the re-sent call waits for tcd's decision on that request.

use tc_tests::shim as support;

use tc_tests::elicit;

use std::process::Output;

use elicit::*;
use serde_json::{json, Value};
use support::*;

/// A vault with the page on its own port (`ttl`: the confirmation TTL in seconds), and the
/// modern client (`driver`: `modern`, `modern-form` or `modern-url`).
fn started(port: Option<u16>, driver: &str, ttl: Option<u32>) -> (Env, Human) {
    let mut env = fs_vault("", None);
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
    let h = Human::python(driver, &env.shim_argv("fs"));
    assert_eq!(h.hello["era"], "modern", "{}", h.hello);
    assert_eq!(h.hello["protocolVersion"], "2026-07-28");
    (env, h)
}

fn write_v1() -> Value {
    json!({"path": "note.txt", "content": "v1"})
}

/// Checks a URL prompt (as the SDK handed it to the callback) and returns the request id.
#[track_caller]
fn link_of(prompt: &Value, port: u16) -> String {
    assert_eq!(prompt["mode"], "url", "{prompt}");
    assert!(prompt.get("requestedSchema").is_none(), "{prompt}");
    assert!(prompt.get("elicitationId").is_none(), "{prompt}");
    let url = prompt["url"].as_str().unwrap();
    let prefix = format!("http://127.0.0.1:{port}/requests/");
    let id = url
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{url}"))
        .to_string();
    assert_eq!(id.len(), 8, "{url}");
    let msg = prompt["message"].as_str().unwrap();
    assert!(
        msg.contains("`write_file`") && msg.contains("`fs`") && msg.contains(&id),
        "{msg}"
    );
    id
}

/// Starts the gated call (the SDK drives the rounds) and waits for its link.
fn call_for_link(h: &mut Human, port: u16) -> (String, String) {
    let tag = h.start_call("write_file", write_v1());
    let id = link_of(&h.prompt(), port);
    (tag, id)
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

/// The request's status as tcd's ListPending reports it (JSON lines).
fn status_of(env: &Env, id: &str) -> String {
    let o = env.tcd.tcctl(&["pending", "--json"]);
    ok(&o);
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["request_id"] == id)
        .map(|v| v["status"].as_str().unwrap_or_default().to_string())
        .unwrap_or_else(|| panic!("request {id} not listed"))
}

/// Declines request `id` on the page as the human would: a session from the link
/// `tcctl page` mints, then the POST with its cookie and CSRF token, from the page's own
/// origin.
fn decline_on_the_page(env: &Env, id: &str, reason: &str) {
    let o = env.tcd.tcctl(&["page", "--print"]);
    ok(&o);
    let page = tc_tests::page::PageSession::open(String::from_utf8_lossy(&o.stdout).trim());
    let (st, out) = page.post(
        &format!("/api/requests/{id}/decline"),
        &json!({ "reason": reason }),
    );
    assert_eq!(st, 200, "{out}");
}

#[test]
fn url_accept_then_approval_runs_the_call_once() {
    let port = tc_tests::free_port();
    let (env, mut h) = started(Some(port), "modern", None);
    let (tag, id) = call_for_link(&mut h, port);
    // The human agrees to open the page: that approves nothing.
    h.answer(json!({"action": "accept"}));
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
    assert_eq!(status_of(&env, &id), "pending");
    // The approval the page gives, through the same RPC (personal mode: tcctl).
    ok(&env.tcd.tcctl(&["approve", &id, "--yes"]));
    let r = h.result(&tag);
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 1);
    // Spent: the identical call asks afresh (a new link); it does not run again.
    std::fs::write(env.root.join("note.txt"), "v0").unwrap();
    let (tag, again) = call_for_link(&mut h, port);
    assert_ne!(again, id);
    h.answer(json!({"action": "cancel"}));
    let r = h.result(&tag);
    assert_eq!(code(&r).as_deref(), Some("approval_not_obtained"), "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 1);
}

#[test]
fn a_form_approve_sent_for_the_link_is_no_approval() {
    // A client answering the link as if it were our form (accept + approve: true) has only
    // agreed to open the page: the call waits, and runs once a human declines or approves.
    let port = tc_tests::free_port();
    let (env, mut h) = started(Some(port), "modern", None);
    let (tag, id) = call_for_link(&mut h, port);
    h.answer(approve());
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
    decline_on_the_page(&env, &id, "not this file");
    let r = h.result(&tag);
    assert_eq!(code(&r).as_deref(), Some("approval_declined"), "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
}

#[test]
fn page_decline_is_approval_declined_with_the_reason() {
    let port = tc_tests::free_port();
    let (env, mut h) = started(Some(port), "modern", None);
    let (tag, id) = call_for_link(&mut h, port);
    h.answer(json!({"action": "accept"}));
    decline_on_the_page(&env, &id, "not on a Friday");
    let r = h.result(&tag);
    assert_eq!(code(&r).as_deref(), Some("approval_declined"), "{r}");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("not on a Friday"), "{text}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
    assert_eq!(status_of(&env, &id), "declined");
}

#[test]
fn client_decline_is_a_hard_stop_and_declines_in_tcd() {
    let port = tc_tests::free_port();
    let (env, mut h) = started(Some(port), "modern", None);
    let (tag, id) = call_for_link(&mut h, port);
    h.answer(json!({"action": "decline"}));
    let r = h.result(&tag);
    assert_eq!(code(&r).as_deref(), Some("approval_declined"), "{r}");
    assert_eq!(events_of(&env, "tc.elicit.declined"), 1);
    assert_eq!(status_of(&env, &id), "declined");
    // Declined in tcd too: the page (or tcctl) cannot approve it afterwards.
    let o = env.tcd.tcctl(&["approve", &id, "--yes"]);
    assert!(!o.status.success(), "{o:?}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
}

#[test]
fn client_cancel_then_tcctl_approve_and_the_plain_retry_runs_once() {
    let port = tc_tests::free_port();
    let (env, mut h) = started(Some(port), "modern", None);
    let (tag, id) = call_for_link(&mut h, port);
    h.answer(json!({"action": "cancel"}));
    let r = h.result(&tag);
    assert_eq!(code(&r).as_deref(), Some("approval_not_obtained"), "{r}");
    let s = sc(&r);
    assert_eq!(s["recovery"]["approve"], format!("tcctl approve {id}"));
    assert_eq!(
        s["recovery"]["url"],
        format!("http://127.0.0.1:{port}/requests/{id}")
    );
    assert_eq!(events_of(&env, "tc.elicit.not_obtained"), 1);
    // The request stays pending: approved later, the identical retry runs once, unprompted.
    assert_eq!(status_of(&env, &id), "pending");
    ok(&env.tcd.tcctl(&["approve", &id, "--yes"]));
    let r = h.call("write_file", write_v1());
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 1);
    // Once: the next identical call gets a fresh link.
    let (tag, again) = call_for_link(&mut h, port);
    assert_ne!(again, id);
    h.answer(json!({"action": "cancel"}));
    h.result(&tag);
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 1);
}

#[test]
fn a_cancelled_wait_gets_no_answer_and_the_request_stays_pending() {
    let port = tc_tests::free_port();
    let (env, mut h) = started(Some(port), "modern", None);
    let (tag, id) = call_for_link(&mut h, port);
    h.answer(json!({"action": "accept"}));
    h.cancel(&tag);
    let o = h.outcome(&tag);
    assert_eq!(o["cancelled"], true, "{o}");
    assert_eq!(status_of(&env, &id), "pending");
    ok(&env.tcd.tcctl(&["approve", &id, "--yes"]));
    let r = h.call("write_file", write_v1());
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 1);
}

#[test]
fn a_replayed_round_two_state_is_refused_as_spent() {
    let port = tc_tests::free_port();
    let (env, mut h) = started(Some(port), "modern", None);
    let tag = h.start_raw("write_file", write_v1(), None, None);
    let r = h.result(&tag);
    assert_eq!(r["resultType"], "input_required", "{r}");
    let id = link_of(&r["inputRequests"]["confirm"]["params"], port);
    let state = r["requestState"].as_str().unwrap().to_string();
    let accept = json!({"action": "accept"});
    let tag = h.start_raw("write_file", write_v1(), Some(&state), Some(accept.clone()));
    ok(&env.tcd.tcctl(&["approve", &id, "--yes"]));
    let r = h.result(&tag);
    assert_eq!(r["resultType"], "complete", "{r}");
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));
    // Someone resets the file and replays the captured round 2.
    std::fs::write(env.root.join("note.txt"), "reset").unwrap();
    let tag = h.start_raw("write_file", write_v1(), Some(&state), Some(accept));
    let r = h.result(&tag);
    assert_eq!(code(&r).as_deref(), Some("invalid_input"), "{r}");
    assert_eq!(sc(&r)["details"]["reason"], "spent", "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("reset"));
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 1);
}

#[test]
fn an_unanswered_request_reads_as_expired() {
    let port = tc_tests::free_port();
    let (env, mut h) = started(Some(port), "modern", Some(2));
    let (tag, _id) = call_for_link(&mut h, port);
    h.answer(json!({"action": "accept"}));
    let r = h.result(&tag);
    assert_eq!(code(&r).as_deref(), Some("request_expired"), "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
}

#[test]
fn url_only_gets_the_link_and_form_only_keeps_the_form() {
    let port = tc_tests::free_port();
    let (_env, mut u) = started(Some(port), "modern-url", None);
    let (tag, _) = call_for_link(&mut u, port);
    u.answer(json!({"action": "cancel"}));
    u.result(&tag);
    let (env, mut f) = started(Some(tc_tests::free_port()), "modern-form", None);
    let (p, r) = f.call_answering("write_file", write_v1(), approve());
    assert_eq!(p["mode"], "form", "{p}");
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));
}

#[test]
fn without_a_page_the_form_or_the_cli_route() {
    // Both modes declared, no page: route 3 (the form), as before.
    let (env, mut h) = started(None, "modern", None);
    let (p, r) = h.call_answering("write_file", write_v1(), approve());
    assert_eq!(p["mode"], "form", "{p}");
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));
    // URL only, no page: route 1, the refusal naming the request.
    let (env, mut u) = started(None, "modern-url", None);
    let r = u.call("write_file", write_v1());
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
    assert!(sc(&r)["details"]["request_id"].is_string(), "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
}
