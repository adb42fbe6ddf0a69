//! End to end, route 2: a legacy-era (2025-11-25) Python `mcp` client with an
//! elicitation capability → real tc-shim (vault `legacy_elicitation_shim = true`) → real
//! server-filesystem, real tcd. The shim prompts with `elicitation/create` itself; every
//! case checks the answer the client sees AND the file on disk (what the server did).

use tc_tests::shim as support;

use tc_tests::elicit;

use std::time::Duration;

use elicit::*;
use serde_json::json;
use support::*;

fn started(opt_in: bool) -> (Env, Human) {
    let extra = if opt_in {
        "legacy_elicitation_shim = true"
    } else {
        ""
    };
    let env = fs_vault(extra, None);
    let (env, h) = legacy_started(env);
    assert_eq!(h.hello["era"], "legacy");
    (env, h)
}

fn write_v1() -> serde_json::Value {
    json!({"path": "note.txt", "content": "v1"})
}

#[test]
fn legacy_accept_with_approve_runs_the_call_once() {
    let (env, mut h) = started(true);
    let (prompt, r) = h.call_answering("write_file", write_v1(), approve());
    // The prompt says what will happen and asks for one boolean, form mode (2025-11-25).
    let msg = prompt["message"].as_str().unwrap();
    assert!(
        msg.contains("`write_file`") && msg.contains("`fs`"),
        "{msg}"
    );
    assert!(msg.contains("note.txt") && msg.contains("`path`"), "{msg}");
    assert_eq!(prompt["mode"], "form");
    assert_eq!(
        prompt["requestedSchema"]["properties"]["approve"]["type"],
        "boolean"
    );
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));
    assert_eq!(events_of(&env, "tc.elicit.requested"), 1);
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 1);
    // Exactly one prompt for the one call.
    assert!(h
        .drain_matching(Duration::from_millis(300), |v| v.get("prompt").is_some())
        .is_empty());
    // An ungated call never prompts.
    let r = h.call("read_text_file", json!({"path": "note.txt"}));
    assert_eq!(r["content"][0]["text"], "v1");
}

#[test]
fn legacy_decline_and_approve_false_are_a_hard_stop() {
    let (env, mut h) = started(true);
    for answer in [
        json!({"action": "decline"}),
        json!({"action": "accept", "content": {"approve": false}}),
    ] {
        let (_, r) = h.call_answering("write_file", write_v1(), answer.clone());
        assert_eq!(
            code(&r).as_deref(),
            Some("approval_declined"),
            "{answer}: {r}"
        );
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains("DECLINED") && text.contains("Do not retry"),
            "{text}"
        );
        assert!(sc(&r).get("recovery").is_none());
        assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"), "{answer}");
    }
    assert_eq!(events_of(&env, "tc.elicit.declined"), 2);
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 0);
}

#[test]
fn legacy_cancel_is_not_obtained_and_points_at_tcctl_elicit() {
    let (env, mut h) = started(true);
    let (_, r) = h.call_answering("write_file", write_v1(), json!({"action": "cancel"}));
    assert_eq!(code(&r).as_deref(), Some("approval_not_obtained"), "{r}");
    let cmd = sc(&r)["recovery"]["command"].as_str().unwrap().to_string();
    assert!(cmd.starts_with("tcctl elicit --hash "), "{cmd}");
    assert!(r["content"][0]["text"].as_str().unwrap().contains(&cmd));
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
    assert_eq!(events_of(&env, "tc.elicit.not_obtained"), 1);

    // The out-of-band route the refusal names works: the operator mints, the agent
    // re-sends with the token, no prompt this time.
    let token = mint(&env.socket, &r);
    let mut args = write_v1();
    args["elicit_token"] = json!(token);
    let r = h.call("write_file", args);
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));
}

#[test]
fn legacy_drift_while_the_prompt_is_open_is_replay_drift() {
    let (env, mut h) = started(true);
    let tag = h.start_call("write_file", write_v1());
    h.prompt();
    // The human reads the prompt; meanwhile the target changes.
    std::fs::write(env.root.join("note.txt"), "changed meanwhile").unwrap();
    h.answer(approve());
    let r = h.result(&tag);
    assert_eq!(code(&r).as_deref(), Some("replay_drift"), "{r}");
    assert_eq!(
        disk(&env, "note.txt").as_deref(),
        Some("changed meanwhile"),
        "nothing may be written on drift"
    );
    assert_eq!(events_of(&env, "replay_drift"), 1);
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 0);
}

