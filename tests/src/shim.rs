//! Shared harness for the tc-shim end-to-end tests: the built binaries, the pinned peers
//! and vault configs for them, a real `tcd`, the SDK client fixtures, approvals via `tcctl`.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tc_proto::v1::confirm_client::ConfirmClient;
use tc_proto::v1::{self, Binding};

pub use crate::piped::{argv_command, lines_of, spawn_piped};
pub use crate::{bin, status_kb, workspace};

/// The pinned peers (`$TC_PEERS`, default <workspace>/.peers); fails loudly when missing.
pub fn peers() -> PathBuf {
    let p = crate::peers_dir();
    for need in [
        "npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js",
        "venv/bin/python",
    ] {
        assert!(
            p.join(need).exists(),
            "peer {} is missing: run scripts/install-peers (or set TC_PEERS)",
            p.join(need).display()
        );
    }
    p
}

/// A file of the pinned peers, which must exist.
pub fn peer_file(rel: &str) -> PathBuf {
    crate::existing(
        peers().join(rel),
        "(a peer) missing: run scripts/install-peers",
    )
}

/// `@modelcontextprotocol/server-filesystem`'s entry point.
pub fn filesystem_server() -> PathBuf {
    peer_file("npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
}

/// `@modelcontextprotocol/server-memory`'s entry point.
pub fn memory_server() -> PathBuf {
    peer_file("npm/node_modules/@modelcontextprotocol/server-memory/dist/index.js")
}

/// `@modelcontextprotocol/server-everything`'s entry point.
pub fn everything_server() -> PathBuf {
    peer_file("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

/// The `mcp-server-git` executable.
pub fn git_server() -> PathBuf {
    peer_file("venv/bin/mcp-server-git")
}

/// A fixture of tests/fixtures.
pub fn fixture(name: &str) -> PathBuf {
    workspace().join("tests/fixtures").join(name)
}

/// A TOML basic string (JSON string escapes are valid TOML ones).
fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// One `[[vaults]]` entry of a test config, built gate by gate; `$ROOT` stands for the
/// vault root until [`Env::new`] writes the file.
#[derive(Debug, Clone)]
pub struct Vault {
    toml: String,
}

impl Vault {
    /// A vault with no `command` (the shim is given one after `--`).
    pub fn bare(id: &str) -> Vault {
        Vault {
            toml: format!("[[vaults]]\nid = {}\nroot = \"$ROOT\"\n", toml_str(id)),
        }
    }

    /// A vault whose downstream is `command`.
    pub fn new(id: &str, command: &[&str]) -> Vault {
        let argv: Vec<String> = command.iter().map(|a| toml_str(a)).collect();
        let mut v = Vault::bare(id);
        v.toml += &format!("command = [{}]\n", argv.join(", "));
        v
    }

    /// server-filesystem serving the vault root.
    pub fn filesystem(id: &str) -> Vault {
        let server = filesystem_server();
        Vault::new(id, &["node", &server.display().to_string(), "$ROOT"])
    }

    /// server-memory keeping its graph in `$ROOT/memory.jsonl`.
    pub fn memory(id: &str) -> Vault {
        let server = memory_server();
        Vault::new(
            id,
            &[
                "env",
                "MEMORY_FILE_PATH=$ROOT/memory.jsonl",
                "node",
                &server.display().to_string(),
            ],
        )
    }

    /// mcp-server-git on the repository at the vault root.
    pub fn git(id: &str) -> Vault {
        let server = git_server();
        Vault::new(
            id,
            &[&server.display().to_string(), "--repository", "$ROOT"],
        )
    }

    /// server-everything over stdio.
    pub fn everything(id: &str) -> Vault {
        let server = everything_server();
        Vault::new(id, &["node", &server.display().to_string(), "stdio"])
    }

    /// A stdlib-only Python fixture server of tests/fixtures, given the vault root.
    pub fn fixture(id: &str, script: &str) -> Vault {
        let f = fixture(script);
        Vault::new(id, &["python3", &f.display().to_string(), "$ROOT"])
    }

    /// The scene many tests share: server-filesystem as vault `fs`, `write_file` gated on
    /// its `path`.
    pub fn fs_write_gated() -> Vault {
        Vault::filesystem("fs").gate("write_file", r#"{ paths = ["path"] }"#)
    }

    /// Appends TOML as it is: a key of the table last opened (a gate's `preview`, say) or
    /// a sub-table of the vault (`[vaults.http.auth]`).
    pub fn raw(mut self, text: &str) -> Vault {
        self.toml += text;
        self
    }

    /// Adds a key of the vault's own table (e.g. `lean = true`); call it before any gate.
    pub fn key(mut self, line: &str) -> Vault {
        self.toml += line;
        self.toml += "\n";
        self
    }

    /// Adds `[[vaults.gates]]` for `tool`; `targets` is a TOML value, e.g. `{ paths = ["path"] }`.
    pub fn gate(self, tool: &str, targets: &str) -> Vault {
        self.gate_entry(tool, None, targets)
    }

    /// Adds a gate with a `when` condition (a TOML value).
    pub fn gate_when(self, tool: &str, when: &str, targets: &str) -> Vault {
        self.gate_entry(tool, Some(when), targets)
    }

    /// Gates `move_file` when it crosses folders, on both of its paths.
    pub fn gate_cross_folder_moves(self) -> Vault {
        self.gate_when(
            "move_file",
            r#"{ cross_folder = ["source", "destination"] }"#,
            r#"{ paths = ["source", "destination"] }"#,
        )
    }

    /// Gates `tool` when its `path` already exists (an overwrite), on that path.
    pub fn gate_overwrites(self, tool: &str) -> Vault {
        self.gate_when(tool, r#"{ exists = "path" }"#, r#"{ paths = ["path"] }"#)
    }

    fn gate_entry(mut self, tool: &str, when: Option<&str>, targets: &str) -> Vault {
        self.toml += &format!("\n[[vaults.gates]]\ntool = {}\n", toml_str(tool));
        if let Some(w) = when {
            self.toml += &format!("when = {w}\n");
        }
        self.toml += &format!("targets = {targets}\n");
        self
    }

    /// Adds `[[vaults.paged]]`: the shim pages `tool`'s answers over its `items` list.
    pub fn paged(mut self, tool: &str, items: &str) -> Vault {
        self.toml += &format!(
            "\n[[vaults.paged]]\ntool = {}\nitems = {}\n",
            toml_str(tool),
            toml_str(items)
        );
        self
    }

    /// The config text of this vault under `[governor] max_response_bytes = cap`.
    pub fn governed(&self, cap: usize) -> String {
        format!("[governor]\nmax_response_bytes = {cap}\n\n{}", self.toml)
    }

    /// Sets `[vaults.acl] deny`.
    pub fn acl_deny(mut self, globs: &[&str]) -> Vault {
        let g: Vec<String> = globs.iter().map(|g| toml_str(g)).collect();
        self.toml += &format!("\n[vaults.acl]\ndeny = [{}]\n", g.join(", "));
        self
    }

    /// The TOML text.
    pub fn toml(&self) -> &str {
        &self.toml
    }
}

/// A temp dir holding a vault root, a daemon cache dir, the socket and the config.
pub struct Env {
    /// The real `tcd` on this layout (not started until `start_tcd*`). First, so it is
    /// dropped (killed) before `tmp` is removed under it.
    pub tcd: crate::Daemon,
    pub tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub socket: PathBuf,
    pub cache: PathBuf,
    pub config: PathBuf,
}

impl Env {
    /// Creates the layout and writes `[daemon]` + `vault_toml` as the config.
    pub fn new(vault_toml: &str) -> Env {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let root = base.join("vault");
        std::fs::create_dir_all(&root).unwrap();
        let config = base.join("config.toml");
        let tcd = crate::Daemon::prepared_in(&base, config.clone(), crate::DaemonOpts::default());
        let (socket, cache) = (tcd.socket.clone(), tcd.cache_dir.clone());
        let env = Env {
            tcd,
            socket,
            cache,
            config,
            tmp,
            root,
        };
        env.write_config(vault_toml);
        env
    }

    /// [`Env::new`] with one vault.
    pub fn with(vault: &Vault) -> Env {
        Env::new(vault.toml())
    }

    /// (Re)writes the config: `[daemon]` + `vault_toml`, `$ROOT` replaced. A running
    /// shim keeps the policy it started with; the next one reads this.
    pub fn write_config(&self, vault_toml: &str) {
        let text = format!(
            "[daemon]\nsocket = {}\ncache_dir = {}\n\n{}",
            toml_str(&self.socket.display().to_string()),
            toml_str(&self.cache.display().to_string()),
            vault_toml.replace("$ROOT", &self.root.display().to_string())
        );
        std::fs::write(&self.config, text).unwrap();
    }

    /// Starts a real `tcd --ephemeral` and waits until it accepts on its socket.
    pub fn start_tcd(&mut self) {
        self.tcd.opts.ephemeral = true;
        self.tcd.start_again();
    }

    /// Starts a real `tcd` keyed from `<cache>/server-secrets` (no `--ephemeral`), so its
    /// key, tokens and states outlive a restart and a test can read the key file.
    pub fn start_tcd_keyed(&mut self) {
        self.tcd.opts.ephemeral = false;
        self.tcd.start_again();
    }

    /// Stops `tcd` (SIGTERM, then wait), if it runs.
    pub fn stop_tcd(&mut self) {
        if self.tcd.is_running() {
            self.tcd.stop();
        }
    }

    /// The argv that runs tc-shim for `vault`, its stderr appended to the returned file
    /// (and nowhere else), so a test can read what the shim logged.
    pub fn shim_argv_logged(&self, vault: &str) -> (Vec<String>, PathBuf) {
        let log = self.tmp.path().join(format!("shim-{vault}.log"));
        let mut argv = vec![
            "sh".to_string(),
            "-c".into(),
            "log=$1; shift; exec \"$@\" 2>>\"$log\"".into(),
            "sh".into(),
            log.display().to_string(),
        ];
        argv.extend(self.shim_argv(vault));
        (argv, log)
    }

    /// The argv that runs tc-shim for `vault` against this env.
    pub fn shim_argv(&self, vault: &str) -> Vec<String> {
        serve_argv(vault, &self.config, &self.socket)
    }

    /// The argv that runs tc-shim for `vault` with the downstream given inline (`-- …`).
    pub fn shim_argv_inline(&self, vault: &str, command: &[String]) -> Vec<String> {
        let mut argv = self.shim_argv(vault);
        argv.push("--".into());
        argv.extend(command.iter().cloned());
        argv
    }
}

/// The argv that runs `tc-shim serve VAULT` with `config` against the tcd on `socket`.
pub fn serve_argv(vault: &str, config: &Path, socket: &Path) -> Vec<String> {
    vec![
        bin("tc-shim").display().to_string(),
        "serve".into(),
        vault.into(),
        "--config".into(),
        config.display().to_string(),
        "--socket".into(),
        socket.display().to_string(),
    ]
}

/// A real SDK client fixture (Python `mcp` or the TypeScript SDK), driven one JSON
/// command per line.
pub struct PyClient {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    /// The first line: `{"ok", "protocolVersion", "era": "legacy"|"modern"}`.
    pub hello: Value,
}

impl PyClient {
    /// Starts the low-level client (`ClientSession.initialize()`, legacy era) in front of
    /// `server_argv` and waits for `initialize` to finish.
    pub fn start(server_argv: &[String]) -> PyClient {
        Self::spawn(&[], server_argv)
    }

    /// Starts the high-level `mcp.Client(mode="auto")` (probes `server/discover`, falls
    /// back to `initialize`) in front of `server_argv`.
    pub fn start_auto(server_argv: &[String]) -> PyClient {
        Self::spawn(&["--auto"], server_argv)
    }

    /// Starts the TypeScript SDK client fixture (`tests/fixtures/ts_client.mjs`, SDK from
    /// the pinned peers) in front of `server_argv`; same line protocol.
    pub fn start_ts(server_argv: &[String]) -> PyClient {
        let nm = peers().join("npm/node_modules");
        assert!(
            nm.join("@modelcontextprotocol/sdk/dist/esm/client/index.js")
                .is_file(),
            "peer @modelcontextprotocol/sdk is missing under {}: run scripts/install-peers",
            nm.display()
        );
        let mut cmd = Command::new("node");
        cmd.arg(workspace().join("tests/fixtures/ts_client.mjs"))
            .arg(nm)
            .args(server_argv);
        Self::spawn_cmd(cmd)
    }

    /// Starts `tests/fixtures/cancel_client.py` (a `ClientSession` that can abandon a call
    /// in flight, so the SDK sends `notifications/cancelled`) in front of `server_argv`.
    pub fn start_cancel(server_argv: &[String]) -> PyClient {
        Self::spawn_script("cancel_client.py", &[], server_argv)
    }

    fn spawn(flags: &[&str], server_argv: &[String]) -> PyClient {
        Self::spawn_script("mcp_client.py", flags, server_argv)
    }

    fn spawn_script(script: &str, flags: &[&str], server_argv: &[String]) -> PyClient {
        let mut cmd = Command::new(peers().join("venv/bin/python"));
        cmd.arg(fixture(script)).args(flags).args(server_argv);
        Self::spawn_cmd(cmd)
    }

    fn spawn_cmd(mut cmd: Command) -> PyClient {
        let mut child = spawn_piped(&mut cmd, Stdio::inherit()).expect("spawn the client fixture");
        let stdin = child.stdin.take().unwrap();
        let lines = lines_of(child.stdout.take().unwrap());
        let mut c = PyClient {
            child,
            stdin,
            lines,
            hello: Value::Null,
        };
        let hello = c.read();
        assert_eq!(hello["ok"], true, "initialize failed: {hello}");
        c.hello = hello;
        c
    }

    fn read(&mut self) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(60))
            .expect("python client answered within 60s");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad client line {line:?}: {e}"))
    }

    fn send(&mut self, cmd: Value) -> Value {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
        let r = self.read();
        assert_eq!(r["ok"], true, "client op {cmd} failed: {r}");
        r["result"].clone()
    }

    /// `tools/list` as the SDK returns it.
    pub fn list(&mut self) -> Value {
        self.send(json!({"op": "list"}))
    }

    /// `tools/call` as the SDK returns it (a CallToolResult, camelCase keys).
    pub fn call(&mut self, name: &str, args: Value) -> Value {
        self.send(json!({"op": "call", "name": name, "args": args}))
    }

    /// (cancel client) Sends a `tools/call` in the background, known as `tag`.
    pub fn start_call(&mut self, tag: &str, name: &str, args: Value) {
        self.send(json!({"op": "start", "tag": tag, "name": name, "args": args}));
    }

    /// (cancel client) Abandons the call `tag`; returns `{cancelled, answered, error}`
    /// once the SDK has given it up (and sent its `notifications/cancelled`).
    pub fn cancel(&mut self, tag: &str) -> Value {
        self.send(json!({"op": "cancel", "tag": tag}))
    }
}

impl Drop for PyClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The shim's refusal object of an isError result: `structuredContent`, or
/// `_meta["tc/refusal"]` for a tool that declares an `outputSchema`.
pub fn sc(result: &Value) -> &Value {
    let m = &result["_meta"]["tc/refusal"];
    if m.is_object() {
        m
    } else {
        &result["structuredContent"]
    }
}

/// The structured code of an isError result (None for a success).
pub fn code(result: &Value) -> Option<String> {
    if result["isError"] != true {
        return None;
    }
    Some(
        sc(result)["code"]
            .as_str()
            .unwrap_or("<no code>")
            .to_string(),
    )
}

/// Checks an `elicit_required` refusal of `tool(args)` in `vault`: the directive to stop
/// first, the binding in its details, and the exact `tcctl elicit` command, which the
/// text repeats. Returns that command.
#[track_caller]
pub fn assert_elicit_required(r: &Value, tool: &str, vault: &str, args: &Value) -> String {
    assert_eq!(code(r).as_deref(), Some("elicit_required"), "{r}");
    let text = r["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.starts_with("STOP: ask the human"), "{r}");
    let d = &sc(r)["details"];
    assert_eq!(d["tool"], tool, "{r}");
    assert_eq!(d["vault"], vault, "{r}");
    assert_eq!(d["args_hash"], tc_core::hash::args_hash(tool, args), "{r}");
    let cmd = sc(r)["recovery"]["command"].as_str().unwrap_or_default();
    assert_eq!(
        cmd,
        format!(
            "tcctl elicit --hash {} --tool {tool} --vault {vault} --caller {} --state-fp {}",
            d["args_hash"].as_str().unwrap_or_default(),
            d["caller"].as_str().unwrap_or_default(),
            d["state_fp"].as_str().unwrap_or_default()
        ),
        "{r}"
    );
    assert!(text.contains(cmd), "{r}");
    cmd.to_string()
}

async fn client(socket: &Path) -> ConfirmClient<tonic::transport::Channel> {
    ConfirmClient::new(tc_proto::connect(socket).await.expect("connect tcd"))
}

/// Mints a token for an `elicit_required` result, as the operator would (`tcctl elicit`).
pub fn mint(socket: &Path, elicit_required: &Value) -> String {
    let d = &sc(elicit_required)["details"];
    let s = |k: &str| {
        d[k].as_str()
            .unwrap_or_else(|| panic!("details.{k} missing in {d}"))
            .to_string()
    };
    let binding = Binding {
        vault: s("vault"),
        tool: s("tool"),
        caller: s("caller"),
        args_hash: s("args_hash"),
    };
    let fp = s("state_fp");
    rt().block_on(async {
        client(socket)
            .await
            .mint(v1::MintRequest {
                binding: Some(binding),
                state_fp: Some(fp),
                ..Default::default()
            })
            .await
            .expect("mint")
            .into_inner()
            .token
    })
}

/// Every event kind in the daemon's log, in order.
pub fn event_kinds(socket: &Path) -> Vec<String> {
    all_events(socket).into_iter().map(|e| e.kind).collect()
}

/// The `tc.call.outcome` events in the daemon's log, in order: (outcome, route) of each
/// call that waited on a human.
pub fn outcomes(socket: &Path) -> Vec<(String, String)> {
    all_events(socket)
        .into_iter()
        .filter(|e| e.kind == "tc.call.outcome")
        .map(|e| {
            let d: Value = serde_json::from_str(&e.detail_json).unwrap_or_default();
            let s = |k: &str| d[k].as_str().unwrap_or_default().to_string();
            (s("outcome"), s("route"))
        })
        .collect()
}

/// Waits (up to 10 s, since they are appended off the call's path) until the log holds
/// `n` outcomes; returns them.
#[track_caller]
pub fn wait_outcomes(socket: &Path, n: usize) -> Vec<(String, String)> {
    wait_until("the call outcomes", || {
        let o = outcomes(socket);
        (o.len() >= n).then_some(o)
    })
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Waits (up to 10 s) until the shim's log file contains `needle`; returns the whole log.
pub fn wait_log(log: &Path, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(needle) || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The tools of a `tools/list` result, by name.
pub fn tool<'a>(list: &'a Value, name: &str) -> Option<&'a Value> {
    list["tools"].as_array()?.iter().find(|t| t["name"] == name)
}

/// Runs `git -C root args…` (test setup only; the shim never runs git).
pub fn git(root: &Path, args: &[&str]) -> String {
    // Test setup only: the shim never runs git.
    let out = setup_output(
        Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com"),
    );
    String::from_utf8_lossy(&out).into_owned()
}

/// Runs a setup tool (`git`, `openssl`) that must succeed (else its stderr is shown);
/// its stdout.
#[track_caller]
pub fn setup_output(cmd: &mut Command) -> Vec<u8> {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{:?} on PATH: {e}", cmd.get_program()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{cmd:?}: {stderr}");
    out.stdout
}

/// Asserts a `tcctl` run succeeded, showing its output if not.
#[track_caller]
pub fn assert_ok(o: &std::process::Output) {
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Approves request `id` with `tcctl approve` (the RPC the page uses).
#[track_caller]
pub fn tcctl_approve(env: &Env, id: &str) {
    assert_ok(&env.tcd.tcctl(&["approve", id, "--yes"]));
}

/// The request id of a refusal that raised one (`details.request_id`).
#[track_caller]
pub fn request_id(r: &Value) -> String {
    sc(r)["details"]["request_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no request_id in {r}"))
        .to_string()
}

/// tcd started on `env`, the vault file `rel` written with `content`, and a Python
/// client (no elicitation) on vault `fs`: the file's path and the client.
pub fn started_with_file(env: &mut Env, rel: &str, content: &str) -> (PathBuf, PyClient) {
    env.start_tcd();
    let path = env.root.join(rel);
    std::fs::write(&path, content).unwrap();
    (path, PyClient::start(&env.shim_argv("fs")))
}

/// Asserts that `name` is listed in `tools` and takes an `elicit_token` string (a gated
/// tool), or has no such parameter (`gated` false).
#[track_caller]
pub fn assert_listed(tools: &Value, name: &str, gated: bool) {
    let t = tool(tools, name).unwrap_or_else(|| panic!("{name} not listed: {tools}"));
    let props = &t["inputSchema"]["properties"];
    if gated {
        assert_eq!(props["elicit_token"]["type"], "string", "{t}");
    } else {
        assert!(props.get("elicit_token").is_none(), "{t}");
    }
}

/// The write-gated filesystem scene (note.txt = "v0") as a client sees it: `write_file`
/// listed with its `elicit_token`, `read_text_file` without one, the floor tool
/// `move_file` hidden, and an ungated read of note.txt answered. The listing.
#[track_caller]
pub fn assert_fs_scene_listed_and_readable(c: &mut PyClient) -> Value {
    let tools = c.list();
    assert_listed(&tools, "write_file", true);
    assert_listed(&tools, "read_text_file", false);
    assert_floor_hidden(&tools, "move_file");
    let r = c.call("read_text_file", json!({"path": "note.txt"}));
    assert_eq!(code(&r), None, "{r}");
    assert_text_at(&r, "/content/0/text", "v0");
    tools
}

/// Asserts that the ungated floor tool `name` is hidden from `tools`.
#[track_caller]
pub fn assert_floor_hidden(tools: &Value, name: &str) {
    let hidden = tool(tools, name).is_none();
    assert!(
        hidden,
        "ungated floor tool {name} must stay hidden: {tools}"
    );
}

/// Asserts that the string at `pointer` in `msg` (a result's `/content/0/text`, an
/// error's `/error/message`) contains `needle`; a failure shows the whole message.
#[track_caller]
pub fn assert_text_at(msg: &Value, pointer: &str, needle: &str) {
    let text = msg
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no string at {pointer}: {msg}"));
    assert!(text.contains(needle), "{needle:?} not at {pointer}: {msg}");
}

/// Two messages that may come in either order, as (the one `first` picks, the other).
pub fn ordered_by(a: Value, b: Value, first: impl Fn(&Value) -> bool) -> (Value, Value) {
    if first(&a) {
        (a, b)
    } else {
        (b, a)
    }
}

/// A log of one JSON value per line, each line parsed (a test decides what a bad line
/// means).
pub fn json_lines(log: &Path) -> Vec<serde_json::Result<Value>> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(serde_json::from_str)
        .collect()
}

/// The text a refusal with code `want` shows the model.
#[track_caller]
pub fn refusal_text<'a>(r: &'a Value, want: &str) -> &'a str {
    assert_eq!(code(r).as_deref(), Some(want), "{r}");
    r["content"][0]["text"].as_str().unwrap()
}

