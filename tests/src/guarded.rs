//! Shared by the guarded-mode tests (run as root): system users made with `useradd`,
//! commands run as them with `setpriv`, a private mount namespace in which /etc/tc,
//! /run/tc and /var/lib/tc are fresh tmpfs mounts (nothing leaks onto the host or into
//! parallel tests), a guarded `tcd` started as its daemon user, and gRPC calls made as
//! another uid (the test binary re-executed under setpriv).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub use crate::{bin, chmod};

/// The daemon user the tests run tcd as (`[guarded] daemon_user`).
pub const DAEMON: &str = "tcdtest";
/// A human listed in `[guarded] humans`.
pub const HUMAN: &str = "tchuman";
/// A second human, listed only by [`Deployment::start_two_humans`] (tests/tests/guarded/humans_apart.rs).
pub const HUMAN2: &str = "tchuman2";
/// A uid that is not.
pub const OTHER: &str = "tcother";

/// Marks the process re-executed inside the private mount namespace.
const NS_MARK: &str = "TC_GUARDED_NS";
/// Marks the process re-executed as another uid to make one gRPC call.
const PROBE_MARK: &str = "TC_GUARDED_PROBE";

/// A system account: name, uid, gid.
#[derive(Debug, Clone)]
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// `name`, created with `useradd --system` if it does not exist yet (idempotent, and
/// safe against parallel tests creating it at the same time).
pub fn user(name: &str) -> User {
    for _ in 0..50 {
        if let Ok(Some(u)) = nix::unistd::User::from_name(name) {
            return User {
                name: name.into(),
                uid: u.uid.as_raw(),
                gid: u.gid.as_raw(),
            };
        }
        // 9: exists (another test won the race); 10: /etc/passwd locked: retry.
        let st = Command::new("useradd")
            .args(["--system", "--user-group", "--no-create-home"])
            .args(["--shell", "/usr/sbin/nologin", name])
            .stderr(Stdio::null())
            .status()
            .expect("useradd");
        if !st.success() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    panic!("could not create user {name}");
}

/// Whether this process can run the guarded tests (root, setpriv, unshare, useradd).
pub fn can_run() -> bool {
    nix::unistd::geteuid().is_root()
        && ["setpriv", "unshare", "useradd", "mount"]
            .iter()
            .all(|p| which(p).is_some())
}

fn which(prog: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(prog))
            .find(|p| p.is_file())
    })
}

/// `program` as `u`: `setpriv --reuid --regid --clear-groups`, with a clean tc
/// environment (no TC_CONFIG, no XDG dirs) and `HOME` = `home`.
pub fn as_user(u: &User, home: &Path, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={}", u.uid))
        .arg(format!("--regid={}", u.gid))
        .arg("--clear-groups")
        .arg("--")
        .arg(program);
    clean_env(&mut c, home);
    c
}

/// Removes every variable that points tc somewhere, and sets `HOME`.
pub fn clean_env(c: &mut Command, home: &Path) {
    for v in [
        "TC_CONFIG",
        "XDG_CONFIG_HOME",
        "XDG_STATE_HOME",
        "XDG_RUNTIME_DIR",
    ] {
        c.env_remove(v);
    }
    c.env("HOME", home)
        .env_remove(PROBE_MARK)
        .env_remove(NS_MARK);
    c.stdin(Stdio::null());
}

/// Runs `c` and returns its output.
pub fn run(mut c: Command) -> Output {
    c.output().expect("run")
}

