//! Streamable HTTP benchmark for the real `tc-shim serve --http` (see docs/BENCHMARKS.md,
//! section "HTTP front: added latency, throughput, idle sessions").
//!
//! Run with `cargo build --release -p tc-shim && cargo bench -p tc-tests --bench http`.
//!
//! Three paths to one minimal Streamable HTTP MCP server (this executable re-executed
//! with `TC_BENCH_ROLE=server`: axum, JSON answers, `tools/call echo`): the server
//! directly; behind a minimal pass-through reverse proxy on the same stack as tc-shim
//! (`TC_BENCH_ROLE=relay`: axum + hyper's HTTP/1 client connections in a plain pool,
//! bodies and MCP headers copied, nothing parsed: the floor of any HTTP proxy); behind
//! `tc-shim serve bench --http` with the vault's `url` pointing at the server (no gates,
//! no daemon: ungated calls need none); and, for reference, behind the same relay on
//! reqwest (`relay-rq`, the floor until tc-shim's downstream left reqwest). Measured in
//! one run, paths interleaved in rounds:
//!
//! 1. per `tools/call` latency p50/p99 and calls/s with 1 and 32 concurrent callers,
//!    each a legacy session of its own; printed as tc's added p50 against the relay's
//!    (target ≤ 2×) and tc's calls/s against direct (target ≥ 0.5× at 32 callers);
//! 2. idle sessions: `tc-shim`'s `VmRSS` before and after opening `TC_BENCH_SESSIONS`
//!    (default 10 000) legacy sessions that then sit idle: bytes per session, total
//!    (target: 10 000 under 64 MB); then one more session past `max_sessions` → 503.
//!
//! Each path's CPU per call is printed too (callers, server, proxy; from
//! `/proc/PID/task/*/schedstat` over the timed calls): on a shared machine it is the
//! load-independent measure of what a proxy costs.
//!
//! Timings are printed, never asserted. Knobs: `TC_BENCH_N` (timed calls per path and
//! concurrency, default 4000), `TC_BENCH_CALLERS` (default `1,32`), `TC_BENCH_SESSIONS`,
//! `TC_SHIM_BIN`, and `TC_BENCH_SERVER=everything`: the real server-everything
//! (`streamableHttp`, from `.peers/`) instead of the minimal server, its `echo` tool
//! called; the idle-session part is then skipped (each session is a server instance).

use std::process::{Child, Command, Stdio};

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde_json::{json, Value};
use tc_tests::bench::{
    echo_tool, env_usize, listen, proc_field, release_binary, target_tempdir, us, Stats,
};

const ROLE_ENV: &str = "TC_BENCH_ROLE";
const ROUNDS: usize = 4;
/// The headers a Streamable HTTP proxy must carry both ways.
const MCP_HEADERS: &[&str] = &[
    "content-type",
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
];

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    match std::env::var(ROLE_ENV).as_deref() {
        Ok("server") => rt.block_on(role_server()),
        Ok("relay") => rt.block_on(role_relay()),
        Ok("relay-rq") => rt.block_on(role_relay_reqwest()),
        Ok(other) => bail!("unknown {ROLE_ENV}={other:?}"),
        Err(_) => rt.block_on(bench()),
    }
}

// ---------------------------------------------------------------- re-exec'd roles

/// A minimal Streamable HTTP MCP server: JSON answers, any session id accepted.
async fn role_server() -> anyhow::Result<()> {
    tc_tests::bench::serve_mcp_http(answer).await
}

