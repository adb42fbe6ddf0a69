//! The one TOML configuration shared by `tcd`, `tc-shim` and `tcctl`: its types,
//! defaults, loading (unknown keys are errors naming the key) and validation.
//!
//! - [`Config`], [`DaemonConfig`], [`GovernorConfig`], [`VaultConfig`]
//! - [`Gate`], [`When`], [`Targets`]: which tool calls need a human, and what the
//!   confirmation is bound to.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::paths::{self, PathError};

mod http;
mod http_auth;
mod remote;
mod store;
pub use http::*;
pub use http_auth::*;
pub use remote::shown_url;
pub use store::{PostgresConfig, StoreKind, DEFAULT_POOL_SIZE};

/// Default confirmation lifetime.
pub const DEFAULT_TTL_SECONDS: u32 = 300;
/// Default `max_target_files`: the entries (files, links, folders) a `tree` or
/// `matching` target walks before it is refused. The walk streams (memory holds one
/// folder's listing and a batch of files), so the bound is on time and on the stat
/// cache (at most twice this many entries, ~100 bytes each): a million-note vault
/// fits, a runaway `root = "/"` does not.
pub const DEFAULT_MAX_TARGET_FILES: usize = 1_000_000;
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

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// TOML syntax, wrong type, or unknown key (the message names the key).
    #[error("invalid config {path}: {message}")]
    Parse { path: PathBuf, message: String },
    /// Parsed, but a value breaks a rule.
    #[error("invalid config {path}: {key}: {reason}")]
    Invalid {
        path: PathBuf,
        key: String,
        reason: String,
    },
    /// An explicitly named config file does not exist.
    #[error("config file {path} does not exist (named by {by})")]
    Missing { path: PathBuf, by: &'static str },
    /// No default location could be derived.
    #[error(transparent)]
    Path(#[from] PathError),
}

/// The whole configuration file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub daemon: DaemonConfig,
    /// `[guarded]`: who may do what when `daemon.mode = "guarded"`.
    pub guarded: GuardedConfig,
    /// `[approvals]`: the local approval page served by tcd (off unless `listen` is set).
    pub approvals: ApprovalsConfig,
    pub governor: GovernorConfig,
    pub vaults: Vec<VaultConfig>,
    /// Where this config was loaded from (not a TOML key).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

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
    pub store: Option<StoreKind>,
    /// `[daemon.postgres]`: the shared ledger of several replicas (`config/store.rs`).
    pub postgres: Option<PostgresConfig>,
}

/// Who tcd serves and what an approval needs (DESIGN 10).
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

/// `[[vaults]]`: one downstream MCP server with a root folder.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VaultConfig {
    pub id: String,
    /// Required, except for a vault with a `url` (empty: no local root; see
    /// [`VaultConfig::has_root`]).
    #[serde(default)]
    pub root: PathBuf,
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub legacy_elicitation_shim: bool,
    #[serde(default)]
    pub lean: bool,
    #[serde(default)]
    pub gates: Vec<Gate>,
    #[serde(default)]
    pub paged: Vec<Paged>,
    #[serde(default)]
    pub acl: Acl,
    /// `[[vaults.paths]]`: what the arguments that name files are (beyond schema discovery).
    #[serde(default)]
    pub paths: Vec<PathArgs>,
    /// Most entries a `tree`/`matching` target walks (and the stat cache's size).
    #[serde(default = "default_max_target_files")]
    pub max_target_files: usize,
    /// A remote Streamable HTTP server (`https://…/mcp`) instead of `command`.
    #[serde(default)]
    pub url: Option<String>,
    /// `[vaults.headers]`: static headers sent to the remote server.
    #[serde(default)]
    pub headers: Headers,
    /// `[vaults.bearer]`: the remote server's bearer token (a file or an env variable).
    #[serde(default)]
    pub bearer: Option<Bearer>,
    /// PEM certificates trusted for the `https` url besides the public (webpki) roots: a
    /// private CA. An absolute path.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// `[vaults.http]`: serve this vault over Streamable HTTP.
    #[serde(default)]
    pub http: Option<HttpFront>,
}

fn default_max_target_files() -> usize {
    DEFAULT_MAX_TARGET_FILES
}

