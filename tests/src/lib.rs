//! Harness for the cross-binary tests (and the benchmarks' `tcd`): a real `tcd` on a temp
//! socket, gRPC clients, the binaries of `target/debug`, and small helpers for bindings
//! and refusals.

pub mod bench;
pub mod browser;

pub mod elicit;
pub mod guarded;
pub mod http;
pub mod issuer;
pub mod netns;
pub mod page;
pub mod piped;
pub mod postgres;
pub mod pty;
pub mod receiver;
pub mod rmcp_client;
pub mod rmcp_http;
pub mod sdk_clients;
pub mod security;
pub mod shim;

use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tc_proto::v1;
use tc_proto::v1::confirm_client::ConfirmClient;
use tonic::transport::Channel;

pub use tc_core::Reason;

/// A gRPC client of `tcd`.
pub type Client = ConfirmClient<Channel>;

/// `target/debug` (or whichever profile dir the running test binary lives in).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// The path of a workspace binary (`tcd`, `tcctl`, ...), which must have been built.
pub fn bin(name: &str) -> PathBuf {
    existing(
        bin_dir().join(name),
        "not built (run `cargo build --workspace`)",
    )
}

/// `p`, which must be a file; else the test fails saying what is `missing` and how to
/// get it.
#[track_caller]
pub fn existing(p: PathBuf, missing: &str) -> PathBuf {
    assert!(p.is_file(), "{} {missing}", p.display());
    p
}

