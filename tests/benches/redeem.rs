//! Redeem round-trip benchmark for the real `tcd` binary (see docs/BENCHMARKS.md).
//!
//! Run with `cargo build --release -p tcd && cargo bench -p tc-tests --bench redeem`.
//!
//! It starts `target/release/tcd` on a temporary directory under `target/` and measures,
//! in one run, on one filesystem:
//!
//! 1. `Redeem` round-trip latency (p50/p99), one client, sequential, from a
//!    current-thread tokio runtime (as tc-shim and tcctl run) and from a multi-thread one;
//! 2. `Redeem` throughput with 8 concurrent clients on 8 separate connections;
//! 3. the baselines the target is judged against: one bare fsync'd SQLite commit
//!    (WAL, `synchronous=FULL`) of a single-row `INSERT`, and of an
//!    `UPDATE … WHERE consumed_at IS NULL`; plus, to split the cost, the daemon's own
//!    redeem transaction run in-process, and a `Status` RPC (gRPC + the store, no
//!    write).
//!
//! Tokens are raised and minted before each timed phase; only `Redeem` is timed. Timings
//! are printed, never asserted: the bench exits 0 whenever it ran.
//!
//! Knobs: `TC_BENCH_N` (sequential samples, default 2000), `TC_BENCH_CONC_TOTAL` (redeems
//! across the 8 clients, default 4000), `TCD_BIN` (daemon binary, default
//! `target/release/tcd`).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rusqlite::{params, Connection, TransactionBehavior};
use tc_core::codes::events::REDEEMED;
use tc_core::hash::sha256_hex;
use tc_proto::v1::{Binding, CountersRequest, MintRequest, RedeemRequest, StatusRequest};
use tc_tests::bench::{env_usize, release_binary, target_tempdir, us, Stats};
use tc_tests::{Client, Daemon, DaemonOpts};

/// Concurrent clients in the throughput phase.
const CLIENTS: usize = 8;
/// Untimed calls before each timed phase.
const WARMUP: usize = 50;

