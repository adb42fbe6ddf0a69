//! Redeem on each store (docs/BENCHMARKS.md, "Several replicas"): SQLite, PostgreSQL with
//! one replica, PostgreSQL with three, and the floor, a bare `BEGIN; INSERT; COMMIT` from
//! Rust (tokio-postgres) on the same server. One run each, same machine.
//!
//! Run with `cargo build --release -p tcd && cargo bench -p tc-tests --bench replicas`
//! (as root: the cluster runs as an unprivileged user, see tests/src/postgres.rs).
//!
//! Per store: sequential redeem latency (p50/p99, one client; each redeem right after one
//! floor transaction, whose latency is reported too), then redeems/s with 16
//! concurrent clients spread over the replicas, and where the time of a redeem went in
//! that phase: CPU per redeem of the client (this process), tcd (the replicas) and
//! PostgreSQL (the cluster's processes), from /proc, and how full each replica's pool was
//! (pg_stat_activity sampled every 10 ms, with what each busy backend waited on).
//! Knobs: `TC_BENCH_N` (sequential samples, default 1000), `TC_BENCH_CONC_TOTAL`
//! (concurrent redeems, default 2400), `TCD_BIN`, `TC_BENCH_PG` (the PostgreSQL runs in
//! order, as `REPLICASxPOOL`, default `1x4,3x4,1x4,3x4,3x8,1x24`: the pool is each
//! replica's `pool_size`, 4 by default; one replica of 24 holds as many connections as
//! three of 8). One and three replicas alternate, each run starting right after a
//! `CHECKPOINT`, and the last lines compare each configuration's mean rate with one
//! replica's at the default pool: runs minutes apart differ by up to 10% on this disk, so
//! a single "one, then three" pair measures the order as much as the replicas.
//! Redeemed calls are recorded as run between timed batches (untimed), which keeps the
//! raised requests under tcd's cap.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tc_core::config::DEFAULT_POOL_SIZE;
use tc_core::hash::sha256_hex;
use tc_proto::v1::{Binding, MintRequest, RecordConsumedRequest, RedeemRequest, SealStateRequest};
use tc_tests::bench::{cpu_time, env_usize, release_binary, target_tempdir, us, Stats};
use tc_tests::postgres::{key_file, replica_config_with_pool, Cluster};
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
    let mut runs = vec![("sqlite".to_string(), 0, 0)];
    let pg = std::env::var("TC_BENCH_PG").unwrap_or_else(|_| "1x4,3x4,1x4,3x4,3x8,1x24".into());
    for spec in pg.split(',') {
        let (r, p) = spec
            .split_once('x')
            .and_then(|(r, p)| Some((r.parse().ok()?, p.parse().ok()?)))
            .with_context(|| format!("TC_BENCH_PG: {spec:?} is not REPLICASxPOOL"))?;
        let name = match p {
            DEFAULT_POOL_SIZE => format!("postgres x{r}"),
            _ => format!("pg x{r} pool {p}"),
        };
        runs.push((name, r, p));
    }
    let mut rates: Vec<(String, f64)> = Vec::new();
    for (name, replicas, pool) in runs {
        let dir = tempfile::tempdir_in(tmp.path())?;
        let daemons = start(&tcd, dir.path(), &cluster, replicas, pool)?;
        let rate = rt.block_on(measure(&name, &daemons, &cluster, n, total, pool))?;
        rates.push((name, rate));
    }
    compare(&rates);
    Ok(())
}

/// Each PostgreSQL configuration's redeems/s over its runs, and its mean against one
/// replica's (pool 8).
fn compare(rates: &[(String, f64)]) {
    let mut names: Vec<&str> = Vec::new();
    for (n, _) in rates.iter().skip(1) {
        if !names.contains(&n.as_str()) {
            names.push(n);
        }
    }
    let mean = |name: &str| {
        let r: Vec<f64> = rates.iter().filter(|x| x.0 == name).map(|x| x.1).collect();
        (r.iter().sum::<f64>() / r.len().max(1) as f64, r)
    };
    let (one, _) = mean("postgres x1");
    for name in names {
        let (m, all) = mean(name);
        let each: Vec<String> = all.iter().map(|r| format!("{r:.0}")).collect();
        println!(
            "{name:<12} redeems/s over its runs: {} (mean {m:.0}, {:.2}× one replica's mean)",
            each.join(", "),
            m / one,
        );
    }
}

