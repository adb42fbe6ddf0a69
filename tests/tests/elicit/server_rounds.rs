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

use tc_tests::shim as support;

use tc_tests::elicit;

use std::time::Duration;

use elicit::*;
use serde_json::{json, Value};
use support::*;

/// The downstream's `inputRequests` key for `delete_file`'s question.
const REASON_KEY: &str = "__main__:ask_reason";
/// The downstream's `inputRequests` key for `write_note`'s question.
const TITLE_KEY: &str = "__main__:ask_title";

/// The vault: `delete_file` always gated on its path, `write_note` gated on its path when
/// it would overwrite (`when = { exists = "path" }`), `read_notes` paged over `paths`;
/// `head` goes before it in the config (e.g. a `[governor]` table), `extra` into it.
fn env_with(head: &str, extra: &str) -> Env {
    let python = peers().join("venv/bin/python").display().to_string();
    let server = fixture("mrtr_server.py").display().to_string();
    let vault = Vault::new("mr", &[&python, &server, "$ROOT"])
        .key(extra)
        .gate("delete_file", r#"{ paths = ["path"] }"#)
        .gate_overwrites("write_note");
    let paged = "\n[[vaults.paged]]\ntool = \"read_notes\"\nitems = \"paths\"\n";
    let mut env = Env::new(&format!("{head}{}{paged}", vault.toml()));
    env.start_tcd();
    std::fs::write(env.root.join("a.txt"), "v0").unwrap();
    env
}

/// [`env_with`] nothing more, and the Python SDK client in `era`.
fn started(era: &str, extra: &str) -> (Env, Human) {
    let env = env_with("", extra);
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

/// Starts `delete_file` of a.txt, whose first prompt must be our form (an `approve`
/// boolean); its tag.
#[track_caller]
fn delete_shows_our_form(h: &mut Human) -> String {
    let tag = h.start_call("delete_file", json!({"path": "a.txt"}));
    let ours = h.prompt();
    assert_eq!(
        ours["requestedSchema"]["properties"]["approve"]["type"], "boolean",
        "{ours}"
    );
    tag
}

/// The round that answers our form under `state` with an approval.
fn approved_round(h: &mut Human, tool: &str, args: &Value, state: &str) -> Value {
    round(
        h,
        tool,
        args,
        Some(state),
        Some(json!({"confirm": approve()})),
    )
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
    let tag = delete_shows_our_form(&mut h);
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
    let r2 = approved_round(&mut h, "delete_file", &args, &s1);
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
    let r6 = approved_round(&mut h, "delete_file", &args, &s2);
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
    let r4 = approved_round(&mut h, "write_note", &args, &s);
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
    let tag = delete_shows_our_form(&mut h);
    h.answer(approve());
    let theirs = h.prompt();
    assert_eq!(theirs["message"], "Why delete a.txt?", "{theirs}");
    h.answer(accept("reason", "old era"));
    let r = h.result(&tag);
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "a.txt"), None);
    assert_eq!(runs(&env), ["delete_file a.txt old era"]);
}

/// A state that does not verify, on a call whose gate does not apply, sends the call out
/// as if it had none (the downstream asks its question), instead of offering our form
/// for a call that needs no confirmation.
#[test]
fn an_unverifiable_state_on_an_ungated_call_is_dropped_not_answered_with_our_form() {
    let (env, mut h) = started("modern", "");
    let args = json!({"path": "n.txt", "content": "body"});
    let r = round(&mut h, "write_note", &args, Some("tc1.junk"), None);
    asks(&r, TITLE_KEY);
    assert_eq!(disk(&env, "n.txt"), None);
    assert_eq!(events_of(&env, "tc.elicit.requested"), 0);
}

/// A paged tool whose server asks a question of its own is refused: the question's state
/// would be bound to one page's items, not to the call the client sends back.
#[test]
fn a_paged_tool_that_asks_its_own_question_is_refused_clearly() {
    let (env, mut h) = started("modern", "");
    let r = round(
        &mut h,
        "read_notes",
        &json!({"paths": ["a.txt"]}),
        None,
        None,
    );
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(code(&r).as_deref(), Some("invalid_input"), "{r}");
    assert_eq!(sc(&r)["details"]["reason"], "paged_input_required", "{r}");
    assert!(runs(&env).is_empty(), "{:?}", runs(&env));
}

