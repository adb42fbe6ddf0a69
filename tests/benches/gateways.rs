//! tc against gateways users pick for the same job, on the same downstream in the same run
//! (see docs/BENCHMARKS.md, section "Against other gateways").
//!
//! Run with `scripts/install-peers && cargo build --release -p tc-shim && cargo bench -p
//! tc-tests --bench gateways`.
//!
//! The peers (pinned in scripts/install-peers): `supergateway` 4.0.0 (npm, run by `node`)
//! and `mcp-proxy` 0.13.0 (PyPI, in its own venv `.peers/mcp-proxy`). This executable,
//! re-executed with `--gw-role=<role>`, plays the fixtures:
//!
//! - `server`: a minimal MCP server on blocking stdio (line-delimited JSON-RPC:
//!   `initialize`, `tools/list` with one `echo` tool, `tools/call echo`);
//! - `http-server`: the same server over Streamable HTTP (axum, JSON answers, a session id
//!   per `initialize`; the server of benches/http.rs);
//! - `relay`: a minimal stdio → Streamable HTTP relay (tokio, one task per line, one
//!   reqwest client, bodies copied, nothing parsed but the answer's SSE `data:` line): a
//!   reference for a stdio front over an HTTP downstream, not a floor (its std reader and
//!   writer threads cost two hand-offs a call; tc-shim beats it at 1 caller).
//!
//! Two parts, each with its paths interleaved in rounds so load hits all alike:
//!
//! 1. **HTTP front → stdio server.** A Streamable HTTP client (2025-11-25 sessions) calls
//!    `tools/call echo` through `tc-shim serve gw --http` (a `command` vault: the stdio
//!    server; no gates, no daemon), `supergateway --stdio <server> --outputTransport
//!    streamableHttp --stateful` (one child per session, as tc) and `mcp-proxy --port P --
//!    <server>` (one child shared by every session). Direct = the stdio server called over
//!    its stdio by this process. There is no relay floor here: an HTTP → stdio bridge
//!    owns sessions and children, so any such relay is a gateway of its own.
//! 2. **stdio front → HTTP server.** A stdio client calls through `tc-shim serve gw` (a
//!    `url` vault: the HTTP server), `mcp-proxy --transport streamablehttp <url>` and
//!    `supergateway --streamableHttp <url>` (stdio out), and the naive `relay`. Direct =
//!    the HTTP server called over HTTP by this process (one session).
//!
//! Per path: p50/p99 at 1 caller (sequential calls), calls/s at `TC_BENCH_CALLERS_HIGH`
//! (default 32) callers — HTTP: that many sessions, each calling sequentially; stdio: that
//! many requests in flight on the one pipe (a new one sent as each answer arrives) —, the
//! CPU each side spends per call (from `/proc/PID/task/*/schedstat`) and the VmRSS of the
//! gateway's process tree (the fixture servers it spawned excluded and counted apart).
//!
//! Timings are printed, never asserted. Knobs: `TC_BENCH_N` (timed calls per path and
//! concurrency, default 4000), `TC_BENCH_CALLERS_HIGH` (32), `TC_BENCH_PARTS` (`http,stdio`),
//! `TC_SHIM_BIN`, `TC_PEERS`, `TC_BENCH_SG_MODE` (`stateful`, or `stateless`: a child
//! per POST).

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use serde_json::{json, Value};
use tc_tests::bench::{
    echo_tool, env_usize, parents, proc_field, release_binary, target_tempdir, us, Answer, Peer,
    Stats,
};

const ROUNDS: usize = 4;
const PROTO: &str = "2025-11-25";
const ROLE_ARG: &str = "--gw-role=";

