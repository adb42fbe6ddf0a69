//! Latency, startup and idle-RSS benchmark for the real `tc-shim` binary (see
//! docs/BENCHMARKS.md, section "Shim: added latency, startup, idle RSS").
//!
//! Run with `cargo build --release -p tc-shim && cargo bench -p tc-tests --bench shim`.
//!
//! The downstream is this bench executable itself, re-executed with
//! `TC_BENCH_ROLE=server`: a minimal MCP server (blocking std I/O, one `serde_json`
//! parse and one serialize per message) that answers `initialize`, `tools/list` (one
//! tool `echo`, `readOnlyHint: true`) and `tools/call echo`. Other roles of the same
//! executable: `cat` (echoes each line back unchanged: one raw pipe round trip) and
//! `relay` (a minimal proxy, two std threads copying lines between its stdio and a
//! `server` child, no parsing: the floor of any stdio proxy).
//!
//! Measured in one run:
//!
//! 1. sequential `tools/call echo` round trips (p50/p99), N after a warm-up, for: the
//!    server directly; the server behind `tc-shim serve bench --config <cfg> --socket
//!    <absent> -- <this exe>` (one vault, no gates, no daemon: ungated calls must not
//!    need it, and every answer is checked); the server behind the minimal relay; and
//!    the raw pipe round trip (`cat`). The four are interleaved in blocks so drift hits
//!    all alike. It prints the shim's added p50 (through − direct) against one raw pipe
//!    round trip p50 (target: ≤ 1×), and the proxies' CPU time and context switches per
//!    call (from `/proc/<pid>/task/*/{schedstat,status}`);
//! 2. startup to ready: spawn → first `initialize` response, the server alone vs behind
//!    `tc-shim`, interleaved;
//! 3. idle RSS of the `tc-shim` process itself (`VmRSS`, `VmHWM` from
//!    `/proc/<pid>/status`) after `initialize`, `tools/list` and 1000 calls, then idle
//!    (target: under 10 MB).
//!
//! Timings are printed, never asserted: the bench exits 0 whenever it ran.
//!
//! Knobs: `TC_BENCH_N` (timed calls per path, default 5000), `TC_BENCH_STARTS` (starts
//! per side, default 30), `TC_SHIM_BIN` (default `target/release/tc-shim`), `TC_BENCH_TOOL`
//! (`echo`, read-only, the default; or `touch`, the same tool not declared read-only, which
//! takes a shared place in tc-shim's barrier).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use serde_json::{json, Value};
use tc_tests::bench::{
    echo_tool, env_usize, main_with_roles, proc_field, release_binary, serve_stdio, target_tempdir,
    us, Answer, Peer, Setup, Stats, ROLE_ENV,
};

/// The tool the timed calls use: `echo` (read-only, the default) or `touch` (the same, not
/// declared read-only: it takes a shared place in tc-shim's barrier). `TC_BENCH_TOOL`.
fn bench_tool() -> &'static str {
    match std::env::var("TC_BENCH_TOOL").as_deref() {
        Ok("touch") => "touch",
        _ => "echo",
    }
}

/// Selects what this executable does when re-executed.
/// Untimed calls per path before the timed phase.
const WARMUP: usize = 500;
/// Timed blocks the latency phase is split into (paths interleaved per block).
const BLOCKS: usize = 10;
/// Calls made before the idle-RSS reading.
const RSS_CALLS: usize = 1000;
/// Idle time before the RSS reading.
const RSS_IDLE: Duration = Duration::from_secs(2);
/// The RSS target.
const RSS_TARGET_KB: u64 = 10 * 1024;

fn main() -> anyhow::Result<()> {
    main_with_roles(
        &[
            ("server", role_server),
            ("cat", role_cat),
            ("relay", role_relay),
        ],
        bench,
    )
}

// ---------------------------------------------------------------- re-exec'd roles

/// A minimal MCP server on blocking stdio.
fn role_server() -> anyhow::Result<()> {
    serve_stdio("tc-bench-echo", "2025-06-18", |method, msg, _| {
        Ok(match method {
            "tools/list" => Answer::Result(json!({"tools": [echo_tool(), {
                "name": "touch",
                "description": "Echoes `text`; not declared read-only, so tc-shim orders it.",
                "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}
            }]})),
            "tools/call"
                if matches!(
                    msg.pointer("/params/name").and_then(Value::as_str),
                    Some("echo" | "touch")
                ) =>
            {
                let text = msg
                    .pointer("/params/arguments/text")
                    .cloned()
                    .unwrap_or_else(|| json!(""));
                Answer::Result(
                    json!({"content": [{"type": "text", "text": text}], "isError": false}),
                )
            }
            "ping" => Answer::Result(json!({})),
            _ => Answer::NotFound,
        })
    })
}

