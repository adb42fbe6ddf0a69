//! `kill -9` of the real `tcd` at random points under a mixed load from several client
//! processes (`tc-load`), over several rounds: nothing acknowledged is lost, nothing
//! authorizes twice, the database stays intact.
//!
//! The test holds the model: chains of steps per token (raise, mint, redeem, release,
//! consume, …), per request state (seal, open, open again) and single appended events.
//! Each round hands the next steps of every unfinished chain to one lane of one of the
//! load processes, kills the daemon once a random share of the round's operations has
//! answered, resolves the operations that were in flight by retrying them (either
//! outcome is fine then; the retry tells which one it was), restarts and goes on. A last
//! round without a kill finishes every chain. Checked, each against the model and
//! against the daemon's own event log: every answer was the expected one (a redeem of a
//! spent token answered `ok` is a double spend), every acknowledged redemption, release,
//! consumption and appended event is in the log after the crashes, the log never shows a
//! token redeemed while an earlier redemption of it was still live, and
//! `PRAGMA integrity_check` says `ok` after every kill.
//!
//! Seed: `TC_FAULT_SEED` (printed on every run) replays a run's schedule.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use tc_proto::v1;
use tc_tests::*;

const PROCS: usize = 3;
const LANES: usize = 3;
const KILL_ROUNDS: usize = 6;
const NEW_TOKENS: usize = 40;
const NEW_STATES: usize = 12;
const NEW_EVENTS: usize = 18;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Raise,
    Mint,
    RedeemOk,
    RedeemSpent,
    ReleaseOk,
    ReleaseSpent,
    Consume,
    Seal,
    OpenOk,
    OpenSpent,
    Event,
}

impl Step {
    fn op(self) -> &'static str {
        match self {
            Step::Raise => "raise",
            Step::Mint => "mint",
            Step::RedeemOk | Step::RedeemSpent => "redeem",
            Step::ReleaseOk | Step::ReleaseSpent => "release",
            Step::Consume => "consume",
            Step::Seal => "seal",
            Step::OpenOk | Step::OpenSpent => "open",
            Step::Event => "event",
        }
    }
}

/// A token's life: redeemed, released and redeemed again twice, run, then refused.
const TOKEN_STEPS: &[Step] = &[
    Step::Raise,
    Step::Mint,
    Step::RedeemOk,
    Step::RedeemSpent,
    Step::ReleaseOk,
    Step::RedeemOk,
    Step::ReleaseOk,
    Step::RedeemOk,
    Step::RedeemSpent,
    Step::Consume,
    Step::ReleaseSpent,
    Step::RedeemSpent,
];
const STATE_STEPS: &[Step] = &[Step::Seal, Step::OpenOk, Step::OpenSpent];
const EVENT_STEPS: &[Step] = &[Step::Event];

struct Chain {
    key: String,
    steps: &'static [Step],
    pos: usize,
    token: Option<String>,
    rid: Option<String>,
    state: Option<String>,
    /// The daemon life (start number) the token was minted in.
    minted_life: usize,
}

impl Chain {
    fn done(&self) -> bool {
        self.pos == self.steps.len()
    }
    fn step(&self) -> Step {
        self.steps[self.pos]
    }
    fn args_hash(&self) -> String {
        h(&self.key)
    }
}

#[derive(Default, Debug)]
struct Stats {
    kills: usize,
    ops_answered: usize,
    redeems_ok: usize,
    redeems_across_crashes: usize,
    in_flight_resolved: usize,
    committed_before_crash: usize,
    double_spends: usize,
}

struct Model {
    chains: Vec<Chain>,
    /// Acknowledged appended events: id -> marker.
    events: HashMap<i64, String>,
    /// Acknowledged (or resolved) redemption ids, releases and consumptions per key.
    redeemed: HashMap<String, Vec<String>>,
    released: HashMap<String, Vec<String>>,
    consumed: HashSet<String>,
    violations: Vec<String>,
    stats: Stats,
    life: usize,
}