fn main() -> anyhow::Result<()> {
    let role = std::env::args().find_map(|a| a.strip_prefix(ROLE_ARG).map(String::from));
    match role.as_deref() {
        Some("server") => role_server(),
        Some("http-server") => runtime()?.block_on(role_http_server()),
        Some("relay") => role_relay(),
        Some(other) => bail!("unknown role {other:?}"),
        None => bench(),
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

// ---------------------------------------------------------------- re-exec'd roles

fn tools_list() -> Value {
    json!({"tools": [echo_tool()]})
}

/// The result of one request other than `initialize` (`None`: method not found).
fn result(method: &str, msg: &Value) -> Option<Value> {
    Some(match method {
        "tools/list" => tools_list(),
        "tools/call" => json!({"content": [{"type": "text",
            "text": msg.pointer("/params/arguments/text").cloned().unwrap_or(json!(""))}],
            "isError": false}),
        "ping" => json!({}),
        _ => return None,
    })
}

/// The HTTP server's answer to one message (`None` for a notification or a response); the
/// stdio server's comes from `tc_tests::bench::serve_stdio` with the same [`result`].
fn answer(msg: &Value) -> Option<Value> {
    let id = msg.get("id")?.clone();
    let method = msg.get("method")?.as_str()?;
    let result = match method {
        "initialize" => json!({
            "protocolVersion": msg.pointer("/params/protocolVersion").cloned()
                .unwrap_or_else(|| json!(PROTO)),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "gw-bench", "version": "0"}}),
        m => match result(m, msg) {
            Some(r) => r,
            None => {
                return Some(json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32601, "message": "method not found"}}))
            }
        },
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// The minimal MCP server on blocking stdio: one parse and one serialize per message.
fn role_server() -> anyhow::Result<()> {
    tc_tests::bench::serve_stdio("gw-bench", PROTO, |method, msg, _| {
        Ok(result(method, msg).map_or(Answer::NotFound, Answer::Result))
    })
}

/// The same server over Streamable HTTP: JSON answers, any session id accepted.
async fn role_http_server() -> anyhow::Result<()> {
    tc_tests::bench::serve_mcp_http(answer).await
}

/// The naive stdio → HTTP relay: each stdin line POSTed as is (a task per line, so requests
/// overlap), the answer's JSON (or its SSE `data:` line) written back as one line; the
/// session id of the `initialize` answer sent with every later request. Stdin and stdout
/// are served by one std thread each (tc-tests' tokio has no `io-std`).
fn role_relay() -> anyhow::Result<()> {
    let url = std::env::var("TC_BENCH_UPSTREAM").context("TC_BENCH_UPSTREAM")?;
    let rt = runtime()?;
    let http = reqwest::Client::new();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let writer = std::thread::spawn(move || -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        for b in rx {
            out.write_all(&b)?;
            out.flush()?;
        }
        Ok(())
    });
    let sid: std::sync::Arc<std::sync::OnceLock<String>> = Default::default();
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let is_init = line.contains("\"initialize\"");
        let (http, url, tx, sid) = (http.clone(), url.clone(), tx.clone(), sid.clone());
        let send = async move {
            let mut req = http
                .post(&url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(line);
            if let Some(s) = sid.get() {
                req = req
                    .header("mcp-session-id", s)
                    .header("mcp-protocol-version", PROTO);
            }
            let r = req.send().await?;
            if is_init {
                if let Some(s) = r.headers().get("mcp-session-id") {
                    let _ = sid.set(s.to_str()?.to_string());
                }
            }
            let body = r.bytes().await?;
            let json = sse_data(&body).unwrap_or(&body);
            if !json.is_empty() {
                let mut b = json.to_vec();
                b.push(b'\n');
                let _ = tx.send(b);
            }
            anyhow::Ok(())
        };
        if is_init {
            rt.block_on(send)?; // the session id must be known before the next request
        } else {
            rt.spawn(send);
        }
    }
    drop(tx);
    rt.shutdown_timeout(Duration::from_secs(5));
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("writer panicked"))??;
    Ok(())
}

/// The JSON of an SSE body's first `data:` line, if the body is SSE.
fn sse_data(body: &[u8]) -> Option<&[u8]> {
    let text = std::str::from_utf8(body).ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix("data:"))?;
    Some(line.trim().as_bytes())
}

// ---------------------------------------------------------------- processes

/// A child process; killed on drop.
struct Proc {
    child: Child,
}

impl Proc {
    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until something listens on `port`.
fn wait_port(port: u16, what: &str, child: &mut Child) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(st) = child.try_wait()? {
            bail!("{what} exited with {st} before listening");
        }
        ensure!(Instant::now() < deadline, "{what} never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// `cmd` started (stdio null, stderr inherited) and serving HTTP on `port`.
fn serve_on(mut cmd: Command, port: u16, what: &str) -> anyhow::Result<Proc> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("spawning {what}: {cmd:?}"))?;
    wait_port(port, what, &mut child)?;
    Ok(Proc { child })
}

