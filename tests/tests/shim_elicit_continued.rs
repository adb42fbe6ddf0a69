//! End to end: a gated tool whose downstream asks the user a question of its own. The
//! downstream is built on the real Python `mcp` 2.3 server SDK (tests/fixtures/
//! mrtr_server.py: on 2026-07-28 its resolvers answer `input_required` with their own
//! key and sealed `requestState`; on 2025-11-25 they send `elicitation/create` mid-call),
//! the client is the Python `mcp.Client` with an elicitation capability, tc-shim and
//! tcd are the real binaries.
//!
//! The downstream's `requestState` reaches the client sealed inside ours, so the re-sent
//! call goes back to the downstream instead of being taken for an answer to our form;
//! that round is spent once and, once the call was approved, bound to the approved
//! target. Every case checks what the client got AND what the handler did on disk
//! (`.runs.log` has one line per completed handler run).

#[path = "shim_support.rs"]
mod support;

#[path = "elicit/support.rs"]
mod elicit;

use std::time::Duration;

use elicit::*;
use serde_json::{json, Value};
use support::*;

/// The downstream's `inputRequests` key for `delete_file`'s question.
const REASON_KEY: &str = "__main__:ask_reason";
/// The downstream's `inputRequests` key for `write_note`'s question.
const TITLE_KEY: &str = "__main__:ask_title";

/// The vault: `delete_file` always gated on its path, `write_note` gated on its path when
/// it would overwrite (`when = { exists = "path" }`).
fn started(era: &str, extra: &str) -> (Env, Human) {
    let python = peers().join("venv/bin/python").display().to_string();
    let server = fixture("mrtr_server.py").display().to_string();
    let vault = Vault::new("mr", &[&python, &server, "$ROOT"])
        .key(extra)
        .gate("delete_file", r#"{ paths = ["path"] }"#)
        .gate_when(
            "write_note",
            r#"{ exists = "path" }"#,
            r#"{ paths = ["path"] }"#,
        );
    let mut env = Env::new(vault.toml());
    env.start_tcd();
    std::fs::write(env.root.join("a.txt"), "v0").unwrap();
    let h = Human::python(era, &env.shim_argv("mr"));
    assert_eq!(h.hello["era"], era, "{}", h.hello);
    (env, h)
}

/// The handler runs the downstream completed, in order.
fn runs(env: &Env) -> Vec<String> {
    disk(env, ".runs.log")
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

fn accept(field: &str, value: &str) -> Value {
    json!({"action": "accept", "content": { field: value }})
}

/// One raw round; the result as the SDK parsed it.
fn round(
    h: &mut Human,
    tool: &str,
    args: &Value,
    state: Option<&str>,
    resp: Option<Value>,
) -> Value {
    let tag = h.start_round(tool, args.clone(), state, resp);
    h.result(&tag)
}

/// An `input_required` result asking exactly `key`; returns its requestState.
fn asks(r: &Value, key: &str) -> String {
    assert_eq!(r["resultType"], "input_required", "{r}");
    let keys: Vec<&String> = r["inputRequests"].as_object().unwrap().keys().collect();
    assert_eq!(keys, [key], "{r}");
    r["requestState"]
        .as_str()
        .expect("requestState")
        .to_string()
}

/// `tc.elicit.consumed` events' routes, in order.
fn consumed_routes(env: &Env) -> Vec<String> {
    all_events(&env.socket)
        .into_iter()
        .filter(|e| e.kind == "tc.elicit.consumed")
        .map(|e| {
            let d: Value = serde_json::from_str(&e.detail_json).unwrap();
            d["route"].as_str().unwrap_or_default().to_string()
        })
        .collect()
}

/// The SDK's own driver: our form first, then the downstream's question, then the
/// result. The file is deleted once, with the reason given to the downstream.
#[test]
fn an_approved_call_goes_on_to_the_downstreams_own_question() {
    let (env, mut h) = started("modern", "");
    let tag = h.start_call("delete_file", json!({"path": "a.txt"}));
    let ours = h.prompt();
    assert_eq!(
        ours["requestedSchema"]["properties"]["approve"]["type"], "boolean",
        "{ours}"
    );
    assert_eq!(disk(&env, "a.txt").as_deref(), Some("v0"));
    h.answer(approve());
    let theirs = h.prompt();
    assert_eq!(theirs["message"], "Why delete a.txt?", "{theirs}");
    assert_eq!(disk(&env, "a.txt").as_deref(), Some("v0"));
    h.answer(accept("reason", "cleanup"));
    let r = h.result(&tag);
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "a.txt"), None);
    assert_eq!(runs(&env), ["delete_file a.txt cleanup"]);
    let more = h.drain_matching(Duration::from_millis(500), |v| v.get("prompt").is_some());
    assert!(more.is_empty(), "prompted again: {more:?}");
    // The approved run, then the run that finished the downstream's round.
    let routes = wait_until("both runs recorded", || {
        let r = consumed_routes(&env);
        (r.len() >= 2).then_some(r)
    });
    assert_eq!(routes, ["request_state", "continuation"]);
}

