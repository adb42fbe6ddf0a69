//! End to end: Python `mcp` client → tc-shim → real server-memory; `delete_entities`
//! gated with a `probe` target on `open_nodes`, drift by adding an observation.

use tc_tests::shim as support;

use serde_json::json;
use support::*;

#[test]
fn shim_memory_probe_target_binds_the_entity() {
    let mut env = Env::with(&Vault::memory("mem").gate(
        "delete_entities",
        r#"{ probe = { tool = "open_nodes", arguments = { names = "$entityNames" } } }"#,
    ));
    env.start_tcd();
    let memory = env.root.join("memory.jsonl");
    let mut c = PyClient::start(&env.shim_argv("mem"));

    let tools = c.list();
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"delete_entities") && names.contains(&"open_nodes"),
        "{names:?}"
    );
    assert!(
        !names.contains(&"delete_observations"),
        "ungated floor tools are hidden: {names:?}"
    );

    let r = c.call(
        "create_entities",
        json!({"entities": [{"name": "alice", "entityType": "person", "observations": ["likes tea"]}]}),
    );
    assert_eq!(code(&r), None, "{r}");

    let args = json!({"entityNames": ["alice"]});
    let first = c.call("delete_entities", args.clone());
    assert_eq!(code(&first).as_deref(), Some("elicit_required"), "{first}");
    let token = mint(&env.socket, &first);

    // The entity changes between raise and redeem: drift, nothing deleted.
    let r = c.call(
        "add_observations",
        json!({"observations": [{"entityName": "alice", "contents": ["likes coffee"]}]}),
    );
    assert_eq!(code(&r), None, "{r}");
    let mut with_token = args.clone();
    with_token["elicit_token"] = json!(token);
    let r = c.call("delete_entities", with_token);
    assert_eq!(code(&r).as_deref(), Some("replay_drift"), "{r}");
    let stored = std::fs::read_to_string(&memory).unwrap();
    assert!(
        stored.contains("alice") && stored.contains("likes coffee"),
        "{stored}"
    );

    // A fresh confirmation of the new state deletes it, once.
    let fresh = c.call("delete_entities", args.clone());
    assert_eq!(code(&fresh).as_deref(), Some("elicit_required"), "{fresh}");
    assert_ne!(
        sc(&fresh)["details"]["state_fp"],
        sc(&first)["details"]["state_fp"]
    );
    let token = mint(&env.socket, &fresh);
    let mut with_token = args;
    with_token["elicit_token"] = json!(token);
    let r = c.call("delete_entities", with_token);
    assert_eq!(code(&r), None, "{r}");
    let stored = std::fs::read_to_string(&memory).unwrap();
    assert!(!stored.contains("alice"), "{stored}");
    let kinds = event_kinds(&env.socket);
    assert_eq!(
        kinds.iter().filter(|k| *k == "tc.elicit.consumed").count(),
        1,
        "{kinds:?}"
    );
}