/// The minimal HTTP server (prints its port).
fn http_server(me: &Path) -> anyhow::Result<(Proc, String)> {
    let mut child = Command::new(me)
        .arg(format!("{ROLE_ARG}http-server"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut out = std::io::BufReader::new(child.stdout.take().context("stdout")?);
    let mut line = String::new();
    out.read_line(&mut line)?;
    let port: u16 = line.trim().parse().with_context(|| format!("{line:?}"))?;
    Ok((Proc { child }, format!("http://127.0.0.1:{port}/mcp")))
}

/// `root` and its descendants, split into (gateway processes, fixture servers): a
/// fixture server is a descendant running this executable (the root is the gateway, even
/// when it is this executable as the relay).
fn tree(root: u32, me: &Path) -> (Vec<u32>, Vec<u32>) {
    let par = parents();
    let mut all = vec![root];
    let mut i = 0;
    while i < all.len() {
        let p = all[i];
        all.extend(par.iter().filter(|(_, pp)| **pp == p).map(|(c, _)| *c));
        i += 1;
    }
    all.into_iter().partition(|pid| {
        *pid == root || std::fs::read_link(format!("/proc/{pid}/exe")).map_or(true, |e| e != me)
    })
}

/// CPU nanoseconds the processes' threads have run.
fn cpu_ns(pids: &[u32]) -> u64 {
    pids.iter()
        .flat_map(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/task"))
                .into_iter()
                .flatten()
        })
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn rss_kb(pids: &[u32]) -> u64 {
    pids.iter()
        .map(|pid| {
            let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            proc_field(&s, "VmRSS").unwrap_or(0)
        })
        .sum()
}

// ---------------------------------------------------------------- clients

/// What one timed batch of calls gave.
#[derive(Default)]
struct Timed {
    lat: Vec<Duration>,
    wall: Duration,
}

/// A stdio MCP session with a child (a server or a stdio gateway).
struct Pipe {
    peer: Peer,
    next: u64,
}

impl Drop for Pipe {
    fn drop(&mut self) {
        let _ = self.peer.child.kill();
        let _ = self.peer.child.wait();
    }
}

impl Pipe {
    fn start(cmd: Command) -> anyhow::Result<Pipe> {
        let mut peer = Peer::spawn(cmd)?;
        peer.handshake_listing_echo(PROTO, "gw-bench")?;
        Ok(Pipe { peer, next: 1 })
    }

    fn call_line(&mut self) -> anyhow::Result<(u64, Vec<u8>)> {
        let id = self.next;
        self.next += 1;
        let mut l = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id,
            "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "hello"}}}))?;
        l.push(b'\n');
        Ok((id, l))
    }

    /// The id of an answer line, checked to be the echo's result.
    fn answered(line: &str) -> anyhow::Result<u64> {
        let v: Value = serde_json::from_str(line).with_context(|| format!("bad line {line:?}"))?;
        ensure!(
            v.pointer("/result/content/0/text") == Some(&json!("hello")),
            "unexpected answer {v}"
        );
        v["id"].as_u64().context("answer without a numeric id")
    }

    /// `n` calls with `window` of them in flight (a new one sent as each answer arrives).
    fn calls(&mut self, n: usize, window: usize) -> anyhow::Result<Timed> {
        let mut sent: HashMap<u64, Instant> = HashMap::with_capacity(window * 2);
        let mut lat = Vec::with_capacity(n);
        let start = Instant::now();
        let mut issued = 0;
        while issued < window.min(n) {
            let (id, l) = self.call_line()?;
            sent.insert(id, Instant::now());
            self.peer.send(&l)?;
            issued += 1;
        }
        while lat.len() < n {
            let line = self.peer.recv_line()?;
            let t = Instant::now();
            let id = Self::answered(line)?;
            let t0 = sent.remove(&id).context("an answer to no call in flight")?;
            lat.push(t - t0);
            if issued < n {
                let (id, l) = self.call_line()?;
                sent.insert(id, Instant::now());
                self.peer.send(&l)?;
                issued += 1;
            }
        }
        Ok(Timed {
            lat,
            wall: start.elapsed(),
        })
    }
}

/// An HTTP MCP session: its client (its own connections) and id.
#[derive(Clone)]
struct Session {
    http: reqwest::Client,
    url: String,
    sid: Option<String>,
    proto: String,
}

impl Session {
    async fn open(url: &str) -> anyhow::Result<Session> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()?;
        let mut s = Session {
            http,
            url: url.to_string(),
            sid: None,
            proto: PROTO.to_string(),
        };
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": PROTO, "capabilities": {},
            "clientInfo": {"name": "gw-bench", "version": "0"}}});
        let r = s.post(&init).await?;
        ensure!(
            r.status().is_success(),
            "initialize on {url}: {}",
            r.status()
        );
        s.sid = r
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().map(String::from))
            .transpose()?;
        let body = r.bytes().await?;
        let v: Value = serde_json::from_slice(sse_data(&body).unwrap_or(&body))
            .with_context(|| format!("initialize answer {body:?}"))?;
        if let Some(p) = v.pointer("/result/protocolVersion").and_then(Value::as_str) {
            s.proto = p.to_string();
        }
        let n = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        s.post(&n).await?.bytes().await?;
        Ok(s)
    }

    async fn post(&self, body: &Value) -> anyhow::Result<reqwest::Response> {
        let mut req = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", &self.proto)
            .body(body.to_string());
        if let Some(s) = &self.sid {
            req = req.header("mcp-session-id", s);
        }
        Ok(req.send().await?)
    }

    async fn call(&self, id: usize) -> anyhow::Result<Duration> {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hello"}}});
        let t = Instant::now();
        let r = self.post(&call).await?;
        ensure!(
            r.status().is_success(),
            "call on {}: {}",
            self.url,
            r.status()
        );
        let b = r.bytes().await?;
        let dt = t.elapsed();
        ensure!(b.windows(5).any(|w| w == b"hello"), "bad answer {b:?}");
        Ok(dt)
    }

    async fn close(&self) {
        if let Some(s) = &self.sid {
            let _ = self
                .http
                .delete(&self.url)
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", &self.proto)
                .send()
                .await;
        }
    }
}

