//! Memory and refusal-speed benchmark for the response governor of the real `tc-shim`
//! (see docs/BENCHMARKS.md, section "Shim: response governor memory").
//!
//! Run with `cargo build --release -p tc-shim && cargo bench -p tc-tests --bench governor`.
//!
//! The downstream is this bench executable itself, re-executed with
//! `TC_BENCH_ROLE=big`: a minimal MCP server whose one tool `blob {bytes}` answers with a
//! single JSON-RPC line of exactly `bytes` bytes (the id as the *last* member, so the
//! shim must scan the whole line to find it), written in 1 MiB chunks from one buffer.
//!
//! For each response size (10 MB, 100 MB, 500 MB) and each cap (`max_response_bytes`
//! 1 MiB, the default, and 8 MiB), a fresh `tc-shim` is started in front of the `big`
//! downstream; after `initialize` and `tools/list` its `VmRSS` is read, one
//! `tools/call blob` is timed from the request to the shim's `overflow` answer (which is
//! checked: code, exact byte count, the request's id), and its `VmHWM` (peak resident
//! set over its whole life) is read. Target: `VmHWM` < cap + 16 MiB in every case.
//!
//! The baseline for the refusal time is the same bytes read from a pipe by `cat`: the
//! same `big` downstream with its stdout piped into `cat > /dev/null`, sent the same
//! request, timed until `cat` has read the whole line (its `rchar`). Target: refusal
//! time ≤ 2× the baseline.
//! Sizes are interleaved with the baseline, `TC_BENCH_REPS` times (default 3), and the
//! medians are printed. No daemon runs: an overflow needs none (its event is best
//! effort), and the bench measures the shim alone.
//!
//! Timings are printed, never asserted: the bench exits 0 whenever it ran.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use serde_json::{json, Value};
use tc_tests::bench::{
    env_usize, main_with_roles, proc_field, read_only_tool, release_binary, serve_stdio, Answer,
    Peer, ROLE_ENV,
};

const MB: u64 = 1_000_000;
const MIB: u64 = 1 << 20;
const SIZES: [u64; 3] = [10 * MB, 100 * MB, 500 * MB];
const CAPS: [u64; 2] = [MIB, 8 * MIB];
/// The allowance over the cap the target grants.
const SLACK_KB: u64 = 16 * 1024;

fn main() -> anyhow::Result<()> {
    main_with_roles(&[("big", role_big)], bench)
}

// ---------------------------------------------------------------- re-exec'd roles

/// A minimal MCP server on blocking stdio with one tool, `blob`.
fn role_big() -> anyhow::Result<()> {
    serve_stdio("tc-bench-big", "2025-06-18", |method, msg, out| {
        Ok(match method {
            "tools/list" => Answer::Result(json!({"tools": [read_only_tool(
                "blob",
                "Answers with one line of `bytes` bytes.",
                json!({"bytes": {"type": "integer"}}),
            )]})),
            "tools/call" => {
                let bytes = msg
                    .pointer("/params/arguments/bytes")
                    .and_then(Value::as_u64)
                    .context("blob needs `bytes`")?;
                write_blob(out, &msg["id"], bytes)?;
                Answer::Sent
            }
            _ => Answer::NotFound,
        })
    })
}

