//! End to end, callers on the HTTP front: tokens minted by the real tcd (`tcctl token
//! mint --sub`), a real `tc-shim serve --http` with `[vaults.http.auth] mode = "jwt"`,
//! real server-filesystem. Two callers, alice and bob: each one's approvals, request
//! states, sessions and cursors are bound to them; the other cannot use them.

use tc_tests::shim as support;

use tc_tests::http;

use http::*;
use serde_json::{json, Value};
use support::*;

const CAP: usize = 4096;

fn env() -> Env {
    env_with("")
}

/// [`env`] with `http` as the `[vaults.http]` table's keys.
fn env_with(http: &str) -> Env {
    let vault = Vault::fs_write_gated()
        .paged("read_multiple_files", "paths")
        .raw(&format!(
            "\n[vaults.http]\n{http}\n\n[vaults.http.auth]\nmode = \"jwt\"\naudience = \"tc-http-test\"\n"
        ));
    let mut env = Env::new(&vault.governed(CAP));
    env.start_tcd();
    env
}

#[test]
fn no_token_is_401_with_the_metadata_challenge_and_the_metadata_is_served() {
    let env = env();
    let front = Front::start(&env, "fs");
    let c = Raw::new(&front.url());
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let a = c.post(&ping, &[]);
    assert_eq!(a.status, 401, "{}", a.text);
    let challenge = a.headers["www-authenticate"].to_str().unwrap().to_string();
    assert!(challenge.starts_with("Bearer "), "{challenge}");
    assert!(challenge.contains("resource_metadata="), "{challenge}");
    let a = c.post(&ping, &[("authorization", "Bearer not.a.jwt")]);
    assert_eq!(a.status, 401, "{}", a.text);
    assert!(a.headers["www-authenticate"]
        .to_str()
        .unwrap()
        .contains("invalid_token"));
    let meta = Raw::new(&format!(
        "http://127.0.0.1:{}/.well-known/oauth-protected-resource/mcp",
        front.port
    ));
    let m = meta.send(meta.request(reqwest::Method::GET));
    assert_eq!(m.status, 200, "{}", m.text);
    assert_eq!(m.last()["resource"], front.url(), "{}", m.text);
    // A token in the query string is refused even when it is valid.
    let token = mint_bearer(&env, "alice");
    let q = Raw::new(&format!("{}?access_token={token}", front.url()));
    assert_eq!(q.post(&ping, &[]).status, 400);
}

#[test]
fn one_callers_session_and_approval_are_not_the_others() {
    let env = env();
    let front = Front::start(&env, "fs");
    let (alice, alice_bearer) = bearer_session(&front, &mint_bearer(&env, "alice"));
    let bob_bearer = format!("Bearer {}", mint_bearer(&env, "bob"));

    // bob presenting alice's session id: unknown to him.
    let a = alice.post(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        &[("authorization", &bob_bearer)],
    );
    assert_eq!(a.status, 404, "{}", a.text);

    let args = json!({"path": "note.txt", "content": "alice's"});
    let r = bearer_call(&alice, &alice_bearer, 2, "write_file", args.clone());
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
    assert_eq!(sc(&r)["details"]["caller"], "alice", "{r}");
    assert!(sc(&r)["recovery"]["command"]
        .as_str()
        .unwrap()
        .contains("--caller alice"));
    let token = tcctl_elicit(&env, &r);

    // bob, with alice's approval token, in his own session: refused, nothing written.
    let (bob, _) = bearer_session(&front, bob_bearer.trim_start_matches("Bearer "));
    only_alice_redeems(
        &env,
        (&alice, &alice_bearer),
        (&bob, &bob_bearer),
        &args,
        &token,
        3,
    );
}

