//! Raw JSON-RPC through the real tc-shim in front of a stdlib-only fixture server:
//! byte-for-byte forwarding, malformed input, id spaces, floors, child exit status.

use tc_tests::shim as support;

use std::io::Write;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};
use support::*;

struct Raw {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Raw {
    fn start(env: &Env) -> Raw {
        let fixture = fixture("echo_server.py");
        let argv = env.shim_argv_inline("echo", &["python3".into(), fixture.display().to_string()]);
        let mut child = spawn_piped(&mut argv_command(&argv), Stdio::inherit()).unwrap();
        let stdin = child.stdin.take();
        let lines = lines_of(child.stdout.take().unwrap());
        Raw {
            child,
            stdin,
            lines,
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        let s = self.stdin.as_mut().unwrap();
        s.write_all(bytes).unwrap();
        s.write_all(b"\n").unwrap();
        s.flush().unwrap();
    }

    /// Sends `method` (no params) as request `id` and returns its answer.
    fn ask(&mut self, id: u32, method: &str) -> Value {
        self.send(
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {}})
                .to_string()
                .as_bytes(),
        );
        let r = self.json();
        assert_eq!(r["id"], id, "{r}");
        r
    }

    fn line(&mut self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(20))
            .expect("a line from tc-shim")
    }

    fn json(&mut self) -> Value {
        serde_json::from_str(&self.line()).unwrap()
    }
}

fn env() -> Env {
    Env::with(&Vault::bare("echo").gate_when(
        "hello",
        r#"{ equals = { arg = "who", value = "boss" } }"#,
        r#""none""#,
    ))
}

