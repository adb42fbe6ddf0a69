//! End to end, grants on the approval page (issue 31 item 4) in real Chromium: "Approve,
//! and allow similar…" with the virtual authenticator's passkey, the grants list following
//! the SSE stream, and Revoke, while the Python `mcp` client calls through real tc-shim in
//! front of server-filesystem (the scene of `page_browser.rs`).

use serde_json::{json, Value};
use tc_tests::browser::Browser;
use tc_tests::elicit::{disk, events_of};

use crate::page_browser::{page_link, refused_id, register, started, status_of};

fn note(path: &str, content: &str) -> Value {
    json!({ "path": path, "content": content })
}

/// The grant `g` as `tcctl grants --json` shows it.
fn listed(env: &tc_tests::shim::Env, g: &str) -> Value {
    env.tcd.grant_listed(g)
}

/// The form as offered for one argument.
fn offered<'a>(form: &'a Value, arg: &str) -> &'a Value {
    form["offered"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["arg"] == arg)
        .unwrap_or_else(|| panic!("{arg} not offered: {form}"))
}

#[test]
fn a_grant_given_on_the_page_lets_similar_calls_run_until_it_is_revoked_there() {
    let (env, mut h, _) = started(None);
    std::fs::create_dir(env.root.join("notes")).unwrap();
    let mut b = Browser::open(&page_link(&env));
    register(&env, &mut b);
    let first = note("notes/a.md", "a");
    let id = refused_id(&h.call("write_file", first.clone()), &first);
    b.cmd(json!({"op": "waitRequest", "id": id}));

    // A malformed glob (quoted back in the refusal, a bidi override in it) and one the
    // request's own path is outside: the daemon refuses each grant, the page says why
    // (escaped), and nothing is approved.
    let form = b.cmd(json!({"op": "grantApprove", "id": id, "globs": {"path": "notes/\u{202e}["}}));
    let m = form["msg"].as_str().unwrap();
    assert!(m.starts_with("not approved: grant_refused"), "{m}");
    assert!(m.contains("⟨U+202E⟩") && !m.contains('\u{202e}'), "{m}");
    let outside = b.cmd(json!({"op": "grantApprove", "id": id, "globs": {"path": "other/**"}}));
    let m = outside["msg"].as_str().unwrap();
    assert!(
        m.starts_with("not approved: grant_refused") && m.contains("outside the glob"),
        "{m}"
    );
    assert_eq!(status_of(&env, &id), "pending");
    // What was offered: the file argument's folder as a glob; the other one exact.
    assert_eq!(offered(&form, "path")["glob"], "notes/**", "{form}");
    let content = offered(&form, "content");
    assert_eq!(content["glob"], Value::Null, "{form}");
    assert_eq!(content["any"], true, "{form}");
    assert!(
        content["text"]
            .as_str()
            .unwrap()
            .contains("exactly as shown"),
        "{form}"
    );
    let scope = form["scope"].as_str().unwrap();
    assert!(
        scope.contains("tool write_file, in vault fs, from caller stdio"),
        "{scope}"
    );

    // notes/**, any content, 5 uses: approved with the passkey, the grant given.
    let form = b.cmd(
        json!({"op": "grantApprove", "id": id, "globs": {"path": "notes/**"},
        "any": ["content"], "uses": 5}),
    );
    let words = form["words"].as_str().unwrap();
    assert_eq!(
        words,
        "Covers write_file in vault fs from stdio: content: any; path under notes/**; for 15 min, 5 uses.",
    );
    let m = form["msg"].as_str().unwrap();
    assert!(
        m.starts_with(&format!("approved {id} with grant g-")),
        "{m}"
    );
    let g = m
        .split_whitespace()
        .find(|w| w.starts_with("g-"))
        .unwrap()
        .trim_end_matches(':')
        .to_string();
    let l = listed(&env, &g);
    assert_eq!(l["status"], "live", "{l}");
    assert_eq!(l["request_id"], id.as_str(), "{l}");

    // The approved call's retry runs; then a similar call runs without asking.
    let ok = h.call("write_file", first);
    assert_ne!(ok["isError"], true, "{ok}");
    assert_eq!(disk(&env, "notes/a.md").as_deref(), Some("a"));
    let ok = h.call("write_file", note("notes/b.md", "b"));
    assert_ne!(ok["isError"], true, "{ok}");
    assert_eq!(disk(&env, "notes/b.md").as_deref(), Some("b"));
    assert_eq!(events_of(&env, "tc.grant.used"), 1);

    // The list shows it with its use, without a reload.
    let row = b.cmd(json!({"op": "waitGrant", "id": g, "status": "live", "used": 1}));
    let cells: Vec<&str> = row["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(cells[0], g);
    assert_eq!(cells[1], "content: any; path under notes/**", "{cells:?}");
    assert_eq!(&cells[2..5], ["write_file", "fs", "stdio"], "{cells:?}");
    assert!(cells[5].starts_with("in "), "expires: {cells:?}");
    assert_eq!(&cells[6..8], ["1", "4"], "used, uses left: {cells:?}");
    assert_ne!(cells[8], "never", "last use: {cells:?}");
    assert_eq!(row["revokeVisible"], true);

    // Revoke is a POST under the page's CSRF rule: without the token, nothing happens.
    let (st, body) = b.request("POST", &format!("/api/grants/{g}/revoke"), json!({}), false);
    assert_eq!(st, 403, "{body}");
    assert_eq!(listed(&env, &g)["status"], "live");

    // Revoked on the page: listed as revoked, and the next similar call asks again.
    let m = b.msg(json!({"op": "revoke", "id": g}));
    assert!(m.starts_with(&format!("revoked {g}")), "{m}");
    let row = b.cmd(json!({"op": "waitGrant", "id": g, "status": "revoked"}));
    assert_eq!(row["revokeVisible"], false, "{row}");
    assert_eq!(listed(&env, &g)["status"], "revoked");
    // The history says when it was given, each use and the revoke.
    let rows = b.cmd(json!({"op": "history"}))["rows"].clone();
    let rows: Vec<Vec<String>> = serde_json::from_value(rows).unwrap();
    let said = |what: &str| rows.iter().filter(|r| r[1] == what && r[6] == g).count();
    assert_eq!(
        (
            said("grant given"),
            said("grant used"),
            said("grant revoked")
        ),
        (1, 1, 1),
        "{rows:?}"
    );
    assert!(
        rows.iter().any(|r| r[1] == "grant given" && r[2] == id),
        "{rows:?}"
    );
    let next = note("notes/c.md", "c");
    let again = refused_id(&h.call("write_file", next.clone()), &next);
    b.cmd(json!({"op": "waitRequest", "id": again}));
    assert_eq!(disk(&env, "notes/c.md"), None);
    assert_eq!(events_of(&env, "tc.grant.used"), 1);
    assert_eq!(events_of(&env, "tc.grant.revoked"), 1);

    b.assert_one_page_load();
}
