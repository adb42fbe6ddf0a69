//! `tcd`, the tc daemon: owns the server secret, the token table, raised requests,
//! consumed request states and the audit log, behind tc.v1 gRPC on a Unix socket.
//!
//! - [`run`]: the binary's whole `main`.
//! - [`Options`] / [`serve`]: start the daemon from code (tests, benchmarks).

pub mod approvals;
pub mod auth;
pub mod bearer;
pub mod deploy;
pub mod error;
pub mod factor;
pub mod fsutil;
pub mod grant_rules;
pub mod grants;
pub mod ledger;
pub mod limits;
pub mod listener;
pub mod page;
pub mod push;
pub mod raised;
pub mod random;
pub mod record;
pub mod retention;
pub use tc_seal as seal;
pub mod secret;
pub mod service;
pub mod shutdown;
pub mod startup;
pub mod states;
pub mod store;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use tc_core::Config;
use tc_proto::v1::confirm_server::ConfirmServer;
use tokio::signal::unix::{signal, SignalKind};
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::StreamExt;

use crate::ledger::Ledger;

/// Command line of `tcd`.
#[derive(Debug, Parser)]
#[command(
    name = "tcd",
    version,
    about = "The tc confirmation daemon (run as a systemd user service)"
)]
pub struct Args {
    /// Config file (default: $TC_CONFIG, $XDG_CONFIG_HOME/tc/config.toml, ~/.config/tc/config.toml).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Key the codecs from a per-process random key: nothing survives a restart.
    #[arg(long)]
    pub ephemeral: bool,
    /// Override `daemon.socket`.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Override `daemon.cache_dir`.
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

/// Everything [`serve`] needs.
pub struct Options {
    pub config: Config,
    pub ephemeral: bool,
    /// The config file tcd parsed and its text (None: no file, defaults), served as is
    /// by `GetPolicy`; in guarded mode it must be root-owned.
    pub policy: Option<(PathBuf, String)>,
}

/// Parses the command line, then serves until SIGTERM/SIGINT.
pub fn run() -> anyhow::Result<()> {
    let args = Args::parse();
    // Everything tcd creates (cache.db and its -wal/-shm, the socket before its chmod) is
    // for this uid alone, whatever umask the shell that started it had; the systemd unit
    // sets the same with UMask=0077.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    tracing_subscriber::fmt()
        .with_writer(tc_core::display::stderr_log)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TCD_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .init();
    let (mut config, text) = Config::load_text(args.config.as_deref())?;
    let policy = config.source.clone().zip(text);
    if let Some(s) = args.socket {
        config.daemon.socket = Some(s);
    }
    if let Some(c) = args.cache_dir {
        config.daemon.cache_dir = Some(c);
    }
    // One thread runs every connection and RPC task; SQLite runs on the store thread, so
    // nothing here blocks. On a small machine this saves the cross-worker wake-ups (and
    // work stealing) a multi-threaded runtime adds to each RPC; throughput is bounded by
    // the store thread's fsyncs, not by this thread.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(serve(Options {
        config,
        ephemeral: args.ephemeral,
        policy,
    }));
    // serve() has cut every connection; this only bounds a straggling blocking task.
    rt.shutdown_timeout(Duration::from_secs(2));
    result
}

/// How long in-flight RPCs get after SIGTERM before open connections are cut.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// How long cut connections get to unwind before `serve` returns regardless.
const CUT_WAIT: Duration = Duration::from_secs(1);