fn main() -> anyhow::Result<()> {
    let n = env_usize("TC_BENCH_N", 2000)?;
    let conc_total = env_usize("TC_BENCH_CONC_TOTAL", 4000)?;
    if n == 0 || conc_total == 0 {
        bail!("TC_BENCH_N and TC_BENCH_CONC_TOTAL must be at least 1");
    }
    let tcd = release_binary("tcd", "tcd", "redeem", "TCD_BIN")?;
    let tmp = target_tempdir(&tcd, "redeem")?;
    println!("tcd:     {}", tcd.display());
    println!(
        "tempdir: {} (daemon DB and baseline DBs)",
        tmp.path().display()
    );

    // The real clients (tc-shim, tcctl) run a current-thread tokio runtime, so the
    // sequential phases do too; the same redeem loop is also timed from a multi-thread
    // runtime (the bench's former client) to show what the client's runtime adds. The
    // 8-client phase needs parallel clients: multi-thread.
    let ct = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut base = Baselines {
        insert: BareInsert::new(&tmp.path().join("bare-insert.db"))?,
        update: BareUpdate::new(&tmp.path().join("bare-update.db"), 2 * (WARMUP + n))?,
        inproc: InprocRedeem::new(&tmp.path().join("inproc-redeem.db"), 2 * (WARMUP + n))?,
    };
    let config = tmp.path().join("config.toml");
    std::fs::write(&config, format!("[daemon]\n{}", tc_tests::UNLIMITED_RATE))?;
    let mut daemon = Daemon::prepared_in(tmp.path(), config, DaemonOpts::default());
    daemon.program(tcd);
    daemon.start_again();
    let mut baselines: [Vec<Duration>; 3] = Default::default();
    let fp = sha256_hex(b"tc-bench-state");
    let seq = ct.block_on(sequential_phases(
        &daemon,
        &mut base,
        &mut baselines,
        n,
        &fp,
    ))?;
    let redeem_seq_mt = mt.block_on(async {
        let tokens = prepare(&daemon, WARMUP + n, WARMUP + n, &fp).await?;
        let mut client = daemon.client().await;
        timed_redeems(&mut client, &tokens, &fp, &mut base, &mut baselines).await
    })?;
    let (redeem_conc, conc_wall) =
        mt.block_on(concurrent_phase(&daemon, 2 * (WARMUP + n), conc_total, &fp))?;
    // Close every client connection first so the daemon's shutdown has nothing to wait for.
    drop(ct);
    drop(mt);
    daemon.stop();
    let [bare_insert, bare_update, inproc] = baselines;

    println!();
    println!(
        "{:<58} {:>6} {:>10} {:>10} {:>10}",
        "measurement", "n", "p50 µs", "p99 µs", "mean µs"
    );
    for (name, s) in [
        ("Counters RPC (gRPC only, no store)", &seq.counters),
        ("Status RPC, empty DB (gRPC, no write)", &seq.status_empty),
        (
            "Status RPC, populated DB (3 count(*) reads)",
            &seq.status_full,
        ),
        (
            "Redeem RPC, 1 client sequential (current-thread client)",
            &seq.redeem_seq,
        ),
        (
            "Redeem RPC, 1 client sequential (multi-thread client)",
            &redeem_seq_mt,
        ),
        ("Redeem RPC, 8 clients concurrent (per call)", &redeem_conc),
        (
            "Redeem RPC, spent token (refused, no commit)",
            &seq.redeem_spent,
        ),
        ("bare SQLite commit: INSERT 1 row", &bare_insert),
        (
            "bare SQLite commit: UPDATE … consumed_at IS NULL",
            &bare_update,
        ),
        ("in-process redeem transaction (same SQL as tcd)", &inproc),
    ] {
        let st = Stats::of(s);
        println!(
            "{:<58} {:>6} {:>10.1} {:>10.1} {:>10.1}",
            name,
            s.len(),
            us(st.p50),
            us(st.p99),
            us(st.mean)
        );
    }
    println!();
    println!(
        "throughput, {CLIENTS} clients / {CLIENTS} connections: {} redeems in {:.3} s = {:.0} redeems/s",
        redeem_conc.len(),
        conc_wall.as_secs_f64(),
        redeem_conc.len() as f64 / conc_wall.as_secs_f64()
    );
    for (client, redeems) in [
        ("current-thread", &seq.redeem_seq),
        ("multi-thread", &redeem_seq_mt),
    ] {
        let redeem = Stats::of(redeems).p50;
        for (name, base) in [("INSERT", &bare_insert), ("UPDATE", &bare_update)] {
            let b = Stats::of(base).p50;
            let ratio = redeem.as_secs_f64() / b.as_secs_f64();
            println!(
                "ratio p50(redeem, {client} client) / p50(bare {name} commit) = {ratio:.2}x  (target <= 2x: {})",
                if ratio <= 2.0 { "met" } else { "NOT met" }
            );
        }
    }
    Ok(())
}

/// What the sequential phases measured.
struct SeqReport {
    counters: Vec<Duration>,
    status_empty: Vec<Duration>,
    status_full: Vec<Duration>,
    redeem_seq: Vec<Duration>,
    redeem_spent: Vec<Duration>,
}

/// Blocks the sequential phase is cut into, alternating redeems with the SQLite
/// baselines so that drift in the machine's fsync latency hits both alike.
const ROUNDS: usize = 10;

/// Status, sequential redeems (interleaved with the baselines), spent-token redeems and
/// Status again, all from one client on one connection. Tokens `0..WARMUP+n`.
async fn sequential_phases(
    d: &Daemon,
    base: &mut Baselines,
    baselines: &mut [Vec<Duration>; 3],
    n: usize,
    fp: &str,
) -> anyhow::Result<SeqReport> {
    let mut client = d.client().await;

    // Counters: answered from memory, never reaches the store: the transport alone.
    let counters = time_read(&mut client, ReadRpc::Counters, n).await?;
    // Status on a fresh DB: transport + store thread, no write.
    let status_empty = time_read(&mut client, ReadRpc::Status, n).await?;

    let tokens = prepare(d, 0, WARMUP + n, fp).await?;
    for _ in 0..WARMUP {
        base.sample_all()?;
    }
    let redeem_seq = timed_redeems(&mut client, &tokens, fp, base, baselines).await?;

    // The same RPC refused as `spent`: the whole path (transport, store thread,
    // BEGIN IMMEDIATE, SELECT) except the write and its fsync.
    // (The raw client call: an anyhow error would capture a backtrace under
    // RUST_BACKTRACE=1 and time the bench's own error handling.)
    let mut redeem_spent = Vec::with_capacity(n);
    for t in &tokens[WARMUP..] {
        let req = RedeemRequest {
            token: t.token.clone(),
            binding: Some(t.binding.clone()),
            current_state_fp: fp.to_string(),
            ..Default::default()
        };
        let start = Instant::now();
        let refused = client.redeem(req).await;
        redeem_spent.push(start.elapsed());
        match refused {
            Err(s) if tc_proto::reason(&s) == Some(tc_core::Reason::Spent) => {}
            other => bail!("a spent token was not refused as spent: {other:?}"),
        }
    }

    // Status again, now that the tables hold thousands of rows.
    let status_full = time_read(&mut client, ReadRpc::Status, n).await?;
    Ok(SeqReport {
        counters,
        status_empty,
        status_full,
        redeem_seq,
        redeem_spent,
    })
}

