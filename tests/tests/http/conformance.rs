//! The MCP conformance suite (0.2.0-alpha.12, server mode) THROUGH tc: real
//! `tc-shim serve --http` in front of server-everything over stdio (a vault with no
//! gates), real tcd. The transport scenarios must come out exactly as recorded in
//! docs/CONFORMANCE.md ("Through tc"): every check listed there as failing fails, every
//! other check passes (or warns).

use tc_tests::shim as support;

use tc_tests::http;

use std::collections::BTreeSet;
use std::process::Command;

use http::Front;
use serde_json::Value;
use support::*;

/// (scenario, spec version, the check ids that fail through tc).
const EXPECTED: &[(&str, &str, &[&str])] = &[
    ("dns-rebinding-protection", "2025-11-25", &[]),
    ("dns-rebinding-protection", "2026-07-28", &[]),
    ("server-session-lifecycle", "2025-11-25", &[]),
    ("http-header-validation", "2026-07-28", &[]),
    (
        "server-stateless",
        "2026-07-28",
        &[
            // The suite's `test_missing_capability` fixture tool is not on
            // server-everything: untestable (Python MCPServer fails them too).
            "sep-2575-server-rejects-undeclared-capability",
            "sep-2575-missing-capability-http-400",
        ],
    ),
];

fn everything_vault() -> Env {
    Env::new(&format!(
        "[[vaults]]\nid = \"se\"\nroot = \"$ROOT\"\ncommand = [\"node\", {:?}, \"stdio\"]\n",
        everything_server().display().to_string()
    ))
}

/// The checks of one scenario run: (id, status) in order.
fn run_scenario(env: &Env, url: &str, scenario: &str, spec: &str) -> Vec<(String, String)> {
    let out = env.tmp.path().join(format!("{scenario}-{spec}.json"));
    let st = Command::new(workspace().join("tests/http/conformance.sh"))
        .arg(url)
        .arg(&out)
        .args(["--scenario", scenario, "--spec-version", spec])
        .env("TC_PEERS", tc_tests::peers_dir())
        .status()
        .expect("run tests/http/conformance.sh");
    assert!(st.success(), "conformance.sh {scenario} {spec}: {st}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let s = &v["scenarios"][scenario];
    s["checks"]
        .as_array()
        .unwrap_or_else(|| panic!("no checks for {scenario} at {spec}: {v}"))
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap().to_string(),
                c["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn the_transport_scenarios_through_tc_match_the_recorded_results() {
    let peers = tc_tests::peers_dir();
    let suite = "conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js";
    if !peers.join("node22/bin/node").is_file() || !peers.join(suite).is_file() {
        eprintln!(
            "SKIPPED: Node 22 or the conformance suite is missing under {} (scripts/install-peers)",
            peers.display()
        );
        return;
    }
    let mut env = everything_vault();
    env.start_tcd();
    let front = Front::start(&env, "se");
    for (scenario, spec, failing) in EXPECTED {
        let checks = run_scenario(&env, &front.url(), scenario, spec);
        let failed: BTreeSet<&str> = checks
            .iter()
            .filter(|(_, s)| s == "FAILURE")
            .map(|(id, _)| id.as_str())
            .collect();
        let expected: BTreeSet<&str> = failing.iter().copied().collect();
        assert_eq!(failed, expected, "{scenario} at {spec}: {checks:?}");
        let passed = checks.iter().filter(|(_, s)| s == "SUCCESS").count();
        assert!(
            passed > 0,
            "{scenario} at {spec} passed nothing: {checks:?}"
        );
    }
}
