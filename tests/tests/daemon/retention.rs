//! End to end: the audit log cannot be used to fill the disk. A raw client floods the
//! real tc-shim (in front of the real server-filesystem, with a gated `write_file`) with
//! refused calls; the real tcd rate-limits them per caller, holds its event log to its
//! age and size limits, counts what it pruned, and never prunes what a pending
//! confirmation needs.

use tc_tests::shim as support;

use std::path::Path;

use serde_json::{json, Value};
use support::*;

/// `[daemon]` keys (written under the harness's own `[daemon]` table) plus the vault.
fn env(daemon_keys: &str) -> Env {
    let vault = Vault::filesystem("fs").gate("write_file", r#"{ paths = ["path"] }"#);
    Env::new(&format!("{daemon_keys}\n{}", vault.toml()))
}

/// The event log's size cap of the flood tests.
const FLOOD_CAP: u64 = 256 * 1024;

/// The flood tests' scene: tcd (`keyed`: its state kept across restarts) with the event
/// log capped at [`FLOOD_CAP`] and the rate limit lifted so every call of the flood is
/// logged, and a shim client.
fn flood_scene(keyed: bool) -> (Env, RawClient) {
    let mut env = env(&format!(
        "events_max_bytes = {FLOOD_CAP}\nrate_limit_per_minute = 1000000\nrate_limit_burst = 1000000\n"
    ));
    if keyed {
        env.start_tcd_keyed();
    } else {
        env.start_tcd();
    }
    let c = shim(&env);
    (env, c)
}

/// A shim on `env`'s vault, initialized (legacy era, no elicitation: the CLI-token route).
fn shim(env: &Env) -> RawClient {
    let mut c = RawClient::start(&env.shim_argv("fs"));
    c.initialize();
    c
}

/// `n` gated calls with distinct arguments (so each raises its own request), sent in
/// a few large writes and all answered; returns the answers' results by id order.
fn flood(c: &mut RawClient, first_id: u64, n: u64, content: &str) -> Vec<Value> {
    let msgs: Vec<Value> = (first_id..first_id + n)
        .map(|i| {
            json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
                "name": "write_file",
                "arguments": {"path": format!("flood/{i}.txt"), "content": content}}})
        })
        .collect();
    // 500 in flight at a time: far above any human pace, and under the shim's bound on
    // requests in flight (4 096), which would otherwise refuse the excess itself.
    let mut out = vec![Value::Null; n as usize];
    for chunk in msgs.chunks(500) {
        c.send_together(chunk);
        for _ in 0..chunk.len() {
            let r = c.recv();
            let i = r["id"].as_u64().unwrap_or_else(|| panic!("{r}")) - first_id;
            out[i as usize] = r["result"].clone();
        }
    }
    out
}

/// The value of a metric line `name{labels} v` (or `name v`) of `tcctl metrics`.
fn metric(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// cache.db once tcd has stopped cleanly (WAL checkpointed into it).
fn db_bytes(cache: &Path) -> u64 {
    std::fs::metadata(cache.join("cache.db")).unwrap().len()
}

/// The event log's size as tcd counts it (the UTF-8 bytes of each event's fields + 64).
fn event_bytes(db: &rusqlite::Connection) -> u64 {
    db.query_row(
        "SELECT coalesce(sum(length(CAST(kind AS BLOB)) + length(CAST(vault AS BLOB))
           + length(CAST(tool AS BLOB)) + length(CAST(caller AS BLOB))
           + length(CAST(args_hash AS BLOB)) + length(CAST(state_fp AS BLOB))
           + length(CAST(detail AS BLOB)) + 64), 0) FROM events",
        [],
        |r| r.get::<_, i64>(0),
    )
    .unwrap() as u64
}

/// A gated call refused with `elicit_required`, then approved by the human with tcctl.
fn raise_and_mint(env: &Env, c: &mut RawClient, id: u64, path: &str) -> (Value, String) {
    let args = json!({"path": path, "content": "approved"});
    let r = c.call_tool(id, "write_file", args.clone());
    assert_elicit_required(&r, "write_file", "fs", &args);
    (args, tcctl_elicit(env, &r))
}

