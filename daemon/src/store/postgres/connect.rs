//! Starting on the database: the first connection, migrations under an advisory lock,
//! the key check, and the replicas seen.

use super::pool::{Lease, Pool};
use super::schema::{MIGRATE_LOCK, MIGRATIONS, SCHEMA_VERSION};
use super::tx::PgTx;
use crate::error::{DaemonError, StoreError};

/// Replicas seen within this long count as running (`tcctl status`).
const SEEN_MS: i64 = 5 * 60 * 1000;

/// The first connection, or a start-up error naming the database.
pub fn first_client<'p>(pool: &'p Pool, describe: &str) -> Result<Lease<'p>, DaemonError> {
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
