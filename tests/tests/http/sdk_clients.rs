//! End to end, real SDK clients over Streamable HTTP: Python `mcp` 2.3 (`auto`, which
//! lands on 2026-07-28, and `legacy`), the TypeScript SDK 1.32.2 (legacy) and
//! `@modelcontextprotocol/client` 2.4 (pinned 2026-07-28) → real `tc-shim serve --http`
//! → real server-filesystem / server-everything over stdio, real tcd. The gate, the CLI
//! route, the modern round trip (accept and decline), the governor, drift and a client
//! that hangs up mid-call; every gated case checks the file on disk.

use tc_tests::shim as support;

use tc_tests::elicit;

use tc_tests::http;

use tc_tests::sdk_clients as clients;

use clients::*;
use elicit::{disk, fs_vault};
use http::Front;
use serde_json::{json, Value};
use support::*;

fn started(env: Env, vault: &str) -> (Env, Front) {
    let mut env = env;
    env.start_tcd();
    let front = Front::start(&env, vault);
    (env, front)
}

fn accept() -> Value {
    json!({"action": "accept", "content": {"approve": true}})
}

/// The tools list, an ungated call, then the gated one (a prompt would be declined).
fn first_contact(c: Client, url: &str, file: &str) -> (Run, Value) {
    let args = json!({"path": file, "content": format!("by {c:?}")});
    let r = run(
        c,
        url,
        json!([
            list(),
            call("list_allowed_directories", json!({})),
            call("write_file", args)
        ]),
    );
    let tools = &r.ok(0)["tools"];
    assert!(
        tools.as_array().unwrap().iter().any(|t| t == "write_file"),
        "{c:?}: {tools}"
    );
    let listed = r.result(1);
    assert_ne!(listed["isError"], true, "{c:?}: {listed}");
    (r, args_of(file, c))
}

fn args_of(file: &str, c: Client) -> Value {
    json!({"path": file, "content": format!("by {c:?}")})
}

#[test]
fn legacy_clients_get_elicit_required_and_the_cli_route_runs_the_call() {
    let (env, front) = started(fs_vault("", None), "fs");
    for (c, file) in [(Client::PyLegacy, "py.txt"), (Client::Ts1, "ts.txt")] {
        let (r, args) = first_contact(c, &front.url(), file);
        assert_eq!(r.connected["protocolVersion"], "2025-11-25", "{c:?}");
        let refusal = r.result(2);
        // No server-initiated elicitation on HTTP: the CLI route, bound to http-local.
        assert!(r.steps[2].get("prompts").is_none(), "{c:?}: {}", r.steps[2]);
        assert_elicit_required(refusal, "write_file", "fs", &args);
        assert_eq!(sc(refusal)["details"]["caller"], "http-local", "{refusal}");
        assert_eq!(
            disk(&env, file),
            None,
            "{c:?}: the gated call ran unapproved"
        );

        let token = tcctl_elicit(&env, refusal);
        // A new connection (a new session) of the same caller redeems it.
        let r = run(
            c,
            &front.url(),
            json!([call("write_file", with_token(&args, &token))]),
        );
        assert_eq!(code(r.result(0)), None, "{c:?}: {}", r.steps[0]);
        assert_eq!(disk(&env, file), Some(format!("by {c:?}")), "{c:?}");
    }
}

#[test]
fn modern_clients_run_the_round_trip_accepted_and_declined() {
    let (env, front) = started(fs_vault("", None), "fs");
    for (c, yes, no) in [
        (Client::PyAuto, "py-yes.txt", "py-no.txt"),
        (Client::Ts2, "ts-yes.txt", "ts-no.txt"),
    ] {
        let (r, _) = first_contact(c, &front.url(), "never.txt");
        assert_eq!(r.connected["protocolVersion"], "2026-07-28", "{c:?}");
        // The plan gave no answer: the SDK's prompt was declined, nothing written.
        assert_eq!(
            r.steps[2]["prompts"].as_array().map(Vec::len),
            Some(1),
            "{c:?}"
        );
        assert_eq!(
            code(r.result(2)).as_deref(),
            Some("approval_declined"),
            "{c:?}"
        );
        assert_eq!(disk(&env, "never.txt"), None, "{c:?}");

        let r = run(
            c,
            &front.url(),
            json!([
                call_answering("write_file", args_of(yes, c), accept()),
                call_answering("write_file", args_of(no, c), json!({"action": "decline"})),
            ]),
        );
        let prompt = &r.ok(0)["prompts"][0];
        assert!(
            prompt["message"]
                .as_str()
                .unwrap_or("")
                .contains("write_file"),
            "{c:?}: {prompt}"
        );
        assert_eq!(code(r.result(0)), None, "{c:?}: {}", r.steps[0]);
        assert_eq!(disk(&env, yes), Some(format!("by {c:?}")), "{c:?}");
        assert_eq!(
            code(r.result(1)).as_deref(),
            Some("approval_declined"),
            "{c:?}"
        );
        assert_eq!(disk(&env, no), None, "{c:?}: the declined call ran");
    }
}

