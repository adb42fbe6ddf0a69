//! Several tcd replicas on one real PostgreSQL cluster (issue 30): single use across
//! replicas under concurrency, live events across replicas, the shared key.
//!
//! One test binary; each module is one behaviour (tests/tests/README.md). Every test
//! starts its own cluster (`tc_tests::postgres`) and skips, saying why, where it cannot.

mod factor;
mod faults;
mod gateways;
mod keys;
mod live;
mod order;
mod push;
mod race;
mod startup;

use std::path::{Path, PathBuf};

use tc_tests::http::Front;
use tc_tests::postgres::{key_file, replica_config, Cluster};
use tc_tests::{Client, Daemon, DaemonOpts};

/// A cluster and `n` replicas on it (separate processes, sockets and cache dirs), one key.
pub struct Replicas {
    pub daemons: Vec<Daemon>,
    pub key: PathBuf,
    pub password: PathBuf,
    pub dir: tempfile::TempDir,
    /// What every replica's config adds: `[daemon]` lines, then tables after the store's.
    extra: String,
    tail: String,
    /// Dropped last: the replicas stop before their database does.
    pub cluster: Cluster,
}

impl Replicas {
    /// `n` replicas running, or `None` (after saying why) where PostgreSQL cannot run.
    pub fn start(n: usize) -> Option<Replicas> {
        Replicas::start_with(n, "", "")
    }

    /// [`Replicas::start`], every replica's config adding `extra` `[daemon]` lines and
    /// `tail` (tables: vaults, `[guarded]`). Its directories are 0755 and its configs 0644
    /// (what guarded mode asks of a root-owned config); the key and password stay 0600.
    pub fn start_with(n: usize, extra: &str, tail: &str) -> Option<Replicas> {
        if let Some(why) = tc_tests::postgres::unavailable() {
            eprintln!("skipped: {why}");
            return None;
        }
        let cluster = Cluster::start();
        let dir = tempfile::Builder::new()
            .prefix("tc-rep-")
            .tempdir()
            .expect("tempdir");
        tc_tests::chmod(dir.path(), 0o755);
        let key = key_file(dir.path(), "ledger.key");
        let password = cluster.password_file(dir.path());
        let mut r = Replicas {
            daemons: Vec::new(),
            key,
            password,
            dir,
            extra: extra.into(),
            tail: tail.into(),
            cluster,
        };
        for _ in 0..n {
            let mut d = r.prepared();
            d.start_again();
            r.daemons.push(d);
        }
        Some(r)
    }

    /// One more replica's directory and config (keyed with the shared key), not started.
    pub fn prepared(&self) -> Daemon {
        self.prepared_keyed(&self.key)
    }

    /// [`Replicas::prepared`] keyed with `key`.
    pub fn prepared_keyed(&self, key: &Path) -> Daemon {
        let base = tempfile::Builder::new()
            .prefix("r")
            .tempdir_in(self.dir.path())
            .expect("replica dir")
            .keep();
        tc_tests::chmod(&base, 0o755);
        let config = base.join("config.toml");
        let text = replica_config(&self.cluster, key, &self.password, &self.extra);
        std::fs::write(&config, text + &self.tail).unwrap();
        tc_tests::chmod(&config, 0o644);
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

    /// A `tc-shim serve VAULT --http` gateway on replica `i`: its config and socket.
    pub fn gateway(&self, i: usize, vault: &str) -> Front {
        let d = &self.daemons[i];
        let argv = tc_tests::shim::serve_argv(vault, &d.config, &d.socket);
        Front::start_argv(argv, d.dir.path(), &[])
    }
}