/// 5 000 refused gated calls as fast as the shim reads them: past the per-caller burst
/// they are refused `rate_limited` (telling the agent to slow down, nothing run,
/// nothing written), so cache.db grows by a bounded amount instead of ~1.4 kB per call;
/// a confirmation minted before the flood still redeems after it.
#[test]
fn a_flood_of_refused_calls_is_rate_limited_and_the_db_stays_bounded() {
    let mut env = env("");
    env.start_tcd_keyed();
    let mut c = shim(&env);
    let (args, token) = raise_and_mint(&env, &mut c, 1, "kept.txt");
    env.stop_tcd();
    let before = db_bytes(&env.cache);
    env.start_tcd_keyed();

    let results = flood(&mut c, 100, 5000, "x");
    let limited: Vec<&Value> = results
        .iter()
        .filter(|r| code(r).as_deref() == Some("rate_limited"))
        .collect();
    let raised = results
        .iter()
        .filter(|r| code(r).as_deref() == Some("elicit_required"))
        .count();
    assert_eq!(limited.len() + raised, 5000, "other answers in the flood");
    assert!(
        raised <= 1000,
        "only the burst (and its refill) raises requests: {raised} raised"
    );
    let r = limited[0];
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("slow down") && text.contains("Nothing was run"),
        "{r}"
    );
    assert_eq!(sc(r)["details"]["reason"], "rate_limited", "{r}");
    assert!(!env.root.join("flood").exists(), "a refused call ran");
    let metrics = env.tcctl_metrics();
    assert!(
        metric(
            &metrics,
            "tc_rate_limited_total{vault=\"fs\",caller=\"stdio\"}"
        )
        .is_some_and(|n| n >= limited.len() as u64),
        "{metrics}"
    );

    // The database grew by what the burst wrote, not by what the flood sent (on a daemon
    // without a rate limit: 2.9 MB for these 5 000 calls).
    env.stop_tcd();
    let grown = db_bytes(&env.cache).saturating_sub(before);
    eprintln!("cache.db grew by {grown} bytes over 5000 refused calls");
    assert!(grown < 1_000_000, "cache.db grew by {grown} bytes");
    env.start_tcd_keyed();

    // The confirmation minted before the flood still redeems: the call runs.
    let r = c.call_tool(2, "write_file", with_token(&args, &token));
    assert_eq!(code(&r), None, "{r}");
    assert_eq!(
        std::fs::read_to_string(env.root.join("kept.txt")).unwrap(),
        "approved"
    );
}

/// With a small `events_max_bytes` and a rate limit that lets the flood through, the
/// event log is pruned (oldest first, in batches) back under its cap while the flood
/// runs, the pruned events are counted, counters never go backwards, and neither a
/// minted token nor a raised (pending) request from before the flood is touched.
#[test]
fn the_event_log_is_held_to_its_size_cap_and_pending_confirmations_survive() {
    let (cap, (mut env, mut c)) = (FLOOD_CAP, flood_scene(true));
    let (args, token) = raise_and_mint(&env, &mut c, 1, "minted.txt");
    let pending_args = json!({"path": "pending.txt", "content": "later"});
    let pending = c.call_tool(2, "write_file", pending_args.clone());
    assert_elicit_required(&pending, "write_file", "fs", &pending_args);

    // ~2 kB of summary per raised request: 600 of them are several times the cap.
    let big = "y".repeat(1500);
    let results = flood(&mut c, 100, 600, &big);
    assert!(results
        .iter()
        .all(|r| code(r).as_deref() == Some("elicit_required")));
    let metrics = wait_until("events pruned to the size cap", || {
        let m = env.tcctl_metrics();
        metric(&m, "tc_events_pruned_total{reason=\"size\"}")
            .filter(|n| *n > 0)
            .map(|_| m)
    });
    let requested = "tc_events_total{kind=\"tc.elicit.requested\"}";
    assert_eq!(metric(&metrics, requested), Some(602), "{metrics}");

    // What is left of the log fits under the cap (counted as tcd counts: field bytes),
    // give or take the eighth a commit may add before it wakes the collector.
    let kept = wait_until("the log is back under its cap", || {
        let db = rusqlite::Connection::open(env.cache.join("cache.db")).unwrap();
        let bytes = event_bytes(&db);
        (bytes <= cap + cap / 8).then_some(bytes)
    });
    assert!(
        kept > cap / 2,
        "pruned far more than needed: {kept} bytes left"
    );
    let log = env.tcd.stderr();
    assert!(log.contains("pruned") && log.contains("events"), "{log}");

    // Counters survive a restart although their events are gone.
    env.stop_tcd();
    env.start_tcd_keyed();
    let after = env.tcctl_metrics();
    assert_eq!(metric(&after, requested), Some(602), "{after}");

    // The raised request from before the flood is still pending (mintable), and the
    // token minted before it still redeems.
    let pending_token = tcctl_elicit(&env, &pending);
    let r = c.call_tool(3, "write_file", with_token(&pending_args, &pending_token));
    assert_eq!(code(&r), None, "{r}");
    let r = c.call_tool(4, "write_file", with_token(&args, &token));
    assert_eq!(code(&r), None, "{r}");
    assert!(env.root.join("minted.txt").exists() && env.root.join("pending.txt").exists());
}

