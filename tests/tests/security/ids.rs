//! Request ids (issue 15, item 7): matched by JSON value, refused when a downstream could
//! echo them as another value, and held in a bounded table. A `3.0` id once escaped the
//! byte cap (server-filesystem answers it as `3`) and left a pending entry forever.

use tc_tests::security as security_support;
use tc_tests::shim as support;

use std::io::Write;
use std::time::Duration;

use security_support::Shim;
use serde_json::{json, Value};
use support::*;

const CAP: usize = 32 * 1024;

fn next(s: &mut Shim) -> Value {
    s.recv("next line")
}

#[test]
fn ids_a_request_id_a_server_would_respell_is_refused_and_cannot_escape_the_cap() {
    let mut env = Env::new(&Vault::filesystem("fs").governed(CAP));
    env.start_tcd();
    std::fs::write(env.root.join("big.txt"), "y".repeat(10 * CAP)).unwrap();
    let mut s = Shim::start(&env.shim_argv("fs"), "warn", None);
    s.initialize();
    let read = r#""method":"tools/call","params":{"name":"read_text_file","arguments":{"path":"big.txt"}}}"#;
    for (id, answered_as) in [
        ("3.0", json!(3.0)),
        ("1e2", json!(100.0)),
        ("-0.0", json!(-0.0)),
        ("9007199254740993", json!(9007199254740993u64)),
        ("true", Value::Null),
        ("[5]", Value::Null),
    ] {
        s.send(format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},{read}").as_bytes());
        s.stdin.flush().unwrap();
        let r = next(&mut s);
        assert_eq!(r["error"]["code"], -32600, "id {id}: {r}");
        assert!(r.get("result").is_none(), "id {id} was forwarded: {r}");
        assert_eq!(r["id"], answered_as, "{r}");
        assert!(
            r["error"]["message"].as_str().unwrap().contains("id"),
            "{r}"
        );
    }
    // The same call under a faithful id is held to the cap.
    s.send(format!("{{\"jsonrpc\":\"2.0\",\"id\":3,{read}").as_bytes());
    s.stdin.flush().unwrap();
    let r = next(&mut s);
    assert_eq!(r["id"], 3);
    assert_eq!(code(&r["result"]).as_deref(), Some("overflow"), "{r}");
}

fn frame_env() -> Env {
    let mut env = Env::with(&Vault::fixture("fr", "frame_server.py"));
    env.start_tcd();
    env
}

#[test]
fn ids_answers_are_matched_by_value_and_carry_the_clients_own_id() {
    let env = frame_env();
    let mut s = Shim::start(&env.shim_argv("fr"), "warn", None);
    // The fixture answers 3 as 3.0: still the answer to 3, and the client gets 3 back.
    s.send_json(&json!({"jsonrpc": "2.0", "id": 3, "method": "respell"}));
    let line = s.lines.recv_timeout(Duration::from_secs(60)).unwrap();
    let r: Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(r["result"]["respelled"], true, "{r}");
    assert!(r["id"].is_u64() && r["id"] == 3, "{r}");
}

#[test]
fn ids_an_answer_no_request_waits_for_is_dropped() {
    let env = frame_env();
    let mut s = Shim::start(&env.shim_argv("fr"), "warn", None);
    s.send_json(&json!({"jsonrpc": "2.0", "id": "s", "method": "stray", "params": {"n": 200000}}));
    let (r, before) = s.until_id(&json!("s"), "stray");
    assert_eq!(r["result"], json!({}), "{r}");
    assert!(
        before.iter().all(|v| v["id"] != "never-sent"),
        "an answer to a request never sent reached the client"
    );
}

/// What to write to fill the table: `n` requests the fixture never answers.
fn hangs(n: usize) -> Vec<u8> {
    let mut b = Vec::new();
    for i in 0..n {
        b.extend_from_slice(
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"hang\"}}\n").as_bytes(),
        );
    }
    b
}

#[test]
fn ids_a_full_in_flight_table_refuses_new_requests_clearly() {
    let env = frame_env();
    let mut s = Shim::start(&env.shim_argv("fr"), "warn", None);
    s.stdin.write_all(&hangs(4096)).unwrap();
    s.send_json(&json!({"jsonrpc": "2.0", "id": "one-more", "method": "echo"}));
    let r = next(&mut s);
    assert_eq!(r["id"], "one-more", "{r}");
    let msg = r["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    assert!(msg.contains("too many requests in flight"), "{r}");
    // A notification still goes through; a cancelled request does not free its slot
    // (the downstream may still answer it), so requests are still refused.
    s.send_json(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 0}}),
    );
    s.send_json(&json!({"jsonrpc": "2.0", "id": "again", "method": "echo"}));
    let r = next(&mut s);
    assert_eq!(r["id"], "again", "{r}");
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("in flight"));
}

/// Sends `lines` (one request each) in batches of 1000, reading each batch's answers
/// before the next, as a client that reads its answers does: what stays in the shim's
/// memory is then what it keeps per request, not answers queued for a client that does
/// not read. `answered(i)`: whether the i-th request gets an answer.
fn pump(s: &mut Shim, lines: &[Vec<u8>], answered: impl Fn(usize) -> bool) {
    for (b, batch) in lines.chunks(1000).enumerate() {
        let mut expect = 0;
        for (j, l) in batch.iter().enumerate() {
            s.stdin.write_all(l).unwrap();
            expect += usize::from(answered(b * 1000 + j));
        }
        s.stdin.flush().unwrap();
        for i in 0..expect {
            if s.lines.recv_timeout(Duration::from_secs(120)).is_err() {
                panic!("batch {b}: only {i} of {expect} answers");
            }
        }
    }
}

fn ping(id: &str, method: &str) -> Vec<u8> {
    format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"{method}\"}}\n").into_bytes()
}

const PINGS: usize = 200_000;

#[test]
fn ids_masses_of_odd_id_and_unanswered_requests_do_not_grow_the_shim() {
    let mut env = Env::with(&Vault::memory("mem"));
    env.start_tcd();
    let mut s = Shim::start(&env.shim_argv("mem"), "error", None);
    s.initialize();
    let warm: Vec<_> = (0..2000).map(|i| ping(&i.to_string(), "ping")).collect();
    pump(&mut s, &warm, |_| true);
    let pid = s.child.id();
    let before = status_kb(pid, "VmRSS");
    // Ids a JavaScript server answers under another spelling (`7.0` as `7`).
    let odd: Vec<_> = (0..PINGS)
        .map(|i| ping(&format!("{i}.0"), "ping"))
        .collect();
    pump(&mut s, &odd, |_| true);
    let after = status_kb(pid, "VmRSS");
    assert!(
        after < before + 16 * 1024,
        "{PINGS} odd-id pings grew tc-shim from {before} kB to {after} kB"
    );
    drop(s);

    // Requests the downstream never answers: the table stops at its bound, the rest are
    // refused (each answered), and memory stays put.
    let env = frame_env();
    let mut s = Shim::start(&env.shim_argv("fr"), "error", None);
    s.send_json(&json!({"jsonrpc": "2.0", "id": "up", "method": "echo"}));
    next(&mut s);
    let pid = s.child.id();
    let before = status_kb(pid, "VmRSS");
    let hang: Vec<_> = (0..PINGS).map(|i| ping(&i.to_string(), "hang")).collect();
    pump(&mut s, &hang, |i| i >= 4096);
    let after = status_kb(pid, "VmRSS");
    assert!(
        after < before + 16 * 1024,
        "{PINGS} unanswered requests grew tc-shim from {before} kB to {after} kB"
    );
}