/// How many commits `root`'s HEAD has: what a gated `git_commit` may or may not add.
pub fn commits(root: &Path) -> usize {
    git(root, &["rev-list", "--count", "HEAD"])
        .trim()
        .parse()
        .unwrap()
}

/// A repository at `root` (branch main, a committer identity) with `base.txt` committed.
pub fn git_repo_with_base(root: &Path) {
    git(root, &["init", "-q", "-b", "main"]);
    git(root, &["config", "user.name", "t"]);
    git(root, &["config", "user.email", "t@example.com"]);
    std::fs::write(root.join("base.txt"), "base").unwrap();
    git(root, &["add", "base.txt"]);
    git(root, &["commit", "-q", "-m", "base"]);
}

/// Approves an `elicit_required` refusal as the human does: runs the exact
/// `recovery.command` it printed with the real `tcctl` (plus this env's `--config` and
/// `--socket`); returns the token, which must be all it printed.
pub fn tcctl_elicit(env: &Env, elicit_required: &Value) -> String {
    let cmd = sc(elicit_required)["recovery"]["command"]
        .as_str()
        .unwrap_or_else(|| panic!("no recovery.command in {elicit_required}"));
    let words: Vec<&str> = cmd.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"tcctl"), "{cmd}");
    let out = env.tcd.tcctl(&words[1..]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let token = stdout.strip_suffix('\n').unwrap_or(&stdout);
    assert!(
        token.starts_with("tct_") && !token.contains(char::is_whitespace),
        "tcctl elicit must print the token and nothing else: {stdout:?}"
    );
    token.to_string()
}

