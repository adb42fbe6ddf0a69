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
    let names = tool_names(&tools);
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
    let first = raise(&mut c, "delete_entities", &args);
    let token = mint(&env.socket, &first);

    // The entity changes between raise and redeem: drift, nothing deleted.
    let r = c.call(
        "add_observations",
        json!({"observations": [{"entityName": "alice", "contents": ["likes coffee"]}]}),
    );
    assert_eq!(code(&r), None, "{r}");
    let r = c.call("delete_entities", with_token(&args, &token));
    assert_eq!(code(&r).as_deref(), Some("replay_drift"), "{r}");
    let stored = std::fs::read_to_string(&memory).unwrap();
    assert!(
        stored.contains("alice") && stored.contains("likes coffee"),
        "{stored}"
    );

    // A fresh confirmation of the new state deletes it, once.
    assert_fresh_request_runs(&mut c, &env, ("delete_entities", &args), &first);
    let stored = std::fs::read_to_string(&memory).unwrap();
    assert!(!stored.contains("alice"), "{stored}");
    let kinds = event_kinds(&env.socket);
    assert_eq!(count(&kinds, "tc.elicit.consumed"), 1, "{kinds:?}");
}
