//! Issue 17 item 3 in guarded mode, as root through the real binaries: tcd as its daemon
//! user serving the approval page on loopback, the human's TOTP enrolled by root on a
//! pty, a gated call raised by the human's agent through tc-shim in front of
//! server-filesystem, and the request approved ON THE PAGE (its HTTP API, with the page
//! session's cookie and CSRF token) with codes this test computes from the enrolled
//! secret. Runs in its own mount namespace (tests/src/guarded.rs).

use tc_tests::guarded;
use tc_tests::pty as pty_support;
use tc_tests::shim as support;

use std::path::{Path, PathBuf};
use std::process::Command;

use guarded::{clean_env, in_namespace, owned_dir, text, Deployment};
use pty_support::{
    away_from_a_step_edge, base32_decode, right_code, step_now, totp, wrong_code, Pty,
};
use serde_json::{json, Value};
use support::{bin, code, filesystem_server, sc, workspace, RawClient};

const PYTHON: &str = "/usr/bin/python3";

fn skip() -> bool {
    let ok = guarded::can_run() && Path::new(PYTHON).exists();
    if !ok {
        eprintln!("skipped: needs root, setpriv, unshare, useradd, mount and {PYTHON}");
    }
    !ok
}

/// A guarded deployment: vault `fs` (server-filesystem, write_file gated) over a root the
/// human owns holding note.txt = "v0", and the approval page on `port`.
struct Scene {
    d: Deployment,
    root: PathBuf,
    port: u16,
    _t: tempfile::TempDir,
}

impl Scene {
    fn start() -> Scene {
        let t = guarded::open_tempdir();
        let human = guarded::user(guarded::HUMAN);
        let root = owned_dir(t.path(), "vault", &human, 0o755);
        let note = root.join("note.txt");
        std::fs::write(&note, "v0").unwrap();
        std::os::unix::fs::chown(&note, Some(human.uid), Some(human.gid)).unwrap();
        let port = tc_tests::free_port();
        let r = root.display();
        let vaults = format!(
            "[approvals]\nlisten = \"127.0.0.1:{port}\"\n\n\
             [[vaults]]\nid = \"fs\"\nroot = \"{r}\"\ncommand = [\"node\", \"{}\", \"{r}\"]\n\n\
             [[vaults.gates]]\ntool = \"write_file\"\ntargets = {{ paths = [\"path\"] }}\n",
            filesystem_server().display()
        );
        let d = Deployment::start(&vaults);
        Scene {
            d,
            root,
            port,
            _t: t,
        }
    }

    fn note(&self) -> String {
        std::fs::read_to_string(self.root.join("note.txt")).unwrap()
    }

    /// Root enrolls the human on a pty, confirming with step T−1's code (T stays fresh);
    /// returns the secret read from what tcctl showed.
    fn enroll(&self) -> Vec<u8> {
        let mut c = Command::new(PYTHON);
        clean_env(&mut c, Path::new("/root"));
        c.arg(workspace().join("tests/fixtures/pty_run.py"))
            .arg(bin("tcctl"))
            .args(["enroll", "totp", "--user", guarded::HUMAN]);
        let mut p = Pty::start(c);
        let shown = p.wait_for("to confirm (1 of 3): ");
        let b32 = shown
            .split("secret (base32, to type in instead): ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .unwrap_or_else(|| panic!("no secret shown:\n{shown}"))
            .to_string();
        let secret = base32_decode(&b32);
        away_from_a_step_edge();
        p.type_line(&totp(&secret, step_now() - 1));
        let (rc, out) = p.finish();
        assert!(rc == 0 && out.contains("enrolled"), "{out}");
        secret
    }

    /// The agent: a raw MCP client on a tc-shim run as the human (refusal route).
    fn agent(&self) -> RawClient {
        let mut c = RawClient::start(&self.d.shim_argv("fs", &[], &[]));
        let init = c.initialize();
        assert!(init["result"]["serverInfo"].is_object(), "{init}");
        c
    }

    /// How many audit events of `kind` tcd logged.
    fn events(&self, kind: &str) -> usize {
        let out = self.d.tcctl_as_root(&["events", "--json"]);
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|e| e["kind"] == kind)
            .count()
    }

    /// The status tcd reports for request `id` ("" when not listed).
    fn status(&self, id: &str) -> String {
        let out = self.d.tcctl_as_root(&["pending", "--json"]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|v| v["request_id"] == id)
            .map(|v| v["status"].as_str().unwrap().to_string())
            .unwrap_or_default()
    }
}

fn write(content: &str) -> Value {
    json!({"path": "note.txt", "content": content})
}

