//! Grants end to end: the Python `mcp` client (each era) → real tc-shim → real
//! server-filesystem, real tcd, and the human's real `tcctl approve --grant`, `tcctl
//! grants` and `tcctl revoke`. Every case checks what the client sees AND the disk.

use std::os::unix::fs::symlink;

use serde_json::{json, Value};
use tc_tests::elicit::{approve, disk, events_of, Human};
use tc_tests::guarded::printed as text;
use tc_tests::shim::{code, request_id, wait_until, Env};

/// write_file, create_directory and move_file (no grants) gated, `private/**` denied; tcd up; the
/// root holds notes/, other/ and notes/elsewhere → ../other (a way out of notes/).
fn env() -> Env {
    let server = tc_tests::shim::peers()
        .join("npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    let mut env = Env::new(&format!(
        r#"[[vaults]]
id = "fs"
root = "$ROOT"
command = ["node", "{}", "$ROOT"]

[[vaults.gates]]
tool = "write_file"
targets = {{ paths = ["path"] }}
max_grant_seconds = 3600

[[vaults.gates]]
tool = "create_directory"
targets = {{ paths = ["path"] }}

[[vaults.gates]]
tool = "move_file"
targets = {{ paths = ["source", "destination"] }}
grants = false
max_grant_uses = 3

[vaults.acl]
deny = ["private/**"]
"#,
        server.display()
    ));
    env.start_tcd();
    for d in ["notes", "other", "private"] {
        std::fs::create_dir(env.root.join(d)).unwrap();
    }
    symlink("../other", env.root.join("notes/elsewhere")).unwrap();
    env
}

fn write(path: &str, content: &str) -> Value {
    json!({ "path": path, "content": content })
}

fn tcctl(env: &Env, args: &[&str]) -> std::process::Output {
    env.tcd.tcctl(args)
}

/// The request waiting for `path` (from `tcctl pending --json`).
fn pending_id(env: &Env, path: &str) -> String {
    wait_until("the request is pending", || {
        let o = tcctl(env, &["pending", "--json"]);
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|p| {
                p["status"] == "pending" && p["summary"].as_str().is_some_and(|s| s.contains(path))
            })
            .map(|p| p["request_id"].as_str().unwrap().to_string())
    })
}

/// `tcctl approve ID --yes --grant` with `flags`; the grant id it printed.
#[track_caller]
fn grant(env: &Env, id: &str, flags: &[&str]) -> String {
    let mut args = vec!["approve", id, "--yes", "--grant"];
    args.extend_from_slice(flags);
    let o = tcctl(env, &args);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    let g = err
        .split_whitespace()
        .find(|w| w.starts_with("g-"))
        .unwrap_or_else(|| panic!("no grant id printed: {err}"))
        .trim_end_matches(':')
        .to_string();
    g
}

/// The grant `g` as `tcctl grants --json` shows it.
fn shown(env: &Env, g: &str) -> Value {
    env.tcd.grant_listed(g)
}

/// Calls `name` expecting no grant to cover it: a human is asked (the legacy client is
/// refused with a request id; the modern one is prompted, and the human declines) or the
/// ACL refuses it; either way nothing is written at `rel`.
#[track_caller]
fn not_covered(env: &Env, h: &mut Human, name: &str, args: Value, rel: &str) {
    let tag = h.start_call(name, args);
    let mut r = h.prompt_or_outcome(&tag);
    if r.get("prompt").is_some() {
        h.answer(json!({ "action": "decline" }));
        r = h.outcome(&tag);
    }
    let r = &r["result"];
    assert_eq!(r["isError"], true, "{r}");
    assert!(code(r).is_some(), "{r}");
    assert_eq!(disk(env, rel), None, "{rel} was written: {r}");
}

/// A legacy client whose first write (notes/a.md) was refused, approved with a grant on
/// `notes/**` with any content, and then run: the client and the grant's id.
fn legacy_granted(env: &Env) -> (Human, String) {
    let mut h = Human::python("legacy", &env.shim_argv("fs"));
    let first = write("notes/a.md", "a");
    let r = h.call("write_file", first.clone());
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
    let g = grant(
        env,
        &request_id(&r),
        &["--path", "path=notes/**", "--any", "content"],
    );
    let ok = h.call("write_file", first);
    assert_ne!(ok["isError"], true, "{ok}");
    assert_eq!(disk(env, "notes/a.md").as_deref(), Some("a"));
    (h, g)
}

/// A legacy client (no in-protocol route): the first write is refused with a request id;
/// the human approves it with a grant; the retry and every covered write run without
/// asking; what the grant does not cover is refused, and a revoke ends it.
#[test]
fn a_grant_on_notes_lets_ten_writes_through_and_nothing_else_legacy() {
    let env = env();
    let (mut h, g) = legacy_granted(&env);
    covered_then_revoked(&env, &mut h, &g);
}

