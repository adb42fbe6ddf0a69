//! `[vaults.http]` (the Streamable HTTP front and who its callers are) and a vault's
//! remote server (`url`, `[vaults.headers]`, `[vaults.bearer]`): config types only.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

/// Most sessions a front keeps at once unless configured (a full table answers 503), in
/// front of a remote server (a session costs a few KB)…
pub const DEFAULT_MAX_SESSIONS: usize = 10_000;
/// …and in front of a `command` (each session runs its own server process).
pub const DEFAULT_MAX_SESSIONS_COMMAND: usize = 32;
/// How long an idle legacy session lives.
pub const DEFAULT_SESSION_IDLE_SECONDS: u64 = 1800;
/// Largest request body a front reads.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
/// Least time between two JWKS refreshes forced by an unknown `kid`.
pub const DEFAULT_JWKS_REFRESH_FLOOR_SECONDS: u64 = 30;

/// `[vaults.http]`: serve this vault over MCP Streamable HTTP (`tc-shim serve VAULT --http`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpFront {
    /// `host:port` to bind (`--http` overrides it).
    #[serde(default)]
    pub listen: Option<String>,
    /// `Origin`s accepted besides the bind's own (DNS rebinding protection).
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// `Host` values accepted besides the bind's own.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Default: [`DEFAULT_MAX_SESSIONS`] for a `url` vault, [`DEFAULT_MAX_SESSIONS_COMMAND`]
    /// for a `command` vault (see [`HttpFront::session_cap`]).
    #[serde(default)]
    pub max_sessions: Option<usize>,
    /// Most legacy sessions one caller keeps at once. Default: a quarter of the table
    /// with `jwt`/`oidc` callers (one caller cannot fill it), all of it with `none`
    /// (there is one caller). See [`HttpFront::caller_cap`].
    #[serde(default)]
    pub max_sessions_per_caller: Option<usize>,
    #[serde(default = "default_session_idle_seconds")]
    pub session_idle_seconds: u64,
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    #[serde(default)]
    pub auth: HttpAuth,
}

impl Default for HttpFront {
    fn default() -> Self {
        HttpFront {
            listen: None,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            max_sessions: None,
            max_sessions_per_caller: None,
            session_idle_seconds: DEFAULT_SESSION_IDLE_SECONDS,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            auth: HttpAuth::default(),
        }
    }
}

impl HttpFront {
    /// The limits' own rules: `(key, why)` of every one broken.
    pub fn check(&self) -> Vec<(&'static str, String)> {
        [
            ("max_sessions", self.max_sessions != Some(0), 1),
            (
                "max_sessions_per_caller",
                self.max_sessions_per_caller != Some(0),
                1,
            ),
            ("session_idle_seconds", self.session_idle_seconds >= 1, 1),
            ("max_body_bytes", self.max_body_bytes >= 1024, 1024),
        ]
        .into_iter()
        .filter(|(_, ok, _)| !ok)
        .map(|(key, _, least)| (key, format!("must be at least {least}")))
        .collect()
    }

    /// How many conversations the front keeps at once: the configured cap, else one that
    /// keeps a flood of sessions from starting thousands of server processes.
    pub fn session_cap(&self, remote: bool) -> usize {
        self.max_sessions.unwrap_or(if remote {
            DEFAULT_MAX_SESSIONS
        } else {
            DEFAULT_MAX_SESSIONS_COMMAND
        })
    }

    /// How many legacy sessions one caller keeps at once (see `max_sessions_per_caller`).
    pub fn caller_cap(&self, remote: bool) -> usize {
        let all = self.session_cap(remote);
        let default = match self.auth.mode {
            AuthMode::None => all,
            _ => (all / 4).max(1),
        };
        self.max_sessions_per_caller.unwrap_or(default).min(all)
    }
}

