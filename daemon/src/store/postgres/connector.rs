//! How to reach PostgreSQL ([`Connector`]): the parsed URL, the password file, TLS via
//! rustls trusting `ca_file`, and the background tasks' deadpool.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tc_core::config::PostgresConfig;
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::NoTls;
use tokio_postgres_rustls::MakeRustlsConnect;
use tokio_rustls::rustls;

use crate::error::{DaemonError, StoreError};

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
