//! End to end, route 4: the lean facade (`lean = true`). Real SDK clients see only
//! `list_capabilities` and `call_capability`; a gated inner tool is gated exactly as if
//! called directly, bound to the inner tool — on the legacy, modern and CLI routes, in
//! front of the real server-memory and server-filesystem.

use tc_tests::shim as support;

use tc_tests::elicit;

use elicit::*;
use serde_json::{json, Value};
use support::*;
use tc_proto::v1;

fn memory_env() -> Env {
    let server = peers().join("npm/node_modules/@modelcontextprotocol/server-memory/dist/index.js");
    Env::new(&format!(
        r#"[[vaults]]
id = "mem"
root = "$ROOT"
command = ["env", "MEMORY_FILE_PATH=$ROOT/memory.jsonl", "node", "{}"]
lean = true
legacy_elicitation_shim = true

[[vaults.gates]]
tool = "delete_entities"
targets = {{ probe = {{ tool = "open_nodes", arguments = {{ names = "$entityNames" }} }} }}
"#,
        server.display()
    ))
}

fn names(tools: &Value, key: &str) -> Vec<String> {
    tools[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {tools}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

fn cap(name: &str, args: Value) -> Value {
    json!({"name": name, "arguments": args})
}

/// The events' tool field for `kind`.
fn event_tools(env: &Env, kind: &str) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut c =
            v1::confirm_client::ConfirmClient::new(tc_proto::connect(&env.socket).await.unwrap());
        tc_tests::events(&mut c)
            .await
            .into_iter()
            .filter(|e| e.kind == kind)
            .map(|e| e.tool)
            .collect()
    })
}

#[test]
fn lean_facade_on_the_legacy_route_binds_to_the_inner_tool() {
    let mut env = memory_env();
    env.start_tcd();
    let memory = env.root.join("memory.jsonl");
    let mut h = Human::python("legacy", &env.shim_argv("mem"));

    let listed = h.list();
    assert_eq!(
        names(&listed, "tools"),
        ["list_capabilities", "call_capability"]
    );
    let caps = h.call("list_capabilities", json!({}));
    let inner = names(&caps["structuredContent"], "capabilities");
    assert!(inner.contains(&"delete_entities".to_string()), "{inner:?}");
    assert!(inner.contains(&"open_nodes".to_string()), "{inner:?}");
    assert!(
        !inner.contains(&"delete_observations".to_string()),
        "an ungated floor tool stays hidden behind the facade: {inner:?}"
    );
    let de = caps["structuredContent"]["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "delete_entities")
        .unwrap();
    assert_eq!(
        de["inputSchema"]["properties"]["elicit_token"]["type"],
        "string"
    );

    // Ungated inner call: straight through.
    let r = h.call(
        "call_capability",
        cap(
            "create_entities",
            json!({"entities": [{"name": "alice", "entityType": "person", "observations": ["likes tea"]}]}),
        ),
    );
    assert_eq!(code(&r), None, "{r}");
    assert!(std::fs::read_to_string(&memory).unwrap().contains("alice"));

    // Gated inner call: the prompt names the inner tool; decline stops it.
    let del = cap("delete_entities", json!({"entityNames": ["alice"]}));
    let (prompt, r) =
        h.call_answering("call_capability", del.clone(), json!({"action": "decline"}));
    assert!(prompt["message"]
        .as_str()
        .unwrap()
        .contains("`delete_entities`"));
    assert_eq!(code(&r).as_deref(), Some("approval_declined"), "{r}");
    assert!(std::fs::read_to_string(&memory).unwrap().contains("alice"));
    // Approve: deleted, once, recorded against the inner tool.
    let (_, r) = h.call_answering("call_capability", del, approve());
    assert_eq!(code(&r), None, "{r}");
    assert!(!std::fs::read_to_string(&memory).unwrap().contains("alice"));
    assert_eq!(event_tools(&env, "tc.elicit.consumed"), ["delete_entities"]);
    assert_eq!(event_tools(&env, "tc.elicit.declined"), ["delete_entities"]);

    // A floor tool without a gate is refused through the facade too.
    let r = h.call(
        "call_capability",
        cap("delete_observations", json!({"deletions": []})),
    );
    assert_eq!(code(&r).as_deref(), Some("gate_not_configured"), "{r}");
    let r = h.call("call_capability", json!({"arguments": {}}));
    assert_eq!(code(&r).as_deref(), Some("invalid_input"), "{r}");
}

#[test]
fn lean_facade_on_the_cli_and_modern_routes() {
    let mut env = fs_vault("lean = true", None);
    env.start_tcd();
    std::fs::write(env.root.join("note.txt"), "v0").unwrap();
    let write = |c: &str| cap("write_file", json!({"path": "note.txt", "content": c}));

    // CLI route: a client without elicitation.
    let mut c = PyClient::start(&env.shim_argv("fs"));
    let r = c.call("call_capability", write("v1"));
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
    assert_eq!(sc(&r)["details"]["tool"], "write_file");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("call_capability") && text.contains("\"arguments\""),
        "{text}"
    );
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
    let token = mint(&env.socket, &r);
    let with_token = cap(
        "write_file",
        json!({"path": "note.txt", "content": "v1", "elicit_token": token}),
    );
    let r = c.call("call_capability", with_token.clone());
    assert_eq!(code(&r), None, "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));
    // The token was for that call only.
    let r = c.call("call_capability", with_token);
    assert_ne!(code(&r), None, "a spent token ran again: {r}");
    drop(c);

    // Modern route (2026-07-28 through server/discover).
    let mut h = Human::python("modern", &env.shim_argv("fs"));
    assert_eq!(h.hello["era"], "modern");
    assert_eq!(
        names(&h.list(), "tools"),
        ["list_capabilities", "call_capability"]
    );
    let (_, r) = h.call_answering("call_capability", write("v2"), approve());
    assert_eq!(code(&r), None, "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v2"));
    let (_, r) = h.call_answering("call_capability", write("v3"), json!({"action": "cancel"}));
    assert_eq!(code(&r).as_deref(), Some("approval_not_obtained"), "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v2"));
}
