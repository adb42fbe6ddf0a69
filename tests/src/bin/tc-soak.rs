//! Load soak driver: N real tc-shim processes in front of a fixture downstream, each
//! with W concurrent workers making gated (CLI route: refused, minted, redeemed) and
//! ungated calls against a running `tcd`, then every confirmation checked end to end.
//!
//! `tc-soak drive --socket S --shim BIN --dir D [--shims N] [--workers W] [--seconds T]
//! [--tcd-pid P] [--samples K]`: writes `D/soak.toml`, runs the load for T seconds,
//! prints one JSON summary line on stdout and exits 1 if any confirmation was lost,
//! forwarded twice, or disagrees with the daemon's event log.
//! `tc-soak server LOG` (run by the shims): a minimal MCP server on stdio with a
//! read-only `echo {text}` and a `destructiveHint` `write {id, text}` that appends `id`
//! to LOG (one `write(2)` per call) and answers with the arguments it received.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use serde_json::{json, Value};
use tc_proto::v1;
use tc_proto::v1::confirm_client::ConfirmClient;

const VAULT: &str = "soak";

fn main() -> anyhow::Result<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    match a.first().map(String::as_str) {
        Some("server") => server(Path::new(a.get(1).context("server LOG")?)),
        Some("drive") => {
            let ok = drive(Opts::parse(&a[1..])?)?;
            std::process::exit(if ok { 0 } else { 1 });
        }
        _ => bail!("usage: tc-soak drive … | tc-soak server LOG"),
    }
}

// ---------------------------------------------------------------- the fixture server

fn server(log: &Path) -> anyhow::Result<()> {
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let mut out = BufWriter::new(std::io::stdout().lock());
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Some(id) = msg.get("id").cloned() else {
            continue;
        };
        let result = match msg.get("method").and_then(Value::as_str) {
            Some("initialize") => json!({
                "protocolVersion": msg.pointer("/params/protocolVersion").cloned()
                    .unwrap_or_else(|| json!("2025-11-25")),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "tc-soak", "version": "0"}
            }),
            Some("tools/list") => json!({"tools": [
                {"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
                 "annotations": {"readOnlyHint": true}},
                {"name": "write", "inputSchema": {"type": "object",
                    "properties": {"id": {"type": "string"}, "text": {"type": "string"}}},
                 "annotations": {"destructiveHint": true}},
            ]}),
            Some("tools/call") => {
                let name = msg.pointer("/params/name").and_then(Value::as_str);
                let args = msg
                    .pointer("/params/arguments")
                    .cloned()
                    .unwrap_or(Value::Null);
                let text = match name {
                    Some("echo") => args["text"].as_str().unwrap_or("").to_string(),
                    Some("write") => {
                        // The ground truth of what ran: one line per forwarded write.
                        let rec = format!("{}\n", args["id"].as_str().unwrap_or("?"));
                        log.write_all(rec.as_bytes())?;
                        args.to_string()
                    }
                    _ => "unknown tool".into(),
                };
                json!({"content": [{"type": "text", "text": text}]})
            }
            Some("ping") => json!({}),
            Some(_) => {
                writeln!(
                    out,
                    "{}",
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no such method"}})
                )?;
                out.flush()?;
                continue;
            }
            None => continue,
        };
        writeln!(
            out,
            "{}",
            json!({"jsonrpc": "2.0", "id": id, "result": result})
        )?;
        out.flush()?;
    }
    Ok(())
}

// ---------------------------------------------------------------- the driver

struct Opts {
    socket: PathBuf,
    shim: PathBuf,
    dir: PathBuf,
    shims: usize,
    workers: usize,
    seconds: f64,
    tcd_pid: Option<u32>,
    samples: usize,
}

impl Opts {
    fn parse(a: &[String]) -> anyhow::Result<Opts> {
        let mut m = HashMap::new();
        for pair in a.chunks(2) {
            ensure!(pair.len() == 2, "option {} needs a value", pair[0]);
            m.insert(
                pair[0].trim_start_matches("--").to_string(),
                pair[1].clone(),
            );
        }
        let get = |k: &str| {
            m.get(k)
                .cloned()
                .with_context(|| format!("--{k} is required"))
        };
        let num = |k: &str, d: f64| -> anyhow::Result<f64> {
            m.get(k).map_or(Ok(d), |v| v.parse().context(k.to_string()))
        };
        Ok(Opts {
            socket: get("socket")?.into(),
            shim: get("shim")?.into(),
            dir: get("dir")?.into(),
            shims: num("shims", 8.0)? as usize,
            workers: num("workers", 8.0)? as usize,
            seconds: num("seconds", 10.0)?,
            tcd_pid: m.get("tcd-pid").map(|v| v.parse()).transpose()?,
            samples: num("samples", 3.0)?.max(2.0) as usize,
        })
    }
}

