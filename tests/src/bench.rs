//! Helpers shared by the benchmarks (`tests/benches/*.rs`): locating a release binary,
//! count settings from the environment, nearest-rank percentiles, a JSON-RPC peer,
//! fields of `/proc/<pid>/status` and `/proc/<pid>/io`, CPU times and parents from
//! `/proc/<pid>/stat`. A benchmark's `tcd` is a [`crate::Daemon`] run from
//! [`release_binary`] (see [`crate::Daemon::program`]).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use serde_json::{json, Value};

/// `$<env_var>`, else `<name>` next to the target profile dir this bench was built
/// into (target/release/deps/<bench>-<hash> -> target/release/<name>).
pub fn release_binary(
    name: &str,
    package: &str,
    bench: &str,
    env_var: &str,
) -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os(env_var) {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .context("cannot locate the target directory from the bench executable")?;
    let bin = profile_dir.join(name);
    if !bin.is_file() {
        bail!(
            "{} not found: build it first with `cargo build --release -p {package}`, \
             then rerun `cargo bench -p tc-tests --bench {bench}` (or set {env_var})",
            bin.display()
        );
    }
    Ok(bin)
}

/// A fresh temp dir `tc-bench-<bench>-*` in the target dir of the release binary `bin`
/// (target/release/<name> -> target/): on the filesystem the build is on, not /tmp's.
pub fn target_tempdir(bin: &Path, bench: &str) -> anyhow::Result<tempfile::TempDir> {
    let target = bin
        .parent()
        .and_then(Path::parent)
        .with_context(|| format!("{} has no target directory", bin.display()))?;
    tempfile::Builder::new()
        .prefix(&format!("tc-bench-{bench}-"))
        .tempdir_in(target)
        .with_context(|| format!("creating a temp dir under {}", target.display()))
}

/// A count from the environment, or `default` when unset.
pub fn env_usize(name: &str, default: usize) -> anyhow::Result<usize> {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .with_context(|| format!("{name}={v:?} is not a count")),
        Err(_) => Ok(default),
    }
}

/// p50, p99 and mean of a set of samples.
pub struct Stats {
    pub p50: Duration,
    pub p99: Duration,
    pub mean: Duration,
}