impl Model {
    fn new() -> Model {
        Model {
            chains: Vec::new(),
            events: HashMap::new(),
            redeemed: HashMap::new(),
            released: HashMap::new(),
            consumed: HashSet::new(),
            violations: Vec::new(),
            stats: Stats::default(),
            life: 0,
        }
    }

    fn add(&mut self, key: String, steps: &'static [Step]) {
        self.chains.push(Chain {
            key,
            steps,
            pos: 0,
            token: None,
            rid: None,
            state: None,
            minted_life: 0,
        });
    }

    /// Applies the answer `status value` of chain `ci`'s current step.
    fn apply(&mut self, ci: usize, status: &str, value: Option<&str>) {
        let life = self.life;
        let c = &mut self.chains[ci];
        let step = c.step();
        let key = c.key.clone();
        let ok = status == "ok";
        let spent = status == "err" && value == Some("spent");
        let expect_ok = !matches!(
            step,
            Step::RedeemSpent | Step::ReleaseSpent | Step::OpenSpent
        );
        if step == Step::RedeemSpent && ok {
            self.stats.double_spends += 1;
            self.violations
                .push(format!("DOUBLE SPEND: {key}: a spent token redeemed again"));
        }
        if expect_ok != ok || (!expect_ok && !spent) {
            self.violations
                .push(format!("{key}: {step:?} answered {status} {value:?}"));
        }
        self.advance(ci, ok, value, life);
    }

    /// Moves chain `ci` past its current step, recording what an `ok` taught us.
    fn advance(&mut self, ci: usize, ok: bool, value: Option<&str>, life: usize) {
        let c = &mut self.chains[ci];
        let key = c.key.clone();
        match c.step() {
            Step::Mint if ok => {
                c.token = value.map(String::from);
                c.minted_life = life;
            }
            Step::RedeemOk if ok => {
                c.rid = value.map(String::from);
                self.stats.redeems_ok += 1;
                if life > c.minted_life {
                    self.stats.redeems_across_crashes += 1;
                }
                if let Some(r) = value {
                    self.redeemed.entry(key).or_default().push(r.to_string());
                }
            }
            Step::ReleaseOk if ok => {
                if let Some(r) = &c.rid {
                    self.released.entry(key).or_default().push(r.clone());
                }
            }
            Step::Consume if ok => {
                self.consumed.insert(key);
            }
            Step::Seal if ok => c.state = value.map(String::from),
            Step::Event if ok => {
                if let Some(id) = value.and_then(|v| v.parse().ok()) {
                    self.events.insert(id, key);
                }
            }
            _ => {}
        }
        c.pos += 1;
    }
}

/// One load process's script: per lane, the preloaded values and the ops, interleaved
/// across chains (each chain's steps in order); and per lane the chain of each op.
fn scripts(model: &Model, rng: &mut Rng, last: bool) -> (Vec<String>, Vec<Vec<Vec<usize>>>) {
    let mut lanes: Vec<Vec<usize>> = vec![Vec::new(); PROCS * LANES];
    for (ci, c) in model.chains.iter().enumerate() {
        if !c.done() {
            let l = rng.below(lanes.len());
            lanes[l].push(ci);
        }
    }
    let mut texts = vec![String::new(); PROCS];
    let mut order = vec![vec![Vec::new(); LANES]; PROCS];
    for (l, chains) in lanes.iter().enumerate() {
        let (p, lane) = (l / LANES, l % LANES);
        let text = &mut texts[p];
        // Each chain gets a few of its next steps this round (all of them in the last).
        let mut queue: Vec<(usize, usize)> = Vec::new();
        for &ci in chains {
            let c = &model.chains[ci];
            let left = c.steps.len() - c.pos;
            let n = if last {
                left
            } else {
                1 + rng.below(left.min(5))
            };
            queue.push((ci, n));
            if let Some(t) = &c.token {
                text.push_str(&format!("{lane} tok {} {t}\n", c.key));
            }
            if let Some(r) = &c.rid {
                text.push_str(&format!("{lane} rid {} {r}\n", c.key));
            }
            if let Some(s) = &c.state {
                text.push_str(&format!("{lane} st {} {s}\n", c.key));
            }
        }
        let mut next: HashMap<usize, usize> = chains.iter().map(|&ci| (ci, 0)).collect();
        while !queue.is_empty() {
            let q = rng.below(queue.len());
            let (ci, n) = queue[q];
            let c = &model.chains[ci];
            let at = next[&ci];
            text.push_str(&format!("{lane} {} {}\n", c.steps[c.pos + at].op(), c.key));
            order[p][lane].push(ci);
            next.insert(ci, at + 1);
            if at + 1 == n {
                queue.swap_remove(q);
            }
        }
    }
    (texts, order)
}