/// One tc-shim process and the routing of its answers to the waiting workers.
struct Shim {
    child: Mutex<Child>,
    stdin: Mutex<Option<BufWriter<ChildStdin>>>,
    waiting: Arc<Mutex<HashMap<u64, mpsc::Sender<Value>>>>,
    next_id: AtomicU64,
    log: PathBuf,
}

impl Shim {
    fn start(o: &Opts, me: &Path, config: &Path, i: usize) -> anyhow::Result<Arc<Shim>> {
        let log = o.dir.join(format!("server-{i}.log"));
        let mut child = Command::new(&o.shim)
            .arg("serve")
            .arg(VAULT)
            .arg("--config")
            .arg(config)
            .arg("--socket")
            .arg(&o.socket)
            .arg("--")
            .arg(me)
            .arg("server")
            .arg(&log)
            .env("TC_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("spawn {}", o.shim.display()))?;
        let stdin = BufWriter::new(child.stdin.take().context("stdin")?);
        let stdout = child.stdout.take().context("stdout")?;
        let waiting: Arc<Mutex<HashMap<u64, mpsc::Sender<Value>>>> = Arc::default();
        let w = waiting.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    eprintln!("tc-soak: not JSON from tc-shim: {line:.200}");
                    continue;
                };
                let tx = v["id"]
                    .as_u64()
                    .and_then(|id| w.lock().unwrap().remove(&id));
                match tx {
                    Some(tx) => drop(tx.send(v)),
                    None => eprintln!("tc-soak: unexpected line from tc-shim: {line:.200}"),
                }
            }
        });
        Ok(Arc::new(Shim {
            child: Mutex::new(child),
            stdin: Mutex::new(Some(stdin)),
            waiting,
            next_id: AtomicU64::new(1),
            log,
        }))
    }

    fn pid(&self) -> u32 {
        self.child.lock().unwrap().id()
    }

    fn notify(&self, msg: &Value) -> anyhow::Result<()> {
        let mut g = self.stdin.lock().unwrap();
        let w = g.as_mut().context("stdin closed")?;
        writeln!(w, "{msg}")?;
        w.flush()?;
        Ok(())
    }

    /// Sends a request and waits (up to 60 s) for its answer.
    fn request(&self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        self.waiting.lock().unwrap().insert(id, tx);
        self.notify(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        rx.recv_timeout(Duration::from_secs(60))
            .with_context(|| format!("no answer to {method} #{id} within 60 s"))
    }

    fn call(&self, tool: &str, args: Value) -> anyhow::Result<Value> {
        let r = self.request("tools/call", json!({"name": tool, "arguments": args}))?;
        r.get("result")
            .cloned()
            .with_context(|| format!("tools/call {tool}: {r}"))
    }

    fn handshake(&self) -> anyhow::Result<()> {
        let r = self.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "tc-soak", "version": "0"}}),
        )?;
        ensure!(
            r.pointer("/result/protocolVersion").is_some(),
            "initialize: {r}"
        );
        self.notify(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        let r = self.request("tools/list", json!({}))?;
        let tools = r.pointer("/result/tools").and_then(Value::as_array);
        let write = tools.and_then(|t| t.iter().find(|t| t["name"] == "write"));
        ensure!(
            write.is_some_and(|w| w.pointer("/inputSchema/properties/elicit_token").is_some()),
            "tools/list: write is not advertised as gated: {r}"
        );
        Ok(())
    }
}

#[derive(Default)]
struct Counts {
    ungated: AtomicUsize,
    gated: AtomicUsize,
    reuse_refused: AtomicUsize,
    errors: Mutex<Vec<String>>,
    /// The id of every call whose token authorized a forwarded call, per shim.
    confirmed: Mutex<Vec<HashSet<String>>>,
    /// Their args_hash, as the shim reported it when it refused round 1.
    hashes: Mutex<HashSet<String>>,
}

impl Counts {
    fn error(&self, e: String) {
        let mut v = self.errors.lock().unwrap();
        if v.len() < 50 {
            v.push(e);
        }
    }
}

