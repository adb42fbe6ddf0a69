//! The barrier (issue 15 §3) holds only if every call that takes a place is answered, and
//! answered under its own id: attacks on that through the real tc-shim in front of
//! server-filesystem (look-alike ids, requests the server silently drops, a cancelled
//! change). Each failed on the first version of the barrier.

use tc_tests::shim as shim_support;

use serde_json::{json, Value};
use shim_support::*;
use std::io::Write;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::barrier::{call, started};

/// `write_file` asks only when it would overwrite (its `when` reads the vault's state);
/// `edit_file` (a floor tool) only on a dry run, so a real edit goes out unconfirmed, as a
/// call with a gate entry: it holds the barrier's exclusive place while it runs.
fn vault() -> Vault {
    Vault::filesystem("notes")
        .gate_overwrites("write_file")
        .gate_when(
            "edit_file",
            r#"{ equals = { arg = "dryRun", value = true } }"#,
            r#"{ paths = ["path"] }"#,
        )
}

/// A named pipe in the vault: server-filesystem's `edit_file` of it blocks on reading it
/// until the test writes, so the edit is a change held in flight for as long as the test
/// wants (no timing involved).
fn fifo(path: &Path) {
    let st = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(st.success());
}

fn is_fifo(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

/// The write end of `pipe`, once the edit has opened it to read. Opened non-blocking,
/// so a test whose edit never reached the pipe fails instead of hanging.
fn writer_once_read(pipe: &Path) -> std::fs::File {
    use std::os::unix::fs::OpenOptionsExt;
    wait_until("the edit reading the pipe", || {
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(pipe)
            .ok()
    })
}

/// Feeds `pipe` once `trigger` exists (the judged call ran: too early if the pipe is
/// still a pipe then) or after `patience` (the shim is rightly holding it back).
/// Returns whether `trigger` appeared while the edit was still in flight.
fn feed_when(pipe: &Path, trigger: &Path, patience: Duration) -> std::thread::JoinHandle<bool> {
    let (pipe, trigger) = (pipe.to_path_buf(), trigger.to_path_buf());
    std::thread::spawn(move || {
        let until = Instant::now() + patience;
        while !trigger.exists() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        let early = trigger.exists() && is_fifo(&pipe);
        let mut w = writer_once_read(&pipe);
        w.write_all(b"alpha\n").unwrap();
        early
    })
}

fn edit(id: Value) -> Value {
    call(
        id,
        "edit_file",
        json!({"path": "pipe.md", "edits": [{"oldText": "alpha", "newText": "beta"}]}),
    )
}

/// Reads until `want` ids were answered with a tool result or error; returns them in order.
fn answered(c: &mut RawClient, want: &[Value]) -> Vec<Value> {
    let mut got = Vec::new();
    while want
        .iter()
        .any(|w| !got.iter().any(|m: &Value| &m["id"] == w))
    {
        let m = c.recv();
        if m.get("method").is_none() {
            got.push(m);
        }
    }
    got
}

/// server-filesystem (the TypeScript SDK) reads `1.0` as `1` and answers a `ping` sent as
/// `1.0` under id `1`: matched by `id.to_string()`, that answer was taken for the edit's
/// (id 1), whose place was released while the edit still ran, and the overwrite-gated
/// write behind it was judged (and ran) before the edit had landed. Ids are matched by
/// value and `1.0` is refused (item 7), which the barrier depends on.
#[test]
fn an_answer_under_a_look_alike_id_does_not_release_a_change_in_flight() {
    let mut env = Env::with(&vault());
    let mut c = started(&mut env);
    let (pipe, new) = (env.root.join("pipe.md"), env.root.join("new.md"));
    fifo(&pipe);
    let feeder = feed_when(&pipe, &new, Duration::from_secs(5));
    c.send_together(&[
        edit(json!(1)),
        json!({"jsonrpc": "2.0", "id": 1.0, "method": "ping"}),
        call(
            json!("g"),
            "write_file",
            json!({"path": "new.md", "content": "x"}),
        ),
    ]);
    let got = answered(&mut c, &[json!(1), json!("g")]);
    let early = feeder.join().unwrap();
    assert!(
        !early,
        "the write behind the edit ran while the edit was still in flight: {got:?}"
    );
}

/// A change the downstream will never answer (server-filesystem's SDK drops a message whose
/// `jsonrpc` is not "2.0" without a word) must not hold the barrier forever: the shim
/// forwards what it cannot expect an answer to, and every later gated call then waits for
/// ever (here the overwrite-gated write is never answered).
#[test]
fn a_change_the_server_drops_does_not_wedge_the_calls_behind_it() {
    let mut env = Env::with(&vault());
    let mut c = started(&mut env);
    std::fs::write(env.root.join("a.md"), "old").unwrap();
    let mut bad = call(
        json!("bad"),
        "write_file",
        json!({"path": "b.md", "content": "x"}),
    );
    bad["jsonrpc"] = json!("1.0");
    c.send(&bad);
    c.send(&call(
        json!("g"),
        "write_file",
        json!({"path": "a.md", "content": "new"}),
    ));
    let mut seen = Vec::new();
    loop {
        let m = c.recv();
        if m["id"] == "g" {
            assert_eq!(
                code(&m["result"]).as_deref(),
                Some("elicit_required"),
                "{m}"
            );
            break;
        }
        seen.push(m);
    }
}

/// Cancelling a change in flight starts one grace timer, not one per cancellation: a flood
/// of `notifications/cancelled` for the same call grew the shim by a timer task each
/// (200 000 of them held for 10 s).
#[test]
fn a_flood_of_cancellations_starts_one_timer() {
    let mut env = Env::with(&vault());
    let mut c = started(&mut env);
    let pipe = env.root.join("pipe.md");
    fifo(&pipe);
    c.send(&edit(json!(1)));
    // Held open (no EOF) until fed: the edit stays in flight with its place.
    let mut w = writer_once_read(&pipe);
    let pid = c.child.id();
    let before = status_kb(pid, "VmRSS");
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": 1}});
    for _ in 0..200 {
        c.send_together(&vec![cancel.clone(); 1000]);
    }
    // A ping behind the flood: once it is answered, every cancellation was handled.
    let pong = c.request(json!("p"), "ping", json!({}));
    assert_eq!(pong["id"], "p", "{pong}");
    let after = status_kb(pid, "VmRSS");
    w.write_all(b"alpha\n").unwrap();
    drop(w);
    assert!(
        after < before + 16 * 1024,
        "200 000 cancellations of one call grew tc-shim from {before} kB to {after} kB"
    );
}
