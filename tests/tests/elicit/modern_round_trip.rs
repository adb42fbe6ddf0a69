//! End to end, route 3: the Python `mcp` 2.3 `mcp.Client` negotiating 2026-07-28 through
//! `server/discover` → real tc-shim → real server-filesystem, real tcd. The shim answers
//! a gated call with `input_required` and a daemon-sealed `requestState`; the client
//! re-sends it with the human's answer. Every case checks the client-visible outcome AND
//! the file on disk.

use tc_tests::shim as support;

use tc_tests::elicit;

use tc_tests::security as raw;

use std::time::Duration;

use elicit::*;
use serde_json::{json, Value};
use support::*;
use tc_proto::v1;

fn started(when: Option<&str>) -> (Env, Human) {
    let mut env = fs_vault("", when);
    env.start_tcd();
    std::fs::write(env.root.join("note.txt"), "v0").unwrap();
    let h = Human::python("modern", &env.shim_argv("fs"));
    assert_eq!(h.hello["era"], "modern", "{}", h.hello);
    assert_eq!(h.hello["protocolVersion"], "2026-07-28");
    (env, h)
}

fn write(content: &str) -> Value {
    json!({"path": "note.txt", "content": content})
}

/// One raw round: the result as the SDK parsed it.
fn round(h: &mut Human, args: Value, state: Option<&str>, answer: Option<Value>) -> Value {
    let tag = h.start_raw("write_file", args, state, answer);
    h.result(&tag)
}

/// Round 1 of a gated call: asserts the `input_required` shape; returns the state.
fn offer(h: &mut Human, args: Value) -> String {
    let r = round(h, args, None, None);
    assert_eq!(r["resultType"], "input_required", "{r}");
    let confirm = &r["inputRequests"]["confirm"];
    assert_eq!(confirm["method"], "elicitation/create", "{r}");
    assert_eq!(confirm["params"]["mode"], "form");
    assert_eq!(
        confirm["params"]["requestedSchema"]["properties"]["approve"]["type"],
        "boolean"
    );
    r["requestState"]
        .as_str()
        .expect("requestState")
        .to_string()
}

#[test]
fn modern_approve_decline_and_cancel_through_the_sdk_driver() {
    let (env, mut h) = started(None);
    // The SDK drives input_required itself: our callback is the human.
    let (prompt, r) = h.call_answering("write_file", write("v1"), approve());
    assert!(prompt["message"].as_str().unwrap().contains("`write_file`"));
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 1);

    let (_, r) = h.call_answering("write_file", write("v2"), json!({"action": "decline"}));
    assert_eq!(code(&r).as_deref(), Some("approval_declined"), "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));
    assert_eq!(events_of(&env, "tc.elicit.declined"), 1);

    let (_, r) = h.call_answering("write_file", write("v3"), json!({"action": "cancel"}));
    assert_eq!(code(&r).as_deref(), Some("approval_not_obtained"), "{r}");
    let cmd = sc(&r)["recovery"]["command"].as_str().unwrap();
    assert!(cmd.starts_with("tcctl elicit "), "{cmd}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));
    assert_eq!(events_of(&env, "tc.elicit.not_obtained"), 1);
    // One prompt per call, never a second one.
    assert!(h
        .drain_matching(Duration::from_millis(300), |v| v.get("prompt").is_some())
        .is_empty());
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 1);
}

#[test]
fn modern_captured_request_state_cannot_authorize_twice() {
    let (env, mut h) = started(None);
    let state = offer(&mut h, write("v1"));
    let r = round(&mut h, write("v1"), Some(&state), Some(approve()));
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(r["resultType"], "complete");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));
    // Someone resets the file, then replays the captured state with the same answer.
    std::fs::write(env.root.join("note.txt"), "reset").unwrap();
    let r = round(&mut h, write("v1"), Some(&state), Some(approve()));
    assert_eq!(code(&r).as_deref(), Some("invalid_input"), "{r}");
    assert_eq!(sc(&r)["details"]["reason"], "spent");
    assert_eq!(
        disk(&env, "note.txt").as_deref(),
        Some("reset"),
        "replay ran"
    );
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 1);
}

#[test]
fn modern_unverifiable_states_get_a_fresh_offer() {
    let (mut env, mut h) = started(None);
    set_ttl(&env, 2);
    // Restart tcd so the short TTL applies (its states are ephemeral: the old one is void).
    env.stop_tcd();
    env.start_tcd();
    let state = offer(&mut h, write("v1"));

    // Tampered: one character flipped.
    let mut t: Vec<char> = state.chars().collect();
    let i = t.len() / 2;
    t[i] = if t[i] == 'A' { 'B' } else { 'A' };
    let tampered: String = t.into_iter().collect();
    // Foreign: sealed for this very call by another daemon (another secret).
    let mut other = fs_vault("", None);
    other.start_tcd();
    let foreign = seal_elsewhere(&other, write("v1"));
    // Another call's state (other arguments).
    let other_call = offer(&mut h, write("other"));

    for (what, s) in [
        ("tampered", tampered.as_str()),
        ("garbage", "not-a-state"),
        ("foreign", foreign.as_str()),
        ("other call", other_call.as_str()),
    ] {
        let r = round(&mut h, write("v1"), Some(s), Some(approve()));
        assert_eq!(r["resultType"], "input_required", "{what}: {r}");
        assert_ne!(r["requestState"], s, "{what}: a fresh state is offered");
        assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"), "{what}");
    }
    // Expired.
    std::thread::sleep(Duration::from_millis(2200));
    let r = round(&mut h, write("v1"), Some(&state), Some(approve()));
    assert_eq!(r["resultType"], "input_required", "expired: {r}");
    assert_the_fresh_offer_writes(&env, &mut h, &r);
}