/// The request id of a guarded `elicit_required` refusal.
#[track_caller]
fn refused_id(r: &Value) -> String {
    assert_eq!(code(r).as_deref(), Some("elicit_required"), "{r}");
    assert_eq!(sc(r)["details"]["mode"], "guarded", "{r}");
    sc(r)["details"]["request_id"].as_str().unwrap().to_string()
}

// ---- the page, over raw HTTP/1.1 ----

/// A page load: the session cookie and the CSRF token the page carries.
struct Session {
    port: u16,
    cookie: String,
    csrf: String,
    /// The human: the page honours the session from their sockets only.
    uid: u32,
}

impl Session {
    /// A session of the human, from the link `tcctl page` mints for them.
    fn open(s: &Scene) -> Session {
        let o = s.d.tcctl_as_human(&["page", "--print"]);
        assert!(o.status.success(), "{}", text(&o));
        let p = tc_tests::page::PageSession::open_as(
            String::from_utf8_lossy(&o.stdout).trim(),
            Some(s.d.human.uid),
        );
        Session {
            port: p.port,
            cookie: p.cookie,
            csrf: p.csrf,
            uid: s.d.human.uid,
        }
    }

    /// POST `/api/requests/{id}/approve/totp` with `code`, `host`, `origin` (None: no
    /// Origin header) and the CSRF token when `csrf`: (status, JSON body).
    fn totp_as(
        &self,
        id: &str,
        code: &str,
        host: &str,
        origin: Option<&str>,
        csrf: bool,
    ) -> (u16, Value) {
        let body = json!({ "code": code }).to_string();
        let origin = origin
            .map(|o| format!("Origin: {o}\r\n"))
            .unwrap_or_default();
        let token = if csrf {
            format!("x-tc-csrf: {}\r\n", self.csrf)
        } else {
            String::new()
        };
        let (st, out) = tc_tests::page::http_as(
            self.port,
            Some(self.uid),
            &format!(
                "POST /api/requests/{id}/approve/totp HTTP/1.1\r\nHost: {host}\r\n{origin}\
                 Cookie: {}\r\n{token}content-type: application/json\r\n\
                 content-length: {}\r\nConnection: close\r\n\r\n{body}",
                self.cookie,
                body.len()
            ),
        );
        let json = out
            .split("\r\n\r\n")
            .nth(1)
            .and_then(|b| serde_json::from_str(b).ok())
            .unwrap_or(Value::Null);
        (st, json)
    }

    /// The page's own request (right Host, Origin and token); a refusal for the
    /// wrong-code delay (the code was not checked) is waited out.
    fn totp(&self, id: &str, code: &str) -> (u16, Value) {
        let host = format!("localhost:{}", self.port);
        let origin = format!("http://{host}");
        for _ in 0..100 {
            let (st, v) = self.totp_as(id, code, &host, Some(&origin), true);
            let delayed = v["error"]
                .as_str()
                .is_some_and(|e| e.starts_with("factor_delay"));
            if !delayed {
                return (st, v);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("always refused for the delay");
    }
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
    if skip() || !in_namespace("the_page_approves_with_the_current_code_once") {
        return;
    }
    let s = Scene::start();
    let secret = s.enroll();
    let mut agent = s.agent();
    let id = refused_id(&agent.call_tool(1, "write_file", write("v1")));
    let page = Session::open(&s);
    let (port, right) = (s.port, right_code(&secret));

    // Not the page's own request: refused at the front door, the factor never consulted.
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
        let (st, v) = page.totp_as(&id, &right, &host, origin.as_deref(), csrf);
        assert_eq!(st, 403, "{why}: {v}");
    }
    assert_eq!(s.status(&id), "pending");
    assert_eq!(s.events("tc.factor.failed"), 0, "the factor was consulted");
    assert_eq!(s.events("tc.elicit.approved"), 0);

    // A wrong code: refused and counted; nothing approved.
    refused_with(
        page.totp(&id, &wrong_code(&secret, 1)),
        409,
        "factor_invalid",
    );
    assert_eq!(s.events("tc.factor.failed"), 1);
    assert_eq!(s.status(&id), "pending");
    refused_id(&agent.call_tool(2, "write_file", write("v1")));
    assert_eq!(s.note(), "v0");

    // The right code (the one the refused requests carried): approved; the agent's plain
    // retry runs the call, once.
    let (st, v) = page.totp(&id, &right);
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
    refused_with(page.totp(&id2, &right), 409, "factor_replayed");
    assert_eq!(s.events("tc.factor.replayed"), 1);
    assert_eq!(s.status(&id2), "pending");
    refused_id(&agent.call_tool(5, "write_file", write("v1")));
    assert_eq!(s.note(), "v0");
    assert_eq!(s.events("tc.elicit.approved"), 1);
}
