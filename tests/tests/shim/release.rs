//! End to end, real tc-shim + real tcd, approvals through the real `tcctl elicit`: when a
//! redeemed token is released (nothing ran: a cancellation before forwarding, an ACL
//! refusal) and when it stays spent (a cancellation after forwarding).
//!
//! The cancellations come from the Python `mcp` SDK itself (`cancel_client.py` abandons
//! the call, the SDK sends `notifications/cancelled`). The downstream is
//! `slow_server.py`, whose probe tool and destructive tool the test can hold open, so the
//! cancellation lands exactly before or after the shim forwards the call.

use tc_tests::shim as support;

use std::path::Path;

use serde_json::{json, Value};
use support::*;

fn slow_env() -> Env {
    Env::with(&Vault::fixture("slow", "slow_server.py").gate(
        "shred",
        r#"{ probe = { tool = "peek", arguments = { name = "$name" } } }"#,
    ))
}

/// tcd and a cancelling SDK client on the shim, `items/<name>` written, its `shred`
/// refused with `elicit_required` and approved with the exact `tcctl elicit` line: the
/// env, the client, the call's arguments and the token.
#[track_caller]
fn shred_approved(name: &str) -> (Env, PyClient, Value, String) {
    let mut env = slow_env();
    env.start_tcd();
    std::fs::create_dir_all(env.root.join("items")).unwrap();
    std::fs::write(env.root.join("items").join(name), "precious").unwrap();
    let mut c = PyClient::start_cancel(&env.shim_argv("slow"));
    let args = json!({ "name": name });
    let r = c.call("shred", args.clone());
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
    let token = tcctl_elicit(&env, &r);
    (env, c, args, token)
}

/// Starts the approved `shred` (tagged `tag`, with `token`) while the server holds
/// `held` (its probe `peek`, or `shred` itself) open.
fn start_held(c: &mut PyClient, root: &Path, held: &str, (tag, args, token): (&str, &Value, &str)) {
    std::fs::write(root.join(format!("hold-{held}")), "").unwrap();
    c.start_call(tag, "shred", with_token(args, token));
}