/// The floor's connection: one `INSERT` in its own committed transaction (`BEGIN`,
/// `INSERT`, `COMMIT`: three round trips and a WAL flush, as a redeem has).
struct Floor {
    client: tokio_postgres::Client,
    insert: tokio_postgres::Statement,
}

impl Floor {
    /// Connects and makes the floor's table (again: each PostgreSQL store drops the schema).
    async fn connect(cluster: &Cluster) -> anyhow::Result<Floor> {
        let (client, conn) =
            tokio_postgres::connect(&cluster.url_with_password(), tokio_postgres::NoTls).await?;
        tokio::spawn(conn);
        client
            .batch_execute("CREATE TABLE IF NOT EXISTS floor (id BIGSERIAL PRIMARY KEY, v BIGINT)")
            .await?;
        let insert = client.prepare("INSERT INTO floor (v) VALUES ($1)").await?;
        Ok(Floor { client, insert })
    }

    /// One transaction; its latency.
    async fn once(&self, v: i64) -> anyhow::Result<Duration> {
        let t = Instant::now();
        self.client.batch_execute("BEGIN").await?;
        self.client.execute(&self.insert, &[&v]).await?;
        self.client.batch_execute("COMMIT").await?;
        Ok(t.elapsed())
    }
}

/// The floor on its own, sequential, one connection (before any store).
async fn floor(cluster: &Cluster, n: usize) -> anyhow::Result<()> {
    let f = Floor::connect(cluster).await?;
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + 50 {
        let d = f.once(i as i64).await?;
        if i >= 50 {
            samples.push(d);
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
    pool: u32,
) -> anyhow::Result<Vec<Daemon>> {
    let key = key_file(dir, "ledger.key");
    let password = cluster.password_file(dir);
    if replicas > 0 {
        // A fresh ledger per store: drop what the previous one left; and each run starts
        // right after a checkpoint, not with the previous run's pages still to write.
        cluster.query("DROP SCHEMA public CASCADE; CREATE SCHEMA public AUTHORIZATION tc");
        cluster.query("CHECKPOINT");
    }
    let mut out = Vec::new();
    for i in 0..replicas.max(1) {
        let base = dir.join(format!("r{i}"));
        std::fs::create_dir(&base)?;
        let config = base.join("config.toml");
        let text = if replicas == 0 {
            format!("[daemon]\n{}", tc_tests::UNLIMITED_RATE)
        } else {
            replica_config_with_pool(cluster, &key, &password, "", pool)
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

/// CPU time used so far on each side of a redeem.
#[derive(Clone, Copy, Default)]
struct Cpu {
    /// This bench process: the gRPC clients (and the pool sampler's queries).
    client: Duration,
    /// The tcd replicas (every thread: gRPC, the store's blocking threads, `tcd-pg`).
    tcd: Duration,
    /// The cluster's postmaster, its backends and workers (and the children it reaped).
    pg: Duration,
}

impl Cpu {
    fn now(daemons: &[Daemon], cluster: &Cluster) -> Cpu {
        let pids = cluster.server_pids();
        Cpu {
            client: cpu_time("self", false),
            tcd: daemons
                .iter()
                .map(|d| cpu_time(&d.pid().to_string(), false))
                .sum(),
            pg: pids
                .iter()
                .enumerate()
                .map(|(i, p)| cpu_time(&p.to_string(), i == 0))
                .sum(),
        }
    }

    /// What was used between `earlier` and `self`, added to `acc`.
    fn add_since(&self, earlier: &Cpu, acc: &mut Cpu) {
        acc.client += self.client.saturating_sub(earlier.client);
        acc.tcd += self.tcd.saturating_sub(earlier.tcd);
        acc.pg += self.pg.saturating_sub(earlier.pg);
    }
}

/// How full each replica's pool was while the clients ran: pg_stat_activity sampled every
/// 10 ms, each backend given to the replica whose socket is its client port. A
/// connection not `idle` is checked out (in a transaction); a pool with all its `pool_size` busy
/// makes the next redeem on that replica wait for one.
#[derive(Default)]
struct PoolUse {
    samples: u64,
    /// Sum over samples of the busy connections, all replicas.
    busy: u64,
    /// Samples in which some replica had all its connections busy.
    full: u64,
    /// Whether any connection of a replica was seen (none: SQLite).
    seen: bool,
    /// Busy connections by what their backend was doing (`wait_event_type:wait_event`,
    /// or `CPU` when it waited on nothing), summed over samples.
    waits: HashMap<String, u64>,
}

/// Local TCP port → the replica (index in `pids`) whose socket it is: each process's
/// socket inodes (`/proc/<pid>/fd`) matched to `/proc/net/tcp`'s lines.
fn replica_ports(pids: &[u32]) -> HashMap<i32, usize> {
    let mut inodes = HashMap::new();
    for (i, pid) in pids.iter().enumerate() {
        for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let link = std::fs::read_link(fd.path()).unwrap_or_default();
            let link = link.to_string_lossy();
            if let Some(inode) = link
                .strip_prefix("socket:[")
                .and_then(|l| l.strip_suffix(']'))
            {
                inodes.insert(inode.to_string(), i);
            }
        }
    }
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let mut out = HashMap::new();
    for line in tcp.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(inode)) = (f.get(1), f.get(9)) else {
            continue;
        };
        let port = local
            .rsplit_once(':')
            .and_then(|(_, p)| i32::from_str_radix(p, 16).ok());
        if let (Some(port), Some(r)) = (port, inodes.get(*inode)) {
            out.insert(port, *r);
        }
    }
    out
}

/// Samples pool use while `timing` is set (the timed batches), until `stop` is; `pids`
/// are the replicas'.
async fn sample_pools(
    cluster_url: String,
    pids: Vec<u32>,
    timing: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    pool: usize,
) -> anyhow::Result<PoolUse> {
    let (client, conn) = tokio_postgres::connect(&cluster_url, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    let q = client
        .prepare(
            "SELECT client_port, state <> 'idle', \
             coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity \
             WHERE application_name = 'tcd'",
        )
        .await?;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let mut out = PoolUse::default();
    let mut ports = HashMap::new();
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        if !timing.load(Ordering::Relaxed) {
            continue;
        }
        let rows = client.query(&q, &[]).await?;
        let port = |r: &tokio_postgres::Row| r.get::<_, Option<i32>>(0);
        // /proc is read again only when a connection is new (pools open on demand): a
        // scan every sample would cost more CPU than the redeems it measures.
        if rows
            .iter()
            .any(|r| port(r).is_some_and(|p| !ports.contains_key(&p)))
        {
            ports = replica_ports(&pids);
        }
        let mut busy = vec![0usize; pids.len()];
        for r in &rows {
            if let Some(i) = port(r).and_then(|p| ports.get(&p)) {
                out.seen = true;
                let on = r.get::<_, Option<bool>>(1) == Some(true);
                busy[*i] += usize::from(on);
                if on {
                    let what: String = r.get(2);
                    *out.waits.entry(what).or_insert(0) += 1;
                }
            }
        }
        out.samples += 1;
        out.busy += busy.iter().sum::<usize>() as u64;
        out.full += u64::from(busy.iter().any(|b| *b >= pool));
    }
    Ok(out)
}

/// Sequential redeems through one client (batches of at most 500 outstanding raises:
/// tcd holds at most 1000), each right after one floor transaction on the same server,
/// so both see the disk as it is that moment (the floor of a phase minutes earlier moves
/// with the disk's other writers); the latencies of both. `next` numbers the calls.
async fn sequential(
    c: &mut Client,
    floor: &Floor,
    n: usize,
    fp: &str,
    next: &mut usize,
) -> anyhow::Result<(Stats, Stats)> {
    let (mut samples, mut floors) = (Vec::with_capacity(n), Vec::with_capacity(n));
    while samples.len() < n {
        let k = (n - samples.len()).min(500);
        let warm = if *next == 0 { 50 } else { 0 };
        let batch = mint_all(c, *next, k + warm, fp).await?;
        *next += k + warm;
        let mut done = Vec::new();
        for (i, t) in batch.iter().enumerate() {
            let f = floor.once((*next + i) as i64).await?;
            let at = Instant::now();
            done.push((t.1.clone(), redeem(c, t, fp).await?));
            if i >= warm {
                samples.push(at.elapsed());
                floors.push(f);
            }
        }
        consume(c, &done, fp).await?;
    }
    Ok((Stats::of(&samples), Stats::of(&floors)))
}

/// What the concurrent phase measured: redeems, the time the clients ran, the CPU each
/// side used meanwhile, and the pools' use (PostgreSQL only).
struct Concurrent {
    done: usize,
    busy: Duration,
    cpu: Cpu,
    pool: Option<PoolUse>,
}

/// One timed batch: every client redeems its tokens, all at once; the clients back with
/// what each redeemed.
async fn batch(
    clients: Vec<Client>,
    batches: Vec<Vec<(String, Binding)>>,
    fp: &str,
) -> anyhow::Result<Vec<(Client, Vec<(Binding, String)>)>> {
    let mut tasks = Vec::new();
    for (mut c, batch) in clients.into_iter().zip(batches) {
        let fp = fp.to_string();
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
    Ok(finished)
}

/// `total` redeems by [`CLIENTS`] concurrent clients, minted untimed between batches.
async fn concurrent(
    clients: &mut Vec<Client>,
    daemons: &[Daemon],
    cluster: &Cluster,
    total: usize,
    fp: &str,
    next: &mut usize,
    pool: u32,
) -> anyhow::Result<Concurrent> {
    let per_round = 480 / CLIENTS;
    let mut m = Concurrent {
        done: 0,
        busy: Duration::ZERO,
        cpu: Cpu::default(),
        pool: None,
    };
    let (timing, stop) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let url = cluster.url_with_password();
    let pids = daemons.iter().map(Daemon::pid).collect();
    let sampler = tokio::spawn(sample_pools(
        url,
        pids,
        timing.clone(),
        stop.clone(),
        pool as usize,
    ));
    while m.done < total {
        let mut batches = Vec::new();
        for (w, c) in clients.iter_mut().enumerate() {
            batches.push(mint_all(c, 1_000_000 + *next + w * per_round, per_round, fp).await?);
        }
        *next += CLIENTS * per_round;
        let before = Cpu::now(daemons, cluster);
        let started = Instant::now();
        timing.store(true, Ordering::Relaxed);
        let finished = batch(std::mem::take(clients), batches, fp).await?;
        timing.store(false, Ordering::Relaxed);
        m.busy += started.elapsed();
        Cpu::now(daemons, cluster).add_since(&before, &mut m.cpu);
        for (mut c, ids) in finished {
            m.done += ids.len();
            consume(&mut c, &ids, fp).await?;
            clients.push(c);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let pool = sampler.await??;
    // SQLite has no pool: the sampler finds no connection of tcd's.
    m.pool = pool.seen.then_some(pool);
    Ok(m)
}

/// The pools' line: how full they were, and by Little's law (a mean count in a stage is
/// its rate times the time each item spends there) how long each redeem held a connection
/// out of the time it took with [`CLIENTS`] in flight; the rest was spent outside a
/// transaction: client, gRPC, the CPU queue, and waiting for a free connection.
fn pool_line(p: &PoolUse, replicas: usize, pool: usize, rate: f64) -> String {
    let busy = p.busy as f64 / p.samples.max(1) as f64;
    let (held, each) = (busy / rate * 1e3, CLIENTS as f64 / rate * 1e3);
    let mut waits: Vec<_> = p.waits.iter().collect();
    waits.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let total = p.waits.values().sum::<u64>().max(1) as f64;
    let waits: Vec<String> = waits
        .iter()
        .take(6)
        .map(|(w, n)| format!("{w} {:.0}%", 100.0 * **n as f64 / total))
        .collect();
    format!(
        "pool: {busy:.1} of {} connections busy on average, some replica's all busy in \
         {:.0}% of {} samples; a redeem held a connection {held:.1} ms of its {each:.1} ms \
         ({:.1} ms outside one); busy backends were: {}",
        pool * replicas,
        100.0 * p.full as f64 / p.samples.max(1) as f64,
        p.samples,
        each - held,
        waits.join(", "),
    )
}

/// `n` sequential calls through the same gRPC path and blocking-thread hand-off as a
/// redeem, without a store (sealing a request state is the key alone): what tcd adds to a
/// redeem's database round trips.
async fn store_less(c: &mut Client, n: usize, fp: &str) -> anyhow::Result<Stats> {
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + 50 {
        let at = Instant::now();
        c.seal_state(SealStateRequest {
            binding: Some(call(i)),
            state_fp: fp.into(),
            inner: Vec::new(),
        })
        .await
        .context("seal state")?;
        if i >= 50 {
            samples.push(at.elapsed());
        }
    }
    Ok(Stats::of(&samples))
}

async fn measure(
    name: &str,
    daemons: &[Daemon],
    cluster: &Cluster,
    n: usize,
    total: usize,
    pool: u32,
) -> anyhow::Result<f64> {
    let fp = sha256_hex(b"fp");
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        clients.push(daemons[i % daemons.len()].client().await);
    }
    let mut next = 0;
    let floor = Floor::connect(cluster).await?;
    let (s, f) = sequential(&mut clients[0], &floor, n, &fp, &mut next).await?;
    let bare = store_less(&mut clients[0], n, &fp).await?;
    let m = concurrent(&mut clients, daemons, cluster, total, &fp, &mut next, pool).await?;
    let per = |d: Duration| d.as_secs_f64() * 1e6 / m.done as f64;
    let rate = m.done as f64 / m.busy.as_secs_f64();
    println!(
        "{name:<12} redeem p50 {:>7.0} µs  p99 {:>7.0} µs | {CLIENTS} clients: {:>6.0} redeems/s",
        us(s.p50),
        us(s.p99),
        rate,
    );
    println!(
        "{:<12} floor interleaved with those redeems: p50 {:>7.0} µs  p99 {:>7.0} µs \
         (redeem p50 / floor p50 = {:.2})",
        "",
        us(f.p50),
        us(f.p99),
        s.p50.as_secs_f64() / f.p50.as_secs_f64(),
    );
    println!(
        "{:<12} a tcd call that touches no store (SealState): p50 {:>7.0} µs; redeem p50 \
         less that, over the floor: {:.2}",
        "",
        us(bare.p50),
        (s.p50.as_secs_f64() - bare.p50.as_secs_f64()) / f.p50.as_secs_f64(),
    );
    let all = m.cpu.client + m.cpu.tcd + m.cpu.pg;
    let pool = m.pool.map_or_else(
        || "no pool".to_string(),
        |p| pool_line(&p, daemons.len(), pool as usize, rate),
    );
    println!(
        "{:<12} CPU per redeem: client {:>4.0} µs, tcd {:>4.0} µs, postgres {:>4.0} µs \
         (total {:>4.0} µs, of the {:>4.0} µs two cores give a redeem at this rate)\n{:<12} {pool}",
        "",
        per(m.cpu.client),
        per(m.cpu.tcd),
        per(m.cpu.pg),
        per(all),
        2.0 * per(m.busy),
        "",
    );
    Ok(rate)
}