/// `n` calls shared by `sessions`, each calling sequentially, all at once; or, with
/// `per_session` = `k` > 1, `k` concurrent callers on each session.
async fn http_calls(sessions: &[Session], per_session: usize, n: usize) -> anyhow::Result<Timed> {
    let callers = sessions.len() * per_session;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..callers {
        let s = sessions[c % sessions.len()].clone();
        let share = n / callers + usize::from(c < n % callers);
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(share);
            for i in 0..share {
                lat.push(s.call(c * 1_000_000 + i + 1).await?);
            }
            anyhow::Ok(lat)
        }));
    }
    let mut lat = Vec::with_capacity(n);
    for t in tasks {
        lat.extend(t.await??);
    }
    Ok(Timed {
        lat,
        wall: start.elapsed(),
    })
}

// ---------------------------------------------------------------- the bench

/// How a path is called.
enum Client {
    /// Over stdio, one session.
    Pipe(Pipe),
    /// Over HTTP: the URL; sessions opened per concurrency.
    Http(String),
}

/// One measured path.
struct Route {
    name: &'static str,
    client: Client,
    /// The gateway's root process (none for direct).
    gateway: Option<Proc>,
    /// Extra processes whose CPU counts as the server's (the shared HTTP server).
    server_pids: Vec<u32>,
}

/// What a path gave at one concurrency.
#[derive(Default)]
struct Acc {
    t: Timed,
    cpu_me: u64,
    cpu_gw: u64,
    cpu_srv: u64,
    rss_gw_kb: u64,
    rss_srv_kb: u64,
    gw_procs: usize,
    srv_procs: usize,
}

struct Setup {
    me: PathBuf,
    shim: PathBuf,
    dir: PathBuf,
    peers: PathBuf,
}

impl Setup {
    fn server_cmd(&self) -> Command {
        let mut c = Command::new(&self.me);
        c.arg(format!("{ROLE_ARG}server"));
        c
    }

    fn server_cmdline(&self) -> String {
        format!("{} {ROLE_ARG}server", self.me.display())
    }