/// Every line `slow_server.py` recorded (tools/call and notifications/cancelled it received).
fn received(root: &Path) -> Vec<Value> {
    std::fs::read_to_string(root.join("calls.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn calls_of(root: &Path, tool: &str) -> Vec<Value> {
    received(root)
        .into_iter()
        .filter(|r| r["call"] == tool)
        .collect()
}

/// Waits until an event of `kind` has been logged `n` times; returns all kinds.
fn wait_events(env: &Env, kind: &str, n: usize) -> Vec<String> {
    wait_until(&format!("{n} {kind} event(s)"), || {
        let kinds = event_kinds(&env.socket);
        (count(&kinds, kind) >= n).then_some(kinds)
    })
}

#[test]
fn shim_release_cancel_before_forwarding_releases_the_token() {
    let (env, mut c, args, token) = shred_approved("x");
    let root = env.root.clone();

    // The shim holds the approved call while its probe runs (held open here), so the
    // SDK's cancellation arrives before anything is forwarded.
    start_held(&mut c, &root, "peek", ("a", &args, &token));
    wait_until("the second probe to reach the server", || {
        (calls_of(&root, "peek").len() == 2).then_some(())
    });
    let gave_up = c.cancel("a");
    assert_eq!(gave_up["answered"], false, "{gave_up}");
    assert_eq!(gave_up["error"], Value::Null, "{gave_up}");
    // The SDK writes in order: once this answer is back, the shim has read the cancel.
    c.list();
    std::fs::remove_file(root.join("hold-peek")).unwrap();

    let kinds = wait_events(&env, "hitl_released", 1);
    assert_eq!(count(&kinds, "tc.elicit.consumed"), 0, "{kinds:?}");
    assert!(
        calls_of(&root, "shred").is_empty(),
        "a call cancelled before forwarding must not reach the server: {:?}",
        received(&root)
    );
    assert_eq!(
        std::fs::read_to_string(root.join("items/x")).unwrap(),
        "precious"
    );

    // Released, not spent: the same token runs the same call, once.
    let r = c.call("shred", with_token(&args, &token));
    assert_eq!(code(&r), None, "{r}");
    assert_eq!(r["content"][0]["text"], "shredded x", "{r}");
    assert!(!root.join("items/x").exists());
    assert_eq!(calls_of(&root, "shred").len(), 1, "{:?}", received(&root));
    let kinds = wait_events(&env, "tc.elicit.consumed", 1);
    assert_eq!(count(&kinds, "tc.elicit.consumed"), 1, "{kinds:?}");
    assert_eq!(count(&kinds, "hitl_released"), 1, "{kinds:?}");
    std::fs::write(root.join("items/x"), "again").unwrap();
    let r = c.call("shred", with_token(&args, &token));
    assert_eq!(sc(&r)["details"]["reason"], "spent", "{r}");
    assert_eq!(calls_of(&root, "shred").len(), 1, "{:?}", received(&root));
}

#[test]
fn shim_release_cancel_after_forwarding_keeps_the_token_spent() {
    let (env, mut c, args, token) = shred_approved("y");
    let root = env.root.clone();

    // The call reaches the server (held open there), then the client cancels it.
    start_held(&mut c, &root, "shred", ("b", &args, &token));
    let forwarded = wait_until("the call to reach the server", || {
        calls_of(&root, "shred").into_iter().next()
    });
    assert_eq!(
        forwarded["arguments"],
        json!({"name": "y"}),
        "forwarded without elicit_token"
    );
    let gave_up = c.cancel("b");
    assert_eq!(gave_up["answered"], false, "{gave_up}");

    // The shim passes the cancellation on to the server, for the forwarded call's id.
    let cancel = wait_until("the cancellation to reach the server", || {
        received(&root)
            .into_iter()
            .find(|r| r.get("cancelled").is_some())
    });
    assert_eq!(
        cancel["cancelled"],
        forwarded["id"],
        "{:?}",
        received(&root)
    );
    std::fs::remove_file(root.join("hold-shred")).unwrap();

    // Something may have run: the token stays spent, nothing is released.
    let kinds = wait_events(&env, "tc.elicit.consumed", 1);
    assert_eq!(count(&kinds, "hitl_released"), 0, "{kinds:?}");
    let r = c.call("shred", with_token(&args, &token));
    assert_eq!(code(&r).as_deref(), Some("invalid_input"), "{r}");
    assert_eq!(sc(&r)["details"]["reason"], "spent", "{r}");
    assert_eq!(calls_of(&root, "shred").len(), 1, "{:?}", received(&root));
    // The server honoured the cancellation: nothing was deleted.
    assert_eq!(
        std::fs::read_to_string(root.join("items/y")).unwrap(),
        "precious"
    );
    let kinds = event_kinds(&env.socket);
    assert_eq!(count(&kinds, "hitl_released"), 0, "{kinds:?}");
    assert_eq!(count(&kinds, "tc.elicit.consumed"), 1, "{kinds:?}");
}

#[test]
fn shim_release_acl_refusal_then_the_same_token_works_once_the_acl_allows() {
    let policy = Vault::filesystem("fs").gate("write_file", r#"{ paths = ["path"] }"#);
    let mut env = Env::with(&policy.clone().acl_deny(&["private/**"]));
    env.start_tcd();
    std::fs::create_dir_all(env.root.join("private")).unwrap();
    let secret = env.root.join("private/secret.txt");
    let args = json!({"path": "private/secret.txt", "content": "x"});
    let token = {
        let mut c = PyClient::start(&env.shim_argv("fs"));
        let r = c.call("write_file", args.clone());
        assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
        let token = tcctl_elicit(&env, &r);
        let r = c.call("write_file", with_token(&args, &token));
        assert_eq!(code(&r).as_deref(), Some("acl_denied"), "{r}");
        assert!(!secret.exists());
        token
    };
    let kinds = event_kinds(&env.socket);
    assert_eq!(count(&kinds, "hitl_released"), 1, "{kinds:?}");
    assert_eq!(count(&kinds, "tc.elicit.consumed"), 0, "{kinds:?}");

    // The operator drops the deny rule; the editor restarts the shim with the new policy.
    env.write_config(policy.toml());
    let mut c = PyClient::start(&env.shim_argv("fs"));
    let r = c.call("write_file", with_token(&args, &token));
    assert_eq!(code(&r), None, "{r}");
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "x");
    std::fs::remove_file(&secret).unwrap();
    let r = c.call("write_file", with_token(&args, &token));
    assert_eq!(sc(&r)["details"]["reason"], "spent", "{r}");
    assert!(!secret.exists(), "a spent token must not write");
    let kinds = event_kinds(&env.socket);
    assert_eq!(count(&kinds, "hitl_released"), 1, "{kinds:?}");
    assert_eq!(count(&kinds, "tc.elicit.consumed"), 1, "{kinds:?}");
}