/// Our state is longer than the downstream's: the wrapped round is held to the response
/// cap like any result (an `overflow` refusal and its event), though the downstream's own
/// answer was under it.
#[test]
fn a_round_that_outgrows_the_cap_once_wrapped_is_refused_as_overflow() {
    let env = env_with("[governor]\nmax_response_bytes = 1200\n\n", "");
    let mut h = Human::python("modern", &env.shim_argv("mr"));
    let args = json!({"path": "n.txt", "content": "body"});
    let r = round(&mut h, "write_note", &args, None, None);
    assert_eq!(code(&r).as_deref(), Some("overflow"), "{r}");
    assert_eq!(sc(&r)["details"]["limit"], 1200, "{r}");
    assert_eq!(wait_events(&env.socket, "tc.governor.overflow", 1).len(), 1);
    assert_eq!(disk(&env, "n.txt"), None);
}

/// With tcd down, a downstream's question on a tool with a gate entry cannot be carried:
/// the call fails closed, and the message says what tc needed tcd for.
#[test]
fn with_tcd_down_the_downstreams_question_fails_closed_and_says_why() {
    let (mut env, mut h) = started("modern", "");
    env.stop_tcd();
    let args = json!({"path": "n.txt", "content": "body"});
    let r = round(&mut h, "write_note", &args, None, None);
    assert_eq!(code(&r).as_deref(), Some("confirmation_unavailable"), "{r}");
    let text = r["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("question of its own"), "{text}");
    assert!(text.contains("systemctl --user start tcd"), "{text}");
    assert_eq!(disk(&env, "n.txt"), None);
}

/// While a downstream's round is being sealed (tcd stopped with SIGSTOP, so the sealing
/// waits), the call's id stays in use, and a cancellation drops the round: the client
/// never gets an answer to a call it cancelled.
#[test]
fn a_round_cancelled_while_it_is_sealed_never_reaches_the_client() {
    let env = env_with("", "");
    let mut raw = RawClient::start(&env.shim_argv("mr"));
    let meta = json!({"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    }});
    let list = raw.request(json!(1), "tools/list", meta.clone());
    assert!(list["result"]["tools"].is_array(), "{list}");
    let tcd = nix::unistd::Pid::from_raw(env.tcd.pid() as i32);
    nix::sys::signal::kill(tcd, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let mut call = meta.clone();
    call["name"] = json!("write_note");
    call["arguments"] = json!({"path": "n.txt", "content": "body"});
    raw.send(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": call}));
    // The downstream asks (the gate does not apply: nothing waited on tcd before it).
    wait_until("the downstream asked", || disk(&env, ".asked.log"));
    std::thread::sleep(Duration::from_millis(500));
    raw.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 7, "reason": "test"}}),
    );
    let again = raw.request(json!(7), "tools/list", meta.clone());
    assert_eq!(again["error"]["code"], -32600, "{again}");
    nix::sys::signal::kill(tcd, nix::sys::signal::Signal::SIGCONT).unwrap();
    // Once the sealing ended the id is free again; nothing else came for id 7 meanwhile.
    let mut seen = Vec::new();
    loop {
        let r = raw.request(json!(7), "tools/list", meta.clone());
        assert!(
            r["result"].get("resultType") != Some(&json!("input_required")),
            "{r}"
        );
        if r.get("result").is_some() {
            break;
        }
        assert_eq!(r["error"]["code"], -32600, "{r}");
        seen.push(r);
        assert!(seen.len() < 200, "id 7 stayed in use");
        std::thread::sleep(Duration::from_millis(50));
    }
    raw.send(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": meta}));
    loop {
        let r = raw.recv();
        assert!(
            r["result"].get("resultType") != Some(&json!("input_required")),
            "{r}"
        );
        if r["id"] == 9 {
            break;
        }
    }
    assert_eq!(disk(&env, "n.txt"), None);
}