/// Redeems `tokens` one by one (the first WARMUP untimed), in ROUNDS blocks each
/// followed by the same number of samples of every baseline.
async fn timed_redeems(
    client: &mut Client,
    tokens: &[Prepared],
    fp: &str,
    base: &mut Baselines,
    baselines: &mut [Vec<Duration>; 3],
) -> anyhow::Result<Vec<Duration>> {
    let (warm, timed) = tokens.split_at(WARMUP.min(tokens.len()));
    for t in warm {
        redeem(client, t, fp).await?;
    }
    let mut out = Vec::with_capacity(timed.len());
    for block in timed.chunks(timed.len().div_ceil(ROUNDS).max(1)) {
        for t in block {
            let start = Instant::now();
            redeem(client, t, fp).await?;
            out.push(start.elapsed());
        }
        for _ in block {
            baselines[0].push(base.insert.sample()?);
        }
        for _ in block {
            baselines[1].push(base.update.sample()?);
        }
        for _ in block {
            baselines[2].push(base.inproc.sample()?);
        }
    }
    Ok(out)
}

/// Throughput: 8 clients, 8 connections, tokens `first..` prepared first.
async fn concurrent_phase(
    d: &Daemon,
    first: usize,
    conc_total: usize,
    fp: &str,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    let per = conc_total.div_ceil(CLIENTS);
    let tokens = prepare(d, first, CLIENTS * (per + 1), fp).await?;
    let mut clients = Vec::with_capacity(CLIENTS);
    for chunk in tokens.chunks(per + 1) {
        let mut c = d.client().await;
        redeem(&mut c, &chunk[0], fp).await?; // connection warm-up
        clients.push((c, chunk[1..].to_vec()));
    }
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(CLIENTS + 1));
    let mut tasks = Vec::new();
    for (mut c, toks) in clients {
        let barrier = barrier.clone();
        let fp = fp.to_string();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut lat = Vec::with_capacity(toks.len());
            for t in &toks {
                let start = Instant::now();
                redeem(&mut c, t, &fp).await?;
                lat.push(start.elapsed());
            }
            anyhow::Ok(lat)
        }));
    }
    barrier.wait().await;
    let start = Instant::now();
    let mut lat = Vec::with_capacity(conc_total);
    for t in tasks {
        lat.extend(t.await??);
    }
    Ok((lat, start.elapsed()))
}

/// A minted, unspent token and the binding it was minted for.
#[derive(Clone)]
struct Prepared {
    token: String,
    binding: Binding,
}

/// Raises and mints `count` tokens (ids `first..first+count`), 8 connections in parallel.
async fn prepare(
    d: &Daemon,
    first: usize,
    count: usize,
    fp: &str,
) -> anyhow::Result<Vec<Prepared>> {
    let started = Instant::now();
    let per = count.div_ceil(CLIENTS);
    let mut tasks = Vec::new();
    for w in 0..CLIENTS {
        let lo = first + w * per;
        let hi = (lo + per).min(first + count);
        let mut c = d.client().await;
        let fp = fp.to_string();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::with_capacity(hi.saturating_sub(lo));
            for i in lo..hi {
                let binding = Binding {
                    vault: "bench".into(),
                    tool: "t".into(),
                    caller: "stdio".into(),
                    args_hash: sha256_hex(format!("tc-bench-call-{i}").as_bytes()),
                };
                tc_tests::raise_request(&mut c, &binding, &fp, &format!("bench call {i}"))
                    .await
                    .context("Raise")?;
                let token = c
                    .mint(MintRequest {
                        binding: Some(binding.clone()),
                        state_fp: None,
                        ..Default::default()
                    })
                    .await
                    .context("Mint")?
                    .into_inner()
                    .token;
                out.push(Prepared { token, binding });
            }
            anyhow::Ok(out)
        }));
    }
    let mut all = Vec::with_capacity(count);
    for t in tasks {
        all.extend(t.await??);
    }
    eprintln!(
        "prepared {count} tokens in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(all)
}

