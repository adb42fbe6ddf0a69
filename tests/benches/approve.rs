//! Approve round-trip benchmark: what a gated call that the human approves costs in
//! `tc-shim` + `tcd` on each confirmation route, the human's own time excluded (see
//! docs/BENCHMARKS.md, section "Shim + daemon: approve round trip").
//!
//! Run with `cargo build --release -p tc-shim -p tcd && cargo bench -p tc-tests --bench approve`.
//!
//! It starts the real `target/release/tcd --ephemeral` on a socket in a temp dir under
//! `target/`, and real `target/release/tc-shim serve bench` processes in front of this
//! executable re-executed with `TC_BENCH_ROLE=server`: a minimal MCP server on blocking
//! stdio with a read-only `echo` and two `destructiveHint: true` tools that change
//! nothing (`write {path, content}`, gated with `targets = { paths = ["path"] }` on a
//! small file, and `send {to, text}`, gated with `targets = "none"`), so every call can
//! be approved again. Its answer to `write`/`send` repeats what it received, so the bench
//! checks that exactly the approved call, without tc's own fields, reached it.
//!
//! The bench process is the client (newline JSON-RPC on the shim's pipes) and the human,
//! who answers at once. Measured, interleaved in blocks, N sequential calls each after a
//! warm-up: (a) `echo` straight to the fixture server; (b) `echo` through tc-shim, on a
//! 2025-11-25 and on a 2026-07-28 connection; (c) the 2026-07-28 route (`tools/call` →
//! `input_required` → the call re-sent with `requestState` + `inputResponses` → result);
//! (d) the legacy route (`tools/call` → the shim's `elicitation/create` → instant accept
//! → result); (e) the CLI route (`tools/call` → `elicit_required`, gRPC `Mint` as the
//! operator's `tcctl elicit` would, the call again with `elicit_token` → result; the
//! two shim round trips and the mint are timed separately). (c)–(e) run for both tools.
//! For reference it also times the daemon RPCs the routes make (Status, Raise,
//! SealState, OpenState, Mint, Redeem, RecordConsumed) from the bench's own gRPC client.
//! And the CPU time (`/proc/<pid>/task/*/schedstat`) of each route's shim and of tcd
//! while that route ran, per iteration.
//!
//! Every answer is checked; a wrong one aborts the run. At the end the daemon's event
//! counters must show exactly one `tc.elicit.consumed` per approved call. Timings are
//! printed, never asserted.
//!
//! Knobs: `TC_BENCH_N` (timed iterations per route, default 500), `TC_BENCH_GAP_US`
//! (pause after each iteration, default 2000: lets the shim's trailing RecordConsumed
//! settle, as the seconds a human takes would), `TC_SHIM_BIN`, `TCD_BIN`.

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context};
use serde_json::{json, Value};
use tc_core::codes::events;
use tc_core::hash::{args_hash, is_sha256_hex, sha256_hex};
use tc_proto::v1::confirm_client::ConfirmClient;
use tc_proto::v1::{
    Binding, CountersRequest, MintRequest, OpenStateRequest, RaiseRequest, RecordConsumedRequest,
    RedeemRequest, SealStateRequest, StatusRequest,
};
use tc_tests::bench::{
    echo_tool, env_usize, line_of, main_with_roles, raised_binding, release_binary, serve_stdio,
    target_tempdir, us, Answer, Peer, Setup, Stats, ROLE_ENV,
};
use tc_tests::{Client, Daemon, DaemonOpts};

/// Selects what this executable does when re-executed.
/// Untimed iterations per route before the timed phase.
const WARMUP: usize = 20;
/// Timed blocks (routes interleaved per block).
const BLOCKS: usize = 10;
/// The vault in the config.
const VAULT: &str = "bench";
/// The file the `write` gate's target covers (never changed by the fixture).
const NOTE: &str = "note.txt";

// The 2026-07-28 wire keys, spelled out as any client would (not the shim's constants:
// the bench is an independent client of the protocol).
const MODERN: &str = "2026-07-28";
const LEGACY: &str = "2025-11-25";
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPS: &str = "io.modelcontextprotocol/clientCapabilities";

fn main() -> anyhow::Result<()> {
    main_with_roles(&[("server", role_server)], bench)
}

// ---------------------------------------------------------------- the fixture server

/// A minimal legacy-era MCP server on blocking stdio (`server/discover` is `-32601`, so
/// the shim does the `initialize` handshake itself for a 2026-07-28 client).
fn role_server() -> anyhow::Result<()> {
    serve_stdio("tc-bench-approve", LEGACY, |method, msg, _| {
        Ok(match method {
            "tools/list" => Answer::Result(json!({"tools": fixture_tools()})),
            "tools/call" => Answer::Result(fixture_call(msg.get("params").unwrap_or(&Value::Null))),
            "ping" => Answer::Result(json!({})),
            _ => Answer::NotFound,
        })
    })
}

fn fixture_tools() -> Value {
    let string = json!({"type": "string"});
    json!([
        echo_tool(),
        {"name": Tool::Write.name(), "description": "Pretends to write `content` to `path` (writes nothing).",
         "inputSchema": {"type": "object", "properties": {"path": string, "content": string},
                         "required": ["path", "content"]},
         "annotations": {"destructiveHint": true}},
        {"name": Tool::Send.name(), "description": "Pretends to send `text` to `to` (sends nothing).",
         "inputSchema": {"type": "object", "properties": {"to": string, "text": string},
                         "required": ["to", "text"]},
         "annotations": {"destructiveHint": true}},
    ])
}