impl VaultConfig {
    /// Whether the vault has a local root (only a `url` vault may have none): path
    /// arguments, the ACL and path-based gates need one.
    pub fn has_root(&self) -> bool {
        !self.root.as_os_str().is_empty()
    }
}

/// `[[vaults.gates]]`: a tool that needs confirmation.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    pub tool: String,
    #[serde(default)]
    pub when: Option<When>,
    /// Required; `Option` only so a missing value gets a message saying what to write.
    #[serde(default)]
    pub targets: Option<Targets>,
    /// What the human is shown of the call's effect besides its arguments (none: nothing).
    #[serde(default)]
    pub preview: Option<Preview>,
}

/// `preview = { diff = { path = "…", content = "…" } }`: the names of the call's
/// arguments holding the file written and its new content; the shim shows a unified diff
/// of the file as it is against what the write would make it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Preview {
    Diff(DiffPreview),
}

/// `preview.diff`
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiffPreview {
    pub path: String,
    pub content: String,
}

/// Conditions under which a gate applies (all given ones must hold); absent = always.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct When {
    /// The parent folders of these two path arguments differ.
    pub cross_folder: Option<[String; 2]>,
    /// The path argument names something that already exists.
    pub exists: Option<String>,
    /// The argument equals the value.
    pub equals: Option<Equals>,
}

/// `when.equals = { arg = "…", value = … }`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Equals {
    pub arg: String,
    pub value: serde_json::Value,
}

/// What a confirmation is bound to (DESIGN section 4).
#[derive(Debug, Clone, PartialEq)]
pub enum Targets {
    /// `targets = "none"`: arguments only (a stated residual).
    None,
    /// Each path argument's existence, type and content.
    Paths(Vec<String>),
    /// Files under `root` matching `glob`, with content hashes.
    Tree { root: String, glob: String },
    /// Files under `root` whose content contains the argument's value.
    Matching { root: String, contains: String },
    /// HEAD and the staged index of the repository at this argument (None: vault root).
    Git(Option<String>),
    /// The result of a read-only downstream tool with templated arguments.
    Probe {
        tool: String,
        arguments: serde_json::Value,
    },
}

#[derive(Deserialize)]
#[serde(untagged)]
enum TargetsRepr {
    Word(String),
    Table(TargetsTable),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
enum TargetsTable {
    Paths(Vec<String>),
    Tree {
        root: String,
        #[serde(default = "default_glob")]
        glob: String,
    },
    Matching {
        root: String,
        contains: String,
    },
    Git(String),
    Probe {
        tool: String,
        #[serde(default = "empty_object")]
        arguments: serde_json::Value,
    },
}

fn default_glob() -> String {
    "**".into()
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

impl<'de> Deserialize<'de> for Targets {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        Ok(match TargetsRepr::deserialize(d).map_err(|_| {
            D::Error::custom(
                "targets must be \"none\" or one of { paths = [..] }, { tree = { root, glob } }, \
                 { matching = { root, contains } }, { git = \"arg\" | \"\" }, { probe = { tool, arguments } }",
            )
        })? {
            TargetsRepr::Word(w) if w == "none" => Targets::None,
            TargetsRepr::Word(w) => {
                return Err(D::Error::custom(format!("unknown targets keyword {w:?} (only \"none\")")))
            }
            TargetsRepr::Table(TargetsTable::Paths(p)) => Targets::Paths(p),
            TargetsRepr::Table(TargetsTable::Tree { root, glob }) => Targets::Tree { root, glob },
            TargetsRepr::Table(TargetsTable::Matching { root, contains }) => {
                Targets::Matching { root, contains }
            }
            TargetsRepr::Table(TargetsTable::Git(a)) => {
                Targets::Git(if a.is_empty() { None } else { Some(a) })
            }
            TargetsRepr::Table(TargetsTable::Probe { tool, arguments }) => {
                Targets::Probe { tool, arguments }
            }
        })
    }
}

/// `[[vaults.paged]]`: a batch-read tool the governor pages instead of refusing.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Paged {
    pub tool: String,
    /// The array argument holding the items.
    pub items: String,
}

