//! End to end: `resources/read` under the governor's cap. Python `mcp` client → real
//! tc-shim → real server-everything (static documents: judged by the answer's size) and
//! an MCP server on the real Python SDK that serves `file://` resources under the vault
//! root (judged by `stat()` before the server reads them). Refusals are plain
//! `invalid_input` JSON-RPC errors and are not governor truncations.

use tc_tests::shim as support;

use serde_json::{json, Value};
use support::*;

const CAP: u64 = 5000;

fn rpc_refusal(r: &Value, checked: &str) -> Value {
    assert_eq!(r["ok"], false, "expected a refusal: {r}");
    let e = &r["rpc_error"];
    assert_eq!(e["code"], -32602, "{r}");
    let d = &e["data"];
    assert_eq!(
        (
            d["code"].as_str(),
            d["reason"].as_str(),
            d["checked"].as_str()
        ),
        (Some("invalid_input"), Some("too_large"), Some(checked)),
        "{r}"
    );
    assert_eq!(d["limit"], CAP);
    assert!(
        e["message"].as_str().unwrap().starts_with("invalid_input:"),
        "{r}"
    );
    d.clone()
}

fn no_truncations(env: &Env) {
    assert!(
        env.tcctl_metrics()
            .contains("governor_truncations_total 0\n"),
        "{}",
        env.tcctl_metrics()
    );
    assert!(!event_kinds(&env.socket)
        .iter()
        .any(|k| k == "tc.governor.overflow"));
}

#[test]
fn shim_governor_resources_by_answer_size_on_server_everything() {
    let server =
        peers().join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let mut env = Env::new(&format!(
        "[governor]\nmax_response_bytes = {CAP}\n\n[[vaults]]\nid = \"ev\"\nroot = \"$ROOT\"\ncommand = [\"node\", \"{}\", \"stdio\"]\n",
        server.display()
    ));
    env.start_tcd();
    let mut c = PyClient::start_gov(false, &env.shim_argv("ev"));
    let list = c.op(json!({"op": "resources"}));
    let uris: Vec<String> = list["result"]["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .filter_map(|r| r["uri"].as_str().map(String::from))
        .collect();
    let doc = |name: &str| {
        uris.iter()
            .find(|u| u.ends_with(name))
            .unwrap_or_else(|| panic!("no {name} in {uris:?}"))
            .clone()
    };
    // extension.md (≈1 KB) is under the cap, structure.md (≈12 KB) over it.
    let small = doc("extension.md");
    let r = c.op(json!({"op": "read", "uri": small}));
    assert_eq!(r["ok"], true, "{r}");
    assert!(
        r["result"]["contents"][0]["text"].as_str().unwrap().len() > 500,
        "{r}"
    );
    let big = doc("structure.md");
    let r = c.op(json!({"op": "read", "uri": big}));
    let d = rpc_refusal(&r, "response");
    assert_eq!(d["uri"], big.as_str());
    assert!(d["bytes"].as_u64().unwrap() > CAP, "{d}");
    // The session goes on.
    let r = c.op(json!({"op": "read", "uri": small}));
    assert_eq!(r["ok"], true, "{r}");
    no_truncations(&env);
}

#[test]
fn shim_governor_file_resources_are_refused_by_stat_before_they_are_read() {
    let logdir = tempfile::tempdir().unwrap();
    let log = logdir.path().join("reads.log");
    let fixture = workspace().join("tests/fixtures/file_resources_server.py");
    let mut env = Env::new(&format!(
        "[governor]\nmax_response_bytes = {CAP}\n\n[[vaults]]\nid = \"files\"\nroot = \"$ROOT\"\ncommand = [\"{}\", \"{}\", \"$ROOT\", \"{}\"]\n",
        peers().join("venv/bin/python").display(),
        fixture.display(),
        log.display()
    ));
    std::fs::write(env.root.join("small.txt"), "a small file\n").unwrap();
    std::fs::write(env.root.join("big.txt"), "b".repeat(50_000)).unwrap();
    std::fs::write(env.root.join("big name.txt"), "c".repeat(20_000)).unwrap();
    // 4 000 bytes on disk, but every byte comes back as a 6-byte `\u0001` escape: only
    // the answer's size shows it is over the cap.
    std::fs::write(env.root.join("escapes.txt"), vec![1u8; 4000]).unwrap();
    env.start_tcd();
    let mut c = PyClient::start_gov(false, &env.shim_argv("files"));
    let uri = |name: &str| url_file(&env.root.join(name));

    let r = c.op(json!({"op": "read", "uri": uri("small.txt")}));
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["result"]["contents"][0]["text"], "a small file\n");
    for (name, size) in [("big.txt", 50_000), ("big name.txt", 20_000)] {
        let r = c.op(json!({"op": "read", "uri": uri(name)}));
        let d = rpc_refusal(&r, "stat");
        assert_eq!(d["bytes"], size, "{d}");
    }
    let r = c.op(json!({"op": "read", "uri": uri("escapes.txt")}));
    let d = rpc_refusal(&r, "response");
    assert!(d["bytes"].as_u64().unwrap() > 24_000, "{d}");

    let reads = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        reads.contains("small.txt") && reads.contains("escapes.txt"),
        "{reads}"
    );
    assert!(
        !reads.contains("big"),
        "refused by stat() means never read by the server: {reads}"
    );
    no_truncations(&env);
}

/// `file://` URI of an absolute path, spaces percent-encoded (as Python's `as_uri`).
fn url_file(p: &std::path::Path) -> String {
    format!("file://{}", p.display().to_string().replace(' ', "%20"))
}
