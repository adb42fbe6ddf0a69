//! A real PostgreSQL cluster for the replicas tests: `initdb` in a temp dir as an
//! unprivileged user (the tests run as root), on loopback TCP and a private socket dir.
//!
//! - [`Cluster`]: started with a least-privilege role `tc` (password auth) owning database
//!   `tc`; [`Cluster::restart`], [`Cluster::psql`]; stopped (immediate) on drop.
//! - [`replica_config`]: the `[daemon.postgres]` config text of one replica.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The unprivileged user the cluster runs as (created once if missing).
pub const PG_USER: &str = "tcpg";
/// The role and database tcd uses.
pub const ROLE: &str = "tc";
const PASSWORD: &str = "tc-test-password";

/// The PostgreSQL schema version this build's tcd migrates to (the number of migrations
/// in daemon/src/store/postgres/schema.rs): a new migration moves it, and the tests that
/// read it say so.
pub const SCHEMA_VERSION: &str = "3";

/// Where Debian's server binaries are: `pg_config --bindir`, else the newest
/// `/usr/lib/postgresql/*/bin` with an `initdb`.
pub fn bindir() -> Option<PathBuf> {
    let from_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|d| d.join("initdb").exists());
    from_config.or_else(|| {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|d| d.join("initdb").exists())
            .collect();
        dirs.sort();
        dirs.pop()
    })
}

/// Why the replicas tests cannot run here, if they cannot (not root, no PostgreSQL).
pub fn unavailable() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not root: cannot start PostgreSQL as an unprivileged user".into());
    }
    if bindir().is_none() {
        return Some("no PostgreSQL server (scripts/install-peers installs `postgresql`)".into());
    }
    None
}

fn ensure_user() {
    if nix::unistd::User::from_name(PG_USER)
        .ok()
        .flatten()
        .is_some()
    {
        return;
    }
    // Concurrent test binaries may race here: "already exists" (9) is success too.
    let st = Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            PG_USER,
        ])
        .status()
        .expect("useradd");
    assert!(
        st.success() || st.code() == Some(9),
        "useradd {PG_USER}: {st}"
    );
}

/// A running cluster; stopped and removed on drop.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub port: u16,
    /// Extra `-c` settings of every start.
    settings: String,
    bin: PathBuf,
    data: PathBuf,
    sock: PathBuf,
}

impl Cluster {
    /// initdb, start, and create the `tc` role (LOGIN, password) and database. Durable:
    /// every commit is fsync'd, as tcd expects of a production server.
    pub fn start() -> Cluster {
        Cluster::start_with("-c fsync=on")
    }

    /// [`Cluster::start`] without fsync, for suites that never crash the server (the
    /// ledger's unit suite: thousands of small commits).
    pub fn start_fast() -> Cluster {
        Cluster::start_with("-c fsync=off -c synchronous_commit=off")
    }