/// The workspace root (the parent of this `tests` package).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Where the pinned MCP peers are installed: `$TC_PEERS`, default `<workspace>/.peers`
/// (`scripts/install-peers`); not checked, each test asserts the files it needs.
pub fn peers_dir() -> PathBuf {
    std::env::var_os("TC_PEERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join(".peers"))
}

/// Whether a workspace binary has been built.
pub fn have_bin(name: &str) -> bool {
    bin_dir().join(name).exists()
}

/// 64 lowercase hex digits: the SHA-256 of `s`.
pub fn h(s: &str) -> String {
    tc_core::hash::sha256_hex(s.as_bytes())
}

/// xorshift64*: a small deterministic PRNG for the randomized tests, so a printed seed
/// replays a run exactly.
pub struct Rng(u64);

impl Rng {
    /// Seeded; a zero seed (whose xorshift state would stay zero) is replaced by a fixed
    /// non-zero one.
    pub fn new(seed: u64) -> Rng {
        Rng(if seed == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            seed
        })
    }

    /// The next 64 bits (`next_u64`, not `next`: this is no `Iterator`).
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform-ish in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// One element of `xs`.
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

/// `$name` parsed as a `T` (a seed or a count a run can be replayed or scaled with);
/// None when unset, so the caller's default applies. An unparsable value panics: a
/// replay asked for with a typo must not quietly run another seed.
pub fn env_parse<T: std::str::FromStr>(name: &str) -> Option<T> {
    let v = std::env::var(name).ok()?;
    match v.parse() {
        Ok(x) => Some(x),
        Err(_) => panic!("{name}={v:?} is not a valid {}", std::any::type_name::<T>()),
    }
}

/// A binding whose args_hash is `h(args)`.
pub fn binding(vault: &str, tool: &str, caller: &str, args: &str) -> v1::Binding {
    v1::Binding {
        vault: vault.into(),
        tool: tool.into(),
        caller: caller.into(),
        args_hash: h(args),
    }
}

/// The refusal reason of a gRPC error.
pub fn reason_of(s: &tonic::Status) -> Option<Reason> {
    tc_proto::reason(s)
}

/// Asserts `r` is a refusal with `want`, returning the status for more checks.
#[track_caller]
pub fn refused<T: std::fmt::Debug>(r: Result<T, tonic::Status>, want: Reason) -> tonic::Status {
    match r {
        Ok(v) => panic!("expected refusal {want}, got Ok({v:?})"),
        Err(s) => {
            assert_eq!(reason_of(&s), Some(want), "status: {s:?}");
            s
        }
    }
}

/// `[daemon]` keys that lift the per-caller rate limit, for daemons under load on purpose.
pub const UNLIMITED_RATE: &str =
    "rate_limit_per_minute = 100000000\nrate_limit_burst = 100000000\n";

/// How to start a daemon.
#[derive(Debug, Clone)]
pub struct DaemonOpts {
    /// `elicit_ttl_seconds` of the config [`Daemon::prepared`] writes (unused by
    /// [`Daemon::prepared_over`], whose caller writes the config).
    pub ttl_seconds: u32,
    pub ephemeral: bool,
}

impl Default for DaemonOpts {
    fn default() -> Self {
        DaemonOpts {
            ttl_seconds: 300,
            ephemeral: false,
        }
    }
}

/// A `tcd` with its own temp directory (its stderr logs, and by default its socket, cache
/// dir and config); killed on drop. The one place the tests and the benchmarks start
/// `tcd` from.
pub struct Daemon {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub cache_dir: PathBuf,
    pub config: PathBuf,
    pub opts: DaemonOpts,
    /// Set on every start after the harness's own (see [`Daemon::env`]).
    envs: Vec<(String, String)>,
    /// The `tcd` binary to run (see [`Daemon::program`]); None: `bin("tcd")`.
    program: Option<PathBuf>,
    child: Option<Child>,
    starts: u32,
}

impl Daemon {
    /// Starts `tcd` with the default options.
    pub fn start() -> Daemon {
        Daemon::start_with(DaemonOpts::default())
    }

    /// Starts `tcd` whose tokens and requests live `ttl_seconds` (the expiry tests').
    pub fn with_ttl(ttl_seconds: u32) -> Daemon {
        Daemon::start_with(DaemonOpts {
            ttl_seconds,
            ..Default::default()
        })
    }

    /// Starts `tcd` on a fresh temp dir.
    pub fn start_with(opts: DaemonOpts) -> Daemon {
        let mut d = Daemon::prepared(opts);
        d.spawn_and_wait();
        d
    }

    /// A fresh temp dir and config, not started yet ([`Daemon::start_again`] starts it).
    pub fn prepared(opts: DaemonOpts) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("tc-test-")
            .tempdir()
            .expect("tempdir");
        let socket = dir.path().join("run").join("tcd.sock");
        let cache_dir = dir.path().join("cache");
        let config = dir.path().join("config.toml");
        std::fs::write(
            &config,
            // Unlimited raises: these daemons serve load tests and benchmarks, which raise
            // thousands of requests as one caller (daemon_retention tests the limit).
            format!(
                "[daemon]\nelicit_ttl_seconds = {}\n{UNLIMITED_RATE}",
                opts.ttl_seconds
            ),
        )
        .expect("write config");
        Daemon::prepared_over(dir, socket, cache_dir, config, opts)
    }

    /// A daemon laid out in a caller's directory `base` (e.g. the shim tests' `Env`, a
    /// benchmark's temp dir): socket `base/run/tcd.sock`, cache dir `base/cache`, the
    /// caller's `config` (written by the caller before the start), stderr logs in a
    /// `tcd-logs-*` temp dir under `base`; not started yet.
    pub fn prepared_in(base: &Path, config: PathBuf, opts: DaemonOpts) -> Daemon {
        let logs = tempfile::Builder::new()
            .prefix("tcd-logs-")
            .tempdir_in(base)
            .expect("tcd log dir");
        Daemon::prepared_over(
            logs,
            base.join("run").join("tcd.sock"),
            base.join("cache"),
            config,
            opts,
        )
    }

    /// A daemon on a caller's socket, cache dir and config (already written), e.g. a
    /// tmpfs cache dir; not started yet. Its stderr logs go to `logs`, which it keeps (and
    /// removes) with itself.
    pub fn prepared_over(
        logs: tempfile::TempDir,
        socket: PathBuf,
        cache_dir: PathBuf,
        config: PathBuf,
        opts: DaemonOpts,
    ) -> Daemon {
        Daemon {
            dir: logs,
            socket,
            cache_dir,
            config,
            opts,
            envs: Vec::new(),
            program: None,
            child: None,
            starts: 0,
        }
    }

    /// Sets `key=value` in the environment of every later start (e.g. `TCD_LOG=trace`);
    /// overrides the harness's own settings.
    pub fn env(&mut self, key: &str, value: &str) -> &mut Daemon {
        self.envs.push((key.into(), value.into()));
        self
    }

    /// Runs `tcd` from `path` (a benchmark's release build, `$TCD_BIN`) instead of the
    /// one next to the test binary, on every later start.
    pub fn program(&mut self, path: PathBuf) -> &mut Daemon {
        self.program = Some(path);
        self
    }

    /// The argv that starts this daemon, the `tcd` binary first, for a launcher that
    /// execs it (e.g. `systemd-socket-activate`); the environment is the launcher's.
    pub fn argv(&self) -> Vec<OsString> {
        // sun_path holds 108 bytes, its terminating NUL included.
        assert!(
            self.socket.as_os_str().len() <= 107,
            "socket path {} is too long for a Unix socket; use a shorter temp or target dir",
            self.socket.display()
        );
        let program = self.program.clone().unwrap_or_else(|| bin("tcd"));
        let mut argv: Vec<OsString> = vec![
            program.into(),
            "--socket".into(),
            self.socket.clone().into(),
            "--cache-dir".into(),
            self.cache_dir.clone().into(),
            "--config".into(),
            self.config.clone().into(),
        ];
        if self.opts.ephemeral {
            argv.push("--ephemeral".into());
        }
        argv
    }

    /// The command line that starts this daemon (not spawned): [`Daemon::argv`] in the
    /// harness's environment.
    pub fn command(&self) -> Command {
        let argv = self.argv();
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]);
        c.env_remove("LISTEN_FDS")
            .env_remove("LISTEN_PID")
            .env_remove("NOTIFY_SOCKET")
            .env("TCD_LOG", "info");
        for (k, v) in &self.envs {
            c.env(k, v);
        }
        c
    }

    /// The stderr log of the n-th start (0-based).
    pub fn stderr_path(&self, n: u32) -> PathBuf {
        self.dir.path().join(format!("tcd.stderr.{n}"))
    }

    /// The stderr log of the current (latest) start.
    pub fn latest_stderr_path(&self) -> PathBuf {
        self.stderr_path(self.starts.saturating_sub(1))
    }

    /// Everything the current (latest) daemon wrote on stderr.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.latest_stderr_path()).unwrap_or_default()
    }

    fn spawn_and_wait(&mut self) {
        let child = self.spawn_child();
        self.child = Some(child);
    }

    /// Starts `tcd` and waits until it has printed its `elicit:` line and accepts on the
    /// socket; the caller owns the [`Child`] (to wait for its exit with its own deadline).
    pub fn spawn_child(&mut self) -> Child {
        let mut child = self.spawn_logged(self.command());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = child.try_wait().expect("try_wait") {
                panic!("tcd exited during startup ({st}):\n{}", self.stderr());
            }
            if self.stderr().contains("elicit:")
                && std::os::unix::net::UnixStream::connect(&self.socket).is_ok()
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "tcd did not come up:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        child
    }

    /// Spawns `c` (a [`Daemon::command`]) as the next start, stderr to its log.
    fn spawn_logged(&mut self, mut c: Command) -> Child {
        let n = self.starts;
        self.starts += 1;
        let err = File::create(self.stderr_path(n)).expect("stderr file");
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("spawn tcd")
    }

    /// Starts `tcd` expecting it to refuse to start: waits (up to 20 s) for it to exit
    /// and returns its exit status and stderr; panics if it keeps running. Judging the
    /// status and the text is the caller's.
    pub fn start_refused(&mut self) -> (ExitStatus, String) {
        assert!(self.child.is_none(), "still running");
        let mut c = self.command();
        // The test reads this stderr: no backtrace in it, whatever the caller's env asks.
        c.env("RUST_BACKTRACE", "0");
        let mut child = self.spawn_logged(c);
        let st = wait_timeout(&mut child, Duration::from_secs(20));
        if st.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let text = std::fs::read_to_string(self.latest_stderr_path()).expect("tcd stderr");
        let st = st.unwrap_or_else(|| panic!("tcd kept running:\n{text}"));
        (st, text)
    }

    /// Whether the daemon was started and has not been stopped.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The exit status, if the started daemon has exited by itself (None: still running).
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .expect("running")
            .try_wait()
            .expect("try_wait")
    }

    /// The pid of the running daemon.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// [`Daemon::start`] and a client of it: how most ledger tests begin.
    pub async fn start_with_client() -> (Daemon, Client) {
        let d = Daemon::start();
        let c = d.client().await;
        (d, c)
    }

    /// [`Daemon::with_ttl`] and a client of it.
    pub async fn with_ttl_and_client(ttl_seconds: u32) -> (Daemon, Client) {
        let d = Daemon::with_ttl(ttl_seconds);
        let c = d.client().await;
        (d, c)
    }

    /// A fresh gRPC client (its own connection).
    pub async fn client(&self) -> Client {
        let ch = tc_proto::connect(&self.socket).await.expect("connect");
        ConfirmClient::new(ch)
    }

    /// Sends `sig` and waits (up to 10 s) for the daemon to exit; one that does not is
    /// killed, then this panics.
    pub fn signal(&mut self, sig: nix::sys::signal::Signal) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).expect("kill");
        wait_timeout(&mut child, Duration::from_secs(10)).unwrap_or_else(|| {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tcd did not exit within 10 s of {sig}")
        })
    }

    /// SIGKILL: no chance to clean up.
    pub fn kill9(&mut self) {
        self.signal(nix::sys::signal::Signal::SIGKILL);
    }

    /// SIGTERM: a clean shutdown.
    pub fn stop(&mut self) -> ExitStatus {
        self.signal(nix::sys::signal::Signal::SIGTERM)
    }

    /// Starts the daemon again on the same directories (it must be stopped).
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "still running");
        self.spawn_and_wait();
    }

    /// Clean stop, then start again.
    pub fn restart(&mut self) {
        if self.child.is_some() {
            self.stop();
        }
        self.start_again();
    }

    /// Runs `tcctl` against this daemon with `args`.
    pub fn tcctl(&self, args: &[&str]) -> std::process::Output {
        self.tcctl_command(args).output().expect("run tcctl")
    }

    /// Grant `id` as `tcctl grants --json` lists it.
    #[track_caller]
    pub fn grant_listed(&self, id: &str) -> serde_json::Value {
        let o = self.tcctl(&["grants", "--json"]);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(o.status.success(), "{text}");
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["id"] == id)
            .unwrap_or_else(|| panic!("{id} not listed: {text}"))
    }

    /// `tcctl args` on this daemon's socket and config, stdin null, not started yet.
    pub fn tcctl_command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin("tcctl"));
        c.arg("--socket")
            .arg(&self.socket)
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .stdin(Stdio::null());
        c
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits for `child` up to `t`.
pub fn wait_timeout(child: &mut Child, t: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + t;
    loop {
        if let Some(st) = child.try_wait().ok()? {
            return Some(st);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A kB field (`VmRSS`, `VmHWM`) of `/proc/<pid>/status`: for the tests that bound what
/// a process holds.
#[track_caller]
pub fn status_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    bench::proc_field(&status, field).unwrap_or_else(|| panic!("{field} in {status}"))
}

/// Raises a request for `b` at `fp` with `summary` (what a human would be shown); tcd's
/// reply (the request id) or its refusal.
pub async fn raise_request(
    c: &mut Client,
    b: &v1::Binding,
    fp: &str,
    summary: &str,
) -> Result<v1::RaiseReply, tonic::Status> {
    c.raise(v1::RaiseRequest {
        binding: Some(b.clone()),
        state_fp: fp.into(),
        summary: summary.into(),
        ..Default::default()
    })
    .await
    .map(tonic::Response::into_inner)
}

/// [`raise_request`], which must succeed.
pub async fn raise_summarised(c: &mut Client, b: &v1::Binding, fp: &str, summary: &str) {
    raise_request(c, b, fp, summary).await.expect("raise");
}

/// Raises then mints a token for `b` at `fp`.
pub async fn raise_and_mint(c: &mut Client, b: &v1::Binding, fp: &str) -> String {
    raise_summarised(c, b, fp, "test").await;
    c.mint(v1::MintRequest {
        binding: Some(b.clone()),
        state_fp: None,
        ..Default::default()
    })
    .await
    .expect("mint")
    .into_inner()
    .token
}

/// Redeems `token` for `b` at `fp`.
pub async fn redeem(
    c: &mut Client,
    token: &str,
    b: &v1::Binding,
    fp: &str,
) -> Result<String, tonic::Status> {
    redeem_as(c, token, b, fp, false).await
}

/// Redeems the approval a human gave request-wise for `b` at `fp` (approve by request:
/// no token, the identical call's retry).
pub async fn redeem_approved(
    c: &mut Client,
    b: &v1::Binding,
    fp: &str,
) -> Result<String, tonic::Status> {
    redeem_as(c, "", b, fp, true).await
}

async fn redeem_as(
    c: &mut Client,
    token: &str,
    b: &v1::Binding,
    fp: &str,
    approved_request: bool,
) -> Result<String, tonic::Status> {
    c.redeem(v1::RedeemRequest {
        token: token.into(),
        binding: Some(b.clone()),
        current_state_fp: fp.into(),
        approved_request,
        under_grant: false,
    })
    .await
    .map(|r| r.into_inner().redemption_id)
}

/// Records that the call redeemed as `redemption_id` ran (by the CLI-token route): what
/// the shim tells tcd once the handler has run.
pub async fn record_consumed(
    c: &mut Client,
    b: &v1::Binding,
    fp: &str,
    redemption_id: &str,
) -> Result<(), tonic::Status> {
    c.record_consumed(v1::RecordConsumedRequest {
        binding: Some(b.clone()),
        state_fp: fp.into(),
        route: "cli_token".into(),
        redemption_id: redemption_id.into(),
    })
    .await
    .map(drop)
}

/// The daemon's counters now.
pub async fn counters(c: &mut Client) -> Vec<v1::Counter> {
    c.counters(v1::CountersRequest {})
        .await
        .expect("counters")
        .into_inner()
        .counters
}

/// How many events of `kind` the log holds.
pub async fn count_events(c: &mut Client, kind: &str) -> usize {
    events(c).await.iter().filter(|e| e.kind == kind).count()
}

/// The event log from its start: what is logged so far, then (with `follow`) each new
/// event as it commits.
pub async fn event_stream(
    c: &mut Client,
    follow: bool,
) -> Result<tonic::Streaming<v1::Event>, tonic::Status> {
    let all = v1::ListEventsRequest {
        after_id: 0,
        limit: 0,
        follow,
    };
    c.list_events(all).await.map(|r| r.into_inner())
}

/// The next event of `kind` on the follow stream `s`, waiting at most `within` (the
/// stream is the only way a follower learns of another replica's commit).
pub async fn next_event_of(
    s: &mut tonic::Streaming<v1::Event>,
    kind: &str,
    within: Duration,
) -> v1::Event {
    let next = async {
        loop {
            let e = s.message().await.expect("stream").expect("event");
            if e.kind == kind {
                return e;
            }
        }
    };
    tokio::time::timeout(within, next)
        .await
        .unwrap_or_else(|_| panic!("no {kind} event on the stream within {within:?}"))
}

/// The events of `s` until it ends.
pub async fn collect_events(
    mut s: tonic::Streaming<v1::Event>,
) -> Result<Vec<v1::Event>, tonic::Status> {
    let mut out = Vec::new();
    while let Some(e) = s.message().await? {
        out.push(e);
    }
    Ok(out)
}

/// All events so far (no follow).
pub async fn events(c: &mut Client) -> Vec<v1::Event> {
    let s = event_stream(c, false).await.expect("list events");
    collect_events(s).await.expect("event")
}

/// Writes `line` plus a newline to `w` and flushes.
pub fn send_line(w: &mut impl Write, line: &str) {
    w.write_all(line.as_bytes()).expect("write");
    w.write_all(b"\n").expect("write");
    w.flush().expect("flush");
}

/// Sets the mode bits of `p`.
pub fn chmod(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// The mode bits (0o7777) of `p`.
pub fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).expect("stat").permissions().mode() & 0o7777
}

/// A command prefix that runs what follows as `nobody` (`setpriv`, or `runuser` where
/// there is no setpriv); None when not root, and the caller skips saying why.
pub fn as_nobody() -> Option<Command> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    if Path::new("/usr/bin/setpriv").exists() || Path::new("/bin/setpriv").exists() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]);
        Some(c)
    } else {
        let mut c = Command::new("runuser");
        c.args(["-u", "nobody", "--"]);
        Some(c)
    }
}