    fn node(&self) -> anyhow::Result<(PathBuf, PathBuf)> {
        let js = self
            .peers
            .join("npm/node_modules/supergateway/dist/index.js");
        ensure!(
            js.exists(),
            "{} missing: run scripts/install-peers",
            js.display()
        );
        Ok((PathBuf::from("node"), js))
    }

    fn mcp_proxy(&self) -> anyhow::Result<PathBuf> {
        let p = self.peers.join("mcp-proxy/bin/mcp-proxy");
        ensure!(
            p.exists(),
            "{} missing: run scripts/install-peers",
            p.display()
        );
        Ok(p)
    }

    /// A tc-shim config with one vault `gw` whose downstream is `downstream` (`command =
    /// […]` or `url = "…"`), and its path.
    fn tc_config(&self, name: &str, downstream: &str) -> anyhow::Result<PathBuf> {
        let cfg = self.dir.join(format!("{name}.toml"));
        std::fs::write(
            &cfg,
            format!(
                "[daemon]\nsocket = {sock}\ncache_dir = {dir}\n\n[[vaults]]\nid = \"gw\"\n\
                 root = {dir}\n{downstream}\n\n[vaults.http]\nmax_sessions = 256\n",
                sock = toml_str(&self.dir.join("absent.sock").display().to_string()),
                dir = toml_str(&self.dir.display().to_string()),
            ),
        )?;
        Ok(cfg)
    }
}

/// The 1-, 5- and 15-minute load averages.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn toml_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

fn bench() -> anyhow::Result<()> {
    let shim = release_binary("tc-shim", "tc-shim", "gateways", "TC_SHIM_BIN")?;
    let tmp = target_tempdir(&shim, "gateways")?;
    let n = env_usize("TC_BENCH_N", 4000)?;
    let high = env_usize("TC_BENCH_CALLERS_HIGH", 32)?;
    ensure!(n >= ROUNDS * high, "TC_BENCH_N must be ≥ {}", ROUNDS * high);
    let parts = std::env::var("TC_BENCH_PARTS").unwrap_or_else(|_| "http,stdio".into());
    let setup = Setup {
        me: std::env::current_exe()?.canonicalize()?,
        shim: shim.clone(),
        dir: tmp.path().to_path_buf(),
        peers: tc_tests::peers_dir(),
    };
    println!("load average at start: {}", loadavg());
    println!("tc-shim: {}", shim.display());
    println!("peers:   {}", setup.peers.display());
    println!("{n} timed tools/call per path and concurrency, {ROUNDS} interleaved rounds; concurrencies 1 and {high}");
    let rt = runtime()?;
    let mut summary = Vec::new();
    for part in parts.split(',') {
        let paths = match part.trim() {
            "http" => http_paths(&setup)?,
            "stdio" => stdio_paths(&setup)?,
            other => bail!("TC_BENCH_PARTS: unknown part {other:?}"),
        };
        let res = measure(&setup, &rt, paths, n, high)?;
        summary.push((part.trim().to_string(), res));
    }
    println!("\n==== summary (added = path − direct, same run) ====");
    println!("load average at end: {}", loadavg());
    for (part, rows) in &summary {
        println!(
            "\n{part}: {:<34} {:>10} {:>10} {:>10} {:>11} {:>10} {:>10} {:>12}",
            "path",
            "add p50 µs",
            "add p99 µs",
            "calls/s @1",
            "calls/s @hi",
            "gw MB @1",
            "gw MB @hi",
            "child MB @hi"
        );
        for r in rows {
            println!(
                "{:<6}  {:<34} {:>10.1} {:>10.1} {:>10.0} {:>11.0} {:>10.1} {:>10.1} {:>12.1}",
                "", r.name, r.add_p50, r.add_p99, r.rate1, r.rate_hi, r.rss1, r.rss_hi, r.child_hi
            );
        }
    }
    Ok(())
}