    fn start_with(settings: &str) -> Cluster {
        ensure_user();
        let bin = bindir().expect("PostgreSQL binaries");
        let dir = tempfile::Builder::new()
            .prefix("tc-pg-")
            .tempdir()
            .expect("tempdir");
        crate::chmod(dir.path(), 0o755);
        let (data, sock) = (dir.path().join("data"), dir.path().join("sock"));
        for d in [&data, &sock, &dir.path().join("log")] {
            std::fs::create_dir(d).expect("mkdir");
            chown(d);
        }
        let pwfile = dir.path().join("superuser-password");
        std::fs::write(&pwfile, "superuser-only\n").unwrap();
        chown(&pwfile);
        let c = Cluster {
            dir,
            port: crate::free_port(),
            settings: settings.to_string(),
            bin,
            data,
            sock,
        };
        let out = c.run_as_pg(
            "initdb",
            &[
                "-D",
                path(&c.data),
                "-U",
                "postgres",
                "--pwfile",
                path(&pwfile),
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        assert!(out.status.success(), "initdb: {}", text(&out));
        c.pg_ctl_start();
        c.psql(&format!("CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}'"));
        c.psql(&format!("CREATE DATABASE {ROLE} OWNER {ROLE}"));
        c
    }

    fn run_as_pg(&self, program: &str, args: &[&str]) -> Output {
        Command::new("setpriv")
            .args([
                &format!("--reuid={PG_USER}"),
                &format!("--regid={PG_USER}"),
                "--init-groups",
                "--",
            ])
            .arg(self.bin.join(program))
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .expect("setpriv")
    }

    fn pg_ctl_start(&self) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=300 {}",
            self.port,
            self.sock.display(),
            self.settings
        );
        let log = self.dir.path().join("log/postgres.log");
        let out = self.run_as_pg(
            "pg_ctl",
            &[
                "-D",
                path(&self.data),
                "-l",
                path(&log),
                "-o",
                &opts,
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
        assert!(
            out.status.success(),
            "pg_ctl start: {}\n{}",
            text(&out),
            self.log()
        );
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log/postgres.log")).unwrap_or_default()
    }

    /// Stops the server at once (no checkpoint, clients cut) and starts it again.
    pub fn restart(&self) {
        self.stop("immediate");
        self.pg_ctl_start();
    }

    /// Stops the server (`fast` or `immediate`); it stays down until [`Cluster::start_again`].
    pub fn stop(&self, mode: &str) {
        let out = self.run_as_pg(
            "pg_ctl",
            &["-D", path(&self.data), "-m", mode, "-w", "stop"],
        );
        assert!(out.status.success(), "pg_ctl stop: {}", text(&out));
    }

    /// Starts a stopped server again on the same port.
    pub fn start_again(&self) {
        self.pg_ctl_start();
    }

    /// Runs `sql` as the superuser in database `postgres` (where the roles and databases
    /// are made); returns psql's unaligned output.
    pub fn psql(&self, sql: &str) -> String {
        self.psql_in("postgres", sql)
    }

    /// [`Cluster::psql`] in tcd's database.
    pub fn query(&self, sql: &str) -> String {
        self.psql_in(ROLE, sql)
    }

    fn psql_in(&self, database: &str, sql: &str) -> String {
        let port = self.port.to_string();
        let out = self.run_as_pg(
            "psql",
            &[
                "-h",
                path(&self.sock),
                "-p",
                &port,
                "-U",
                "postgres",
                "-d",
                database,
                "-v",
                "ON_ERROR_STOP=1",
                "-At",
                "-c",
                sql,
            ],
        );
        assert!(out.status.success(), "psql {sql}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The server's processes: the postmaster (first line of `postmaster.pid`) and its
    /// children (one backend per connection, and the background workers).
    pub fn server_pids(&self) -> Vec<u32> {
        let pidfile = std::fs::read_to_string(self.data.join("postmaster.pid")).unwrap_or_default();
        let Some(main) = pidfile
            .lines()
            .next()
            .and_then(|l| l.trim().parse::<u32>().ok())
        else {
            return Vec::new();
        };
        let mut pids = vec![main];
        pids.extend(
            crate::bench::parents()
                .into_iter()
                .filter(|(_, parent)| *parent == main)
                .map(|(pid, _)| pid),
        );
        pids
    }

    /// The URL tcd connects with (no password: see [`Cluster::password_file`]).
    pub fn url(&self) -> String {
        format!("postgresql://{ROLE}@127.0.0.1:{}/{ROLE}", self.port)
    }

    /// [`Cluster::url`] with the password in it, for test code that connects directly
    /// (tcd's config refuses one there).
    pub fn url_with_password(&self) -> String {
        format!(
            "postgresql://{ROLE}:{PASSWORD}@127.0.0.1:{}/{ROLE}",
            self.port
        )
    }

    /// A 0600 file in `dir` holding the role's password.
    pub fn password_file(&self, dir: &Path) -> PathBuf {
        let p = dir.join("pg-password");
        std::fs::write(&p, format!("{PASSWORD}\n")).unwrap();
        crate::chmod(&p, 0o600);
        p
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.run_as_pg(
            "pg_ctl",
            &["-D", path(&self.data), "-m", "immediate", "-w", "stop"],
        );
    }
}

/// A fresh 32-byte key file (0600) in `dir`, as an operator provisions one.
pub fn key_file(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    let mut key = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").unwrap(), &mut key).unwrap();
    std::fs::write(&p, key).unwrap();
    crate::chmod(&p, 0o600);
    p
}

/// The config of one replica of the ledger in `cluster`, keyed by `key`.
pub fn replica_config(cluster: &Cluster, key: &Path, password: &Path, extra: &str) -> String {
    replica_config_with_pool(cluster, key, password, extra, 8)
}

/// [`replica_config`] with `pool_size = pool`.
pub fn replica_config_with_pool(
    cluster: &Cluster,
    key: &Path,
    password: &Path,
    extra: &str,
    pool: u32,
) -> String {
    format!(
        "[daemon]\nelicit_ttl_seconds = 300\n{}{extra}\n[daemon.postgres]\nurl = \"{}\"\n\
         password_file = \"{}\"\nsecret_file = \"{}\"\npool_size = {pool}\n",
        crate::UNLIMITED_RATE,
        cluster.url(),
        password.display(),
        key.display()
    )
}

fn chown(p: &Path) {
    let u = nix::unistd::User::from_name(PG_USER)
        .unwrap()
        .expect(PG_USER);
    nix::unistd::chown(p, Some(u.uid), Some(u.gid)).expect("chown");
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