fn rss_kb(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn sample(at: f64, tcd: Option<u32>, shims: &[u32]) -> Value {
    json!({
        "at_s": (at * 10.0).round() / 10.0,
        "tcd_kb": tcd.and_then(rss_kb),
        "shims_kb": shims.iter().map(|p| rss_kb(*p)).collect::<Vec<_>>(),
    })
}

/// One gated call by the CLI route: refused, minted (as `tcctl elicit` would), called
/// again with the token; every `reuse`-th token is tried once more and must be spent.
fn gated(
    shim: &Shim,
    rt: &tokio::runtime::Handle,
    grpc: &ConfirmClient<tonic::transport::Channel>,
    id: &str,
    reuse: bool,
) -> anyhow::Result<(String, bool)> {
    let args = json!({"id": id, "text": format!("payload of {id}")});
    let r1 = shim.call("write", args.clone())?;
    ensure!(
        r1.pointer("/structuredContent/code") == Some(&json!("elicit_required")),
        "round 1 of {id}: {r1}"
    );
    let d = &r1["structuredContent"]["details"];
    let f = |k: &str| {
        d[k].as_str()
            .map(String::from)
            .with_context(|| format!("details.{k}: {r1}"))
    };
    let args_hash = f("args_hash")?;
    let binding = v1::Binding {
        vault: f("vault")?,
        tool: f("tool")?,
        caller: f("caller")?,
        args_hash: f("args_hash")?,
    };
    let fp = f("state_fp")?;
    let mut c = grpc.clone();
    let token = rt
        .block_on(c.mint(v1::MintRequest {
            binding: Some(binding),
            state_fp: Some(fp),
            ..Default::default()
        }))
        .with_context(|| format!("mint for {id}"))?
        .into_inner()
        .token;
    let mut with = args.clone();
    with["elicit_token"] = json!(token);
    let r2 = shim.call("write", with.clone())?;
    let forwarded = r2.pointer("/content/0/text").and_then(Value::as_str);
    let ok = r2["isError"] != true && forwarded == Some(&args.to_string());
    ensure!(
        ok,
        "round 2 of {id} did not run exactly the approved call: {r2}"
    );
    let mut refused = false;
    if reuse {
        let r3 = shim.call("write", with)?;
        ensure!(
            r3.pointer("/structuredContent/details/reason") == Some(&json!("spent")),
            "a reused token for {id} was not refused as spent: {r3}"
        );
        refused = true;
    }
    Ok((args_hash, refused))
}

fn drive(o: Opts) -> anyhow::Result<bool> {
    std::fs::create_dir_all(&o.dir)?;
    let root = o.dir.join("root");
    std::fs::create_dir_all(&root)?;
    let config = o.dir.join("soak.toml");
    std::fs::write(
        &config,
        format!(
            "[[vaults]]\nid = \"{VAULT}\"\nroot = {}\n\n[[vaults.gates]]\ntool = \"write\"\ntargets = \"none\"\n",
            serde_json::to_string(&root.display().to_string())?
        ),
    )?;
    let me = std::env::current_exe()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let grpc = ConfirmClient::new(rt.block_on(tc_proto::connect(&o.socket))?);
    let mut shims = Vec::new();
    for i in 0..o.shims {
        let s = Shim::start(&o, &me, &config, i)?;
        s.handshake()?;
        shims.push(s);
    }
    let pids: Vec<u32> = shims.iter().map(|s| s.pid()).collect();
    let counts = Arc::new(Counts {
        confirmed: Mutex::new(vec![HashSet::new(); o.shims]),
        ..Default::default()
    });
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(o.seconds);
    let mut rss = vec![sample(0.0, o.tcd_pid, &pids)];
    let mut workers = Vec::new();
    for (si, shim) in shims.iter().enumerate() {
        for w in 0..o.workers {
            let (shim, counts, grpc) = (shim.clone(), counts.clone(), grpc.clone());
            let rt = rt.handle().clone();
            workers.push(std::thread::spawn(move || {
                let (mut n, mut g) = (0u64, 0u64);
                while Instant::now() < deadline {
                    n += 1;
                    // Alternate, with the phase shifted per worker so both kinds overlap.
                    if (n + w as u64).is_multiple_of(2) {
                        let text = format!("s{si}w{w}n{n}");
                        match shim.call("echo", json!({"text": text})) {
                            Ok(r) if r.pointer("/content/0/text") == Some(&json!(text)) => {
                                counts.ungated.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(r) => counts.error(format!("echo {text}: {r}")),
                            Err(e) => {
                                counts.error(format!("echo {text}: {e:#}"));
                                return;
                            }
                        }
                    } else {
                        let id = format!("s{si}w{w}n{n}");
                        g += 1;
                        match gated(&shim, &rt, &grpc, &id, g % 16 == 1) {
                            Ok((hash, refused)) => {
                                counts.hashes.lock().unwrap().insert(hash);
                                counts.gated.fetch_add(1, Ordering::Relaxed);
                                counts
                                    .reuse_refused
                                    .fetch_add(usize::from(refused), Ordering::Relaxed);
                                counts.confirmed.lock().unwrap()[si].insert(id);
                            }
                            Err(e) => {
                                counts.error(format!("{e:#}"));
                                return;
                            }
                        }
                    }
                }
            }));
        }
    }
    // RSS at evenly spaced moments of the run (the first was taken before the load).
    for k in 1..o.samples {
        let at = Duration::from_secs_f64(o.seconds * k as f64 / (o.samples - 1) as f64);
        let now = started.elapsed();
        if at > now {
            std::thread::sleep(at - now);
        }
        rss.push(sample(started.elapsed().as_secs_f64(), o.tcd_pid, &pids));
    }
    for w in workers {
        let _ = w.join();
    }
    let wall = started.elapsed().as_secs_f64();
    // Every shim sees EOF and exits with its server; their logs are then complete.
    for s in &shims {
        s.stdin.lock().unwrap().take();
        let _ = s.child.lock().unwrap().wait();
    }

    let gated_n = counts.gated.load(Ordering::Relaxed);
    let ungated_n = counts.ungated.load(Ordering::Relaxed);
    let confirmed = std::mem::take(&mut *counts.confirmed.lock().unwrap());
    let mut problems: Vec<String> = counts.errors.lock().unwrap().clone();
    // Downstream ground truth: each confirmed id ran exactly once, nothing else ran.
    let mut forwarded = 0usize;
    let mut lost = 0usize;
    let mut twice = 0usize;
    for (si, s) in shims.iter().enumerate() {
        let mut seen: HashMap<String, usize> = HashMap::new();
        for l in std::fs::read_to_string(&s.log).unwrap_or_default().lines() {
            *seen.entry(l.to_string()).or_default() += 1;
            forwarded += 1;
        }
        for id in &confirmed[si] {
            match seen.get(id) {
                None => lost += 1,
                Some(1) => {}
                Some(_) => twice += 1,
            }
        }
        let unconfirmed = seen.keys().filter(|k| !confirmed[si].contains(*k)).count();
        if unconfirmed > 0 {
            problems.push(format!(
                "shim {si}: {unconfirmed} forwarded writes no worker confirmed"
            ));
        }
    }
    // The daemon's log: per call exactly one raise, mint, redeem and consumed, nothing else.
    let want: HashSet<String> = std::mem::take(&mut *counts.hashes.lock().unwrap());
    if want.len() != gated_n {
        problems.push(format!(
            "{} distinct args_hash for {gated_n} calls",
            want.len()
        ));
    }
    let kinds = [
        "tc.elicit.requested",
        "tc.elicit.minted",
        "tc.elicit.redeemed",
        "tc.elicit.consumed",
    ];
    let settle = Instant::now() + Duration::from_secs(20);
    let (per_call, totals) = loop {
        let evs = rt.block_on(async {
            let mut c = grpc.clone();
            tc_tests::collect_events(tc_tests::event_stream(&mut c, false).await?).await
        })?;
        let mut per_call: HashMap<String, [usize; 4]> = HashMap::new();
        let mut totals: HashMap<String, usize> = HashMap::new();
        for e in evs {
            *totals.entry(e.kind.clone()).or_default() += 1;
            if let Some(k) = kinds.iter().position(|k| *k == e.kind) {
                per_call.entry(e.args_hash).or_default()[k] += 1;
            }
        }
        let settled = totals.get("tc.elicit.consumed").copied().unwrap_or(0) >= want.len();
        if settled || Instant::now() > settle {
            break (per_call, totals);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut log_mismatch = 0usize;
    for h in &want {
        if per_call.get(h) != Some(&[1, 1, 1, 1]) {
            log_mismatch += 1;
        }
    }
    let extra = per_call.keys().filter(|h| !want.contains(*h)).count();
    for bad in ["hitl_released", "tc.elicit.refused", "replay_drift"] {
        if let Some(n) = totals.get(bad) {
            problems.push(format!("the daemon logged {n} × {bad}"));
        }
    }
    if lost + twice + log_mismatch + extra > 0 {
        problems.push(format!(
            "lost {lost}, forwarded twice {twice}, calls whose daemon events are not exactly one \
             requested/minted/redeemed/consumed {log_mismatch}, events of unknown calls {extra}"
        ));
    }
    let summary = json!({
        "shims": o.shims,
        "workers_per_shim": o.workers,
        "seconds": (wall * 100.0).round() / 100.0,
        "gated": gated_n,
        "ungated": ungated_n,
        "reuse_refused": counts.reuse_refused.load(Ordering::Relaxed),
        "calls_per_s": ((gated_n + ungated_n) as f64 / wall).round(),
        "gated_per_s": (gated_n as f64 / wall).round(),
        "forwarded_writes": forwarded,
        "lost": lost,
        "forwarded_twice": twice,
        "log_mismatch": log_mismatch,
        "per_shim_gated": confirmed.iter().map(HashSet::len).collect::<Vec<_>>(),
        "events": totals,
        "rss": rss,
        "problems": problems,
    });
    println!("{summary}");
    Ok(summary["problems"].as_array().is_some_and(Vec::is_empty) && gated_n > 0 && ungated_n > 0)
}