/// The minimal server's answer to one message (`None`: a notification or a response).
fn answer(msg: &Value) -> Option<Value> {
    let id = msg.get("id")?.clone();
    let method = msg.get("method").and_then(Value::as_str).unwrap_or("");
    let result = match method {
        "initialize" => json!({"protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}}, "serverInfo": {"name": "bench", "version": "0"}}),
        "tools/list" => json!({"tools": [echo_tool()]}),
        "tools/call" => json!({"content": [{"type": "text",
                "text": msg.pointer("/params/arguments/text").cloned().unwrap_or(json!(""))}],
                "isError": false}),
        _ => json!({}),
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// A minimal reverse proxy on reqwest: copies the method, the MCP headers and the body to
/// the upstream and its answer back; parses nothing.
async fn role_relay_reqwest() -> anyhow::Result<()> {
    let upstream = std::env::var("TC_BENCH_UPSTREAM").context("TC_BENCH_UPSTREAM")?;
    let client = reqwest::Client::new();
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::any(
            move |method: axum::http::Method, headers: HeaderMap, body: Bytes| {
                let (client, upstream) = (client.clone(), upstream.clone());
                async move {
                    let mut req = client.request(method, &upstream).body(body);
                    for h in MCP_HEADERS {
                        if let Some(v) = headers.get(*h) {
                            req = req.header(*h, v);
                        }
                    }
                    let Ok(r) = req.send().await else {
                        return StatusCode::BAD_GATEWAY.into_response();
                    };
                    let status = r.status();
                    let mut out = HeaderMap::new();
                    for h in MCP_HEADERS {
                        if let Some(v) = r.headers().get(*h) {
                            out.insert(*h, v.clone());
                        }
                    }
                    let body = r.bytes().await.unwrap_or_default();
                    (status, out, body).into_response()
                }
            },
        ),
    );
    axum::serve(listen().await?, app).await?;
    Ok(())
}

/// The floor: the same relay with hyper's HTTP/1 client connections in a plain pool, as
/// tc-shim's downstream has them (no URL parsing, redirect or proxy layers per request).
async fn role_relay() -> anyhow::Result<()> {
    use http_body_util::{BodyExt, Full};
    use hyper::client::conn::http1::SendRequest;
    type Pool = std::sync::Arc<std::sync::Mutex<Vec<SendRequest<Full<Bytes>>>>>;
    let upstream: hyper::Uri = std::env::var("TC_BENCH_UPSTREAM")?.parse()?;
    let authority = upstream.authority().context("authority")?.clone();
    let path = upstream.path().to_string();
    let pool: Pool = Default::default();
    async fn sender(
        pool: &Pool,
        authority: &hyper::http::uri::Authority,
    ) -> anyhow::Result<SendRequest<Full<Bytes>>> {
        while let Some(s) = pool.lock().unwrap().pop() {
            if s.is_ready() {
                return Ok(s);
            }
        }
        let tcp = tokio::net::TcpStream::connect(authority.as_str()).await?;
        tcp.set_nodelay(true)?;
        let (s, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
        tokio::spawn(conn);
        Ok(s)
    }
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::any(
            move |method: axum::http::Method, headers: HeaderMap, body: Bytes| {
                let (pool, authority, path) = (pool.clone(), authority.clone(), path.clone());
                async move {
                    let Ok(mut s) = sender(&pool, &authority).await else {
                        return StatusCode::BAD_GATEWAY.into_response();
                    };
                    let mut req = hyper::Request::new(Full::new(body));
                    *req.method_mut() = method;
                    *req.uri_mut() = path.parse().unwrap();
                    let h = req.headers_mut();
                    h.insert("host", authority.as_str().parse().unwrap());
                    for k in MCP_HEADERS {
                        if let Some(v) = headers.get(*k) {
                            h.insert(*k, v.clone());
                        }
                    }
                    let Ok(r) = s.send_request(req).await else {
                        return StatusCode::BAD_GATEWAY.into_response();
                    };
                    let (parts, body) = r.into_parts();
                    let body = body
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    pool.lock().unwrap().push(s);
                    let mut out = HeaderMap::new();
                    for k in MCP_HEADERS {
                        if let Some(v) = parts.headers.get(*k) {
                            out.insert(*k, v.clone());
                        }
                    }
                    (parts.status, out, body).into_response()
                }
            },
        ),
    );
    axum::serve(listen().await?, app).await?;
    Ok(())
}

// ---------------------------------------------------------------- the bench

/// A child serving HTTP on the port it printed; killed on drop.
struct Served {
    child: Child,
    port: u16,
}

/// Whether `TC_BENCH_SERVER=everything` asks for the real server-everything.
fn real_server() -> anyhow::Result<bool> {
    match std::env::var("TC_BENCH_SERVER").as_deref() {
        Err(_) | Ok("minimal") => Ok(false),
        Ok("everything") => Ok(true),
        Ok(other) => bail!("TC_BENCH_SERVER={other:?}: expected minimal or everything"),
    }
}

/// The `tools/call` each caller makes (both servers answer with `hello` in the text).
fn call_params(real: bool) -> Value {
    let key = if real { "message" } else { "text" };
    json!({"name": "echo", "arguments": {key: "hello"}})
}

impl Served {
    /// server-everything over Streamable HTTP on a free port.
    fn everything() -> anyhow::Result<Served> {
        let port = tc_tests::free_port();
        let js = tc_tests::peers_dir()
            .join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        ensure!(
            js.exists(),
            "{} missing: run scripts/install-peers",
            js.display()
        );
        let child = Command::new("node")
            .arg(&js)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            ensure!(
                Instant::now() < deadline,
                "server-everything never listened"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Served { child, port })
    }

    fn spawn(mut cmd: Command) -> anyhow::Result<Served> {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("spawning {cmd:?}"))?;
        let mut out = std::io::BufReader::new(child.stdout.take().context("stdout")?);
        let mut line = String::new();
        std::io::BufRead::read_line(&mut out, &mut line)?;
        let port = line
            .trim()
            .parse()
            .with_context(|| format!("port line {line:?}"))?;
        Ok(Served { child, port })
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tc-shim serve bench --http` on a free port, in front of `upstream`.
fn start_tc(
    shim: &std::path::Path,
    dir: &std::path::Path,
    upstream: &str,
    max: usize,
) -> anyhow::Result<(Child, String)> {
    let port = tc_tests::free_port();
    let cfg = dir.join(format!("config-{port}.toml"));
    std::fs::write(
        &cfg,
        format!(
            "[daemon]\nsocket = \"{}/absent.sock\"\ncache_dir = \"{}\"\n\n[[vaults]]\nid = \"bench\"\n\
             root = \"{}\"\nurl = \"{upstream}\"\n\n[vaults.http]\nmax_sessions = {max}\n",
            dir.display(),
            dir.display(),
            dir.display()
        ),
    )?;
    let child = Command::new(shim)
        .args(["serve", "bench", "--config"])
        .arg(&cfg)
        .args(["--http", &format!("127.0.0.1:{port}")])
        .env("TC_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        ensure!(Instant::now() < deadline, "tc-shim --http never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((child, format!("http://127.0.0.1:{port}/mcp")))
}

/// One legacy session on `url`: its id.
async fn open(http: &reqwest::Client, url: &str) -> anyhow::Result<Option<String>> {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"}}});
    let r = post(http, url, None, &init).await?;
    if r.status() == StatusCode::SERVICE_UNAVAILABLE {
        return Ok(None);
    }
    ensure!(r.status().is_success(), "initialize: {}", r.status());
    let sid = r
        .headers()
        .get("mcp-session-id")
        .context("no session id")?
        .to_str()?
        .to_string();
    r.bytes().await?;
    let n = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    post(http, url, Some(&sid), &n).await?.bytes().await?;
    Ok(Some(sid))
}

async fn post(
    http: &reqwest::Client,
    url: &str,
    sid: Option<&str>,
    body: &Value,
) -> anyhow::Result<reqwest::Response> {
    let mut req = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    if let Some(s) = sid {
        req = req
            .header("mcp-session-id", s)
            .header("mcp-protocol-version", "2025-11-25");
    }
    Ok(req.send().await?)
}

/// CPU time a process (all its threads) has run, from `/proc/PID/task/*/schedstat`
/// (nanoseconds, unlike `/proc/PID/stat`'s clock ticks).
fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// The timed calls of one [`run`]: latencies, wall time, and the CPU nanoseconds each
/// watched process spent meanwhile.
struct Timed {
    lat: Vec<Duration>,
    wall: Duration,
    cpu: Vec<u64>,
}

/// `callers` sessions each making their share of `n` calls, with `watch`'s CPU measured
/// over the calls only (not the sessions' opening).
async fn run(
    url: &str,
    callers: usize,
    n: usize,
    watch: &[u32],
    params: &Value,
) -> anyhow::Result<Timed> {
    // Each caller is a client of its own (its own connection), as separate MCP clients
    // are: one shared pool would carry any session's calls on any connection.
    let mut sids = Vec::new();
    for _ in 0..callers {
        let http = reqwest::Client::new();
        let sid = open(&http, url).await?.context("session refused")?;
        sids.push((http, sid));
    }
    let cpu0: Vec<u64> = watch.iter().map(|p| cpu_ns(*p)).collect();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (c, (http, sid)) in sids.into_iter().enumerate() {
        let (url, params) = (url.to_string(), params.clone());
        let share = n / callers + usize::from(c < n % callers);
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(share);
            for i in 0..share {
                let call = json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                    "params": params});
                let t = Instant::now();
                let r = post(&http, &url, Some(&sid), &call).await?;
                ensure!(r.status().is_success(), "call: {}", r.status());
                let b = r.bytes().await?;
                lat.push(t.elapsed());
                ensure!(b.windows(5).any(|w| w == b"hello"), "bad answer {b:?}");
            }
            anyhow::Ok(lat)
        }));
    }
    let mut lat = Vec::with_capacity(n);
    for t in tasks {
        lat.extend(t.await??);
    }
    let wall = start.elapsed();
    let cpu = (watch.iter().zip(cpu0))
        .map(|(p, c0)| cpu_ns(*p).saturating_sub(c0))
        .collect();
    Ok(Timed { lat, wall, cpu })
}

fn rss_kb(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    proc_field(&s, "VmRSS").unwrap_or(0)
}

async fn bench() -> anyhow::Result<()> {
    let shim = release_binary("tc-shim", "tc-shim", "http", "TC_SHIM_BIN")?;
    let dir = target_tempdir(&shim, "http")?;
    let n = env_usize("TC_BENCH_N", 4000)?;
    let sessions = env_usize("TC_BENCH_SESSIONS", 10_000)?;
    let me = std::env::current_exe()?;
    let real = real_server()?;
    let params = call_params(real);
    let server = if real {
        Served::everything()?
    } else {
        let mut cmd = Command::new(&me);
        cmd.env(ROLE_ENV, "server");
        Served::spawn(cmd)?
    };
    let mut cmd = Command::new(&me);
    cmd.env(ROLE_ENV, "relay")
        .env("TC_BENCH_UPSTREAM", server.url());
    let relay = Served::spawn(cmd)?;
    let mut cmd = Command::new(&me);
    cmd.env(ROLE_ENV, "relay-rq")
        .env("TC_BENCH_UPSTREAM", server.url());
    let relay_rq = Served::spawn(cmd)?;
    let (mut tc, tc_url) = start_tc(&shim, dir.path(), &server.url(), sessions + 1000)?;
    // Whose CPU each path's calls are measured by: the callers' (this process), the
    // server's, and the proxy's.
    let me_pid = std::process::id();
    let (server_pid, relay_pid, tc_pid) = (server.child.id(), relay.child.id(), tc.id());
    let watch = [
        vec![me_pid, server_pid],
        vec![me_pid, server_pid, relay_pid],
        vec![me_pid, server_pid, tc_pid],
        vec![me_pid, server_pid, relay_rq.child.id()],
    ];
    let paths = [
        ("direct", server.url()),
        ("relay", relay.url()),
        ("tc-shim", tc_url.clone()),
        ("relay-rq", relay_rq.url()),
    ];
    let which = if real {
        "server-everything"
    } else {
        "the minimal server"
    };
    println!("HTTP front ({which}): {n} tools/call per path and concurrency, {ROUNDS} interleaved rounds");
    for callers in callers_env()? {
        let mut lat: Vec<Vec<Duration>> = vec![Vec::new(); paths.len()];
        let mut wall = [Duration::ZERO; 4];
        let mut cpu = [[0u64; 3]; 4];
        for (_, url) in &paths {
            run(url, callers, 200.max(callers * 4), &[], &params).await?; // warm-up
        }
        for _ in 0..ROUNDS {
            for (i, (_, url)) in paths.iter().enumerate() {
                let t = run(url, callers, n / ROUNDS, &watch[i], &params).await?;
                lat[i].extend(t.lat);
                wall[i] += t.wall;
                for (k, c) in t.cpu.into_iter().enumerate() {
                    cpu[i][k] += c;
                }
            }
        }
        let stats: Vec<Stats> = lat.iter().map(|l| Stats::of(l)).collect();
        let rate = |i: usize| lat[i].len() as f64 / wall[i].as_secs_f64();
        println!("\n{callers} concurrent caller(s):");
        println!(
            "  {:<8} {:>10} {:>10} {:>10} {:>12} {:>12} {:>12}",
            "path", "p50 µs", "p99 µs", "calls/s", "callers µs/c", "server µs/c", "proxy µs/c"
        );
        for (i, (name, _)) in paths.iter().enumerate() {
            let per = |k: usize| cpu[i][k] as f64 / 1000.0 / lat[i].len().max(1) as f64;
            let proxy = if i == 0 {
                "-".to_string()
            } else {
                format!("{:.1}", per(2))
            };
            println!(
                "  {:<8} {:>10.1} {:>10.1} {:>10.0} {:>12.1} {:>12.1} {:>12}",
                name,
                us(stats[i].p50),
                us(stats[i].p99),
                rate(i),
                per(0),
                per(1),
                proxy
            );
        }
        let added = |i: usize| us(stats[i].p50) - us(stats[0].p50);
        println!(
            "  added p50: relay {:.1} µs, tc-shim {:.1} µs → {:.2}× the floor (target ≤ 2×)",
            added(1),
            added(2),
            added(2) / added(1).max(0.001)
        );
        println!(
            "  calls/s: tc-shim {:.2}× direct (target ≥ 0.5× at 32 callers), relay {:.2}× direct",
            rate(2) / rate(0),
            rate(1) / rate(0)
        );
    }
    if real {
        let _ = tc.kill();
        let _ = tc.wait();
        return Ok(());
    }
    idle_sessions(&shim, dir.path(), &server.url(), &mut tc, &tc_url, sessions).await
}

/// `TC_BENCH_CALLERS`: the concurrencies measured (comma-separated), default `1,32`.
fn callers_env() -> anyhow::Result<Vec<usize>> {
    let v = std::env::var("TC_BENCH_CALLERS").unwrap_or_else(|_| "1,32".into());
    v.split(',')
        .map(|c| {
            c.trim()
                .parse()
                .with_context(|| format!("TC_BENCH_CALLERS={v:?}"))
        })
        .collect()
}

/// Opens `n` sessions from 16 concurrent openers; their ids.
async fn open_many(http: &reqwest::Client, url: &str, n: usize) -> anyhow::Result<Vec<String>> {
    let mut tasks = tokio::task::JoinSet::new();
    let per = 16;
    for w in 0..per {
        let (http, url) = (http.clone(), url.to_string());
        let share = n / per + usize::from(w < n % per);
        tasks.spawn(async move {
            let mut ok = Vec::new();
            for _ in 0..share {
                if let Some(s) = open(&http, &url).await? {
                    ok.push(s);
                }
            }
            anyhow::Ok(ok)
        });
    }
    let mut all = Vec::new();
    while let Some(r) = tasks.join_next().await {
        all.extend(r??);
    }
    Ok(all)
}

/// RSS of the front before and after `k` idle sessions; then the full-table refusal.
async fn idle_sessions(
    shim: &std::path::Path,
    dir: &std::path::Path,
    upstream: &str,
    tc: &mut Child,
    _used: &str,
    k: usize,
) -> anyhow::Result<()> {
    // A fresh front, so the latency phase's sessions do not count.
    let _ = tc.kill();
    let _ = tc.wait();
    let (mut fresh, url) = start_tc(shim, dir, upstream, k)?;
    let http = reqwest::Client::new();
    open(&http, &url).await?.context("first session")?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_kb(fresh.id());
    let t = Instant::now();
    let sids = open_many(&http, &url, k - 1).await?;
    let opened = sids.len() + 1;
    let took = t.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss_kb(fresh.id());
    // What stays after every session is ended, and after as many are opened again: how
    // much of the growth is live sessions and how much the allocator kept.
    for sid in &sids {
        let mut req = http.delete(&url).header("mcp-session-id", sid.as_str());
        req = req.header("mcp-protocol-version", "2025-11-25");
        req.send().await?.bytes().await?;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ended = rss_kb(fresh.id());
    let again = open_many(&http, &url, k - 1).await?.len();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let reopened = rss_kb(fresh.id());
    let per_session = (after.saturating_sub(before) * 1024) as f64 / (opened - 1).max(1) as f64;
    println!(
        "\nidle legacy sessions ({} opened in {:.1} s):",
        opened,
        took.as_secs_f64()
    );
    println!(
        "  tc-shim RSS {:.1} MB before, {:.1} MB after → {:.0} bytes per session (target: {} under 64 MB: {})",
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        per_session,
        opened,
        if after < 64 * 1024 { "met" } else { "NOT met" }
    );
    println!(
        "  after ending them all: {:.1} MB; after opening {again} again: {:.1} MB",
        ended as f64 / 1024.0,
        reopened as f64 / 1024.0
    );
    let over = open(&http, &url).await?;
    println!(
        "  session {} past max_sessions = {k}: {}",
        opened + 1,
        if over.is_none() {
            "503 (refused)"
        } else {
            "ACCEPTED (table not capped!)"
        }
    );
    let _ = fresh.kill();
    let _ = fresh.wait();
    Ok(())
}