/// `args` plus `elicit_token`.
pub fn with_token(args: &Value, token: &str) -> Value {
    let mut a = args.clone();
    a["elicit_token"] = json!(token);
    a
}

/// How many approvals the env's daemon logged as consumed.
pub fn consumed(env: &Env) -> usize {
    count(&event_kinds(&env.socket), "tc.elicit.consumed")
}

/// The names of the tools in a `tools/list` result.
pub fn tool_names(tools: &Value) -> Vec<&str> {
    tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect()
}

/// A gated call without a token: refused as `elicit_required`; returns the refusal.
#[track_caller]
pub fn raise(c: &mut PyClient, name: &str, args: &Value) -> Value {
    let r = c.call(name, args.clone());
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
    r
}

/// The CLI-token route's redemption: a token minted for `refusal` runs the re-sent call
/// once (`file` then holds `want`); re-sent again, the spent token writes nothing (the
/// removed file stays removed); one consumed approval in all.
#[track_caller]
pub fn assert_redeemed_once(
    c: &mut PyClient,
    env: &Env,
    (name, args): (&str, &Value),
    refusal: &Value,
    file: &Path,
    want: &str,
) {
    let token = mint(&env.socket, refusal);
    let r = c.call(name, with_token(args, &token));
    assert_eq!(code(&r), None, "{r}");
    assert_eq!(std::fs::read_to_string(file).unwrap(), want);
    std::fs::remove_file(file).unwrap();
    let r = c.call(name, with_token(args, &token));
    assert_eq!(code(&r).as_deref(), Some("invalid_input"), "{r}");
    assert_eq!(sc(&r)["details"]["reason"], "spent", "{r}");
    assert!(!file.exists(), "a spent token must not write");
    let kinds = event_kinds(&env.socket);
    assert_eq!(count(&kinds, "tc.elicit.consumed"), 1, "{kinds:?}");
}

