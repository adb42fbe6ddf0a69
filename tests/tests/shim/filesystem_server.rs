//! End to end: Python `mcp` client → real tc-shim → real server-filesystem, with a
//! real tcd; the CLI-token route, floors, drift, spent tokens, daemon outages.

use tc_tests::shim as support;

use serde_json::json;
use support::*;

fn fs_env() -> Env {
    Env::with(
        &Vault::filesystem("fs")
            .gate("write_file", r#"{ paths = ["path"] }"#)
            .gate("edit_file", r#"{ paths = ["path"] }"#)
            .acl_deny(&["private/**"]),
    )
}

#[test]
fn shim_filesystem_cli_token_route() {
    let mut env = fs_env();
    let (note, mut c) = started_with_file(&mut env, "note.txt", "v0");

    // tools/list: gated tools advertise elicit_token; the ungated floor tool is hidden;
    // ungated calls flow.
    let tools = assert_fs_scene_listed_and_readable(&mut c);
    let names = tool_names(&tools);
    assert!(names.contains(&"read_text_file"), "{names:?}");
    assert!(
        !names.contains(&"move_file"),
        "floor tool without a gate must be hidden: {names:?}"
    );

    // Hidden floor tool is refused, naming the entry to add; nothing moved.
    let r = c.call(
        "move_file",
        json!({"source": "note.txt", "destination": "moved.txt"}),
    );
    assert_eq!(code(&r).as_deref(), Some("gate_not_configured"), "{r}");
    assert!(r["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("[[vaults.gates]] tool = \"move_file\""));
    assert!(note.exists() && !env.root.join("moved.txt").exists());

    // Escapes are refused before anything runs.
    let r = c.call("read_text_file", json!({"path": "../config.toml"}));
    assert_eq!(code(&r).as_deref(), Some("invalid_input"), "{r}");

    // Gated call without a token: elicit_required, nothing written.
    let args = json!({"path": "note.txt", "content": "v1"});
    let r = c.call("write_file", args.clone());
    assert_elicit_required(&r, "write_file", "fs", &args);
    assert_eq!(sc(&r)["details"]["caller"], "stdio");
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "v0");

    // The operator mints; the same call with the token runs once; a second use is spent,
    // nothing forwarded (the removed file stays removed).
    assert_redeemed_once(&mut c, &env, ("write_file", &args), &r, &note, "v1");
}

#[test]
fn shim_filesystem_drift_is_refused_and_nothing_is_written() {
    let mut env = fs_env();
    let (target, mut c) = started_with_file(&mut env, "drift.txt", "original");

    let args = json!({"path": "drift.txt", "content": "overwrite"});
    let first = raise(&mut c, "write_file", &args);
    let token = mint(&env.socket, &first);

    // The human edits the target between raise and redeem.
    std::fs::write(&target, "edited meanwhile").unwrap();
    let redeem = with_token(&args, &token);
    let r = c.call("write_file", redeem.clone());
    assert_eq!(code(&r).as_deref(), Some("replay_drift"), "{r}");
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "edited meanwhile"
    );

    // The token is spent even though nothing ran.
    let r = c.call("write_file", redeem);
    assert_eq!(sc(&r)["details"]["reason"], "spent", "{r}");
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "edited meanwhile"
    );

    // Re-issuing without a token raises a fresh request bound to the new state.
    assert_fresh_request_runs(&mut c, &env, ("write_file", &args), &first);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "overwrite");
    let kinds = event_kinds(&env.socket);
    assert!(kinds.iter().any(|k| k == "replay_drift"), "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|k| *k == "tc.elicit.consumed").count(),
        1,
        "{kinds:?}"
    );
}

