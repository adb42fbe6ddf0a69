//! Several tcd replicas on one real PostgreSQL cluster (issue 30): single use across
//! replicas under concurrency, live events across replicas, the shared key.
//!
//! One test binary; each module is one behaviour (tests/tests/README.md). Every test
//! starts its own cluster (`tc_tests::postgres`) and skips, saying why, where it cannot.

mod faults;
mod keys;
mod live;
mod race;
mod startup;

use std::path::PathBuf;

use tc_tests::postgres::{key_file, replica_config, Cluster};
use tc_tests::{Client, Daemon, DaemonOpts};

/// A cluster and `n` replicas on it (separate processes, sockets and cache dirs), one key.
pub struct Replicas {
    pub daemons: Vec<Daemon>,
    pub key: PathBuf,
    pub password: PathBuf,
    pub dir: tempfile::TempDir,
    /// Dropped last: the replicas stop before their database does.
    pub cluster: Cluster,
}

impl Replicas {
    /// `n` replicas running, or `None` (after saying why) where PostgreSQL cannot run.
    pub fn start(n: usize) -> Option<Replicas> {
        if let Some(why) = tc_tests::postgres::unavailable() {
            eprintln!("skipped: {why}");
            return None;
        }
        let cluster = Cluster::start();
        let dir = tempfile::Builder::new()
            .prefix("tc-rep-")
            .tempdir()
            .expect("tempdir");
        let key = key_file(dir.path(), "ledger.key");
        let password = cluster.password_file(dir.path());
        let mut r = Replicas {
            daemons: Vec::new(),
            key,
            password,
            dir,
            cluster,
        };
        for _ in 0..n {
            let mut d = r.prepared("");
            d.start_again();
            r.daemons.push(d);
        }
        Some(r)
    }

    /// One more replica's directory and config (keyed with the shared key, plus `extra`
    /// `[daemon]` lines), not started.
    pub fn prepared(&self, extra: &str) -> Daemon {
        self.prepared_keyed(&self.key, extra)
    }

    /// [`Replicas::prepared`] keyed with `key`.
    pub fn prepared_keyed(&self, key: &std::path::Path, extra: &str) -> Daemon {
        let base = tempfile::Builder::new()
            .prefix("r")
            .tempdir_in(self.dir.path())
            .expect("replica dir")
            .keep();
        let config = base.join("config.toml");
        std::fs::write(
            &config,
            replica_config(&self.cluster, key, &self.password, extra),
        )
        .unwrap();
        Daemon::prepared_in(&base, config, DaemonOpts::default())
    }

    /// A client of each replica, in order.
    pub async fn clients(&self) -> Vec<Client> {
        let mut out = Vec::new();
        for d in &self.daemons {
            out.push(d.client().await);
        }
        out
    }
}