/// After drift refused a token for `name(args)`: the same call without one raises a fresh
/// request bound to the new state (a `state_fp` other than `first`'s), and with that
/// request's token it runs, without error.
#[track_caller]
pub fn assert_fresh_request_runs(
    c: &mut PyClient,
    env: &Env,
    (name, args): (&str, &Value),
    first: &Value,
) {
    let fresh = raise(c, name, args);
    assert_ne!(
        sc(&fresh)["details"]["state_fp"],
        sc(first)["details"]["state_fp"]
    );
    let token = mint(&env.socket, &fresh);
    let r = c.call(name, with_token(args, &token));
    assert_eq!(code(&r), None, "{r}");
}

/// How many events of `kind` are in `kinds`.
pub fn count(kinds: &[String], kind: &str) -> usize {
    kinds.iter().filter(|k| *k == kind).count()
}

/// Polls `f` (every 20 ms, up to 10 s) until it returns Some; panics naming `what`.
pub fn wait_until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------- governor tests

impl Env {
    /// `tcctl metrics` against this env's daemon (stdout; panics on failure).
    pub fn tcctl_metrics(&self) -> String {
        let out = self.tcd.tcctl(&["metrics"]);
        assert!(out.status.success(), "tcctl metrics: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }
}

impl PyClient {
    /// Starts `tests/fixtures/gov_client.py` (low-level `ClientSession`, legacy era; with
    /// `auto`, `mcp.Client(mode="auto")`) in front of `server_argv`.
    pub fn start_gov(auto: bool, server_argv: &[String]) -> PyClient {
        let mut cmd = Command::new(peers().join("venv/bin/python"));
        cmd.arg(workspace().join("tests/fixtures/gov_client.py"));
        if auto {
            cmd.arg("--auto");
        }
        cmd.args(server_argv);
        Self::spawn_cmd(cmd)
    }

    /// Starts `tests/fixtures/roots_client.py`: a client that declares `roots` and answers
    /// `roots/list` with `roots` (comma-separated URIs); with `auto`, `mcp.Client(mode="auto")`.
    pub fn start_roots(auto: bool, roots: &str, server_argv: &[String]) -> PyClient {
        let mut cmd = Command::new(peers().join("venv/bin/python"));
        cmd.arg(fixture("roots_client.py"));
        if auto {
            cmd.arg("--auto");
        }
        cmd.arg(roots).args(server_argv);
        Self::spawn_cmd(cmd)
    }

    /// Sends one command and returns the whole answer line
    /// (`{"ok": true, "result"}` or `{"ok": false, "rpc_error" | "error"}`).
    pub fn op(&mut self, cmd: Value) -> Value {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
        self.read()
    }
}

/// Every event in the daemon's log, in order.
pub fn all_events(socket: &Path) -> Vec<v1::Event> {
    rt().block_on(async { crate::events(&mut client(socket).await).await })
}

/// Waits (up to 10 s) until the daemon holds at least `n` events of `kind`; returns them.
pub fn wait_events(socket: &Path, kind: &str, n: usize) -> Vec<v1::Event> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let evs: Vec<v1::Event> = all_events(socket)
            .into_iter()
            .filter(|e| e.kind == kind)
            .collect();
        if evs.len() >= n || Instant::now() > deadline {
            return evs;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Seals a paging cursor directly at the daemon (as another principal could).
pub fn seal_cursor(socket: &Path, binding: Binding, position: &[u8]) -> String {
    rt().block_on(async {
        client(socket)
            .await
            .seal_cursor(v1::SealCursorRequest {
                binding: Some(binding),
                position: position.to_vec(),
            })
            .await
            .expect("seal cursor")
            .into_inner()
            .cursor
    })
}

/// A raw JSON-RPC client of a tc-shim process (no SDK): for exact ids and bytes.
pub struct RawClient {
    pub child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl RawClient {
    /// Starts `argv` (a tc-shim command line) with piped stdio.
    pub fn start(argv: &[String]) -> RawClient {
        let mut child =
            spawn_piped(&mut argv_command(argv), Stdio::inherit()).expect("spawn tc-shim");
        let stdin = child.stdin.take().unwrap();
        let lines = lines_of(child.stdout.take().unwrap());
        RawClient {
            child,
            stdin,
            lines,
        }
    }

    /// Writes one message.
    pub fn send(&mut self, msg: &Value) {
        writeln!(self.stdin, "{msg}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Writes several messages in one write, so the shim reads them together (the first
    /// is still in flight when it handles the second).
    pub fn send_together(&mut self, msgs: &[Value]) {
        let all: String = msgs.iter().map(|m| format!("{m}\n")).collect();
        self.stdin.write_all(all.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
    }

    /// The next line from the shim, parsed (within 60 s).
    pub fn recv(&mut self) -> Value {
        let l = self
            .lines
            .recv_timeout(Duration::from_secs(60))
            .expect("a line from tc-shim within 60s");
        serde_json::from_str(&l).unwrap_or_else(|e| panic!("bad line from tc-shim: {e}"))
    }

    /// Sends a request and returns the next line (the test sends one at a time).
    pub fn request(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.recv()
    }

    /// A `tools/call` answered under its own id; returns the `result` (Null for an error).
    pub fn call_tool(&mut self, id: u64, tool: &str, args: Value) -> Value {
        let r = self.request(
            json!(id),
            "tools/call",
            json!({"name": tool, "arguments": args}),
        );
        assert_eq!(r["id"], json!(id), "{r}");
        r["result"].clone()
    }

    /// `initialize` + `notifications/initialized` (legacy era).
    pub fn initialize(&mut self) -> Value {
        let r = self.request(
            json!("init"),
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}),
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        r
    }
}

impl Drop for RawClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