/// Echoes every line back unchanged.
fn role_cat() -> anyhow::Result<()> {
    let mut stdin = std::io::stdin().lock();
    let mut out = std::io::stdout().lock();
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        if stdin.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        out.write_all(&line)?;
        out.flush()?;
    }
}

/// A minimal stdio proxy in front of a `server` child: two threads copying lines.
fn role_relay() -> anyhow::Result<()> {
    let mut child = Command::new(std::env::current_exe()?)
        .env(ROLE_ENV, "server")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut to_child = child.stdin.take().context("child stdin")?;
    let mut from_child = BufReader::new(child.stdout.take().context("child stdout")?);
    let up = std::thread::spawn(move || -> std::io::Result<()> {
        let mut stdin = std::io::stdin().lock();
        let mut line = Vec::with_capacity(256);
        loop {
            line.clear();
            if stdin.read_until(b'\n', &mut line)? == 0 {
                return Ok(()); // dropping to_child closes the child's stdin
            }
            to_child.write_all(&line)?;
        }
    });
    let mut out = std::io::stdout().lock();
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        if from_child.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        out.write_all(&line)?;
        out.flush()?;
    }
    let _ = up.join();
    child.wait()?;
    Ok(())
}

// ---------------------------------------------------------------- the bench

fn bench() -> anyhow::Result<()> {
    let n = env_usize("TC_BENCH_N", 5000)?;
    let starts = env_usize("TC_BENCH_STARTS", 30)?;
    ensure!(
        n >= BLOCKS && starts > 0,
        "TC_BENCH_N must be ≥ {BLOCKS}, TC_BENCH_STARTS ≥ 1"
    );
    let shim_bin = release_binary("tc-shim", "tc-shim", "shim", "TC_SHIM_BIN")?;
    let me = std::env::current_exe()?;
    let tmp = target_tempdir(&shim_bin, "shim")?;
    let root = tmp.path().join("root");
    std::fs::create_dir_all(&root)?;
    let config = tmp.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[[vaults]]\nid = \"bench\"\nroot = {}\n",
            toml_str(&root.display().to_string())
        ),
    )?;
    let socket = tmp.path().join("run").join("no-daemon.sock");
    let setup = Setup {
        me: me.clone(),
        shim: shim_bin.clone(),
        config,
        socket,
    };
    println!("tc-shim:    {}", shim_bin.display());
    println!("downstream: {} ({ROLE_ENV}=server)", me.display());
    println!(
        "daemon:     none; --socket {} does not exist",
        setup.socket.display()
    );

    // 1. Latency, interleaved.
    let mut paths = [
        Route::new("direct: client → fixture server", setup.direct()?)?,
        Route::new("through tc-shim (ungated tools/call)", setup.shim()?)?,
        Route::new("through minimal relay (2 std threads)", setup.relay()?)?,
        Route::new("raw pipe round trip (cat child)", setup.cat()?)?,
    ];
    for p in paths.iter_mut().take(3) {
        mcp_handshake(&mut p.peer)?;
    }
    for p in paths.iter_mut() {
        for _ in 0..WARMUP {
            p.call()?;
        }
        p.samples.clear();
    }
    let proc_before: Vec<_> = paths.iter().map(|p| ProcTotals::of(p.peer.pid())).collect();
    let per_block = n / BLOCKS;
    for _ in 0..BLOCKS {
        for p in paths.iter_mut() {
            for _ in 0..per_block {
                p.call()?;
            }
        }
    }
    let proc_after: Vec<_> = paths.iter().map(|p| ProcTotals::of(p.peer.pid())).collect();
    let long_rss = Rss::of(paths[1].peer.pid())?;

    println!();
    println!(
        "{:<44} {:>6} {:>10} {:>10} {:>10}",
        "sequential tools/call echo", "n", "p50 µs", "p99 µs", "mean µs"
    );
    let stats: Vec<Stats> = paths.iter().map(|p| Stats::of(&p.samples)).collect();
    for (p, st) in paths.iter().zip(&stats) {
        println!(
            "{:<44} {:>6} {:>10.1} {:>10.1} {:>10.1}",
            p.name,
            p.samples.len(),
            us(st.p50),
            us(st.p99),
            us(st.mean)
        );
    }
    let (direct, shim, relay, raw) = (
        us(stats[0].p50),
        us(stats[1].p50),
        us(stats[2].p50),
        us(stats[3].p50),
    );
    println!();
    println!("p50 direct = {direct:.1} µs, through tc-shim = {shim:.1} µs, raw pipe round trip = {raw:.1} µs");
    let added = shim - direct;
    let ratio = added / raw;
    println!(
        "tc-shim added p50 = {added:.1} µs = {ratio:.2}× one raw pipe round trip (target ≤ 1×: {})",
        if ratio <= 1.0 { "met" } else { "NOT met" }
    );
    println!(
        "minimal relay added p50 = {:.1} µs = {:.2}× one raw pipe round trip (the floor of a stdio proxy)",
        relay - direct,
        (relay - direct) / raw
    );
    println!();
    println!(
        "{:<44} {:>12} {:>14} {:>8}",
        "proxy process, timed phase", "CPU µs/call", "ctx sw/call", "threads"
    );
    for i in [1, 2] {
        match (&proc_before[i], &proc_after[i]) {
            (Ok(b), Ok(a)) => println!(
                "{:<44} {:>12.1} {:>14.2} {:>8}",
                paths[i].name,
                (a.cpu_ns.saturating_sub(b.cpu_ns)) as f64 / 1e3 / n as f64,
                (a.ctx_switches.saturating_sub(b.ctx_switches)) as f64 / n as f64,
                a.threads
            ),
            (Err(e), _) | (_, Err(e)) => println!("{:<44} unavailable: {e:#}", paths[i].name),
        }
    }
    println!(
        "(the relay's figures exclude its server child, the shim's exclude its downstream; \
         CPU from /proc/<pid>/task/*/schedstat)"
    );
    for p in paths {
        p.peer.finish()?;
    }

    // 2. Startup to ready.
    let mut start_direct = Vec::with_capacity(starts);
    let mut start_shim = Vec::with_capacity(starts);
    for _ in 0..starts {
        start_direct.push(time_to_ready(setup.role_cmd("server"))?);
        start_shim.push(time_to_ready(setup.shim_cmd("bench"))?);
    }
    let (sd, ss) = (Stats::of(&start_direct), Stats::of(&start_shim));
    println!();
    println!(
        "{:<44} {:>6} {:>10} {:>10} {:>10}",
        "spawn → first initialize response", "n", "p50 ms", "p99 ms", "mean ms"
    );
    for (name, s) in [
        ("fixture server alone", &sd),
        ("tc-shim in front of the fixture server", &ss),
    ] {
        println!(
            "{:<44} {:>6} {:>10.2} {:>10.2} {:>10.2}",
            name,
            starts,
            ms(s.p50),
            ms(s.p99),
            ms(s.mean)
        );
    }
    println!("tc-shim startup adds p50 {:.2} ms", ms(ss.p50) - ms(sd.p50));

    // 3. Idle RSS of a fresh shim after initialize + tools/list + 1000 calls.
    let mut peer = setup.shim()?;
    mcp_handshake(&mut peer)?;
    let mut p = Route::new("rss", peer)?;
    for _ in 0..RSS_CALLS {
        p.call()?;
    }
    std::thread::sleep(RSS_IDLE);
    let rss = Rss::of(p.peer.pid())?;
    p.peer.finish()?;
    println!();
    println!(
        "{:<44} {:>9} {:>9} {:>9} {:>9} {:>8}",
        "tc-shim process (not its child)", "VmRSS kB", "VmHWM kB", "anon kB", "file kB", "threads"
    );
    for (name, r) in [
        (
            format!(
                "idle {}s after init + list + {RSS_CALLS} calls",
                RSS_IDLE.as_secs()
            ),
            &rss,
        ),
        (
            format!("after the latency phase ({} calls)", WARMUP + n),
            &long_rss,
        ),
    ] {
        println!(
            "{:<44} {:>9} {:>9} {:>9} {:>9} {:>8}",
            name, r.rss_kb, r.hwm_kb, r.anon_kb, r.file_kb, r.threads
        );
    }
    println!(
        "idle VmRSS {:.1} MB, VmHWM {:.1} MB (target < 10 MB: {})",
        rss.rss_kb as f64 / 1024.0,
        rss.hwm_kb as f64 / 1024.0,
        if rss.rss_kb < RSS_TARGET_KB && rss.hwm_kb < RSS_TARGET_KB {
            "met"
        } else if rss.rss_kb < RSS_TARGET_KB {
            "met for VmRSS, NOT for VmHWM"
        } else {
            "NOT met"
        }
    );
    Ok(())
}

