//! Harness for the in-protocol confirmation tests: a real SDK client with an elicitation
//! capability whose "human" is the test (tests/fixtures/elicit_client.py), and the vault
//! setups in front of the real server-filesystem.
#![allow(dead_code)]

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::piped::lines_mapped;
use crate::shim::*;
pub use crate::shim::{assert_ok, tcctl_approve};

/// A client fixture with an elicitation capability, driven by tagged JSON lines.
pub struct Human {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<Value>,
    /// Lines read while waiting for something else.
    backlog: Vec<Value>,
    pub hello: Value,
    next_tag: u64,
}

impl Human {
    /// The Python `mcp` SDK: `legacy` (`ClientSession`, initialize 2025-11-25) or
    /// `modern` (`mcp.Client(mode="auto")`, server/discover 2026-07-28).
    pub fn python(era: &str, server_argv: &[String]) -> Human {
        let mut cmd = Command::new(peers().join("venv/bin/python"));
        cmd.arg(workspace().join("tests/fixtures/elicit_client.py"))
            .arg(era)
            .args(server_argv);
        Self::spawn(cmd)
    }

    /// The TypeScript SDK (1.32.2, legacy era) declaring a bare `elicitation: {}`.
    pub fn typescript(server_argv: &[String]) -> Human {
        let nm = peers().join("npm/node_modules");
        let mut cmd = Command::new("node");
        cmd.arg(workspace().join("tests/fixtures/ts_elicit_client.mjs"))
            .arg(nm)
            .args(server_argv);
        Self::spawn(cmd)
    }

    fn spawn(mut cmd: Command) -> Human {
        let mut child =
            spawn_piped(&mut cmd, Stdio::inherit()).expect("spawn the elicitation client fixture");
        let stdin = child.stdin.take().unwrap();
        let lines = lines_mapped(child.stdout.take().unwrap(), |line| {
            serde_json::from_str(&line)
                .unwrap_or_else(|e| json!({"unparsable": line, "why": e.to_string()}))
        });
        let mut h = Human {
            child,
            stdin,
            lines,
            backlog: Vec::new(),
            hello: Value::Null,
            next_tag: 0,
        };
        let hello = h.next_matching(|v| v.get("ok").is_some() && v.get("tag").is_none());
        assert_eq!(hello["ok"], true, "client start failed: {hello}");
        h.hello = hello;
        h
    }

    fn write(&mut self, v: Value) {
        writeln!(self.stdin, "{v}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The next line (from the backlog first) for which `pred` holds; 60 s at most.
    fn next_matching(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.backlog.iter().position(&pred) {
            return self.backlog.remove(i);
        }
        loop {
            let v = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .expect("the client fixture answered within 60 s");
            if pred(&v) {
                return v;
            }
            self.backlog.push(v);
        }
    }

    /// Lines that arrive within `wait` and match `pred` (used to prove something did
    /// NOT happen, e.g. a second prompt).
    pub fn drain_matching(&mut self, wait: Duration, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        let deadline = std::time::Instant::now() + wait;
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(v) => self.backlog.push(v),
                Err(_) => break,
            }
        }
        let (hit, keep): (Vec<Value>, Vec<Value>) = self.backlog.drain(..).partition(|v| pred(v));
        self.backlog = keep;
        hit
    }

    /// Starts a call without waiting; returns its tag.
    pub fn start_call(&mut self, name: &str, args: Value) -> String {
        self.start(json!({"op": "call", "name": name, "args": args}))
    }

    /// Starts a call with request options (the TypeScript fixture's `timeout_ms`,
    /// `progress`); returns its tag.
    pub fn start_call_with(&mut self, name: &str, args: Value, opts: Value) -> String {
        let mut cmd = json!({"op": "call", "name": name, "args": args});
        if let (Some(c), Some(o)) = (cmd.as_object_mut(), opts.as_object()) {
            c.extend(o.clone());
        }
        self.start(cmd)
    }

    /// The progress notifications the client reported for call `tag` so far (within
    /// `wait`).
    pub fn progress_of(&mut self, tag: &str, wait: Duration) -> Vec<Value> {
        let t = format!("{tag}.progress");
        self.drain_matching(wait, move |v| v["tag"] == t.as_str())
    }

    /// Starts one raw round (modern: `allow_input_required=True`) answering our form
    /// (`confirm`) with `answer`; returns its tag.
    pub fn start_raw(
        &mut self,
        name: &str,
        args: Value,
        state: Option<&str>,
        answer: Option<Value>,
    ) -> String {
        let responses = answer.map(|a| json!({ "confirm": a }));
        self.start_round(name, args, state, responses)
    }

