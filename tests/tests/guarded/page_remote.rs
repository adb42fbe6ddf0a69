//! Issue 32 point 2 in guarded mode, as root with real users: the remote page (HTTPS on a
//! non-loopback address of the test's own network namespace, self-signed) registers a
//! human's passkey under the guarded rules (a `tcctl page --remote` link, the human's
//! `tcctl passkey add` code, inert until confirmed), and only then signs that human in to
//! see and approve their own request from a phone-sized Chromium.

use tc_tests::guarded;

use guarded::{refused_id, text, Setup};
use serde_json::json;
use tc_tests::browser::Browser;
use tc_tests::netns::ADDR;

const ORIGIN: &str = "https://phone.tc.test:8443";

#[test]
fn a_guarded_phone_passkey_signs_in_only_once_confirmed_and_approves_its_humans_call() {
    if !Browser::available() {
        eprintln!("skipped: needs /usr/bin/chromium and playwright-core (scripts/install-peers)");
        return;
    }
    let setup = Setup {
        remote: true,
        ..Setup::default()
    };
    let Some(s) = setup.start_in_namespace(
        "a_guarded_phone_passkey_signs_in_only_once_confirmed_and_approves_its_humans_call",
        &["/usr/bin/curl"],
    ) else {
        return;
    };
    let o = s.tcctl(s.h1(), &["status"]);
    let status = String::from_utf8_lossy(&o.stdout).to_string();
    let spki = status
        .lines()
        .find_map(|l| l.trim().strip_prefix("public key SHA-256 (base64):"))
        .unwrap_or_else(|| panic!("{status}"))
        .trim()
        .to_string();

    // The human's link opens a registration session on the phone.
    let o = s.tcctl(s.h1(), &["page", "--remote"]);
    assert!(o.status.success(), "{}", text(&o));
    let link = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(
        link.starts_with(&format!("{ORIGIN}/open?t={}-", s.d.human.uid)),
        "{link}"
    );
    let resolve = format!("MAP phone.tc.test {ADDR}, MAP * ~NOTFOUND");
    let mut b = Browser::open_phone(&link, &resolve, &spki, "#pk-add");

    // Registered with the human's code: inert until confirmed, so no sign-in.
    let o = s.tcctl(s.h1(), &["passkey", "add"]);
    assert!(o.status.success(), "{}", text(&o));
    let code = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let msg = b.msg(json!({"op": "registerRemote", "code": code}));
    let want = "passkey added: it approves nothing until you confirm it on your computer: tcctl passkey confirm ";
    assert!(msg.starts_with(want), "{msg}");
    let short = msg[want.len()..].trim().to_string();
    let m = b.msg(json!({"op": "trySignIn"}));
    assert!(
        m.starts_with("not signed in: no passkey is registered yet"),
        "{m}"
    );

    // Confirmed (root may, without a code): it signs the human in.
    let o = s.d.tcctl_as_root(&["passkey", "confirm", &short]);
    assert!(o.status.success(), "{}", text(&o));
    b.cmd(json!({"op": "signIn"}));
    let opened = s.logged("tc.page.opened");
    assert!(
        opened.iter().any(|e| e["detail"]["remote"] == true
            && e["detail"]["access"] == "full"
            && e["detail"]["uid"] == s.d.human.uid),
        "{opened:?}"
    );

    // The human's agent's call: shown to the phone, approved with a tap, run once.
    let mut agent = s.agent();
    let args = guarded::write("v1");
    let id = refused_id(&agent.call_tool(1, "write_file", args.clone()));
    b.cmd(json!({"op": "waitRequest", "id": id}));
    let m = b.msg(json!({"op": "tapApprove", "id": id}));
    assert!(m.starts_with(&format!("approved {id}")), "{m}");
    let ok = agent.call_tool(2, "write_file", args.clone());
    assert_ne!(ok["isError"], true, "{ok}");
    assert_eq!(s.file("note.txt"), "v1");
    let approved = s.logged("tc.elicit.approved");
    assert_eq!(approved.len(), 1, "{approved:?}");
    assert_eq!(approved[0]["detail"]["factor"], "passkey");
}