/// How the shim reads an argument that names files (`[[vaults.paths]] kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgKind {
    /// A filesystem path (or an array of them) under the vault root.
    Path,
    /// A git revision: every `<rev>:<path>`, `:<path>`, `:<n>:<path>` part is a path.
    Revision,
    /// A git pathspec (or an array): a path and everything under it; magic and globs
    /// other than `:(top)` / `:(literal)` / `:/` are refused under an ACL.
    Pathspec,
    /// Read as a revision by git if it is one, else as a pathspec (`git diff <target>`):
    /// judged as both.
    RevisionOrPathspec,
    /// A repository the tool reads whole: what every tracked file holds now (`git diff`,
    /// `git diff --cached` with no path). Judged as the folder and, under an ACL, every
    /// entry of its index.
    Tracked,
    /// Not a path, whatever its name or schema says (overrides discovery).
    None,
}

/// `[[vaults.paths]]`: declares which arguments of a tool name files, and how.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathArgs {
    pub tool: String,
    pub args: Vec<String>,
    pub kind: ArgKind,
    /// The argument naming the repository that revisions and pathspecs are relative
    /// to (default: the vault root).
    #[serde(default)]
    pub repo: Option<String>,
}

/// Arguments of the real servers tc is tested with that name files but that schema
/// discovery cannot classify: `(tool, argument, kind, repository argument)`. The shim
/// applies them when the tool's schema has the argument and the config declares
/// nothing for it; `tcctl policy init` writes them out.
pub const KNOWN_PATH_ARGS: &[(&str, &str, ArgKind, Option<&str>)] = &[
    // mcp-server-git: `repo.rev_parse(revision)` (GitPython).
    ("git_show", "revision", ArgKind::Revision, Some("repo_path")),
    // `git diff <target>`: a revision if it resolves, else a pathspec.
    (
        "git_diff",
        "target",
        ArgKind::RevisionOrPathspec,
        Some("repo_path"),
    ),
    // `git diff --cached` / `git diff` with no path: every tracked file's changes.
    ("git_diff_staged", "repo_path", ArgKind::Tracked, None),
    ("git_diff_unstaged", "repo_path", ArgKind::Tracked, None),
    // `git add -- <files>`.
    ("git_add", "files", ArgKind::Pathspec, Some("repo_path")),
    // `rev_parse(branch_name)` then `git checkout <branch_name>`.
    (
        "git_checkout",
        "branch_name",
        ArgKind::Revision,
        Some("repo_path"),
    ),
    // `git branch --contains <rev>` / `--no-contains <rev>`: a revision, and git's
    // refusal of a blob (`:private/key.txt`) prints its object name.
    (
        "git_branch",
        "contains",
        ArgKind::Revision,
        Some("repo_path"),
    ),
    (
        "git_branch",
        "not_contains",
        ArgKind::Revision,
        Some("repo_path"),
    ),
];

/// `[vaults.acl]`: globs relative to the vault root.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Acl {
    #[serde(default)]
    pub deny: Vec<String>,
    #[serde(default)]
    pub read_only: Vec<String>,
}

impl Config {
    /// Loads from `explicit` (a `--config` flag), else the default location.
    /// A missing file at the default location means defaults; a missing explicit one is an error.
    pub fn load(explicit: Option<&Path>) -> Result<Config, ConfigError> {
        Self::load_with_env(explicit, &paths::process_env)
    }

    /// [`Config::load`] with an injected environment.
    pub fn load_with_env(
        explicit: Option<&Path>,
        env: &dyn Fn(&str) -> Option<OsString>,
    ) -> Result<Config, ConfigError> {
        Self::load_text_with_env(explicit, env).map(|(c, _)| c)
    }

    /// [`Config::load`], also returning the text it parsed (None: no file, defaults), so
    /// tcd can serve exactly the policy it runs (`GetPolicy`).
    pub fn load_text(explicit: Option<&Path>) -> Result<(Config, Option<String>), ConfigError> {
        Self::load_text_with_env(explicit, &paths::process_env)
    }