#[test]
fn bob_cannot_redeem_alices_request_state() {
    let env = env();
    let front = Front::start(&env, "fs");
    let alice = format!("Bearer {}", mint_bearer(&env, "alice"));
    let bob = format!("Bearer {}", mint_bearer(&env, "bob"));
    let c = Raw::new(&front.url());
    let args = json!({"path": "note.txt", "content": "modern"});
    let post = |bearer: &str, id: u64, params: Value| -> Value {
        let (b, h) = modern_call(id, "write_file", params);
        let mut h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
        h.push(("authorization", bearer));
        let a = c.post(&b, &h);
        assert_eq!(a.status, 200, "{}", a.text);
        a.last()["result"].clone()
    };
    let r = post(&alice, 1, json!({"arguments": args}));
    assert_eq!(r["resultType"], "input_required", "{r}");
    let state = r["requestState"].as_str().unwrap().to_string();
    let accept = json!({"confirm": {"action": "accept", "content": {"approve": true}}});
    let r = post(
        &bob,
        2,
        json!({"arguments": args, "requestState": state, "inputResponses": accept}),
    );
    assert_ne!(
        r["resultType"], "complete",
        "bob's replay of alice's state completed: {r}"
    );
    assert_eq!(disk(&env, "note.txt"), None, "bob ran alice's confirmation");
    let r = post(
        &alice,
        3,
        json!({"arguments": args, "requestState": state, "inputResponses": accept}),
    );
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("modern"));
}

#[test]
fn bob_cannot_page_with_alices_cursor() {
    let env = env();
    let front = Front::start(&env, "fs");
    let mut paths = Vec::new();
    for i in 0..6 {
        let rel = format!("notes/n{i}.txt");
        std::fs::create_dir_all(env.root.join("notes")).unwrap();
        std::fs::write(env.root.join(&rel), "x".repeat(CAP / 6)).unwrap();
        paths.push(rel);
    }
    let (alice, alice_bearer) = bearer_session(&front, &mint_bearer(&env, "alice"));
    let r = bearer_call(
        &alice,
        &alice_bearer,
        1,
        "read_multiple_files",
        json!({"paths": paths}),
    );
    let cursor = r["_meta"]["tc/paging"]["next_cursor"]
        .as_str()
        .unwrap_or_else(|| panic!("first page has a cursor: {r}"))
        .to_string();
    let bob_token = mint_bearer(&env, "bob");
    let (bob, bob_bearer) = bearer_session(&front, &bob_token);
    let next_page = json!({"paths": paths, "cursor": cursor});
    let r = bearer_call(
        &bob,
        &bob_bearer,
        2,
        "read_multiple_files",
        next_page.clone(),
    );
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(sc(&r)["details"]["reason"], "foreign", "{r}");
    let r = bearer_call(&alice, &alice_bearer, 3, "read_multiple_files", next_page);
    assert_ne!(r["isError"], true, "alice's own cursor: {r}");
}

/// One caller cannot take every session: past its share (`max_sessions_per_caller`) its
/// `initialize` is 429, while another caller still opens one; ending one frees a place.
#[test]
fn one_caller_cannot_fill_the_session_table() {
    let env = env_with("max_sessions_per_caller = 2");
    let front = Front::start(&env, "fs");
    let (alice, bob) = (mint_bearer(&env, "alice"), mint_bearer(&env, "bob"));
    let (first, _) = bearer_session(&front, &alice);
    let _second = bearer_session(&front, &alice);
    let c = Raw::new(&front.url());
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}});
    let alice_h = format!("Bearer {alice}");
    let a = c.post(&init, &[("authorization", &alice_h)]);
    assert_eq!(a.status, 429, "{}", a.text);
    assert!(
        a.text.contains("too many sessions for this caller"),
        "{}",
        a.text
    );
    let _bob = bearer_session(&front, &bob);
    let del = first.send(
        first
            .request(reqwest::Method::DELETE)
            .header("authorization", &alice_h),
    );
    assert!(del.status < 300, "{} {}", del.status, del.text);
    let _third = bearer_session(&front, &alice);
}
