//! Redeem on each store (docs/BENCHMARKS.md, "Several replicas"): SQLite, PostgreSQL with
//! one replica, PostgreSQL with three, and the floor, a bare `BEGIN; INSERT; COMMIT` from
//! Rust (tokio-postgres) on the same server. One run each, same machine.
//!
//! Run with `cargo build --release -p tcd && cargo bench -p tc-tests --bench replicas`
//! (as root: the cluster runs as an unprivileged user, see tests/src/postgres.rs).
//!
//! Per store: sequential redeem latency (p50/p99, one client), then redeems/s with 16
//! concurrent clients spread over the replicas, and the CPU time tcd and PostgreSQL spent
//! per redeem in that phase (from /proc). Knobs: `TC_BENCH_N` (sequential samples,
//! default 1000), `TC_BENCH_CONC_TOTAL` (concurrent redeems, default 2400), `TCD_BIN`.
//! Redeemed calls are recorded as run between timed batches (untimed), which keeps the
//! raised requests under tcd's cap.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use tc_core::hash::sha256_hex;
use tc_proto::v1::{Binding, MintRequest, RecordConsumedRequest, RedeemRequest};
use tc_tests::bench::{env_usize, release_binary, target_tempdir, us, Stats};
use tc_tests::postgres::{key_file, replica_config, Cluster, PG_USER};
use tc_tests::{Client, Daemon, DaemonOpts};

const CLIENTS: usize = 16;

fn main() -> anyhow::Result<()> {
    let n = env_usize("TC_BENCH_N", 1000)?;
    let total = env_usize("TC_BENCH_CONC_TOTAL", 2400)?;
    let tcd = release_binary("tcd", "tcd", "replicas", "TCD_BIN")?;
    let tmp = target_tempdir(&tcd, "replicas")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let cluster = Cluster::start();
    println!(
        "tcd: {}; PostgreSQL on 127.0.0.1:{} (fsync on)",
        tcd.display(),
        cluster.port
    );
    rt.block_on(floor(&cluster, n))?;
    for (name, replicas) in [("sqlite", 0), ("postgres x1", 1), ("postgres x3", 3)] {
        let dir = tempfile::tempdir_in(tmp.path())?;
        let daemons = start(&tcd, dir.path(), &cluster, replicas)?;
        rt.block_on(measure(name, &daemons, n, total))?;
    }
    Ok(())
}

/// The floor: one `INSERT` in its own committed transaction, sequential, one connection.
async fn floor(cluster: &Cluster, n: usize) -> anyhow::Result<()> {
    let (client, conn) =
        tokio_postgres::connect(&cluster.url_with_password(), tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    client
        .batch_execute("CREATE TABLE IF NOT EXISTS floor (id BIGSERIAL PRIMARY KEY, v BIGINT)")
        .await?;
    let st = client.prepare("INSERT INTO floor (v) VALUES ($1)").await?;
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + 50 {
        let t = Instant::now();
        client.batch_execute("BEGIN").await?;
        client.execute(&st, &[&(i as i64)]).await?;
        client.batch_execute("COMMIT").await?;
        if i >= 50 {
            samples.push(t.elapsed());
        }
    }
    let s = Stats::of(&samples);
    println!(
        "floor (BEGIN; INSERT; COMMIT):  p50 {:>7.0} µs  p99 {:>7.0} µs",
        us(s.p50),
        us(s.p99)
    );
    Ok(())
}

/// `replicas` tcds on the cluster (0: one tcd on SQLite), each in its own directory.
fn start(
    tcd: &Path,
    dir: &Path,
    cluster: &Cluster,
    replicas: usize,
) -> anyhow::Result<Vec<Daemon>> {
    let key = key_file(dir, "ledger.key");
    let password = cluster.password_file(dir);
    if replicas > 0 {
        // A fresh ledger per store: drop what the previous one left.
        cluster.query("DROP SCHEMA public CASCADE; CREATE SCHEMA public AUTHORIZATION tc");
    }
    let mut out = Vec::new();
    for i in 0..replicas.max(1) {
        let base = dir.join(format!("r{i}"));
        std::fs::create_dir(&base)?;
        let config = base.join("config.toml");
        let text = if replicas == 0 {
            format!("[daemon]\n{}", tc_tests::UNLIMITED_RATE)
        } else {
            replica_config(cluster, &key, &password, "")
        };
        std::fs::write(&config, text)?;
        let mut d = Daemon::prepared_in(&base, config, DaemonOpts::default());
        d.program(tcd.to_path_buf());
        d.start_again();
        out.push(d);
    }
    Ok(out)
}

fn call(i: usize) -> Binding {
    Binding {
        vault: "bench".into(),
        tool: "t".into(),
        caller: "c".into(),
        args_hash: sha256_hex(format!("bench-{i}").as_bytes()),
    }
}

async fn mint_all(
    c: &mut Client,
    from: usize,
    n: usize,
    fp: &str,
) -> anyhow::Result<Vec<(String, Binding)>> {
    let mut out = Vec::with_capacity(n);
    for i in from..from + n {
        let b = call(i);
        tc_tests::raise_request(c, &b, fp, "b")
            .await
            .context("raise")?;
        let t = c
            .mint(MintRequest {
                binding: Some(b.clone()),
                ..Default::default()
            })
            .await
            .context("mint")?
            .into_inner()
            .token;
        out.push((t, b));
    }
    Ok(out)
}

async fn redeem(c: &mut Client, t: &(String, Binding), fp: &str) -> anyhow::Result<String> {
    let reply = c
        .redeem(RedeemRequest {
            token: t.0.clone(),
            binding: Some(t.1.clone()),
            current_state_fp: fp.into(),
            ..Default::default()
        })
        .await
        .context("redeem")?;
    Ok(reply.into_inner().redemption_id)
}

/// Records each redeemed call as run (untimed): its raised row goes, so the next batch
/// stays under tcd's cap of raised requests (`MAX_RAISED`).
async fn consume(c: &mut Client, done: &[(Binding, String)], fp: &str) -> anyhow::Result<()> {
    for (b, rid) in done {
        c.record_consumed(RecordConsumedRequest {
            binding: Some(b.clone()),
            state_fp: fp.into(),
            route: "cli_token".into(),
            redemption_id: rid.clone(),
        })
        .await
        .context("record consumed")?;
    }
    Ok(())
}

/// CPU time (user + system) of tcd and of every PostgreSQL process so far.
fn cpu(daemons: &[Daemon]) -> (Duration, Duration) {
    let tick = 100.0; // USER_HZ on Linux
    let of = |pid: u32| -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<&str> = after.split_whitespace().collect();
        let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        (t(11) + t(12)) / tick
    };
    let tcd: f64 = daemons.iter().map(|d| of(d.pid())).sum();
    let uid = nix::unistd::User::from_name(PG_USER)
        .ok()
        .flatten()
        .map(|u| u.uid.as_raw());
    let mut pg = 0.0;
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let owner = std::fs::metadata(e.path())
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
            .ok();
        if owner.is_some() && owner == uid {
            pg += of(pid);
        }
    }
    (Duration::from_secs_f64(tcd), Duration::from_secs_f64(pg))
}

