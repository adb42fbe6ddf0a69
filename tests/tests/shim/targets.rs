//! End to end: Python `mcp` client → real tc-shim → real server-filesystem, real tcd,
//! approvals through the real `tcctl elicit`: the `tree` and `matching` targets.
//!
//! server-filesystem's only tool that takes a folder and changes the disk is `move_file`
//! (moving a whole folder), so both targets gate it with `root = "source"`:
//! - `tree = { root = "source", glob = "*.md" }`: the notes under the moved folder
//!   (`*` crosses `/`, so nested ones too); other files are not part of the approval.
//! - `matching = { root = "source", contains = "source" }`: the files under the moved
//!   folder that mention the folder's own path (the links the move breaks).

use tc_tests::shim as support;

use std::path::Path;

use serde_json::{json, Value};
use support::*;

fn tree_env() -> Env {
    Env::with(&Vault::filesystem("fs").gate(
        "move_file",
        r#"{ tree = { root = "source", glob = "*.md" } }"#,
    ))
}

fn matching_env() -> Env {
    Env::with(&Vault::filesystem("fs").gate(
        "move_file",
        r#"{ matching = { root = "source", contains = "source" } }"#,
    ))
}

fn write(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

fn read(root: &Path, rel: &str) -> String {
    std::fs::read_to_string(root.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The `state_fp` an `elicit_required` refusal reports.
fn fp(r: &Value) -> String {
    sc(r)["details"]["state_fp"].as_str().unwrap().to_string()
}

/// A gated call without a token: refused for a human, with nothing moved.
fn raise(c: &mut PyClient, env: &Env, args: &Value, src: &str, dst: &str) -> Value {
    let r = c.call("move_file", args.clone());
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
    assert_eq!(sc(&r)["details"]["tool"], "move_file", "{r}");
    assert!(env.root.join(src).is_dir() && !env.root.join(dst).exists());
    r
}

/// A call with a token the target drifted from: refused, nothing moved, and the token is
/// spent (its second use is refused as `spent`, still moving nothing).
fn assert_drift_spends(c: &mut PyClient, env: &Env, args: &Value, token: &str, src: &str) {
    let dst = args["destination"].as_str().unwrap();
    let r = c.call("move_file", with_token(args, token));
    assert_eq!(code(&r).as_deref(), Some("replay_drift"), "{r}");
    assert!(env.root.join(src).is_dir(), "nothing may move on drift");
    assert!(!env.root.join(dst).exists(), "nothing may move on drift");
    let r = c.call("move_file", with_token(args, token));
    assert_eq!(code(&r).as_deref(), Some("invalid_input"), "{r}");
    assert_eq!(sc(&r)["details"]["reason"], "spent", "{r}");
    assert!(env.root.join(src).is_dir() && !env.root.join(dst).exists());
}

/// After a successful move, the same token again: `spent`, and the re-created source
/// folder stays where it is (the destination was cleared, so a forwarded call would move it).
fn assert_used_once(c: &mut PyClient, env: &Env, args: &Value, token: &str, src: &str) {
    let dst = args["destination"].as_str().unwrap();
    std::fs::rename(env.root.join(dst), env.root.join("done")).unwrap();
    write(&env.root, &format!("{src}/again.md"), "again");
    let r = c.call("move_file", with_token(args, token));
    assert_eq!(code(&r).as_deref(), Some("invalid_input"), "{r}");
    assert_eq!(sc(&r)["details"]["reason"], "spent", "{r}");
    assert!(env.root.join(src).is_dir() && !env.root.join(dst).exists());
}

#[test]
fn shim_targets_tree_approved_once_and_other_files_are_not_bound() {
    let mut env = tree_env();
    env.start_tcd();
    let root = env.root.clone();
    write(&root, "inbox/a.md", "alpha");
    write(&root, "inbox/sub/c.md", "see");
    write(&root, "inbox/b.txt", "bee");
    let mut c = PyClient::start(&env.shim_argv("fs"));
    let args = json!({"source": "inbox", "destination": "archive"});

    let first = raise(&mut c, &env, &args, "inbox", "archive");
    let token = tcctl_elicit(&env, &first);

    // Files the glob does not match change and appear: not drift, the move runs.
    write(&root, "inbox/b.txt", "bee, edited");
    write(&root, "inbox/sub/new.txt", "unrelated");
    let r = c.call("move_file", with_token(&args, &token));
    assert_eq!(code(&r), None, "{r}");
    assert!(!root.join("inbox").exists());
    assert_eq!(read(&root, "archive/a.md"), "alpha");
    assert_eq!(read(&root, "archive/sub/c.md"), "see");
    assert_eq!(read(&root, "archive/b.txt"), "bee, edited");

    assert_used_once(&mut c, &env, &args, &token, "inbox");
    let kinds = event_kinds(&env.socket);
    assert_eq!(count(&kinds, "tc.elicit.consumed"), 1, "{kinds:?}");
    assert_eq!(count(&kinds, "replay_drift"), 0, "{kinds:?}");
}

#[test]
fn shim_targets_tree_a_replaced_or_added_match_is_drift() {
    let mut env = tree_env();
    env.start_tcd();
    let root = env.root.clone();
    write(&root, "inbox/a.md", "alpha");
    write(&root, "inbox/sub/c.md", "see");
    write(&root, "inbox/b.txt", "bee");
    let mut c = PyClient::start(&env.shim_argv("fs"));
    let args = json!({"source": "inbox", "destination": "archive"});

    // A matching (nested) file is replaced between raise and redeem.
    let first = raise(&mut c, &env, &args, "inbox", "archive");
    let token = tcctl_elicit(&env, &first);
    write(&root, "inbox/sub/c.md", "see, replaced");
    assert_drift_spends(&mut c, &env, &args, &token, "inbox");
    assert_eq!(read(&root, "inbox/sub/c.md"), "see, replaced");

    // A fresh call raises a fresh request, bound to the new state; then a matching
    // file is added between raise and redeem.
    let second = raise(&mut c, &env, &args, "inbox", "archive");
    assert_ne!(fp(&second), fp(&first));
    let token = tcctl_elicit(&env, &second);
    write(&root, "inbox/added.md", "new note");
    assert_drift_spends(&mut c, &env, &args, &token, "inbox");

    // Approved against the current state, it runs.
    let third = raise(&mut c, &env, &args, "inbox", "archive");
    assert_ne!(fp(&third), fp(&second));
    let token = tcctl_elicit(&env, &third);
    let r = c.call("move_file", with_token(&args, &token));
    assert_eq!(code(&r), None, "{r}");
    assert!(!root.join("inbox").exists());
    assert_eq!(read(&root, "archive/added.md"), "new note");
    assert_eq!(read(&root, "archive/sub/c.md"), "see, replaced");

    let kinds = event_kinds(&env.socket);
    assert_eq!(count(&kinds, "replay_drift"), 2, "{kinds:?}");
    assert_eq!(count(&kinds, "tc.elicit.consumed"), 1, "{kinds:?}");
}

#[test]
fn shim_targets_matching_approved_once_and_unrelated_files_are_not_bound() {
    let mut env = matching_env();
    env.start_tcd();
    let root = env.root.clone();
    write(&root, "projects/index.md", "see projects/plan.md");
    write(&root, "projects/plan.md", "the plan");
    write(&root, "projects/sub/todo.txt", "todo");
    let mut c = PyClient::start(&env.shim_argv("fs"));
    let args = json!({"source": "projects", "destination": "archive"});

    let first = raise(&mut c, &env, &args, "projects", "archive");
    let token = tcctl_elicit(&env, &first);

    // Files without the string change and appear: not drift, the move runs.
    write(&root, "projects/plan.md", "the plan, v2");
    write(&root, "projects/sub/todo.txt", "todo, done");
    write(&root, "projects/other.md", "nothing to see");
    let r = c.call("move_file", with_token(&args, &token));
    assert_eq!(code(&r), None, "{r}");
    assert!(!root.join("projects").exists());
    assert_eq!(read(&root, "archive/index.md"), "see projects/plan.md");
    assert_eq!(read(&root, "archive/plan.md"), "the plan, v2");
    assert_eq!(read(&root, "archive/other.md"), "nothing to see");

    assert_used_once(&mut c, &env, &args, &token, "projects");
    let kinds = event_kinds(&env.socket);
    assert_eq!(count(&kinds, "tc.elicit.consumed"), 1, "{kinds:?}");
    assert_eq!(count(&kinds, "replay_drift"), 0, "{kinds:?}");
}

#[test]
fn shim_targets_matching_a_changed_match_or_a_file_gaining_the_string_is_drift() {
    let mut env = matching_env();
    env.start_tcd();
    let root = env.root.clone();
    write(&root, "projects/index.md", "see projects/plan.md");
    write(&root, "projects/plan.md", "the plan");
    let mut c = PyClient::start(&env.shim_argv("fs"));
    let args = json!({"source": "projects", "destination": "archive"});

    // A file that contains the string changes (and still contains it).
    let first = raise(&mut c, &env, &args, "projects", "archive");
    let token = tcctl_elicit(&env, &first);
    write(
        &root,
        "projects/index.md",
        "see projects/plan.md and projects/x.md",
    );
    assert_drift_spends(&mut c, &env, &args, &token, "projects");

    // A file that did not contain it gains it.
    let second = raise(&mut c, &env, &args, "projects", "archive");
    assert_ne!(fp(&second), fp(&first));
    let token = tcctl_elicit(&env, &second);
    write(&root, "projects/plan.md", "the plan, see projects/index.md");
    assert_drift_spends(&mut c, &env, &args, &token, "projects");

    // A NEW file containing it appears.
    let third = raise(&mut c, &env, &args, "projects", "archive");
    assert_ne!(fp(&third), fp(&second));
    let token = tcctl_elicit(&env, &third);
    write(&root, "projects/sub/new.md", "links to projects/plan.md");
    assert_drift_spends(&mut c, &env, &args, &token, "projects");

    // Approved against the current state, it runs.
    let fourth = raise(&mut c, &env, &args, "projects", "archive");
    let token = tcctl_elicit(&env, &fourth);
    let r = c.call("move_file", with_token(&args, &token));
    assert_eq!(code(&r), None, "{r}");
    assert!(!root.join("projects").exists());
    assert_eq!(
        read(&root, "archive/sub/new.md"),
        "links to projects/plan.md"
    );

    let kinds = event_kinds(&env.socket);
    assert_eq!(count(&kinds, "replay_drift"), 3, "{kinds:?}");
    assert_eq!(count(&kinds, "tc.elicit.consumed"), 1, "{kinds:?}");
}
