//! Load soak benchmark: the `tc-soak` driver for a longer run against release builds,
//! printing calls/s, confirmations and the RSS of tcd and of each shim over time (see
//! docs/BENCHMARKS.md, section "Load soak").
//!
//! Run with `cargo build --release -p tc-shim -p tcd && cargo bench -p tc-tests --bench soak`.
//!
//! It starts the real `target/release/tcd` (keyed from its cache dir, as in production,
//! so the database grows over the run) on a socket in a temp dir under `target/`, then
//! `tc-soak drive`: 8 real `target/release/tc-shim` processes in front of the `tc-soak
//! server` fixture, 8 workers per shim alternating gated calls (CLI route: refused,
//! `Mint` at the daemon as `tcctl elicit` would, the call again with `elicit_token`; one
//! token in 16 is tried a second time and must be refused as spent) and ungated `echo`
//! calls. At the end every confirmed call must have run exactly once at the downstream
//! and have exactly one requested/minted/redeemed/consumed event in the daemon's log;
//! any discrepancy fails the run. Timings and memory are printed, never asserted.
//!
//! Knobs: `TC_SOAK_SECONDS` (default 60), `TC_SOAK_SHIMS` (8), `TC_SOAK_WORKERS` (8 per
//! shim), `TC_SOAK_SAMPLES` (RSS samples incl. start and end, default 7), `TC_SHIM_BIN`,
//! `TCD_BIN`.

use std::process::{Command, Stdio};

use anyhow::{ensure, Context};
use serde_json::Value;
use tc_tests::bench::{env_usize, release_binary, target_tempdir};
use tc_tests::{Daemon, DaemonOpts};

fn mb(kb: &Value) -> String {
    kb.as_u64()
        .map_or("?".into(), |k| format!("{:.1}", k as f64 / 1024.0))
}

fn main() -> anyhow::Result<()> {
    let seconds = env_usize("TC_SOAK_SECONDS", 60)?;
    let shims = env_usize("TC_SOAK_SHIMS", 8)?;
    let workers = env_usize("TC_SOAK_WORKERS", 8)?;
    let samples = env_usize("TC_SOAK_SAMPLES", 7)?;
    let shim_bin = release_binary("tc-shim", "tc-shim", "soak", "TC_SHIM_BIN")?;
    let tcd_bin = release_binary("tcd", "tcd", "soak", "TCD_BIN")?;
    let tmp = target_tempdir(&shim_bin, "soak")?;
    let base = std::fs::canonicalize(tmp.path())?;
    let config = base.join("tcd.toml");
    std::fs::write(&config, format!("[daemon]\n{}", tc_tests::UNLIMITED_RATE))?;
    let mut daemon = Daemon::prepared_in(&base, config, DaemonOpts::default());
    daemon.program(tcd_bin.clone()).env("TCD_LOG", "warn");
    daemon.start_again();
    let driver = env!("CARGO_BIN_EXE_tc-soak");
    println!("tc-shim: {}", shim_bin.display());
    println!(
        "tcd:     {} (keyed, cache in {})",
        tcd_bin.display(),
        base.display()
    );
    println!("driver:  {driver}");
    println!("{shims} shims × {workers} workers, {seconds} s, {samples} RSS samples");
    let out = Command::new(driver)
        .arg("drive")
        .arg("--socket")
        .arg(&daemon.socket)
        .arg("--shim")
        .arg(&shim_bin)
        .arg("--dir")
        .arg(base.join("soak"))
        .args(["--shims", &shims.to_string()])
        .args(["--workers", &workers.to_string()])
        .args(["--seconds", &seconds.to_string()])
        .args(["--samples", &samples.to_string()])
        .args(["--tcd-pid", &daemon.pid().to_string()])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let s: Value = serde_json::from_str(text.trim())
        .with_context(|| format!("tc-soak printed no summary: {text}"))?;
    let db_kb = std::fs::metadata(base.join("cache/cache.db")).map_or(0, |m| m.len() / 1024);

    println!();
    println!("wall                    {} s", s["seconds"]);
    println!(
        "calls                   {} gated + {} ungated = {} calls/s ({} gated/s)",
        s["gated"], s["ungated"], s["calls_per_s"], s["gated_per_s"]
    );
    println!(
        "confirmations           {} minted, {} forwarded writes, lost {}, forwarded twice {}, \
         daemon-log mismatches {}, reused tokens refused {}",
        s["events"]["tc.elicit.minted"],
        s["forwarded_writes"],
        s["lost"],
        s["forwarded_twice"],
        s["log_mismatch"],
        s["reuse_refused"]
    );
    println!("events                  {}", s["events"]);
    println!("cache.db at the end     {db_kb} KiB");
    println!();
    println!(
        "{:>7} {:>9} {:>11} {:>11} {:>11}",
        "at s", "tcd MiB", "shim min", "shim max", "shim mean"
    );
    for r in s["rss"].as_array().into_iter().flatten() {
        let kb: Vec<u64> = r["shims_kb"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_u64)
            .collect();
        let (min, max) = (kb.iter().min().copied(), kb.iter().max().copied());
        let mean = (!kb.is_empty()).then(|| kb.iter().sum::<u64>() / kb.len() as u64);
        println!(
            "{:>7.1} {:>9} {:>11} {:>11} {:>11}",
            r["at_s"].as_f64().unwrap_or(f64::NAN),
            mb(&r["tcd_kb"]),
            mb(&min.into()),
            mb(&max.into()),
            mb(&mean.into())
        );
    }
    daemon.stop();
    let problems = s["problems"].as_array().cloned().unwrap_or_default();
    ensure!(
        out.status.success() && problems.is_empty(),
        "the soak found problems: {problems:?}"
    );
    Ok(())
}
