//! Unit tests on PostgreSQL: with `TC_TEST_POSTGRES_URL` set (a server where the role may
//! create schemas), each test's ledger lives in a schema of its own, named after the
//! test's temp dir (reopening that dir reopens the same ledger).

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use tc_core::config::PostgresConfig;
use tokio_postgres::NoTls;

use super::tx::PgTx;
use super::PgStore;
use crate::error::DaemonError;

/// A store on schema `t_<hash of dir>` of the database at `url`, created if missing.
pub fn schema_store(url: &str, dir: &Path) -> PgStore {
    let hash = tc_core::hash::sha256_hex(dir.as_os_str().as_bytes());
    let name = format!("t_{}", &hash[..20]);
    let (u, n) = (url.to_string(), name.clone());
    // A thread of its own: the caller may be inside a runtime.
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (client, conn) = tokio_postgres::connect(&u, NoTls).await.expect("connect");
            tokio::spawn(conn);
            client
                .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {n}"))
                .await
                .expect("create schema");
        })
    })
    .join()
    .expect("schema thread");
    let sep = if url.contains('?') { '&' } else { '?' };
    let cfg = PostgresConfig {
        url: format!("{url}{sep}options=-c%20search_path%3D{name}"),
        password_file: None,
        ca_file: None,
        pool_size: 4,
        secret_file: "/unused".into(),
    };
    PgStore::open(&cfg, &[7; 32]).expect("postgres test store")
}

impl PgStore {
    /// One number a test reads with plain SQL.
    pub fn scalar(&self, sql: &str) -> Result<i64, DaemonError> {
        let client = self.client()?;
        let tx = PgTx::new(client.conn(), false);
        let row = tx.one(sql, &[])?;
        Ok(row
            .try_get::<_, Option<i64>>(0)
            .map_err(crate::error::StoreError::from)?
            .unwrap_or(0))
    }

    /// A statement a test runs with plain SQL.
    pub fn exec_sql(&self, sql: &str) -> Result<(), DaemonError> {
        let client = self.client()?;
        let tx = PgTx::new(client.conn(), false);
        Ok(tx.batch(sql)?)
    }
}