/// A vault on server-filesystem with a small response cap.
fn governed_env() -> Env {
    Env::new(&Vault::filesystem("fs").governed(32768))
}

#[test]
fn the_governor_refuses_an_oversized_answer_in_both_eras() {
    let (env, front) = started(governed_env(), "fs");
    std::fs::write(env.root.join("big.txt"), "0123456789\n".repeat(10_000)).unwrap();
    std::fs::write(env.root.join("small.txt"), "small\n").unwrap();
    for c in [Client::Ts1, Client::PyAuto] {
        let r = run(
            c,
            &front.url(),
            json!([
                call("read_text_file", json!({"path": "big.txt"})),
                call("read_text_file", json!({"path": "small.txt"})),
            ]),
        );
        let big = r.result(0);
        assert_eq!(code(big).as_deref(), Some("overflow"), "{c:?}: {big}");
        assert_eq!(sc(big)["details"]["limit"], 32768, "{c:?}: {big}");
        assert!(
            !big.to_string().contains("0123456789"),
            "{c:?}: the big file leaked"
        );
        // The conversation is still in step: the next answer is the right one.
        let small = r.result(1);
        assert!(small["content"][0]["text"] == "small\n", "{c:?}: {small}");
    }
    let evs = wait_events(&env.socket, "tc.governor.overflow", 2);
    assert_eq!(evs.len(), 2);
    assert!(evs.iter().all(|e| e.caller == "http-local"), "{evs:?}");
}

#[test]
fn a_target_changed_after_approval_is_replay_drift_and_nothing_is_written() {
    let (env, front) = started(fs_vault("", None), "fs");
    std::fs::write(env.root.join("target.txt"), "v1").unwrap();
    let args = json!({"path": "target.txt", "content": "v2"});
    let r = run(
        Client::PyLegacy,
        &front.url(),
        json!([call("write_file", args.clone())]),
    );
    let token = tcctl_elicit(&env, r.result(0));
    std::fs::write(env.root.join("target.txt"), "changed under the approval").unwrap();
    let r = run(
        Client::Ts1,
        &front.url(),
        json!([call("write_file", with_token(&args, &token))]),
    );
    assert_eq!(
        code(r.result(0)).as_deref(),
        Some("replay_drift"),
        "{}",
        r.steps[0]
    );
    assert_eq!(
        disk(&env, "target.txt").as_deref(),
        Some("changed under the approval")
    );
}

/// server-everything over stdio, its input teed to `log` so the test sees what tc sent.
fn teed_everything(log: &std::path::Path) -> Env {
    let script = format!(
        "tee -a {:?} | exec node {:?} stdio",
        log.display().to_string(),
        everything_server().display().to_string()
    );
    Env::new(&format!(
        "[[vaults]]\nid = \"se\"\nroot = \"$ROOT\"\ncommand = [\"sh\", \"-c\", {script:?}]\n"
    ))
}

/// The downstream's input lines, parsed.
fn sent(log: &std::path::Path) -> Vec<Value> {
    json_lines(log).into_iter().filter_map(Result::ok).collect()
}

#[test]
fn a_client_that_hangs_up_mid_call_has_its_call_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("downstream-in.jsonl");
    let (_env, front) = started(teed_everything(&log), "se");
    let slow = json!({"duration": 60, "steps": 60});
    for c in [Client::PyLegacy, Client::Ts2] {
        let before = sent(&log).len();
        let mut d = Driver::start(
            c,
            &front.url(),
            json!([call("trigger-long-running-operation", slow.clone())]),
        );
        let hello = d.next().expect("connected");
        assert_eq!(hello["connected"], true, "{c:?}: {hello}");
        let id = wait_until("the call to reach the downstream", || {
            sent(&log)[before..]
                .iter()
                .find(|m| m["method"] == "tools/call")
                .map(|m| m["id"].clone())
        });
        d.kill();
        let cancelled = wait_until("tc to cancel the call downstream", || {
            sent(&log)[before..]
                .iter()
                .find(|m| m["method"] == "notifications/cancelled")
                .cloned()
        });
        assert_eq!(cancelled["params"]["requestId"], id, "{c:?}: {cancelled}");
    }
}
