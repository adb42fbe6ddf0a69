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
pub mod states;
pub mod store;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use tc_core::Config;
use tc_proto::v1::confirm_server::ConfirmServer;
use tokio::signal::unix::{signal, SignalKind};
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::StreamExt;

use crate::ledger::Ledger;
use crate::secret::Secret;
use crate::store::Store;

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

/// Why the database could not be opened, when the cause is the directory: SQLite's own
/// message ("unable to open database file") does not say that it is read-only.
fn unwritable(dir: &std::path::Path) -> String {
    match nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK) {
        Ok(()) => String::new(),
        Err(e) => format!(
            " (the cache directory {} is not writable: {e}; remount it read-write, fix its \
             permissions or start tcd with another --cache-dir)",
            dir.display()
        ),
    }
}

/// The store the config names: `<cache_dir>/cache.db`, or the PostgreSQL ledger (connected,
/// migrated and key-checked on a blocking thread). Also returns what the log line names.
async fn open_store(
    pg: Option<&tc_core::config::PostgresConfig>,
    cache_dir: &std::path::Path,
    secret: &Secret,
) -> anyhow::Result<(Store, String)> {
    let Some(pg) = pg else {
        let db = cache_dir.join("cache.db");
        let store = Store::open(&db).map_err(|e| {
            anyhow::anyhow!("cannot open {}: {e}{}", db.display(), unwritable(cache_dir))
        })?;
        return Ok((store, db.display().to_string()));
    };
    let (pg, check) = (pg.clone(), secret.keys.check);
    let opened = tokio::task::spawn_blocking(move || store::postgres::PgStore::open(&pg, &check))
        .await
        .context("opening the PostgreSQL store")??;
    let what = opened.describe.clone();
    Ok((Store::Postgres(opened), what))
}

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

/// What the start-up `elicit:` line says of the mode: personal mode states what it does
/// not stop.
fn mode_line(mode: tc_core::config::Mode) -> &'static str {
    match mode {
        tc_core::config::Mode::Personal => {
            "mode: personal (an agent with a shell as this user can approve its own calls; \
             guarded mode closes that, see README)"
        }
        tc_core::config::Mode::Guarded => {
            "mode: guarded (every approval needs a listed human's factor)"
        }
    }
}

