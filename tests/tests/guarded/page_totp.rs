//! Issue 17 item 3 in guarded mode, as root through the real binaries: tcd as its daemon
//! user serving the approval page on loopback, the human's TOTP enrolled by root on a
//! pty, a gated call raised by the human's agent through tc-shim in front of
//! server-filesystem, and the request approved ON THE PAGE (its HTTP API, with the page
//! session's cookie and CSRF token) with codes this test computes from the enrolled
//! secret. Runs in its own mount namespace (tests/src/guarded.rs).

use tc_tests::guarded;

use guarded::{refused_id, write, Scene, Setup, PYTHON};
use serde_json::{json, Value};
use tc_tests::pty::{right_code, wrong_code};

/// A guarded deployment: vault `fs` (server-filesystem, write_file gated) over a root the
/// human owns holding note.txt = "v0", and the approval page on `port`, for the test
/// `name` in its namespace (None: the test returns).
#[track_caller]
fn scene(name: &str) -> Option<Scene> {
    let setup = Setup {
        page: true,
        ..Setup::default()
    };
    setup.start_in_namespace(name, &[PYTHON])
}

#[track_caller]
fn refused_with(r: (u16, Value), status: u16, reason: &str) {
    assert_eq!(r.0, status, "{}", r.1);
    let e = r.1["error"].as_str().unwrap_or_default();
    assert!(e.starts_with(reason), "{reason}: {}", r.1);
}

/// The page approves a guarded request with the raiser's current code, once: requests
/// from a foreign Host or Origin or without the CSRF token are refused before the factor
/// is looked at (the right code they carried stays good), a wrong code is refused and
/// counted, the right one approves and the agent's plain retry runs the call once, and
/// the same code replayed on the next request is refused as a replay.
#[test]
fn the_page_approves_with_the_current_code_once() {
    let Some(s) = scene("the_page_approves_with_the_current_code_once") else {
        return;
    };
    let secret = s.enroll();
    let mut agent = s.agent();
    let id = refused_id(&agent.call_tool(1, "write_file", write("v1")));
    let page = s.session(s.h1());
    let (port, right) = (s.port, right_code(&secret));

    // Not the page's own request (POST `approve/totp` with the right code, but a foreign
    // Host or Origin, or no Origin or CSRF token): refused at the front door, the factor
    // never consulted.
    let approve = format!("/api/requests/{id}/approve/totp");
    let here = format!("localhost:{port}");
    let origin = format!("http://{here}");
    for (host, origin, csrf, why) in [
        (
            here.clone(),
            Some("http://evil.example".to_string()),
            true,
            "foreign Origin",
        ),
        (
            here.clone(),
            Some(format!("http://10.0.0.7:{port}")),
            true,
            "non-loopback Origin",
        ),
        (
            here.clone(),
            Some("null".to_string()),
            true,
            "opaque Origin",
        ),
        (here.clone(), None, true, "no Origin"),
        (
            format!("evil.example:{port}"),
            Some(origin.clone()),
            true,
            "rebinding Host",
        ),
        (
            format!("10.0.0.7:{port}"),
            Some(origin.clone()),
            true,
            "non-loopback Host",
        ),
        (here.clone(), Some(origin.clone()), false, "no CSRF token"),
    ] {
        let (st, v) = page.post_with(
            &approve,
            &json!({ "code": right }),
            &host,
            origin.as_deref(),
            csrf,
        );
        assert_eq!(st, 403, "{why}: {v}");
    }
    assert_eq!(s.status(&id), "pending");
    assert_eq!(s.events("tc.factor.failed"), 0, "the factor was consulted");
    assert_eq!(s.events("tc.elicit.approved"), 0);

    // A wrong code: refused and counted; nothing approved.
    refused_with(
        page.approve_totp(&id, &wrong_code(&secret, 1)),
        409,
        "factor_invalid",
    );
    assert_eq!(s.events("tc.factor.failed"), 1);
    assert_eq!(s.status(&id), "pending");
    refused_id(&agent.call_tool(2, "write_file", write("v1")));
    assert_eq!(s.note(), "v0");

    // The right code (the one the refused requests carried): approved; the agent's plain
    // retry runs the call, once.
    let (st, v) = page.approve_totp(&id, &right);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["approved"], id.as_str(), "{v}");
    assert_eq!(s.status(&id), "approved");
    let ok = agent.call_tool(3, "write_file", write("v1"));
    assert_ne!(ok["isError"], true, "{ok}");
    assert_eq!(s.note(), "v1");
    std::fs::write(s.root.join("note.txt"), "v0").unwrap();
    let id2 = refused_id(&agent.call_tool(4, "write_file", write("v1")));
    assert_ne!(id2, id);
    assert_eq!(s.note(), "v0");
    assert_eq!(s.events("tc.elicit.approved"), 1);
    assert_eq!(s.events("tc.elicit.consumed"), 1);

    // The same code again, on the new request: a replay, refused and logged.
    refused_with(page.approve_totp(&id2, &right), 409, "factor_replayed");
    assert_eq!(s.events("tc.factor.replayed"), 1);
    assert_eq!(s.status(&id2), "pending");
    refused_id(&agent.call_tool(5, "write_file", write("v1")));
    assert_eq!(s.note(), "v0");
    assert_eq!(s.events("tc.elicit.approved"), 1);
}