/// What one load process answered: (lane, seq, status, value).
type Answer = (usize, usize, String, Option<String>);

/// Runs one round; kills the daemon after `kill_after` answers (None: no kill).
/// Returns every answer, per process, and whether the kill landed mid-load.
fn round(d: &mut Daemon, texts: &[String], kill_after: Option<usize>) -> (Vec<Vec<Answer>>, bool) {
    let answered = Arc::new(AtomicUsize::new(0));
    let (done_tx, done_rx) = mpsc::channel::<(usize, Vec<Answer>)>();
    let mut kids = Vec::new();
    for (p, text) in texts.iter().enumerate() {
        let script = d.dir.path().join(format!("script-{p}"));
        std::fs::write(&script, text).unwrap();
        let mut k = Command::new(env!("CARGO_BIN_EXE_tc-load"))
            .arg(&d.socket)
            .arg(&script)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn tc-load");
        let out = BufReader::new(k.stdout.take().unwrap());
        let answered = answered.clone();
        let tx = done_tx.clone();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            for line in out.lines().map_while(Result::ok) {
                let w: Vec<&str> = line.split_whitespace().collect();
                let (Some(lane), Some(seq), Some(st)) = (
                    w.first().and_then(|v| v.parse().ok()),
                    w.get(1).and_then(|v| v.parse().ok()),
                    w.get(2),
                ) else {
                    panic!("bad tc-load line {line:?}");
                };
                got.push((lane, seq, st.to_string(), w.get(3).map(|v| v.to_string())));
                answered.fetch_add(1, Ordering::SeqCst);
            }
            let _ = tx.send((p, got));
        });
        kids.push(k);
    }
    drop(done_tx);
    let mut killed_mid_load = false;
    if let Some(n) = kill_after {
        let deadline = Instant::now() + Duration::from_secs(30);
        while answered.load(Ordering::SeqCst) < n
            && kids.iter_mut().any(|k| k.try_wait().unwrap().is_none())
        {
            assert!(Instant::now() < deadline, "the load made no progress");
            std::thread::sleep(Duration::from_micros(200));
        }
        killed_mid_load = kids.iter_mut().any(|k| k.try_wait().unwrap().is_none());
        d.kill9();
    }
    for mut k in kids {
        let st = wait_timeout(&mut k, Duration::from_secs(30)).expect("tc-load exits");
        assert!(st.success(), "tc-load failed: {st}");
    }
    let mut all = vec![Vec::new(); texts.len()];
    for (p, got) in done_rx {
        all[p] = got;
    }
    (all, killed_mid_load)
}

fn integrity_ok(d: &Daemon, tag: &str) {
    // A copy, so the daemon itself recovers the WAL it left behind, as after a real crash.
    let copy = d.dir.path().join(format!("check-{tag}"));
    std::fs::create_dir_all(&copy).unwrap();
    for f in ["cache.db", "cache.db-wal"] {
        let src = d.cache_dir.join(f);
        if src.exists() {
            std::fs::copy(&src, copy.join(f)).unwrap();
        }
    }
    let db = rusqlite::Connection::open(copy.join("cache.db")).unwrap();
    let ic: String = db
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ic, "ok", "integrity_check after {tag}");
}