/// Garbage collection: every minute (and once at start) the ledger's expired rows and the
/// events retention lets go; in between, retention alone whenever a commit pushed the
/// log past its size cap by an eighth (at most once a second), so a flood is pruned
/// within seconds.
async fn collect(ledger: Arc<Ledger>, policy: retention::Retention) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    loop {
        let full = tokio::select! {
            _ = tick.tick() => true,
            _ = ledger.store.prune_wanted().notified() => false,
        };
        if full {
            let l = ledger.clone();
            let upkeep = move || {
                l.store.refresh()?;
                l.gc()
            };
            if let Err(e) = ledger.store.call(upkeep).await {
                tracing::warn!(error = %e, "garbage collection failed");
            }
        }
        if let Err(e) = retention::prune(&ledger, policy).await {
            tracing::warn!(error = %e, "pruning the audit log failed");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Opens the store, binds the socket and serves until a shutdown signal.
pub async fn serve(opts: Options) -> anyhow::Result<()> {
    // First: a SIGTERM that arrives while starting (the socket accepts as soon as it is
    // bound, before serving) must still mean a clean stop that removes the socket, not
    // the default death that leaves it behind.
    let term = signal(SignalKind::terminate())?;
    let int = signal(SignalKind::interrupt())?;
    let checked = startup::check(&opts)?;
    let pg = opts.config.daemon.postgres();
    let (store, db) = startup::open_store(pg, &checked.cache_dir, &checked.secret).await?;
    let runner = tokio::spawn(store.runner()?);
    let info = startup::info(&opts, &checked);
    let (ledger, retention) = startup::ledger(&opts.config, store, checked.secret, &checked.pusher);
    let bound = listener::bind(&checked.socket, checked.reach)?;
    let auth = auth::AuthLayer {
        access: checked.access,
        ledger: ledger.clone(),
    };
    // `draining`: the signal came, no new connections, follow streams end.
    // `cut`: the grace is over, every connection still open fails its next read/write.
    let draining = shutdown::Switch::default();
    let cut = shutdown::Switch::default();
    let service = service::Service::new(ledger.clone(), info, draining.clone());
    let mut tasks = vec![tokio::spawn(collect(ledger.clone(), retention))];
    if let Some(p) = &checked.pusher {
        tracing::info!(targets = %p.describe(), "push: each raised request is pushed");
        tasks.extend(p.spawn(ledger.clone()));
    }
    // A page that cannot start stops tcd: the socket it bound goes with it.
    match startup::pages(checked.page, &checked.remote, &ledger, &draining).await {
        Ok(pages) => tasks.extend(pages),
        Err(e) => {
            if let Some(path) = &bound.cleanup {
                let _ = std::fs::remove_file(path);
            }
            return Err(e);
        }
    }
    let incoming = UnixListenerStream::new(bound.listener).map({
        let cut = cut.clone();
        move |c| c.map(|s| cut.wrap(s))
    });
    tracing::info!(socket = %checked.socket.display(), activated = bound.activated, db = %db, "tcd ready");
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
    let server = tonic::transport::Server::builder()
        .layer(auth)
        .add_service(ConfirmServer::new(service))
        .serve_with_incoming_shutdown(incoming, on_signal(term, int, draining.clone()));
    let result = tokio::select! {
        r = server => r,
        _ = cut_after_grace(cut, draining) => {
            tracing::warn!("connections did not unwind after being closed; exiting anyway");
            Ok(())
        }
    };
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    tasks.iter().for_each(|t| t.abort());
    // Every write that was accepted is committed (and answered, if its client is still
    // there) before the process exits.
    ledger.store.close();
    let _ = runner.await;
    ledger.store.join();
    if let Some(path) = bound.cleanup {
        let _ = std::fs::remove_file(path);
    }
    result.context("gRPC server failed")
}

/// Resolves on SIGTERM or SIGINT, once `draining` is flipped.
async fn on_signal(
    mut term: tokio::signal::unix::Signal,
    mut int: tokio::signal::unix::Signal,
    draining: shutdown::Switch,
) {
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
    draining.flip();
}

/// tonic's graceful shutdown waits for every connection to close, with no deadline: an
/// idle client, or one stopped with SIGSTOP that cannot even answer GOAWAY, would keep
/// tcd alive forever. After the grace the connections are cut. A write is never lost
/// by this: each reply is sent only after its commit, so a cut RPC either committed
/// (and its reply is lost, as on a crash) or did nothing. Resolves if they still have
/// not unwound [`CUT_WAIT`] later.
async fn cut_after_grace(cut: shutdown::Switch, draining: shutdown::Switch) {
    draining.flipped().await;
    tokio::time::sleep(SHUTDOWN_GRACE).await;
    tracing::warn!(
        grace_ms = SHUTDOWN_GRACE.as_millis() as u64,
        "clients still connected after the shutdown grace; closing their connections"
    );
    cut.flip();
    tokio::time::sleep(CUT_WAIT).await;
}
