//! Faults around a real tc-shim: the daemon `kill -9`ed mid-session (a token minted before
//! the crash survives it and authorizes exactly once after the shim reconnects), and the
//! downstream MCP server dying in the middle of a forwarded gated call (the token stays
//! spent). `shim_filesystem_daemon_down_fails_closed_then_reconnects` already covers a
//! daemon that is absent from the start or stopped cleanly; this adds the crash.
//!
//! Downstream: `slow_server.py` (stdlib Python), whose `shred` can be held open by the test.

use tc_tests::shim as support;

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use support::*;

/// The slow fixture server as vault `slow`, `shred` always gated, with an `items/` dir
/// (also the scene of `disk.rs`).
pub(super) fn slow_env() -> Env {
    let env = Env::with(&Vault::fixture("slow", "slow_server.py").gate("shred", "\"none\""));
    std::fs::create_dir_all(env.root.join("items")).unwrap();
    env
}

/// `items/<name>` written, a raw client on the shim whose `shred` of it was refused with
/// `elicit_required`, and the token minted for that call: the client, the call's
/// arguments and the token.
#[track_caller]
pub(super) fn shred_approved(env: &Env, name: &str) -> (RawClient, Value, String) {
    std::fs::write(env.root.join("items").join(name), "precious").unwrap();
    let mut c = RawClient::start(&env.shim_argv("slow"));
    c.initialize();
    let args = json!({ "name": name });
    let r = c.call_tool(1, "shred", args.clone());
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
    let token = mint(&env.socket, &r);
    (c, args, token)
}

/// How many `tools/call`s of `tool` reached the downstream (its own log).
pub(super) fn calls_of(root: &Path, tool: &str) -> usize {
    std::fs::read_to_string(root.join("calls.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter(|l| serde_json::from_str::<Value>(l).unwrap()["call"] == tool)
        .count()
}

fn kill9_tcd(env: &mut Env) {
    env.tcd.kill9();
}

/// The pid of the (only) child process of `parent`.
fn child_of(parent: u32) -> Option<i32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // Fields after the parenthesised command name: state, ppid, ...
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        if rest.split_whitespace().nth(1) == Some(&parent.to_string()) {
            return Some(pid);
        }
    }
    None
}

#[test]
fn faults_shim_daemon_killed_mid_session_fails_closed_then_the_token_survives() {
    let mut env = slow_env();
    env.start_tcd_keyed();
    let (mut c, args, token) = shred_approved(&env, "a");

    kill9_tcd(&mut env);
    // Ungated calls keep working without a daemon.
    let r = c.call_tool(2, "peek", args.clone());
    assert_eq!(code(&r), None, "{r}");
    assert_eq!(r["content"][0]["text"], "a: precious", "{r}");
    // The gated one fails closed, saying what to do, and nothing reaches the server.
    for id in [3, 4] {
        let r = c.call_tool(id, "shred", with_token(&args, &token));
        assert_eq!(code(&r).as_deref(), Some("confirmation_unavailable"), "{r}");
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains(&env.socket.display().to_string())
                && text.contains("systemctl --user start tcd")
                && text.contains("NOT run"),
            "{text}"
        );
    }
    let r = c.call_tool(5, "shred", json!({"name": "other"}));
    assert_eq!(code(&r).as_deref(), Some("confirmation_unavailable"), "{r}");
    assert_eq!(calls_of(&env.root, "shred"), 0);
    assert!(env.root.join("items/a").exists());

    // The daemon comes back on the same cache dir: the same shim reconnects by itself and
    // the token minted before the crash authorizes the call, once.
    env.start_tcd_keyed();
    let r = c.call_tool(6, "shred", with_token(&args, &token));
    assert_eq!(code(&r), None, "{r}");
    assert_eq!(r["content"][0]["text"], "shredded a", "{r}");
    assert_eq!(calls_of(&env.root, "shred"), 1);
    wait_until("the consumed event", || {
        (count(&event_kinds(&env.socket), "tc.elicit.consumed") == 1).then_some(())
    });
    // It ran and answered: one outcome, `executed`.
    let o = wait_outcomes(&env.socket, 1);
    assert_eq!(o, [("executed".to_string(), "cli_token".to_string())]);

    // Crash again: the spend is durable, the token does not come back.
    kill9_tcd(&mut env);
    env.start_tcd_keyed();
    std::fs::write(env.root.join("items/a"), "again").unwrap();
    let r = c.call_tool(7, "shred", with_token(&args, &token));
    assert_eq!(code(&r).as_deref(), Some("invalid_input"), "{r}");
    assert_eq!(sc(&r)["details"]["reason"], "spent", "{r}");
    assert_eq!(calls_of(&env.root, "shred"), 1);
    assert!(env.root.join("items/a").exists());
    let kinds = event_kinds(&env.socket);
    assert_eq!(count(&kinds, "tc.elicit.redeemed"), 1, "{kinds:?}");
    assert_eq!(count(&kinds, "hitl_released"), 0, "{kinds:?}");
}

#[test]
fn faults_shim_downstream_crash_mid_gated_call_keeps_the_token_spent() {
    let mut env = slow_env();
    env.start_tcd();
    let (mut c, args, token) = shred_approved(&env, "b");

    // The approved call reaches the server, which holds it; then the server dies.
    std::fs::write(env.root.join("hold-shred"), "").unwrap();
    c.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "shred", "arguments": with_token(&args, &token)}}));
    wait_until("the call to reach the server", || {
        (calls_of(&env.root, "shred") == 1).then_some(())
    });
    let server = child_of(c.child.id()).expect("the downstream process");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let r = c.recv();
    assert_eq!(r["id"], 2, "{r}");
    assert_eq!(r["error"]["code"], -32603, "{r}");
    assert_text_at(&r, "/error/message", "exited before answering");
    let st = tc_tests::wait_timeout(&mut c.child, Duration::from_secs(10))
        .expect("the shim exits with its server");
    assert!(!st.success(), "{st}");
    std::fs::remove_file(env.root.join("hold-shred")).unwrap();
    assert!(env.root.join("items/b").exists(), "the server died first");

    // Forwarded means it may have run: spent, recorded as consumed, never released.
    let kinds = wait_until("the consumed event", || {
        let k = event_kinds(&env.socket);
        (count(&k, "tc.elicit.consumed") == 1).then_some(k)
    });
    assert_eq!(count(&kinds, "hitl_released"), 0, "{kinds:?}");
    // Sent, its answer lost: `unknown`, and never sent again.
    let o = wait_outcomes(&env.socket, 1);
    assert_eq!(o, [("unknown".to_string(), "cli_token".to_string())]);

    // The editor restarts the shim (and so the server): the token is refused as spent.
    let mut c = RawClient::start(&env.shim_argv("slow"));
    c.initialize();
    let r = c.call_tool(3, "shred", with_token(&args, &token));
    assert_eq!(code(&r).as_deref(), Some("invalid_input"), "{r}");
    assert_eq!(sc(&r)["details"]["reason"], "spent", "{r}");
    assert_eq!(calls_of(&env.root, "shred"), 1, "not forwarded again");
    assert!(env.root.join("items/b").exists());
    // A fresh confirmation is the way forward.
    let r = c.call_tool(4, "shred", args);
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
}