/// Opens the store, binds the socket and serves until a shutdown signal.
pub async fn serve(opts: Options) -> anyhow::Result<()> {
    // First: a SIGTERM that arrives while starting (the socket accepts as soon as it is
    // bound, before serving) must still mean a clean stop that removes the socket, not
    // the default death that leaves it behind.
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let cfg = &opts.config;
    let (access, reach) = deploy::access(cfg, opts.policy.as_ref())?;
    let (cache_dir, socket) = deploy::locations(cfg)?;
    // A non-loopback `[approvals] listen` stops the start, before anything is bound.
    let page_addr = page::listen_addr(&cfg.approvals)?;
    let remote_spec = match &cfg.approvals.remote {
        Some(r) => Some(r.spec().map_err(|errs| {
            let (k, why) = errs.into_iter().next().unwrap_or(("listen", String::new()));
            anyhow::anyhow!("[approvals] remote.{k}: {why}")
        })?),
        None => None,
    };
    fsutil::ensure_private_dir(&cache_dir)
        .with_context(|| format!("cache directory {}", cache_dir.display()))?;
    let pg = cfg.daemon.postgres();
    let secret = match pg {
        Some(_) if opts.ephemeral => anyhow::bail!(
            "--ephemeral cannot serve a ledger shared on PostgreSQL: every replica must use the \
             same [daemon.postgres] secret_file"
        ),
        Some(p) => Secret::load_shared(&p.secret_file)?,
        None if opts.ephemeral => Secret::ephemeral(),
        None => Secret::load_or_create(&cache_dir)?,
    };
    eprintln!(
        "{}; {}",
        secret.source.elicit_line(),
        mode_line(cfg.daemon.mode)
    );
    // The targets' token and secret files are read (and checked) before anything starts.
    let pusher = push::Pusher::from_config(cfg)?.map(Arc::new);
    // The remote page's certificate, before anything is bound: a bad file stops the start.
    let remote_tls = match &remote_spec {
        Some(s) => Some(page::tls::load(&s.cert, &s.rp_id, &cache_dir)?),
        None => None,
    };
    let (store, db) = open_store(pg, &cache_dir, &secret).await?;
    let runner = tokio::spawn(store.runner()?);
    let retention = retention::Retention::from_config(&cfg.daemon);
    store.set_prune_threshold(retention::wake_threshold(retention.max_bytes));
    let limits = limits::Limits::new(
        cfg.daemon.rate_limit_per_minute,
        cfg.daemon.rate_limit_burst,
    );
    let ledger = Arc::new(
        Ledger::new(store, secret, cfg.daemon.elicit_ttl_seconds)
            .with_limits(limits)
            .with_mode(cfg.daemon.mode)
            .with_humans(cfg.guarded.humans.clone())
            .with_grant_rules(grant_rules::rules_of(&cfg.vaults))
            .with_push(pusher.clone().map(|p| p as Arc<dyn raised::Push>)),
    );
    let bound = listener::bind(&socket, reach)?;
    let auth = auth::AuthLayer {
        access,
        ledger: ledger.clone(),
    };
    // `draining`: the signal came, no new connections, follow streams end.
    // `cut`: the grace is over, every connection still open fails its next read/write.
    let draining = shutdown::Switch::default();
    let cut = shutdown::Switch::default();
    let service = service::Service::new(
        ledger.clone(),
        service::Info {
            socket: socket.clone(),
            cache_dir: cache_dir.clone(),
            started: Instant::now(),
            policy: opts.policy.clone(),
            page: page_addr,
            remote: remote_spec.as_ref().zip(remote_tls.as_ref()).map(|(s, t)| {
                service::RemoteInfo {
                    origin: s.origin.clone(),
                    cert_sha256: t.cert_sha256.clone(),
                    spki_sha256: t.spki_sha256.clone(),
                }
            }),
        },
        draining.clone(),
    );

    let gc = tokio::spawn(collect(ledger.clone(), retention));
    let senders = match &pusher {
        Some(p) => {
            tracing::info!(targets = %p.describe(), "push: each raised request is pushed");
            p.spawn(ledger.clone())
        }
        None => Vec::new(),
    };
    // A page that cannot start stops tcd: the socket it bound goes with it.
    let unbind = |e: anyhow::Error| {
        if let Some(path) = &bound.cleanup {
            let _ = std::fs::remove_file(path);
        }
        e
    };
    let page = match page_addr {
        Some(addr) => Some(
            page::start(addr, ledger.clone(), draining.clone())
                .await
                .map_err(unbind)?,
        ),
        None => None,
    };
    let remote_page = match remote_spec.as_ref().zip(remote_tls.as_ref()) {
        Some((s, t)) => Some(
            page::start_remote(s, t, ledger.clone(), draining.clone())
                .await
                .map_err(unbind)?,
        ),
        None => None,
    };

    let shutdown = {
        let draining = draining.clone();
        async move {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
                _ = int.recv() => tracing::info!("SIGINT: shutting down"),
            }
            draining.flip();
        }
    };
    // tonic's graceful shutdown waits for every connection to close, with no deadline: an
    // idle client, or one stopped with SIGSTOP that cannot even answer GOAWAY, would keep
    // tcd alive forever. After the grace the connections are cut. A write is never lost
    // by this: each reply is sent only after its commit, so a cut RPC either committed
    // (and its reply is lost, as on a crash) or did nothing.
    let deadline = {
        let cut = cut.clone();
        let draining = draining.flipped();
        async move {
            draining.await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
            tracing::warn!(
                grace_ms = SHUTDOWN_GRACE.as_millis() as u64,
                "clients still connected after the shutdown grace; closing their connections"
            );
            cut.flip();
            tokio::time::sleep(CUT_WAIT).await;
        }
    };
    let incoming = UnixListenerStream::new(bound.listener).map(move |c| c.map(|s| cut.wrap(s)));
    tracing::info!(socket = %socket.display(), activated = bound.activated, db = %db, "tcd ready");
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
    let server = tonic::transport::Server::builder()
        .layer(auth)
        .add_service(ConfirmServer::new(service))
        .serve_with_incoming_shutdown(incoming, shutdown);
    let result = tokio::select! {
        r = server => r,
        _ = deadline => {
            tracing::warn!("connections did not unwind after being closed; exiting anyway");
            Ok(())
        }
    };
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    gc.abort();
    senders.iter().for_each(|s| s.abort());
    for p in [page, remote_page].into_iter().flatten() {
        p.abort();
    }
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
