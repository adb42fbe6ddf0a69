//! `tc-shim`: the MCP stdio proxy that puts a human confirmation gate in front of a
//! downstream MCP server (`tc-shim serve <vault> [-- <command…>]`).

mod barrier;
mod by_request;
mod confirm;
mod daemon_client;
mod downstream;
mod era;
mod framing;
#[cfg(test)]
mod fuzz_checks;
mod gate;
mod gitindex;
mod governor;
mod http;
mod ids;
mod lean;
mod mcp_headers;
mod names;
mod outbox;
mod peek;
mod policy;
mod preview;
mod regular;
mod results;
mod roots;
mod scan;
mod stdio;
mod summary;
mod targets;
mod unique;
mod value;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// Every answer and request is a few short-lived buffers and futures: mimalloc's
/// per-thread free lists take about a tenth off the HTTP front's CPU per call.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

fn main() {
    tracing_subscriber::fmt()
        .with_writer(tc_core::display::stderr_log)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TC_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match real_main() {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            tc_core::eprint_failure("tc-shim", &e);
            std::process::exit(2);
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

fn real_main() -> anyhow::Result<i32> {
    let Cmd::Serve {
        vault,
        config,
        socket,
        http,
        command,
    } = Cli::parse().cmd;
    // One single-threaded runtime: the proxy is I/O-bound and a message bouncing between
    // the workers of a multi-threaded one costs more than it gains (docs/BENCHMARKS.md,
    // "Shim"; for the HTTP front, "HTTP front": on two cores a second worker took a lone
    // caller's added p50 from 1.3× to 2.6× the floor's). The HTTP front adds threads of
    // its own that each serve whole connections (`http/workers.rs`). This runtime lives
    // as long as the process serves: the daemon's gRPC channel runs its connection on
    // the runtime it was opened on. Blocking work (hashing targets) stays short and
    // bounded by the targets' walk caps.
    let workers = match &http {
        None => 1,
        Some(_) => http_workers()?,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let guarded = tc_core::guarded::client(config.as_deref(), socket.as_deref())?;
    if guarded.is_some() {
        // Another process of the same uid (the agent) may not ptrace us or read our
        // memory (the round-MAC key) where the kernel allows same-uid tracing.
        nix::sys::prctl::set_dumpable(false).context("prctl(PR_SET_DUMPABLE, 0)")?;
    }
    let (cfg, daemon) = match &guarded {
        Some(g) => guarded_policy(&rt, g)?,
        None => {
            let cfg = tc_core::Config::load(config.as_deref())?;
            let socket = match socket {
                Some(s) => s,
                None => cfg.socket().context("finding the daemon socket")?,
            };
            (cfg, daemon_client::Daemon::new(socket))
        }
    };
    let v = match cfg.vault(&vault) {
        Some(v) => v.clone(),
        None if guarded.is_some() => anyhow::bail!(
            "vault {vault:?} is not in {} (guarded mode: only vaults the system config \
             defines are served)",
            tc_core::guarded::SYSTEM_CONFIG
        ),
        None if !command.is_empty() => {
            tracing::warn!("vault {vault:?} is not in the config: no gates, root = current directory");
            tc_core::config::VaultConfig {
                id: vault.clone(),
                root: std::env::current_dir()?,
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
        None => anyhow::bail!(
            "vault {vault:?} is not in the config{}; add a [[vaults]] entry or give `-- <command…>`",
            cfg.source.as_ref().map(|p| format!(" ({})", p.display())).unwrap_or_default()
        ),
    };
    if guarded.is_some() && !command.is_empty() && !v.command.is_empty() && command != v.command {
        anyhow::bail!(
            "`-- {}` is not allowed: {} gives vault {vault:?} its command (guarded mode)",
            command.join(" "),
            tc_core::guarded::SYSTEM_CONFIG
        );
    }
    let remote = match &v.url {
        Some(url) => {
            let url = tc_core::config::shown_url(url);
            if !command.is_empty() {
                anyhow::bail!(
                    "vault {vault:?} has a url ({url}): its server is remote, so `-- <command…>` \
                     has nothing to start"
                );
            }
            if !v.has_root() {
                tracing::info!(
                    "vault {vault:?}: remote server {url} with no local root: path arguments \
                     are not judged (no ACL, no path targets); gates bind to git, probe or none \
                     targets only"
                );
            }
            Some(downstream::Remote::from_config(&v)?)
        }
        None => None,
    };
    let command = if command.is_empty() {
        v.command.clone()
    } else {
        command
    };
    let policy = policy::Policy::new(&v)?;
    let gov = governor::Governor::new(&cfg.governor, &v.paged);
    let prompt_ttl = std::time::Duration::from_secs(cfg.daemon.elicit_ttl_seconds.into());
    let page = gate::page_base(cfg.approvals.listen.as_deref());
    if let Some(listen) = http {
        let front = v.http.clone().unwrap_or_default();
        let listen = match (listen.as_str(), &front.listen) {
            ("", Some(l)) => l.clone(),
            ("", None) => anyhow::bail!(
                "--http needs an address (host:port), or give [vaults.http] listen for vault {vault:?}"
            ),
            (l, _) => l.to_string(),
        };
        let addr = resolve_listen(&listen)?;
        // Guarded mode keeps other local users from acting as the human; `none` would
        // make every process that reaches the port the one caller.
        if front.auth.mode == tc_core::config::AuthMode::None && guarded.is_some() {
            anyhow::bail!(
                "[vaults.http.auth] mode = \"none\" is refused in guarded mode: every local \
                 process could call as `http-local`; use mode = \"jwt\" or \"oidc\""
            );
        }
        let setup = http::Setup {
            addr,
            front,
            policy: std::sync::Arc::new(policy),
            daemon: std::sync::Arc::new(daemon),
            governor: cfg.governor.clone(),
            paged: v.paged.clone(),
            prompt_ttl,
            page: page.clone(),
            downstream: match remote {
                Some(r) => {
                    let client = r.client()?;
                    http::Downstream::Remote(r, client)
                }
                None => http::Downstream::Command(command),
            },
            workers,
        };
        drop(gov);
        let code = rt.block_on(http::serve(setup));
        rt.shutdown_background();
        return code;
    }
    let opts = gate::Options {
        policy: std::sync::Arc::new(policy),
        daemon: std::sync::Arc::new(daemon),
        caller: tc_core::STDIO_CALLER.into(),
        prompt_ttl,
        page,
        gov,
        server_requests: true,
        remote_downstream: remote.is_some(),
    };
    let code = match remote {
        Some(r) => rt.block_on(downstream::run_remote(opts, r)),
        None => rt.block_on(stdio::run(opts, command)),
    };
    // The stdin reader may be parked in a blocking read: do not wait for it.
    rt.shutdown_background();
    code
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
) -> anyhow::Result<(tc_core::Config, daemon_client::Daemon)> {
    let daemon = daemon_client::Daemon::checked(
        PathBuf::from(tc_core::guarded::SYSTEM_SOCKET),
        g.daemon_uid,
    );
    let (text, source) = rt
        .block_on(daemon.policy())
        .context("guarded mode: cannot get the policy from tcd")?;
    let cfg = g.policy(&text, &source)?;
    Ok((cfg, daemon))
}
