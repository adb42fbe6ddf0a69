//! Grants on the approval page in guarded mode (issue 31 item 4), as root with real users
//! through the real binaries (the two-human scene of `humans_apart.rs`): a grant is given
//! on the page only with its human's code, and each human sees and revokes their own.

use tc_tests::guarded;

use guarded::refused_id;
use serde_json::{json, Value};
use tc_tests::pty::right_code;
use tc_tests::shim::wait_until;

use crate::humans_apart::scene;

fn write(path: &str, content: &str) -> Value {
    json!({ "path": path, "content": content })
}

/// The grants a page session's state lists.
fn grants(page: &tc_tests::page::PageSession) -> Vec<Value> {
    page.state()["grants"].as_array().unwrap().clone()
}

/// Human 1 approves their request on the page with their code and a grant on `*.txt`
/// (the form offers the root's `**` for a file at the root): their agent's next `.txt`
/// write runs without asking. Human 2's page shows none of it (list or history) and their Revoke of it is
/// answered as an unknown grant; a grant asked with a wrong code gives nothing; human 1
/// revokes it on the page, and the next write asks again.
#[test]
fn a_grant_on_the_page_needs_the_code_and_is_its_humans_alone() {
    let Some(s) = scene("a_grant_on_the_page_needs_the_code_and_is_its_humans_alone") else {
        return;
    };
    let secret = s.enroll_user(guarded::HUMAN);
    let mut a1 = s.agent_as(s.h1());
    let id = refused_id(&a1.call_tool(1, "write_file", write("note.txt", "v1")));
    let (p1, p2) = (s.session(s.h1()), s.session(s.h2()));
    let offered = &p1.state()["requests"][0];
    assert_eq!(offered["id"], id.as_str(), "{offered}");
    let path = offered["grant"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == "path")
        .unwrap_or_else(|| panic!("{offered}"));
    assert_eq!((&path["file"], &path["glob"]), (&json!(true), &json!("**")));

    let approve = format!("/api/requests/{id}/approve/totp");
    let grant = json!({ "globs": { "path": "*.txt" }, "any": ["content"], "uses": 3 });
    let (st, v) = p1.post(&approve, &json!({ "code": "000000", "grant": grant }));
    assert_eq!(st, 409, "{v}");
    assert!(grants(&p1).is_empty(), "a wrong code gave a grant");
    // The right code once the wrong one's delay is over (a code not checked is not spent).
    let right = json!({ "code": right_code(&secret), "grant": grant });
    let (st, v) = wait_until("the wrong code's delay is over", || {
        let (st, v) = p1.post(&approve, &right);
        let delayed = v["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("factor_delay"));
        (!delayed).then_some((st, v))
    });
    assert_eq!(st, 200, "{v}");
    let g = v["grant"].as_str().unwrap().to_string();
    assert!(g.starts_with("g-"), "{v}");
    let ok = a1.call_tool(2, "write_file", write("note.txt", "v1"));
    assert_ne!(ok["isError"], true, "{ok}");
    let ok = a1.call_tool(3, "write_file", write("shared.txt", "v2"));
    assert_ne!(ok["isError"], true, "the grant did not cover it: {ok}");
    assert_eq!(s.file("shared.txt"), "v2");

    let mine = grants(&p1);
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert_eq!(mine[0]["id"], g.as_str());
    assert_eq!(
        (&mine[0]["used"], &mine[0]["uses_left"]),
        (&json!(1), &json!(2))
    );
    assert_eq!(mine[0]["scope"], "content: any; path under *.txt");
    assert!(grants(&p2).is_empty(), "human 2 sees human 1's grant");
    let theirs = p2.state().to_string();
    assert!(
        !theirs.contains(&g),
        "human 2's history shows the grant: {theirs}"
    );
    let own = p1.state()["history"].to_string();
    assert!(
        own.contains("grant given") && own.contains("grant used"),
        "{own}"
    );
    let revoke = format!("/api/grants/{g}/revoke");
    let (st, v) = p2.post(&revoke, &json!({}));
    assert_eq!(st, 409, "{v}");
    assert!(v["error"].as_str().unwrap().starts_with("unknown"), "{v}");
    assert_eq!(grants(&p1)[0]["status"], "live");

    let (st, v) = p1.post(&revoke, &json!({}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(grants(&p1)[0]["status"], "revoked");
    refused_id(&a1.call_tool(4, "write_file", write("shared.txt", "v3")));
    assert_eq!(s.file("shared.txt"), "v2");
    assert_eq!(s.events("tc.grant.used"), 1);
    assert_eq!(s.events("tc.grant.revoked"), 1);
}