/// Part 1: HTTP front → the stdio server.
fn http_paths(s: &Setup) -> anyhow::Result<Vec<Route>> {
    let mut v = vec![Route {
        name: "direct (stdio server, over stdio)",
        client: Client::Pipe(Pipe::start(s.server_cmd())?),
        gateway: None,
        server_pids: vec![],
    }];
    // tc-shim serve --http, a command vault.
    let port = tc_tests::free_port();
    let cfg = s.tc_config(
        "http-front",
        &format!(
            "command = [{}, {}]",
            toml_str(&s.me.display().to_string()),
            toml_str(&format!("{ROLE_ARG}server"))
        ),
    )?;
    let mut c = Command::new(&s.shim);
    c.args(["serve", "gw", "--config"])
        .arg(&cfg)
        .args(["--http", &format!("127.0.0.1:{port}")])
        .env("TC_LOG", "warn");
    v.push(Route {
        name: "tc-shim serve --http",
        gateway: Some(serve_on(c, port, "tc-shim --http")?),
        client: Client::Http(format!("http://127.0.0.1:{port}/mcp")),
        server_pids: vec![],
    });
    // supergateway stdio → Streamable HTTP.
    let (node, js) = s.node()?;
    let port = tc_tests::free_port();
    let mode = std::env::var("TC_BENCH_SG_MODE").unwrap_or_else(|_| "stateful".into());
    let mut c = Command::new(node);
    c.arg(js)
        .args(["--stdio", &s.server_cmdline()])
        .args(["--outputTransport", "streamableHttp"])
        .args(["--port", &port.to_string(), "--logLevel", "none"]);
    match mode.as_str() {
        "stateful" => {
            c.arg("--stateful");
        }
        "stateless" => {}
        other => bail!("TC_BENCH_SG_MODE={other:?}: stateful or stateless"),
    }
    v.push(Route {
        name: if mode == "stateful" {
            "supergateway 4.0.0 (stateful)"
        } else {
            "supergateway 4.0.0 (stateless)"
        },
        gateway: Some(serve_on(c, port, "supergateway")?),
        client: Client::Http(format!("http://127.0.0.1:{port}/mcp")),
        server_pids: vec![],
    });
    // mcp-proxy, server mode (stdio → SSE + Streamable HTTP on /mcp).
    let port = tc_tests::free_port();
    let mut c = Command::new(s.mcp_proxy()?);
    c.args(["--port", &port.to_string(), "--log-level", "WARNING", "--"])
        .arg(&s.me)
        .arg(format!("{ROLE_ARG}server"));
    v.push(Route {
        name: "mcp-proxy 0.13.0 (server mode)",
        gateway: Some(serve_on(c, port, "mcp-proxy")?),
        client: Client::Http(format!("http://127.0.0.1:{port}/mcp")),
        server_pids: vec![],
    });
    Ok(v)
}

/// Part 2: stdio front → the HTTP server.
fn stdio_paths(s: &Setup) -> anyhow::Result<Vec<Route>> {
    let (server, url) = http_server(&s.me)?;
    let spid = server.pid();
    // Direct: the server process lives as long as the path.
    let mut v = vec![Route {
        name: "direct (HTTP server, over HTTP)",
        client: Client::Http(url.clone()),
        gateway: Some(server),
        server_pids: vec![],
    }];
    let pipe_path = |name: &'static str, cmd: Command| -> anyhow::Result<Route> {
        let pipe = Pipe::start(cmd)?;
        let pid = pipe.peer.pid();
        Ok(Route {
            name,
            // Pipe owns the child; the gateway root is tracked by pid through a Proc-less
            // entry: see `gateway_pid`.
            gateway: None,
            client: Client::Pipe(pipe),
            server_pids: vec![spid, pid],
        })
    };
    let mut c = Command::new(&s.me);
    c.arg(format!("{ROLE_ARG}relay"))
        .env("TC_BENCH_UPSTREAM", &url);
    v.push(pipe_path("naive relay (threads + reqwest)", c)?);
    let cfg = s.tc_config("stdio-front", &format!("url = {}", toml_str(&url)))?;
    let mut c = Command::new(&s.shim);
    c.args(["serve", "gw", "--config"])
        .arg(&cfg)
        .arg("--socket")
        .arg(s.dir.join("absent.sock"))
        .env("TC_LOG", "warn");
    v.push(pipe_path("tc-shim serve (url vault)", c)?);
    let mut c = Command::new(s.mcp_proxy()?);
    c.args([
        "--transport",
        "streamablehttp",
        "--log-level",
        "WARNING",
        &url,
    ]);
    v.push(pipe_path("mcp-proxy 0.13.0 (client mode)", c)?);
    let (node, js) = s.node()?;
    let mut c = Command::new(node);
    // --no-warnings: in this mode supergateway adds an abort listener per request to one
    // AbortSignal, and node warns at each one past 1500 (MaxListenersExceededWarning).
    c.arg("--no-warnings")
        .arg(js)
        .args(["--streamableHttp", &url])
        .args(["--outputTransport", "stdio", "--logLevel", "none"]);
    v.push(pipe_path("supergateway 4.0.0 (HTTP → stdio)", c)?);
    Ok(v)
}