async fn redeem(c: &mut Client, t: &Prepared, fp: &str) -> anyhow::Result<()> {
    let reply = c
        .redeem(RedeemRequest {
            token: t.token.clone(),
            binding: Some(t.binding.clone()),
            current_state_fp: fp.to_string(),
            ..Default::default()
        })
        .await
        .context("Redeem refused")?
        .into_inner();
    if reply.redemption_id.is_empty() {
        bail!("Redeem returned no redemption id");
    }
    Ok(())
}

/// The read-only RPCs timed beside the redemptions.
#[derive(Debug, Clone, Copy)]
enum ReadRpc {
    Status,
    Counters,
}

/// One call of `rpc`, its answer dropped.
async fn read_once(c: &mut Client, rpc: ReadRpc) -> Result<(), tonic::Status> {
    match rpc {
        ReadRpc::Status => c.status(StatusRequest {}).await.map(drop),
        ReadRpc::Counters => c.counters(CountersRequest {}).await.map(drop),
    }
}

/// `n` timed calls of `rpc`, after [`WARMUP`] untimed ones.
async fn time_read(c: &mut Client, rpc: ReadRpc, n: usize) -> anyhow::Result<Vec<Duration>> {
    for _ in 0..WARMUP {
        read_once(c, rpc).await?;
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        read_once(c, rpc)
            .await
            .with_context(|| format!("{rpc:?}"))?;
        out.push(start.elapsed());
    }
    Ok(out)
}

/// Opens a baseline DB exactly as tcd's store does: WAL, `synchronous=FULL`.
fn open_durable(path: &Path) -> anyhow::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    let mode: String = conn.pragma_query_value(None, "journal_mode", |r| r.get(0))?;
    if mode != "wal" {
        bail!("{}: journal_mode is {mode}, not wal", path.display());
    }
    Ok(conn)
}

/// The three in-process SQLite baselines, each on its own DB in the bench's tempdir.
struct Baselines {
    insert: BareInsert,
    update: BareUpdate,
    inproc: InprocRedeem,
}

impl Baselines {
    fn sample_all(&mut self) -> anyhow::Result<()> {
        self.insert.sample()?;
        self.update.sample()?;
        self.inproc.sample()?;
        Ok(())
    }
}

/// One `BEGIN IMMEDIATE; INSERT one row; COMMIT` per sample.
struct BareInsert {
    conn: Connection,
    i: u64,
}

impl BareInsert {
    fn new(path: &Path) -> anyhow::Result<Self> {
        let conn = open_durable(path)?;
        conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")?;
        Ok(BareInsert { conn, i: 0 })
    }

    fn sample(&mut self) -> anyhow::Result<Duration> {
        self.i += 1;
        let v = sha256_hex(&self.i.to_le_bytes());
        let start = Instant::now();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.prepare_cached("INSERT INTO t (v) VALUES (?1)")?
            .execute(params![v])?;
        tx.commit()?;
        Ok(start.elapsed())
    }
}

/// One `BEGIN IMMEDIATE; UPDATE … WHERE consumed_at IS NULL; COMMIT` per sample, each on a
/// different prefilled row (like spending a token).
struct BareUpdate {
    conn: Connection,
    keys: Vec<Vec<u8>>,
}

impl BareUpdate {
    fn new(path: &Path, count: usize) -> anyhow::Result<Self> {
        let mut conn = open_durable(path)?;
        conn.execute_batch(
            "CREATE TABLE tokens (token_hash BLOB PRIMARY KEY, consumed_at INTEGER)",
        )?;
        let keys: Vec<Vec<u8>> = (0..count)
            .map(|i| sha256_hex(&i.to_le_bytes()).into_bytes())
            .collect();
        let tx = conn.transaction()?;
        for k in &keys {
            tx.execute("INSERT INTO tokens (token_hash) VALUES (?1)", params![k])?;
        }
        tx.commit()?;
        Ok(BareUpdate { conn, keys })
    }

    fn sample(&mut self) -> anyhow::Result<Duration> {
        let k = self.keys.pop().context("baseline UPDATE ran out of rows")?;
        let start = Instant::now();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let changed = tx
            .prepare_cached(
                "UPDATE tokens SET consumed_at = ?2 WHERE token_hash = ?1 AND consumed_at IS NULL",
            )?
            .execute(params![k, tc_core::now_ms()])?;
        tx.commit()?;
        let took = start.elapsed();
        if changed != 1 {
            bail!("baseline UPDATE changed {changed} rows");
        }
        Ok(took)
    }
}