/// Writes a `tools/call` result line of exactly `bytes` bytes (newline excluded), the
/// `id` last, streamed in 1 MiB pieces.
fn write_blob(out: &mut dyn Write, id: &Value, bytes: u64) -> anyhow::Result<()> {
    let head = br#"{"jsonrpc":"2.0","result":{"content":[{"type":"text","text":""#;
    let tail = format!(r#""}}]}},"id":{}}}"#, serde_json::to_string(id)?);
    let fixed = (head.len() + tail.len()) as u64;
    ensure!(bytes >= fixed, "a blob line is at least {fixed} bytes");
    out.write_all(head)?;
    let chunk = vec![b'x'; MIB as usize];
    let mut left = bytes - fixed;
    while left > 0 {
        let n = left.min(MIB) as usize;
        out.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    out.write_all(tail.as_bytes())?;
    out.write_all(b"\n")?;
    Ok(())
}

// ---------------------------------------------------------------- the bench

struct Setup {
    me: PathBuf,
    shim: PathBuf,
    dir: tempfile::TempDir,
}

/// One refusal through a fresh shim.
struct Refusal {
    took: Duration,
    rss_before_kb: u64,
    hwm_kb: u64,
}

fn bench() -> anyhow::Result<()> {
    let reps = env_usize("TC_BENCH_REPS", 3)?.max(1);
    let shim = release_binary("tc-shim", "tc-shim", "governor", "TC_SHIM_BIN")?;
    let me = std::env::current_exe()?;
    let dir = tempfile::Builder::new()
        .prefix("tc-bench-governor-")
        .tempdir()?;
    std::fs::create_dir_all(dir.path().join("root"))?;
    let s = Setup { me, shim, dir };
    println!("tc-shim:    {}", s.shim.display());
    println!("downstream: {} ({ROLE_ENV}=big)", s.me.display());
    println!("daemon:     none (an overflow needs none)");
    println!("reps:       {reps} per case, medians printed");

    println!(
        "| cap | response | shim RSS before | shim peak RSS (VmHWM) | target (cap + 16 MiB) | refusal | cat > /dev/null | ratio | MB/s through the shim |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut all_met = true;
    for &cap in &CAPS {
        for &size in &SIZES {
            let (mut took, mut cat, mut hwm, mut before) = (vec![], vec![], vec![], vec![]);
            for _ in 0..reps {
                let r = refuse(&s, cap, size)?;
                took.push(r.took);
                hwm.push(r.hwm_kb);
                before.push(r.rss_before_kb);
                cat.push(cat_pipe(&s, size)?);
            }
            let (t, c) = (median(&mut took), median(&mut cat));
            let peak = *hwm.iter().max().expect("reps ≥ 1");
            let target_kb = cap / 1024 + SLACK_KB;
            all_met &= peak < target_kb && t.as_secs_f64() <= 2.0 * c.as_secs_f64();
            println!(
                "| {} MiB | {} MB | {:.1} MiB | {:.1} MiB (max of {reps}) | {:.0} MiB | {:.0} ms | {:.0} ms | {:.2}× | {:.0} |",
                cap / MIB,
                size / MB,
                before.iter().max().copied().unwrap_or(0) as f64 / 1024.0,
                peak as f64 / 1024.0,
                target_kb as f64 / 1024.0,
                ms(t),
                ms(c),
                t.as_secs_f64() / c.as_secs_f64(),
                size as f64 / 1e6 / t.as_secs_f64(),
            );
        }
    }
    println!(
        "\ntargets (peak RSS < cap + 16 MiB, refusal ≤ 2× cat): {}",
        if all_met {
            "met in every case"
        } else {
            "NOT met in every case"
        }
    );
    Ok(())
}

/// Starts a shim with `cap`, asks for a `size`-byte answer, checks the overflow refusal.
fn refuse(s: &Setup, cap: u64, size: u64) -> anyhow::Result<Refusal> {
    let config = s.dir.path().join(format!("cap-{cap}.toml"));
    std::fs::write(
        &config,
        format!(
            "[governor]\nmax_response_bytes = {cap}\n\n[[vaults]]\nid = \"big\"\nroot = {}\n",
            serde_json::to_string(&s.dir.path().join("root").display().to_string())?
        ),
    )?;
    let mut cmd = Command::new(&s.shim);
    cmd.arg("serve")
        .arg("big")
        .arg("--config")
        .arg(&config)
        .arg("--socket")
        .arg(s.dir.path().join("no-daemon.sock"))
        .arg("--")
        .arg(&s.me)
        .env(ROLE_ENV, "big")
        .env("TC_LOG", "error");
    let mut peer = Peer::spawn(cmd)?;
    peer.request(
        &json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "tc-bench", "version": "0"}}}),
    )?;
    peer.notify(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
    peer.request(&json!({"jsonrpc": "2.0", "id": "list", "method": "tools/list"}))?;
    let pid = peer.pid();
    let rss_before_kb = status_kb(pid, "VmRSS")?;
    let line = tc_tests::bench::line_of(&json!({"jsonrpc": "2.0", "id": "big-1",
        "method": "tools/call", "params": {"name": "blob", "arguments": {"bytes": size}}}))?;
    let t0 = Instant::now();
    peer.send(&line)?;
    let answer = peer.recv()?;
    let took = t0.elapsed();
    let hwm_kb = status_kb(pid, "VmHWM")?;
    let sc = &answer["result"]["structuredContent"];
    ensure!(
        answer["id"] == "big-1"
            && sc["code"] == "overflow"
            && sc["details"]["bytes"] == size
            && sc["details"]["limit"] == cap,
        "expected an overflow refusal of {size} bytes under the request's id, got {answer}"
    );
    peer.finish()?;
    Ok(Refusal {
        took,
        rss_before_kb,
        hwm_kb,
    })
}

/// The baseline: the same downstream, asked the same way, its answer read from the pipe
/// by `cat > /dev/null`; timed from the request to `cat` having read the whole line
/// (its `rchar` in `/proc/<pid>/io`, polled every 50 µs).
fn cat_pipe(s: &Setup, size: u64) -> anyhow::Result<Duration> {
    let mut big = Command::new(&s.me)
        .env(ROLE_ENV, "big")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let out = big.stdout.take().context("downstream stdout")?;
    let mut cat = Command::new("cat")
        .stdin(Stdio::from(out))
        .stdout(Stdio::null())
        .spawn()?;
    // Let cat finish starting up (its own reads of ld.so files count in rchar).
    std::thread::sleep(Duration::from_millis(100));
    let io = Path::new("/proc").join(cat.id().to_string()).join("io");
    let rchar = || -> anyhow::Result<u64> {
        proc_field(&std::fs::read_to_string(&io)?, "rchar").context("no rchar")
    };
    let start = rchar()?;
    let line = tc_tests::bench::line_of(&json!({"jsonrpc": "2.0", "id": "big-1",
        "method": "tools/call", "params": {"name": "blob", "arguments": {"bytes": size}}}))?;
    let mut stdin = big.stdin.take().context("downstream stdin")?;
    let t0 = Instant::now();
    stdin.write_all(&line)?;
    while rchar()? < start + size + 1 {
        std::thread::sleep(Duration::from_micros(50));
    }
    let took = t0.elapsed();
    drop(stdin);
    ensure!(big.wait()?.success(), "downstream failed");
    ensure!(cat.wait()?.success(), "cat failed");
    Ok(took)
}

fn status_kb(pid: u32, key: &str) -> anyhow::Result<u64> {
    let s = std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("status"))?;
    proc_field(&s, key).with_context(|| format!("no {key} for pid {pid}"))
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
