//! A call that waits on a human longer than its client's request timeout: the shim reports
//! `notifications/progress` for the call's progress token while the prompt is open, so a
//! client that resets its timeout on progress (the TypeScript SDK's
//! `resetTimeoutOnProgress`) keeps waiting; without a token the same client gives up.

use std::time::Duration;

use serde_json::json;
use tc_tests::elicit::*;
use tc_tests::shim::*;

/// The client's request timeout, and how long the human takes: three times longer.
const TIMEOUT_MS: u64 = 10_000;
const HUMAN_TAKES: Duration = Duration::from_secs(30);

fn typescript_client() -> (Env, Human) {
    let mut env = fs_vault("legacy_elicitation_shim = true", None);
    env.start_tcd();
    std::fs::write(env.root.join("note.txt"), "v0").unwrap();
    let h = Human::typescript(&env.shim_argv("fs"));
    (env, h)
}

#[test]
fn a_call_with_a_progress_token_outwaits_its_timeout_and_runs_once() {
    let (env, mut h) = typescript_client();
    let opts = json!({"timeout_ms": TIMEOUT_MS, "progress": true});
    let tag = h.start_call_with("write_file", write_v1(), opts);
    let prompt = h.prompt();
    assert!(prompt["message"].as_str().unwrap().contains("`write_file`"));
    // The human takes three client timeouts to answer; the call is still waiting.
    let reports = h.progress_of(&tag, HUMAN_TAKES);
    h.answer(approve());
    let r = h.result(&tag);
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 1);
    // Reported every few seconds, counting up, naming the tool and nothing else of it.
    assert!(reports.len() >= 4, "progress while waiting: {reports:?}");
    let counts: Vec<f64> = reports
        .iter()
        .map(|r| r["progress"]["progress"].as_f64().unwrap())
        .collect();
    assert!(counts.windows(2).all(|w| w[0] < w[1]), "{counts:?}");
    let said = reports[0]["progress"]["message"].as_str().unwrap();
    assert!(
        said.contains("write_file") && !said.contains("v1"),
        "{said}"
    );
    // Nothing is reported once the call has its answer: those read before the result
    // line are set aside, and none comes after it.
    h.progress_of(&tag, Duration::ZERO);
    let late = h.progress_of(&tag, Duration::from_secs(6));
    assert!(late.is_empty(), "progress after the result: {late:?}");
}

#[test]
fn without_a_progress_token_the_same_client_times_out_and_nothing_runs() {
    let (env, mut h) = typescript_client();
    let tag = h.start_call_with("write_file", write_v1(), json!({"timeout_ms": TIMEOUT_MS}));
    h.prompt();
    // Its own timeout ends the call while the human still reads the prompt: this is the
    // case progress exists for.
    let o = h.outcome(&tag);
    let err = o["error"].as_str().unwrap_or_default();
    assert!(err.contains("timed out") || err.contains("Timeout"), "{o}");
    // The SDK cancels the call, so the shim withdraws its prompt and nothing runs.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 0);
    assert!(h.progress_of(&tag, Duration::from_millis(100)).is_empty());
}