/// The peers only this bench starts.
trait Peers {
    fn shim(&self) -> anyhow::Result<Peer>;
    fn relay(&self) -> anyhow::Result<Peer>;
    fn cat(&self) -> anyhow::Result<Peer>;
}

impl Peers for Setup {
    fn shim(&self) -> anyhow::Result<Peer> {
        Peer::spawn(self.shim_cmd("bench"))
    }

    fn relay(&self) -> anyhow::Result<Peer> {
        Peer::spawn(self.role_cmd("relay"))
    }

    fn cat(&self) -> anyhow::Result<Peer> {
        Peer::spawn(self.role_cmd("cat"))
    }
}

/// `initialize`, `notifications/initialized`, `tools/list` (checks the echo tool).
fn mcp_handshake(peer: &mut Peer) -> anyhow::Result<()> {
    peer.handshake_listing_echo("2025-06-18", "tc-bench")
}

/// One measured path: a peer and its samples.
struct Route {
    name: &'static str,
    peer: Peer,
    next_id: u64,
    samples: Vec<Duration>,
}

impl Route {
    fn new(name: &'static str, peer: Peer) -> anyhow::Result<Route> {
        Ok(Route {
            name,
            peer,
            next_id: 1,
            samples: Vec::new(),
        })
    }

    /// One timed `tools/call echo` round trip; the answer is checked after the clock stops.
    fn call(&mut self) -> anyhow::Result<()> {
        let id = self.next_id;
        self.next_id += 1;
        let text = format!("hello {id}");
        let mut line = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id,
            "method": "tools/call", "params": {"name": bench_tool(), "arguments": {"text": text}}}))?;
        line.push(b'\n');
        let t0 = Instant::now();
        self.peer.send(&line)?;
        let answer = self.peer.recv_line()?;
        let dt = t0.elapsed();
        if answer.as_bytes() != line.as_slice() {
            // Not the cat: must be the echo tool's successful result for this id.
            let r: Value = serde_json::from_str(answer)
                .with_context(|| format!("{}: bad answer {answer:?}", self.name))?;
            ensure!(
                r["id"] == json!(id)
                    && r.pointer("/result/isError") == Some(&json!(false))
                    && r.pointer("/result/content/0/text") == Some(&json!(text)),
                "{}: unexpected answer {r}",
                self.name
            );
        }
        self.samples.push(dt);
        Ok(())
    }
}

