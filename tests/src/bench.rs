//! Helpers shared by the benchmarks (`tests/benches/*.rs`): locating a release binary,
//! count settings from the environment, nearest-rank percentiles.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};

/// `$<env_var>`, else `<name>` next to the target profile dir this bench was built
/// into (target/release/deps/<bench>-<hash> -> target/release/<name>).
pub fn release_binary(
    name: &str,
    package: &str,
    bench: &str,
    env_var: &str,
) -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os(env_var) {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .context("cannot locate the target directory from the bench executable")?;
    let bin = profile_dir.join(name);
    if !bin.is_file() {
        bail!(
            "{} not found: build it first with `cargo build --release -p {package}`, \
             then rerun `cargo bench -p tc-tests --bench {bench}` (or set {env_var})",
            bin.display()
        );
    }
    Ok(bin)
}

/// A count from the environment, or `default` when unset.
pub fn env_usize(name: &str, default: usize) -> anyhow::Result<usize> {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .with_context(|| format!("{name}={v:?} is not a count")),
        Err(_) => Ok(default),
    }
}

/// p50, p99 and mean of a set of samples.
pub struct Stats {
    pub p50: Duration,
    pub p99: Duration,
    pub mean: Duration,
}

impl Stats {
    /// Nearest-rank percentiles.
    pub fn of(samples: &[Duration]) -> Stats {
        let mut s = samples.to_vec();
        s.sort_unstable();
        let rank = |p: f64| s[((p / 100.0 * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
        Stats {
            p50: rank(50.0),
            p99: rank(99.0),
            mean: s.iter().sum::<Duration>() / s.len() as u32,
        }
    }
}

/// Microseconds, for printing.
pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