/// stdout + stderr of an output, for messages.
pub fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// What a command printed: its stdout, then its stderr (for checks on what it said,
/// wherever it said it).
pub fn printed(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs the calling test inside a private mount namespace. Outside: re-executes this
/// test binary (`--exact name`) under `unshare --mount --propagation private`, asserts
/// it passed and returns false (the caller returns). Inside: mounts fresh tmpfs over
/// /etc/tc (root 0755), /run/tc (the daemon user's, 0755) and /var/lib/tc (the daemon
/// user's, 0700) and returns true (the caller runs the scenario).
#[track_caller]
pub fn in_namespace(name: &str) -> bool {
    let name = &crate::test_path(std::panic::Location::caller().file(), name);
    in_namespace_at(name, false)
}

/// [`in_namespace`] of the test `name` (its full path), with `net`: in a new network
/// namespace too (`crate::netns::set_up`: the non-loopback [`crate::netns::ADDR`]).
fn in_namespace_at(name: &str, net: bool) -> bool {
    if let Some(mark) = std::env::var_os(NS_MARK) {
        if mark == "net" {
            crate::netns::set_up();
        }
        let d = user(DAEMON);
        for (dir, opts) in [
            ("/etc/tc", "mode=0755,uid=0,gid=0".to_string()),
            ("/run/tc", format!("mode=0755,uid={},gid={}", d.uid, d.gid)),
            (
                "/var/lib/tc",
                format!("mode=0700,uid={},gid={}", d.uid, d.gid),
            ),
        ] {
            let st = Command::new("mount")
                .args(["-t", "tmpfs", "-o", &opts, "tmpfs", dir])
                .status()
                .expect("mount");
            assert!(st.success(), "mount tmpfs on {dir}");
        }
        return true;
    }
    // The mount points: empty directories on the host, created once, never written.
    for dir in ["/etc/tc", "/run/tc", "/var/lib/tc"] {
        if !Path::new(dir).exists() {
            std::fs::create_dir_all(dir).expect("mount point");
        }
        assert!(
            !Path::new(dir).join("config.toml").exists()
                && !Path::new(dir).join("tcd.sock").exists(),
            "{dir} on this host is in use by a real tc; refusing to run over it"
        );
    }
    user(DAEMON);
    user(HUMAN);
    user(HUMAN2);
    user(OTHER);
    let exe = std::env::current_exe().expect("current_exe");
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private"])
        .args(net.then_some("--net"))
        .arg("--")
        .arg(exe)
        .args(["--exact", name, "--nocapture", "--test-threads", "1"])
        .env(NS_MARK, if net { "net" } else { "1" })
        .stdin(Stdio::null())
        .output()
        .expect("unshare");
    let all = text(&out);
    assert!(
        out.status.success() && all.contains("1 passed"),
        "{name} in its namespace:\n{all}"
    );
    false
}

/// A process killed (and reaped) on drop.
pub struct Proc {
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    /// What it wrote on stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns `c` with stderr to `log`, and waits until `socket` accepts connections.
pub fn spawn_serving(mut c: Command, log: PathBuf, socket: &Path) -> Proc {
    let err = std::fs::File::create(&log).expect("log");
    let child = c.stdout(Stdio::null()).stderr(err).spawn().expect("spawn");
    let mut p = Proc { child, log };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(st) = p.child.try_wait().expect("try_wait") {
            panic!("exited during startup ({st}):\n{}", p.stderr());
        }
        if std::os::unix::net::UnixStream::connect(socket).is_ok() {
            return p;
        }
        assert!(Instant::now() < deadline, "never served:\n{}", p.stderr());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `c` (a tcd expected to refuse to start); returns its stderr after it exits.
pub fn refused_start(mut c: Command) -> String {
    c.env("RUST_BACKTRACE", "0").stdout(Stdio::null());
    let out = c.output().expect("tcd");
    assert!(!out.status.success(), "tcd started: {}", text(&out));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A directory `u` owns (mode `mode`), under a fresh 0755 temp dir.
pub fn owned_dir(base: &Path, name: &str, u: &User, mode: u32) -> PathBuf {
    let d = base.join(name);
    std::fs::create_dir_all(&d).expect("mkdir");
    std::os::unix::fs::chown(&d, Some(u.uid), Some(u.gid)).expect("chown");
    chmod(&d, mode);
    d
}

/// A 0755 temp dir every test user can traverse.
pub fn open_tempdir() -> tempfile::TempDir {
    let t = tempfile::Builder::new()
        .prefix("tc-guarded-")
        .tempdir()
        .expect("tempdir");
    chmod(t.path(), 0o755);
    t
}

/// The outcome of one gRPC call: its code and refusal reason (`Ok` for success).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rpc {
    pub code: String,
    pub reason: String,
}

/// Calls `method` (with an empty request) on `socket` as `u`, by re-executing this
/// test binary's `probe_test` under setpriv (see [`probe_main`]).
#[track_caller]
pub fn rpc_as(u: &User, home: &Path, probe_test: &str, socket: &Path, method: &str) -> Rpc {
    let probe_test = &crate::test_path(std::panic::Location::caller().file(), probe_test);
    let exe = std::env::current_exe().expect("current_exe");
    let mut c = as_user(u, home, exe);
    c.args(["--exact", probe_test, "--nocapture", "--test-threads", "1"])
        .env(PROBE_MARK, format!("{method} {}", socket.display()));
    let out = run(c);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split("RPC-RESULT ").nth(1))
        .unwrap_or_else(|| panic!("probe printed no result:\n{}", text(&out)));
    let mut parts = line.split(' ');
    Rpc {
        code: parts.next().unwrap_or_default().into(),
        reason: parts.next().unwrap_or_default().into(),
    }
}

/// The body of the probe test: does nothing unless re-executed by [`rpc_as`]; then
/// makes the one call and prints `RPC-RESULT <code> <reason>`.
pub fn probe_main() {
    let Ok(spec) = std::env::var(PROBE_MARK) else {
        return;
    };
    let (method, socket) = spec.split_once(' ').expect("method socket");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let r = rt.block_on(call(method, Path::new(socket)));
    let (code, reason) = match r {
        Ok(()) => ("Ok".to_string(), "-".to_string()),
        Err(s) => (
            format!("{:?}", s.code()),
            tc_proto::reason(&s).map_or("-".into(), |r| r.to_string()),
        ),
    };
    println!("RPC-RESULT {code} {reason}");
}

/// One call with an empty request; a stream's first item decides.
pub async fn call(method: &str, socket: &Path) -> Result<(), tonic::Status> {
    use tc_proto::v1;
    let ch = tc_proto::connect(socket)
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut c = v1::confirm_client::ConfirmClient::new(ch);
    match method {
        "Status" => c.status(v1::StatusRequest {}).await.map(drop),
        "Counters" => c.counters(v1::CountersRequest {}).await.map(drop),
        "GetPolicy" => c.get_policy(v1::GetPolicyRequest {}).await.map(drop),
        "ListPending" => c
            .list_pending(v1::ListPendingRequest::default())
            .await
            .map(drop),
        "RotateSecret" => c.rotate_secret(v1::RotateSecretRequest {}).await.map(drop),
        "EnrollFactor" => c
            .enroll_factor(v1::EnrollFactorRequest::default())
            .await
            .map(drop),
        "UnlockFactor" => c
            .unlock_factor(v1::UnlockFactorRequest::default())
            .await
            .map(drop),
        "ListEvents" => {
            let mut s = c
                .list_events(v1::ListEventsRequest {
                    after_id: 0,
                    limit: 1,
                    follow: false,
                })
                .await?
                .into_inner();
            s.message().await.map(drop)
        }
        other => panic!("probe does not know {other}"),
    }
}

/// A guarded deployment at the fixed paths, inside a namespace from [`in_namespace`]:
/// /etc/tc/config.toml (root, 0644) and tcd running as [`DAEMON`] on /run/tc/tcd.sock.
pub struct Deployment {
    pub tcd: Option<Proc>,
    pub tmp: tempfile::TempDir,
    pub daemon: User,
    pub human: User,
    pub other: User,
    /// [`HUMAN2`]: one of the humans only when started by [`Deployment::start_two_humans`].
    pub human2: User,
    /// The human's `HOME` (theirs, 0700); their own config goes in `.config/tc/`.
    pub home: PathBuf,
    /// [`HUMAN2`]'s `HOME`.
    pub home2: PathBuf,
    /// `OTHER`'s `HOME`.
    pub other_home: PathBuf,
}

/// The system config's head: guarded, the test users.
pub fn system_head() -> String {
    system_head_for(&[HUMAN])
}

/// The system config's head with `humans` as `[guarded] humans`.
pub fn system_head_for(humans: &[&str]) -> String {
    let humans: Vec<String> = humans.iter().map(|h| format!("\"{h}\"")).collect();
    format!(
        "[daemon]\nmode = \"guarded\"\n[guarded]\ndaemon_user = \"{DAEMON}\"\nhumans = [{}]\n",
        humans.join(", ")
    )
}

impl Deployment {
    /// Writes /etc/tc/config.toml = [`system_head`] + `vaults`, starts tcd.
    pub fn start(vaults: &str) -> Deployment {
        Self::start_for(&[HUMAN], vaults)
    }

    /// As [`Deployment::start`], with [`HUMAN`] and [`HUMAN2`] both humans.
    pub fn start_two_humans(vaults: &str) -> Deployment {
        Self::start_for(&[HUMAN, HUMAN2], vaults)
    }

    fn start_for(humans: &[&str], vaults: &str) -> Deployment {
        let tmp = open_tempdir();
        let (daemon, human, other) = (user(DAEMON), user(HUMAN), user(OTHER));
        let human2 = user(HUMAN2);
        let home = owned_dir(tmp.path(), "home-human", &human, 0o700);
        let home2 = owned_dir(tmp.path(), "home-human2", &human2, 0o700);
        let other_home = owned_dir(tmp.path(), "home-other", &other, 0o700);
        write_system_config(&format!("{}{vaults}", system_head_for(humans)));
        let mut d = Deployment {
            tcd: None,
            tmp,
            daemon,
            human,
            other,
            human2,
            home,
            home2,
            other_home,
        };
        d.start_tcd();
        d
    }

    /// Starts the guarded tcd as the daemon user, from /etc/tc/config.toml alone.
    pub fn start_tcd(&mut self) {
        let mut c = as_user(&self.daemon, Path::new("/nonexistent"), bin("tcd"));
        c.args(["--config", "/etc/tc/config.toml"])
            .env("TCD_LOG", "info");
        let log = self.tmp.path().join("tcd.log");
        self.tcd = Some(spawn_serving(
            c,
            log,
            Path::new(tc_core::guarded::SYSTEM_SOCKET),
        ));
    }

    /// Stops tcd (and waits), if it runs.
    pub fn stop_tcd(&mut self) {
        self.tcd = None;
        let _ = std::fs::remove_file(tc_core::guarded::SYSTEM_SOCKET);
    }

    /// The argv of a `tc-shim serve VAULT FLAGS…` run as the human (as the agent's editor
    /// would start it), clean of tc's variables, with `extra_env` (`NAME=value`).
    pub fn shim_argv(&self, vault: &str, extra_env: &[String], flags: &[&str]) -> Vec<String> {
        self.shim_argv_as(&self.human, &self.home, vault, extra_env, flags)
    }

    /// [`Deployment::shim_argv`] as `h`, with `HOME` = `home`.
    pub fn shim_argv_as(
        &self,
        h: &User,
        home: &Path,
        vault: &str,
        extra_env: &[String],
        flags: &[&str],
    ) -> Vec<String> {
        let mut v: Vec<String> = vec![
            "setpriv".into(),
            format!("--reuid={}", h.uid),
            format!("--regid={}", h.gid),
            "--clear-groups".into(),
            "--".into(),
            "env".into(),
        ];
        for var in [
            "TC_CONFIG",
            "XDG_CONFIG_HOME",
            "XDG_STATE_HOME",
            "XDG_RUNTIME_DIR",
        ] {
            v.extend(["-u".into(), var.into()]);
        }
        v.push(format!("HOME={}", home.display()));
        v.extend(extra_env.iter().cloned());
        v.extend([
            bin("tc-shim").display().to_string(),
            "serve".into(),
            vault.into(),
        ]);
        v.extend(flags.iter().map(|f| f.to_string()));
        v
    }

    /// `tcctl args` as the human.
    pub fn tcctl_as_human(&self, args: &[&str]) -> Output {
        self.tcctl_as(&self.human, &self.home, args)
    }

    /// `tcctl args` as `u`, with `HOME` = `home`.
    pub fn tcctl_as(&self, u: &User, home: &Path, args: &[&str]) -> Output {
        let mut c = as_user(u, home, bin("tcctl"));
        c.args(args);
        run(c)
    }

    /// `tcctl args` as root.
    pub fn tcctl_as_root(&self, args: &[&str]) -> Output {
        let mut c = Command::new(bin("tcctl"));
        clean_env(&mut c, self.tmp.path());
        c.args(args);
        run(c)
    }

    /// Writes the human's own config (`~/.config/tc/config.toml`), owned by them.
    pub fn write_user_config(&self, text: &str) {
        let dir = self.home.join(".config/tc");
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("config.toml");
        std::fs::write(&f, text).unwrap();
        for p in [self.home.join(".config"), dir, f] {
            std::os::unix::fs::chown(&p, Some(self.human.uid), Some(self.human.gid)).unwrap();
        }
    }

    /// Removes the human's own config.
    pub fn remove_user_config(&self) {
        let _ = std::fs::remove_file(self.home.join(".config/tc/config.toml"));
    }
}

/// Writes /etc/tc/config.toml, root-owned, 0644.
pub fn write_system_config(text: &str) {
    let p = Path::new(tc_core::guarded::SYSTEM_CONFIG);
    std::fs::write(p, text).expect("write /etc/tc/config.toml");
    chmod(p, 0o644);
}

// ---- the guarded scene: one gated vault, its humans, their agents and the page ----

/// The Python the pty relay (tests/fixtures/pty_run.py) runs on.
pub const PYTHON: &str = "/usr/bin/python3";

/// Whether the calling test must skip: true (and says why) unless this process can run
/// the guarded tests ([`can_run`]) and every path of `needs` exists.
pub fn skip(needs: &[&str]) -> bool {
    let ok = can_run() && needs.iter().all(|p| Path::new(p).exists());
    if !ok {
        let mut all = vec!["root", "setpriv", "unshare", "useradd", "mount"];
        all.extend_from_slice(needs);
        eprintln!("skipped: needs {}", all.join(", "));
    }
    !ok
}

/// `args` on a fresh pty that is its controlling terminal, the relay run as `who` (None:
/// root), so the pty belongs to whoever is at it.
pub fn on_pty(who: Option<(&User, &Path)>, args: &[&str]) -> crate::pty::Pty {
    let mut c = match who {
        Some((u, home)) => as_user(u, home, PYTHON),
        None => {
            let mut c = Command::new(PYTHON);
            clean_env(&mut c, Path::new("/root"));
            c
        }
    };
    c.arg(crate::workspace().join("tests/fixtures/pty_run.py"))
        .args(args);
    crate::pty::Pty::start(c)
}

/// What a [`Scene`] deploys: vault `fs` (server-filesystem, `write_file` gated on its
/// `path`) over a root [`HUMAN`] owns, holding `files` (by default note.txt = "v0"), and
/// whatever of the page, legacy prompts, a diff preview and a second human the test asks
/// for (`Setup { page: true, ..Setup::default() }`).
#[derive(Debug, Clone)]
pub struct Setup {
    /// The approval page on a free loopback port ([`Scene::port`]).
    pub page: bool,
    /// The vault's `legacy_elicitation_shim = true` (in-protocol prompts for legacy clients).
    pub legacy_prompts: bool,
    /// The gate's diff preview of `write_file(path, content)`.
    pub preview: bool,
    /// [`HUMAN2`] one of the humans too.
    pub two_humans: bool,
    /// The vault root's mode.
    pub root_mode: u32,
    /// The root's files: (name, content, mode), all [`HUMAN`]'s.
    pub files: Vec<(&'static str, &'static str, u32)>,
    /// The remote page (`[approvals] remote`) on [`crate::netns::ADDR`]:8443 as
    /// `https://phone.tc.test:8443`, self-signed; the test runs in its own network
    /// namespace too.
    pub remote: bool,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            page: false,
            legacy_prompts: false,
            preview: false,
            two_humans: false,
            root_mode: 0o755,
            files: vec![("note.txt", "v0", 0o644)],
            remote: false,
        }
    }
}