/// `echo` echoes; `write`/`send` change nothing and report exactly what they received:
/// the tool, its arguments and any params keys besides `name`, `arguments`, `_meta`.
fn fixture_call(params: &Value) -> Value {
    let name = params.get("name").and_then(Value::as_str).unwrap_or("");
    let args = params
        .get("arguments")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let text = match name {
        "echo" => args.get("text").cloned().unwrap_or_else(|| json!("")),
        n if n == Tool::Write.name() || n == Tool::Send.name() => {
            let mut extra: Vec<&str> = params
                .as_object()
                .into_iter()
                .flat_map(|o| o.keys())
                .map(String::as_str)
                .filter(|k| !matches!(*k, "name" | "arguments" | "_meta"))
                .collect();
            extra.sort_unstable();
            json!(json!({"tool": name, "arguments": args, "extra": extra}).to_string())
        }
        _ => {
            return json!({"content": [{"type": "text", "text": format!("unknown tool {name:?}")}],
                          "isError": true})
        }
    };
    json!({"content": [{"type": "text", "text": text}], "isError": false})
}

// ---------------------------------------------------------------- the bench

fn bench() -> anyhow::Result<()> {
    let n = env_usize("TC_BENCH_N", 500)?;
    let gap = Duration::from_micros(env_usize("TC_BENCH_GAP_US", 2000)? as u64);
    ensure!(n >= BLOCKS, "TC_BENCH_N must be ≥ {BLOCKS}");
    let shim_bin = release_binary("tc-shim", "tc-shim", "approve", "TC_SHIM_BIN")?;
    let tcd_bin = release_binary("tcd", "tcd", "approve", "TCD_BIN")?;
    let tmp = target_tempdir(&shim_bin, "approve")?;
    let base = std::fs::canonicalize(tmp.path())?;
    let root = base.join("root");
    std::fs::create_dir_all(&root)?;
    std::fs::write(
        root.join(NOTE),
        "tc bench: the gate's target; never written\n",
    )?;
    let config = base.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[daemon]\n{}[[vaults]]\nid = \"{VAULT}\"\nroot = {}\nlegacy_elicitation_shim = true\n\n\
             [[vaults.gates]]\ntool = \"{}\"\ntargets = {{ paths = [\"path\"] }}\n\n\
             [[vaults.gates]]\ntool = \"{}\"\ntargets = \"none\"\n",
            tc_tests::UNLIMITED_RATE,
            toml_str(&root.display().to_string()),
            Tool::Write.name(),
            Tool::Send.name(),
        ),
    )?;
    let mut daemon = Daemon::prepared_in(
        &base,
        config.clone(),
        DaemonOpts {
            ephemeral: true,
            ..Default::default()
        },
    );
    daemon.program(tcd_bin.clone());
    daemon.start_again();
    let setup = Setup {
        me: std::env::current_exe()?,
        shim: shim_bin.clone(),
        config,
        socket: daemon.socket.clone(),
    };
    println!("tc-shim:    {}", shim_bin.display());
    println!("tcd:        {} --ephemeral", tcd_bin.display());
    println!(
        "tempdir:    {} (socket, daemon DB, vault root)",
        base.display()
    );
    println!("downstream: {} ({ROLE_ENV}=server)", setup.me.display());
    println!("N = {n} per route (+{WARMUP} warm-up), {BLOCKS} interleaved blocks, {} µs pause after each iteration", gap.as_micros());

    let rpc = Rpc::connect(&daemon)?;
    let mut direct = Echo::new("(a) direct: echo → fixture server", setup.direct()?, false);
    legacy_handshake(&mut direct.peer, json!({}), false)?;
    let mut ungated = Echo::new(
        "(b) tc-shim, ungated echo (2025-11-25)",
        shim(&setup)?,
        false,
    );
    legacy_handshake(&mut ungated.peer, json!({}), true)?;
    let mut ungated_m = Echo::new(
        "(b') tc-shim, ungated echo (2026-07-28)",
        shim(&setup)?,
        true,
    );
    modern_handshake(&mut ungated_m.peer)?;
    let mut modern = Vec::new();
    let mut legacy = Vec::new();
    let mut cli = Vec::new();
    for tool in [Tool::Write, Tool::Send] {
        let mut p = shim(&setup)?;
        modern_handshake(&mut p)?;
        modern.push(ModernRoute::new(tool, p));
        let mut p = shim(&setup)?;
        legacy_handshake(&mut p, json!({"elicitation": {}}), true)?;
        legacy.push(LegacyRoute::new(tool, p));
        let mut p = shim(&setup)?;
        legacy_handshake(&mut p, json!({}), true)?;
        cli.push(CliRoute::new(tool, p));
    }
    let mut reference = RpcRef::default();

    let shim_pids: Vec<Option<u32>> = {
        let mut v = vec![None, Some(ungated.peer.pid()), Some(ungated_m.peer.pid())];
        v.extend(modern.iter().map(|r| Some(r.peer.pid())));
        v.extend(legacy.iter().map(|r| Some(r.peer.pid())));
        v.extend(cli.iter().map(|r| Some(r.peer.pid())));
        v.push(None);
        v
    };
    // CPU time of tcd while each route ran (its trailing RecordConsumed included), and
    // of each route's own tc-shim over the timed phase: where the time is spent vs waited.
    let tcd_pid = daemon.pid();
    let mut tcd_ns = [0u64; SLOTS];
    let mut iteration = |timed: bool, count: usize| -> anyhow::Result<()> {
        macro_rules! each {
            ($slot:expr, $step:expr) => {{
                let before = if timed { cpu_ns(tcd_pid)? } else { 0 };
                for _ in 0..count {
                    $step?;
                    std::thread::sleep(gap);
                }
                if timed {
                    tcd_ns[$slot] += cpu_ns(tcd_pid)?.saturating_sub(before);
                }
            }};
        }
        each!(0, direct.step(timed));
        each!(1, ungated.step(timed));
        each!(2, ungated_m.step(timed));
        for (j, r) in modern.iter_mut().enumerate() {
            each!(3 + j, r.step(timed));
        }
        for (j, r) in legacy.iter_mut().enumerate() {
            each!(5 + j, r.step(timed));
        }
        for (j, r) in cli.iter_mut().enumerate() {
            each!(7 + j, r.step(&rpc, timed));
        }
        each!(9, reference.step(&rpc, timed));
        Ok(())
    };
    let started = Instant::now();
    iteration(false, WARMUP)?;
    let shim_before = shim_pids
        .iter()
        .map(|p| p.map(cpu_ns).transpose())
        .collect::<anyhow::Result<Vec<_>>>()?;
    let per_block = n / BLOCKS;
    for _ in 0..BLOCKS {
        iteration(true, per_block)?;
    }
    let wall = started.elapsed();
    let shim_ns = shim_pids
        .iter()
        .zip(&shim_before)
        .map(|(p, b)| match (p, b) {
            (Some(p), Some(b)) => cpu_ns(*p).map(|a| Some(a.saturating_sub(*b))),
            _ => Ok(None),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;

    // The audit log must show what the answers showed: every approved call ran once.
    let iters = (WARMUP + per_block * BLOCKS) as u64;
    let gated_routes = (modern.len() + legacy.len() + cli.len()) as u64;
    let want = [
        (events::CONSUMED, gated_routes * iters + 2 * iters),
        (events::REQUESTED, gated_routes * iters + 2 * iters),
        (events::MINTED, cli.len() as u64 * iters + iters),
        (events::REDEEMED, cli.len() as u64 * iters + iters),
    ];
    let counts = rpc.settled_counters(&want)?;
    for bad in [
        events::DECLINED,
        events::NOT_OBTAINED,
        events::REPLAY_DRIFT,
        events::REFUSED,
        events::RELEASED,
    ] {
        let c = counts.get(bad).copied().unwrap_or(0);
        ensure!(c == 0, "the daemon logged {c} × {bad} during the run");
    }

    // ---- report
    println!();
    println!(
        "{:<58} {:>5} {:>9} {:>9} {:>9}",
        "sequential round trips", "n", "p50 µs", "p99 µs", "mean µs"
    );
    let row = |name: &str, s: &[Duration]| {
        let st = Stats::of(s);
        println!(
            "{:<58} {:>5} {:>9.1} {:>9.1} {:>9.1}",
            name,
            s.len(),
            us(st.p50),
            us(st.p99),
            us(st.mean)
        );
    };
    row(direct.name, &direct.samples);
    row(ungated.name, &ungated.samples);
    row(ungated_m.name, &ungated_m.samples);
    for r in &modern {
        row(
            &format!("(c) 2026-07-28, {}: both rounds", r.tool.label()),
            &r.total,
        );
        row("      round 1: call → input_required", &r.r1);
        row("      round 2: call + inputResponses → result", &r.r2);
    }
    for r in &legacy {
        row(
            &format!("(d) legacy, {}: call → result", r.tool.label()),
            &r.total,
        );
        row("      call → elicitation/create", &r.to_prompt);
        row("      accept → result", &r.after_answer);
    }
    for r in &cli {
        row(
            &format!("(e) CLI, {}: round 1 + round 2", r.tool.label()),
            &r.total,
        );
        row("      round 1: call → elicit_required", &r.r1);
        row("      Mint RPC (operator, not the shim)", &r.mint);
        row("      round 2: call + elicit_token → result", &r.r2);
    }
    println!();
    println!(
        "{:<58} {:>5} {:>9} {:>9} {:>9}",
        "daemon RPCs from the bench's gRPC client", "n", "p50 µs", "p99 µs", "mean µs"
    );
    for (name, s) in RPC_NAMES.iter().zip(&reference.samples) {
        row(name, s);
    }

    let p50 = |s: &[Duration]| us(Stats::of(s).p50);
    let (a, b, bm) = (
        p50(&direct.samples),
        p50(&ungated.samples),
        p50(&ungated_m.samples),
    );
    let r = |k: usize| p50(&reference.samples[k]);
    // On the critical path of an approve (the RecordConsumed after the forward is not:
    // the client's result does not wait for it).
    let rpc_state = r(RAISE) + r(SEAL) + r(OPEN);
    let rpc_cli = r(RAISE) + r(REDEEM);
    println!();
    println!(
        "{:<40} {:>9} {:>9} {:>9} {:>12} {:>10} {:>9}",
        "added cost, p50 µs", "route", "− (b)", "− (a)", "daemon RPCs", "RPC share", "rest"
    );
    let added = |name: String, total: f64, base: f64, rpcs: f64| {
        println!(
            "{:<40} {:>9.1} {:>9.1} {:>9.1} {:>12.1} {:>9.0}% {:>9.1}",
            name,
            total,
            total - base,
            total - a,
            rpcs,
            100.0 * rpcs / (total - base),
            total - base - rpcs
        );
    };
    for m in &modern {
        let t = p50(&m.total);
        added(
            format!("(c) 2026-07-28, {}", m.tool.label()),
            t,
            b,
            rpc_state,
        );
        println!(
            "{:<40} {:>9} {:>9.1}   (over the ungated 2026-07-28 call)",
            "",
            "− (b')",
            t - bm
        );
    }
    for l in &legacy {
        added(
            format!("(d) legacy, {}", l.tool.label()),
            p50(&l.total),
            b,
            rpc_state,
        );
    }
    for c in &cli {
        added(
            format!("(e) CLI, {}, Mint excluded", c.tool.label()),
            p50(&c.total),
            b,
            rpc_cli,
        );
    }
    println!(
        "daemon RPCs = p50 sums from the table above: Raise + SealState + OpenState(consume) \
         for (c)/(d), Raise + Redeem for (e); RPC share = that sum ÷ (route − (b)); \
         rest = route − (b) − daemon RPCs"
    );
    println!(
        "p50 (b) − (a) = {:.1} µs (ungated proxying); Mint p50 (write) = {:.1} µs; \
         Status p50 = {:.1} µs (one bare RPC)",
        b - a,
        p50(&cli[0].mint),
        r(STATUS)
    );
    println!(
        "audit: {} tc.elicit.consumed for {} approved calls + {} reference RecordConsumed; \
         no declined/not_obtained/replay_drift/refused/released",
        counts.get(events::CONSUMED).copied().unwrap_or(0),
        gated_routes * iters,
        2 * iters
    );
    println!();
    println!(
        "{:<58} {:>12} {:>12}",
        "CPU per iteration, timed phase", "tc-shim µs", "tcd µs"
    );
    let labels = [
        "(a) direct".to_string(),
        "(b) ungated, 2025-11-25".into(),
        "(b') ungated, 2026-07-28".into(),
        format!("(c) 2026-07-28, {} (both rounds)", Tool::Write.label()),
        format!("(c) 2026-07-28, {} (both rounds)", Tool::Send.label()),
        format!("(d) legacy, {}", Tool::Write.label()),
        format!("(d) legacy, {}", Tool::Send.label()),
        format!(
            "(e) CLI, {} (both rounds; Mint is in tcd's)",
            Tool::Write.label()
        ),
        format!(
            "(e) CLI, {} (both rounds; Mint is in tcd's)",
            Tool::Send.label()
        ),
        "daemon RPC reference (8 RPCs)".into(),
    ];
    let timed_iters = (per_block * BLOCKS) as f64;
    for (k, label) in labels.iter().enumerate() {
        let shim = shim_ns[k]
            .map(|ns| format!("{:.1}", ns as f64 / 1e3 / timed_iters))
            .unwrap_or_else(|| "—".into());
        println!(
            "{:<58} {:>12} {:>12.1}",
            label,
            shim,
            tcd_ns[k] as f64 / 1e3 / timed_iters
        );
    }
    println!("(all threads, from /proc/<pid>/task/*/schedstat; tcd's while that route ran, its idle pauses included)");
    println!(
        "wall time of the measured loop: {:.1} s",
        wall.as_secs_f64()
    );

    for p in [direct.peer, ungated.peer, ungated_m.peer] {
        p.finish()?;
    }
    for p in modern
        .into_iter()
        .map(|r| r.peer)
        .chain(legacy.into_iter().map(|r| r.peer))
        .chain(cli.into_iter().map(|r| r.peer))
    {
        p.finish()?;
    }
    // Our connection first: an open connection that nobody polls (our runtime runs only
    // inside `block_on`) never acknowledges tcd's graceful-shutdown GOAWAY.
    drop(rpc);
    daemon.stop();
    Ok(())
}

/// A gated fixture tool.
#[derive(Clone, Copy)]
enum Tool {
    /// `targets = { paths = ["path"] }` on `note.txt`.
    Write,
    /// `targets = "none"`.
    Send,
}

impl Tool {
    fn name(self) -> &'static str {
        match self {
            Tool::Write => "write",
            Tool::Send => "send",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Tool::Write => "write (paths)",
            Tool::Send => "send (none)",
        }
    }

    /// Distinct arguments per iteration, so every call is its own binding.
    fn args(self, i: u64) -> Value {
        match self {
            Tool::Write => json!({"path": NOTE, "content": format!("v{i}")}),
            Tool::Send => json!({"to": "ops", "text": format!("message {i}")}),
        }
    }
}

