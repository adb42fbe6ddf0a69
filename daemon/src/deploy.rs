//! How tcd is deployed, from `[daemon] mode`: who it serves and where it lives.
//! Guarded mode starts only from a root-owned config, as `[guarded] daemon_user`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use tc_core::config::Mode;
use tc_core::guarded::{self, SYSTEM_SOCKET, SYSTEM_STATE_DIR};
use tc_core::Config;

use crate::auth::Access;
use crate::listener::Reach;

/// Who may call tcd, and who may reach its socket file. Guarded mode refuses to start
/// unless its config file and directory are root's alone, every listed human exists,
/// and tcd runs as the daemon user the clients will check for.
pub fn access(cfg: &Config, policy: Option<&(PathBuf, String)>) -> anyhow::Result<(Access, Reach)> {
    let me = nix::unistd::geteuid().as_raw();
    if cfg.daemon.mode == Mode::Personal {
        return Ok((Access::OwnUid(me), Reach::Private));
    }
    let (path, _) = policy.context("guarded mode needs a config file (--config)")?;
    guarded::check_root_owned(path).context("refusing to start guarded")?;
    let daemon = guarded::daemon_uid(cfg).context("refusing to start guarded")?;
    if me != daemon {
        anyhow::bail!(
            "refusing to start guarded: tcd runs as uid {me}, but guarded.daemon_user {:?} is \
             uid {daemon} and clients trust only that uid (run it as that user, e.g. the \
             tcd-guarded.service unit)",
            cfg.guarded.daemon_user
        );
    }
    let humans = guarded::human_uids(cfg).context("refusing to start guarded")?;
    if humans.is_empty() {
        tracing::warn!("guarded mode with no [guarded] humans: only root may use tcd");
    }
    tracing::info!(?humans, config = %path.display(), "guarded mode");
    Ok((
        Access::Guarded {
            humans: Arc::from(humans),
        },
        Reach::Shared,
    ))
}

/// The cache (state) directory and the socket: the config's (or the flags'), else the
/// mode's defaults (guarded: `/var/lib/tc`, `/run/tc/tcd.sock`).
pub fn locations(cfg: &Config) -> anyhow::Result<(PathBuf, PathBuf)> {
    if cfg.daemon.mode == Mode::Personal {
        return Ok((cfg.cache_dir()?, cfg.socket()?));
    }
    let cache = cfg
        .daemon
        .cache_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(SYSTEM_STATE_DIR));
    let socket = cfg
        .daemon
        .socket
        .clone()
        .unwrap_or_else(|| PathBuf::from(SYSTEM_SOCKET));
    if socket != Path::new(SYSTEM_SOCKET) {
        tracing::warn!(socket = %socket.display(), "guarded clients use {SYSTEM_SOCKET} only");
    }
    Ok((cache, socket))
}
