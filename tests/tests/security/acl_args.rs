//! End to end (issue 15, item 5): Python `mcp` client → real tc-shim → real
//! mcp-server-git with `deny = ["private/**"]` and no `[[vaults.paths]]` entry: every
//! argument that names a file is judged (revisions' `<rev>:<path>`, `git diff`
//! targets, `git add` pathspecs), and what cannot be judged is refused.

use tc_tests::shim as support;

use serde_json::{json, Value};
use support::*;

/// The file the ACL denies holds this; no answer may contain it.
pub(crate) const SECRET: &str = "s3cret-key-material";

/// A git vault denying `private/**` over a repository with `base.txt` committed and an
/// empty `private/`, shaped further by `files` (the secret committed, staged...), with a
/// Python client on its shim: the env, the client and the repository's path.
pub(crate) fn denied_repo(files: impl FnOnce(&std::path::Path)) -> (Env, PyClient, String) {
    let mut env = Env::with(&Vault::git("repo").acl_deny(&["private/**"]));
    env.start_tcd();
    let root = env.root.clone();
    git_repo_with_base(&root);
    std::fs::create_dir_all(root.join("private")).unwrap();
    files(&root);
    let c = PyClient::start(&env.shim_argv("repo"));
    let repo = root.display().to_string();
    (env, c, repo)
}

/// The secret and a public file committed, then the secret changed in the worktree (so
/// a diff of it would show it).
fn setup() -> (Env, PyClient, String) {
    denied_repo(|root| {
        std::fs::write(root.join("private/key.txt"), SECRET).unwrap();
        std::fs::write(root.join("public.txt"), "hello public").unwrap();
        git(root, &["add", "."]);
        git(root, &["commit", "-q", "-m", "two files"]);
        std::fs::write(root.join("private/key.txt"), format!("{SECRET}-v2")).unwrap();
    })
}

#[track_caller]
fn assert_refused(r: &Value) {
    assert_eq!(code(r).as_deref(), Some("acl_denied"), "{r}");
    assert!(!r.to_string().contains(SECRET), "the secret leaked: {r}");
}

#[test]
fn security_acl_args_git_show_of_a_denied_path_is_refused() {
    let (_env, mut c, repo) = setup();
    for rev in [
        "HEAD:private/key.txt",
        "HEAD:./private/key.txt",
        "HEAD~0:private/key.txt",
        ":private/key.txt",
        ":0:private/key.txt",
        "HEAD:private",
    ] {
        let r = c.call("git_show", json!({"repo_path": repo, "revision": rev}));
        assert_refused(&r);
    }
    // A revision whose path part cannot be judged is refused, not guessed at.
    let r = c.call(
        "git_show",
        json!({"repo_path": repo, "revision": "HEAD:sub/../private/key.txt"}),
    );
    assert_refused(&r);
    // A harmless one still works.
    let r = c.call(
        "git_show",
        json!({"repo_path": repo, "revision": "HEAD:public.txt"}),
    );
    assert_eq!(code(&r), None, "{r}");
    assert!(r.to_string().contains("hello public"), "{r}");
}

#[test]
fn security_acl_args_git_diff_target_and_git_add_files_are_judged() {
    let (env, mut c, repo) = setup();
    for target in ["private/key.txt", "HEAD:private", ":/private", "."] {
        let r = c.call("git_diff", json!({"repo_path": repo, "target": target}));
        assert_refused(&r);
    }
    let r = c.call("git_diff", json!({"repo_path": repo, "target": "HEAD"}));
    assert_eq!(code(&r), None, "{r}");

    for files in [
        json!(["private/key.txt"]),
        json!(["public.txt", "private"]),
        json!(["."]),
        json!(["*.txt"]),
        json!([":(top)private/key.txt"]),
    ] {
        let r = c.call("git_add", json!({"repo_path": repo, "files": files}));
        assert_refused(&r);
        let staged = git(&env.root, &["diff", "--cached", "--name-only"]);
        assert!(staged.is_empty(), "{files}: staged {staged:?}");
    }
    std::fs::write(env.root.join("public.txt"), "hello again").unwrap();
    let r = c.call(
        "git_add",
        json!({"repo_path": repo, "files": ["public.txt"]}),
    );
    assert_eq!(code(&r), None, "{r}");
    let staged = git(&env.root, &["diff", "--cached", "--name-only"]);
    assert_eq!(staged.trim(), "public.txt");
}
