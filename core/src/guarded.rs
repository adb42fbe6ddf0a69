//! Guarded mode's fixed ground: the system locations, whether
//! `/etc/tc/config.toml` says guarded, the root-ownership check tcd starts on, and the
//! tighten-only merge of a user's own config over the policy tcd serves.
//!
//! None of these locations can be moved by a flag or a variable: that is the point.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use toml::Value;

use crate::config::{Config, ConfigError, Mode};
use crate::paths;

/// The root-owned policy of a guarded deployment.
pub const SYSTEM_CONFIG: &str = "/etc/tc/config.toml";
/// The socket of the guarded tcd (systemd `RuntimeDirectory=tc`).
pub const SYSTEM_SOCKET: &str = "/run/tc/tcd.sock";
/// The guarded tcd's state: secret and cache.db (systemd `StateDirectory=tc`, 0700).
pub const SYSTEM_STATE_DIR: &str = "/var/lib/tc";

/// Why guarded mode cannot be set up or used as asked.
#[derive(Debug, thiserror::Error)]
pub enum GuardedError {
    /// `/etc/tc/config.toml` (or the user's file) exists but cannot be read or parsed.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The system config exists but this process cannot read it: fail closed.
    #[error("cannot read {path}: {source}; while it exists tc runs guarded and will not fall back to personal mode (make it readable: chmod 0644, owned by root)")]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A file or directory that only root may write is writable by someone else.
    #[error("{path}: {why}; in guarded mode it must be owned by root and writable by no one else (chown root:root, chmod go-w)")]
    NotRootOwned { path: PathBuf, why: String },
    /// A flag or variable that would point a client elsewhere.
    #[error("{what} is not allowed: {SYSTEM_CONFIG} puts tc in guarded mode, so tcctl and tc-shim use {SYSTEM_SOCKET} and the policy tcd serves, nothing else (unset it / drop the flag)")]
    Override { what: String },
    /// A user config key that would loosen or move the system policy.
    #[error("{path}: {key}: {why} (guarded mode: a user config may only add gates, acl.deny globs and paged tools to a vault {SYSTEM_CONFIG} defines)")]
    NotTightening {
        path: PathBuf,
        key: String,
        why: String,
    },
    /// A user or uid in `[guarded]` that does not exist here.
    #[error("{key}: {why}")]
    Account { key: String, why: String },
}

/// The system config, if `/etc/tc/config.toml` exists and says `mode = "guarded"`.
/// A file that exists but cannot be read or parsed is an error, never "personal".
pub fn system_config() -> Result<Option<(Config, String)>, GuardedError> {
    system_config_at(Path::new(SYSTEM_CONFIG))
}