/// The 2026-07-28 envelope of every modern request, with a form-capable client.
fn envelope() -> Value {
    json!({META_VERSION: MODERN, META_CAPS: {"elicitation": {}}})
}

fn call(id: u64, tool: &str, args: &Value, extra: Value) -> Value {
    let mut params = json!({"name": tool, "arguments": args});
    if let (Some(p), Some(x)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(x.clone());
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

/// Checks that `r` answers `id` with the approved call's result: the fixture got exactly
/// `tool` with `args`, none of tc's own fields.
fn check_approved(
    r: &Value,
    id: u64,
    tool: Tool,
    args: &Value,
    modern: bool,
) -> anyhow::Result<()> {
    ensure!(r["id"] == json!(id), "answer for another id: {r}");
    let res = r
        .get("result")
        .with_context(|| format!("error answer: {r}"))?;
    ensure!(
        res["isError"] == json!(false),
        "the approved call failed: {r}"
    );
    if modern {
        ensure!(
            res["resultType"] == "complete",
            "no resultType complete: {r}"
        );
    }
    let text = res
        .pointer("/content/0/text")
        .and_then(Value::as_str)
        .with_context(|| format!("no text content: {r}"))?;
    let seen: Value =
        serde_json::from_str(text).with_context(|| format!("bad fixture text {text:?}"))?;
    let want = json!({"tool": tool.name(), "arguments": args, "extra": []});
    ensure!(
        seen == want,
        "the downstream got {seen}, not the approved call {want}"
    );
    Ok(())
}

/// Checks our confirmation form (an `elicitation/create` params object) for `tool`.
fn check_form(params: &Value, tool: Tool, what: &str) -> anyhow::Result<()> {
    ensure!(
        params.pointer("/requestedSchema/properties/approve/type") == Some(&json!("boolean"))
            && params["mode"] == "form",
        "{what}: not the approve form: {params}"
    );
    let msg = params["message"].as_str().unwrap_or("");
    ensure!(
        msg.contains(&format!("`{}`", tool.name())) && msg.contains(&format!("`{VAULT}`")),
        "{what}: the message does not name the call: {msg:?}"
    );
    Ok(())
}

/// (a), (b), (b'): one `tools/call echo` round trip.
struct Echo {
    name: &'static str,
    peer: Peer,
    modern: bool,
    next: u64,
    samples: Vec<Duration>,
}

impl Echo {
    fn new(name: &'static str, peer: Peer, modern: bool) -> Echo {
        Echo {
            name,
            peer,
            modern,
            next: 1,
            samples: Vec::new(),
        }
    }

    fn step(&mut self, timed: bool) -> anyhow::Result<()> {
        let id = self.next;
        self.next += 1;
        let text = format!("hello {id}");
        let extra = if self.modern {
            json!({"_meta": envelope()})
        } else {
            json!({})
        };
        let line = line_of(&call(id, "echo", &json!({"text": text}), extra))?;
        let t0 = Instant::now();
        self.peer.send(&line)?;
        let r = self.peer.recv()?;
        let dt = t0.elapsed();
        ensure!(
            r["id"] == json!(id)
                && r.pointer("/result/isError") == Some(&json!(false))
                && r.pointer("/result/content/0/text") == Some(&json!(text))
                && (!self.modern || r.pointer("/result/resultType") == Some(&json!("complete"))),
            "{}: unexpected answer {r}",
            self.name
        );
        if timed {
            self.samples.push(dt);
        }
        Ok(())
    }
}

/// (c): `tools/call` → `input_required`; re-sent with the state and the answer → result.
struct ModernRoute {
    tool: Tool,
    peer: Peer,
    next: u64,
    total: Vec<Duration>,
    r1: Vec<Duration>,
    r2: Vec<Duration>,
}

impl ModernRoute {
    fn new(tool: Tool, peer: Peer) -> Self {
        ModernRoute {
            tool,
            peer,
            next: 1,
            total: Vec::new(),
            r1: Vec::new(),
            r2: Vec::new(),
        }
    }

    fn step(&mut self, timed: bool) -> anyhow::Result<()> {
        let i = self.next;
        self.next += 1;
        let (id1, id2) = (2 * i, 2 * i + 1);
        let args = self.tool.args(i);
        let first = line_of(&call(
            id1,
            self.tool.name(),
            &args,
            json!({"_meta": envelope()}),
        ))?;
        let t0 = Instant::now();
        self.peer.send(&first)?;
        let a1 = self.peer.recv()?;
        let t1 = Instant::now();
        let state = a1
            .pointer("/result/requestState")
            .and_then(Value::as_str)
            .with_context(|| format!("round 1 of {}: no requestState in {a1}", self.tool.name()))?;
        let second = line_of(&call(
            id2,
            self.tool.name(),
            &args,
            json!({"_meta": envelope(), "requestState": state,
                   "inputResponses": {"confirm": {"action": "accept", "content": {"approve": true}}}}),
        ))?;
        let t2 = Instant::now();
        self.peer.send(&second)?;
        let a2 = self.peer.recv()?;
        let t3 = Instant::now();
        ensure!(
            a1["id"] == json!(id1)
                && a1.pointer("/result/resultType") == Some(&json!("input_required")),
            "round 1: not an input_required answer: {a1}"
        );
        let req = a1
            .pointer("/result/inputRequests/confirm")
            .with_context(|| format!("round 1: no inputRequests.confirm in {a1}"))?;
        ensure!(req["method"] == "elicitation/create", "round 1: {req}");
        check_form(&req["params"], self.tool, "round 1")?;
        check_approved(&a2, id2, self.tool, &args, true).context("round 2")?;
        if timed {
            self.r1.push(t1 - t0);
            self.r2.push(t3 - t2);
            self.total.push(t3 - t0);
        }
        Ok(())
    }
}

/// (d): `tools/call` → the shim's `elicitation/create` → instant accept → result.
struct LegacyRoute {
    tool: Tool,
    peer: Peer,
    next: u64,
    total: Vec<Duration>,
    to_prompt: Vec<Duration>,
    after_answer: Vec<Duration>,
}

impl LegacyRoute {
    fn new(tool: Tool, peer: Peer) -> Self {
        LegacyRoute {
            tool,
            peer,
            next: 1,
            total: Vec::new(),
            to_prompt: Vec::new(),
            after_answer: Vec::new(),
        }
    }

    fn step(&mut self, timed: bool) -> anyhow::Result<()> {
        let id = self.next;
        self.next += 1;
        let args = self.tool.args(id);
        let line = line_of(&call(id, self.tool.name(), &args, json!({})))?;
        let t0 = Instant::now();
        self.peer.send(&line)?;
        let prompt = self.peer.recv()?;
        let t1 = Instant::now();
        let rid = prompt
            .get("id")
            .filter(|r| !r.is_null() && prompt["method"] == "elicitation/create")
            .with_context(|| format!("expected the shim's elicitation/create, got {prompt}"))?;
        let answer = line_of(&json!({"jsonrpc": "2.0", "id": rid,
            "result": {"action": "accept", "content": {"approve": true}}}))?;
        let t2 = Instant::now();
        self.peer.send(&answer)?;
        let r = self.peer.recv()?;
        let t3 = Instant::now();
        ensure!(
            *rid != json!(id),
            "the prompt reused the call's id: {prompt}"
        );
        check_form(&prompt["params"], self.tool, "elicitation/create")?;
        check_approved(&r, id, self.tool, &args, false)?;
        if timed {
            self.to_prompt.push(t1 - t0);
            self.after_answer.push(t3 - t2);
            self.total.push(t3 - t0);
        }
        Ok(())
    }
}

/// (e): `tools/call` → `elicit_required`; Mint; the call with `elicit_token` → result.
struct CliRoute {
    tool: Tool,
    peer: Peer,
    next: u64,
    /// The target's fingerprint from the first round 1 (it never changes).
    state_fp: Option<String>,
    total: Vec<Duration>,
    r1: Vec<Duration>,
    mint: Vec<Duration>,
    r2: Vec<Duration>,
}

impl CliRoute {
    fn new(tool: Tool, peer: Peer) -> Self {
        CliRoute {
            tool,
            peer,
            next: 1,
            state_fp: None,
            total: Vec::new(),
            r1: Vec::new(),
            mint: Vec::new(),
            r2: Vec::new(),
        }
    }

    fn step(&mut self, rpc: &Rpc, timed: bool) -> anyhow::Result<()> {
        let i = self.next;
        self.next += 1;
        let (id1, id2) = (2 * i, 2 * i + 1);
        let name = self.tool.name();
        let args = self.tool.args(i);
        let first = line_of(&call(id1, name, &args, json!({})))?;
        let t0 = Instant::now();
        self.peer.send(&first)?;
        let a1 = self.peer.recv()?;
        let r1 = t0.elapsed();
        ensure!(
            a1["id"] == json!(id1)
                && a1.pointer("/result/isError") == Some(&json!(true))
                && a1.pointer("/result/structuredContent/code") == Some(&json!("elicit_required")),
            "round 1: not elicit_required: {a1}"
        );
        let d = &a1["result"]["structuredContent"]["details"];
        let (binding, fp) = raised_binding(d).context("round 1")?;
        ensure!(
            binding.vault == VAULT
                && binding.tool == name
                && binding.caller == tc_core::STDIO_CALLER
                && binding.args_hash == args_hash(name, &args)
                && is_sha256_hex(&fp),
            "round 1: wrong binding in {d}"
        );
        match &self.state_fp {
            Some(prev) => ensure!(*prev == fp, "the target of {name} changed: {prev} → {fp}"),
            None => self.state_fp = Some(fp.clone()),
        }
        let (token, mint) = rpc.timed("Mint", |mut c| async move {
            c.mint(MintRequest {
                binding: Some(binding),
                state_fp: Some(fp),
                ..Default::default()
            })
            .await
        })?;
        let mut with_token = args.clone();
        with_token["elicit_token"] = json!(token.token);
        let second = line_of(&call(id2, name, &with_token, json!({})))?;
        let t2 = Instant::now();
        self.peer.send(&second)?;
        let a2 = self.peer.recv()?;
        let r2 = t2.elapsed();
        check_approved(&a2, id2, self.tool, &args, false).context("round 2")?;
        if timed {
            self.r1.push(r1);
            self.mint.push(mint);
            self.r2.push(r2);
            self.total.push(r1 + r2);
        }
        Ok(())
    }
}

// Indices into [`RpcRef::samples`] and [`RPC_NAMES`].
const STATUS: usize = 0;
const RAISE: usize = 1;
const SEAL: usize = 2;
const OPEN: usize = 3;
const CONSUMED_STATE: usize = 4;
const MINT: usize = 5;
const REDEEM: usize = 6;
const CONSUMED_TOKEN: usize = 7;
const RPC_NAMES: [&str; 8] = [
    "Status (no write)",
    "Raise (commit)",
    "SealState (HMAC, no write)",
    "OpenState, consume (commit)",
    "RecordConsumed, request_state (commit)",
    "Mint (commit)",
    "Redeem (commit)",
    "RecordConsumed, cli_token (commit)",
];

/// The daemon RPCs of the routes, made by the bench itself, each timed alone.
#[derive(Default)]
struct RpcRef {
    next: u64,
    samples: [Vec<Duration>; 8],
}

impl RpcRef {
    fn step(&mut self, rpc: &Rpc, timed: bool) -> anyhow::Result<()> {
        let i = self.next;
        self.next += 1;
        let fp = sha256_hex(b"tc-bench-approve-reference");
        let b = |route: &str| Binding {
            vault: VAULT.into(),
            tool: Tool::Write.name().into(),
            caller: tc_core::STDIO_CALLER.into(),
            args_hash: sha256_hex(format!("tc-bench-approve-{route}-{i}").as_bytes()),
        };
        let (bs, bc) = (b("state"), b("cli"));
        let mut t = [Duration::ZERO; 8];
        let (st, d) = rpc.timed(
            "Status",
            |mut c| async move { c.status(StatusRequest {}).await },
        )?;
        ensure!(
            st.protocol == tc_proto::PROTOCOL,
            "daemon protocol {}",
            st.protocol
        );
        t[STATUS] = d;
        t[RAISE] = rpc.raise(&bs, &fp)?;
        let (seal, d) = {
            let (b, f) = (bs.clone(), fp.clone());
            rpc.timed("SealState", |mut c| async move {
                c.seal_state(SealStateRequest {
                    binding: Some(b),
                    state_fp: f,
                    inner: Vec::new(),
                })
                .await
            })?
        };
        ensure!(
            !seal.request_state.is_empty(),
            "SealState returned no state"
        );
        t[SEAL] = d;
        let (open, d) = {
            let (b, f) = (bs.clone(), fp.clone());
            rpc.timed("OpenState", |mut c| async move {
                c.open_state(OpenStateRequest {
                    request_state: seal.request_state,
                    binding: Some(b),
                    consume: true,
                    current_state_fp: f,
                })
                .await
            })?
        };
        ensure!(open.state_fp == fp, "OpenState returned {}", open.state_fp);
        t[OPEN] = d;
        t[CONSUMED_STATE] = rpc.consumed(&bs, &fp, "request_state", "")?;
        rpc.raise(&bc, &fp)?; // the same RPC as t[RAISE], for the CLI half
        let (mint, d) = {
            let (b, f) = (bc.clone(), fp.clone());
            rpc.timed("Mint", |mut c| async move {
                c.mint(MintRequest {
                    binding: Some(b),
                    state_fp: Some(f),
                    ..Default::default()
                })
                .await
            })?
        };
        t[MINT] = d;
        let (red, d) = {
            let (b, f) = (bc.clone(), fp.clone());
            rpc.timed("Redeem", |mut c| async move {
                c.redeem(RedeemRequest {
                    token: mint.token,
                    binding: Some(b),
                    current_state_fp: f,
                    ..Default::default()
                })
                .await
            })?
        };
        ensure!(
            !red.redemption_id.is_empty(),
            "Redeem returned no redemption id"
        );
        t[REDEEM] = d;
        t[CONSUMED_TOKEN] = rpc.consumed(&bc, &fp, "cli_token", &red.redemption_id)?;
        if timed {
            for (s, d) in self.samples.iter_mut().zip(t) {
                s.push(d);
            }
        }
        Ok(())
    }
}

/// The bench's own gRPC client of `tcd`, on a single-threaded runtime.
struct Rpc {
    rt: tokio::runtime::Runtime,
    client: Client,
}

impl Rpc {
    fn connect(d: &Daemon) -> anyhow::Result<Rpc> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let ch = rt
            .block_on(tc_proto::connect(&d.socket))
            .with_context(|| format!("connecting to tcd at {}", d.socket.display()))?;
        Ok(Rpc {
            rt,
            client: ConfirmClient::new(ch),
        })
    }

    /// Runs one RPC and times its round trip; a refusal is an error naming `what`.
    fn timed<T, F>(&self, what: &str, f: impl FnOnce(Client) -> F) -> anyhow::Result<(T, Duration)>
    where
        F: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let fut = f(self.client.clone());
        let (r, dt) = self.rt.block_on(async {
            let t0 = Instant::now();
            let r = fut.await;
            (r, t0.elapsed())
        });
        let r = r.map_err(|s| {
            anyhow!(
                "{what} refused: {} (reason {:?})",
                s.message(),
                tc_proto::reason(&s)
            )
        })?;
        Ok((r.into_inner(), dt))
    }

    fn raise(&self, b: &Binding, fp: &str) -> anyhow::Result<Duration> {
        let req = RaiseRequest {
            binding: Some(b.clone()),
            state_fp: fp.into(),
            summary: "tc bench reference".into(),
            ..Default::default()
        };
        Ok(self
            .timed("Raise", |mut c| async move { c.raise(req).await })?
            .1)
    }

    fn consumed(&self, b: &Binding, fp: &str, route: &str, rid: &str) -> anyhow::Result<Duration> {
        let req = RecordConsumedRequest {
            binding: Some(b.clone()),
            state_fp: fp.into(),
            route: route.into(),
            redemption_id: rid.into(),
        };
        Ok(self
            .timed("RecordConsumed", |mut c| async move {
                c.record_consumed(req).await
            })?
            .1)
    }

    /// The `tc_events_total` counters by event kind, once every `want` count is reached
    /// (the shim's RecordConsumed trails the answers), or after 10 s.
    fn settled_counters(&self, want: &[(&str, u64)]) -> anyhow::Result<HashMap<String, u64>> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (r, _) = self.timed("Counters", |mut c| async move {
                c.counters(CountersRequest {}).await
            })?;
            let counts: HashMap<String, u64> = r
                .counters
                .into_iter()
                .filter(|c| c.name == "tc_events_total")
                .filter_map(|c| {
                    let kind = c.labels.strip_prefix("kind=\"")?.strip_suffix('"')?;
                    Some((kind.to_string(), c.value))
                })
                .collect();
            let missing: Vec<String> = want
                .iter()
                .filter(|(k, n)| counts.get(*k).copied().unwrap_or(0) != *n)
                .map(|(k, n)| format!("{k}: {} (want {n})", counts.get(*k).copied().unwrap_or(0)))
                .collect();
            if missing.is_empty() {
                return Ok(counts);
            }
            if Instant::now() > deadline {
                bail!(
                    "the daemon's event counts do not match the calls made: {}",
                    missing.join(", ")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Routes, in the order [`bench`] runs and reports them.
const SLOTS: usize = 10;

/// CPU time (ns) summed over a process's live threads.
fn cpu_ns(pid: u32) -> anyhow::Result<u64> {
    let mut total = 0;
    let dir = format!("/proc/{pid}/task");
    for e in std::fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
        let Ok(sched) = std::fs::read_to_string(e?.path().join("schedstat")) else {
            continue; // the thread exited meanwhile
        };
        total += sched
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Ok(total)
}

/// tc-shim in front of the fixture server, its log at `warn`.
fn shim(setup: &Setup) -> anyhow::Result<Peer> {
    let mut c = setup.shim_cmd(VAULT);
    c.env("TC_LOG", "warn");
    Peer::spawn(c)
}

/// `initialize` (2025-11-25) with `caps`, `notifications/initialized`, `tools/list`.
fn legacy_handshake(peer: &mut Peer, caps: Value, shim: bool) -> anyhow::Result<()> {
    let r = peer.request(
        &json!({"jsonrpc": "2.0", "id": "init", "method": "initialize",
        "params": {"protocolVersion": LEGACY, "capabilities": caps,
                   "clientInfo": {"name": "tc-bench-approve", "version": "0"}}}),
    )?;
    ensure!(
        r.pointer("/result/protocolVersion") == Some(&json!(LEGACY)),
        "initialize: {r}"
    );
    peer.send(&line_of(
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )?)?;
    let r = peer.request(&json!({"jsonrpc": "2.0", "id": "list", "method": "tools/list"}))?;
    check_tools(&r, shim)
}

/// `server/discover` (2026-07-28), then `tools/list` with the envelope.
fn modern_handshake(peer: &mut Peer) -> anyhow::Result<()> {
    let r = peer.request(
        &json!({"jsonrpc": "2.0", "id": "discover", "method": "server/discover",
        "params": {"_meta": envelope()}}),
    )?;
    ensure!(
        r.pointer("/result/supportedVersions")
            .and_then(Value::as_array)
            .is_some_and(|v| v.contains(&json!(MODERN))),
        "server/discover: {r}"
    );
    let r = peer.request(
        &json!({"jsonrpc": "2.0", "id": "list", "method": "tools/list",
        "params": {"_meta": envelope()}}),
    )?;
    ensure!(
        r.pointer("/result/resultType") == Some(&json!("complete")),
        "tools/list: {r}"
    );
    check_tools(&r, true)
}

/// The fixture's three tools are listed; through the shim the gated two offer `elicit_token`.
fn check_tools(list: &Value, shim: bool) -> anyhow::Result<()> {
    let tools = list
        .pointer("/result/tools")
        .and_then(Value::as_array)
        .with_context(|| format!("tools/list: {list}"))?;
    for name in ["echo", Tool::Write.name(), Tool::Send.name()] {
        let t = tools
            .iter()
            .find(|t| t["name"] == name)
            .with_context(|| format!("tools/list lacks {name}: {list}"))?;
        let token = t.pointer("/inputSchema/properties/elicit_token").is_some();
        ensure!(
            token == (shim && name != "echo"),
            "tools/list: {name} has elicit_token = {token}: {t}"
        );
    }
    Ok(())
}

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}