/// The pids whose CPU and RSS count as (gateway, server) for path `p`.
fn roles_of(p: &Route, me: &Path, direct: bool) -> (Vec<u32>, Vec<u32>) {
    match (&p.client, &p.gateway) {
        // Part 1 direct: the server is our pipe's child.
        (Client::Pipe(pipe), None) if p.server_pids.is_empty() => (vec![], vec![pipe.peer.pid()]),
        // Part 1 gateways: the tree, split into the gateway and its fixture children.
        (Client::Http(_), Some(g)) if !direct => tree(g.pid(), me),
        // Part 2 direct: the HTTP server.
        (Client::Http(_), Some(g)) => (vec![], vec![g.pid()]),
        // Part 2 gateways: server_pids = [HTTP server, gateway root].
        (Client::Pipe(_), None) => {
            let (gw, _) = tree(p.server_pids[1], me);
            (gw, vec![p.server_pids[0]])
        }
        _ => (vec![], vec![]),
    }
}

/// One path's line of the summary.
struct Row {
    name: &'static str,
    add_p50: f64,
    add_p99: f64,
    rate1: f64,
    rate_hi: f64,
    /// The gateway's process tree, fixture servers excluded, MB, at 1 and many callers.
    rss1: f64,
    rss_hi: f64,
    /// The fixture servers the gateway spawned, MB, at many callers.
    child_hi: f64,
}