/// [`system_config`] at `path` (tests). Returns the parsed config and its text.
pub fn system_config_at(path: &Path) -> Result<Option<(Config, String)>, GuardedError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(GuardedError::Unreadable {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let cfg = Config::parse(&text, path)?;
    Ok((cfg.daemon.mode == Mode::Guarded).then_some((cfg, text)))
}

/// Refuses `file` unless it and its directory are owned by uid 0, are not symlinks and
/// are writable by no group or other user (what tcd checks before starting guarded).
pub fn check_root_owned(file: &Path) -> Result<(), GuardedError> {
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    check_one(file, false)?;
    check_one(&dir, true)
}

fn check_one(p: &Path, want_dir: bool) -> Result<(), GuardedError> {
    let bad = |why: String| GuardedError::NotRootOwned {
        path: p.to_path_buf(),
        why,
    };
    let m = std::fs::symlink_metadata(p).map_err(|e| bad(format!("cannot stat: {e}")))?;
    let ft = m.file_type();
    if ft.is_symlink() {
        return Err(bad("is a symlink".into()));
    }
    if want_dir && !ft.is_dir() {
        return Err(bad("is not a directory".into()));
    }
    if !want_dir && !ft.is_file() {
        return Err(bad("is not a regular file".into()));
    }
    if m.uid() != 0 {
        return Err(bad(format!("is owned by uid {}", m.uid())));
    }
    if m.mode() & 0o022 != 0 {
        return Err(bad(format!(
            "mode {:04o} lets group or others write it",
            m.mode() & 0o7777
        )));
    }
    Ok(())
}

/// Refuses each client override that guarded mode forbids, naming it: `--config`,
/// `--socket` and `$TC_CONFIG`. Called only when [`system_config`] said guarded.
pub fn refuse_overrides(
    config_flag: Option<&Path>,
    socket_flag: Option<&Path>,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<(), GuardedError> {
    let what = if let Some(p) = config_flag {
        format!("--config {}", p.display())
    } else if let Some(p) = socket_flag {
        format!("--socket {}", p.display())
    } else if let Some(v) = env("TC_CONFIG") {
        format!("TC_CONFIG={}", PathBuf::from(v).display())
    } else {
        return Ok(());
    };
    Err(GuardedError::Override { what })
}

/// The user's own config file (`$XDG_CONFIG_HOME/tc/config.toml`, else
/// `~/.config/tc/config.toml`; never `$TC_CONFIG`, refused before) and its text, if any.
pub fn user_config_text(
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<Option<(PathBuf, String)>, GuardedError> {
    let no_tc_config = |k: &str| if k == "TC_CONFIG" { None } else { env(k) };
    let path = match paths::config_file(&no_tc_config) {
        Ok((p, _)) => p,
        // No HOME and no XDG_CONFIG_HOME: no user file, the system policy alone.
        Err(_) => return Ok(None),
    };
    match std::fs::read_to_string(&path) {
        Ok(t) => Ok(Some((path, t))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ConfigError::Read { path, source }.into()),
    }
}

/// What a client (tc-shim, tcctl) runs with while `/etc/tc/config.toml` says guarded.
#[derive(Debug, Clone)]
pub struct GuardedClient {
    /// The system config's text, as this client read it.
    pub system_text: String,
    /// The uid the daemon on [`SYSTEM_SOCKET`] must run as (checked with SO_PEERCRED).
    pub daemon_uid: u32,
    /// The user's own config file and its text, if there is one.
    pub user: Option<(PathBuf, String)>,
}

impl GuardedClient {
    /// The policy: `served` (the config text tcd serves, or the system file's) with
    /// the user's file merged over it tighten-only.
    pub fn policy(&self, served: &str, served_path: &Path) -> Result<Config, GuardedError> {
        let user = self.user.as_ref().map(|(p, t)| (p.as_path(), t.as_str()));
        merge_user(served, served_path, user)
    }
}

/// None in personal mode. In guarded mode, refuses the flags and variable that would
/// point the client elsewhere (each named), then finds the daemon's uid and the user's
/// own file.
pub fn client(
    config_flag: Option<&Path>,
    socket_flag: Option<&Path>,
) -> Result<Option<GuardedClient>, GuardedError> {
    let Some((sys, system_text)) = system_config()? else {
        return Ok(None);
    };
    refuse_overrides(config_flag, socket_flag, &paths::process_env)?;
    Ok(Some(GuardedClient {
        system_text,
        daemon_uid: daemon_uid(&sys)?,
        user: user_config_text(&paths::process_env)?,
    }))
}

/// The uid the guarded tcd must run as: `[guarded] daemon_user`, a name or a uid.
pub fn daemon_uid(cfg: &Config) -> Result<u32, GuardedError> {
    resolve_user(&cfg.guarded.daemon_user, "guarded.daemon_user")
}

/// The uids of `[guarded] humans` (names or uids), each of which must exist.
pub fn human_uids(cfg: &Config) -> Result<Vec<u32>, GuardedError> {
    cfg.guarded
        .humans
        .iter()
        .enumerate()
        .map(|(i, h)| resolve_user(h, &format!("guarded.humans[{i}]")))
        .collect()
}

fn resolve_user(name: &str, key: &str) -> Result<u32, GuardedError> {
    if let Ok(uid) = name.parse::<u32>() {
        return Ok(uid);
    }
    match nix::unistd::User::from_name(name) {
        Ok(Some(u)) => Ok(u.uid.as_raw()),
        Ok(None) => Err(GuardedError::Account {
            key: key.into(),
            why: format!("no user named {name:?} on this machine"),
        }),
        Err(e) => Err(GuardedError::Account {
            key: key.into(),
            why: format!("cannot look up user {name:?}: {e}"),
        }),
    }
}

/// The policy a guarded client runs with: the system config text (as tcd served it),
/// with the user's own file merged over it tighten-only. Any user key other than an
/// added gate, `acl.deny` glob or paged tool, on a vault the system defines, must be
/// absent or identical to the system's; otherwise the error names it.
pub fn merge_user(
    system_text: &str,
    system_path: &Path,
    user: Option<(&Path, &str)>,
) -> Result<Config, GuardedError> {
    let system = Config::parse(system_text, system_path)?;
    if system.daemon.mode != Mode::Guarded {
        return Err(GuardedError::NotTightening {
            path: system_path.to_path_buf(),
            key: "daemon.mode".into(),
            why: "the policy tcd serves does not say guarded".into(),
        });
    }
    let Some((upath, utext)) = user else {
        return Ok(system);
    };
    // The user's file need not stand alone (a vault is named by its id only); what it
    // adds is validated in the merged document, whose errors can only be the user's.
    let mut sys: Value = toml::from_str(system_text).map_err(|e| parse_err(system_path, e))?;
    let usr: Value = toml::from_str(utext).map_err(|e| parse_err(upath, e))?;
    let refuse = |key: String, why: &str| GuardedError::NotTightening {
        path: upath.to_path_buf(),
        key,
        why: why.into(),
    };
    let (Some(stab), Some(utab)) = (sys.as_table_mut(), usr.as_table()) else {
        return Err(refuse("(document)".into(), "not a table"));
    };
    for (k, uv) in utab {
        if k == "vaults" {
            continue;
        }
        same(stab.get(k), uv, k, &refuse)?;
    }
    let empty = Vec::new();
    let uvaults = utab
        .get("vaults")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let svaults = stab
        .entry("vaults")
        .or_insert_with(|| Value::Array(Vec::new()))
        .as_array_mut()
        .ok_or_else(|| refuse("vaults".into(), "not an array"))?;
    for (i, uv) in uvaults.iter().enumerate() {
        merge_vault(svaults, uv, &format!("vaults[{i}]"), &refuse)?;
    }
    let merged = toml::to_string(&sys).map_err(|e| refuse("(document)".into(), &e.to_string()))?;
    let mut cfg = Config::parse(&merged, upath)?;
    cfg.source = Some(system_path.to_path_buf());
    Ok(cfg)
}

fn parse_err(path: &Path, e: toml::de::Error) -> GuardedError {
    ConfigError::Parse {
        path: path.to_path_buf(),
        message: e.to_string().trim_end().to_string(),
    }
    .into()
}

type Refuse<'a> = dyn Fn(String, &str) -> GuardedError + 'a;

/// A user value that must equal the system's (absent in the system file: refused, even
/// when it spells the default, so nothing is left to interpretation).
fn same(sys: Option<&Value>, usr: &Value, key: &str, refuse: &Refuse) -> Result<(), GuardedError> {
    match (sys, usr) {
        (Some(Value::Table(s)), Value::Table(u)) => {
            for (k, v) in u {
                same(s.get(k), v, &format!("{key}.{k}"), refuse)?;
            }
            Ok(())
        }
        (None, Value::Table(u)) => {
            let empty = Value::Table(Default::default());
            same(Some(&empty), &Value::Table(u.clone()), key, refuse)
        }
        (Some(s), u) if s == u => Ok(()),
        (None, _) => Err(refuse(key.into(), "only the system config sets this")),
        _ => Err(refuse(key.into(), "differs from the system config")),
    }
}

fn merge_vault(
    svaults: &mut [Value],
    uv: &Value,
    at: &str,
    refuse: &Refuse,
) -> Result<(), GuardedError> {
    let utab = uv
        .as_table()
        .ok_or_else(|| refuse(at.into(), "not a table"))?;
    let id = utab.get("id").and_then(Value::as_str).unwrap_or_default();
    let svault = svaults
        .iter_mut()
        .filter_map(Value::as_table_mut)
        .find(|t| t.get("id").and_then(Value::as_str) == Some(id))
        .ok_or_else(|| {
            refuse(
                format!("{at}.id"),
                &format!("vault {id:?} is not defined by the system config"),
            )
        })?;
    for (k, v) in utab {
        let key = format!("{at}.{k}");
        match k.as_str() {
            "gates" => add_entries(svault, "gates", v, &key, refuse)?,
            "paged" => add_entries(svault, "paged", v, &key, refuse)?,
            "acl" => merge_acl(svault, v, &key, refuse)?,
            _ => same(svault.get(k), v, &key, refuse)?,
        }
    }
    Ok(())
}

/// Appends the user's gates (or paged tools) whose tool the system does not list;
/// an entry for a tool the system lists must be identical to it (no `when` added, no
/// other targets).
fn add_entries(
    svault: &mut toml::Table,
    list: &str,
    uv: &Value,
    key: &str,
    refuse: &Refuse,
) -> Result<(), GuardedError> {
    let uarr = uv
        .as_array()
        .ok_or_else(|| refuse(key.into(), "not an array"))?;
    let sarr = svault
        .entry(list)
        .or_insert_with(|| Value::Array(Vec::new()))
        .as_array_mut()
        .ok_or_else(|| refuse(key.into(), "not an array in the system config"))?;
    let tool = |v: &Value| v.get("tool").and_then(Value::as_str).map(str::to_owned);
    for (j, u) in uarr.iter().enumerate() {
        let ukey = format!("{key}[{j}]");
        match sarr.iter().find(|s| tool(s) == tool(u)) {
            Some(s) if s == u => {}
            Some(_) => {
                return Err(refuse(
                    ukey,
                    &format!(
                        "tool {:?} is in the system config's {list} with other settings; \
                         a user config cannot change it (e.g. add a `when`)",
                        tool(u).unwrap_or_default()
                    ),
                ))
            }
            None => {
                if list == "gates" {
                    new_gate_loosens_nothing(u, &ukey, refuse)?;
                }
                sarr.push(u.clone())
            }
        }
    }
    Ok(())
}

/// A gate the user adds may only make a call need a confirmation, never do anything
/// else: a `when` on it would turn a destructive tool's floor (disabled unless gated)
/// into "runs ungated whenever the condition fails", and a `probe` target makes the
/// shim call a downstream tool of the agent's choosing, unconfirmed, to fingerprint it.
fn new_gate_loosens_nothing(u: &Value, key: &str, refuse: &Refuse) -> Result<(), GuardedError> {
    if u.get("when").is_some() {
        return Err(refuse(
            format!("{key}.when"),
            "a gate the user adds applies always: a `when` could let a destructive tool \
             the system config does not gate run unconfirmed",
        ));
    }
    if u.get("targets").and_then(|t| t.get("probe")).is_some() {
        return Err(refuse(
            format!("{key}.targets.probe"),
            "a probe calls a downstream tool without a confirmation; only the system \
             config may declare one",
        ));
    }
    Ok(())
}

fn merge_acl(
    svault: &mut toml::Table,
    uv: &Value,
    key: &str,
    refuse: &Refuse,
) -> Result<(), GuardedError> {
    let utab = uv
        .as_table()
        .ok_or_else(|| refuse(key.into(), "not a table"))?;
    let sacl = svault
        .entry("acl")
        .or_insert_with(|| Value::Table(Default::default()))
        .as_table_mut()
        .ok_or_else(|| refuse(key.into(), "not a table in the system config"))?;
    for (k, v) in utab {
        if k != "deny" {
            same(sacl.get(k), v, &format!("{key}.{k}"), refuse)?;
            continue;
        }
        let deny = sacl
            .entry("deny")
            .or_insert_with(|| Value::Array(Vec::new()))
            .as_array_mut()
            .ok_or_else(|| refuse(format!("{key}.deny"), "not an array"))?;
        for g in v.as_array().into_iter().flatten() {
            if !deny.contains(g) {
                deny.push(g.clone());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
