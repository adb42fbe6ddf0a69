//! End to end across replicas: real `tc-shim --http` gateways, each on its own tcd replica
//! (one vault, one config but for the socket), driven by the real Python `mcp` client.
//!
//! - A legacy session through gateway A is refused naming its request; `tcctl approve` on
//!   replica B; the client's retry through A runs once, and both replicas log the same.
//! - A 2026-07-28 round trip: round one on A (`input_required` + `requestState`), the
//!   answering round on B runs the call once; the same round replayed on C is refused
//!   `spent`, with the vault put back as it was before the call (no drift to hide behind).

use std::path::Path;

use serde_json::{json, Value};
use tc_core::codes::events;
use tc_tests::sdk_clients::{call, pause, raw_round, run, Client, Driver};
use tc_tests::shim::{assert_elicit_required, code, request_id, sc, Vault};

use super::Replicas;

/// What the gated call writes, and what the file holds before it.
const BEFORE: &str = "v0";

fn write_args() -> Value {
    json!({"path": "note.txt", "content": "v1"})
}

/// `n` replicas whose configs hold vault `fs` (server-filesystem, `write_file` gated) on
/// one shared root, `note.txt` = [`BEFORE`] in it; the root's temp dir is returned with it.
fn started(n: usize) -> Option<(Replicas, tempfile::TempDir)> {
    let root = tempfile::Builder::new()
        .prefix("tc-rep-vault-")
        .tempdir()
        .expect("vault root");
    std::fs::write(root.path().join("note.txt"), BEFORE).unwrap();
    let vault = Vault::fs_write_gated().toml().replace(
        "$ROOT",
        &std::fs::canonicalize(root.path())
            .unwrap()
            .display()
            .to_string(),
    );
    let r = Replicas::start_with(n, "", &format!("\n{vault}"))?;
    Some((r, root))
}

fn note(root: &Path) -> String {
    std::fs::read_to_string(root.join("note.txt")).expect("note.txt")
}

/// The event log as replica `i` serves it: (id, kind) in order.
async fn log_of(r: &Replicas, i: usize) -> Vec<(i64, String)> {
    let mut c = r.daemons[i].client().await;
    let all = tc_tests::events(&mut c).await;
    all.into_iter().map(|e| (e.id, e.kind)).collect()
}

fn count(log: &[(i64, String)], kind: &str) -> usize {
    log.iter().filter(|(_, k)| k == kind).count()
}

/// The next step line of a driver, which must not be fatal.
fn step(d: &mut Driver) -> Value {
    let v = d.next().expect("the driver ended early");
    assert!(v.get("fatal").is_none(), "{v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approved_on_replica_b_the_clients_retry_through_a_runs_once() {
    let Some((r, root)) = started(2) else { return };
    let a = r.gateway(0, "fs");
    let args = write_args();
    let plan = json!([
        call("write_file", args.clone()),
        pause(),
        call("write_file", args.clone()),
        pause(),
        call("write_file", args.clone()),
    ]);
    let mut d = Driver::start(Client::PyLegacy, &a.url(), plan);
    let hello = step(&mut d);
    assert_eq!(hello["era"], "legacy", "{hello}");
    let refused = step(&mut d)["result"].clone();
    assert_elicit_required(&refused, "write_file", "fs", &args);
    let id = request_id(&refused);
    assert_eq!(note(root.path()), BEFORE, "ran unapproved");
    assert_eq!(step(&mut d)["op"], "pause");
    // The human, on replica B's socket, approves the request A raised.
    let o = r.daemons[1].tcctl(&["approve", &id, "--yes"]);
    assert!(o.status.success(), "{o:?}");
    d.resume();
    let ran = step(&mut d)["result"].clone();
    assert_eq!(code(&ran), None, "the retry through A: {ran}");
    assert_eq!(note(root.path()), "v1");
    // Put back as before the call: the identical call would run again if the approval
    // were not spent; it asks afresh under another id, and nothing is written.
    std::fs::write(root.path().join("note.txt"), BEFORE).unwrap();
    assert_eq!(step(&mut d)["op"], "pause");
    d.resume();
    let again = step(&mut d)["result"].clone();
    assert_elicit_required(&again, "write_file", "fs", &args);
    assert_ne!(request_id(&again), id);
    assert_eq!(note(root.path()), BEFORE, "the approval ran twice");
    assert!(d.next().is_none(), "the plan is done");
    d.child.wait().expect("driver exit");
    let (on_a, on_b) = (log_of(&r, 0).await, log_of(&r, 1).await);
    assert_eq!(on_a, on_b, "one log, whichever replica serves it");
    assert_eq!(count(&on_a, events::REQUESTED), 2, "{on_a:?}");
    assert_eq!(count(&on_a, events::APPROVED), 1, "{on_a:?}");
    assert_eq!(count(&on_a, events::REDEEMED), 1, "{on_a:?}");
    assert_eq!(count(&on_a, events::CONSUMED), 1, "{on_a:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_trip_over_two_replicas_runs_once_and_its_replay_on_a_third_is_spent() {
    let Some((r, root)) = started(3) else { return };
    let gateways: Vec<_> = (0..3).map(|i| r.gateway(i, "fs")).collect();
    let args = write_args();
    let round = |g: usize, plan_step: Value| -> Value {
        let out = run(Client::PyAuto, &gateways[g].url(), json!([plan_step]));
        assert_eq!(out.connected["protocolVersion"], "2026-07-28");
        out.result(0).clone()
    };
    let first = round(0, raw_round("write_file", args.clone(), None, None));
    assert_eq!(first["resultType"], "input_required", "{first}");
    let state = first["requestState"].as_str().expect("requestState");
    assert_eq!(note(root.path()), BEFORE);
    let accept = json!({"confirm": {"action": "accept", "content": {"approve": true}}});
    let answering = raw_round("write_file", args, Some(state), Some(accept));
    let done = round(1, answering.clone());
    assert_eq!(code(&done), None, "the answering round on B: {done}");
    assert_ne!(done["resultType"], "input_required", "{done}");
    assert_eq!(note(root.path()), "v1");
    // The vault as it was at round one: only the consumed state stops the replay on C.
    std::fs::write(root.path().join("note.txt"), BEFORE).unwrap();
    let replay = round(2, answering);
    assert_eq!(code(&replay).as_deref(), Some("invalid_input"), "{replay}");
    assert_eq!(sc(&replay)["details"]["reason"], "spent", "{replay}");
    assert_eq!(note(root.path()), BEFORE, "the replay on C ran");
    let log = log_of(&r, 2).await;
    assert_eq!(count(&log, events::CONSUMED), 1, "{log:?}");
    assert_eq!(log, log_of(&r, 0).await, "one log");
}