#[test]
fn shim_transport_forwards_bytes_and_refuses_garbage() {
    let env = env();
    let mut s = Raw::start(&env);

    // Malformed input: JSON-RPC errors with id null, never forwarded, never a crash.
    s.send(b"{not json");
    let r = s.json();
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].clone()),
        (Value::Null, json!(-32700)),
        "{r}"
    );
    s.send(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\",\"params\":\"\xff\xfe\"}");
    let r = s.json();
    assert_eq!(r["error"]["code"], -32700, "invalid UTF-8: {r}");
    s.send(b"[1,2]");
    assert_eq!(s.json()["error"]["code"], -32600);

    // Unknown method and unknown fields reach the server byte-for-byte.
    let sent = r#"{"jsonrpc":"2.0","id":5,"method":"echo","params":{"z":1,"a":[1.50,"é"]},"extra":{"keep":true}}"#;
    s.send(sent.as_bytes());
    let r = s.json();
    assert_eq!(r["id"], 5);
    assert_eq!(r["result"]["raw"], sent);

    // Server→client requests pass through unchanged; the client's answer reaches the server.
    s.send(br#"{"jsonrpc":"2.0","id":6,"method":"trigger"}"#);
    let req = s.line();
    assert_eq!(
        req,
        r#"{"jsonrpc": "2.0", "id": 0, "method": "sampling/createMessage", "params": {"x": 1}, "unknownField": [1, {"b": null}]}"#
    );
    assert_eq!(s.json()["id"], 6);
    let answer = r#"{"jsonrpc":"2.0","id":0,"result":{"model":"m","odd":[true]}}"#;
    s.send(answer.as_bytes());
    let got = s.json();
    assert_eq!(got["method"], "got");
    assert_eq!(got["params"]["raw"], answer);

    // A tools/call before any tools/list: the shim lists tools itself (never shown to
    // the client) and refuses the ungated destructive tool without forwarding it.
    s.send(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"nuke","arguments":{}}}"#);
    let r = s.json();
    assert_eq!(
        r["id"], 7,
        "only the answer to id 7 reaches the client: {r}"
    );
    assert_eq!(
        r["result"]["structuredContent"]["code"], "gate_not_configured",
        "{r}"
    );

    // tools/list: the floor tool is hidden, the gated one advertises elicit_token.
    s.send(br#"{"jsonrpc":"2.0","id":"L","method":"tools/list"}"#);
    let r = s.json();
    let tools = r["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "{r}");
    assert_eq!(tools[0]["name"], "hello");
    assert_eq!(
        tools[0]["inputSchema"]["properties"]["elicit_token"]["type"],
        "string"
    );

    // A gated tool whose `when` does not hold passes straight through, elicit_token stripped.
    s.send(br#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"hello","arguments":{"who":"me","elicit_token":"x"}}}"#);
    let r = s.json();
    let forwarded: Value =
        serde_json::from_str(r["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(forwarded["params"]["arguments"], json!({"who": "me"}));
    // ... and when it holds, nothing is forwarded without a daemon: fail closed.
    s.send(br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"hello","arguments":{"who":"boss"}}}"#);
    let r = s.json();
    assert_eq!(r["id"], 9);
    assert_eq!(
        r["result"]["structuredContent"]["code"], "confirmation_unavailable",
        "{r}"
    );

    // Oversized lines are refused cleanly and the session goes on.
    let mut big = br#"{"jsonrpc":"2.0","id":10,"method":"echo","params":""#.to_vec();
    big.resize(17 * 1024 * 1024, b'a');
    big.extend_from_slice(b"\"}");
    s.send(&big);
    let r = s.json();
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].clone()),
        (Value::Null, json!(-32600)),
        "{r}"
    );
    s.send(br#"{"jsonrpc":"2.0","id":11,"method":"echo"}"#);
    assert_eq!(s.json()["id"], 11);

    // Child exit: the pending call gets an error and the shim exits with the child's status.
    s.send(br#"{"jsonrpc":"2.0","id":12,"method":"hang"}"#);
    s.send(br#"{"jsonrpc":"2.0","id":13,"method":"exit"}"#);
    let mut ids = [s.json(), s.json()];
    ids.sort_by_key(|v| v["id"].as_i64());
    assert_eq!(ids[0]["id"], 12);
    assert_eq!(ids[0]["error"]["code"], -32603);
    assert_eq!(ids[1]["id"], 13);
    let status = s.child.wait().unwrap();
    assert_eq!(status.code(), Some(7));
    drop(s.stdin.take());
}

#[test]
fn shim_transport_client_eof_ends_the_session() {
    let env = env();
    let mut s = Raw::start(&env);
    s.send(br#"{"jsonrpc":"2.0","id":1,"method":"echo"}"#);
    assert_eq!(s.json()["id"], 1);
    drop(s.stdin.take());
    let status = s.child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "the fixture exits 0 at EOF and the shim passes that on"
    );
}

#[test]
fn shim_transport_a_destructive_tool_added_later_is_still_a_floor() {
    let env = env();
    let mut s = Raw::start(&env);
    // The shim learns the tool list (nuke, hello) from the client's own tools/list.
    s.send(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#);
    let listed = s.json();
    assert_eq!(listed["id"], 1, "{listed}");
    // The server grows a destructive tool the shim's cache has never seen.
    s.send(br#"{"jsonrpc":"2.0","id":2,"method":"add_tool"}"#);
    assert_eq!(s.json()["id"], 2);
    s.send(br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"wipe","arguments":{}}}"#);
    let r = s.json();
    assert_eq!(r["id"], 3, "{r}");
    // Refused by the shim (re-listed, saw destructiveHint), not the fixture's echo of the call.
    assert_eq!(
        r["result"]["structuredContent"]["code"], "gate_not_configured",
        "{r}"
    );
    assert_eq!(r["result"]["isError"], true, "{r}");
    drop(s.stdin.take());
}

/// The answer to `tools/call tidy`: forwarded (the fixture echoes the call) or the
/// shim's refusal code.
/// The echo scene after the fixture ran `step` (a change to its tool list) and the shim
/// listed the tools again.
fn listed_after(step: &str) -> (Env, Raw) {
    let env = env();
    let mut s = Raw::start(&env);
    s.ask(1, step);
    s.ask(2, "tools/list");
    (env, s)
}

fn call_tidy(s: &mut Raw, id: u32) -> Result<(), String> {
    s.send(
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"tidy","arguments":{{}}}}}}"#)
            .as_bytes(),
    );
    let r = s.json();
    assert_eq!(r["id"], id, "{r}");
    match r["result"]["structuredContent"]["code"].as_str() {
        Some(code) => Err(code.to_string()),
        None => {
            assert_text_at(&r, "/result/content/0/text", "tidy");
            Ok(())
        }
    }
}

