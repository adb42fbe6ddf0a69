//! LISTEN on a connection of its own: every replica's commit (NOTIFY with its newest event
//! id) wakes this replica's `--follow` streams, which then read `id > cursor` (below the
//! horizon) from the database, so a notification lost while reconnecting is caught up,
//! never doubled; the newest id is also checked every few seconds.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_postgres::{AsyncMessage, Client, Connection, NoTls};

use super::connector::Connector;
use super::schema::CHANNEL;
use crate::store::signals::Signals;

const FIRST_DELAY: Duration = Duration::from_millis(100);
const MAX_DELAY: Duration = Duration::from_secs(5);
/// How often the newest id is read, for commits whose announcement never came.
const CHECK_EVERY: Duration = Duration::from_secs(2);

/// Listens until the runtime ends, reconnecting with backoff.
pub async fn run(conn: Connector, signals: Arc<Signals>, describe: String) {
    let mut delay = FIRST_DELAY;
    loop {
        let r = match &conn.tls {
            None => session(conn.cfg.connect(NoTls).await, &signals).await,
            Some(t) => session(conn.cfg.connect(t.clone()).await, &signals).await,
        };
        match r {
            Ok(()) => {
                tracing::warn!(store = %describe, "lost the LISTEN connection to PostgreSQL; reconnecting");
                delay = FIRST_DELAY;
            }
            Err(e) => tracing::warn!(
                store = %describe, error = %e, retry_ms = delay.as_millis() as u64,
                "cannot LISTEN on PostgreSQL; other replicas' commits reach --follow streams only after reconnecting"
            ),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_DELAY);
    }
}

/// One connection's life: LISTEN, a catch-up signal, then each notification.
async fn session<S, T>(
    connected: Result<(Client, Connection<S, T>), tokio_postgres::Error>,
    signals: &Signals,
) -> Result<(), tokio_postgres::Error>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (client, mut connection) = connected?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<i64>();
    let driver = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(m)) = messages.next().await {
            if let AsyncMessage::Notification(n) = m {
                let _ = tx.send(n.payload().parse().unwrap_or(0));
            }
        }
    });
    let started = async {
        client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
        let row = client
            .query_one("SELECT coalesce(max(id), 0)::BIGINT FROM events", &[])
            .await?;
        row.try_get::<_, i64>(0)
    };
    let newest = match started.await {
        Ok(n) => n,
        Err(e) => {
            driver.abort();
            return Err(e);
        }
    };
    // Whatever committed while not listening: streams read past their cursor now.
    signals.committed(newest);
    tracing::info!("listening for other replicas' commits");
    // Replicas announce after their commit (`notify.rs`): one killed in between never
    // does, so the newest id is also checked now and then.
    let mut check = tokio::time::interval(CHECK_EVERY);
    let mut seen = newest;
    loop {
        tokio::select! {
            id = rx.recv() => match id {
                Some(id) => {
                    seen = seen.max(id);
                    signals.committed(id);
                }
                None => break,
            },
            _ = check.tick() => {
                let row = client
                    .query_one("SELECT coalesce(max(id), 0)::BIGINT FROM events", &[])
                    .await?;
                let newest = row.try_get::<_, i64>(0)?;
                if newest > seen {
                    seen = newest;
                    signals.committed(newest);
                }
            }
        }
    }
    driver.abort();
    Ok(())
}
