//! Reaching PostgreSQL: the client config (password file, TLS via rustls with `ca_file`),
//! the pool, migrations under an advisory lock, the key check, and the replicas seen.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tc_core::config::PostgresConfig;
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::NoTls;
use tokio_postgres_rustls::MakeRustlsConnect;
use tokio_rustls::rustls;

use super::schema::{MIGRATE_LOCK, MIGRATIONS, SCHEMA_VERSION};
use super::tx::PgTx;
use crate::error::{DaemonError, StoreError};

/// Replicas seen within this long count as running (`tcctl status`).
const SEEN_MS: i64 = 5 * 60 * 1000;

/// How to reach the database: the parsed config and the TLS to use.
#[derive(Clone)]
pub struct Connector {
    pub cfg: tokio_postgres::Config,
    pub tls: Option<MakeRustlsConnect>,
}

fn bad(what: String) -> DaemonError {
    StoreError::Config(what).into()
}

impl Connector {
    /// Parses `[daemon.postgres]`: the URL, the password file, the CA bundle.
    pub fn new(c: &PostgresConfig) -> Result<Connector, DaemonError> {
        let mut cfg: tokio_postgres::Config = c
            .url
            .parse()
            .map_err(|e| bad(format!("[daemon.postgres] url: {e}")))?;
        cfg.application_name("tcd")
            .connect_timeout(Duration::from_secs(5))
            .keepalives_idle(Duration::from_secs(30));
        if let Some(f) = &c.password_file {
            let text = std::fs::read_to_string(f).map_err(|e| {
                bad(format!(
                    "[daemon.postgres] password_file {}: {e}",
                    f.display()
                ))
            })?;
            cfg.password(text.lines().next().unwrap_or("").trim_end());
        }
        let tls = match &c.ca_file {
            None => None,
            Some(f) => {
                cfg.ssl_mode(SslMode::Require);
                Some(rustls_connect(f)?)
            }
        };
        Ok(Connector { cfg, tls })
    }

    /// "host:port/database" (no user, no password).
    pub fn describe(&self) -> String {
        let host = match self.cfg.get_hosts().first() {
            Some(Host::Tcp(h)) => h.clone(),
            Some(Host::Unix(p)) => p.display().to_string(),
            None => "localhost".into(),
        };
        let port = self.cfg.get_ports().first().copied().unwrap_or(5432);
        let db = self.cfg.get_dbname().unwrap_or("(user's database)");
        format!("{host}:{port}/{db}")
    }

    /// A pool of at most `size` connections driven by the store's runtime, opened on
    /// demand (a lost one is replaced), for the background tasks.
    pub fn pool(&self, size: usize) -> Result<Pool, DaemonError> {
        let mc = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let mgr = match &self.tls {
            None => Manager::from_config(self.cfg.clone(), NoTls, mc),
            Some(t) => Manager::from_config(self.cfg.clone(), t.clone(), mc),
        };
        Pool::builder(mgr)
            .max_size(size)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(10)))
            .create_timeout(Some(Duration::from_secs(5)))
            .recycle_timeout(Some(Duration::from_secs(5)))
            .build()
            .map_err(|e| DaemonError::Internal(format!("postgres pool: {e}")))
    }
}

/// rustls on ring, trusting only the certificates in `ca_file` (PEM).
fn rustls_connect(ca_file: &std::path::Path) -> Result<MakeRustlsConnect, DaemonError> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let what = |e: &dyn std::fmt::Display| {
        bad(format!(
            "[daemon.postgres] ca_file {}: {e}",
            ca_file.display()
        ))
    };
    let pem = std::fs::read(ca_file).map_err(|e| what(&e))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots
            .add(cert.map_err(|e| what(&e))?)
            .map_err(|e| what(&e))?;
    }
    if roots.is_empty() {
        return Err(what(&"holds no PEM certificate"));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| what(&e))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// The first connection, or a start-up error naming the database.
pub fn first_client<'p>(
    pool: &'p super::pool::Pool,
    describe: &str,
) -> Result<super::pool::Lease<'p>, DaemonError> {
    pool.get().map_err(|e| {
        StoreError::Unavailable(format!(
            "cannot connect to PostgreSQL at {describe}: {e} (check [daemon.postgres] url, \
             password_file and ca_file, and that the server accepts this host)"
        ))
        .into()
    })
}