impl Stats {
    /// Nearest-rank percentiles.
    pub fn of(samples: &[Duration]) -> Stats {
        let mut s = samples.to_vec();
        s.sort_unstable();
        let rank = |p: f64| s[((p / 100.0 * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
        Stats {
            p50: rank(50.0),
            p99: rank(99.0),
            mean: s.iter().sum::<Duration>() / s.len() as u32,
        }
    }
}

/// Microseconds, for printing.
pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// A child process spoken to in newline-delimited JSON-RPC over its stdio (a client's
/// view of an MCP server, or of tc-shim in front of one), on blocking std I/O so the
/// timings hold nothing but the peer's own work.
pub struct Peer {
    pub child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    line: String,
}

impl Peer {
    /// Starts `cmd` with piped stdin/stdout (stderr inherited).
    pub fn spawn(mut cmd: Command) -> anyhow::Result<Peer> {
        let mut child = crate::piped::spawn_piped(&mut cmd, Stdio::inherit())
            .with_context(|| format!("spawning {cmd:?}"))?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().context("child stdout")?);
        Ok(Peer {
            child,
            stdin,
            stdout,
            line: String::with_capacity(512),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Writes one complete line (`bytes` must end with `\n`) in one write.
    pub fn send(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        let w = self.stdin.as_mut().context("stdin closed")?;
        w.write_all(bytes)?;
        Ok(())
    }

    /// The next line, unparsed (with its `\n`).
    pub fn recv_line(&mut self) -> anyhow::Result<&str> {
        self.line.clear();
        if self.stdout.read_line(&mut self.line)? == 0 {
            bail!("peer closed its stdout");
        }
        Ok(&self.line)
    }

    /// The next line, parsed.
    pub fn recv(&mut self) -> anyhow::Result<Value> {
        self.recv_line()?;
        serde_json::from_str(&self.line).with_context(|| format!("bad line {:?}", self.line))
    }

    /// Sends a request and returns its answer, which must be a result for the same id.
    pub fn request(&mut self, v: &Value) -> anyhow::Result<Value> {
        self.send(&line_of(v)?)?;
        let r = self.recv()?;
        ensure!(r.get("id") == v.get("id"), "unexpected answer {r} to {v}");
        ensure!(r.get("result").is_some(), "error answer to {v}: {r}");
        Ok(r)
    }

    /// Sends a notification.
    pub fn notify(&mut self, v: &Value) -> anyhow::Result<()> {
        self.send(&line_of(v)?)
    }

    /// `initialize` at `protocol` as client `client`, `notifications/initialized`, then
    /// `tools/list`, which must list the `echo` tool first: a bench's peer ready to call.
    pub fn handshake_listing_echo(&mut self, protocol: &str, client: &str) -> anyhow::Result<()> {
        self.request(
            &json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": protocol, "capabilities": {},
            "clientInfo": {"name": client, "version": "0"}}}),
        )?;
        self.notify(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        let r = self.request(&json!({"jsonrpc": "2.0", "id": "list", "method": "tools/list"}))?;
        ensure!(
            r.pointer("/result/tools/0/name") == Some(&json!("echo")),
            "tools/list lacks echo: {r}"
        );
        Ok(())
    }

    /// Closes stdin and waits for the child to exit, which must be a success.
    pub fn finish(mut self) -> anyhow::Result<()> {
        drop(self.stdin.take());
        let st = self.child.wait()?;
        ensure!(st.success(), "peer exited with {st}");
        Ok(())
    }
}

/// `v` serialized as one line, `\n` included.
pub fn line_of(v: &Value) -> anyhow::Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec(v)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// The first number of a `Key:  value [kB]` line of a `/proc/<pid>/{status,io}` text.
pub fn proc_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The fields of `/proc/<pid>/stat` after the command name (which may hold spaces):
/// field 3 (state) is index 0.
fn stat_fields(pid: &str) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// Every process: pid → parent pid.
pub fn parents() -> HashMap<u32, u32> {
    let mut m = HashMap::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let ppid = stat_fields(&pid.to_string()).and_then(|f| f.get(1)?.parse().ok());
        if let Some(ppid) = ppid {
            m.insert(pid, ppid);
        }
    }
    m
}

/// CPU time (user + system, all threads) process `pid` ("self" for this one) has used;
/// with `reaped`, plus that of its children it has waited for (a server's exited
/// workers). Zero for a process that is gone.
pub fn cpu_time(pid: &str, reaped: bool) -> Duration {
    let Some(f) = stat_fields(pid) else {
        return Duration::ZERO;
    };
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // utime, stime (fields 14, 15), cutime, cstime (16, 17); USER_HZ is 100 on Linux.
    let mut t = ticks(11) + ticks(12);
    if reaped {
        t += ticks(13) + ticks(14);
    }
    Duration::from_millis(t * 10)
}

/// The variable a bench re-runs itself under to play one of its roles (a fixture server,
/// a relay), naming the role.
pub const ROLE_ENV: &str = "TC_BENCH_ROLE";

/// A role's entry point.
pub type Role = fn() -> anyhow::Result<()>;

/// A bench's `main`: plays the role `$TC_BENCH_ROLE` names (one of `roles`), else runs
/// `bench`.
pub fn main_with_roles(roles: &[(&str, Role)], bench: Role) -> anyhow::Result<()> {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return bench();
    };
    match roles.iter().find(|(name, _)| *name == role) {
        Some((_, play)) => play(),
        None => bail!("unknown {ROLE_ENV}={role:?}"),
    }
}

/// What a fixture server answers a request.
pub enum Answer {
    /// `result`.
    Result(Value),
    /// A `-32601` method-not-found error.
    NotFound,
    /// Nothing more: the handler wrote its answer to the output itself.
    Sent,
}

/// A minimal legacy-era MCP server on blocking stdio, as a bench's fixture: answers
/// `initialize` as `name` (the client's protocol version, else `version`), skips blank
/// lines, notifications and responses, and answers every other request (`method`, the
/// whole message, the output) with what `answer` returns.
pub fn serve_stdio(
    name: &str,
    version: &str,
    mut answer: impl FnMut(&str, &Value, &mut dyn Write) -> anyhow::Result<Answer>,
) -> anyhow::Result<()> {
    let stdin = std::io::stdin().lock();
    let mut out = std::io::stdout().lock();
    let mut buf = Vec::with_capacity(512);
    for line in stdin.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let msg: Value = serde_json::from_str(&line)?;
        let (Some(id), Some(method)) = (msg.get("id").cloned(), msg["method"].as_str()) else {
            continue; // a notification, or a response to a request never sent
        };
        let reply = match method {
            "initialize" => serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": msg.pointer("/params/protocolVersion").cloned()
                    .unwrap_or_else(|| Value::from(version)),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": name, "version": "0"}
            }}),
            _ => match answer(method, &msg, &mut out)? {
                Answer::Result(result) => {
                    serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result})
                }
                Answer::NotFound => serde_json::json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32601, "message": "method not found"}}),
                Answer::Sent => {
                    out.flush()?;
                    continue;
                }
            },
        };
        buf.clear();
        serde_json::to_writer(&mut buf, &reply)?;
        buf.push(b'\n');
        out.write_all(&buf)?;
        out.flush()?;
    }
    Ok(())
}