/// Round by round: the downstream's round comes back under our state (not its own),
/// is refused as `replay_drift` when the target changed since the approval, and is
/// spent once when it runs.
#[test]
fn the_downstreams_round_is_bound_to_the_approved_target_and_spent_once() {
    let (env, mut h) = started("modern", "");
    let args = json!({"path": "a.txt"});
    let confirm = |r: &Value| asks(r, "confirm");
    let reason = || Some(json!({ REASON_KEY: accept("reason", "cleanup") }));

    // Approved, then the target changes before the downstream's question is answered.
    let s1 = confirm(&round(&mut h, "delete_file", &args, None, None));
    let r2 = round(
        &mut h,
        "delete_file",
        &args,
        Some(&s1),
        Some(json!({"confirm": approve()})),
    );
    let w1 = asks(&r2, REASON_KEY);
    assert!(
        w1.starts_with("tc1."),
        "the downstream's own state went out: {w1}"
    );
    std::fs::write(env.root.join("a.txt"), "v1").unwrap();
    let r3 = round(&mut h, "delete_file", &args, Some(&w1), reason());
    assert_eq!(code(&r3).as_deref(), Some("replay_drift"), "{r3}");
    assert_eq!(disk(&env, "a.txt").as_deref(), Some("v1"));
    // Spent by the refusal: the same round again is not a second chance.
    let r4 = round(&mut h, "delete_file", &args, Some(&w1), reason());
    assert_eq!(r4["isError"], true, "{r4}");
    assert_eq!(sc(&r4)["details"]["reason"], "spent", "{r4}");
    assert_eq!(disk(&env, "a.txt").as_deref(), Some("v1"));
    assert!(runs(&env).is_empty(), "{:?}", runs(&env));

    // A fresh approval of the changed file: its round runs once.
    let s2 = confirm(&round(&mut h, "delete_file", &args, None, None));
    let r6 = round(
        &mut h,
        "delete_file",
        &args,
        Some(&s2),
        Some(json!({"confirm": approve()})),
    );
    let w2 = asks(&r6, REASON_KEY);
    let r7 = round(&mut h, "delete_file", &args, Some(&w2), reason());
    assert_eq!(r7["resultType"], "complete", "{r7}");
    assert_ne!(r7["isError"], true, "{r7}");
    assert_eq!(disk(&env, "a.txt"), None);
    // Replayed against a file of the same content: refused, nothing deleted.
    std::fs::write(env.root.join("a.txt"), "v1").unwrap();
    let r8 = round(&mut h, "delete_file", &args, Some(&w2), reason());
    assert_eq!(sc(&r8)["details"]["reason"], "spent", "{r8}");
    assert_eq!(disk(&env, "a.txt").as_deref(), Some("v1"));
    assert_eq!(runs(&env), ["delete_file a.txt cleanup"]);
}

/// A tool with a gate entry whose condition does not hold goes out unconfirmed, and its
/// downstream's question is the only prompt: the re-sent call is not taken for an
/// answer to a form we never showed.
#[test]
fn an_unconfirmed_call_goes_on_to_the_downstreams_question_without_our_form() {
    let (env, mut h) = started("modern", "");
    let tag = h.start_call("write_note", json!({"path": "n.txt", "content": "body"}));
    let p = h.prompt();
    assert_eq!(p["message"], "Title for n.txt?", "{p}");
    h.answer(accept("title", "T"));
    let r = h.result(&tag);
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "n.txt").as_deref(), Some("T\nbody"));
    let more = h.drain_matching(Duration::from_millis(500), |v| v.get("prompt").is_some());
    assert!(more.is_empty(), "prompted again: {more:?}");
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 0);
}

/// The gate's condition starts to hold between the downstream's rounds (the note now
/// exists, so the write would overwrite it): the round does not go on unconfirmed; our
/// form comes first, then the downstream asks again.
#[test]
fn a_gate_that_starts_to_apply_between_rounds_asks_for_confirmation_first() {
    let (env, mut h) = started("modern", "");
    let args = json!({"path": "n.txt", "content": "body"});
    let title = |t: &str| Some(json!({ TITLE_KEY: accept("title", t) }));
    let w1 = asks(&round(&mut h, "write_note", &args, None, None), TITLE_KEY);
    std::fs::write(env.root.join("n.txt"), "old").unwrap();
    let r2 = round(&mut h, "write_note", &args, Some(&w1), title("T1"));
    let s = asks(&r2, "confirm");
    assert_eq!(disk(&env, "n.txt").as_deref(), Some("old"));
    assert!(runs(&env).is_empty(), "{:?}", runs(&env));
    // Spent: the unconfirmed round cannot be sent again to slip past the form.
    let r3 = round(&mut h, "write_note", &args, Some(&w1), title("T1"));
    assert_eq!(sc(&r3)["details"]["reason"], "spent", "{r3}");
    assert_eq!(disk(&env, "n.txt").as_deref(), Some("old"));
    // Approved: the downstream asks again, and the answer writes once.
    let r4 = round(
        &mut h,
        "write_note",
        &args,
        Some(&s),
        Some(json!({"confirm": approve()})),
    );
    let w2 = asks(&r4, TITLE_KEY);
    let r5 = round(&mut h, "write_note", &args, Some(&w2), title("T2"));
    assert_ne!(r5["isError"], true, "{r5}");
    assert_eq!(disk(&env, "n.txt").as_deref(), Some("T2\nbody"));
    assert_eq!(runs(&env), ["write_note n.txt T2"]);
}

/// Legacy era (2025-11-25, the shim's own prompt opted in): after our prompt the
/// downstream's `elicitation/create` reaches the client mid-call, and its answer gets
/// back to the downstream.
#[test]
fn legacy_era_the_downstreams_question_follows_our_prompt() {
    let (env, mut h) = started("legacy", "legacy_elicitation_shim = true");
    let tag = h.start_call("delete_file", json!({"path": "a.txt"}));
    let ours = h.prompt();
    assert_eq!(
        ours["requestedSchema"]["properties"]["approve"]["type"], "boolean",
        "{ours}"
    );
    h.answer(approve());
    let theirs = h.prompt();
    assert_eq!(theirs["message"], "Why delete a.txt?", "{theirs}");
    h.answer(accept("reason", "old era"));
    let r = h.result(&tag);
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "a.txt"), None);
    assert_eq!(runs(&env), ["delete_file a.txt old era"]);
}
