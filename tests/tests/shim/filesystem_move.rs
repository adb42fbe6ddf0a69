//! End to end: Python `mcp` client → real tc-shim → real server-filesystem, with a real
//! tcd: `move_file` gated only across folders (`when.cross_folder`), `edit_file` drift.

use tc_tests::shim as support;

use serde_json::json;
use support::*;

fn env() -> Env {
    Env::with(
        &Vault::filesystem("fs")
            .gate_cross_folder_moves()
            .gate("edit_file", r#"{ paths = ["path"] }"#),
    )
}

#[test]
fn shim_filesystem_move_across_folders_needs_a_confirmation_within_one_does_not() {
    let mut env = env();
    env.start_tcd();
    std::fs::create_dir_all(env.root.join("a")).unwrap();
    std::fs::create_dir_all(env.root.join("b")).unwrap();
    std::fs::write(env.root.join("a/one.txt"), "1").unwrap();
    let mut c = PyClient::start(&env.shim_argv("fs"));

    // Same folder: the gate's condition does not hold, the call passes straight through.
    let r = c.call(
        "move_file",
        json!({"source": "a/one.txt", "destination": "a/two.txt"}),
    );
    assert_eq!(code(&r), None, "{r}");
    assert!(env.root.join("a/two.txt").exists() && !env.root.join("a/one.txt").exists());

    // Across folders: held for a human, nothing moved.
    let args = json!({"source": "a/two.txt", "destination": "b/two.txt"});
    let first = raise(&mut c, "move_file", &args);
    assert!(env.root.join("a/two.txt").exists() && !env.root.join("b/two.txt").exists());

    // Drift on the destination side: something appears at b/two.txt meanwhile.
    let token = mint(&env.socket, &first);
    std::fs::write(env.root.join("b/two.txt"), "squatter").unwrap();
    let r = c.call("move_file", with_token(&args, &token));
    assert_eq!(code(&r).as_deref(), Some("replay_drift"), "{r}");
    assert_eq!(
        std::fs::read_to_string(env.root.join("b/two.txt")).unwrap(),
        "squatter"
    );
    assert!(env.root.join("a/two.txt").exists());

    // Fresh confirmation against the current state, after the squatter is gone.
    std::fs::remove_file(env.root.join("b/two.txt")).unwrap();
    let fresh = raise(&mut c, "move_file", &args);
    let token = mint(&env.socket, &fresh);
    let r = c.call("move_file", with_token(&args, &token));
    assert_eq!(code(&r), None, "{r}");
    assert!(env.root.join("b/two.txt").exists() && !env.root.join("a/two.txt").exists());
}

#[test]
fn shim_filesystem_edit_file_drift_applies_nothing() {
    let mut env = env();
    let (note, mut c) = started_with_file(&mut env, "note.md", "hello world\n");
    let args = json!({"path": "note.md", "edits": [{"oldText": "world", "newText": "there"}]});
    let first = raise(&mut c, "edit_file", &args);
    let token = mint(&env.socket, &first);
    std::fs::write(&note, "hello world, edited by a human\n").unwrap();
    let r = c.call("edit_file", with_token(&args, &token));
    assert_eq!(code(&r).as_deref(), Some("replay_drift"), "{r}");
    assert_eq!(
        std::fs::read_to_string(&note).unwrap(),
        "hello world, edited by a human\n"
    );

    let fresh = c.call("edit_file", args.clone());
    let token = mint(&env.socket, &fresh);
    let r = c.call("edit_file", with_token(&args, &token));
    assert_eq!(code(&r), None, "{r}");
    assert_eq!(
        std::fs::read_to_string(&note).unwrap(),
        "hello there, edited by a human\n"
    );
}
