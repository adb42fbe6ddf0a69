//! Framing (issue 15, item 1): what a downstream reads is exactly what tc-shim judged.
//! A client line with a raw `\r` inside (Python's universal newlines split there) is
//! refused, never forwarded; a server line with one never reaches the client as its
//! bytes; U+0085, U+2028 and U+2029 are written as `\uXXXX` escapes both ways. A client
//! message naming a member twice is refused (a server may keep either duplicate).
//! Against the real mcp-server-git, a Python `mcp` 2.3 SDK server and stdlib fixtures.

use tc_tests::security as security_support;
use tc_tests::shim as support;

use security_support::Shim;
use serde_json::{json, Value};
use support::*;

/// `{"method":"notifications/x","params":\r<inner>\r}`: one JSON notification to serde_json,
/// three lines to a reader that also splits at `\r` (the middle one is `inner`).
fn smuggle(inner: &Value) -> Vec<u8> {
    format!("{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\",\"params\":\r{inner}\r}}")
        .into_bytes()
}

fn call(id: Value, name: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": name, "arguments": args}})
}

/// The refusals of lines with a raw inner `\r` among `lines`.
fn cr_refusals(lines: &[Value]) -> usize {
    lines
        .iter()
        .filter(|v| {
            v["error"]["code"] == -32600
                && v["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("carriage return"))
        })
        .count()
}

#[test]
fn framing_a_call_smuggled_behind_a_raw_cr_does_not_reach_mcp_server_git() {
    let gate = r#"{ git = "repo_path" }"#;
    let mut env = Env::with(
        &Vault::git("repo")
            .gate("git_commit", gate)
            .gate("git_reset", gate),
    );
    env.start_tcd();
    let root = env.root.clone();
    git_repo_with_base(&root);
    std::fs::write(root.join("a.txt"), "a").unwrap();
    git(&root, &["add", "a.txt"]);
    let repo = root.display().to_string();

    let mut s = Shim::start(&env.shim_argv("repo"), "warn", None);
    s.initialize();
    let commit = call(
        json!(99),
        "git_commit",
        json!({"repo_path": repo, "message": "smuggled"}),
    );
    let reset = call(json!(98), "git_reset", json!({"repo_path": repo}));
    s.send(&smuggle(&commit));
    s.send(&smuggle(&reset));
    // Something the server answers after whatever it read before it.
    s.send_json(&call(
        json!("after"),
        "git_status",
        json!({"repo_path": repo}),
    ));
    let (status, before) = s.until_id(&json!("after"), "git_status");
    assert!(status.get("result").is_some(), "{status}");
    assert_eq!(commits(&root), 1, "a smuggled git_commit ran unconfirmed");
    assert_eq!(
        git(&root, &["diff", "--cached", "--name-only"]).trim(),
        "a.txt",
        "a smuggled git_reset ran unconfirmed"
    );
    assert!(
        !before.iter().any(|v| v["id"] == 99 || v["id"] == 98),
        "{before:?}"
    );
    assert_eq!(cr_refusals(&before), 2, "each line is refused: {before:?}");
    assert!(
        before.iter().all(|v| v["id"].is_null()),
        "a notification is refused under id null: {before:?}"
    );
}

#[test]
fn framing_a_call_smuggled_behind_a_raw_cr_does_not_reach_a_python_sdk_server() {
    let python = peers().join("venv/bin/python").display().to_string();
    let server = fixture("touch_server.py").display().to_string();
    let mut env = Env::with(
        &Vault::new("py", &[&python, &server, "$ROOT"]).gate("touch", r#"{ paths = ["path"] }"#),
    );
    env.start_tcd();
    let mut s = Shim::start(&env.shim_argv("py"), "warn", None);
    s.initialize();
    s.send(&smuggle(&call(
        json!(7),
        "touch",
        json!({"path": "smuggled.txt"}),
    )));
    // The same bytes with the request's own id at the top: answered under it.
    let own = "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/call\",\"params\":\r\
               {\"name\":\"touch\",\"arguments\":{\"path\":\"own.txt\"}}}";
    s.send(own.as_bytes());
    let (eight, _) = s.until_id(&json!(8), "own id");
    assert_eq!(eight["error"]["code"], -32600, "{eight}");
    let r = s.call("after", "hello", json!({"who": "x"}));
    assert!(r.to_string().contains("hello x"), "{r}");
    assert!(
        !env.root.join("smuggled.txt").exists(),
        "a smuggled touch ran unconfirmed"
    );
    assert!(!env.root.join("own.txt").exists());
}

fn frame_env() -> Env {
    let mut env = Env::with(&Vault::fixture("fr", "frame_server.py"));
    env.start_tcd();
    env
}

/// Raw lines up to (and with) the answer to `id`.
fn raw_until(s: &mut Shim, id: &Value) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let l = s
            .lines
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("tc-shim stopped answering");
        let v: Value = serde_json::from_slice(&l).expect("every line is JSON");
        let done = v.get("id") == Some(id) && v.get("method").is_none();
        out.push(l);
        if done {
            return out;
        }
    }
}

