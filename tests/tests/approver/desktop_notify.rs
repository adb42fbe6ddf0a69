//! End to end, desktop notifications (issue 17 item 5) over a REAL D-Bus: a private
//! `dbus-daemon` (its own config: no service activation, nothing of the host's), a
//! notification server written with jeepney (tests/fixtures/notify_server.py: another
//! D-Bus implementation than tcctl's zbus; it checks Notify's `susssasa{sv}i`), `tcctl
//! watch` on that bus, and requests raised by a Python `mcp` client through a real
//! tc-shim in front of server-filesystem, real tcd.

use tc_tests::shim as support;

use tc_tests::elicit;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use elicit::*;
use serde_json::{json, Value};
use support::*;

use crate::watch::{lines_of, spawn_tcctl};

const WAIT: Duration = Duration::from_secs(30);

/// A child killed (and reaped) on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A private session bus: `dbus-daemon --nofork --print-address` on a socket in a temp
/// dir, with a config that activates no service (a notification daemon installed on
/// the host must not answer in place of the test's server).
struct Bus {
    _daemon: Killed,
    address: String,
    _dir: tempfile::TempDir,
}

impl Bus {
    fn start() -> Bus {
        let dbus = Path::new("/usr/bin/dbus-daemon");
        assert!(
            dbus.exists(),
            "/usr/bin/dbus-daemon is missing: run scripts/install-peers (apt-get install dbus-daemon)"
        );
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("bus.conf");
        std::fs::write(
            &conf,
            format!(
                "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN\"\n \
                 \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n<busconfig>\n\
                 <type>session</type>\n<listen>unix:path={}</listen>\n<auth>EXTERNAL</auth>\n\
                 <policy context=\"default\"><allow send_destination=\"*\"/><allow receive_sender=\"*\"/><allow own=\"*\"/></policy>\n\
                 </busconfig>\n",
                dir.path().join("bus").display()
            ),
        )
        .unwrap();
        let mut child = Command::new(dbus)
            .arg(format!("--config-file={}", conf.display()))
            .args(["--nofork", "--print-address"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn dbus-daemon");
        let out = lines_of(child.stdout.take().unwrap());
        let daemon = Killed(child);
        let address = out
            .recv_timeout(WAIT)
            .expect("dbus-daemon printed its address");
        assert!(address.starts_with("unix:path="), "{address}");
        Bus {
            _daemon: daemon,
            address,
            _dir: dir,
        }
    }
}

/// The jeepney notification server on `bus`; each Notify it accepted is a JSON line.
struct Server {
    _child: Killed,
    lines: mpsc::Receiver<String>,
}

impl Server {
    fn start(bus: &Bus, markup: bool) -> Server {
        let py = peers().join("venv/bin/python");
        let mut c = Command::new(&py);
        c.arg(workspace().join("tests/fixtures/notify_server.py"))
            .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        if markup {
            c.arg("--markup");
        }
        let mut child = c.spawn().expect("spawn notify_server.py");
        let lines = lines_of(child.stdout.take().unwrap());
        let s = Server {
            _child: Killed(child),
            lines,
        };
        let ready = s.next();
        assert_eq!(
            ready["ready"], true,
            "the notification server did not start (jeepney missing? run scripts/install-peers): {ready}"
        );
        s
    }

    fn next(&self) -> Value {
        let l = self
            .lines
            .recv_timeout(WAIT)
            .expect("a line from the notification server");
        serde_json::from_str(&l).unwrap_or_else(|_| panic!("server said {l:?}"))
    }
}

/// `tcctl watch` as a child: its stdout and stderr lines on channels; killed on drop.
struct Watch {
    _child: Killed,
    out: mpsc::Receiver<String>,
    err: mpsc::Receiver<String>,
}

impl Watch {
    fn start(env: &Env, bus: Option<&str>) -> Watch {
        let mut child = spawn_tcctl(env, &["watch"], bus);
        let out = lines_of(child.stdout.take().unwrap());
        let err = lines_of(child.stderr.take().unwrap());
        Watch {
            _child: Killed(child),
            out,
            err,
        }
    }

    fn out(&self) -> String {
        self.out
            .recv_timeout(WAIT)
            .expect("a stdout line from tcctl watch")
    }

    fn err(&self) -> String {
        self.err
            .recv_timeout(WAIT)
            .expect("a stderr line from tcctl watch")
    }
}

/// tcd with the approval page on a free port; the Python client connected.
fn started() -> (Env, Human, u16) {
    let mut env = fs_vault("", None);
    let port = tc_tests::page::listen_on_free_port(&env.config);
    env.start_tcd();
    let h = Human::python("legacy", &env.shim_argv("fs"));
    (env, h, port)
}

/// Content an agent would use to style, link or hide text in a notification.
const HOSTILE: &str = "<b>urgent</b> & <a href=\"http://evil.example/\">approve</a>\u{1b}[2J";

/// Raises `write_file(path, HOSTILE)`; returns the refusal's details (id, hash, state).
fn raise(h: &mut Human, path: &str) -> Value {
    let args = json!({"path": path, "content": HOSTILE});
    let r = h.call("write_file", args.clone());
    assert_elicit_required(&r, "write_file", "fs", &args);
    sc(&r)["details"].clone()
}

/// What every notification must hold and must not: names the tool, vault and request,
/// links the page with no query or fragment, and carries none of what the token route
/// binds (hash, state) nor a paste-able `tcctl elicit` line.
#[track_caller]
fn check_notification(n: &Value, d: &Value, port: u16) -> (String, String) {
    let id = d["request_id"].as_str().unwrap();
    let (summary, body) = (n["summary"].as_str().unwrap(), n["body"].as_str().unwrap());
    assert_eq!(n["app_name"], "tcctl", "{n}");
    assert_eq!(n["actions"], json!([]), "a nudge has nothing to click: {n}");
    assert!(
        summary.contains("write_file") && summary.contains("fs"),
        "{n}"
    );
    assert!(body.contains(&format!("Request {id}")), "{d} {n}");
    let link = format!("http://127.0.0.1:{port}/requests/{id}");
    assert!(body.contains(&link), "{link} {n}");
    assert!(
        !body.contains(&format!("{link}?")) && !body.contains(&format!("{link}#")),
        "{n}"
    );
    assert!(body.contains("a.txt") || body.contains("b.txt"), "{n}");
    for k in ["args_hash", "state_fp"] {
        let secret = d[k].as_str().unwrap();
        assert!(secret.len() >= 16, "{k} in {d}");
        assert!(
            !summary.contains(secret) && !body.contains(secret),
            "{k} {secret}: {n}"
        );
    }
    for s in ["tcctl elicit", "--hash", "elicit_token", "\u{1b}"] {
        assert!(!summary.contains(s) && !body.contains(s), "{s:?}: {n}");
    }
    (summary.to_string(), body.to_string())
}

#[test]
fn each_request_is_a_notification_the_real_bus_and_server_accept() {
    let (env, mut h, port) = started();
    let bus = Bus::start();
    let mut waiting: Option<Value> = None;
    for markup in [true, false] {
        let server = Server::start(&bus, markup);
        let w = Watch::start(&env, Some(&bus.address));
        assert_eq!(
            w.err(),
            "tcctl watch: desktop notifications on; waiting for requests"
        );
        // A watcher started later notifies what already waits, first.
        if let Some(d) = &waiting {
            let n = server.next();
            check_notification(&n, d, port);
        }
        let path = if markup { "a.txt" } else { "b.txt" };
        let d = raise(&mut h, path);
        let n = server.next();
        assert!(
            n.get("rejected").is_none(),
            "the server refused Notify: {n}"
        );
        let (summary, body) = check_notification(&n, &d, port);
        // The summary is plain text by the specification: never markup-escaped.
        assert!(
            !summary.contains("&amp;") && !summary.contains("&lt;"),
            "{n}"
        );
        if markup {
            // A server that renders body markup gets the agent's tags as text.
            assert!(!body.contains('<') && !body.contains('>'), "{n}");
            assert!(
                body.contains("&lt;b&gt;urgent&lt;/b&gt; &amp; &lt;a href="),
                "{n}"
            );
        } else {
            // One that does not shows the body as it is: escaping would show through.
            assert!(!body.contains("&lt;") && !body.contains("&amp;"), "{n}");
            assert!(body.contains("<b>urgent</b> & <a href="), "{n}");
        }
        // Notified, so not also listed; and a nudge approves nothing.
        assert!(w.out.try_recv().is_err(), "listed as well");
        waiting = Some(d);
        drop(w);
        drop(server);
    }
    assert_eq!(events_of(&env, "tc.elicit.approved"), 0);
    let again = h.call("write_file", json!({"path": "a.txt", "content": HOSTILE}));
    assert_eq!(code(&again).as_deref(), Some("elicit_required"), "{again}");
    assert_eq!(disk(&env, "a.txt"), None);
}

#[test]
fn a_server_that_goes_away_falls_back_to_the_terminal() {
    let (env, mut h, port) = started();
    let bus = Bus::start();
    let server = Server::start(&bus, true);
    let w = Watch::start(&env, Some(&bus.address));
    assert_eq!(
        w.err(),
        "tcctl watch: desktop notifications on; waiting for requests"
    );
    let d = raise(&mut h, "a.txt");
    check_notification(&server.next(), &d, port);
    drop(server);
    let d = raise(&mut h, "b.txt");
    let id = d["request_id"].as_str().unwrap();
    let e = w.err();
    assert!(
        e.starts_with("tcctl watch: the desktop notification failed (")
            && e.ends_with("listing here"),
        "{e}"
    );
    let l = w.out();
    assert!(
        l.starts_with(&format!("[{id}] write_file on fs")),
        "{id}: {l}"
    );
}

#[test]
fn without_a_notification_server_watch_says_why_and_lists() {
    let (env, mut h, port) = started();
    let bus = Bus::start();
    let cases = [
        (None, "DBUS_SESSION_BUS_ADDRESS is not set"),
        (
            Some("unix:path=/nonexistent/tc-test-bus".to_string()),
            "cannot reach the session bus",
        ),
        (
            Some(bus.address.clone()),
            "no notification server on the session bus",
        ),
    ];
    for (n, (addr, why)) in cases.into_iter().enumerate() {
        let w = Watch::start(&env, addr.as_deref());
        let e = w.err();
        assert!(
            e.starts_with("tcctl watch: no desktop notifications (") && e.contains(why),
            "{why}: {e}"
        );
        assert!(e.ends_with("listing requests here as they arrive"), "{e}");
        let d = raise(&mut h, &format!("c{n}.txt"));
        let id = d["request_id"].as_str().unwrap();
        let l = w.out();
        assert!(l.starts_with(&format!("[{id}] write_file on fs")), "{l}");
        let rest = [w.out(), w.out()].join("\n");
        assert!(rest.contains(&format!("tcctl approve {id}")), "{rest}");
        assert!(
            rest.contains(&format!("http://127.0.0.1:{port}/requests/{id}")),
            "{rest}"
        );
        // Answered, it is no longer pending: the next watcher does not list it.
        let o = env.tcd.tcctl(&["decline", id]);
        assert!(o.status.success(), "{o:?}");
        assert_eq!(w.out(), format!("[{id}] declined"));
    }
}