/// The statements `Ledger::redeem` + `Store::write` run for a successful redeem (schema 4:
/// SELECT the token, UPDATE it `WHERE consumed_at IS NULL`, INSERT the event), in one
/// transaction, with no RPC around it. A mirror of daemon/src/ledger.rs and store.rs; keep
/// it in step.
struct InprocRedeem {
    conn: Connection,
    rows: Vec<(Vec<u8>, String)>,
    fp: String,
}

impl InprocRedeem {
    fn new(path: &Path, count: usize) -> anyhow::Result<Self> {
        let mut conn = open_durable(path)?;
        conn.execute_batch(
            "CREATE TABLE tokens (
                id INTEGER PRIMARY KEY, token_hash BLOB NOT NULL,
                vault TEXT NOT NULL, tool TEXT NOT NULL, caller TEXT NOT NULL,
                args_hash TEXT NOT NULL, state_fp TEXT NOT NULL,
                created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL,
                consumed_at INTEGER, redemption_id TEXT, redeemed INTEGER NOT NULL DEFAULT 0,
                released_at INTEGER, final_at INTEGER);
             CREATE UNIQUE INDEX tokens_hash ON tokens (token_hash);
             CREATE INDEX tokens_expiry ON tokens (expires_at);
             CREATE INDEX tokens_args ON tokens (args_hash);
             CREATE TABLE events (
                id INTEGER PRIMARY KEY, at_ms INTEGER NOT NULL, kind TEXT NOT NULL,
                vault TEXT NOT NULL, tool TEXT NOT NULL, caller TEXT NOT NULL,
                args_hash TEXT NOT NULL, state_fp TEXT NOT NULL, detail TEXT NOT NULL);",
        )?;
        let fp = sha256_hex(b"tc-bench-state");
        let now = tc_core::now_ms();
        let rows: Vec<(Vec<u8>, String)> = (0..count)
            .map(|i| {
                (
                    sha256_hex(format!("tok-{i}").as_bytes()).into_bytes(),
                    sha256_hex(format!("call-{i}").as_bytes()),
                )
            })
            .collect();
        let tx = conn.transaction()?;
        for (h, a) in &rows {
            tx.execute(
                "INSERT INTO tokens (token_hash, vault, tool, caller, args_hash, state_fp, created_at, expires_at)
                 VALUES (?1, 'bench', 't', 'stdio', ?2, ?3, ?4, ?5)",
                params![h, a, fp, now, now + 3_600_000],
            )?;
        }
        tx.commit()?;
        Ok(InprocRedeem { conn, rows, fp })
    }

    fn sample(&mut self) -> anyhow::Result<Duration> {
        let (h, a) = self
            .rows
            .pop()
            .context("in-process redeem ran out of tokens")?;
        let start = Instant::now();
        let now = tc_core::now_ms();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let (id, consumed, redeemed): (i64, Option<i64>, i64) = tx
            .prepare_cached(
                "SELECT id, vault, tool, caller, args_hash, state_fp, expires_at, consumed_at, redeemed
                 FROM tokens WHERE token_hash = ?1",
            )?
            .query_row(params![h], |r| Ok((r.get(0)?, r.get(7)?, r.get(8)?)))?;
        if consumed.is_some() {
            bail!("in-process token already consumed");
        }
        let rid = format!("{id}.{}.bench-redemption-nonce", redeemed + 1);
        let detail = format!("{{\"redemption_id\":\"{rid}\"}}");
        tx.prepare_cached(
            "UPDATE tokens SET consumed_at = ?2, redemption_id = ?3, redeemed = ?4,
               released_at = NULL, final_at = NULL
             WHERE id = ?1 AND consumed_at IS NULL",
        )?
        .execute(params![id, now, rid, redeemed + 1])?;
        tx.prepare_cached(
            "INSERT INTO events (at_ms, kind, vault, tool, caller, args_hash, state_fp, detail)
             VALUES (?1, ?2, 'bench', 't', 'stdio', ?3, ?4, ?5)",
        )?
        .execute(params![now, REDEEMED, a, self.fp, detail])?;
        tx.commit()?;
        Ok(start.elapsed())
    }
}
