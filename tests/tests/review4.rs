//! Review of the session's changes as a hostile model (review4): Python `mcp` client →
//! real tc-shim → real mcp-server-git with `deny = ["private/**"]`.

#[path = "shim_support.rs"]
mod support;

use serde_json::json;
use support::*;

const SECRET: &str = "s3cret-key-material";

/// A repository with a public commit and a denied file staged (never committed).
fn setup() -> (Env, PyClient) {
    let mut env = Env::with(&Vault::git("repo").acl_deny(&["private/**"]));
    env.start_tcd();
    let root = env.root.clone();
    git_repo_with_base(&root);
    std::fs::create_dir_all(root.join("private")).unwrap();
    std::fs::write(root.join("public.txt"), "hello public").unwrap();
    git(&root, &["add", "."]);
    git(&root, &["commit", "-q", "-m", "public"]);
    std::fs::write(root.join("private/key.txt"), SECRET).unwrap();
    git(&root, &["add", "private/key.txt"]);
    let c = PyClient::start(&env.shim_argv("repo"));
    (env, c)
}

/// Finding 1: `repo_path` may name the git dir itself (`<root>/.git`). GitPython opens it
/// (`is_git_dir`) with the work tree its parent, so `git diff --cached` shows the staged
/// denied file; the shim reads the same index but joins its entries to `<root>/.git`
/// (`covered_index(repo = path)`), judging `<root>/.git/private/key.txt`, which
/// `private/**` does not match.
#[test]
fn review4_a_whole_tree_diff_of_the_git_dir_is_judged_by_its_work_tree() {
    let (env, mut c) = setup();
    let plain = env.root.display().to_string();
    let r = c.call("git_diff_staged", json!({"repo_path": plain}));
    assert_eq!(code(&r).as_deref(), Some("acl_denied"), "{r}");
    let gitdir = env.root.join(".git").display().to_string();
    for tool in ["git_diff_staged", "git_diff_unstaged"] {
        std::fs::write(env.root.join("private/key.txt"), format!("{SECRET}-v2")).unwrap();
        let r = c.call(tool, json!({"repo_path": gitdir}));
        assert!(!r.to_string().contains(SECRET), "{tool}: secret shown: {r}");
        assert_eq!(code(&r).as_deref(), Some("acl_denied"), "{tool}: {r}");
    }
}

/// The same git dir names a revision's paths under the wrong folder: `:private/key.txt`
/// (the staged blob) read through `git_show` with `repo_path = <root>/.git`.
#[test]
fn review4_a_revision_in_the_git_dir_is_judged_by_its_work_tree() {
    let (env, mut c) = setup();
    let gitdir = env.root.join(".git").display().to_string();
    let r = c.call(
        "git_show",
        json!({"repo_path": env.root.display().to_string(), "revision": ":private/key.txt"}),
    );
    assert_eq!(code(&r).as_deref(), Some("acl_denied"), "{r}");
    let r = c.call(
        "git_show",
        json!({"repo_path": gitdir, "revision": ":private/key.txt"}),
    );
    assert!(!r.to_string().contains(SECRET), "secret shown: {r}");
    assert_eq!(code(&r).as_deref(), Some("acl_denied"), "{r}");
}
