//! What tcd reads and checks before it binds anything ([`check`]), the store it opens, and
//! what it builds on them: the ledger, the service's facts and the approval pages.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use tc_core::config::RemoteSpec;
use tc_core::Config;
use tokio::task::JoinHandle;

use crate::auth::Access;
use crate::ledger::Ledger;
use crate::listener::Reach;
use crate::secret::Secret;
use crate::store::Store;
use crate::{deploy, fsutil, grant_rules, limits, page, push, raised, retention, service};
use crate::{shutdown, store, Options};

/// Everything checked before a socket is bound: a bad config, key file, push target or
/// certificate stops the start here.
pub struct Checked {
    pub access: Access,
    pub reach: Reach,
    pub cache_dir: PathBuf,
    pub socket: PathBuf,
    /// The loopback page's address, when it is on.
    pub page: Option<SocketAddr>,
    /// The remote page and its certificate, when it is on.
    pub remote: Option<(RemoteSpec, page::tls::Served)>,
    pub secret: Secret,
    pub pusher: Option<Arc<push::Pusher>>,
}

/// Reads and checks what the config names, in the order a failure should be reported.
pub fn check(opts: &Options) -> anyhow::Result<Checked> {
    let cfg = &opts.config;
    let (access, reach) = deploy::access(cfg, opts.policy.as_ref())?;
    let (cache_dir, socket) = deploy::locations(cfg)?;
    // A non-loopback `[approvals] listen` stops the start, before anything is bound.
    let page = page::listen_addr(&cfg.approvals)?;
    let remote_spec = match &cfg.approvals.remote {
        Some(r) => Some(r.spec().map_err(|errs| {
            let (k, why) = errs.into_iter().next().unwrap_or(("listen", String::new()));
            anyhow::anyhow!("[approvals] remote.{k}: {why}")
        })?),
        None => None,
    };
    fsutil::ensure_private_dir(&cache_dir)
        .with_context(|| format!("cache directory {}", cache_dir.display()))?;
    let secret = match cfg.daemon.postgres() {
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
    let remote = match remote_spec {
        Some(s) => {
            let served = page::tls::load(&s.cert, &s.rp_id, &cache_dir)?;
            Some((s, served))
        }
        None => None,
    };
    Ok(Checked {
        access,
        reach,
        cache_dir,
        socket,
        page,
        remote,
        secret,
        pusher,
    })
}

/// The ledger on `store`, with the config's limits, mode, humans, grant rules and push,
/// and the retention its collector applies.
pub fn ledger(
    cfg: &Config,
    store: Store,
    secret: Secret,
    pusher: &Option<Arc<push::Pusher>>,
) -> (Arc<Ledger>, retention::Retention) {
    let retention = retention::Retention::from_config(&cfg.daemon);
    store.set_prune_threshold(retention::wake_threshold(retention.max_bytes));
    let limits = limits::Limits::new(
        cfg.daemon.rate_limit_per_minute,
        cfg.daemon.rate_limit_burst,
    );
    let ledger = Ledger::new(store, secret, cfg.daemon.elicit_ttl_seconds)
        .with_limits(limits)
        .with_mode(cfg.daemon.mode)
        .with_humans(cfg.guarded.humans.clone())
        .with_grant_rules(grant_rules::rules_of(&cfg.vaults))
        .with_push(pusher.clone().map(|p| p as Arc<dyn raised::Push>));
    (Arc::new(ledger), retention)
}

/// What `Status`, `OpenPage` and `GetPolicy` tell of this tcd.
pub fn info(opts: &Options, c: &Checked) -> service::Info {
    service::Info {
        socket: c.socket.clone(),
        cache_dir: c.cache_dir.clone(),
        started: Instant::now(),
        policy: opts.policy.clone(),
        page: c.page,
        remote: c.remote.as_ref().map(|(s, t)| service::RemoteInfo {
            origin: s.origin.clone(),
            cert_sha256: t.cert_sha256.clone(),
            spki_sha256: t.spki_sha256.clone(),
        }),
    }
}

/// Binds and serves the pages that are on (loopback, remote) until `draining` flips.
pub async fn pages(
    loopback: Option<SocketAddr>,
    remote: &Option<(RemoteSpec, page::tls::Served)>,
    ledger: &Arc<Ledger>,
    draining: &shutdown::Switch,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let mut out = Vec::new();
    if let Some(addr) = loopback {
        out.push(page::start(addr, ledger.clone(), draining.clone()).await?);
    }
    if let Some((s, t)) = remote {
        match page::start_remote(s, t, ledger.clone(), draining.clone()).await {
            Ok(p) => out.push(p),
            Err(e) => {
                out.iter().for_each(|p| p.abort());
                return Err(e);
            }
        }
    }
    Ok(out)
}

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
pub async fn open_store(
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