#[test]
fn legacy_cancellation_while_the_prompt_is_open_withdraws_it() {
    let (env, mut h) = started(true);
    let tag = h.start_call("write_file", write_v1());
    h.prompt();
    h.hang();
    h.cancel(&tag);
    // The shim withdraws its prompt (notifications/cancelled), and the call ends cancelled.
    let o = h.outcome(&tag);
    assert_eq!(o["cancelled"], true, "{o}");
    let withdrawn = h.drain_matching(Duration::from_secs(5), |v| {
        v.get("prompt_cancelled").is_some()
    });
    assert_eq!(withdrawn.len(), 1, "the prompt was not withdrawn");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
    // The shim is still serving, and logged why nothing was approved.
    let r = h.call("read_text_file", json!({"path": "note.txt"}));
    assert_eq!(r["content"][0]["text"], "v0");
    assert_eq!(events_of(&env, "tc.elicit.not_obtained"), 1);
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 0);
}

#[test]
fn legacy_prompt_times_out_after_the_ttl() {
    let env = fs_vault("legacy_elicitation_shim = true", None);
    set_ttl(&env, 2);
    let (env, mut h) = legacy_started(env);
    let tag = h.start_call("write_file", write_v1());
    h.prompt();
    h.hang();
    let r = h.result(&tag);
    assert_eq!(code(&r).as_deref(), Some("approval_not_obtained"), "{r}");
    assert!(sc(&r)["details"]["why"]
        .as_str()
        .unwrap()
        .contains("expired"));
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
}

#[test]
fn legacy_without_the_opt_in_uses_the_cli_route() {
    let (env, mut h) = started(false);
    let r = h.call("write_file", write_v1());
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
}

#[test]
fn typescript_sdk_with_bare_elicitation_capability_gets_the_form() {
    let mut env = fs_vault("legacy_elicitation_shim = true", None);
    env.start_tcd();
    std::fs::write(env.root.join("note.txt"), "v0").unwrap();
    let mut h = Human::typescript(&env.shim_argv("fs"));
    let (prompt, r) = h.call_answering("write_file", write_v1(), approve());
    assert_eq!(
        prompt["requestedSchema"]["properties"]["approve"]["type"],
        "boolean"
    );
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));
    let (_, r) = h.call_answering(
        "write_file",
        json!({"path": "note.txt", "content": "v2"}),
        json!({"action": "decline"}),
    );
    assert_eq!(code(&r).as_deref(), Some("approval_declined"), "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));
}

#[test]
fn each_call_that_waited_on_the_human_ends_in_one_recorded_outcome() {
    let (env, mut h) = started(true);
    // Approved and run: executed.
    let (_, r) = h.call_answering("write_file", write_v1(), approve());
    assert_ne!(r["isError"], true, "{r}");
    // Declined: denied, nothing run.
    let v2 = json!({"path": "note.txt", "content": "v2"});
    let (_, r) = h.call_answering("write_file", v2, json!({"action": "decline"}));
    assert_eq!(code(&r).as_deref(), Some("approval_declined"), "{r}");
    // Approved, and the server fails it (no such folder): errored.
    let nowhere = json!({"path": "no/such/dir/x.txt", "content": "x"});
    let (_, r) = h.call_answering("write_file", nowhere, approve());
    assert_eq!(r["isError"], true, "{r}");
    let route = "legacy_elicitation".to_string();
    let want = [
        ("executed".to_string(), route.clone()),
        ("denied".to_string(), "declined".to_string()),
        ("errored".to_string(), route),
    ];
    assert_eq!(wait_outcomes(&env.socket, 3), want);
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));
    // An ungated call waited on nobody: no outcome.
    h.call("read_text_file", json!({"path": "note.txt"}));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(outcomes(&env.socket).len(), 3);
}