/// Events older than `events_max_age_days` are pruned by the collection that runs when
/// tcd starts (here: events aged by editing their timestamps while tcd was stopped);
/// the count is in `tcctl metrics` and `tcctl status`, the kind counters do not go
/// backwards, and the raised request whose event was pruned can still be approved.
#[test]
fn events_past_the_age_limit_are_pruned_and_counted() {
    let mut env = env("events_max_age_days = 30\n");
    env.start_tcd_keyed();
    let mut c = shim(&env);
    let old_args = json!({"path": "old.txt", "content": "old"});
    let old = c.call_tool(1, "write_file", old_args.clone());
    assert_elicit_required(&old, "write_file", "fs", &old_args);
    flood(&mut c, 100, 9, "x");
    let newer = json!({"path": "newer.txt", "content": "new"});
    c.call_tool(2, "write_file", newer);
    env.stop_tcd();

    // The first ten events are 31 days old; the eleventh is from now.
    let db = rusqlite::Connection::open(env.cache.join("cache.db")).unwrap();
    let month = 31 * 86_400_000_i64;
    let aged = db
        .execute(
            "UPDATE events SET at_ms = at_ms - ?1 WHERE id <= 10",
            [month],
        )
        .unwrap();
    assert_eq!(aged, 10);
    drop(db);

    env.start_tcd_keyed();
    let metrics = wait_until("events pruned by age", || {
        let m = env.tcctl_metrics();
        metric(&m, "tc_events_pruned_total{reason=\"age\"}").map(|n| (n, m))
    });
    assert_eq!(metrics.0, 10, "{}", metrics.1);
    assert_eq!(
        metric(&metrics.1, "tc_events_total{kind=\"tc.elicit.requested\"}"),
        Some(11),
        "{}",
        metrics.1
    );
    let left = all_events(&env.socket);
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].id, 11);
    let status = env.tcd.tcctl(&["status"]);
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(status.contains("10 pruned"), "{status}");
    assert!(env.tcd.stderr().contains("pruned"), "{}", env.tcd.stderr());

    // A new event continues the ids (the newest row was kept), and the request whose
    // `tc.elicit.requested` was pruned is still pending: approved, it runs.
    let token = tcctl_elicit(&env, &old);
    let r = c.call_tool(3, "write_file", with_token(&old_args, &token));
    assert_eq!(code(&r), None, "{r}");
    assert!(all_events(&env.socket).iter().all(|e| e.id >= 11));
    assert!(env.root.join("old.txt").exists());
}

/// Under a sustained flood at a rate the limit lets through, the file stops growing:
/// retention keeps the log under its cap and SQLite reuses the pages pruning freed. The
/// same refused call again and again (one raised row, a new event each time), in
/// rounds; after each, the WAL is checkpointed into cache.db and its size read.
#[test]
fn the_db_file_stops_growing_under_a_sustained_flood() {
    let (cap, (env, mut c)) = (FLOOD_CAP, flood_scene(false));
    let big = "z".repeat(1500);
    let mut sizes = Vec::new();
    let mut id = 0;
    for _ in 0..5 {
        let msgs: Vec<Value> = (0..400)
            .map(|_| {
                id += 1;
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                    "name": "write_file", "arguments": {"path": "same.txt", "content": big}}})
            })
            .collect();
        c.send_together(&msgs);
        for _ in 0..400 {
            let r = c.recv();
            assert_eq!(
                code(&r["result"]).as_deref(),
                Some("elicit_required"),
                "{r}"
            );
        }
        let size = wait_until("the log back under its cap, checkpointed", || {
            let db = rusqlite::Connection::open(env.cache.join("cache.db")).ok()?;
            // Over the cap by less than an eighth waits for the minute's collection.
            (event_bytes(&db) <= cap + cap / 8).then_some(())?;
            db.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                r.get::<_, i64>(0)
            })
            .ok()
            .filter(|busy| *busy == 0)?;
            Some(db_bytes(&env.cache))
        });
        sizes.push(size);
    }
    let m = env.tcctl_metrics();
    let pruned = metric(&m, "tc_events_pruned_total{reason=\"size\"}").unwrap_or(0);
    eprintln!("cache.db after each round of 400 events: {sizes:?}; {pruned} pruned");
    assert!(pruned >= 1000, "{m}");
    assert!(
        sizes[4] <= sizes[1] + sizes[1] / 4,
        "the file kept growing: {sizes:?}"
    );
    assert!(sizes[4] < 4 * cap, "{sizes:?}");
}