#[test]
fn shim_transport_list_changed_makes_the_floor_see_a_tool_turned_destructive() {
    let (_env, mut s) = listed_after("add_tidy");
    assert_eq!(call_tidy(&mut s, 3), Ok(()), "a plain tool is forwarded");
    s.send(br#"{"jsonrpc":"2.0","id":4,"method":"harden_tidy"}"#);
    let note = s.json();
    assert_eq!(note["method"], "notifications/tools/list_changed", "{note}");
    assert_eq!(s.json()["id"], 4);
    // The client has not re-listed; the shim must not judge `tidy` by its old definition.
    assert_eq!(call_tidy(&mut s, 5), Err("gate_not_configured".into()));
}

#[test]
fn shim_transport_a_tool_listed_twice_is_a_floor_if_either_is_destructive() {
    let (_env, mut s) = listed_after("dup_tidy");
    assert_eq!(call_tidy(&mut s, 3), Err("gate_not_configured".into()));
}

#[test]
fn shim_transport_a_tools_call_without_an_id_is_never_forwarded() {
    let env = env();
    let mut s = Raw::start(&env);
    // `"id": null` is answered as an invalid request; no id at all (a notification) is
    // dropped. Neither reaches the server, which would echo it back as a tools/call answer.
    s.send(br#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"nuke","arguments":{}}}"#);
    let r = s.json();
    assert_eq!(r["id"], Value::Null, "{r}");
    assert_eq!(r["error"]["code"], -32600, "{r}");
    s.send(br#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"nuke","arguments":{}}}"#);
    s.send(br#"{"jsonrpc":"2.0","id":"after","method":"echo"}"#);
    let r = s.json();
    assert_eq!(
        r["id"], "after",
        "the dropped call produced something first: {r}"
    );
    assert!(r["result"]["raw"].as_str().unwrap().contains("echo"), "{r}");
}

#[test]
fn shim_transport_a_gated_call_cannot_carry_tc_fields_the_hash_leaves_out() {
    let env = env();
    let mut s = Raw::start(&env);
    // `who = "boss"` makes hello gated; `cursor`, `requestState` and `inputResponses` are
    // not part of the args_hash, so an approval would not cover them.
    for field in ["cursor", "requestState", "inputResponses"] {
        let call = json!({"jsonrpc": "2.0", "id": field, "method": "tools/call",
            "params": {"name": "hello", "arguments": {"who": "boss", field: "EVIL"}}});
        s.send(call.to_string().as_bytes());
        let r = s.json();
        assert_eq!(r["id"], field, "{r}");
        assert_eq!(r["result"]["isError"], true, "{r}");
        assert_eq!(
            r["result"]["structuredContent"]["code"], "invalid_input",
            "{r}"
        );
        assert_eq!(
            r["result"]["structuredContent"]["details"]["argument"], field,
            "{r}"
        );
    }
    // Ungated, the same argument is the tool's own business and is forwarded.
    s.send(br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"hello","arguments":{"who":"x","cursor":"c1"}}}"#);
    let r = s.json();
    assert_text_at(&r, "/result/content/0/text", "c1");
}

#[test]
fn shim_transport_ids_in_the_shims_namespace_are_refused_both_ways() {
    let env = env();
    let mut s = Raw::start(&env);
    s.send(br#"{"jsonrpc":"2.0","id":"tc-shim-1","method":"echo"}"#);
    let r = s.json();
    assert_eq!(r["id"], "tc-shim-1", "{r}");
    assert_eq!(r["error"]["code"], -32600, "{r}");
    // A server request in the shim's prompt namespace never reaches the client; the
    // server gets an error (the fixture reports it back as a `got` notification).
    s.send(br#"{"jsonrpc":"2.0","id":7,"method":"trigger_reserved"}"#);
    let (got, answer) = ordered_by(s.json(), s.json(), |m| m.get("method").is_some());
    assert_eq!(answer["id"], 7, "{answer}");
    assert_eq!(
        got["method"], "got",
        "the request reached the client: {got}"
    );
    let raw: Value = serde_json::from_str(got["params"]["raw"].as_str().unwrap()).unwrap();
    assert_eq!(raw["id"], "tc-shim-elicit-1", "{raw}");
    assert_eq!(raw["error"]["code"], -32600, "{raw}");
}

#[test]
fn shim_transport_an_ungated_call_of_a_gated_tool_reaches_the_server_as_judged() {
    let env = env();
    let mut s = Raw::start(&env);
    // Duplicate keys: serde_json reads the last (`who = "x"`: the gate's condition does
    // not hold), a parser keeping the first would act on `"boss"` unconfirmed. Such a
    // message is refused, never forwarded in any form.
    s.send(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"hello","arguments":{"who":"boss","who":"x"}}}"#);
    let r = s.json();
    assert_eq!(r["id"], 1, "{r}");
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert!(r.to_string().contains("twice"), "{r}");
    // The gate still judges the plain call as before: `who = "x"` runs unconfirmed.
    s.send(br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"hello","arguments":{"who":"x"}}}"#);
    let r = s.json();
    let raw = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        raw.contains(r#""who":"x""#) && !raw.contains("boss"),
        "{raw}"
    );
}

#[test]
fn shim_transport_a_reused_id_of_a_call_in_flight_is_refused() {
    let env = env();
    let mut s = Raw::start(&env);
    // Two calls with one id in a single write: the first is still held (the shim lists
    // the tools before deciding) when the second arrives.
    let call = r#"{"jsonrpc":"2.0","id":"dup","method":"tools/call","params":{"name":"hello","arguments":{"who":"x"}}}"#;
    s.send(format!("{call}\n{call}").as_bytes());
    let (a, b) = (s.json(), s.json());
    let (err, ok) = if a.get("error").is_some() {
        (a, b)
    } else {
        (b, a)
    };
    assert_eq!(err["id"], "dup", "{err}");
    assert_eq!(err["error"]["code"], -32600, "{err}");
    assert!(err["error"]["message"]
        .as_str()
        .unwrap()
        .contains("already in use"));
    assert_eq!(ok["id"], "dup", "{ok}");
    assert_text_at(&ok, "/result/content/0/text", "hello");
    // The id is free again once answered.
    s.send(call.as_bytes());
    assert!(s.json().get("result").is_some());
}
