//! End to end, the gate's preview (issue 17 item 3): a Python `mcp` client → real tc-shim
//! → real server-filesystem, real tcd; the human reads the diff in `tcctl approve` and in
//! `tcctl pending --json`. New, binary, denied and escaping files are said, not shown.

use tc_tests::shim as support;

use tc_tests::elicit;
use tc_tests::guarded::printed as text;

use elicit::*;
use serde_json::{json, Value};
use support::*;

/// A personal-mode env (refusal route: the Python client is legacy, not opted in) whose
/// `write_file` gate declares the diff preview; `private/**` is denied.
fn started() -> (Env, Human) {
    let vault = Vault::filesystem("fs")
        .gate("write_file", "{ paths = [\"path\"] }")
        // A line of the gate's own table, after its `targets`.
        .key("preview = { diff = { path = \"path\", content = \"content\" } }")
        .acl_deny(&["private/**"]);
    let mut env = Env::with(&vault);
    env.start_tcd();
    let h = Human::python("legacy", &env.shim_argv("fs"));
    (env, h)
}

/// Calls `write_file(path, content)`; it must be refused with a raised request: its id.
#[track_caller]
fn raised(h: &mut Human, path: &str, content: &str) -> String {
    let r = h.call("write_file", json!({"path": path, "content": content}));
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
    request_id(&r)
}

/// The preview `tcctl pending --json` shows for request `id`.
#[track_caller]
fn pending_preview(env: &Env, id: &str) -> String {
    let o = env.tcd.tcctl(&["pending", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let row: Value = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["request_id"] == id)
        .unwrap_or_else(|| panic!("{id} not in {out}"));
    row["preview"].as_str().unwrap().to_string()
}

/// What `tcctl approve ID --yes` printed under `preview:`, up to the closing recap
/// (None: no preview section).
#[track_caller]
fn approve_shows(env: &Env, id: &str) -> Option<String> {
    let o = env.tcd.tcctl(&["approve", id, "--yes"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    // The recap of the request that closes the view (tests/tests/security/terminal.rs) is not preview.
    let out = out
        .split_once("=== you are approving")
        .map_or(&*out, |(v, _)| v);
    out.split_once("\npreview:\n").map(|(_, p)| p.to_string())
}

#[test]
fn a_write_to_an_existing_file_shows_exactly_its_diff_and_a_new_file_its_lines() {
    let (env, mut h) = started();
    std::fs::write(env.root.join("note.txt"), "one\ntwo\nthree\n").unwrap();
    let id = raised(&mut h, "note.txt", "one\n2\nthree\n\u{1b}[2Jfour\n");
    assert_eq!(
        pending_preview(&env, &id),
        "--- note.txt\n+++ note.txt (after the write)\n@@ -1,3 +1,4 @@\n one\n-two\n+2\n three\n+\u{1b}[2Jfour\n"
    );
    // tcctl shows it under the arguments, line by line, escaped (no colour: not a tty).
    assert_eq!(
        approve_shows(&env, &id).as_deref(),
        Some(
            "  --- note.txt\n  +++ note.txt (after the write)\n  @@ -1,3 +1,4 @@\n   one\n  -two\n  +2\n   three\n  +⟨U+001B⟩[2Jfour\n"
        )
    );
    // The approved retry writes what the preview said.
    let ok = h.call(
        "write_file",
        json!({"path": "note.txt", "content": "one\n2\nthree\n\u{1b}[2Jfour\n"}),
    );
    assert_ne!(ok["isError"], true, "{ok}");
    assert_eq!(
        disk(&env, "note.txt").as_deref(),
        Some("one\n2\nthree\n\u{1b}[2Jfour\n")
    );

    let id = raised(&mut h, "sub/new.md", "# Title\nbody\n");
    let want = "new file, 2 lines\n--- /dev/null\n+++ sub/new.md (after the write)\n@@ -0,0 +1,2 @@\n+# Title\n+body\n";
    assert_eq!(pending_preview(&env, &id), want);
    let shown: String = want.lines().map(|l| format!("  {l}\n")).collect();
    assert_eq!(approve_shows(&env, &id), Some(shown));
}

#[test]
fn binary_denied_and_escaping_files_show_nothing_of_their_content() {
    let (env, mut h) = started();
    std::fs::write(env.root.join("blob.bin"), b"\x89PNG\0\0BINARY-BYTES").unwrap();
    let id = raised(&mut h, "blob.bin", "text now\n");
    let p = pending_preview(&env, &id);
    assert_eq!(
        p,
        "binary file, not shown: blob.bin (now: 18 bytes; after the write: 9 bytes)"
    );
    assert_eq!(approve_shows(&env, &id), Some(format!("  {p}\n")));

    // Denied by the ACL, named directly or through a link inside the root: raised (the
    // ACL refuses the call only once it is approved), never read to be shown.
    std::fs::create_dir(env.root.join("private")).unwrap();
    std::fs::write(env.root.join("private/key.md"), "DENIED-SECRET\n").unwrap();
    std::os::unix::fs::symlink("private/key.md", env.root.join("alias.md")).unwrap();
    for path in ["private/key.md", "alias.md"] {
        let id = raised(&mut h, path, "overwrite\n");
        let p = pending_preview(&env, &id);
        assert!(
            p.starts_with("no preview: ") && p.contains("denied by the vault ACL"),
            "{path}: {p}"
        );
        let shown = approve_shows(&env, &id).unwrap();
        assert!(!shown.contains("SECRET"), "{path}: {shown}");
        let r = h.call(
            "write_file",
            json!({"path": path, "content": "overwrite\n"}),
        );
        assert_eq!(code(&r).as_deref(), Some("acl_denied"), "{r}");
    }
    assert_eq!(
        disk(&env, "private/key.md").as_deref(),
        Some("DENIED-SECRET\n")
    );

    // A link out of the root: refused before anything is raised; nothing from outside
    // reaches tcd.
    let outside = env.tmp.path().join("outside.md");
    std::fs::write(&outside, "OUTSIDE-SECRET\n").unwrap();
    std::os::unix::fs::symlink(&outside, env.root.join("out.md")).unwrap();
    let r = h.call("write_file", json!({"path": "out.md", "content": "x\n"}));
    assert_eq!(code(&r).as_deref(), Some("invalid_input"), "{r}");
    let all = env.tcd.tcctl(&["pending", "--json"]);
    let all = text(&all);
    assert!(!all.contains("OUTSIDE") && !all.contains("out.md"), "{all}");
    assert!(!all.contains("SECRET"), "{all}");
    assert_eq!(
        disk(&env, "../outside.md").as_deref(),
        Some("OUTSIDE-SECRET\n")
    );
}
