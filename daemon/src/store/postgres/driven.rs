//! A PostgreSQL connection driven by the thread that runs the rule: its own current-thread
//! runtime waits on the socket right there, so a round trip wakes no other thread.
//!
//! Why: the rules are synchronous and run on blocking threads. A connection driven by a
//! separate runtime costs two thread hand-offs per round trip (request out, answer back);
//! a redeem has three round trips. Here the rule's thread writes the request, waits in
//! `epoll` for the answer and reads it itself.

use std::cell::Cell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Mutex;
use std::task::Poll;

use tokio_postgres::{Client, NoTls, Statement};

use super::connector::Connector;
use crate::error::StoreError;

/// The connection's I/O half, boxed so that plain and TLS connections are one type.
type Io = Pin<Box<dyn Future<Output = Result<(), tokio_postgres::Error>> + Send>>;

thread_local! {
    /// Set while a store job runs on a blocking thread (`PgStore::call`), where a runtime
    /// may be started and waited on.
    static STORE_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with this thread marked as one a connection may be driven on.
pub fn on_store_thread<T>(f: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            STORE_THREAD.with(|s| s.set(self.0));
        }
    }
    let _reset = Reset(STORE_THREAD.with(|s| s.replace(true)));
    f()
}

/// Runs `g` where a runtime may block: here on a store thread or a thread outside any
/// runtime, else (a runtime's worker, as in an async test) on a scoped thread of its own,
/// since starting a runtime inside another one's worker panics.
fn here<T: Send>(g: impl FnOnce() -> T + Send) -> T {
    if STORE_THREAD.with(Cell::get) || tokio::runtime::Handle::try_current().is_err() {
        return g();
    }
    std::thread::scope(|s| {
        s.spawn(g)
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// One connection, its runtime and its prepared statements.
pub struct Driven {
    rt: Option<tokio::runtime::Runtime>,
    client: Client,
    /// `None` once the connection ended (the server closed it, or it failed).
    io: Mutex<Option<Io>>,
    statements: Mutex<HashMap<String, Statement>>,
}

impl Driven {
    /// Opens a connection (TLS when the connector has it) on a runtime of its own.
    pub fn connect(c: &Connector) -> Result<Driven, StoreError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::Unavailable(format!("a connection's runtime: {e}")))?;
        let (client, io) = here(|| {
            rt.block_on(async {
                match &c.tls {
                    None => {
                        let (client, io) = c.cfg.connect(NoTls).await?;
                        Ok::<_, tokio_postgres::Error>((client, Box::pin(io) as Io))
                    }
                    Some(tls) => {
                        let (client, io) = c.cfg.connect(tls.clone()).await?;
                        Ok((client, Box::pin(io) as Io))
                    }
                }
            })
        })
        .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        Ok(Driven {
            rt: Some(rt),
            client,
            io: Mutex::new(Some(io)),
            statements: Mutex::new(HashMap::new()),
        })
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Runs `f` (a request on [`Driven::client`]) to completion, driving the connection's
    /// I/O on this thread meanwhile.
    pub fn run<F>(&self, f: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        let rt = self.rt.as_ref().expect("running until dropped");
        let mut slot = self.io.lock().unwrap_or_else(|p| p.into_inner());
        let mut io = slot.take();
        let out = here(|| {
            rt.block_on(async {
                let mut f = pin!(f);
                std::future::poll_fn(|cx| {
                    if let Poll::Ready(out) = f.as_mut().poll(cx) {
                        return Poll::Ready(out);
                    }
                    // The request just queued goes out; an answer that came in is read.
                    if io.as_mut().is_some_and(|c| c.as_mut().poll(cx).is_ready()) {
                        io = None; // ended: the request fails as closed
                    }
                    f.as_mut().poll(cx)
                })
                .await
            })
        });
        *slot = io;
        out
    }

    /// Whether the connection ended while it sat idle (the server restarted, say): looks
    /// at the socket once, without waiting.
    pub fn ended(&self) -> bool {
        let rt = self.rt.as_ref().expect("running until dropped");
        let mut slot = self.io.lock().unwrap_or_else(|p| p.into_inner());
        let Some(mut c) = slot.take() else {
            return true;
        };
        // The yield lets the runtime look at its sockets (with no wait) before the poll.
        let (c, ended) = here(|| {
            rt.block_on(async move {
                tokio::task::yield_now().await;
                let ended =
                    std::future::poll_fn(|cx| Poll::Ready(c.as_mut().poll(cx).is_ready())).await;
                (c, ended)
            })
        });
        if !ended {
            *slot = Some(c);
        }
        ended || self.client.is_closed()
    }

    /// The statement prepared for `sql` on this connection, if any.
    pub fn cached(&self, sql: &str) -> Option<Statement> {
        let map = self.statements.lock().unwrap_or_else(|p| p.into_inner());
        map.get(sql).cloned()
    }

    /// Keeps `st`, prepared for `sql` on this connection.
    pub fn remember(&self, sql: &str, st: &Statement) {
        let mut map = self.statements.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(sql.to_string(), st.clone());
    }
}

impl Drop for Driven {
    fn drop(&mut self) {
        // The socket goes first, then the runtime, without blocking (a store may be
        // dropped from any context).
        drop(self.io.lock().unwrap_or_else(|p| p.into_inner()).take());
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}
