//! The `tc-shim serve` command: reads the command line and the config (or, guarded, the
//! policy from tcd), builds the vault's policy, governor and downstream, starts one front.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tc_core::config::VaultConfig;

use crate::daemon_client::Daemon;
use crate::downstream::{Downstream, Remote};
use crate::engine::govern::governor::Governor;
use crate::engine::judge::policy::Policy;
use crate::front::{http, stdio};

#[derive(Parser)]
#[command(
    name = "tc-shim",
    version,
    about = "MCP stdio proxy gating tool calls behind human confirmation"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Proxy the vault's downstream MCP server over stdio.
    Serve {
        /// Vault id from the config.
        vault: String,
        /// Config file (default: $TC_CONFIG, else the XDG location).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Daemon socket (default: daemon.socket from the config, else the default path).
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Serve over MCP Streamable HTTP at ADDR (host:port) instead of stdio; without a
        /// value, at `[vaults.http] listen`.
        #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "")]
        http: Option<String>,
        /// Downstream command (overrides vault.command).
        #[arg(last = true)]
        command: Vec<String>,
    },
}

/// The process's entry: logs to stderr (`TC_LOG`), serves, returns the exit code (2 when
/// it could not start, after saying why).
pub fn main() -> i32 {
    tracing_subscriber::fmt()
        .with_writer(tc_core::display::stderr_log)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TC_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match run() {
        Ok(code) => code,
        Err(e) => {
            tc_core::eprint_failure("tc-shim", &e);
            2
        }
    }
}

/// The HTTP front's threads at most, by default: one per core up to this many.
const HTTP_WORKERS_MAX: usize = 4;

/// `TC_HTTP_WORKERS` (1–64), else one thread per core up to [`HTTP_WORKERS_MAX`].
fn http_workers() -> anyhow::Result<usize> {
    match std::env::var("TC_HTTP_WORKERS") {
        Err(_) => Ok(std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(HTTP_WORKERS_MAX)),
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n @ 1..=64) => Ok(n),
            _ => anyhow::bail!("TC_HTTP_WORKERS={v:?}: expected a number of threads from 1 to 64"),
        },
    }
}

/// The `serve` subcommand's arguments.
struct Args {
    vault: String,
    config: Option<PathBuf>,
    socket: Option<PathBuf>,
    http: Option<String>,
    command: Vec<String>,
}

/// What the config and the daemon give every front.
struct Setting {
    cfg: tc_core::Config,
    daemon: Daemon,
    guarded: Option<tc_core::guarded::GuardedClient>,
}

