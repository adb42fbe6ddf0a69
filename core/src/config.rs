//! The one TOML configuration shared by `tcd`, `tc-shim` and `tcctl`: the [`Config`]
//! document, where it is loaded from, and the modules owning each of its sections.
//!
//! - `daemon`: [`DaemonConfig`], [`GuardedConfig`], [`ApprovalsConfig`], [`GovernorConfig`]
//! - `vault`, `gate`: [`VaultConfig`]; [`Gate`], [`When`], [`Targets`]: which tool calls
//!   need a human, and what the confirmation is bound to.
//! - `http`, `http_auth`, `remote`: [`HttpFront`] and who its callers are ([`HttpAuth`]);
//!   a vault's remote server (`url`, headers, bearer) and what a root-less vault may gate.
//! - `notify`: [`NotifyConfig`]: where tcd pushes "a request waits" (ntfy, webhooks).
//! - `validate`, `findings`, `error`: the rules serde cannot express, every problem
//!   reported ([`ConfigError`]); unknown keys are refused when parsing, naming the key.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::paths::{self, PathError};

mod daemon;
mod error;
mod findings;
mod gate;
mod http;
mod http_auth;
mod notify;
mod page_remote;
mod remote;
mod store;
mod validate;
mod vault;
pub use daemon::*;
pub use error::*;
pub use gate::*;
pub use http::*;
pub use http_auth::*;
pub use notify::*;
pub use page_remote::{CertSource, RemotePage, RemoteProblem, RemoteSpec, RemoteTls};
pub use remote::shown_url;
pub use store::{PostgresConfig, StoreKind, DEFAULT_POOL_SIZE};
pub use vault::*;

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
    /// `[notify]`: pushes to a phone (ntfy) or a signed webhook when a request waits.
    pub notify: NotifyConfig,
    pub vaults: Vec<VaultConfig>,
    /// Where this config was loaded from (not a TOML key).
    #[serde(skip)]
    pub source: Option<PathBuf>,
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
mod tests;

#[cfg(test)]
mod fuzz;