fn no_raw_cr(lines: &[Vec<u8>]) {
    for l in lines {
        let body = l.strip_suffix(b"\n").unwrap_or(l);
        assert!(
            !body.contains(&b'\r'),
            "a raw \\r reached the client: {:?}",
            String::from_utf8_lossy(l)
        );
    }
}

#[test]
fn framing_a_server_line_with_a_raw_cr_never_reaches_the_client() {
    let env = frame_env();
    let mut s = Shim::start(&env.shim_argv("fr"), "warn", None);
    initialize_fixture(&mut s);

    let lines = raw_until(&mut s, &json!(1));
    no_raw_cr(&lines);
    // cr_notify: the notification is dropped, the answer comes.
    s.send_json(&json!({"jsonrpc": "2.0", "id": 2, "method": "cr_notify"}));
    let lines = raw_until(&mut s, &json!(2));
    no_raw_cr(&lines);
    assert_eq!(lines.len(), 1, "the notification is not passed on");

    // cr_answer: the waiting request gets an error instead of hanging.
    s.send_json(&json!({"jsonrpc": "2.0", "id": 3, "method": "cr_answer"}));
    let lines = raw_until(&mut s, &json!(3));
    no_raw_cr(&lines);
    let r: Value = serde_json::from_slice(lines.last().unwrap()).unwrap();
    assert_eq!(r["error"]["code"], -32603, "{r}");
    assert_text_at(&r, "/error/message", "carriage return");

    // cr_request: never shown to the client; the server's request is answered with an
    // error (the fixture reports that answer as `got`).
    s.send_json(&json!({"jsonrpc": "2.0", "id": 4, "method": "cr_request"}));
    let mut seen = raw_until(&mut s, &json!(4));
    no_raw_cr(&seen);
    let got = loop {
        if let Some(g) = seen
            .iter()
            .map(|l| serde_json::from_slice::<Value>(l).unwrap())
            .find(|v| v["method"] == "got")
        {
            break g;
        }
        seen = vec![s
            .lines
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap()];
        no_raw_cr(&seen);
    };
    let answer: Value = serde_json::from_str(got["params"]["raw"].as_str().unwrap()).unwrap();
    assert_eq!(answer["id"], "srv-cr");
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
}

/// The fixture needs no handshake; one plain request proves the pipe is up.
fn initialize_fixture(s: &mut Shim) {
    s.send_json(&json!({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {}}));
}

