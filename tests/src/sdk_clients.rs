//! The real SDK client drivers of tests/http (Python `mcp` 2.3, TypeScript SDK 1.32.2,
//! `@modelcontextprotocol/client` 2.4) run as subprocesses against a front: a plan on
//! argv, one JSON line per step back (contract: tests/http/README.md).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::shim::{peers, workspace};

/// A client driver and the era it is run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    /// Python `mcp.Client(mode="auto")`: lands on 2026-07-28 against tc.
    PyAuto,
    /// Python `mcp.Client(mode="legacy")`: `initialize`, a session.
    PyLegacy,
    /// TypeScript SDK 1.32.2 (legacy only).
    Ts1,
    /// `@modelcontextprotocol/client` 2.4 pinned to 2026-07-28.
    Ts2,
}

impl Client {
    pub fn modern(self) -> bool {
        matches!(self, Client::PyAuto | Client::Ts2)
    }

    fn command(self, url: &str, plan: &Value) -> Command {
        let dir = workspace().join("tests/http");
        let mut c = match self {
            Client::PyAuto | Client::PyLegacy => {
                let mut c = Command::new(peers().join("venv/bin/python"));
                let mode = if self == Client::PyAuto {
                    "auto"
                } else {
                    "legacy"
                };
                c.arg(dir.join("py_client.py"))
                    .arg(url)
                    .args(["--mode", mode]);
                c
            }
            Client::Ts1 => {
                let mut c = Command::new(node());
                c.arg(dir.join("ts_client.mjs")).arg(url);
                c
            }
            Client::Ts2 => {
                let mut c = Command::new(node());
                c.arg(dir.join("ts_client2.mjs"))
                    .arg(url)
                    .args(["--mode", "pin"]);
                c
            }
        };
        c.arg(plan.to_string()).env("TC_PEERS", peers());
        c
    }
}

/// Node 22 from the peers when installed, else the `node` on PATH.
pub fn node() -> PathBuf {
    let n = peers().join("node22/bin/node");
    if n.is_file() {
        n
    } else {
        PathBuf::from("node")
    }
}

/// A running driver: its output lines as they come.
pub struct Driver {
    pub child: Child,
    lines: mpsc::Receiver<Value>,
    /// What a `pause` step waits for a line on (the plan itself is on argv).
    stdin: Option<ChildStdin>,
    pub client: Client,
}

impl Driver {
    pub fn start(client: Client, url: &str, plan: Value) -> Driver {
        Driver::start_as(client, url, None, plan)
    }

    /// [`Driver::start`] with `Authorization: Bearer <bearer>` on every request (the
    /// Python drivers only).
    pub fn start_as(client: Client, url: &str, bearer: Option<&str>, plan: Value) -> Driver {
        let mut cmd = client.command(url, &plan);
        if let Some(b) = bearer {
            assert!(
                matches!(client, Client::PyAuto | Client::PyLegacy),
                "{client:?}"
            );
            cmd.args(["--bearer", b]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start the {client:?} driver: {e}"));
        let lines = crate::piped::lines_mapped(child.stdout.take().unwrap(), |line| {
            serde_json::from_str(&line).unwrap_or_else(|_| json!({"unparsable": line}))
        });
        Driver {
            stdin: child.stdin.take(),
            child,
            lines,
            client,
        }
    }

    /// Lets a plan waiting in a `pause` step go on.
    pub fn resume(&mut self) {
        let w = self.stdin.as_mut().expect("stdin");
        crate::send_line(w, "");
    }

    /// The next line (30 s at most); `None` when the driver ended.
    #[allow(clippy::should_implement_trait)] // a blocking read with a timeout, not an iterator
    pub fn next(&mut self) -> Option<Value> {
        match self.lines.recv_timeout(Duration::from_secs(30)) {
            Ok(v) => Some(v),
            Err(mpsc::RecvTimeoutError::Disconnected) => None,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("{:?} driver: no line in 30 s", self.client)
            }
        }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What a whole run printed: the `connected` line and one line per step.
pub struct Run {
    pub connected: Value,
    pub steps: Vec<Value>,
}

impl Run {
    /// Step `i`, which must have succeeded.
    #[track_caller]
    pub fn ok(&self, i: usize) -> &Value {
        let s = &self.steps[i];
        assert_eq!(s["ok"], true, "step {i} failed: {s}");
        s
    }

    /// The `CallToolResult` of call step `i`.
    #[track_caller]
    pub fn result(&self, i: usize) -> &Value {
        &self.ok(i)["result"]
    }
}

/// Runs `plan` to the end with `client`; every step must have printed a line.
pub fn run(client: Client, url: &str, plan: Value) -> Run {
    run_as(client, url, None, plan)
}

/// [`run`] as the bearer of `bearer` (see [`Driver::start_as`]).
pub fn run_as(client: Client, url: &str, bearer: Option<&str>, plan: Value) -> Run {
    let n = plan.as_array().map_or(0, Vec::len);
    let mut d = Driver::start_as(client, url, bearer, plan);
    let connected = d.next().expect("the driver printed nothing");
    assert_eq!(connected["connected"], true, "{client:?}: {connected}");
    let mut steps = Vec::new();
    while let Some(v) = d.next() {
        assert!(v.get("fatal").is_none(), "{client:?}: {v}");
        steps.push(v);
    }
    let status = d.child.wait().unwrap();
    assert!(status.success(), "{client:?} exited {status}: {steps:?}");
    assert_eq!(steps.len(), n, "{client:?}: {steps:?}");
    let era = if client.modern() { "modern" } else { "legacy" };
    assert_eq!(connected["era"], era, "{client:?}: {connected}");
    Run { connected, steps }
}

pub fn list() -> Value {
    json!({"op": "list"})
}

pub fn call(name: &str, args: Value) -> Value {
    json!({"op": "call", "name": name, "args": args})
}

/// A call whose prompts get `answer` (the SDK drives the 2026-07-28 rounds).
pub fn call_answering(name: &str, args: Value, answer: Value) -> Value {
    json!({"op": "call", "name": name, "args": args, "answer": answer})
}

/// Waits for one line on stdin ([`Driver::resume`]): the test acts, then the plan goes on.
pub fn pause() -> Value {
    json!({"op": "pause"})
}

/// One 2026-07-28 round (py_client and ts_client2), not driven: the answer to a prompt is
/// the test's, given as `input_responses` with the `request_state` of an earlier round.
pub fn raw_round(name: &str, args: Value, state: Option<&str>, responses: Option<Value>) -> Value {
    let mut step = json!({"op": "raw", "name": name, "args": args});
    if let Some(s) = state {
        step["request_state"] = json!(s);
    }
    if let Some(r) = responses {
        step["input_responses"] = r;
    }
    step
}
