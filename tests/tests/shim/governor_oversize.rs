//! End to end: downstream lines longer than tc-shim may hold. Raw JSON-RPC client → real
//! tc-shim → `tests/fixtures/big_server.py` (answers with lines of any length), real tcd:
//! each over-long answer is matched to its request by the id found in the stream (first
//! or last member, string or number, among decoy `"id"` text and nested ids) and
//! answered — never passed on, never dropped silently.

use tc_tests::shim as support;

use serde_json::{json, Value};
use support::*;

const CAP: u64 = 1024 * 1024;
const MAX_LINE: u64 = 16 * 1024 * 1024;

fn start() -> (Env, RawClient) {
    let (env, mut c) = start_with(&format!(
        "[governor]\nmax_response_bytes = {CAP}\n\n[[vaults]]\nid = \"big\"\nroot = \"$ROOT\"\n"
    ));
    let list = c.request(json!(1), "tools/list", json!({}));
    assert!(tool(&list["result"], "blob").is_some(), "{list}");
    (env, c)
}

/// tc-shim for vault `big` (in `config`) in front of big_server.py, initialized.
fn start_with(config: &str) -> (Env, RawClient) {
    let mut env = Env::new(config);
    env.start_tcd();
    let mut argv = env.shim_argv("big");
    argv.extend([
        "--".into(),
        "python3".into(),
        workspace()
            .join("tests/fixtures/big_server.py")
            .display()
            .to_string(),
    ]);
    let mut c = RawClient::start(&argv);
    let init = c.initialize();
    assert_eq!(init["id"], "init", "{init}");
    (env, c)
}

fn blob(c: &mut RawClient, id: Value, bytes: u64, id_at: &str, decoy: bool) -> Value {
    c.request(
        id,
        "tools/call",
        json!({"name": "blob", "arguments": {"bytes": bytes, "id_at": id_at, "decoy": decoy}}),
    )
}

fn assert_overflow(r: &Value, id: Value, bytes: u64) {
    assert_eq!(r["id"], id, "answered under the request's own id: {r}");
    let res = &r["result"];
    assert_eq!(res["isError"], true, "{r}");
    let sc = &res["structuredContent"];
    assert_eq!(sc["code"], "overflow", "{r}");
    assert_eq!(
        sc["details"]["bytes"], bytes,
        "the exact length of the line: {r}"
    );
    assert_eq!(sc["details"]["limit"], CAP);
    assert_eq!(sc["details"]["tool"], "blob");
}