    /// Starts one raw round with `responses` as the whole `inputResponses` (keyed as the
    /// `inputRequests` they answer); returns its tag.
    pub fn start_round(
        &mut self,
        name: &str,
        args: Value,
        state: Option<&str>,
        responses: Option<Value>,
    ) -> String {
        let mut cmd = json!({"op": "raw", "name": name, "args": args});
        if let Some(s) = state {
            cmd["request_state"] = json!(s);
        }
        if let Some(r) = responses {
            cmd["input_responses"] = r;
        }
        self.start(cmd)
    }

    fn start(&mut self, mut cmd: Value) -> String {
        self.next_tag += 1;
        let tag = format!("t{}", self.next_tag);
        cmd["tag"] = json!(tag);
        self.write(cmd);
        tag
    }

    /// Waits for the prompt the server shows the human; returns its params.
    pub fn prompt(&mut self) -> Value {
        self.next_matching(|v| v.get("prompt").is_some())["prompt"].clone()
    }

    /// Answers the open prompt with an `ElicitResult`.
    pub fn answer(&mut self, result: Value) {
        self.write(json!({ "answer": result }));
    }

    /// Leaves the open prompt unanswered.
    pub fn hang(&mut self) {
        self.write(json!({ "answer": "hang" }));
    }

    /// Cancels a started call (the SDK sends `notifications/cancelled`).
    pub fn cancel(&mut self, tag: &str) {
        self.write(json!({"op": "cancel", "tag": tag}));
    }

    /// Waits for a started op's outcome line (`ok`+`result`, `error` or `cancelled`).
    pub fn outcome(&mut self, tag: &str) -> Value {
        let t = tag.to_string();
        self.next_matching(move |v| v["tag"] == t.as_str())
    }

    /// Waits for a started op's result; fails on an error or cancellation.
    pub fn result(&mut self, tag: &str) -> Value {
        let o = self.outcome(tag);
        assert_eq!(o["ok"], true, "op {tag} failed: {o}");
        o["result"].clone()
    }

    /// A call whose single prompt is answered with `answer`; returns the result.
    pub fn call_answering(&mut self, name: &str, args: Value, answer: Value) -> (Value, Value) {
        let tag = self.start_call(name, args);
        let p = self.prompt();
        self.answer(answer);
        (p, self.result(&tag))
    }

    /// What comes first for the started op `tag`: a prompt (`{"prompt": …}`) or its
    /// outcome.
    pub fn prompt_or_outcome(&mut self, tag: &str) -> Value {
        self.next_matching(|v| v.get("prompt").is_some() || v["tag"] == tag)
    }

    /// A call that is expected not to prompt at all.
    pub fn call(&mut self, name: &str, args: Value) -> Value {
        let tag = self.start_call(name, args);
        let o = self.prompt_or_outcome(&tag);
        assert!(o.get("prompt").is_none(), "unexpected prompt: {o}");
        assert_eq!(o["ok"], true, "op {tag} failed: {o}");
        o["result"].clone()
    }

    pub fn list(&mut self) -> Value {
        let tag = self.start(json!({"op": "list"}));
        self.result(&tag)
    }
}