async fn measure(name: &str, daemons: &[Daemon], n: usize, total: usize) -> anyhow::Result<()> {
    let fp = sha256_hex(b"fp");
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        clients.push(daemons[i % daemons.len()].client().await);
    }
    // Batches of at most 500 outstanding raises (tcd holds at most 1000).
    let mut samples = Vec::with_capacity(n);
    let mut next = 0;
    while samples.len() < n {
        let k = (n - samples.len()).min(500);
        let warm = if next == 0 { 50 } else { 0 };
        let batch = mint_all(&mut clients[0], next, k + warm, &fp).await?;
        next += k + warm;
        let mut done = Vec::new();
        for (i, t) in batch.iter().enumerate() {
            let at = Instant::now();
            done.push((t.1.clone(), redeem(&mut clients[0], t, &fp).await?));
            if i >= warm {
                samples.push(at.elapsed());
            }
        }
        consume(&mut clients[0], &done, &fp).await?;
    }
    let s = Stats::of(&samples);
    let per_round = 480 / CLIENTS;
    let (mut tcd_cpu, mut pg_cpu, mut busy, mut done) =
        (Duration::ZERO, Duration::ZERO, Duration::ZERO, 0);
    while done < total {
        let mut batches = Vec::new();
        for (w, c) in clients.iter_mut().enumerate() {
            batches.push(mint_all(c, 1_000_000 + next + w * per_round, per_round, &fp).await?);
        }
        next += CLIENTS * per_round;
        let (tcd0, pg0) = cpu(daemons);
        let started = Instant::now();
        let mut tasks = Vec::new();
        for (mut c, batch) in clients.drain(..).zip(batches) {
            let fp = fp.clone();
            tasks.push(tokio::spawn(async move {
                let mut ids = Vec::new();
                for t in &batch {
                    ids.push((t.1.clone(), redeem(&mut c, t, &fp).await?));
                }
                anyhow::Ok((c, ids))
            }));
        }
        let mut finished = Vec::new();
        for t in tasks {
            finished.push(t.await??);
        }
        busy += started.elapsed();
        let (tcd1, pg1) = cpu(daemons);
        tcd_cpu += tcd1 - tcd0;
        pg_cpu += pg1 - pg0;
        for (mut c, ids) in finished {
            done += ids.len();
            consume(&mut c, &ids, &fp).await?;
            clients.push(c);
        }
    }
    let secs = busy.as_secs_f64();
    let (tcd1, pg1, tcd0, pg0) = (tcd_cpu, pg_cpu, Duration::ZERO, Duration::ZERO);
    let per_ms = |d: Duration| d.as_secs_f64() * 1e6 / done as f64;
    println!(
        "{name:<12} redeem p50 {:>7.0} µs  p99 {:>7.0} µs | {CLIENTS} clients: {:>6.0} redeems/s, \
         CPU per redeem: tcd {:>5.0} µs, postgres {:>5.0} µs",
        us(s.p50),
        us(s.p99),
        done as f64 / secs,
        per_ms(tcd1 - tcd0),
        per_ms(pg1 - pg0),
    );
    Ok(())
}
