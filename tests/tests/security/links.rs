//! End to end (issue 15, item 4): Python `mcp` client → real tc-shim → real
//! server-filesystem, real tcd, approvals through the real `tcctl elicit`. A symlink
//! neither moves a call out of its gate nor lets an approval land in another file.

use tc_tests::shim as support;

use serde_json::json;
use support::*;

/// `a/link.md -> ../b/report.md`: server-filesystem moves the file the link leads to,
/// so `move_file a/link.md -> a/report.md` takes `b/report.md` out of `b`. The
/// cross-folder gate must see that (on the old shim it ran unconfirmed).
#[test]
fn security_links_a_move_through_a_link_is_judged_where_it_leads() {
    let mut env = Env::with(&Vault::filesystem("fs").gate_cross_folder_moves());
    env.start_tcd();
    let root = env.root.clone();
    std::fs::create_dir_all(root.join("a")).unwrap();
    std::fs::create_dir_all(root.join("b")).unwrap();
    std::fs::write(root.join("b/report.md"), "the report").unwrap();
    std::os::unix::fs::symlink("../b/report.md", root.join("a/link.md")).unwrap();
    let mut c = PyClient::start(&env.shim_argv("fs"));

    // A same-folder move of a plain file is still ungated (the gate's condition holds
    // only across folders).
    std::fs::write(root.join("a/plain.md"), "p").unwrap();
    let r = c.call(
        "move_file",
        json!({"source": "a/plain.md", "destination": "a/renamed.md"}),
    );
    assert_eq!(code(&r), None, "{r}");
    assert!(root.join("a/renamed.md").is_file());

    let args = json!({"source": "a/link.md", "destination": "a/report.md"});
    let r = c.call("move_file", args.clone());
    assert_elicit_required(&r, "move_file", "fs", &args);
    assert_eq!(
        std::fs::read_to_string(root.join("b/report.md")).unwrap(),
        "the report",
        "b/report.md must not move without a confirmation"
    );
    assert!(!root.join("a/report.md").exists());
}

/// `write_file` of `path` approved with `tcctl elicit`, then `swap` run before the token
/// is redeemed: the redeeming call must be refused as `replay_drift`.
#[track_caller]
fn assert_drift_once_swapped(c: &mut PyClient, env: &Env, path: &str, swap: impl FnOnce()) {
    let args = json!({"path": path, "content": "approved text"});
    let r = c.call("write_file", args.clone());
    assert_elicit_required(&r, "write_file", "fs", &args);
    let token = tcctl_elicit(env, &r);
    swap();
    let r = c.call("write_file", with_token(&args, &token));
    assert_eq!(code(&r).as_deref(), Some("replay_drift"), "{r}");
}

/// An approved `write_file` whose target is replaced, before the token is redeemed, by a
/// symlink to a file with the same bytes: the write would land in the other file, so
/// the fingerprint must see the swap (`replay_drift`) and nothing is written.
#[test]
fn security_links_a_target_swapped_for_a_link_is_drift() {
    let mut env = Env::with(&Vault::filesystem("fs").gate("write_file", r#"{ paths = ["path"] }"#));
    env.start_tcd();
    let root = env.root.clone();
    std::fs::write(root.join("target.md"), "same bytes").unwrap();
    std::fs::write(root.join("other.md"), "same bytes").unwrap();
    let mut c = PyClient::start(&env.shim_argv("fs"));

    assert_drift_once_swapped(&mut c, &env, "target.md", || {
        std::fs::remove_file(root.join("target.md")).unwrap();
        std::os::unix::fs::symlink("other.md", root.join("target.md")).unwrap();
    });
    assert_eq!(
        std::fs::read_to_string(root.join("other.md")).unwrap(),
        "same bytes",
        "the approved write must not land in the file the link leads to"
    );
    let kinds = event_kinds(&env.socket);
    assert_eq!(count(&kinds, "replay_drift"), 1, "{kinds:?}");

    // A folder on the way swapped for a link to an identical folder is drift too.
    std::fs::create_dir_all(root.join("d1")).unwrap();
    std::fs::create_dir_all(root.join("d2")).unwrap();
    std::fs::write(root.join("d1/n.md"), "n").unwrap();
    std::fs::write(root.join("d2/n.md"), "n").unwrap();
    assert_drift_once_swapped(&mut c, &env, "d1/n.md", || {
        std::fs::remove_dir_all(root.join("d1")).unwrap();
        std::os::unix::fs::symlink("d2", root.join("d1")).unwrap();
    });
    assert_eq!(std::fs::read_to_string(root.join("d2/n.md")).unwrap(), "n");
}