fn measure(
    s: &Setup,
    rt: &tokio::runtime::Runtime,
    mut paths: Vec<Route>,
    n: usize,
    high: usize,
) -> anyhow::Result<Vec<Row>> {
    let is_http_part = matches!(paths[0].client, Client::Pipe(_));
    println!(
        "\n==== {} ====",
        if is_http_part {
            "HTTP front → stdio server"
        } else {
            "stdio front → HTTP server"
        }
    );
    let me_pid = std::process::id();
    let mut by_conc: Vec<Vec<Acc>> = Vec::new();
    for callers in [1, high] {
        let mut acc: Vec<Acc> = paths.iter().map(|_| Acc::default()).collect();
        // HTTP sessions: `callers` per HTTP path, opened once, closed after the rounds.
        // Part 2's direct path calls `callers` at once on one session (as a stdio
        // gateway's one downstream session carries them).
        let mut sessions: Vec<Vec<Session>> = Vec::new();
        for (i, p) in paths.iter().enumerate() {
            sessions.push(match &p.client {
                Client::Http(url) => {
                    let k = if is_http_part && i > 0 { callers } else { 1 };
                    rt.block_on(async {
                        let mut v = Vec::new();
                        for _ in 0..k {
                            v.push(Session::open(url).await?);
                        }
                        anyhow::Ok(v)
                    })?
                }
                Client::Pipe(_) => vec![],
            });
        }
        let batch = |p: &mut Route, ss: &[Session], k: usize| -> anyhow::Result<Timed> {
            match &mut p.client {
                Client::Pipe(pipe) => pipe.calls(k, callers),
                Client::Http(_) => {
                    let per = callers / ss.len();
                    rt.block_on(http_calls(ss, per, k))
                }
            }
        };
        for (p, ss) in paths.iter_mut().zip(&sessions) {
            batch(p, ss, 200.max(callers * 4))?; // warm-up
        }
        for _ in 0..ROUNDS {
            for (i, p) in paths.iter_mut().enumerate() {
                let (gw, srv) = roles_of(p, &s.me, i == 0);
                let before = (cpu_ns(&[me_pid]), cpu_ns(&gw), cpu_ns(&srv));
                let t = batch(p, &sessions[i], n / ROUNDS)?;
                let a = &mut acc[i];
                a.cpu_me += cpu_ns(&[me_pid]).saturating_sub(before.0);
                a.cpu_gw += cpu_ns(&gw).saturating_sub(before.1);
                a.cpu_srv += cpu_ns(&srv).saturating_sub(before.2);
                a.t.lat.extend(t.lat);
                a.t.wall += t.wall;
            }
        }
        // RSS with the sessions still open.
        for (i, p) in paths.iter().enumerate() {
            let (gw, srv) = roles_of(p, &s.me, i == 0);
            acc[i].rss_gw_kb = rss_kb(&gw);
            acc[i].rss_srv_kb = rss_kb(&srv);
            acc[i].gw_procs = gw.len();
            acc[i].srv_procs = srv.len();
        }
        rt.block_on(async {
            for ss in &sessions {
                for s in ss {
                    s.close().await;
                }
            }
        });
        print_table(&paths, &acc, callers, is_http_part);
        by_conc.push(acc);
    }
    let st1: Vec<Stats> = by_conc[0].iter().map(|a| Stats::of(&a.t.lat)).collect();
    let rate = |a: &Acc| a.t.lat.len() as f64 / a.t.wall.as_secs_f64();
    let rows = paths
        .iter()
        .enumerate()
        .map(|(i, p)| Row {
            name: p.name,
            add_p50: us(st1[i].p50) - us(st1[0].p50),
            add_p99: us(st1[i].p99) - us(st1[0].p99),
            rate1: rate(&by_conc[0][i]),
            rate_hi: rate(&by_conc[1][i]),
            rss1: by_conc[0][i].rss_gw_kb as f64 / 1024.0,
            rss_hi: by_conc[1][i].rss_gw_kb as f64 / 1024.0,
            child_hi: if is_http_part && i > 0 {
                by_conc[1][i].rss_srv_kb as f64 / 1024.0
            } else {
                0.0
            },
        })
        .collect();
    // The gateways before the downstream they talk to (direct's HTTP server is first).
    while let Some(p) = paths.pop() {
        drop(p);
    }
    Ok(rows)
}

fn print_table(paths: &[Route], acc: &[Acc], callers: usize, http_part: bool) {
    let how = if callers == 1 {
        "1 caller, sequential calls".to_string()
    } else if http_part {
        format!("{callers} callers: HTTP paths {callers} sessions each calling sequentially; direct {callers} in flight on the one pipe")
    } else {
        format!("{callers} callers: stdio paths {callers} requests in flight on the one pipe; direct {callers} concurrent callers on one session")
    };
    println!("\n{how}:");
    println!(
        "  {:<36} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>9} {:>9}",
        "path",
        "p50 µs",
        "p99 µs",
        "+p50 µs",
        "+p99 µs",
        "calls/s",
        "me µs/c",
        "gw µs/c",
        "srv µs/c",
        "gw RSS MB",
        "srv MB (n)"
    );
    let st: Vec<Stats> = acc.iter().map(|a| Stats::of(&a.t.lat)).collect();
    for (i, (p, a)) in paths.iter().zip(acc).enumerate() {
        let per = |ns: u64| ns as f64 / 1000.0 / a.t.lat.len().max(1) as f64;
        let gw = if i == 0 {
            "-".to_string()
        } else {
            format!("{:.1}", per(a.cpu_gw))
        };
        let gw_rss = if i == 0 {
            "-".to_string()
        } else {
            format!("{:.1} ({})", a.rss_gw_kb as f64 / 1024.0, a.gw_procs)
        };
        println!(
            "  {:<36} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.0} {:>8.1} {:>8} {:>8.1} {:>9} {:>9}",
            p.name,
            us(st[i].p50),
            us(st[i].p99),
            us(st[i].p50) - us(st[0].p50),
            us(st[i].p99) - us(st[0].p99),
            a.t.lat.len() as f64 / a.t.wall.as_secs_f64(),
            per(a.cpu_me),
            gw,
            per(a.cpu_srv),
            gw_rss,
            format!("{:.1} ({})", a.rss_srv_kb as f64 / 1024.0, a.srv_procs),
        );
    }
}