/// Spawn → first `initialize` answer; then closes stdin and reaps the child.
fn time_to_ready(cmd: Command) -> anyhow::Result<Duration> {
    let init = b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"tc-bench\",\"version\":\"0\"}}}\n";
    let t0 = Instant::now();
    let mut p = Peer::spawn(cmd)?;
    p.send(init)?;
    let answer = p.recv_line()?;
    let dt = t0.elapsed();
    ensure!(
        answer.contains("\"protocolVersion\""),
        "bad initialize answer {answer:?}"
    );
    p.finish()?;
    Ok(dt)
}

/// CPU time and context switches summed over a process's live threads.
struct ProcTotals {
    cpu_ns: u64,
    ctx_switches: u64,
    threads: usize,
}

impl ProcTotals {
    fn of(pid: u32) -> anyhow::Result<ProcTotals> {
        let mut t = ProcTotals {
            cpu_ns: 0,
            ctx_switches: 0,
            threads: 0,
        };
        for e in std::fs::read_dir(format!("/proc/{pid}/task"))? {
            let dir = e?.path();
            let (Ok(sched), Ok(status)) = (
                std::fs::read_to_string(dir.join("schedstat")),
                std::fs::read_to_string(dir.join("status")),
            ) else {
                continue; // the thread exited meanwhile
            };
            t.cpu_ns += sched
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            t.ctx_switches += proc_field(&status, "voluntary_ctxt_switches").unwrap_or(0)
                + proc_field(&status, "nonvoluntary_ctxt_switches").unwrap_or(0);
            t.threads += 1;
        }
        Ok(t)
    }
}

/// Memory figures from `/proc/<pid>/status`, in kB.
struct Rss {
    rss_kb: u64,
    hwm_kb: u64,
    anon_kb: u64,
    file_kb: u64,
    threads: u64,
}

impl Rss {
    fn of(pid: u32) -> anyhow::Result<Rss> {
        let s = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let f = |k: &str| proc_field(&s, k).with_context(|| format!("no {k} for pid {pid}"));
        Ok(Rss {
            rss_kb: f("VmRSS")?,
            hwm_kb: f("VmHWM")?,
            anon_kb: f("RssAnon")?,
            file_kb: f("RssFile")?,
            threads: f("Threads")?,
        })
    }
}

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
