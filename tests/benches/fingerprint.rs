//! Target fingerprint benchmark for the real `tc-shim` and `tcd` (see docs/BENCHMARKS.md,
//! "Fingerprints").
//!
//! Run with `cargo build --release -p tc-shim -p tcd && cargo bench -p tc-tests --bench
//! fingerprint`.
//!
//! It generates trees of small files (`TC_BENCH_SIZES`, default `20000,100000`; files of
//! ~150 bytes, 100 per folder) under a temp dir (`TC_BENCH_DIR`, default /tmp), each a
//! git work tree with every file committed (its git dir beside the tree, so the tree
//! walk does not see it), waits past the shim's racy window, and measures in one run:
//!
//! 1. through `tc-shim serve` (in front of this executable as a minimal MCP server, with
//!    the real `tcd`): a `tree` target (`glob = "*.md"`) and a `git` target on each tree.
//!    Raise = the gated call without a token; redeem = the same call with a minted token.
//!    The fingerprint's own time is the shim's `elapsed_us` (its debug log); the calls'
//!    round trips are printed too. Cold = the first raise of a fresh shim (empty stat
//!    cache; the OS page cache is warm, as for the baselines); warm = later raises and
//!    redeems in the same shim;
//! 2. baselines on the same tree: `git status --porcelain` (warm, after one untimed run)
//!    and reading and SHA-256-hashing every file single-threaded in sorted order;
//! 3. the shim's peak RSS (`VmHWM`) after each size.
//!
//! Timings are printed, never asserted. The generated trees are removed at the end.
//! Knobs: `TC_BENCH_SIZES`, `TC_BENCH_WARM` (warm pairs, default 5), `TC_BENCH_COLD`
//! (fresh shims, default 3), `TC_SHIM_BIN`, `TCD_BIN`, `TC_BENCH_DIR`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tc_proto::v1::{confirm_client::ConfirmClient, MintRequest};
use tc_tests::bench::{
    env_usize, main_with_roles, proc_field, raised_binding, release_binary, serve_stdio, Answer,
    Peer, ROLE_ENV,
};
use tc_tests::{Daemon, DaemonOpts};

fn main() -> anyhow::Result<()> {
    main_with_roles(&[("server", role_server)], bench)
}

/// A minimal MCP server: tools `sync {dir}` and `commit {repo}`, answering "ok".
fn role_server() -> anyhow::Result<()> {
    let schema = |arg: &str| json!({"type": "object", "properties": {arg: {"type": "string"}}});
    serve_stdio("tc-bench-fp", "2025-06-18", |method, _, _| {
        Ok(Answer::Result(match method {
            "tools/list" => json!({"tools": [
                {"name": "sync", "inputSchema": schema("dir")},
                {"name": "commit", "inputSchema": schema("repo")},
            ]}),
            "tools/call" => json!({"content": [{"type": "text", "text": "ok"}]}),
            _ => json!({}),
        }))
    })
}