fn run() -> anyhow::Result<i32> {
    let Cmd::Serve {
        vault,
        config,
        socket,
        http,
        command,
    } = Cli::parse().cmd;
    let args = Args {
        vault,
        config,
        socket,
        http,
        command,
    };
    // One single-threaded runtime: the proxy is I/O-bound and a message bouncing between
    // the workers of a multi-threaded one costs more than it gains (docs/BENCHMARKS.md,
    // "Shim"; for the HTTP front, "HTTP front": on two cores a second worker took a lone
    // caller's added p50 from 1.3× to 2.6× the floor's). The HTTP front adds threads of
    // its own that each serve whole connections (`front/http/workers.rs`). This runtime
    // lives as long as the process serves: the daemon's gRPC channel runs its connection
    // on the runtime it was opened on. Blocking work (hashing targets) stays short and
    // bounded by the targets' walk caps.
    let workers = match &args.http {
        None => 1,
        Some(_) => http_workers()?,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let set = setting(&rt, &args)?;
    let v = vault_of(&set, &args)?;
    let remote = remote_of(&v, &args.command)?;
    let command = if args.command.is_empty() {
        v.command.clone()
    } else {
        args.command.clone()
    };
    let policy = Arc::new(Policy::new(&v)?);
    let down = match remote {
        Some(r) => {
            let pool = r.client()?;
            Downstream::Remote(r, pool)
        }
        None => Downstream::Child(command),
    };
    let code = match &args.http {
        Some(listen) => {
            let setup = http_setup(set, &v, policy, listen, down, workers)?;
            rt.block_on(http::serve(setup))
        }
        None => rt.block_on(stdio::run(stdio_options(set, &v, policy, &down), down)),
    };
    // The stdin reader may be parked in a blocking read: do not wait for it.
    rt.shutdown_background();
    code
}

/// The config and the daemon: from tcd in guarded mode, else from the config file.
fn setting(rt: &tokio::runtime::Runtime, a: &Args) -> anyhow::Result<Setting> {
    let guarded = tc_core::guarded::client(a.config.as_deref(), a.socket.as_deref())?;
    if guarded.is_some() {
        // Another process of the same uid (the agent) may not ptrace us or read our
        // memory (the round-MAC key) where the kernel allows same-uid tracing.
        nix::sys::prctl::set_dumpable(false).context("prctl(PR_SET_DUMPABLE, 0)")?;
    }
    let (cfg, daemon) = match &guarded {
        Some(g) => guarded_policy(rt, g)?,
        None => {
            let cfg = tc_core::Config::load(a.config.as_deref())?;
            let socket = match &a.socket {
                Some(s) => s.clone(),
                None => cfg.socket().context("finding the daemon socket")?,
            };
            (cfg, Daemon::new(socket))
        }
    };
    Ok(Setting {
        cfg,
        daemon,
        guarded,
    })
}

/// The vault to serve: from the config, or (unguarded, with a command) an ad-hoc one with
/// no gates rooted in the current directory.
fn vault_of(set: &Setting, a: &Args) -> anyhow::Result<VaultConfig> {
    let name = &a.vault;
    let v =
        match set.cfg.vault(name) {
            Some(v) => v.clone(),
            None if set.guarded.is_some() => anyhow::bail!(
                "vault {name:?} is not in {} (guarded mode: only vaults the system config \
             defines are served)",
                tc_core::guarded::SYSTEM_CONFIG
            ),
            None if !a.command.is_empty() => {
                tracing::warn!(
                    "vault {name:?} is not in the config: no gates, root = current directory"
                );
                ad_hoc_vault(name, std::env::current_dir()?)
            }
            None => anyhow::bail!(
            "vault {name:?} is not in the config{}; add a [[vaults]] entry or give `-- <command…>`",
            set.cfg.source.as_ref().map(|p| format!(" ({})", p.display())).unwrap_or_default()
        ),
        };
    if set.guarded.is_some()
        && !a.command.is_empty()
        && !v.command.is_empty()
        && a.command != v.command
    {
        anyhow::bail!(
            "`-- {}` is not allowed: {} gives vault {name:?} its command (guarded mode)",
            a.command.join(" "),
            tc_core::guarded::SYSTEM_CONFIG
        );
    }
    Ok(v)
}

/// The vault's remote server, when it has a `url` (then no command may be given).
fn remote_of(v: &VaultConfig, command: &[String]) -> anyhow::Result<Option<Remote>> {
    let Some(url) = &v.url else {
        return Ok(None);
    };
    let (name, url) = (&v.id, tc_core::config::shown_url(url));
    if !command.is_empty() {
        anyhow::bail!(
            "vault {name:?} has a url ({url}): its server is remote, so `-- <command…>` \
             has nothing to start"
        );
    }
    if !v.has_root() {
        tracing::info!(
            "vault {name:?}: remote server {url} with no local root: path arguments \
             are not judged (no ACL, no path targets); gates bind to git, probe or none \
             targets only"
        );
    }
    Ok(Some(Remote::from_config(v)?))
}

/// A vault the config does not name, served with no gates (unguarded, with a command).
fn ad_hoc_vault(name: &str, root: PathBuf) -> VaultConfig {
    VaultConfig {
        id: name.to_string(),
        root,
        command: Vec::new(),
        legacy_elicitation_shim: false,
        lean: false,
        gates: Vec::new(),
        paged: Vec::new(),
        acl: Default::default(),
        paths: Vec::new(),
        max_target_files: tc_core::config::DEFAULT_MAX_TARGET_FILES,
        url: None,
        headers: Default::default(),
        bearer: None,
        ca_file: None,
        http: None,
    }
}

/// The engine's options for the one stdio conversation.
fn stdio_options(
    set: Setting,
    v: &VaultConfig,
    policy: Arc<Policy>,
    down: &Downstream,
) -> crate::engine::Options {
    crate::engine::Options {
        policy,
        daemon: Arc::new(set.daemon),
        caller: tc_core::STDIO_CALLER.into(),
        prompt_ttl: prompt_ttl(&set.cfg),
        page: crate::engine::page_base(set.cfg.approvals.listen.as_deref()),
        gov: Governor::new(&set.cfg.governor, &v.paged),
        server_requests: true,
        remote_downstream: matches!(down, Downstream::Remote(..)),
    }
}

/// How long the legacy route waits for the human.
fn prompt_ttl(cfg: &tc_core::Config) -> std::time::Duration {
    std::time::Duration::from_secs(cfg.daemon.elicit_ttl_seconds.into())
}

/// The HTTP front's setup: its address (`--http ADDR`, else `[vaults.http] listen`).
fn http_setup(
    set: Setting,
    v: &VaultConfig,
    policy: Arc<Policy>,
    listen: &str,
    downstream: Downstream,
    workers: usize,
) -> anyhow::Result<http::Setup> {
    let front = v.http.clone().unwrap_or_default();
    let listen = match (listen, &front.listen) {
        ("", Some(l)) => l.clone(),
        ("", None) => anyhow::bail!(
            "--http needs an address (host:port), or give [vaults.http] listen for vault {:?}",
            v.id
        ),
        (l, _) => l.to_string(),
    };
    // Guarded mode keeps other local users from acting as the human; `none` would make
    // every process that reaches the port the one caller.
    if front.auth.mode == tc_core::config::AuthMode::None && set.guarded.is_some() {
        anyhow::bail!(
            "[vaults.http.auth] mode = \"none\" is refused in guarded mode: every local \
             process could call as `http-local`; use mode = \"jwt\" or \"oidc\""
        );
    }
    Ok(http::Setup {
        addr: resolve_listen(&listen)?,
        front,
        policy,
        daemon: Arc::new(set.daemon),
        governor: set.cfg.governor.clone(),
        paged: v.paged.clone(),
        prompt_ttl: prompt_ttl(&set.cfg),
        page: crate::engine::page_base(set.cfg.approvals.listen.as_deref()),
        downstream,
        workers,
    })
}

/// `host:port` as a socket address (names resolved once, the first answer taken).
fn resolve_listen(listen: &str) -> anyhow::Result<std::net::SocketAddr> {
    use std::net::ToSocketAddrs;
    listen
        .to_socket_addrs()
        .with_context(|| format!("--http {listen:?}: not a host:port"))?
        .next()
        .ok_or_else(|| anyhow::anyhow!("--http {listen:?}: resolves to no address"))
}

/// Guarded mode: the policy comes from tcd on /run/tc/tcd.sock (checked to run as the
/// daemon user), with the user's own file merged over it tighten-only.
fn guarded_policy(
    rt: &tokio::runtime::Runtime,
    g: &tc_core::guarded::GuardedClient,
) -> anyhow::Result<(tc_core::Config, Daemon)> {
    let daemon = Daemon::checked(PathBuf::from(tc_core::guarded::SYSTEM_SOCKET), g.daemon_uid);
    let (text, source) = rt
        .block_on(daemon.policy())
        .context("guarded mode: cannot get the policy from tcd")?;
    let cfg = g.policy(&text, &source)?;
    Ok((cfg, daemon))
}