    fn load_text_with_env(
        explicit: Option<&Path>,
        env: &dyn Fn(&str) -> Option<OsString>,
    ) -> Result<(Config, Option<String>), ConfigError> {
        let (path, by) = match explicit {
            Some(p) => (p.to_path_buf(), Some("--config")),
            None => {
                let (p, from_env) = paths::config_file(env)?;
                (p, from_env.then_some("$TC_CONFIG"))
            }
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok((Self::parse(&text, &path)?, Some(text))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match by {
                Some(by) => Err(ConfigError::Missing { path, by }),
                None => Ok((Config::default(), None)),
            },
            Err(source) => Err(ConfigError::Read { path, source }),
        }
    }

    /// Parses and validates `text`; `path` is only used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let mut cfg: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        cfg.source = Some(path.to_path_buf());
        cfg.validate()?;
        Ok(cfg)
    }

    fn invalid(&self, key: String, reason: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            path: self.source.clone().unwrap_or_default(),
            key,
            reason: reason.into(),
        }
    }

    /// Checks every rule serde cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.daemon.elicit_ttl_seconds == 0 {
            return Err(self.invalid("daemon.elicit_ttl_seconds".into(), "must be at least 1"));
        }
        let d = &self.daemon;
        for (key, ok, rule) in [
            (
                "events_max_age_days",
                d.events_max_age_days >= 1,
                "must be at least 1".to_string(),
            ),
            (
                "events_max_bytes",
                d.events_max_bytes >= MIN_EVENTS_MAX_BYTES,
                format!("must be at least {MIN_EVENTS_MAX_BYTES}"),
            ),
            (
                "rate_limit_per_minute",
                d.rate_limit_per_minute >= 1,
                "must be at least 1".into(),
            ),
            (
                "rate_limit_burst",
                d.rate_limit_burst >= 1,
                "must be at least 1".into(),
            ),
        ] {
            if !ok {
                return Err(self.invalid(format!("daemon.{key}"), rule));
            }
        }
        self.validate_store()?;
        if self.governor.max_response_bytes < 1024 {
            return Err(self.invalid(
                "governor.max_response_bytes".into(),
                "must be at least 1024",
            ));
        }
        let mut ids = std::collections::HashSet::new();
        for (i, v) in self.vaults.iter().enumerate() {
            let at = format!("vaults[{i}]");
            if v.id.is_empty()
                || !v
                    .id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return Err(self.invalid(format!("{at}.id"), "must be non-empty [A-Za-z0-9._-]"));
            }
            if !ids.insert(v.id.as_str()) {
                return Err(
                    self.invalid(format!("{at}.id"), format!("duplicate vault id {:?}", v.id))
                );
            }
            if (v.url.is_none() || v.has_root()) && !v.root.is_absolute() {
                return Err(self.invalid(format!("{at}.root"), "must be an absolute path"));
            }
            self.validate_remote(&at, v)?;
            if v.max_target_files == 0 {
                return Err(self.invalid(format!("{at}.max_target_files"), "must be at least 1"));
            }
            let mut tools = std::collections::HashSet::new();
            for (j, g) in v.gates.iter().enumerate() {
                let key = format!("{at}.gates[{j}]");
                if !tools.insert(g.tool.as_str()) {
                    return Err(self.invalid(
                        format!("{key}.tool"),
                        format!("tool {:?} is gated twice", g.tool),
                    ));
                }
                match &g.targets {
                    None => {
                        return Err(self.invalid(
                            format!("{key}.targets"),
                            format!(
                                "gate for tool {:?} declares no targets; every gate must say what its \
                                 confirmation is bound to (write targets = \"none\" to bind on arguments alone)",
                                g.tool
                            ),
                        ))
                    }
                    Some(Targets::Paths(p)) if p.is_empty() => {
                        return Err(self.invalid(format!("{key}.targets.paths"), "lists no argument"))
                    }
                    Some(Targets::Tree { glob, .. }) => {
                        globset::Glob::new(glob).map_err(|e| {
                            self.invalid(format!("{key}.targets.tree.glob"), e.to_string())
                        })?;
                    }
                    Some(Targets::Probe { arguments, .. }) if !arguments.is_object() => {
                        return Err(self.invalid(format!("{key}.targets.probe.arguments"), "must be a table"))
                    }
                    _ => {}
                }
                if let Some(Preview::Diff(d)) = &g.preview {
                    if d.path.is_empty() || d.content.is_empty() || d.path == d.content {
                        return Err(self.invalid(
                            format!("{key}.preview.diff"),
                            "must name two different arguments: path (the file) and content (what is written)",
                        ));
                    }
                }
            }
            for (j, p) in v.paged.iter().enumerate() {
                if p.items.is_empty() {
                    return Err(
                        self.invalid(format!("{at}.paged[{j}].items"), "must name an argument")
                    );
                }
            }
            let mut declared = std::collections::HashSet::new();
            for (j, p) in v.paths.iter().enumerate() {
                let key = format!("{at}.paths[{j}]");
                if p.args.is_empty() || p.args.iter().any(String::is_empty) {
                    return Err(
                        self.invalid(format!("{key}.args"), "must name one argument or more")
                    );
                }
                for a in &p.args {
                    if !declared.insert((p.tool.as_str(), a.as_str())) {
                        return Err(self.invalid(
                            format!("{key}.args"),
                            format!("argument {a:?} of tool {:?} is declared twice", p.tool),
                        ));
                    }
                }
                if p.repo.as_deref() == Some("") {
                    return Err(self.invalid(format!("{key}.repo"), "must name an argument"));
                }
            }
            for (list, globs) in [("deny", &v.acl.deny), ("read_only", &v.acl.read_only)] {
                for (j, g) in globs.iter().enumerate() {
                    globset::Glob::new(g).map_err(|e| {
                        self.invalid(format!("{at}.acl.{list}[{j}]"), e.to_string())
                    })?;
                }
            }
            if let Some(h) = &v.http {
                h.check()
                    .map_err(|(k, why)| self.invalid(format!("{at}.http.{k}"), why))?;
                h.auth
                    .check(h.listen.as_deref())
                    .map_err(|(k, why)| self.invalid(format!("{at}.http.auth.{k}"), why))?;
            }
        }
        Ok(())
    }

    /// The cache (state) directory, with its fallback chain.
    pub fn cache_dir(&self) -> Result<PathBuf, PathError> {
        self.cache_dir_with_env(&paths::process_env)
    }

    /// [`Config::cache_dir`] with an injected environment.
    pub fn cache_dir_with_env(
        &self,
        env: &dyn Fn(&str) -> Option<OsString>,
    ) -> Result<PathBuf, PathError> {
        match &self.daemon.cache_dir {
            Some(p) => Ok(paths::expand_home(p, env)),
            None => paths::default_cache_dir(env),
        }
    }

    /// The daemon socket, with its fallback chain.
    pub fn socket(&self) -> Result<PathBuf, PathError> {
        self.socket_with_env(&paths::process_env)
    }

    /// [`Config::socket`] with an injected environment.
    pub fn socket_with_env(
        &self,
        env: &dyn Fn(&str) -> Option<OsString>,
    ) -> Result<PathBuf, PathError> {
        match &self.daemon.socket {
            Some(p) => Ok(paths::expand_home(p, env)),
            None => Ok(paths::default_socket(
                env,
                &self.cache_dir_with_env(env)?,
                // Probed only when the variable is unset: the one case it is for.
                env("XDG_RUNTIME_DIR")
                    .is_none()
                    .then(paths::user_runtime_dir)
                    .flatten()
                    .as_deref(),
            )),
        }
    }

    /// The vault with this id.
    pub fn vault(&self, id: &str) -> Option<&VaultConfig> {
        self.vaults.iter().find(|v| v.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/etc/tc.toml"))
    }

    #[test]
    fn empty_file_is_all_defaults() {
        let c = parse("").unwrap();
        assert_eq!(c.daemon.elicit_ttl_seconds, 300);
        assert_eq!(c.daemon.events_max_age_days, 90);
        assert_eq!(c.daemon.events_max_bytes, 16 * 1024 * 1024);
        assert_eq!(c.daemon.rate_limit_per_minute, 120);
        assert_eq!(c.daemon.rate_limit_burst, 300);
        assert_eq!(c.governor.max_response_bytes, 1_048_576);
        assert!(c.vaults.is_empty());
    }

    #[test]
    fn design_example_parses() {
        let c = parse(
            r#"
[daemon]
elicit_ttl_seconds = 120
[[vaults]]
id = "notes"
root = "/home/me/notes"
command = ["node", "x.js", "/home/me/notes"]
[[vaults.gates]]
tool = "move_file"
when = { cross_folder = ["source", "destination"] }
targets = { paths = ["source", "destination"] }
[[vaults.gates]]
tool = "git_commit"
targets = { git = "repo_path" }
[[vaults.gates]]
tool = "delete_entities"
targets = { probe = { tool = "open_nodes", arguments = { names = "$entityNames" } } }
[[vaults.gates]]
tool = "run"
targets = "none"
[[vaults.paged]]
tool = "read_multiple_files"
items = "paths"
[vaults.acl]
deny = ["private/**"]
"#,
        )
        .unwrap();
        let v = c.vault("notes").unwrap();
        assert_eq!(
            v.gates[0].targets,
            Some(Targets::Paths(vec!["source".into(), "destination".into()]))
        );
        assert_eq!(
            v.gates[1].targets,
            Some(Targets::Git(Some("repo_path".into())))
        );
        assert!(
            matches!(&v.gates[2].targets, Some(Targets::Probe { tool, .. }) if tool == "open_nodes")
        );
        assert_eq!(v.gates[3].targets, Some(Targets::None));
        assert_eq!(
            v.gates[0]
                .when
                .as_ref()
                .unwrap()
                .cross_folder
                .as_ref()
                .unwrap()[1],
            "destination"
        );
    }

    #[test]
    fn unknown_keys_are_errors_naming_the_key() {
        let e = parse("[daemon]\nsockett = \"/x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sockett") && e.contains("/etc/tc.toml"), "{e}");
        let e = parse("[[vaults]]\nid = \"a\"\nroot = \"/a\"\n[[vaults.gates]]\ntool = \"t\"\ntargets = \"none\"\nwhen = { exist = \"p\" }\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("exist"), "{e}");
    }

    #[test]
    fn a_gate_preview_names_two_arguments() {
        let gate = |preview: &str| {
            format!("[[vaults]]\nid = \"a\"\nroot = \"/a\"\n[[vaults.gates]]\ntool = \"w\"\ntargets = {{ paths = [\"path\"] }}\npreview = {preview}\n")
        };
        let c = parse(&gate(
            "{ diff = { path = \"path\", content = \"content\" } }",
        ))
        .unwrap();
        assert_eq!(
            c.vaults[0].gates[0].preview,
            Some(Preview::Diff(DiffPreview {
                path: "path".into(),
                content: "content".into()
            }))
        );
        for (bad, key) in [
            ("{ diff = { path = \"path\" } }", "content"),
            (
                "{ diff = { path = \"p\", content = \"c\", mode = \"x\" } }",
                "mode",
            ),
            ("{ image = { path = \"p\" } }", "image"),
            (
                "{ diff = { path = \"p\", content = \"p\" } }",
                "preview.diff",
            ),
            (
                "{ diff = { path = \"\", content = \"c\" } }",
                "preview.diff",
            ),
        ] {
            let e = parse(&gate(bad)).unwrap_err().to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
    }

    #[test]
    fn a_gate_without_targets_is_refused_with_what_to_write() {
        let e = parse("[[vaults]]\nid = \"a\"\nroot = \"/a\"\n[[vaults.gates]]\ntool = \"rm\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("vaults[0].gates[0].targets") && e.contains("targets = \"none\""),
            "{e}"
        );
        let e = parse("[[vaults]]\nid = \"a\"\nroot = \"/a\"\n[[vaults.gates]]\ntool = \"rm\"\ntargets = \"all\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("targets"), "{e}");
    }

    #[test]
    fn rule_violations_name_the_key() {
        for (text, key) in [
            (
                "[daemon]\nelicit_ttl_seconds = 0\n",
                "daemon.elicit_ttl_seconds",
            ),
            (
                "[daemon]\nevents_max_age_days = 0\n",
                "daemon.events_max_age_days",
            ),
            (
                "[daemon]\nevents_max_bytes = 1000\n",
                "daemon.events_max_bytes",
            ),
            (
                "[daemon]\nrate_limit_per_minute = 0\n",
                "daemon.rate_limit_per_minute",
            ),
            (
                "[daemon]\nrate_limit_burst = 0\n",
                "daemon.rate_limit_burst",
            ),
            ("[[vaults]]\nid = \"a\"\nroot = \"rel\"\n", "vaults[0].root"),
            (
                "[[vaults]]\nid = \"a\"\nroot = \"/a\"\nmax_target_files = 0\n",
                "vaults[0].max_target_files",
            ),
            (
                "[[vaults]]\nid = \"a\"\nroot = \"/a\"\n[[vaults]]\nid = \"a\"\nroot = \"/b\"\n",
                "vaults[1].id",
            ),
            (
                "[[vaults]]\nid = \"a\"\nroot = \"/a\"\n[vaults.acl]\ndeny = [\"[\"]\n",
                "vaults[0].acl.deny[0]",
            ),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(key), "{text:?} -> {e}");
        }
    }

    #[test]
    fn path_argument_declarations() {
        let base = "[[vaults]]\nid = \"a\"\nroot = \"/a\"\n";
        let c = parse(&format!(
            "{base}[[vaults.paths]]\ntool = \"git_show\"\nargs = [\"revision\"]\nkind = \"revision\"\nrepo = \"repo_path\"\n"
        ))
        .unwrap();
        let p = &c.vaults[0].paths[0];
        assert_eq!(
            (p.kind, p.repo.as_deref()),
            (ArgKind::Revision, Some("repo_path"))
        );
        for (extra, want) in [
            ("args = [\"r\"]\nkind = \"rev\"\n", "rev"),
            ("args = [\"r\"]\nkind = \"path\"\nrepos = \"x\"\n", "repos"),
            ("args = []\nkind = \"path\"\n", "vaults[0].paths[0].args"),
            ("args = [\"r\", \"r\"]\nkind = \"path\"\n", "declared twice"),
        ] {
            let e = parse(&format!("{base}[[vaults.paths]]\ntool = \"t\"\n{extra}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{extra:?} -> {e}");
        }
    }

    #[test]
    fn missing_default_file_is_defaults_but_missing_explicit_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().to_path_buf();
        let env = move |k: &str| (k == "HOME").then(|| home.clone().into_os_string());
        assert!(Config::load_with_env(None, &env).unwrap().vaults.is_empty());
        let e = Config::load_with_env(Some(&dir.path().join("nope.toml")), &env).unwrap_err();
        assert!(matches!(e, ConfigError::Missing { .. }), "{e}");
    }
}

