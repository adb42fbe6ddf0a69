//! Issue 15 §2: the server acts inside the vault root, whatever the client says about
//! roots. Real tc-shim and tcd in front of server-filesystem and a Python `mcp` 2.3 server,
//! driven by the Python SDK client declaring roots, and by a raw client.

use tc_tests::shim as shim_support;

use serde_json::{json, Value};
use shim_support::*;

fn text(r: &Value) -> String {
    r["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// `tests/fixtures/roots_server.py` (Python `mcp` 2.3 SDK) as the vault's downstream.
fn asker() -> Vault {
    let python = peers().join("venv/bin/python").display().to_string();
    let server = fixture("roots_server.py").display().to_string();
    Vault::new("roots", &[&python, &server])
}

fn file_uri(p: &std::path::Path) -> String {
    format!("file://{}", p.display())
}

/// An editor declaring its workspace (here a folder outside the vault) as roots: the
/// filesystem server keeps the vault root, so a relative write the shim judged on the
/// vault's copy lands in the vault, and `roots/list_changed` does not re-point it.
#[test]
fn an_editor_s_roots_do_not_repoint_the_filesystem_server() {
    let mut env = Env::with(&Vault::filesystem("notes").gate_overwrites("write_file"));
    env.start_tcd();
    let outside = env.tmp.path().canonicalize().unwrap().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("new.md"), "outside's own file").unwrap();
    let mut c = PyClient::start_roots(false, &file_uri(&outside), &env.shim_argv("notes"));
    let dirs = text(&c.call("list_allowed_directories", json!({})));
    assert!(dirs.contains(&env.root.display().to_string()), "{dirs}");
    assert!(
        !dirs.contains("outside"),
        "the client's roots re-pointed the server: {dirs}"
    );
    // Judged on vault/new.md (absent: no overwrite, no confirmation) and run there.
    let w = c.call(
        "write_file",
        json!({"path": "new.md", "content": "written"}),
    );
    assert_ne!(w["isError"], json!(true), "{w}");
    assert_eq!(
        std::fs::read_to_string(env.root.join("new.md")).unwrap(),
        "written"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("new.md")).unwrap(),
        "outside's own file",
        "an overwrite outside the vault ran unconfirmed"
    );
    let changed = c.op(json!({"op": "roots_changed"}));
    assert_eq!(changed["ok"], true, "{changed}");
    let dirs = text(&c.call("list_allowed_directories", json!({})));
    assert!(
        !dirs.contains("outside"),
        "roots/list_changed re-pointed the server: {dirs}"
    );
}

/// Roots pointing into a denied folder would make `key.txt` mean `private/key.txt`,
/// which the ACL judged as a harmless top-level name.
#[test]
fn roots_cannot_turn_a_denied_folder_into_the_root() {
    let mut env = Env::with(&Vault::filesystem("notes").acl_deny(&["private/**"]));
    env.start_tcd();
    std::fs::create_dir_all(env.root.join("private")).unwrap();
    std::fs::write(env.root.join("private/key.txt"), "SECRET-KEY").unwrap();
    let mut c = PyClient::start_roots(
        false,
        &file_uri(&env.root.join("private")),
        &env.shim_argv("notes"),
    );
    let r = c.call("read_text_file", json!({"path": "key.txt"}));
    assert!(
        !text(&r).contains("SECRET-KEY"),
        "a denied file was read: {r}"
    );
    let direct = c.call("read_text_file", json!({"path": "private/key.txt"}));
    assert_eq!(code(&direct).as_deref(), Some("acl_denied"), "{direct}");
}

/// A server that asks `roots/list` whatever the client declared is answered by the shim
/// with the vault root; the question never reaches the client, and an answer the client
/// makes up for it is not forwarded.
#[test]
fn the_shim_answers_roots_list_with_the_vault_root() {
    let env = Env::with(&asker());
    let mut c = RawClient::start(&env.shim_argv("roots"));
    c.request(
        json!("init"),
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {"roots": {"listChanged": true}},
               "clientInfo": {"name": "raw", "version": "1"}}),
    );
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    // A made-up answer to the server's first question, sent before it is asked.
    c.send(&json!({"jsonrpc": "2.0", "id": 0, "result": {"roots": [{"uri": "file:///"}]}}));
    c.send(&json!({"jsonrpc": "2.0", "id": 1, "result": {"roots": [{"uri": "file:///"}]}}));
    c.send(&json!({"jsonrpc": "2.0", "id": "t", "method": "tools/call",
                   "params": {"name": "told", "arguments": {}}}));
    let told = c.recv();
    assert_eq!(told["id"], "t", "the client was asked something: {told}");
    assert_eq!(text(&told["result"]), "no roots", "{told}");
    // Neither as a notification nor dressed as a request does list_changed go through.
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}));
    let r = c.request(json!("lc"), "notifications/roots/list_changed", json!({}));
    assert_eq!(r["error"]["code"], -32600, "{r}");
    c.send(&json!({"jsonrpc": "2.0", "id": "w", "method": "tools/call",
                   "params": {"name": "where", "arguments": {}}}));
    let got = c.recv();
    assert_eq!(got["id"], "w", "the client was asked something: {got}");
    assert_eq!(text(&got["result"]), file_uri(&env.root), "{got}");
}

/// On 2026-07-28 every request carries the client's capabilities in `_meta`: the roots
/// capability is removed from what the server sees there too.
#[test]
fn a_modern_request_does_not_tell_the_server_about_roots() {
    let env = Env::with(&asker());
    let mut c = PyClient::start_roots(true, "file:///", &env.shim_argv("roots"));
    assert_eq!(c.hello["era"], "modern", "{}", c.hello);
    let r = c.call("told", json!({}));
    assert_eq!(text(&r), "no roots", "{r}");
}
