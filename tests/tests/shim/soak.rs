//! Short load soak (the long one is `cargo bench -p tc-tests --bench soak`): 8 real
//! tc-shim processes in front of the `tc-soak server` fixture, 8 concurrent workers
//! each, gated calls approved through the CLI route (refused, minted at the real `tcd`,
//! redeemed) mixed with ungated ones for a few seconds. No confirmation may be lost or
//! authorize two forwarded calls; the daemon's own counters must agree.

use std::process::{Command, Stdio};

use serde_json::Value;
use tc_tests::*;

#[tokio::test(flavor = "multi_thread")]
async fn soak_eight_shims_every_token_authorizes_exactly_one_forwarded_call() {
    let d = Daemon::start();
    let out = Command::new(env!("CARGO_BIN_EXE_tc-soak"))
        .arg("drive")
        .arg("--socket")
        .arg(&d.socket)
        .arg("--shim")
        .arg(bin("tc-shim"))
        .arg("--dir")
        .arg(d.dir.path().join("soak"))
        .args(["--shims", "8", "--workers", "8", "--seconds", "6"])
        .arg("--tcd-pid")
        .arg(d.pid().to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run tc-soak");
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("soak: {text}");
    let s: Value = serde_json::from_str(text.trim()).expect("a JSON summary");
    assert!(out.status.success(), "problems: {}", s["problems"]);
    let gated = s["gated"].as_u64().unwrap();
    assert!(gated > 0 && s["ungated"].as_u64().unwrap() > 0, "{s}");
    for k in ["lost", "forwarded_twice", "log_mismatch"] {
        assert_eq!(s[k], 0, "{k}: {s}");
    }
    assert_eq!(s["forwarded_writes"].as_u64(), Some(gated), "{s}");
    assert!(
        s["per_shim_gated"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n.as_u64() > Some(0)),
        "every shim carried load: {s}"
    );
    assert!(s["reuse_refused"].as_u64() > Some(0), "{s}");

    // The daemon's counters, read independently of the driver.
    let mut c = d.client().await;
    let counters = counters(&mut c).await;
    let count = |kind: &str| {
        counters
            .iter()
            .find(|k| k.name == "tc_events_total" && k.labels == format!("kind=\"{kind}\""))
            .map_or(0, |k| k.value)
    };
    for kind in [
        "tc.elicit.requested",
        "tc.elicit.minted",
        "tc.elicit.redeemed",
        "tc.elicit.consumed",
    ] {
        assert_eq!(count(kind), gated, "{kind}");
    }
    for kind in ["hitl_released", "tc.elicit.refused", "replay_drift"] {
        assert_eq!(count(kind), 0, "{kind}");
    }
}
