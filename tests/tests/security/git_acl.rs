//! Review of issue 15 items 1, 4, 5 and 7 as a hostile model (review2), and of the git
//! ACL's later changes (review4): Python `mcp` client → real tc-shim → real
//! mcp-server-git with `deny = ["private/**"]`.

use tc_tests::security as security_support;
use tc_tests::shim as support;

use security_support::Shim;
use serde_json::json;
use support::*;

use super::acl_args::{denied_repo, SECRET};

/// A public file committed; the secret staged by the user, never committed (not in
/// history).
fn setup() -> (Env, PyClient, String) {
    denied_repo(|root| {
        std::fs::write(root.join("public.txt"), "hello public").unwrap();
        git(root, &["add", "."]);
        git(root, &["commit", "-q", "-m", "public"]);
        std::fs::write(root.join("private/key.txt"), SECRET).unwrap();
        git(root, &["add", "private/key.txt"]);
    })
}

/// `git_branch`'s `contains`/`not_contains` are revisions (`git branch --contains
/// <rev>`): `:private/key.txt` there names a denied file, and git's refusal ("object
/// <sha> is a blob, not a commit") hands out the blob's name, which `git_show` then
/// reads with no `:` in sight (object names are a documented residual; the revision
/// argument that names the file is not).
#[test]
fn review2_git_branch_contains_is_a_revision_the_acl_judges() {
    let (env, mut c, repo) = setup();
    let blob = git(&env.root, &["rev-parse", ":private/key.txt"]);
    let blob = blob.trim();
    for arg in ["contains", "not_contains"] {
        for rev in [":private/key.txt", ":0:private/key.txt", "HEAD:private"] {
            let r = c.call(
                "git_branch",
                json!({"repo_path": repo, "branch_type": "local", arg: rev}),
            );
            assert_eq!(code(&r).as_deref(), Some("acl_denied"), "{arg}={rev}: {r}");
            assert!(!r.to_string().contains(blob), "blob name leaked: {r}");
        }
    }
    // An ordinary use still works.
    let r = c.call(
        "git_branch",
        json!({"repo_path": repo, "branch_type": "local", "contains": "HEAD"}),
    );
    assert_eq!(code(&r), None, "{r}");
}

/// The argument-less diffs show what denied files hold now in the worktree and the index
/// (neither history nor a listing): judged by every tracked file, so refused while a
/// denied file is tracked, and a public change is still shown once it is not.
#[test]
fn review2_whole_tree_diffs_show_denied_files_not_in_history() {
    let (env, mut c, repo) = setup();
    let r = c.call("git_diff_staged", json!({"repo_path": repo}));
    assert!(!r.to_string().contains(SECRET), "staged secret shown: {r}");
    assert_eq!(code(&r).as_deref(), Some("acl_denied"), "{r}");
    std::fs::write(env.root.join("private/key.txt"), format!("{SECRET}-v2")).unwrap();
    let r = c.call("git_diff_unstaged", json!({"repo_path": repo}));
    assert!(!r.to_string().contains("-v2"), "worktree secret shown: {r}");
    assert_eq!(code(&r).as_deref(), Some("acl_denied"), "{r}");
    // Untracked again: the diffs run, and show the public change.
    git(
        &env.root,
        &["rm", "-q", "-f", "--cached", "private/key.txt"],
    );
    std::fs::write(env.root.join("public.txt"), "public change").unwrap();
    let r = c.call("git_diff_unstaged", json!({"repo_path": repo}));
    assert!(r.to_string().contains("public change"), "{r}");
    assert!(!r.to_string().contains(SECRET), "{r}");
}

/// The Python SDK (`MCPServer`) pre-parses a string argument holding JSON into a list
/// or object for any parameter not typed `str`: `paths: "[\"private/key.txt\"]"` is
/// the list `["private/key.txt"]` to the server. The ACL must judge what the server
/// reads (or refuse what it cannot), not the literal file name `["private/key.txt"]`.
#[test]
fn review2_a_json_string_standing_for_a_list_of_paths_is_judged_as_the_server_reads_it() {
    let python = peers().join("venv/bin/python").display().to_string();
    let server = fixture("read_many_server.py").display().to_string();
    let mut env =
        Env::with(&Vault::new("py", &[&python, &server, "$ROOT"]).acl_deny(&["private/**"]));
    env.start_tcd();
    std::fs::create_dir_all(env.root.join("private")).unwrap();
    std::fs::write(env.root.join("private/key.txt"), SECRET).unwrap();
    std::fs::write(env.root.join("public.txt"), "hello public").unwrap();
    let mut c = PyClient::start(&env.shim_argv("py"));
    let r = c.call("read_many", json!({"paths": ["public.txt"]}));
    assert!(r.to_string().contains("hello public"), "{r}");
    let r = c.call("read_many", json!({"paths": ["private/key.txt"]}));
    assert_eq!(code(&r).as_deref(), Some("acl_denied"), "{r}");
    for smuggled in [
        r#"["private/key.txt"]"#,
        r#" [ "public.txt", "private/key.txt" ] "#,
    ] {
        let r = c.call("read_many", json!({ "paths": smuggled }));
        assert!(
            !r.to_string().contains(SECRET),
            "{smuggled}: the secret leaked: {r}"
        );
        assert_eq!(code(&r).as_deref(), Some("acl_denied"), "{smuggled}: {r}");
    }
}

/// A hostile server's request ids are held until the client answers (`down_requests`,
/// 4 096 of them): each must be an id a request may carry (a string of at most 1 KiB,
/// a safe integer), as the client's are, or one server could make the shim hold 4 096
/// lines' worth of ids. A long one is refused back to the server, never shown.
#[test]
fn review2_a_server_request_with_an_overlong_id_is_refused_not_held() {
    let mut env = Env::with(&Vault::fixture("fr", "frame_server.py"));
    env.start_tcd();
    let mut s = Shim::start(&env.shim_argv("fr"), "warn", None);
    s.send_json(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "long_id_request",
                        "params": {"n": 100_000}}),
    );
    let (_, before) = s.until_id(&json!(1), "long_id_request");
    assert!(
        !before.iter().any(|v| v
            .get("method")
            .is_some_and(|m| m == "sampling/createMessage")),
        "the request reached the client: {:?}",
        before
            .iter()
            .map(|v| v["method"].clone())
            .collect::<Vec<_>>()
    );
    let got = loop {
        let v = s.recv("the server's report");
        if v["method"] == "got" {
            break v;
        }
    };
    assert_eq!(got["params"]["id_len"], 100_000, "{got}");
    assert_eq!(got["params"]["error"]["code"], -32600, "{got}");
    // An ordinary server request still reaches the client.
    s.send_json(
        &json!({"jsonrpc": "2.0", "id": 2, "method": "long_id_request",
                        "params": {"n": 10}}),
    );
    let (_, before) = s.until_id(&json!(2), "long_id_request");
    assert!(
        before
            .iter()
            .any(|v| v["method"] == "sampling/createMessage"),
        "{before:?}"
    );
}

/// review4 finding 1: `repo_path` may name the git dir itself (`<root>/.git`). GitPython opens it
/// (`is_git_dir`) with the work tree its parent, so `git diff --cached` shows the staged
/// denied file; the shim reads the same index but joins its entries to `<root>/.git`
/// (`covered_index(repo = path)`), judging `<root>/.git/private/key.txt`, which
/// `private/**` does not match.
#[test]
fn review4_a_whole_tree_diff_of_the_git_dir_is_judged_by_its_work_tree() {
    let (env, mut c, _) = setup();
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
    let (env, mut c, _) = setup();
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
