//! Grants in guarded mode, as root with real users: the agent (the human's uid, without
//! the TOTP secret) cannot give itself a grant with tcctl, with or without a terminal
//! (its raw Approve RPC is refused without the code like any approval: daemon unit
//! tests); the human's grant needs their code, and then lets the covered call through.

use tc_tests::guarded::{self, on_pty, refused_id, write, Setup, PYTHON};
use tc_tests::pty::{right_code, wrong_code};
use tc_tests::shim::bin;

/// tcctl's exit codes.
const FAILURE: i32 = 1;
const REFUSED: i32 = 4;

/// `tcctl args` as the human (the agent's uid), in a new session: no controlling terminal.
fn no_terminal(s: &guarded::Scene, args: &[&str]) -> std::process::Output {
    let mut c = guarded::as_user(&s.d.human, &s.d.home, "setsid");
    c.arg("-w").arg(bin("tcctl")).args(args);
    guarded::run(c)
}

/// `tcctl approve ID --grant --any content` on a pty as the human, typing y and `code`;
/// a refusal for the wrong-code delay (the code was not checked) is retried.
fn grant_on_pty(s: &guarded::Scene, id: &str, code: &str) -> (i32, String) {
    let tcctl = bin("tcctl").display().to_string();
    let args = [tcctl.as_str(), "approve", id, "--grant", "--any", "content"];
    for _ in 0..50 {
        let mut p = on_pty(Some((&s.d.human, &s.d.home)), &args);
        let asked = p.wait_for("[y/N] ");
        assert!(asked.contains("let through, without asking"), "{asked}");
        p.type_line("y");
        p.wait_for("Code from your authenticator app: ");
        p.type_line(code);
        let (rc, out) = p.finish();
        if !out.contains("factor_delay") {
            return (rc, out);
        }
    }
    panic!("always refused for the delay");
}

#[test]
fn only_the_humans_code_gives_a_grant() {
    let setup = Setup::default();
    let Some(s) = setup.start_in_namespace("only_the_humans_code_gives_a_grant", &[PYTHON]) else {
        return;
    };
    let secret = s.enroll();
    let mut agent = s.agent();
    let id = refused_id(&agent.call_tool(1, "write_file", write("v1")));

    // Without a terminal: refused before anything reaches tcd.
    let grant = ["approve", &id, "--grant", "--any", "content"];
    let o = no_terminal(&s, &grant);
    assert_eq!(o.status.code(), Some(FAILURE), "{}", guarded::printed(&o));
    assert!(guarded::printed(&o).contains("no terminal"));
    let o = no_terminal(&s, &[&grant[..], &["--yes"]].concat());
    assert_eq!(o.status.code(), Some(FAILURE), "{}", guarded::printed(&o));
    // On a pty, a wrong code.
    let (rc, out) = grant_on_pty(&s, &id, &wrong_code(&secret, 1));
    assert!(rc == REFUSED && out.contains("factor_invalid"), "{out}");
    assert_eq!(s.events("tc.grant.given"), 0);
    let listed = guarded::printed(&no_terminal(&s, &["grants"]));
    assert!(listed.contains("no grants"), "{listed}");

    // The human, with the code of the moment: approved and granted.
    let (rc, out) = grant_on_pty(&s, &id, &right_code(&secret));
    assert_eq!(rc, 0, "{out}");
    assert!(out.contains("granted g-"), "{out}");
    assert_eq!(s.events("tc.grant.given"), 1);
    let ran = agent.call_tool(2, "write_file", write("v1"));
    assert_ne!(ran["isError"], true, "{ran}");
    // The grant covers note.txt with any content: the next write runs with no new code.
    let ran = agent.call_tool(3, "write_file", write("v2"));
    assert_ne!(ran["isError"], true, "{ran}");
    assert_eq!(s.note(), "v2");
    assert_eq!(s.events("tc.grant.used"), 1);
}