/// `[vaults.http.auth]`: who a request comes from.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpAuth {
    #[serde(default)]
    pub mode: AuthMode,
    /// Expected `iss` (required for `oidc`; discovery starts from it).
    #[serde(default)]
    pub issuer: Option<String>,
    /// Expected `aud` (required for `jwt` and `oidc`).
    #[serde(default)]
    pub audience: Option<String>,
    /// `jwt`: where the issuer's public keys are (JWKS). With neither this nor
    /// `public_keys`, tokens are HS256 with the secret tcd holds (`tcctl token mint`).
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// `jwt`: PEM public key files (RSA, EC or Ed25519).
    #[serde(default)]
    pub public_keys: Vec<PathBuf>,
    /// Scopes every token must carry (`insufficient_scope` → 403).
    #[serde(default)]
    pub scopes: Vec<String>,
    /// This endpoint's canonical URL for RFC 9728 metadata (default: from the bind).
    #[serde(default)]
    pub resource: Option<String>,
    /// Authorization servers named in the metadata (default: the issuer).
    #[serde(default)]
    pub authorization_servers: Vec<String>,
    #[serde(default = "default_jwks_refresh_floor_seconds")]
    pub jwks_refresh_floor_seconds: u64,
}

impl Default for HttpAuth {
    fn default() -> Self {
        HttpAuth {
            mode: AuthMode::None,
            issuer: None,
            audience: None,
            jwks_url: None,
            public_keys: Vec::new(),
            scopes: Vec::new(),
            resource: None,
            authorization_servers: Vec::new(),
            jwks_refresh_floor_seconds: DEFAULT_JWKS_REFRESH_FLOOR_SECONDS,
        }
    }
}

/// `[vaults.http.auth] mode`
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// Loopback binds only; every request is the one caller `http-local`.
    #[default]
    None,
    Jwt,
    Oidc,
}

/// The caller every request is under `mode = "none"`.
pub const HTTP_LOCAL_CALLER: &str = "http-local";

/// `[vaults.bearer]`: the bearer token sent to a remote server, read from a file or an
/// environment variable at start (never from the config itself, never logged).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bearer {
    #[serde(default)]
    pub file: Option<PathBuf>,
    #[serde(default)]
    pub env: Option<String>,
}

/// Static headers sent to a remote server (`[vaults.headers]`).
pub type Headers = BTreeMap<String, String>;

fn default_session_idle_seconds() -> u64 {
    DEFAULT_SESSION_IDLE_SECONDS
}
fn default_max_body_bytes() -> usize {
    DEFAULT_MAX_BODY_BYTES
}
fn default_jwks_refresh_floor_seconds() -> u64 {
    DEFAULT_JWKS_REFRESH_FLOOR_SECONDS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_caller_keeps_a_quarter_of_the_table_unless_there_is_only_one() {
        let jwt = |per: Option<usize>| HttpFront {
            max_sessions_per_caller: per,
            auth: HttpAuth {
                mode: AuthMode::Jwt,
                ..HttpAuth::default()
            },
            ..HttpFront::default()
        };
        assert_eq!(jwt(None).caller_cap(true), DEFAULT_MAX_SESSIONS / 4);
        assert_eq!(
            jwt(None).caller_cap(false),
            DEFAULT_MAX_SESSIONS_COMMAND / 4
        );
        assert_eq!(jwt(Some(3)).caller_cap(false), 3);
        assert_eq!(
            jwt(Some(100)).caller_cap(false),
            DEFAULT_MAX_SESSIONS_COMMAND
        );
        assert_eq!(
            HttpFront::default().caller_cap(false),
            DEFAULT_MAX_SESSIONS_COMMAND
        );
        assert_eq!(jwt(Some(0)).check()[0].0, "max_sessions_per_caller");
    }

    #[test]
    fn a_command_vault_starts_fewer_sessions_unless_told_otherwise() {
        let f = HttpFront::default();
        assert_eq!(f.session_cap(false), DEFAULT_MAX_SESSIONS_COMMAND);
        assert_eq!(f.session_cap(true), DEFAULT_MAX_SESSIONS);
        let f = HttpFront {
            max_sessions: Some(5),
            ..HttpFront::default()
        };
        assert_eq!(f.session_cap(false), 5);
        assert_eq!(f.session_cap(true), 5);
        let broken = HttpFront {
            max_sessions: Some(0),
            max_body_bytes: 10,
            ..HttpFront::default()
        }
        .check();
        let keys: Vec<_> = broken.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, ["max_sessions", "max_body_bytes"]);
        assert_eq!(broken[1].1, "must be at least 1024");
        assert!(HttpFront::default().check().is_empty());
    }
}