fn bench() -> anyhow::Result<()> {
    let sizes: Vec<usize> = std::env::var("TC_BENCH_SIZES")
        .unwrap_or_else(|_| "20000,100000".into())
        .split(',')
        .map(|s| s.trim().parse().context("TC_BENCH_SIZES"))
        .collect::<Result<_, _>>()?;
    let warm_n = env_usize("TC_BENCH_WARM", 5)?.max(1);
    let cold_n = env_usize("TC_BENCH_COLD", 3)?.max(1);
    let shim = release_binary("tc-shim", "tc-shim", "fingerprint", "TC_SHIM_BIN")?;
    let tcd = release_binary("tcd", "tcd", "fingerprint", "TCD_BIN")?;
    let base = std::env::var_os("TC_BENCH_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
    let tmp = tempfile::Builder::new()
        .prefix("tc-bench-fp-")
        .tempdir_in(&base)?;
    let root = tmp.path().to_path_buf();
    println!(
        "tc-shim: {}\ntcd:     {}\ndir:     {}",
        shim.display(),
        tcd.display(),
        root.display()
    );
    println!(
        "cores:   {}",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );

    for &n in &sizes {
        let t = Instant::now();
        generate(&root.join(format!("t{n}")), n)?;
        println!(
            "generated t{n} ({n} files, committed) in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    // Past the racy window: younger files are never served from the cache.
    std::thread::sleep(Duration::from_millis(2500));

    let config = root.join("config.toml");
    let me = std::env::current_exe()?;
    std::fs::write(
        &config,
        format!(
            "[daemon]\n{}\n[[vaults]]\nid = \"bench\"\nroot = \"{}\"\ncommand = [\"{}\"]\n\
             max_target_files = 4000000\n\
             [[vaults.gates]]\ntool = \"sync\"\ntargets = {{ tree = {{ root = \"dir\", glob = \"*.md\" }} }}\n\
             [[vaults.gates]]\ntool = \"commit\"\ntargets = {{ git = \"repo\" }}\n",
            tc_tests::UNLIMITED_RATE,
            root.display(),
            me.display()
        ),
    )?;
    let mut daemon = Daemon::prepared_in(&root, config.clone(), DaemonOpts::default());
    daemon.program(tcd);
    daemon.start_again();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let ctx = Ctx {
        shim,
        config,
        socket: daemon.socket.clone(),
        rt,
        root: root.clone(),
    };

    println!("\nall times: median of the samples (ms); fp = the shim's fingerprint time");
    for &n in &sizes {
        let dir = root.join(format!("t{n}"));
        let bytes = read_and_hash(&dir)?; // untimed warm-up of the page cache
        let rh = median(
            (0..3)
                .map(|_| timed(|| read_and_hash(&dir)).map(|d| d.0))
                .collect::<Result<_, _>>()?,
        );
        git_status(&dir)?;
        let gs = median(
            (0..5)
                .map(|_| timed(|| git_status(&dir)).map(|d| d.0))
                .collect::<Result<_, _>>()?,
        );
        println!("\n== {n} files ({:.1} MB)", bytes.1 as f64 / 1e6);
        println!("  git status --porcelain (warm):          {:>9.1}", ms(gs));
        println!("  read+SHA-256 every file, 1 thread:      {:>9.1}", ms(rh));
        for (tool, arg) in [("sync", "dir"), ("commit", "repo")] {
            let args = json!({ arg: format!("t{n}") });
            let r = ctx.measure(tool, &args, cold_n, warm_n)?;
            println!("  {tool:6} ({}) cold raise fp {:>9.1}   warm raise fp {:>8.1}   warm redeem fp {:>8.1}",
                if tool == "sync" { "tree" } else { "git " }, ms(r.cold), ms(r.warm_raise), ms(r.warm_redeem));
            println!("           cold raise call {:>7.1}   warm raise call {:>6.1}   warm redeem call {:>6.1}   shim VmHWM {} kB",
                ms(r.cold_call), ms(r.raise_call), ms(r.redeem_call), r.hwm_kb);
            if tool == "sync" {
                println!("           warm / git status: {:.2}x (target <= 2)   cold / read+hash: {:.2}x (target <= 1.2)",
                    r.warm_raise.max(r.warm_redeem).as_secs_f64() / gs.as_secs_f64(),
                    r.cold.as_secs_f64() / rh.as_secs_f64());
            } else {
                println!(
                    "           git target / git status: {:.2}x",
                    r.warm_raise.as_secs_f64() / gs.as_secs_f64()
                );
            }
        }
    }
    daemon.stop();
    drop(ctx);
    tmp.close()?;
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn timed<T>(f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<(Duration, T)> {
    let t = Instant::now();
    let r = f()?;
    Ok((t.elapsed(), r))
}

/// `n` files of ~150 bytes, 100 per folder, under `dir`, all committed to a git dir
/// beside it (`dir.git`, named by a `.git` file).
fn generate(dir: &Path, n: usize) -> anyhow::Result<()> {
    for i in 0..n {
        let d = dir.join(format!("d{:05}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&d)?;
        }
        let body = format!(
            "# note {i}\n\nsee [[note {}]] and [[note {}]]\n{}\n",
            i / 2,
            i / 3,
            "lorem ipsum ".repeat(8)
        );
        std::fs::write(d.join(format!("n{i:07}.md")), body)?;
    }
    let gd = dir.with_extension("git");
    run(Command::new("git")
        .args(["init", "-q", "--separate-git-dir"])
        .arg(&gd)
        .arg(dir))?;
    run(git(dir).args(["add", "-A"]))?;
    run(git(dir).args([
        "-c",
        "user.name=b",
        "-c",
        "user.email=b@b",
        "commit",
        "-qm",
        "tree",
    ]))?;
    Ok(())
}

fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.arg("-C").arg(dir);
    c
}

fn run(c: &mut Command) -> anyhow::Result<String> {
    let out = c.output().with_context(|| format!("{c:?}"))?;
    ensure!(
        out.status.success(),
        "{c:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn git_status(dir: &Path) -> anyhow::Result<()> {
    let out = run(git(dir).args(["status", "--porcelain"]))?;
    ensure!(out.is_empty(), "the tree is not clean: {out}");
    Ok(())
}

/// Reads and hashes every file under `dir` (sorted, one thread): (files, bytes).
fn read_and_hash(dir: &Path) -> anyhow::Result<(usize, u64)> {
    let (mut files, mut bytes) = (0, 0u64);
    let mut stack = vec![dir.to_path_buf()];
    let mut buf = vec![0u8; 64 << 10];
    let mut all = Sha256::new();
    while let Some(d) = stack.pop() {
        let mut ents: Vec<_> = std::fs::read_dir(&d)?.collect::<Result<_, _>>()?;
        ents.sort_by_key(|e| e.file_name());
        for e in ents.into_iter().rev() {
            let ft = e.file_type()?;
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() && e.path().extension().is_some_and(|x| x == "md") {
                let mut f = std::fs::File::open(e.path())?;
                let mut h = Sha256::new();
                loop {
                    let k = f.read(&mut buf)?;
                    if k == 0 {
                        break;
                    }
                    h.update(&buf[..k]);
                    bytes += k as u64;
                }
                all.update(h.finalize());
                files += 1;
            }
        }
    }
    std::hint::black_box(all.finalize());
    Ok((files, bytes))
}

struct Ctx {
    shim: PathBuf,
    config: PathBuf,
    socket: PathBuf,
    rt: tokio::runtime::Runtime,
    root: PathBuf,
}

struct Measured {
    cold: Duration,
    cold_call: Duration,
    warm_raise: Duration,
    warm_redeem: Duration,
    raise_call: Duration,
    redeem_call: Duration,
    hwm_kb: u64,
}

/// A running shim and its log of fingerprint times.
struct Shim {
    peer: Peer,
    log: PathBuf,
    seen: usize,
    next: u64,
}

impl Ctx {
    fn start(&self) -> anyhow::Result<Shim> {
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let k = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = self.root.join(format!("shim-{k}.log"));
        let mut c = Command::new("sh");
        c.args(["-c", "log=$1; shift; exec \"$@\" 2>>\"$log\"", "sh"])
            .arg(&log)
            .arg(&self.shim)
            .args(["serve", "bench", "--config"])
            .arg(&self.config)
            .arg("--socket")
            .arg(&self.socket)
            .env("TC_LOG", "warn,tc_shim::engine::judge::targets=debug")
            .env(ROLE_ENV, "server");
        let mut peer = Peer::spawn(c)?;
        peer.request(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"}}}),
        )?;
        peer.notify(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(Shim {
            peer,
            log,
            seen: 0,
            next: 1,
        })
    }

    fn measure(
        &self,
        tool: &str,
        args: &Value,
        cold_n: usize,
        warm_n: usize,
    ) -> anyhow::Result<Measured> {
        let (mut cold, mut cold_call, mut wr, mut wd, mut rc, mut dc) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        let mut hwm_kb = 0;
        for k in 0..cold_n {
            let mut s = self.start()?;
            let (call, r) = timed(|| s.call(tool, args.clone()))?;
            cold.push(s.fp_time()?);
            cold_call.push(call);
            if k == 0 {
                for _ in 0..warm_n {
                    let (call, r) = timed(|| s.call(tool, args.clone()))?;
                    wr.push(s.fp_time()?);
                    rc.push(call);
                    let token = self.mint(&r)?;
                    let mut with = args.clone();
                    with["elicit_token"] = json!(token);
                    let (call, done) = timed(|| s.call(tool, with))?;
                    ensure!(done["result"]["isError"] != true, "redeem refused: {done}");
                    wd.push(s.fp_time()?);
                    dc.push(call);
                }
            }
            let _ = r;
            let status = std::fs::read_to_string(format!("/proc/{}/status", s.peer.pid()))?;
            hwm_kb = hwm_kb.max(proc_field(&status, "VmHWM").unwrap_or(0));
            s.peer.finish()?;
        }
        Ok(Measured {
            cold: median(cold),
            cold_call: median(cold_call),
            warm_raise: median(wr),
            warm_redeem: median(wd),
            raise_call: median(rc),
            redeem_call: median(dc),
            hwm_kb,
        })
    }

    fn mint(&self, r: &Value) -> anyhow::Result<String> {
        let res = &r["result"];
        let refusal = match &res["_meta"]["tc/refusal"] {
            m if m.is_object() => m,
            _ => &res["structuredContent"],
        };
        ensure!(refusal["code"] == "elicit_required", "not a raise: {r}");
        let (binding, fp) = raised_binding(&refusal["details"]).with_context(|| format!("{r}"))?;
        self.rt.block_on(async {
            let mut c = ConfirmClient::new(tc_proto::connect(&self.socket).await?);
            let t = c
                .mint(MintRequest {
                    binding: Some(binding),
                    state_fp: Some(fp),
                    ..Default::default()
                })
                .await?;
            Ok(t.into_inner().token)
        })
    }
}

impl Shim {
    fn call(&mut self, tool: &str, args: Value) -> anyhow::Result<Value> {
        self.next += 1;
        self.peer.request(
            &json!({"jsonrpc": "2.0", "id": self.next, "method": "tools/call",
            "params": {"name": tool, "arguments": args}}),
        )
    }

    /// The next fingerprint time the shim logged.
    fn fp_time(&mut self) -> anyhow::Result<Duration> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            let times: Vec<u64> = text
                .lines()
                .filter(|l| l.contains("state fingerprint"))
                .filter_map(|l| {
                    l.split("elapsed_us=")
                        .nth(1)?
                        .split(' ')
                        .next()?
                        .trim()
                        .parse()
                        .ok()
                })
                .collect();
            if let Some(&us) = times.get(self.seen) {
                self.seen += 1;
                return Ok(Duration::from_micros(us));
            }
            ensure!(
                Instant::now() < deadline,
                "no fingerprint logged in {}",
                self.log.display()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
