//! Where tc keeps things: the config file, the cache (state) directory and the daemon
//! socket, each with the fallback chain documented in the README.
//!
//! Lookups take an `env` function so tests can pin the environment without mutating
//! the process's own.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Reads a variable from the real process environment, treating empty as unset.
pub fn process_env(name: &str) -> Option<OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

/// Errors finding a default location.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// Neither the XDG variable nor `$HOME` is set.
    #[error("cannot find a default {what}: ${xdg} and $HOME are both unset; set one, or give the path in the config")]
    NoHome {
        what: &'static str,
        xdg: &'static str,
    },
}

fn home(env: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    env("HOME").map(PathBuf::from)
}

/// `$TC_CONFIG`, else `$XDG_CONFIG_HOME/tc/config.toml`, else `~/.config/tc/config.toml`.
/// The bool says whether the location was chosen explicitly (`$TC_CONFIG`).
pub fn config_file(env: &dyn Fn(&str) -> Option<OsString>) -> Result<(PathBuf, bool), PathError> {
    if let Some(p) = env("TC_CONFIG") {
        return Ok((PathBuf::from(p), true));
    }
    if let Some(x) = env("XDG_CONFIG_HOME") {
        return Ok((PathBuf::from(x).join("tc/config.toml"), false));
    }
    home(env)
        .map(|h| (h.join(".config/tc/config.toml"), false))
        .ok_or(PathError::NoHome {
            what: "config file",
            xdg: "XDG_CONFIG_HOME",
        })
}

/// `$XDG_STATE_HOME/tc`, else `~/.local/state/tc`.
pub fn default_cache_dir(env: &dyn Fn(&str) -> Option<OsString>) -> Result<PathBuf, PathError> {
    if let Some(x) = env("XDG_STATE_HOME") {
        return Ok(PathBuf::from(x).join("tc"));
    }
    home(env)
        .map(|h| h.join(".local/state/tc"))
        .ok_or(PathError::NoHome {
            what: "cache directory",
            xdg: "XDG_STATE_HOME",
        })
}

/// `$XDG_RUNTIME_DIR/tc/tcd.sock`; without that variable (MCP clients start servers with
/// a scrubbed environment) `<user_runtime>/tc/tcd.sock`, where `user_runtime` is
/// [`user_runtime_dir`]'s answer; else `<cache_dir>/tcd.sock`. tcd, tcctl and the shim
/// all come here, so they agree on the socket whatever their environment.
pub fn default_socket(
    env: &dyn Fn(&str) -> Option<OsString>,
    cache_dir: &Path,
    user_runtime: Option<&Path>,
) -> PathBuf {
    match (env("XDG_RUNTIME_DIR"), user_runtime) {
        (Some(x), _) => PathBuf::from(x).join("tc/tcd.sock"),
        (None, Some(r)) => r.join("tc/tcd.sock"),
        (None, None) => cache_dir.join("tcd.sock"),
    }
}

/// `/run/user/<uid>` (what systemd-logind makes `$XDG_RUNTIME_DIR`) when it is this
/// user's own private directory, else None.
pub fn user_runtime_dir() -> Option<PathBuf> {
    let uid = nix::unistd::getuid().as_raw();
    let dir = PathBuf::from(format!("/run/user/{uid}"));
    is_private_dir_of(&dir, uid).then_some(dir)
}

/// Whether `dir` is a directory itself (not a link to one), owned by `uid`, and not
/// writable by group or others: a socket path under it cannot be planted by another user.
pub fn is_private_dir_of(dir: &Path, uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::symlink_metadata(dir)
        .is_ok_and(|m| m.file_type().is_dir() && m.uid() == uid && m.mode() & 0o022 == 0)
}

/// Expands a leading `~/` against `$HOME`; other paths are returned unchanged.
pub fn expand_home(p: &Path, env: &dyn Fn(&str) -> Option<OsString>) -> PathBuf {
    match (p.strip_prefix("~"), home(env)) {
        (Ok(rest), Some(h)) => h.join(rest),
        _ => p.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).map(OsString::from)
    }

    #[test]
    fn fallback_chain_for_root_without_runtime_dir() {
        let env = env_of(&[("HOME", "/root")]);
        let cache = default_cache_dir(&env).unwrap();
        assert_eq!(cache, PathBuf::from("/root/.local/state/tc"));
        assert_eq!(
            default_socket(&env, &cache, None),
            PathBuf::from("/root/.local/state/tc/tcd.sock")
        );
        // With the user's own /run/user/<uid>, the scrubbed environment finds it there.
        assert_eq!(
            default_socket(&env, &cache, Some(Path::new("/run/user/0"))),
            PathBuf::from("/run/user/0/tc/tcd.sock")
        );
        assert_eq!(
            config_file(&env).unwrap(),
            (PathBuf::from("/root/.config/tc/config.toml"), false)
        );
    }

    #[test]
    fn xdg_variables_win() {
        let env = env_of(&[
            ("HOME", "/h"),
            ("XDG_STATE_HOME", "/s"),
            ("XDG_RUNTIME_DIR", "/run/user/1"),
            ("XDG_CONFIG_HOME", "/c"),
        ]);
        let cache = default_cache_dir(&env).unwrap();
        assert_eq!(cache, PathBuf::from("/s/tc"));
        assert_eq!(
            default_socket(&env, &cache, Some(Path::new("/run/user/2"))),
            PathBuf::from("/run/user/1/tc/tcd.sock")
        );
        assert_eq!(
            config_file(&env).unwrap().0,
            PathBuf::from("/c/tc/config.toml")
        );
        let env = env_of(&[("TC_CONFIG", "/x.toml")]);
        assert_eq!(config_file(&env).unwrap(), (PathBuf::from("/x.toml"), true));
    }

    #[test]
    fn only_a_private_directory_of_the_user_is_a_runtime_dir() {
        use std::os::unix::fs::{symlink, PermissionsExt as _};
        let uid = nix::unistd::getuid().as_raw();
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("d");
        std::fs::create_dir(&d).unwrap();
        let mode = |m| std::fs::set_permissions(&d, std::fs::Permissions::from_mode(m)).unwrap();
        mode(0o700);
        assert!(is_private_dir_of(&d, uid));
        assert!(
            !is_private_dir_of(&d, uid.wrapping_add(1)),
            "another user's"
        );
        for loose in [0o770, 0o702, 0o777] {
            mode(loose);
            assert!(!is_private_dir_of(&d, uid), "{loose:o}");
        }
        mode(0o755);
        assert!(is_private_dir_of(&d, uid));
        let link = t.path().join("link");
        symlink(&d, &link).unwrap();
        assert!(!is_private_dir_of(&link, uid), "a symlink");
        let f = t.path().join("f");
        std::fs::write(&f, "").unwrap();
        assert!(!is_private_dir_of(&f, uid), "a file");
        assert!(!is_private_dir_of(&t.path().join("absent"), uid));
    }

    #[test]
    fn no_home_is_a_clear_error() {
        let env = env_of(&[]);
        let e = default_cache_dir(&env).unwrap_err().to_string();
        assert!(e.contains("XDG_STATE_HOME") && e.contains("HOME"), "{e}");
    }
}