impl Drop for Human {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `accept` with `approve: true`.
pub fn approve() -> Value {
    json!({"action": "accept", "content": {"approve": true}})
}

/// A vault in front of the real server-filesystem with `write_file` gated on its path
/// (`when` optional, as a TOML inline table) and `extra` vault keys
/// (e.g. `legacy_elicitation_shim = true`, `lean = true`).
pub fn fs_vault(extra: &str, when: Option<&str>) -> Env {
    let server =
        peers().join("npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    let when = when.map(|w| format!("when = {w}\n")).unwrap_or_default();
    Env::new(&format!(
        r#"[[vaults]]
id = "fs"
root = "$ROOT"
command = ["node", "{}", "$ROOT"]
{extra}

[[vaults.gates]]
tool = "write_file"
{when}targets = {{ paths = ["path"] }}

[vaults.acl]
deny = ["private/**"]
"#,
        server.display()
    ))
}

/// Sets `daemon.elicit_ttl_seconds` in the env's config (before tcd starts).
pub fn set_ttl(env: &Env, seconds: u32) {
    let text = std::fs::read_to_string(&env.config).unwrap();
    let text = text.replacen(
        "[daemon]\n",
        &format!("[daemon]\nelicit_ttl_seconds = {seconds}\n"),
        1,
    );
    std::fs::write(&env.config, text).unwrap();
}

/// How many events of `kind` the daemon logged.
pub fn events_of(env: &Env, kind: &str) -> usize {
    count(&event_kinds(&env.socket), kind)
}

/// The file's content under the vault root (None when it does not exist).
pub fn disk(env: &Env, rel: &str) -> Option<String> {
    std::fs::read_to_string(env.root.join(rel)).ok()
}

/// Starts the env's `tcd` WITHOUT `--ephemeral` (keyed from `<cache>/server-secrets`,
/// so states survive a restart), replacing any running one; returns this start's
/// stderr log (each start has its own).
pub fn start_persistent_tcd(env: &mut Env) -> std::path::PathBuf {
    env.stop_tcd();
    env.start_tcd_keyed();
    env.tcd.latest_stderr_path()
}

/// `write_file` of "v1" over `note.txt` (which the URL and form scenes start at "v0").
pub fn write_v1() -> Value {
    json!({"path": "note.txt", "content": "v1"})
}

/// The URL-elicitation scene's vault: [`fs_vault`] with `extra` keys, the approval page on
/// `127.0.0.1:<port>` when given, the confirmation TTL `ttl` seconds when given; tcd up
/// and `note.txt` = "v0".
pub fn url_env(extra: &str, port: Option<u16>, ttl: Option<u32>) -> Env {
    let mut env = fs_vault(extra, None);
    if let Some(p) = port {
        let text = std::fs::read_to_string(&env.config).unwrap();
        let text = format!("{text}\n[approvals]\nlisten = \"127.0.0.1:{p}\"\n");
        std::fs::write(&env.config, text).unwrap();
    }
    if let Some(t) = ttl {
        set_ttl(&env, t);
    }
    env.start_tcd();
    std::fs::write(env.root.join("note.txt"), "v0").unwrap();
    env
}

/// Checks a URL-mode prompt's params (either era) for the gated `write_file` in `fs`: a
/// link to the request's page on `port` and no form; returns the request id.
#[track_caller]
pub fn url_request_id(prompt: &Value, port: u16) -> String {
    assert_eq!(prompt["mode"], "url", "{prompt}");
    assert!(prompt.get("requestedSchema").is_none(), "{prompt}");
    let url = prompt["url"].as_str().unwrap();
    let prefix = format!("http://127.0.0.1:{port}/requests/");
    let id = url
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{url}"))
        .to_string();
    assert_eq!(id.len(), 8, "{url}");
    let msg = prompt["message"].as_str().unwrap();
    assert!(
        msg.contains("`write_file`") && msg.contains("`fs`") && msg.contains(&id),
        "{msg}"
    );
    id
}

/// A tool result refused with `want` as its code.
#[track_caller]
pub fn assert_code(r: &Value, want: &str) {
    assert_eq!(code(r).as_deref(), Some(want), "{r}");
}

/// `note.txt` holds `want`.
#[track_caller]
pub fn assert_note(env: &Env, want: &str) {
    assert_eq!(disk(env, "note.txt").as_deref(), Some(want));
}

/// The approved [`write_v1`] ran, once: `r` is no error, `note.txt` holds "v1", and tcd
/// logged one consumed approval.
#[track_caller]
pub fn assert_wrote_v1_once(env: &Env, r: &Value) {
    assert_ne!(r["isError"], true, "{r}");
    assert_note(env, "v1");
    assert_eq!(events_of(env, "tc.elicit.consumed"), 1);
}

/// After `tcctl approve` or the page approved [`write_v1`]: the identical retry runs
/// once, and with note.txt put back to "v0" the same call is refused again (a new request,
/// nothing written); one approval and one consumption logged. Returns that refusal.
#[track_caller]
pub fn assert_approved_retry_runs_once(env: &Env, h: &mut Human) -> Value {
    let ok = h.call("write_file", write_v1());
    assert_ne!(ok["isError"], true, "{ok}");
    assert_note(env, "v1");
    std::fs::write(env.root.join("note.txt"), "v0").unwrap();
    let again = h.call("write_file", write_v1());
    assert_note(env, "v0");
    assert_eq!(events_of(env, "tc.elicit.approved"), 1);
    assert_eq!(events_of(env, "tc.elicit.consumed"), 1);
    again
}

/// The legacy-era scene on a configured `env`: tcd started, note.txt = "v0", and a
/// legacy Python client (2025-11-25) on vault `fs`.
pub fn legacy_started(mut env: Env) -> (Env, Human) {
    env.start_tcd();
    std::fs::write(env.root.join("note.txt"), "v0").unwrap();
    let h = Human::python("legacy", &env.shim_argv("fs"));
    (env, h)
}