/// The same with the 2026-07-28 client: the first call's round is answered after the
/// human approved its request with a grant; later covered calls get no round at all.
#[test]
fn a_grant_on_notes_lets_ten_writes_through_and_nothing_else_modern() {
    let env = env();
    let mut h = Human::python("modern", &env.shim_argv("fs"));
    let tag = h.start_call("write_file", write("notes/a.md", "a"));
    let _prompt = h.prompt();
    let g = grant(
        &env,
        &pending_id(&env, "notes/a.md"),
        &["--path", "path=notes/**", "--any", "content"],
    );
    h.answer(approve());
    let ok = h.result(&tag);
    assert_ne!(ok["isError"], true, "{ok}");
    covered_then_revoked(&env, &mut h, &g);
}

/// Ten covered writes run with no prompt, each logged with its fingerprint; then the
/// calls the grant must not cover; then a revoke.
fn covered_then_revoked(env: &Env, h: &mut Human, g: &str) {
    for i in 0..10 {
        let rel = format!("notes/n{i}.md");
        let r = h.call("write_file", write(&rel, &format!("body {i}")));
        assert_ne!(r["isError"], true, "{rel}: {r}");
        assert_eq!(disk(env, &rel), Some(format!("body {i}")));
    }
    let used: Vec<_> = tc_tests::shim::all_events(&env.socket)
        .into_iter()
        .filter(|e| e.kind == "tc.grant.used")
        .collect();
    assert_eq!(used.len(), 10);
    assert!(used
        .iter()
        .all(|e| e.state_fp.len() == 64 && e.detail_json.contains(g)));
    assert_eq!(shown(env, g)["used"], 10);
    // Denied by the ACL first; escaping the root; out of notes/ through a symlink in it;
    // another gated tool.
    for (rel, on_disk) in [
        ("private/x.md", "private/x.md"),
        ("../x.md", "../x.md"),
        ("notes/elsewhere/x.md", "other/x.md"),
        ("other/y.md", "other/y.md"),
    ] {
        not_covered(env, h, "write_file", write(rel, "no"), on_disk);
    }
    let dir = json!({ "path": "notes/dir" });
    not_covered(env, h, "create_directory", dir, "notes/dir");
    assert_eq!(events_of(env, "tc.grant.used"), 10);
    // Revoked: the next call it would have covered asks a human again.
    let o = tcctl(env, &["revoke", g]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(shown(env, g)["status"], "revoked");
    not_covered(
        env,
        h,
        "write_file",
        write("notes/late.md", "no"),
        "notes/late.md",
    );
}

/// A use count and an expiry end a grant: the calls after them ask a human; `tcctl
/// grants` shows each state.
#[test]
fn a_grant_ends_after_its_uses_and_after_its_time() {
    let env = env();
    let mut h = Human::python("legacy", &env.shim_argv("fs"));
    let r = h.call("write_file", write("notes/a.md", "a"));
    let g = grant(
        &env,
        &request_id(&r),
        &[
            "--path",
            "path=notes/*.md",
            "--any",
            "content",
            "--uses",
            "2",
        ],
    );
    assert_ne!(
        h.call("write_file", write("notes/a.md", "a"))["isError"],
        true
    );
    for rel in ["notes/b.md", "notes/c.md"] {
        assert_ne!(
            h.call("write_file", write(rel, "x"))["isError"],
            true,
            "{rel}"
        );
    }
    // `*` stays within notes/; the uses are gone anyway.
    not_covered(
        &env,
        &mut h,
        "write_file",
        write("notes/d.md", "x"),
        "notes/d.md",
    );
    assert_eq!(shown(&env, &g)["status"], "used up");

    let r = h.call("write_file", write("notes/e.md", "e"));
    let g = grant(
        &env,
        &request_id(&r),
        &["--path", "path=notes/**", "--any", "content", "--for", "1s"],
    );
    wait_until("the grant expired", || {
        (shown(&env, &g)["status"] == "expired").then_some(())
    });
    not_covered(
        &env,
        &mut h,
        "write_file",
        write("notes/f.md", "x"),
        "notes/f.md",
    );
    // Longer than the gate allows: refused by name, nothing approved.
    let r = h.call("write_file", write("notes/g.md", "g"));
    let o = tcctl(
        &env,
        &[
            "approve",
            &request_id(&r),
            "--yes",
            "--grant",
            "--for",
            "2h",
        ],
    );
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("grant_refused") && text(&o).contains("3600"),
        "{}",
        text(&o)
    );
    not_covered(
        &env,
        &mut h,
        "write_file",
        write("notes/g.md", "g"),
        "notes/g.md",
    );
}

