//! `[daemon] store` and `[daemon.postgres]`: where tcd keeps its ledger: SQLite in the
//! cache directory (the default), or one PostgreSQL database that several replicas share.

use std::path::PathBuf;

use serde::Deserialize;

use super::findings::Findings;
use super::Config;
#[cfg(test)]
use super::ConfigError;

/// Default connections per replica in `[daemon.postgres] pool_size`. Four, not more:
/// a redeem is CPU and a WAL flush on the server, and past a few transactions in flight
/// per server core, commits queue on the WAL and cost more CPU each (docs/BENCHMARKS.md,
/// "Several replicas": on two cores one replica did 0.96× as well with 4 as with 8;
/// three replicas of 4 kept 0.90–1.07× one replica's rate, three of 8 0.81–0.85×).
pub const DEFAULT_POOL_SIZE: u32 = 4;

/// `[daemon] store`: which backend holds the ledger.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// `<cache_dir>/cache.db`, this machine only.
    #[default]
    Sqlite,
    /// `[daemon.postgres]`, shared by every replica that names the same database.
    Postgres,
}

/// `[daemon.postgres]`
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresConfig {
    /// `postgresql://user@host:port/database` (no password: see `password_file`).
    pub url: String,
    /// A file holding the role's password (first line), read at start.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// PEM CA bundle: connect with TLS (rustls) and verify the server against it.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Connections this replica keeps open at most.
    #[serde(default = "default_pool_size")]
    pub pool_size: u32,
    /// The 32-byte key every replica of this database reads (0600); never stored in
    /// PostgreSQL, which holds only a check of it.
    pub secret_file: PathBuf,
}

fn default_pool_size() -> u32 {
    DEFAULT_POOL_SIZE
}

impl super::DaemonConfig {
    /// `[daemon.postgres]` when the ledger lives in PostgreSQL, `None` for SQLite.
    pub fn postgres(&self) -> Option<&PostgresConfig> {
        match self.store {
            Some(StoreKind::Sqlite) => None,
            _ => self.postgres.as_ref(),
        }
    }
}

impl Config {
    /// `[daemon] store` and `[daemon.postgres]` agree, and every value is usable.
    pub(super) fn check_store(&self, found: &mut Findings) {
        let d = &self.daemon;
        let pg = match (d.store, &d.postgres) {
            (Some(StoreKind::Postgres), None) => {
                let why =
                    "\"postgres\" needs a [daemon.postgres] table with its url and secret_file";
                return found.add("daemon.store", why);
            }
            (Some(StoreKind::Sqlite), Some(_)) => {
                let why = "set while daemon.store = \"sqlite\": remove one of the two";
                return found.add("daemon.postgres", why);
            }
            (_, None) => return,
            (_, Some(pg)) => pg,
        };
        let key = |k: &str| format!("daemon.postgres.{k}");
        let url = url::Url::parse(&pg.url)
            .ok()
            .filter(|u| matches!(u.scheme(), "postgres" | "postgresql"));
        match url {
            None => found.add(
                key("url"),
                "must be a postgresql://user@host:port/database URL",
            ),
            Some(u) if u.password().is_some() => found.add(
                key("url"),
                "holds a password: put it in password_file (a config file is no place for it)",
            ),
            Some(_) => {}
        }
        if !(1..=256).contains(&pg.pool_size) {
            found.add(key("pool_size"), "must be 1..=256");
        }
        for (k, p) in [
            ("secret_file", Some(&pg.secret_file)),
            ("password_file", pg.password_file.as_ref()),
            ("ca_file", pg.ca_file.as_ref()),
        ] {
            if p.is_some_and(|p| !p.is_absolute()) {
                found.add(key(k), "must be an absolute path");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/t/config.toml"))
    }

    const PG: &str = "[daemon.postgres]\nurl = \"postgresql://tc@db:5432/tc\"\n\
                      secret_file = \"/etc/tc/ledger.key\"\n";

    #[test]
    fn a_postgres_table_alone_switches_the_store() {
        let c = parse(PG).unwrap();
        let pg = c.daemon.postgres().expect("postgres");
        assert_eq!(pg.pool_size, DEFAULT_POOL_SIZE);
        assert!(
            parse("").unwrap().daemon.postgres().is_none(),
            "sqlite by default"
        );
    }

    #[test]
    fn bad_postgres_configs_are_refused_naming_the_key() {
        for (text, key) in [
            (format!("{PG}colour = 1\n"), "colour"),
            (
                "[daemon]\nstore = \"postgres\"\n".to_string(),
                "daemon.store",
            ),
            (
                format!("[daemon]\nstore = \"sqlite\"\n{PG}"),
                "daemon.postgres",
            ),
            (PG.replace("tc@db", "tc:pw@db"), "daemon.postgres.url"),
            (
                PG.replace("postgresql://", "http://"),
                "daemon.postgres.url",
            ),
            (
                PG.replace("/etc/tc/ledger.key", "ledger.key"),
                "daemon.postgres.secret_file",
            ),
            (format!("{PG}pool_size = 0\n"), "daemon.postgres.pool_size"),
        ] {
            let e = parse(&text).expect_err(&text).to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }
}