/// A command prefix running as `nobody` and a started daemon whose temp dir nobody may
/// pass through (the socket's own directory stays tcd's 0700); None when not root, after
/// printing that the test `needs` to skip.
pub fn nobody_beside_a_daemon(needs: &str) -> Option<(Command, Daemon)> {
    let Some(cmd) = as_nobody() else {
        eprintln!("skipped: needs root to {needs}");
        return None;
    };
    let d = Daemon::start();
    chmod(d.dir.path(), 0o711);
    Some((cmd, d))
}

/// `tcctl status` against `socket` with no config, run under `prefix` (another user,
/// as [`as_nobody`] gives).
pub fn tcctl_status_under(mut prefix: Command, socket: &Path) -> std::process::Output {
    prefix
        .arg(bin("tcctl"))
        .arg("--socket")
        .arg(socket)
        .args(["--config", "/dev/null", "status"])
        .output()
        .expect("run tcctl")
}

/// A loopback TCP port free right now (the OS picks it), for a tcd's `[approvals] listen`:
/// fixed ports collide between tests run in parallel.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The full name libtest knows test `name` by, from the file its module is (`file!()` or
/// `Location::caller().file()`): `tests/tests/guarded/deploy.rs` and `probe` give
/// `deploy::probe`, for re-running one test of this binary with `--exact`.
pub fn test_path(file: &str, name: &str) -> String {
    let stem = Path::new(file)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("main");
    if stem == "main" {
        name.to_string()
    } else {
        format!("{stem}::{name}")
    }
}
