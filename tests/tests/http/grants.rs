//! Grants over Streamable HTTP with jwt callers: the Python `mcp` client of alice gets a
//! grant (from `tcctl approve --grant`) that lets her later calls through in either era
//! and in any session; bob's identical calls are not covered; a revoke ends it.

use serde_json::{json, Value};
use tc_tests::http::{disk, mint_bearer, Front};
use tc_tests::sdk_clients::{call, run_as, Client};
use tc_tests::shim::{code, request_id, Env, Vault};

fn started() -> (Env, Front) {
    let vault = Vault::fs_write_gated()
        .raw("\n[vaults.http.auth]\nmode = \"jwt\"\naudience = \"tc-http-test\"\n");
    let mut env = Env::new(&vault.governed(1 << 20));
    env.start_tcd();
    std::fs::create_dir(env.root.join("notes")).unwrap();
    let front = Front::start(&env, "fs");
    (env, front)
}

fn write(path: &str, by: &str) -> Value {
    json!({ "path": path, "content": by })
}

#[test]
fn alices_grant_covers_her_calls_in_both_eras_and_never_bobs() {
    let (env, front) = started();
    let url = front.url();
    let alice = mint_bearer(&env, "alice");
    let bob = mint_bearer(&env, "bob");
    // Refused with a request id (a legacy client has no in-protocol route here).
    let first = write("notes/a.md", "alice");
    let r = run_as(
        Client::PyLegacy,
        &url,
        Some(&alice),
        json!([call("write_file", first.clone())]),
    );
    let refused = r.result(0);
    assert_eq!(
        code(refused).as_deref(),
        Some("elicit_required"),
        "{refused}"
    );
    let id = request_id(refused);
    let o = env.tcd.tcctl(&[
        "approve",
        &id,
        "--yes",
        "--grant",
        "--path",
        "path=notes/**",
        "--any",
        "content",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // alice, in new sessions of each era: the retry and covered calls run, no prompt
    // (the plans answer none: a prompt would have been declined).
    for (c, file) in [
        (Client::PyAuto, "notes/modern.md"),
        (Client::PyLegacy, "notes/legacy.md"),
    ] {
        let plan = json!([
            call("write_file", first.clone()),
            call("write_file", write(file, "alice"))
        ]);
        let r = run_as(c, &url, Some(&alice), plan);
        let ran = r.result(1);
        assert_eq!(code(ran), None, "{c:?}: {ran}");
        assert_eq!(disk(&env, file).as_deref(), Some("alice"), "{c:?}");
        assert!(
            r.ok(1)
                .get("prompts")
                .is_none_or(|p| p.as_array().is_some_and(Vec::is_empty)),
            "{c:?}: {}",
            r.steps[1]
        );
    }
    assert_eq!(disk(&env, "notes/a.md").as_deref(), Some("alice"));
    // bob: the same kind of call is his own request, asked afresh; nothing written.
    asked_again(&env, &url, &bob, ["notes/bob1.md", "notes/bob2.md"]);
    let used = tc_tests::shim::all_events(&env.socket)
        .into_iter()
        .filter(|e| e.kind == "tc.grant.used")
        .collect::<Vec<_>>();
    // modern.md, then (the approval spent) a.md again and legacy.md.
    assert_eq!(used.len(), 3, "{used:?}");
    assert!(used.iter().all(|e| e.caller == "alice"));
    // Revoked: alice's next call it would have covered asks again, in either era.
    let grant = used[0]
        .detail_json
        .split('"')
        .find(|w| w.starts_with("g-"))
        .unwrap()
        .to_string();
    let o = env.tcd.tcctl(&["revoke", &grant]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    asked_again(&env, &url, &alice, ["notes/late1.md", "notes/late2.md"]);
}

/// The bearer of `bearer` writes each file in one era (2026-07-28, then legacy): no grant
/// covers it, so a human is asked (refused here) and nothing is written.
#[track_caller]
fn asked_again(env: &Env, url: &str, bearer: &str, files: [&str; 2]) {
    for (c, file) in [Client::PyAuto, Client::PyLegacy].into_iter().zip(files) {
        let plan = json!([call("write_file", write(file, "no"))]);
        let r = run_as(c, url, Some(bearer), plan);
        let refused = r.result(0);
        assert!(code(refused).is_some(), "{c:?}: {refused}");
        assert_eq!(disk(env, file), None, "{c:?}");
    }
}