/// Applies the missing migrations, one replica at a time; refuses a newer database.
pub fn migrate(tx: &PgTx<'_>) -> Result<i64, DaemonError> {
    tx.exec(
        "SELECT pg_advisory_lock($1, hashtext(current_schema()))",
        &[&MIGRATE_LOCK],
    )?;
    let r = apply(tx);
    let unlocked = tx.exec(
        "SELECT pg_advisory_unlock($1, hashtext(current_schema()))",
        &[&MIGRATE_LOCK],
    );
    let v = r?;
    unlocked?;
    Ok(v)
}

fn apply(tx: &PgTx<'_>) -> Result<i64, DaemonError> {
    tx.batch("CREATE TABLE IF NOT EXISTS tc_schema (version BIGINT NOT NULL)")?;
    let current: i64 = match tx.opt("SELECT max(version) FROM tc_schema", &[])? {
        Some(r) => r
            .try_get::<_, Option<i64>>(0)
            .map_err(StoreError::from)?
            .unwrap_or(0),
        None => 0,
    };
    if current > SCHEMA_VERSION {
        return Err(StoreError::Config(format!(
            "the PostgreSQL schema is version {current}, newer than this tcd understands \
             ({SCHEMA_VERSION}): upgrade this replica to the release the others run"
        ))
        .into());
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let v = i as i64 + 1;
        tx.batch("BEGIN")?;
        let step = tx.batch(sql).and_then(|()| {
            tx.exec("DELETE FROM tc_schema", &[])?;
            tx.exec("INSERT INTO tc_schema (version) VALUES ($1)", &[&v])?;
            tx.batch("COMMIT")
        });
        if let Err(e) = step {
            let _ = tx.batch("ROLLBACK");
            return Err(e.into());
        }
        tracing::info!(version = v, "postgresql schema migrated");
    }
    Ok(SCHEMA_VERSION)
}

/// Records the key check if none is (the first replica), else compares: a replica
/// keyed differently would seal states no other replica opens.
pub fn check_key(tx: &PgTx<'_>, check: &[u8; 32], describe: &str) -> Result<(), DaemonError> {
    let mine = hex::encode(check);
    tx.exec(
        "INSERT INTO tc_meta (name, value) VALUES ('key_check', $1) ON CONFLICT (name) DO NOTHING",
        &[&mine],
    )?;
    let stored: String = tx
        .one("SELECT value FROM tc_meta WHERE name = 'key_check'", &[])?
        .try_get(0)
        .map_err(StoreError::from)?;
    if stored != mine {
        return Err(StoreError::KeyMismatch(format!(
            "this replica's [daemon.postgres] secret_file is not the key the ledger at {describe} \
             is keyed with (the key check PostgreSQL holds differs): every replica must read the \
             same key file; copy it from a running replica. Not starting."
        ))
        .into());
    }
    Ok(())
}

/// Adds this replica to `replicas`; returns its id.
pub fn register(tx: &PgTx<'_>) -> Result<String, DaemonError> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let id = format!("{host}/{}/{}", std::process::id(), crate::random::b64(6));
    let now = tc_core::now_ms();
    tx.exec(
        "INSERT INTO replicas (id, host, started_at, seen_at) VALUES ($1, $2, $3, $3)",
        &[&id, &host, &now],
    )?;
    Ok(id)
}

/// Marks replica `id` seen now; forgets replicas unseen for a day.
pub fn seen(tx: &PgTx<'_>, id: &str) -> Result<(), DaemonError> {
    let now = tc_core::now_ms();
    tx.exec(
        "UPDATE replicas SET seen_at = $2 WHERE id = $1",
        &[&id, &now],
    )?;
    tx.exec(
        "DELETE FROM replicas WHERE seen_at < $1",
        &[&(now - 86_400_000)],
    )?;
    Ok(())
}

/// How many replicas were seen within [`SEEN_MS`].
pub fn replicas_seen(tx: &PgTx<'_>) -> Result<u64, DaemonError> {
    let r = tx.one(
        "SELECT count(*) FROM replicas WHERE seen_at > $1",
        &[&(tc_core::now_ms() - SEEN_MS)],
    )?;
    Ok(r.try_get::<_, i64>(0).map_err(StoreError::from)? as u64)
}