#[test]
fn framing_line_separators_are_escaped_both_ways_and_the_value_round_trips() {
    let env = frame_env();
    let mut s = Shim::start(&env.shim_argv("fr"), "warn", None);
    let text = "a\u{2028}b\u{2029}c\u{85}d";
    // Client → server: the line the server reads holds the escapes, not the characters.
    let msg = json!({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"s": text}});
    let line = serde_json::to_vec(&msg).unwrap();
    assert!(
        String::from_utf8_lossy(&line).contains('\u{2028}'),
        "sent raw"
    );
    s.send(&line);
    let lines = raw_until(&mut s, &json!(1));
    let r: Value = serde_json::from_slice(lines.last().unwrap()).unwrap();
    let raw = r["result"]["raw"].as_str().unwrap();
    for (c, esc) in [
        ('\u{2028}', r"\u2028"),
        ('\u{2029}', r"\u2029"),
        ('\u{85}', r"\u0085"),
    ] {
        assert!(
            !raw.contains(c) && raw.contains(esc),
            "the server read {raw:?}"
        );
    }
    assert_eq!(r["result"]["params"]["s"], text, "the value round-trips");

    // Server → client: raw separators in the answer are escaped too.
    s.send_json(&json!({"jsonrpc": "2.0", "id": 2, "method": "raw_seps"}));
    let lines = raw_until(&mut s, &json!(2));
    let last = lines.last().unwrap();
    let body = String::from_utf8_lossy(last);
    for c in ['\u{2028}', '\u{2029}', '\u{85}'] {
        assert!(!body.contains(c), "{c:?} reached the client raw: {body:?}");
    }
    let r: Value = serde_json::from_slice(last).unwrap();
    assert_eq!(r["result"]["s"], text, "{r}");
}

/// `{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{PARAMS}}` with `params` written
/// as raw text, so it can name a member twice.
fn raw_call(id: u64, params: &str) -> Vec<u8> {
    format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{{params}}}}}")
        .into_bytes()
}

fn duplicate_refused(s: &mut Shim, id: u64, name: &str) {
    let (r, _) = s.until_id(&json!(id), "a duplicate-member answer");
    assert_eq!(r["error"]["code"], -32600, "{r}");
    let m = r["error"]["message"].as_str().unwrap_or_default();
    assert!(
        m.contains(&format!("{name:?}")) && m.contains("twice"),
        "{r}"
    );
}

/// A server whose parser keeps the first duplicate: `{"name":"touch","name":"hello"}` was
/// judged as `hello` (ungated) and forwarded as it came, and the server ran `touch`.
#[test]
fn framing_a_message_naming_a_member_twice_is_refused_never_forwarded() {
    let mut env = Env::with(
        &Vault::fixture("fw", "first_wins_server.py").gate("touch", r#"{ paths = ["path"] }"#),
    );
    env.start_tcd();
    let mut s = Shim::start(&env.shim_argv("fw"), "warn", None);
    s.initialize();
    s.send(&raw_call(
        1,
        r#""name":"touch","name":"hello","arguments":{"path":"name.txt","who":"x"}"#,
    ));
    duplicate_refused(&mut s, 1, "name");
    s.send(&raw_call(
        2,
        r#""name":"touch","arguments":{"path":"first.txt","path":"second.txt"}"#,
    ));
    duplicate_refused(&mut s, 2, "path");
    // At the top: a ping to the shim that is a call to a first-wins server.
    s.send(
        br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","method":"ping","params":{"name":"touch","arguments":{"path":"method.txt"}}}"#,
    );
    duplicate_refused(&mut s, 3, "method");
    // A name in another letter case: the shim would bind `path`, the server touch `Path`.
    s.send(&raw_call(
        4,
        r#""name":"touch","arguments":{"path":"lower.txt","Path":"upper.txt"}"#,
    ));
    duplicate_refused(&mut s, 4, "Path");
    // Nothing was lost: the conversation goes on.
    let r = s.call("after", "hello", json!({"who": "y"}));
    assert!(r.to_string().contains("hello y"), "{r}");
    for f in [
        "name.txt",
        "first.txt",
        "second.txt",
        "method.txt",
        "upper.txt",
    ] {
        assert!(!env.root.join(f).exists(), "{f}: a touch ran unconfirmed");
    }
}