impl Setup {
    /// For the calling test: None when it must skip ([`skip`], with `needs`) or has just
    /// run in its own namespace ([`in_namespace`]); the caller then returns. Inside the
    /// namespace: the scene, started.
    #[track_caller]
    pub fn start_in_namespace(self, name: &str, needs: &[&str]) -> Option<Scene> {
        let name = &crate::test_path(std::panic::Location::caller().file(), name);
        if skip(needs) || (self.remote && !crate::netns::can_run()) {
            return None;
        }
        if !in_namespace_at(name, self.remote) {
            return None;
        }
        Some(self.start())
    }

    /// Makes the root and its files, writes /etc/tc/config.toml and starts tcd.
    pub fn start(self) -> Scene {
        let t = open_tempdir();
        let human = user(HUMAN);
        let root = owned_dir(t.path(), "vault", &human, self.root_mode);
        for &(name, content, mode) in &self.files {
            let f = root.join(name);
            std::fs::write(&f, content).unwrap();
            std::os::unix::fs::chown(&f, Some(human.uid), Some(human.gid)).unwrap();
            chmod(&f, mode);
        }
        let port = if self.page { crate::free_port() } else { 0 };
        let r = root.display();
        let mut vaults = String::new();
        if self.page || self.remote {
            vaults += "[approvals]\n";
        }
        if self.page {
            vaults += &format!("listen = \"127.0.0.1:{port}\"\n");
        }
        if self.remote {
            let a = crate::netns::ADDR;
            vaults += &format!("remote = {{ listen = \"{a}:8443\", public_url = \"https://phone.tc.test:8443\", tls = \"self-signed\" }}\n");
        }
        vaults += "\n";
        vaults += &format!(
            "[[vaults]]\nid = \"fs\"\nroot = \"{r}\"\ncommand = [\"node\", \"{}\", \"{r}\"]\n",
            crate::shim::filesystem_server().display()
        );
        if self.legacy_prompts {
            vaults += "legacy_elicitation_shim = true\n";
        }
        vaults += "\n[[vaults.gates]]\ntool = \"write_file\"\ntargets = { paths = [\"path\"] }\n";
        if self.preview {
            vaults += "preview = { diff = { path = \"path\", content = \"content\" } }\n";
        }
        let d = if self.two_humans {
            Deployment::start_two_humans(&vaults)
        } else {
            Deployment::start(&vaults)
        };
        Scene {
            d,
            root,
            port,
            _t: t,
        }
    }
}

