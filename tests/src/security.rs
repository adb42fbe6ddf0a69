//! Shared by the security tests: a raw JSON-RPC client of a real tc-shim process, with
//! the shim's environment and stderr under the test's control.
#![allow(dead_code)]

use std::io::Write;
use std::path::Path;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::piped::{argv_command, byte_lines_of, spawn_piped};

/// tc-shim with piped stdin/stdout; stdout read line by line (bytes) on a thread.
pub struct Shim {
    pub child: Child,
    pub stdin: ChildStdin,
    pub lines: mpsc::Receiver<Vec<u8>>,
    probes: u64,
}

impl Shim {
    /// Runs `argv` (a tc-shim command line) with `TC_LOG=log`, stderr to `stderr` (a
    /// file path) or inherited.
    pub fn start(argv: &[String], log: &str, stderr: Option<&Path>) -> Shim {
        let err = match stderr {
            Some(p) => Stdio::from(std::fs::File::create(p).unwrap()),
            None => Stdio::inherit(),
        };
        let mut cmd = argv_command(argv);
        cmd.env("TC_LOG", log);
        let mut child = spawn_piped(&mut cmd, err).expect("spawn tc-shim");
        let stdin = child.stdin.take().unwrap();
        let lines = byte_lines_of(child.stdout.take().unwrap());
        Shim {
            child,
            stdin,
            lines,
            probes: 0,
        }
    }

    /// Writes one line (a `\n` is added); not flushed.
    pub fn send(&mut self, line: &[u8]) {
        self.stdin.write_all(line).unwrap();
        self.stdin.write_all(b"\n").unwrap();
    }

    /// Writes one message and flushes.
    pub fn send_json(&mut self, msg: &Value) {
        self.send(msg.to_string().as_bytes());
        self.stdin.flush().unwrap();
    }

    /// The next line, parsed; every line tc-shim writes must be one JSON value.
    pub fn recv(&mut self, what: &str) -> Value {
        let line = match self.lines.recv_timeout(Duration::from_secs(60)) {
            Ok(l) => l,
            Err(_) => panic!(
                "{what}: tc-shim stopped answering (exit: {:?})",
                self.child.try_wait()
            ),
        };
        serde_json::from_slice(&line).unwrap_or_else(|e| {
            panic!(
                "{what}: tc-shim wrote a line that is not JSON ({e}): {}",
                String::from_utf8_lossy(&line)
            )
        })
    }

    /// Reads lines until the one with `id`; returns it and the lines before it.
    pub fn until_id(&mut self, id: &Value, what: &str) -> (Value, Vec<Value>) {
        let mut before = Vec::new();
        loop {
            let v = self.recv(what);
            if v.get("id") == Some(id) && v.get("method").is_none() {
                return (v, before);
            }
            before.push(v);
        }
    }

    /// Sends a request and returns its answer (other lines on the way are dropped).
    pub fn request(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send_json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.until_id(&id, method).0
    }

    /// `tools/call` of `name` with `args`; returns the result (or the whole error answer).
    pub fn call(&mut self, id: &str, name: &str, args: Value) -> Value {
        let r = self.request(
            json!(id),
            "tools/call",
            json!({"name": name, "arguments": args}),
        );
        r.get("result").cloned().unwrap_or(r)
    }

    /// The MCP handshake (2025-11-25, no capabilities), checked to succeed, then
    /// `notifications/initialized`.
    #[track_caller]
    pub fn initialize(&mut self) {
        let r = self.request(
            json!("init"),
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}),
        );
        assert!(r.get("result").is_some(), "{r}");
        self.send_json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    /// Sends an `echo` probe (the echo fixture answers it) and reads up to its answer;
    /// returns everything on the way.
    pub fn probe(&mut self, what: &str) -> Vec<Value> {
        self.probes += 1;
        let id = json!(format!("probe-{}", self.probes));
        self.send_json(&json!({"jsonrpc": "2.0", "id": id, "method": "echo"}));
        let (answer, before) = self.until_id(&id, what);
        assert!(
            answer.get("result").is_some(),
            "{what}: probe answer {answer}"
        );
        before
    }
}

impl Drop for Shim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