#[test]
fn modern_rotate_secret_voids_the_pending_state_and_offers_a_fresh_one() {
    let (env, mut h) = started(None);
    let state = offer(&mut h, write("v1"));
    assert_ok(&env.tcd.tcctl(&["rotate-secret"]));
    let r = round(&mut h, write("v1"), Some(&state), Some(approve()));
    assert_eq!(r["resultType"], "input_required", "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
    assert_the_fresh_offer_writes(&env, &mut h, &r);
}

/// The fresh state `offered` (an `input_required` answer) approved: note.txt is written.
#[track_caller]
fn assert_the_fresh_offer_writes(env: &Env, h: &mut Human, offered: &Value) {
    let fresh = offered["requestState"].as_str().unwrap().to_string();
    let r = round(h, write("v1"), Some(&fresh), Some(approve()));
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(env, "note.txt").as_deref(), Some("v1"));
}

#[test]
fn modern_drift_between_the_rounds_is_replay_drift() {
    let (env, mut h) = started(None);
    let state = offer(&mut h, write("v1"));
    std::fs::write(env.root.join("note.txt"), "changed meanwhile").unwrap();
    let r = round(&mut h, write("v1"), Some(&state), Some(approve()));
    assert_eq!(code(&r).as_deref(), Some("replay_drift"), "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("changed meanwhile"));
    // The drifted state is spent too.
    let r = round(&mut h, write("v1"), Some(&state), Some(approve()));
    assert_eq!(sc(&r)["details"]["reason"], "spent", "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("changed meanwhile"));
}

#[test]
fn modern_decline_stays_a_stop_when_the_gate_stopped_applying() {
    // Gated only when overwriting: the human is asked about an overwrite, the file is
    // removed while the prompt is open, then the human declines. The call must not
    // run as an (ungated) create.
    let (env, mut h) = started(Some(r#"{ exists = "path" }"#));
    let state = offer(&mut h, write("v1"));
    std::fs::remove_file(env.root.join("note.txt")).unwrap();
    let r = round(
        &mut h,
        write("v1"),
        Some(&state),
        Some(json!({"action": "decline"})),
    );
    assert_eq!(code(&r).as_deref(), Some("approval_declined"), "{r}");
    assert_eq!(disk(&env, "note.txt"), None, "the declined call ran");
    // Without a state the gate does not apply any more: a plain create goes through.
    let r = round(&mut h, write("v2"), None, None);
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v2"));
}

/// The same, from a raw client whose re-sent call carries the `requestState` and the
/// decline but has lost its `_meta` envelope: still the answer to the offer, still a
/// stop (it used to go out as a plain, ungated create).
#[test]
fn modern_decline_without_meta_stays_a_stop() {
    let mut env = fs_vault("", Some(r#"{ exists = "path" }"#));
    env.start_tcd();
    std::fs::write(env.root.join("note.txt"), "v0").unwrap();
    let mut shim = raw::Shim::start(&env.shim_argv("fs"), "warn", None);
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    });
    let d = shim.request(json!(1), "server/discover", json!({"_meta": meta}));
    assert!(d.get("result").is_some(), "{d}");
    let r = shim.request(
        json!(2),
        "tools/call",
        json!({
            "name": "write_file", "arguments": write("v1"), "_meta": meta,
        }),
    );
    let r = &r["result"];
    assert_eq!(r["resultType"], "input_required", "{r}");
    let state = r["requestState"]
        .as_str()
        .expect("requestState")
        .to_string();
    std::fs::remove_file(env.root.join("note.txt")).unwrap();
    let r = shim.request(
        json!(3),
        "tools/call",
        json!({
            "name": "write_file", "arguments": write("v1"),
            "requestState": state,
            "inputResponses": {"confirm": {"action": "decline"}},
        }),
    );
    let r = r.get("result").cloned().unwrap_or(r);
    assert_eq!(code(&r).as_deref(), Some("approval_declined"), "{r}");
    assert_eq!(disk(&env, "note.txt"), None, "the declined call ran");
}

/// A state sealed by another daemon for this env's binding of `write_file(args)`.
fn seal_elsewhere(other: &Env, args: Value) -> String {
    let binding = v1::Binding {
        vault: "fs".into(),
        tool: "write_file".into(),
        caller: "stdio".into(),
        args_hash: tc_core::hash::args_hash("write_file", &args),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut c = tc_proto::v1::confirm_client::ConfirmClient::new(
            tc_proto::connect(&other.socket).await.unwrap(),
        );
        c.seal_state(v1::SealStateRequest {
            binding: Some(binding),
            state_fp: "0".repeat(64),
            inner: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .request_state
    })
}

#[test]
fn modern_states_survive_a_restart_unless_the_daemon_is_ephemeral() {
    let (mut env, mut h) = started(None);
    // Persistent keying: a state offered before a restart still completes after it.
    let log = start_persistent_tcd(&mut env);
    let state = offer(&mut h, write("v1"));
    let log2 = start_persistent_tcd(&mut env);
    // One log per start: both starts were keyed from the secret file.
    assert_ne!(log, log2);
    for log in [log, log2] {
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.contains("elicit:") && text.contains("server-secrets"),
            "{text}"
        );
    }
    let r = round(&mut h, write("v1"), Some(&state), Some(approve()));
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));

    // Ephemeral keying: the restart voids it, and the client is offered a fresh one.
    env.stop_tcd();
    env.start_tcd();
    let state = offer(&mut h, write("v2"));
    env.stop_tcd();
    env.start_tcd();
    let r = round(&mut h, write("v2"), Some(&state), Some(approve()));
    assert_eq!(r["resultType"], "input_required", "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));
}
