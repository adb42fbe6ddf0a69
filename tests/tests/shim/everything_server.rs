//! Transparency end to end: a Python `mcp` `ClientSession` advertising elicitation,
//! sampling and roots → real tc-shim → real server-everything (stdio). The server's own
//! server→client requests (`elicitation/create`, `sampling/createMessage`) reach the
//! client's callbacks through the shim, and the client's answers get back to the server
//! (its tool results echo them). Roots are the exception (issue 15 §2): the server works
//! inside the vault root, so it never learns the client has roots.

use tc_tests::shim as support;

use std::process::{Command, Stdio};

use serde_json::Value;
use support::*;

fn texts(result: &Value) -> String {
    result["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content in {result}"))
        .iter()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn shim_everything_server_requests_reach_the_client_and_answers_return() {
    let env = Env::with(&Vault::everything("ev"));
    let (argv, log) = env.shim_argv_logged("ev");
    let out = Command::new(peers().join("venv/bin/python"))
        .arg(fixture("everything_client.py"))
        .args(&argv)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run the everything client fixture");
    assert!(
        out.status.success(),
        "client failed: {}\nshim log:\n{}",
        out.status,
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let o: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bad client output {:?}: {e}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert_eq!(o["ok"], true, "{o}");
    let shim_log = wait_log(&log, "client era: legacy");
    assert!(
        shim_log.contains("client era: legacy (2025-11-25), downstream era: legacy (2025-11-25)"),
        "{shim_log}"
    );

    // The capability-dependent tools exist: the client's capabilities reached the server,
    // all but roots.
    let tools: Vec<&str> = o["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for t in ["trigger-elicitation-request", "trigger-sampling-request"] {
        assert!(tools.contains(&t), "{t} missing from {tools:?}");
    }
    assert!(
        !tools.contains(&"get-roots-list"),
        "the server was told about the client's roots: {tools:?}"
    );

    // Elicitation: the server's request reached the callback, the answer came back.
    let seen = o["elicit"]["seen"].as_array().unwrap();
    assert_eq!(seen.len(), 1, "{o}");
    assert_eq!(
        seen[0]["message"],
        "Please provide inputs for the following fields:"
    );
    assert_eq!(
        seen[0]["requestedSchema"]["properties"]["name"]["type"],
        "string"
    );
    let r = &o["elicit"]["result"];
    assert_ne!(r["isError"], true, "{r}");
    let t = texts(r);
    assert!(t.contains("User provided the requested information"), "{t}");
    assert!(t.contains("- Name: Ada Lovelace (via tc-shim)"), "{t}");
    assert!(t.contains("- Agreed to terms: true"), "{t}");

    // Sampling: same, both ways.
    let seen = o["sample"]["seen"].as_array().unwrap();
    assert_eq!(seen.len(), 1, "{o}");
    assert_eq!(
        seen[0]["messages"][0]["content"]["text"],
        "Resource trigger-sampling-request context: hello through the shim"
    );
    assert_eq!(seen[0]["systemPrompt"], "You are a helpful test server.");
    assert_eq!(seen[0]["maxTokens"], 20);
    let t = texts(&o["sample"]["result"]);
    assert!(t.contains("sampled answer 42 from the client"), "{t}");
    assert!(t.contains("tc-test-model"), "{t}");

    // Roots: the client was never asked.
    assert!(o.get("roots").is_none(), "{o}");
    assert_eq!(o["roots_asked"], 0, "{o}");
}