/// Binds 127.0.0.1:0 and prints the port on stdout (a bench's parent reads it).
pub async fn listen() -> anyhow::Result<tokio::net::TcpListener> {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("{}", l.local_addr()?.port());
    std::io::stdout().flush()?;
    Ok(l)
}

/// The benches' minimal Streamable HTTP MCP server on [`listen`]: each POST to `/mcp` is
/// one JSON-RPC message, answered with `answer`'s reply as JSON (202 when it gives none,
/// 400 for what is not JSON); a new `mcp-session-id` on every `initialize`, any session
/// id accepted; GET 405, DELETE 200.
pub async fn serve_mcp_http(answer: fn(&Value) -> Option<Value>) -> anyhow::Result<()> {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SESSIONS: AtomicU64 = AtomicU64::new(0);
    let post = move |body: axum::body::Bytes| async move {
        let Ok(msg) = serde_json::from_slice::<Value>(&body) else {
            return StatusCode::BAD_REQUEST.into_response();
        };
        let Some(reply) = answer(&msg) else {
            return StatusCode::ACCEPTED.into_response();
        };
        let mut r = (StatusCode::OK, reply.to_string()).into_response();
        let h = r.headers_mut();
        h.insert(
            "content-type",
            axum::http::HeaderValue::from_static("application/json"),
        );
        if msg.get("method").and_then(Value::as_str) == Some("initialize") {
            let sid = format!("s{}", SESSIONS.fetch_add(1, Ordering::Relaxed));
            if let Ok(v) = axum::http::HeaderValue::from_str(&sid) {
                h.insert("mcp-session-id", v);
            }
        }
        r
    };
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(post)
            .get(|| async { StatusCode::METHOD_NOT_ALLOWED })
            .delete(|| async { StatusCode::OK }),
    );
    axum::serve(listen().await?, app).await?;
    Ok(())
}

/// A read-only tool `name` taking the JSON-schema `properties`, as a bench server lists
/// it (tc-shim forwards it without ordering it).
pub fn read_only_tool(name: &str, description: &str, properties: Value) -> Value {
    json!({"name": name, "description": description,
           "inputSchema": {"type": "object", "properties": properties},
           "annotations": {"readOnlyHint": true}})
}

/// The `echo` tool every bench server lists: read-only, echoes `text`.
pub fn echo_tool() -> Value {
    read_only_tool(
        "echo",
        "Echoes `text`.",
        json!({"text": {"type": "string"}}),
    )
}

/// What a bench needs to start its peers: itself (re-run in a role), the tc-shim under
/// test, and the config and socket of the `tcd` it talks to.
pub struct Setup {
    pub me: PathBuf,
    pub shim: PathBuf,
    pub config: PathBuf,
    pub socket: PathBuf,
}

impl Setup {
    /// This bench re-run as `role`.
    pub fn role_cmd(&self, role: &str) -> Command {
        let mut c = Command::new(&self.me);
        c.env(ROLE_ENV, role);
        c
    }

    /// The fixture server (`role` "server") run directly.
    pub fn direct(&self) -> anyhow::Result<Peer> {
        Peer::spawn(self.role_cmd("server"))
    }

    /// tc-shim serving `vault` in front of the fixture server.
    pub fn shim_cmd(&self, vault: &str) -> Command {
        let mut c = Command::new(&self.shim);
        c.arg("serve")
            .arg(vault)
            .arg("--config")
            .arg(&self.config)
            .arg("--socket")
            .arg(&self.socket)
            .arg("--")
            .arg(&self.me)
            .env(ROLE_ENV, "server");
        c
    }
}

/// The binding and state fingerprint that an `elicit_required` refusal's `details` name
/// (what a mint for that call needs).
pub fn raised_binding(details: &Value) -> anyhow::Result<(tc_proto::v1::Binding, String)> {
    let field = |k: &str| {
        details[k]
            .as_str()
            .map(String::from)
            .with_context(|| format!("details.{k} missing in {details}"))
    };
    let binding = tc_proto::v1::Binding {
        vault: field("vault")?,
        tool: field("tool")?,
        caller: field("caller")?,
        args_hash: field("args_hash")?,
    };
    Ok((binding, field("state_fp")?))
}