/// The guarded scene the guarded tests share: a [`Deployment`] as [`Setup`] made it, the
/// vault root, and the page's port (0: no page).
pub struct Scene {
    pub d: Deployment,
    pub root: PathBuf,
    pub port: u16,
    _t: tempfile::TempDir,
}

/// `write_file` of note.txt with `content`.
pub fn write(content: &str) -> serde_json::Value {
    serde_json::json!({"path": "note.txt", "content": content})
}

/// The request id of a guarded `elicit_required` refusal.
#[track_caller]
pub fn refused_id(r: &serde_json::Value) -> String {
    use crate::shim::{code, request_id, sc};
    assert_eq!(code(r).as_deref(), Some("elicit_required"), "{r}");
    assert_eq!(sc(r)["details"]["mode"], "guarded", "{r}");
    request_id(r)
}

impl Scene {
    /// The default [`Setup`]: no page, one human, note.txt = "v0".
    pub fn start() -> Scene {
        Setup::default().start()
    }

    /// What the root's file `name` holds.
    pub fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.root.join(name)).unwrap()
    }

    /// What note.txt holds.
    pub fn note(&self) -> String {
        self.file("note.txt")
    }

    /// [`HUMAN`] and their `HOME`.
    pub fn h1(&self) -> (&User, &Path) {
        (&self.d.human, &self.d.home)
    }

    /// [`HUMAN2`] and their `HOME`.
    pub fn h2(&self) -> (&User, &Path) {
        (&self.d.human2, &self.d.home2)
    }

    /// Root enrolls [`HUMAN`] (see [`Scene::enroll_user`]).
    pub fn enroll(&self) -> Vec<u8> {
        self.enroll_user(HUMAN)
    }

    /// Root enrolls `name` on a pty, confirming with step T−1's code (T stays fresh);
    /// returns the secret read from what tcctl showed.
    pub fn enroll_user(&self, name: &str) -> Vec<u8> {
        let tcctl = bin("tcctl").display().to_string();
        let mut p = on_pty(None, &[&tcctl, "enroll", "totp", "--user", name]);
        let (shown, b32) = crate::pty::enrollment_shown(&p);
        assert!(shown.contains(&format!("otpauth://totp/tc:{name}?secret={b32}&")));
        let secret = crate::pty::base32_decode(&b32);
        crate::pty::confirm_enrollment(&mut p, &secret);
        let (rc, out) = p.finish();
        assert!(rc == 0 && out.contains("enrolled"), "{out}");
        secret
    }

    /// The agent of [`HUMAN`] (see [`Scene::agent_as`]).
    pub fn agent(&self) -> crate::shim::RawClient {
        self.agent_as(self.h1())
    }

    /// An agent: a raw MCP client on a tc-shim run as `who` (no elicitation capability:
    /// the refusal route).
    pub fn agent_as(&self, who: (&User, &Path)) -> crate::shim::RawClient {
        let argv = self.d.shim_argv_as(who.0, who.1, "fs", &[], &[]);
        let mut c = crate::shim::RawClient::start(&argv);
        let init = c.initialize();
        assert!(init["result"]["serverInfo"].is_object(), "{init}");
        c
    }

    /// `tcctl args` as `who`.
    pub fn tcctl(&self, who: (&User, &Path), args: &[&str]) -> Output {
        self.d.tcctl_as(who.0, who.1, args)
    }

    /// `tcctl page --print` as `who`: the one-time link.
    pub fn link(&self, who: (&User, &Path)) -> String {
        let o = self.tcctl(who, &["page", "--print"]);
        assert!(o.status.success(), "{}", text(&o));
        let link = String::from_utf8_lossy(&o.stdout).trim().to_string();
        let prefix = format!("http://localhost:{}/open?t=", self.port);
        assert!(
            link.starts_with(&prefix) && link.len() == prefix.len() + 64,
            "{link}"
        );
        link
    }

    /// A page session of `who`, opened the only way there is (a link of theirs, spent
    /// and used from sockets of theirs).
    pub fn session(&self, who: (&User, &Path)) -> crate::page::PageSession {
        crate::page::PageSession::open_as(&self.link(who), Some(who.0.uid))
    }

    /// `tcctl <args> --json` as `who` (None: root): (raw stdout, one object a line).
    fn json_lines(
        &self,
        who: Option<(&User, &Path)>,
        args: &[&str],
    ) -> (String, Vec<serde_json::Value>) {
        let o = match who {
            Some(w) => self.tcctl(w, args),
            None => self.d.tcctl_as_root(args),
        };
        assert!(o.status.success(), "{}", text(&o));
        let raw = String::from_utf8_lossy(&o.stdout).into_owned();
        let rows = raw
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (raw, rows)
    }

    /// `tcctl pending --json` as `who` (None: root): (raw stdout, one object a line).
    pub fn pending(&self, who: Option<(&User, &Path)>) -> (String, Vec<serde_json::Value>) {
        self.json_lines(who, &["pending", "--json"])
    }

    /// `tcctl events --json` as `who` (None: root): (raw stdout, one object a line).
    pub fn events_of(&self, who: Option<(&User, &Path)>) -> (String, Vec<serde_json::Value>) {
        self.json_lines(who, &["events", "--json"])
    }

    /// Root's view of the audit events of `kind` (details parsed).
    pub fn logged(&self, kind: &str) -> Vec<serde_json::Value> {
        self.events_of(None)
            .1
            .into_iter()
            .filter(|e| e["kind"] == kind)
            .map(|mut e| {
                if let Some(s) = e["detail"].as_str() {
                    e["detail"] = serde_json::from_str(s).unwrap_or(serde_json::Value::Null);
                }
                e
            })
            .collect()
    }

    /// How many audit events of `kind` tcd logged.
    pub fn events(&self, kind: &str) -> usize {
        self.logged(kind).len()
    }

    /// The status tcd reports for request `id` to root ("" when not listed).
    pub fn status(&self, id: &str) -> String {
        self.pending(None)
            .1
            .into_iter()
            .find(|v| v["request_id"] == id)
            .map(|v| v["status"].as_str().unwrap().to_string())
            .unwrap_or_default()
    }
}
