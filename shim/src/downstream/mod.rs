//! The downstreams: the MCP server behind the engine, a child process over stdio or a
//! remote server over Streamable HTTP, behind one [`Downstream`] type both fronts use.

pub mod child;
pub mod client;
pub mod http;
mod remote;
mod sse;

use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;

pub use remote::Remote;

use crate::engine::Shim;
use crate::wire::outbox::Receiver;

/// What serves the vault behind a front.
pub enum Downstream {
    /// A local MCP server over stdio, one process per conversation.
    Child(Vec<String>),
    /// A remote Streamable HTTP server, one session per conversation, one client pool.
    Remote(Remote, client::Client),
}

/// One conversation's downstream, attached to its engine: started, its queue drained and
/// its answers fed back. Dropping it ends that downstream (the child is killed; the remote
/// session is ended with `DELETE`, answers still in flight abandoned).
pub struct Attached {
    kind: Kind,
    /// What runs once the downstream is gone on its own (its stdout closed, or the server
    /// forgot the session).
    on_gone: Gone,
}

enum Kind {
    Child {
        child: tokio::process::Child,
        reader: Option<JoinHandle<()>>,
    },
    Remote {
        conn: Arc<http::Conn>,
        writer: Option<JoinHandle<()>>,
        /// Set once [`Attached::close`] ended the session, so drop does not end it again.
        closed: bool,
    },
}

/// The "downstream gone" callback, which may be set before or after it happens.
type Gone = Arc<Mutex<GoneState>>;

#[derive(Default)]
enum GoneState {
    #[default]
    Waiting,
    Set(Box<dyn Fn() + Send + Sync>),
    Happened,
}

fn gone_now(g: &Gone) {
    let mut s = g.lock().unwrap_or_else(|p| p.into_inner());
    match std::mem::replace(&mut *s, GoneState::Happened) {
        GoneState::Set(f) => f(),
        GoneState::Waiting | GoneState::Happened => {}
    }
}

impl Downstream {
    /// Starts this downstream for one engine and drains its queue `to_child` into it; a
    /// child runs in the vault `root` when there is one.
    pub fn attach(
        &self,
        shim: &Arc<Shim>,
        to_child: Receiver,
        root: &Path,
    ) -> anyhow::Result<Attached> {
        let on_gone = Gone::default();
        let kind = match self {
            Downstream::Child(cmd) => {
                let mut child = child::spawn(cmd, root)?;
                let (Some(i), Some(o)) = (child.stdin.take(), child.stdout.take()) else {
                    anyhow::bail!("downstream stdio pipes missing");
                };
                tokio::spawn(child::write(Arc::clone(shim), to_child, i));
                let (shim, g) = (Arc::clone(shim), Arc::clone(&on_gone));
                let reader = tokio::spawn(async move {
                    child::read(shim, o).await;
                    gone_now(&g);
                });
                Kind::Child {
                    child,
                    reader: Some(reader),
                }
            }
            Downstream::Remote(remote, pool) => {
                let conn = http::Conn::with_client(remote.clone(), Arc::clone(shim), pool.clone());
                let writer = Arc::clone(&conn);
                // Ends when the engine closes the queue (the client is done).
                let writer = tokio::spawn(async move { writer.write(to_child).await });
                let g = Arc::clone(&on_gone);
                // A server that forgot the session ends this conversation too.
                conn.when_forgotten(Box::new(move || gone_now(&g)));
                Kind::Remote {
                    conn,
                    writer: Some(writer),
                    closed: false,
                }
            }
        };
        Ok(Attached { kind, on_gone })
    }
}

impl Attached {
    /// Runs `f` once the downstream is gone on its own (at once if it already is).
    pub fn when_gone(&self, f: Box<dyn Fn() + Send + Sync>) {
        let mut s = self.on_gone.lock().unwrap_or_else(|p| p.into_inner());
        match &*s {
            GoneState::Happened => f(),
            _ => *s = GoneState::Set(f),
        }
    }

    /// Waits for the conversation to end, given `client_done` (the client closed its
    /// side); returns the exit code. A child is waited for, and killed if it is still
    /// running 10 s after the client left; a remote server's answers in flight get 10 s.
    pub async fn ended(&mut self, client_done: impl Future<Output = ()>) -> anyhow::Result<i32> {
        match &mut self.kind {
            Kind::Child { child, reader } => {
                let status = tokio::select! {
                    s = child.wait() => s?,
                    _ = async { client_done.await; tokio::time::sleep(Duration::from_secs(10)).await } => {
                        tracing::warn!("downstream did not exit 10s after the client closed stdin; killing it");
                        let _ = child.start_kill();
                        child.wait().await?
                    }
                };
                if let Some(r) = reader.take() {
                    let _ = tokio::time::timeout(Duration::from_secs(2), r).await;
                }
                use std::os::unix::process::ExitStatusExt;
                Ok(status
                    .code()
                    .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
            }
            Kind::Remote { conn, writer, .. } => {
                client_done.await;
                // What the client sent is still posted; answers in flight get a while.
                if let Some(w) = writer.take() {
                    let _ = w.await;
                }
                if tokio::time::timeout(Duration::from_secs(10), conn.settled())
                    .await
                    .is_err()
                {
                    tracing::warn!("answers from the remote MCP server still pending 10s after the client closed; dropping them");
                    conn.abort_all();
                }
                Ok(0)
            }
        }
    }

    /// Ends the downstream's side once the engine has finished (the remote session's
    /// `DELETE`, bounded); a child has already exited.
    pub async fn close(mut self) {
        if let Kind::Remote { conn, closed, .. } = &mut self.kind {
            *closed = true;
            conn.close().await;
        }
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        // A child is killed by its own drop (`kill_on_drop`).
        let Kind::Remote { conn, closed, .. } = &self.kind else {
            return;
        };
        if *closed {
            return;
        }
        // Nobody waits for the answers of POSTs still in flight.
        conn.abort_all();
        let conn = Arc::clone(conn);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { conn.close().await });
        }
    }
}