#[test]
fn shim_governor_oversize_lines_are_matched_by_id_and_answered() {
    let (env, mut c) = start();

    // 20 MB, the id as the last member, a string.
    let r = blob(&mut c, json!("late-id"), 20_000_000, "end", false);
    assert_overflow(&r, json!("late-id"), 20_000_000);
    // 20 MB, the id first, a number, the text full of escaped quotes and `"id":999`
    // look-alikes, nested objects with their own "id" keys after it.
    let r = blob(&mut c, json!(42), 20_000_003, "start", true);
    assert_overflow(&r, json!(42), 20_000_003);
    // The same decoys with the id last: the nested ids before it are not the id.
    let r = blob(&mut c, json!("z"), 3_000_001, "end", true);
    assert_overflow(&r, json!("z"), 3_000_001);
    // Just over the cap, and just under it (passed on whole, byte for byte the size).
    let r = blob(&mut c, json!(5), CAP + 1, "end", false);
    assert_overflow(&r, json!(5), CAP + 1);
    let r = blob(&mut c, json!(6), CAP - 100, "end", false);
    assert_eq!(
        (r["id"].clone(), r["result"]["isError"].clone()),
        (json!(6), Value::Null)
    );
    assert_eq!(serde_json::to_string(&r).unwrap().len() as u64, CAP - 100);

    // Not a tools/call: prompts/get is not capped by the governor, only by the line
    // limit. Under it: passed on. Over it: the request gets an error, not silence.
    let r = c.request(
        json!(7),
        "prompts/get",
        json!({"name": (3_000_000).to_string()}),
    );
    assert_eq!(r["id"], 7);
    assert!(r["result"]["messages"].is_array(), "a 3 MB prompt passes");
    let r = c.request(
        json!(8),
        "prompts/get",
        json!({"name": (MAX_LINE + 5).to_string()}),
    );
    assert_eq!(r["id"], 8, "{r}");
    assert_eq!(r["error"]["code"], -32603, "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains(&(MAX_LINE + 5).to_string()) && msg.contains("line limit"),
        "{msg}"
    );

    // resources/read over the cap, by the answer's size: a plain invalid_input error.
    let r = c.request(json!(9), "resources/read", json!({"uri": "big://2000000"}));
    assert_eq!(r["id"], 9, "{r}");
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let d = &r["error"]["data"];
    assert_eq!(
        (d["code"].clone(), d["reason"].clone(), d["checked"].clone()),
        (
            json!("invalid_input"),
            json!("too_large"),
            json!("response")
        ),
        "{r}"
    );
    assert_eq!(d["bytes"], 2_000_000);

    // A request from the downstream too long to pass on: the shim answers the
    // downstream with an error for it, and the call that triggered it completes.
    let r = c.request(
        json!(10),
        "tools/call",
        json!({"name": "ask_big", "arguments": {"bytes": MAX_LINE + 1}}),
    );
    assert_eq!(r["id"], 10, "{r}");
    let got: Value =
        serde_json::from_str(r["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(got["id"], "srv-1", "{got}");
    assert_eq!(got["error"]["code"], -32600, "{got}");

    // The stream is still in sync.
    let r = c.request(
        json!(11),
        "tools/call",
        json!({"name": "small", "arguments": {}}),
    );
    assert_eq!(
        (r["id"].clone(), r["result"]["content"][0]["text"].clone()),
        (json!(11), json!("small ok"))
    );

    // The four tools/call overflows are counted; the resource and the prompt are not.
    let evs = wait_events(&env.socket, "tc.governor.overflow", 4);
    assert_eq!(evs.len(), 4, "{evs:?}");
    assert!(evs.iter().all(|e| e.tool == "blob" && e.vault == "big"));
    std::thread::sleep(std::time::Duration::from_millis(300));
    let n = all_events(&env.socket)
        .iter()
        .filter(|e| e.kind == "tc.governor.overflow")
        .count();
    assert_eq!(n, 4, "no event for the resource or the prompt");
    assert!(
        env.tcctl_metrics()
            .contains("governor_truncations_total 4\n"),
        "{}",
        env.tcctl_metrics()
    );
}

/// A small cap, and `small` gated with `targets = "none"`: every call to it is answered
/// by the shim itself (elicit_required: this client has no elicitation), never by the
/// server.
fn start_gated(cap: u64) -> (Env, RawClient) {
    let (env, mut c) = start_with(&format!(
        "[governor]\nmax_response_bytes = {cap}\n\n[[vaults]]\nid = \"big\"\nroot = \"$ROOT\"\n\n\
         [[vaults.gates]]\ntool = \"small\"\ntargets = \"none\"\n"
    ));
    c.request(json!(1), "tools/list", json!({}));
    (env, c)
}

#[test]
fn shim_governor_the_cap_holds_after_many_calls_the_shim_answered_itself() {
    let (_env, mut c) = start_gated(4096);
    // The governor's bookkeeping is pruned once it holds 64 more entries than requests
    // in flight; each answer the shim gives itself must not leave one behind, and the
    // prune must never drop the request that is arriving.
    let mut id = 100u64;
    for round in 0..2 {
        // 64 answers the shim gives itself, then a capped call: the 65th entry.
        for n in 0..64 {
            id += 1;
            let r = c.call_tool(id, "small", json!({"n": n}));
            assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
        }
        let r = c.request(
            json!(format!("blob{round}")),
            "tools/call",
            json!({"name": "blob", "arguments": {"bytes": 20000, "id_at": "first", "decoy": false}}),
        );
        assert_eq!(
            r["result"]["structuredContent"]["code"], "overflow",
            "round {round}: {r}"
        );
    }
}

#[test]
fn shim_governor_a_reused_id_cannot_take_a_capped_calls_entry() {
    let (_env, mut c) = start_gated(4096);
    // While `blob` id 7 is in flight (both lines in one write: the shim handles the
    // second before the first can be answered), another request with id 7 is refused
    // before it can replace or remove the call's cap entry.
    c.send_together(&[
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "blob", "arguments": {"bytes": 20000, "id_at": "first", "decoy": false}}}),
        json!({"jsonrpc": "2.0", "id": 7, "method": "prompts/list", "params": {}}),
    ]);
    let (err, call) = ordered_by(c.recv(), c.recv(), |m| m.get("error").is_some());
    assert_eq!(err["id"], 7, "{err}");
    assert_eq!(err["error"]["code"], -32600, "{err}");
    assert_eq!(call["id"], 7, "{call}");
    assert_eq!(
        call["result"]["structuredContent"]["code"], "overflow",
        "{call}"
    );
    assert_eq!(
        call["result"]["structuredContent"]["details"]["tool"], "blob",
        "{call}"
    );
}