/// Retries chain `ci`'s in-flight step directly: it either never committed (the retry
/// does it now) or committed before the crash (the retry is refused as spent).
async fn resolve(model: &mut Model, c: &mut Client, ci: usize) {
    let ch = &model.chains[ci];
    let (key, step) = (ch.key.clone(), ch.step());
    let (token, rid, state) = (ch.token.clone(), ch.rid.clone(), ch.state.clone());
    let b = v1::Binding {
        vault: "load".into(),
        tool: "write".into(),
        caller: "stdio".into(),
        args_hash: ch.args_hash(),
    };
    let fp = h("load target");
    let fail = |s: &tonic::Status| format!("{key}: retry of in-flight {step:?}: {s:?}");
    let life = model.life;
    let spent_or = |r: Result<(), tonic::Status>| match r {
        Ok(()) => Ok(false),
        Err(s) if reason_of(&s) == Some(Reason::Spent) => Ok(true),
        Err(s) => Err(s),
    };
    let outcome: Result<(bool, Option<String>), tonic::Status> = match step {
        Step::Raise => c
            .raise(v1::RaiseRequest {
                binding: Some(b.clone()),
                state_fp: fp.clone(),
                summary: String::new(),
                ..Default::default()
            })
            .await
            .map(|_| (true, None)),
        Step::Mint => c
            .mint(v1::MintRequest {
                binding: Some(b.clone()),
                state_fp: Some(fp.clone()),
                ..Default::default()
            })
            .await
            .map(|r| (true, Some(r.into_inner().token))),
        Step::RedeemOk | Step::RedeemSpent => {
            match redeem(c, token.as_deref().unwrap_or(""), &b, &fp).await {
                Ok(rid) => Ok((true, Some(rid))),
                Err(s) if reason_of(&s) == Some(Reason::Spent) && step == Step::RedeemOk => {
                    // Committed before the crash: the log names the redemption.
                    model.stats.committed_before_crash += 1;
                    let rid = events(c)
                        .await
                        .into_iter()
                        .rev()
                        .find(|e| e.kind == "tc.elicit.redeemed" && e.args_hash == b.args_hash)
                        .and_then(|e| {
                            serde_json::from_str::<serde_json::Value>(&e.detail_json).ok()?
                                ["redemption_id"]
                                .as_str()
                                .map(String::from)
                        });
                    Ok((true, rid))
                }
                Err(s) if reason_of(&s) == Some(Reason::Spent) => Ok((false, Some("spent".into()))),
                Err(s) => Err(s),
            }
        }
        Step::ReleaseOk | Step::ReleaseSpent => spent_or(
            c.release(v1::ReleaseRequest {
                redemption_id: rid.clone().unwrap_or_default(),
                reason: "cancelled".into(),
            })
            .await
            .map(|_| ()),
        )
        .map(|spent| {
            (
                step == Step::ReleaseOk || !spent,
                spent.then(|| "spent".into()),
            )
        }),
        Step::Consume => spent_or(
            c.record_consumed(v1::RecordConsumedRequest {
                binding: Some(b.clone()),
                state_fp: fp.clone(),
                route: "cli_token".into(),
                redemption_id: rid.clone().unwrap_or_default(),
            })
            .await
            .map(|_| ()),
        )
        .map(|_| (true, None)),
        Step::Seal => c
            .seal_state(v1::SealStateRequest {
                binding: Some(b.clone()),
                state_fp: fp.clone(),
                inner: key.as_bytes().to_vec(),
            })
            .await
            .map(|r| (true, Some(r.into_inner().request_state))),
        Step::OpenOk | Step::OpenSpent => spent_or(
            c.open_state(v1::OpenStateRequest {
                request_state: state.clone().unwrap_or_default(),
                binding: Some(b.clone()),
                consume: true,
                current_state_fp: fp.clone(),
            })
            .await
            .map(|_| ()),
        )
        .map(|spent| {
            (
                step == Step::OpenOk || !spent,
                spent.then(|| "spent".into()),
            )
        }),
        // Unknown whether it committed; nothing to check.
        Step::Event => Ok((false, None)),
    };
    model.stats.in_flight_resolved += 1;
    match outcome {
        Ok((ok, value)) => {
            if step == Step::RedeemSpent && ok {
                model.stats.double_spends += 1;
                model.violations.push(format!(
                    "DOUBLE SPEND: {key}: spent token redeemed on retry"
                ));
            }
            if matches!(
                step,
                Step::ReleaseSpent | Step::OpenSpent | Step::RedeemSpent
            ) && ok
            {
                model
                    .violations
                    .push(format!("{key}: retry of {step:?} was not refused"));
            }
            model.advance(ci, ok, value.as_deref(), life);
        }
        Err(s) => {
            model.violations.push(fail(&s));
            model.chains[ci].pos += 1;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn faults_kill9_under_mixed_load_never_loses_or_double_spends() {
    let seed = env_parse("TC_FAULT_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            | 1
    });
    eprintln!("faults: TC_FAULT_SEED={seed}");
    let mut rng = Rng::new(seed);
    let mut d = Daemon::start();
    let mut model = Model::new();
    model.life = 1;
    let mut mid_load = 0;
    for r in 0..=KILL_ROUNDS {
        let last = r == KILL_ROUNDS;
        if !last {
            for i in 0..NEW_TOKENS {
                model.add(format!("t{r}.{i}"), TOKEN_STEPS);
            }
            for i in 0..NEW_STATES {
                model.add(format!("s{r}.{i}"), STATE_STEPS);
            }
            for i in 0..NEW_EVENTS {
                model.add(format!("e{r}.{i}"), EVENT_STEPS);
            }
        }
        let (texts, order) = scripts(&model, &mut rng, last);
        let total: usize = order.iter().flatten().map(Vec::len).sum();
        let kill_after = (!last).then(|| total / 5 + rng.below(total * 2 / 5));
        let (answers, killed_mid) = round(&mut d, &texts, kill_after);
        mid_load += usize::from(killed_mid);
        // Apply every answer in lane order; collect the steps that were in flight.
        let mut in_flight = Vec::new();
        for (p, got) in answers.iter().enumerate() {
            let mut per_lane: Vec<Vec<&Answer>> = vec![Vec::new(); LANES];
            for a in got {
                per_lane[a.0].push(a);
            }
            for (lane, list) in per_lane.iter_mut().enumerate() {
                list.sort_by_key(|a| a.1);
                for a in list.iter() {
                    let ci = order[p][lane][a.1];
                    match a.2.as_str() {
                        "lost" => in_flight.push(ci),
                        st => {
                            model.stats.ops_answered += 1;
                            model.apply(ci, st, a.3.as_deref());
                        }
                    }
                }
            }
        }
        if last {
            assert!(in_flight.is_empty(), "lost operations without a kill");
            break;
        }
        model.stats.kills += 1;
        integrity_ok(&d, &format!("kill {r}"));
        d.start_again();
        model.life += 1;
        let mut c = d.client().await;
        for ci in in_flight {
            resolve(&mut model, &mut c, ci).await;
        }
    }
    assert!(model.chains.iter().all(Chain::done));
    let mut c = d.client().await;

    // Every token is spent now, whatever happened to it.
    for ch in model.chains.iter().filter(|c| c.steps == TOKEN_STEPS) {
        let b = v1::Binding {
            vault: "load".into(),
            tool: "write".into(),
            caller: "stdio".into(),
            args_hash: ch.args_hash(),
        };
        let token = ch.token.as_deref().expect("every chain minted");
        let r = redeem(&mut c, token, &b, &h("load target")).await;
        if r.is_ok() {
            model.stats.double_spends += 1;
        }
        assert_eq!(
            r.err().and_then(|s| reason_of(&s)),
            Some(Reason::Spent),
            "{}: a finished token must be spent",
            ch.key
        );
    }

    // The daemon's log against the model.
    let log = events(&mut c).await;
    let by_hash: HashMap<String, &Chain> =
        model.chains.iter().map(|c| (c.args_hash(), c)).collect();
    let rid_of = |e: &v1::Event| -> String {
        serde_json::from_str::<serde_json::Value>(&e.detail_json).unwrap()["redemption_id"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    // Per token: never redeemed while an earlier redemption is live or after it ran.
    let mut live: HashMap<&str, Option<String>> = HashMap::new();
    let mut ran: HashSet<&str> = HashSet::new();
    let mut log_redeemed: HashMap<String, Vec<String>> = HashMap::new();
    let mut log_released: HashMap<String, Vec<String>> = HashMap::new();
    let mut log_consumed: HashMap<String, usize> = HashMap::new();
    for e in &log {
        let Some(ch) = by_hash.get(&e.args_hash) else {
            continue;
        };
        let k = ch.key.as_str();
        match e.kind.as_str() {
            "tc.elicit.redeemed" => {
                if live.get(k).is_some_and(Option::is_some) || ran.contains(k) {
                    model.stats.double_spends += 1;
                    model
                        .violations
                        .push(format!("DOUBLE SPEND in the log: {k} event {}", e.id));
                }
                live.insert(k, Some(rid_of(e)));
                log_redeemed.entry(k.into()).or_default().push(rid_of(e));
            }
            "hitl_released" => {
                if live.get(k).cloned().flatten() != Some(rid_of(e)) {
                    model
                        .violations
                        .push(format!("{k}: released a redemption that was not live"));
                }
                live.insert(k, None);
                log_released.entry(k.into()).or_default().push(rid_of(e));
            }
            "tc.elicit.consumed" => {
                ran.insert(k);
                live.insert(k, None);
                *log_consumed.entry(k.into()).or_default() += 1;
            }
            _ => {}
        }
    }
    let keys: HashSet<&String> = model.redeemed.keys().chain(log_redeemed.keys()).collect();
    for k in keys {
        let rids = model.redeemed.get(k).cloned().unwrap_or_default();
        let logged = log_redeemed.get(k).cloned().unwrap_or_default();
        for r in &rids {
            if !logged.contains(r) {
                model
                    .violations
                    .push(format!("{k}: acknowledged redemption missing from the log"));
            }
        }
        // Every redemption in the log was answered to someone (or found on a retry).
        if logged.len() != rids.len() {
            model.violations.push(format!(
                "{k}: {} redemptions in the log, {} known",
                logged.len(),
                rids.len()
            ));
        }
    }
    for (k, rids) in &model.released {
        let logged = log_released.get(k).cloned().unwrap_or_default();
        if rids.iter().any(|r| !logged.contains(r)) {
            model
                .violations
                .push(format!("{k}: acknowledged release missing from the log"));
        }
    }
    for k in &model.consumed {
        if log_consumed.get(k) != Some(&1) {
            model.violations.push(format!(
                "{k}: consumed {:?} times in the log",
                log_consumed.get(k)
            ));
        }
    }
    let by_id: HashMap<i64, &v1::Event> = log.iter().map(|e| (e.id, e)).collect();
    for (id, marker) in &model.events {
        let ok = by_id.get(id).is_some_and(|e| {
            e.kind == "tc.elicit.not_obtained"
                && serde_json::from_str::<serde_json::Value>(&e.detail_json).unwrap()["marker"]
                    == marker.as_str()
        });
        if !ok {
            model
                .violations
                .push(format!("acknowledged event {id} ({marker}) missing"));
        }
    }
    d.stop();
    integrity_ok(&d, "the clean stop");
    eprintln!(
        "faults: kills={} (mid-load {mid_load}), answered={}, redeems ok={} (across crashes {}), \
         in flight at a kill={} (committed before it: {}), events acknowledged={}, double spends={}",
        model.stats.kills,
        model.stats.ops_answered,
        model.stats.redeems_ok,
        model.stats.redeems_across_crashes,
        model.stats.in_flight_resolved,
        model.stats.committed_before_crash,
        model.events.len(),
        model.stats.double_spends,
    );
    assert!(
        model.violations.is_empty(),
        "{} violations (seed {seed}):\n{}",
        model.violations.len(),
        model.violations.join("\n")
    );
    assert_eq!(model.stats.double_spends, 0);
    assert_eq!(mid_load, KILL_ROUNDS, "every kill landed under load");
    assert!(model.stats.redeems_across_crashes > 0, "{:?}", model.stats);
}
