//! End to end: Python `mcp` client → tc-shim → real mcp-server-git; `git_commit` gated
//! with a `git` target: staging another file is drift, `update-index --refresh` is not.

use tc_tests::shim as support;

use serde_json::json;
use support::*;

#[test]
fn shim_git_commit_bound_to_head_and_staged_index() {
    let mut env = Env::with(&Vault::git("repo").gate("git_commit", r#"{ git = "repo_path" }"#));
    env.start_tcd();
    let root = env.root.clone();
    git_repo_with_base(&root);
    std::fs::write(root.join("a.txt"), "a").unwrap();
    git(&root, &["add", "a.txt"]);

    let mut c = PyClient::start(&env.shim_argv("repo"));
    let repo_path = root.display().to_string();
    let args = json!({"repo_path": repo_path, "message": "add a"});
    let r = raise(&mut c, "git_commit", &args);
    let token = mint(&env.socket, &r);

    // A stat-only index refresh rewrites .git/index but is not drift.
    let before = std::fs::read(root.join(".git/index")).unwrap();
    std::fs::write(root.join("a.txt"), "a").unwrap();
    let t = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000);
    std::fs::File::options()
        .write(true)
        .open(root.join("a.txt"))
        .unwrap()
        .set_modified(t)
        .unwrap();
    git(&root, &["update-index", "--refresh"]);
    let after = std::fs::read(root.join(".git/index")).unwrap();
    assert_ne!(
        before, after,
        "the refresh must really rewrite the index for this test to mean anything"
    );

    let r = c.call("git_commit", with_token(&args, &token));
    assert_eq!(code(&r), None, "{r}");
    assert_eq!(commits(&root), 2);

    // Drift: another file gets staged between raise and redeem.
    std::fs::write(root.join("b.txt"), "b").unwrap();
    std::fs::write(root.join("c.txt"), "c").unwrap();
    git(&root, &["add", "b.txt"]);
    let args = json!({"repo_path": repo_path, "message": "add b"});
    let r = raise(&mut c, "git_commit", &args);
    let token = mint(&env.socket, &r);
    git(&root, &["add", "c.txt"]);
    let r = c.call("git_commit", with_token(&args, &token));
    assert_eq!(code(&r).as_deref(), Some("replay_drift"), "{r}");
    assert_eq!(commits(&root), 2, "nothing may be committed on drift");
}