/// Property tests and the replay of `fuzz/corpus/config/` (made by `fuzz/gen_corpus.py`):
/// any file is a config or a [`ConfigError`] naming what is wrong, never a panic.
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn config(n: u32) -> ProptestConfig {
        ProptestConfig {
            cases: std::env::var("PROPTEST_CASES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(n),
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    /// A refusal is a parse error with a message, or a rule naming its key.
    fn named(e: &ConfigError) -> bool {
        match e {
            ConfigError::Parse { message, .. } => !message.is_empty(),
            ConfigError::Invalid { key, reason, .. } => {
                !reason.is_empty()
                    && ["daemon.", "governor.", "vaults["]
                        .iter()
                        .any(|p| key.starts_with(p))
            }
            _ => false,
        }
    }

    /// A parsed config keeps every rule `validate` enforces.
    fn holds(c: &Config) -> bool {
        c.daemon.elicit_ttl_seconds >= 1
            && c.daemon.events_max_age_days >= 1
            && c.daemon.events_max_bytes >= MIN_EVENTS_MAX_BYTES
            && c.daemon.rate_limit_per_minute >= 1
            && c.daemon.rate_limit_burst >= 1
            && c.governor.max_response_bytes >= 1024
            && c.vaults.iter().all(|v| {
                !v.id.is_empty()
                    && v.root.is_absolute()
                    && v.gates.iter().all(|g| g.targets.is_some())
            })
    }

    fn pick(options: &[&'static str]) -> impl Strategy<Value = &'static str> {
        prop::sample::select(options.to_vec())
    }

    fn gate() -> impl Strategy<Value = String> {
        (
            pick(&["\"t\"", "\"u\"", "\"\""]),
            pick(&[
                "",
                "targets = \"none\"",
                "targets = \"all\"",
                "targets = { paths = [\"path\"] }",
                "targets = { paths = [] }",
                "targets = { tree = { root = \"d\", glob = \"**/*.md\" } }",
                "targets = { tree = { root = \"d\", glob = \"[\" } }",
                "targets = { matching = { root = \"d\", contains = \"x\" } }",
                "targets = { git = \"repo_path\" }",
                "targets = { probe = { tool = \"p\", arguments = { a = \"$x\" } } }",
                "targets = { probe = { tool = \"p\", arguments = 5 } }",
            ]),
            pick(&[
                "",
                "when = { cross_folder = [\"a\", \"b\"] }",
                "when = { exists = \"path\", equals = { arg = \"a\", value = [1] } }",
                "when = { exist = \"path\" }",
            ]),
        )
            .prop_map(|(tool, targets, when)| {
                format!("[[vaults.gates]]\ntool = {tool}\n{targets}\n{when}\n")
            })
    }

    fn vault() -> impl Strategy<Value = String> {
        (
            pick(&["\"a\"", "\"b\"", "\"v.1_-\"", "\"a b\"", "\"\""]),
            pick(&["\"/srv/a\"", "\"rel\"", "\"/\""]),
            pick(&[
                "",
                "lean = true",
                "legacy_elicitation_shim = true",
                "command = []",
            ]),
            prop::collection::vec(gate(), 0..3),
            pick(&[
                "",
                "[[vaults.paged]]\ntool = \"r\"\nitems = \"paths\"",
                "[[vaults.paged]]\ntool = \"r\"\nitems = \"\"",
            ]),
            pick(&[
                "",
                "[vaults.acl]\ndeny = [\"private/**\"]\nread_only = [\"{a,b}/*\"]",
                "[vaults.acl]\ndeny = [\"[\"]",
            ]),
        )
            .prop_map(|(id, root, flag, gates, paged, acl)| {
                format!(
                    "[[vaults]]\nid = {id}\nroot = {root}\n{flag}\n{}{paged}\n{acl}\n",
                    gates.concat()
                )
            })
    }

    /// Documents built from the real tables and keys, mostly well formed, with values
    /// that break one rule or another: they reach `validate`, not only the TOML parser.
    fn document() -> impl Strategy<Value = String> {
        (
            pick(&[
                "",
                "[daemon]\nelicit_ttl_seconds = 0",
                "[daemon]\nelicit_ttl_seconds = 60",
                "[daemon]\nsockett = \"/x\"",
            ]),
            pick(&[
                "",
                "[governor]\nmax_response_bytes = 1023",
                "[governor]\nmax_response_bytes = 4096",
            ]),
            prop::collection::vec(vault(), 0..3),
        )
            .prop_map(|(daemon, governor, vaults)| {
                format!("{daemon}\n{governor}\n{}", vaults.concat())
            })
    }

    proptest! {
        #![proptest_config(config(512))]

        #[test]
        fn any_text_is_a_config_or_a_named_error(text in "(?s).{0,300}") {
            match Config::parse(&text, Path::new("/fuzz.toml")) {
                Ok(c) => prop_assert!(holds(&c)),
                Err(e) => prop_assert!(named(&e), "{e:?}"),
            }
        }

        #[test]
        fn structured_documents_reach_validation(text in document()) {
            match Config::parse(&text, Path::new("/fuzz.toml")) {
                Ok(c) => prop_assert!(holds(&c), "{}", text),
                Err(e) => prop_assert!(named(&e), "{e:?}\n{text}"),
            }
        }
    }

    #[test]
    fn corpus_config() {
        let dir = crate::fuzz_corpus::dir("config");
        let mut wrong = Vec::new();
        for (name, bytes) in crate::fuzz_corpus::read("config") {
            let p = dir.join(&name);
            let utf8 = std::str::from_utf8(&bytes).is_ok();
            // Through `load`, as the binaries read it (a non-UTF-8 file is a read error).
            let outcome = std::panic::catch_unwind(|| Config::load(Some(&p)));
            let ok = match &outcome {
                Ok(Ok(c)) => holds(c),
                Ok(Err(e)) if name.starts_with("valid-") => {
                    wrong.push(format!("{name}: a valid seed was refused: {e}"));
                    continue;
                }
                Ok(Err(ConfigError::Read { source, .. })) => {
                    !utf8 && source.kind() == std::io::ErrorKind::InvalidData
                }
                Ok(Err(e)) => named(e),
                Err(_) => false,
            };
            if !ok {
                wrong.push(format!("{name}: {outcome:?}"));
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }
}
