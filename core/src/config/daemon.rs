//! The process-wide sections: `[daemon]`, `[guarded]`, `[approvals]`, `[governor]`,
//! their defaults and the limits tcd enforces with them.

use std::path::PathBuf;

use serde::Deserialize;

/// Default confirmation lifetime.
pub const DEFAULT_TTL_SECONDS: u32 = 300;
/// Default governor cap.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 1_048_576;
/// Default age past which audit events are pruned (a quarter of a year).
pub const DEFAULT_EVENTS_MAX_AGE_DAYS: u32 = 90;
/// Default size the audit log is held to (16 MiB of event fields): a normal user's
/// ~100 events a day at ~400 bytes each is ~3.6 MB in 90 days, so the age limit is what
/// normally prunes, and this only bounds a flood.
pub const DEFAULT_EVENTS_MAX_BYTES: u64 = 16 * 1024 * 1024;
/// Smallest `events_max_bytes` accepted: a few hundred events.
pub const MIN_EVENTS_MAX_BYTES: u64 = 64 * 1024;
/// Default sustained rate of model-causable writes per (vault, caller): two a second,
/// far above an agent whose gated calls each wait for a human, far below a flood.
pub const DEFAULT_RATE_LIMIT_PER_MINUTE: u32 = 120;
/// Default burst of model-causable writes per (vault, caller): an agent may fire a few
/// hundred refused calls at once (a batch of edits) before it is slowed down.
pub const DEFAULT_RATE_LIMIT_BURST: u32 = 300;

/// `[daemon]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonConfig {
    /// Default: `$XDG_RUNTIME_DIR/tc/tcd.sock`; when that is unset, `/run/user/<uid>/tc/tcd.sock`
    /// if `/run/user/<uid>` is the user's own private directory; else `<cache_dir>/tcd.sock`.
    pub socket: Option<PathBuf>,
    /// Default: `$XDG_STATE_HOME/tc`, else `~/.local/state/tc`.
    pub cache_dir: Option<PathBuf>,
    pub elicit_ttl_seconds: u32,
    /// Audit events older than this many days are pruned.
    pub events_max_age_days: u32,
    /// The audit log is pruned, oldest first, to this many bytes of event fields.
    pub events_max_bytes: u64,
    /// Raised requests, refusal events and client-reported events each (vault, caller)
    /// may cause per minute, sustained (a token bucket); past it Raise is `rate_limited`.
    pub rate_limit_per_minute: u32,
    /// How many of those may come at once (the bucket's size).
    pub rate_limit_burst: u32,
    /// `personal` (default: tcd runs as you) or `guarded` (tcd runs as its own system user
    /// from the root-owned /etc/tc/config.toml, and every approval needs a factor).
    pub mode: Mode,
    /// `sqlite` (default) or `postgres`; a `[daemon.postgres]` table alone means postgres.
    pub store: Option<super::StoreKind>,
    /// `[daemon.postgres]`: the shared ledger of several replicas (`config/store.rs`).
    pub postgres: Option<super::PostgresConfig>,
}

/// Who tcd serves and what an approval needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// tcd runs as the user: an agent with the user's shell can approve itself.
    #[default]
    Personal,
    /// tcd runs as a system user; approvals need a factor the agent cannot compute.
    Guarded,
}

impl Mode {
    /// The spelling in the config file and in `tcctl status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Personal => "personal",
            Mode::Guarded => "guarded",
        }
    }
}

/// `[approvals]`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApprovalsConfig {
    /// Loopback address of the approval page, e.g. `127.0.0.1:7777`; unset: no page.
    pub listen: Option<String>,
    /// The page over HTTPS on a network address, behind a passkey sign-in (for a phone);
    /// unset: none.
    pub remote: Option<super::RemotePage>,
}

impl ApprovalsConfig {
    /// `listen`, parsed: None when unset; an error (in words) for anything but a loopback
    /// address with a fixed port.
    pub fn listen_addr(&self) -> Result<Option<std::net::SocketAddr>, String> {
        let Some(s) = self
            .listen
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
        else {
            return Ok(None);
        };
        let addr: std::net::SocketAddr = s.parse().map_err(|_| {
            format!("[approvals] listen = {s:?}: expected a loopback address and port, e.g. \"127.0.0.1:7777\"")
        })?;
        if !addr.ip().is_loopback() {
            return Err(format!(
                "[approvals] listen = {s:?} is not a loopback address: the approval page is served \
                 on loopback only (127.0.0.1 or ::1), never on a network interface"
            ));
        }
        if addr.port() == 0 {
            return Err(format!(
                "[approvals] listen = {s:?}: give a fixed port (the page's URL must not change)"
            ));
        }
        Ok(Some(addr))
    }

    /// The page's URL: `localhost` whatever the loopback address (WebAuthn takes no IP
    /// address as its relying party, and the page checks `Host`).
    pub fn page_url(addr: std::net::SocketAddr) -> String {
        format!("http://localhost:{}/", addr.port())
    }

    /// The URL of one raised request's view on the page (`/requests/<ID>`).
    pub fn request_url(addr: std::net::SocketAddr, request_id: &str) -> String {
        format!("http://localhost:{}/requests/{request_id}", addr.port())
    }
}

/// `[guarded]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GuardedConfig {
    /// User names or uids that may raise, redeem and approve with a factor.
    pub humans: Vec<String>,
    /// The system user tcd runs as; clients refuse a guarded socket served by anyone else.
    pub daemon_user: String,
}

impl Default for GuardedConfig {
    fn default() -> Self {
        GuardedConfig {
            humans: Vec::new(),
            daemon_user: "tc".into(),
        }
    }
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            socket: None,
            cache_dir: None,
            elicit_ttl_seconds: DEFAULT_TTL_SECONDS,
            events_max_age_days: DEFAULT_EVENTS_MAX_AGE_DAYS,
            events_max_bytes: DEFAULT_EVENTS_MAX_BYTES,
            rate_limit_per_minute: DEFAULT_RATE_LIMIT_PER_MINUTE,
            rate_limit_burst: DEFAULT_RATE_LIMIT_BURST,
            mode: Mode::Personal,
            store: None,
            postgres: None,
        }
    }
}

/// `[governor]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GovernorConfig {
    pub max_response_bytes: u64,
}

impl Default for GovernorConfig {
    fn default() -> Self {
        GovernorConfig {
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }
}