#[test]
fn shim_filesystem_acl_refusal_releases_the_token() {
    let mut env = fs_env();
    env.start_tcd();
    std::fs::create_dir_all(env.root.join("private")).unwrap();
    let mut c = PyClient::start(&env.shim_argv("fs"));
    let args = json!({"path": "private/secret.txt", "content": "x"});
    let r = raise(&mut c, "write_file", &args);
    let token = mint(&env.socket, &r);
    let redeem = with_token(&args, &token);
    let r = c.call("write_file", redeem.clone());
    assert_eq!(code(&r).as_deref(), Some("acl_denied"), "{r}");
    assert!(!env.root.join("private/secret.txt").exists());
    // Released, not spent: the same token is still good (and refused by the ACL again).
    let r = c.call("write_file", redeem);
    assert_eq!(code(&r).as_deref(), Some("acl_denied"), "{r}");
    let kinds = event_kinds(&env.socket);
    assert_eq!(
        kinds.iter().filter(|k| *k == "hitl_released").count(),
        2,
        "{kinds:?}"
    );
    assert!(
        !kinds.iter().any(|k| k == "tc.elicit.consumed"),
        "{kinds:?}"
    );
}

#[test]
fn shim_filesystem_daemon_down_fails_closed_then_reconnects() {
    let mut env = fs_env();
    // No daemon yet.
    std::fs::write(env.root.join("a.txt"), "a").unwrap();
    let mut c = PyClient::start(&env.shim_argv("fs"));
    let r = c.call("read_text_file", json!({"path": "a.txt"}));
    assert_eq!(code(&r), None, "ungated calls keep working: {r}");
    let r = c.call("write_file", json!({"path": "a.txt", "content": "b"}));
    assert_eq!(code(&r).as_deref(), Some("confirmation_unavailable"), "{r}");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains(&env.socket.display().to_string())
            && text.contains("systemctl --user start tcd"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(env.root.join("a.txt")).unwrap(),
        "a"
    );

    // Daemon comes up: the next gated call reconnects by itself.
    env.start_tcd();
    let r = c.call("write_file", json!({"path": "a.txt", "content": "b"}));
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");

    // Daemon goes away again mid-session.
    env.stop_tcd();
    let r = c.call("write_file", json!({"path": "a.txt", "content": "b"}));
    assert_eq!(code(&r).as_deref(), Some("confirmation_unavailable"), "{r}");
    let r = c.call("read_text_file", json!({"path": "a.txt"}));
    assert_eq!(code(&r), None, "{r}");
    env.start_tcd();
    let r = c.call("write_file", json!({"path": "a.txt", "content": "b"}));
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
    assert_eq!(
        std::fs::read_to_string(env.root.join("a.txt")).unwrap(),
        "a"
    );
}

/// `~/…` is refused (server-filesystem would expand it to $HOME, tc cannot judge it),
/// and the NFD spelling of an existing file is gated like its real (NFC) name, which
/// server-filesystem would overwrite.
#[test]
fn shim_filesystem_home_and_unicode_spellings_are_judged_as_the_server_sees_them() {
    let mut env = Env::with(&Vault::filesystem("fs").gate_overwrites("write_file"));
    let (real, mut c) = started_with_file(&mut env, "caf\u{e9}.md", "v0");

    let r = c.call("write_file", json!({"path": "~/x.md", "content": "x"}));
    assert_eq!(code(&r).as_deref(), Some("invalid_input"), "{r}");
    assert!(r["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("does not expand home directories"));

    // A new file: the gate's condition does not hold, the write flows.
    let r = c.call("write_file", json!({"path": "new.md", "content": "n"}));
    assert_eq!(code(&r), None, "{r}");

    for spelling in ["caf\u{e9}.md", "cafe\u{301}.md"] {
        let r = c.call("write_file", json!({"path": spelling, "content": "v1"}));
        assert_eq!(
            code(&r).as_deref(),
            Some("elicit_required"),
            "{spelling:?}: {r}"
        );
    }
    assert_eq!(std::fs::read_to_string(&real).unwrap(), "v0");
    assert!(!env.root.join("cafe\u{301}.md").exists());
}