/// A gate that forbids grants is named when one is asked for, and nothing is approved;
/// `tcctl policy check` shows each gate's grant rule.
#[test]
fn a_gate_that_forbids_grants_is_named_and_policy_check_shows_each_rule() {
    let env = env();
    let o = tcctl(&env, &["policy", "check"]);
    let shown = text(&o);
    assert!(o.status.success(), "{shown}");
    for want in [
        "gate write_file: paths path\n    grants: allowed, at most 3600 s",
        "gate create_directory: paths path\n    grants: allowed, at most 28800 s",
        "gate move_file: paths source, destination\n    grants: forbidden (grants = false)",
    ] {
        assert!(shown.contains(want), "{want}: {shown}");
    }
    std::fs::write(env.root.join("notes/a.md"), "a").unwrap();
    let mut h = Human::python("legacy", &env.shim_argv("fs"));
    let mv = json!({ "source": "notes/a.md", "destination": "notes/b.md" });
    let r = h.call("move_file", mv.clone());
    let id = request_id(&r);
    let o = tcctl(
        &env,
        &["approve", &id, "--yes", "--grant", "--any", "destination"],
    );
    assert!(!o.status.success(), "{}", text(&o));
    let why = text(&o);
    assert!(
        why.contains("grant_refused")
            && why.contains("move_file")
            && why.contains("grants = false"),
        "{why}"
    );
    // Nothing was approved: the identical retry asks again.
    let again = h.call("move_file", mv);
    assert_eq!(code(&again).as_deref(), Some("elicit_required"), "{again}");
    assert_eq!(disk(&env, "notes/a.md").as_deref(), Some("a"));
}

/// ATTACK (grants-attack branch): tcd takes a raise's `real_paths` on the raiser's word,
/// and any process of the human's uid may raise (in guarded mode too: the agent with the
/// human's shell). The model's call of other/z.md is waiting; the agent raises the same
/// call (binding and fingerprint from `pending --json`) straight to tcd, claiming its
/// path leads to notes/z.md, so the grant on notes/** approves it. The model's retry
/// through the shim must not run under that approval: it is still not covered, and
/// nothing is written.
#[test]
fn a_raise_with_forged_real_paths_does_not_let_the_shims_call_run() {
    let env = env();
    let (mut h, g) = legacy_granted(&env);
    let evil = write("other/z.md", "pwned");
    let r = h.call("write_file", evil.clone());
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
    let id = request_id(&r);
    let o = tcctl(&env, &["pending", "--json"]);
    let p = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|p| p["request_id"] == id.as_str())
        .expect("the waiting request");
    let s = |k: &str| p[k].as_str().unwrap().to_string();
    let binding = tc_proto::v1::Binding {
        vault: s("vault"),
        tool: s("tool"),
        caller: s("caller"),
        args_hash: s("args_hash"),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let forged = rt.block_on(async {
        let mut c = tc_proto::v1::confirm_client::ConfirmClient::new(
            tc_proto::connect(&env.socket).await.unwrap(),
        );
        let lie = tc_proto::v1::RealPaths {
            paths: vec!["notes/z.md".into()],
            outside: false,
        };
        c.raise(tc_proto::v1::RaiseRequest {
            binding: Some(binding),
            state_fp: s("state_fp"),
            summary: "write_file".into(),
            args_json: evil.to_string(),
            real_paths: [("path".to_string(), lie)].into(),
            ..Default::default()
        })
        .await
        .expect("the forged raise")
        .into_inner()
    });
    // The grant judged the lie (tcd cannot see the files)...
    assert_eq!(forged.grant_id, g, "{forged:?}");
    // ...but the shim does not run its own call under that approval.
    let r = h.call("write_file", evil);
    assert_eq!(
        r["isError"], true,
        "the forged approval ran other/z.md: {r}"
    );
    assert_eq!(disk(&env, "other/z.md"), None);
}

/// ATTACK (grants-attack branch): symlinks that the path resolver read lexically.
/// `notes/lx` → `../private/sub/../../notes/x.md`, dangling, with `private/sub` → `d1/d2`:
/// `..` applied to the text says notes/x.md; the kernel steps through `private/sub` first
/// and lands in private/notes/x.md. Also a dangling link out of notes/ and a loop.
#[test]
fn symlinks_read_lexically_dangling_or_looping_are_not_covered() {
    let env = env();
    std::fs::create_dir_all(env.root.join("private/d1/d2")).unwrap();
    std::fs::create_dir_all(env.root.join("private/notes")).unwrap();
    symlink("d1/d2", env.root.join("private/sub")).unwrap();
    symlink("../private/sub/../../notes/x.md", env.root.join("notes/lx")).unwrap();
    symlink("../other/new.md", env.root.join("notes/dang")).unwrap();
    symlink("loop", env.root.join("notes/loop")).unwrap();
    let (mut h, _) = legacy_granted(&env);
    // Judged where the kernel leads it (private/, denied), not where its text reads;
    // before, the grant covered it and only server-filesystem's own check refused it.
    not_covered(
        &env,
        &mut h,
        "write_file",
        write("notes/lx", "through"),
        "private/notes/x.md",
    );
    not_covered(
        &env,
        &mut h,
        "write_file",
        write("notes/dang", "no"),
        "other/new.md",
    );
    let r = h.call("write_file", write("notes/loop", "no"));
    assert_eq!(r["isError"], true, "{r}");
}
