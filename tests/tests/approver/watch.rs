//! End to end, knowing that something waits (issue 17 item 5): `tcctl pending --watch` and
//! `tcctl watch` as child processes while a Python `mcp` client raises requests through a
//! real tc-shim in front of server-filesystem, real tcd.

use tc_tests::shim as support;

use tc_tests::elicit;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use elicit::*;
use serde_json::{json, Value};
use support::*;

/// A long-running tcctl whose stdout lines arrive on a channel; killed on drop.
struct Watching {
    child: Child,
    lines: mpsc::Receiver<String>,
}

/// `tcctl args` against `env` as a child, stdout and stderr piped, on the session bus
/// `dbus` (None: none).
pub(crate) fn spawn_tcctl(env: &Env, args: &[&str], dbus: Option<&str>) -> Child {
    let mut c = env.tcd.tcctl_command(args);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    match dbus {
        Some(a) => c.env("DBUS_SESSION_BUS_ADDRESS", a),
        None => c.env_remove("DBUS_SESSION_BUS_ADDRESS"),
    };
    c.spawn().expect("spawn tcctl")
}

/// Lines of a child's pipe, on a channel.
pub(crate) fn lines_of(r: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(r).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

impl Watching {
    fn start(env: &Env, args: &[&str], dbus: Option<&str>) -> Watching {
        let mut child = spawn_tcctl(env, args, dbus);
        let lines = lines_of(child.stdout.take().unwrap());
        Watching { child, lines }
    }

    fn line(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(30))
            .expect("a line from tcctl within 30s")
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// tcd (with the approval page on a free port when `page`), the Python client connected.
fn started(page: bool) -> (Env, Human, u16) {
    let mut env = fs_vault("", None);
    let port = if page {
        tc_tests::page::listen_on_free_port(&env.config)
    } else {
        0
    };
    env.start_tcd();
    let h = Human::python("legacy", &env.shim_argv("fs"));
    (env, h, port)
}

fn write(path: &str, content: &str) -> Value {
    json!({"path": path, "content": content})
}

#[test]
fn pending_watch_prints_each_new_request_once() {
    let (env, mut h, port) = started(true);
    // One raised before the watcher starts: listed at start.
    let before = request_id(&h.call("write_file", write("a.txt", "1")));
    let w = Watching::start(&env, &["pending", "--watch"], None);
    let first: Value = serde_json::from_str(&w.line()).unwrap();
    assert_eq!(first["id"], before.as_str(), "{first}");
    // Raised while it runs: each appears, in order, with what a script needs.
    let mut ids = vec![before.clone()];
    for (i, name) in ["b.txt", "c.txt", "d.txt"].iter().enumerate() {
        let id = request_id(&h.call("write_file", write(name, &i.to_string())));
        let v: Value = serde_json::from_str(&w.line()).unwrap();
        assert_eq!(v["id"], id.as_str(), "{v}");
        assert_eq!(v["vault"], "fs");
        assert_eq!(v["tool"], "write_file");
        assert_eq!(v["caller"], "stdio");
        assert!(v["summary"].as_str().unwrap().contains(name), "{v}");
        assert!(v["expires_at_ms"].as_i64().unwrap() > 0, "{v}");
        assert!(v["expires"].as_str().unwrap().ends_with('Z'), "{v}");
        assert_eq!(
            v["url"],
            format!("http://127.0.0.1:{port}/requests/{id}"),
            "{v}"
        );
        ids.push(id);
    }
    // The identical call again keeps its pending id: not a new line.
    assert_eq!(
        request_id(&h.call("write_file", write("d.txt", "2"))),
        ids[3]
    );
    // Approving one logs more events: still no new line for it.
    let o = env.tcd.tcctl(&["approve", &ids[1], "--yes"]);
    assert!(o.status.success(), "{o:?}");
    // A fresh request after those: it is the next line, so nothing came in between.
    let last = request_id(&h.call("write_file", write("e.txt", "5")));
    let v: Value = serde_json::from_str(&w.line()).unwrap();
    assert_eq!(v["id"], last.as_str(), "a duplicate came first: {v}");
    ids.push(last);
    let uniq: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(uniq.len(), ids.len());
}

#[test]
fn a_second_watcher_started_later_sees_what_waits_and_nothing_twice() {
    let (env, mut h, _) = started(false);
    let a = request_id(&h.call("write_file", write("a.txt", "1")));
    let b = request_id(&h.call("write_file", write("b.txt", "1")));
    let w = Watching::start(&env, &["pending", "--watch"], None);
    let got: Vec<Value> = (0..2)
        .map(|_| serde_json::from_str(&w.line()).unwrap())
        .collect();
    assert_eq!(got[0]["id"], a.as_str(), "oldest first: {got:?}");
    assert_eq!(got[1]["id"], b.as_str(), "{got:?}");
    assert!(got[0].get("url").is_none(), "no page configured: {got:?}");
    // The replayed log (their tc.elicit.requested events) adds nothing.
    let c = request_id(&h.call("write_file", write("c.txt", "1")));
    let v: Value = serde_json::from_str(&w.line()).unwrap();
    assert_eq!(v["id"], c.as_str(), "{v}");
}

#[test]
fn watch_without_a_desktop_lists_on_the_terminal() {
    let (env, mut h, port) = started(true);
    for (n, bus) in [None, Some("unix:path=/nonexistent/tc-test-bus")]
        .into_iter()
        .enumerate()
    {
        let w = Watching::start(&env, &["watch"], bus);
        let r = h.call("write_file", write("w.txt", &n.to_string()));
        let id = request_id(&r);
        let l = w.line();
        assert!(l.starts_with(&format!("[{id}] write_file on fs")), "{l}");
        let rest = [w.line(), w.line()].join("\n");
        assert!(rest.contains("w.txt"), "{rest}");
        assert!(rest.contains(&format!("tcctl approve {id}")), "{rest}");
        assert!(
            rest.contains(&format!("http://127.0.0.1:{port}/requests/{id}")),
            "{rest}"
        );
        // The outcome shows in the live list; the notification never approves anything.
        let o = env.tcd.tcctl(&["decline", &id]);
        assert!(o.status.success(), "{o:?}");
        assert_eq!(w.line(), format!("[{id}] declined"));
        assert_eq!(events_of(&env, "tc.elicit.approved"), 0);
        drop(w);
    }
}
