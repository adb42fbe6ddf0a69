//! The HTTP front's threads: one accept loop hands each connection, whole, to one of `n`
//! single-threaded runtimes, which serves it with axum as `axum::serve` would.
//!
//! Why not one multi-threaded runtime: a message bouncing between its workers costs a
//! cross-thread wake at every hop (exchange → engine → downstream → back). Here a
//! connection's exchanges, and the engine and downstream tasks its `initialize` started,
//! run on the thread that took the connection; other threads only meet through the
//! session table and a session used over several connections. Why not `SO_REUSEPORT`
//! listeners: another process of the same user could join the port's group and be handed
//! some of the callers' connections (bearer tokens included).

use std::net::SocketAddr;
use std::time::Duration;

use axum::serve::Listener;
use axum::Router;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};

/// How long a stop waits for open connections to finish their answers.
const DRAIN_FOR: Duration = Duration::from_secs(5);

/// A connection the accept loop took, on its way to the thread that serves it.
type Handed = (std::net::TcpStream, SocketAddr);

/// The threads serving connections, every one of them running: [`start`] returns only
/// once each has its runtime going on its own named thread, so the front can open its
/// port (and say it is serving) knowing every thread is there to take a connection.
pub struct Threads {
    /// Where to hand each thread its connections; this one's first.
    hands: Vec<mpsc::UnboundedSender<Handed>>,
    /// This thread's share, a task on the caller's runtime.
    own: tokio::task::JoinHandle<()>,
    /// What ends when each other thread has served its last connection.
    ended: Vec<oneshot::Receiver<()>>,
    stopping: watch::Sender<bool>,
}

/// Starts `n` threads (this one included) serving `app` for a listener on `addr`, and
/// waits until every one is running.
pub async fn start(addr: SocketAddr, app: Router, n: usize) -> anyhow::Result<Threads> {
    let (stopping, stopped) = watch::channel(false);
    let (tx, rx) = mpsc::unbounded_channel();
    let own = tokio::spawn(serve_handed(rx, addr, app.clone(), stopped.clone()));
    let mut hands = vec![tx];
    let mut ended = Vec::with_capacity(n);
    let mut running = Vec::with_capacity(n);
    for k in 1..n {
        let t = start_thread(k, addr, app.clone(), stopped.clone())?;
        hands.push(t.hand);
        ended.push(t.ended);
        running.push((k, t.running));
    }
    for (k, r) in running {
        r.await.map_err(|_| {
            anyhow::anyhow!("thread tc-http-{k} ended before it could serve connections")
        })?;
    }
    Ok(Threads {
        hands,
        own,
        ended,
        stopping,
    })
}

impl Threads {
    /// Serves the connections `listener` takes until `stop` resolves, then lets every
    /// connection finish its answer, as `axum::serve`'s graceful shutdown does, for at
    /// most [`DRAIN_FOR`].
    pub async fn serve(
        self,
        mut listener: TcpListener,
        stop: impl std::future::Future<Output = ()>,
    ) -> anyhow::Result<()> {
        let Threads {
            hands,
            own,
            ended,
            stopping,
        } = self;
        let mut stop = std::pin::pin!(stop);
        let mut next = 0usize;
        loop {
            // axum's accept: a connection that failed before it was taken is skipped, and
            // any other error (out of file descriptors) pauses accepting for a second.
            let (tcp, peer) = tokio::select! {
                c = Listener::accept(&mut listener) => c,
                _ = &mut stop => break,
            };
            match tcp.into_std() {
                Ok(s) => anyhow::ensure!(
                    hand((s, peer), &hands, &mut next),
                    "every thread serving HTTP connections has stopped"
                ),
                Err(e) => tracing::warn!("HTTP front: could not hand over a connection: {e}"),
            }
        }
        drop(listener);
        drop(hands);
        let _ = stopping.send(true);
        let drained = async {
            let _ = own.await;
            for end in ended {
                let _ = end.await;
            }
        };
        if tokio::time::timeout(DRAIN_FOR, drained).await.is_err() {
            tracing::warn!(
                "HTTP front: connections still open {DRAIN_FOR:?} after the stop; ending anyway"
            );
        }
        Ok(())
    }
}

/// One started thread: where to hand it connections (queued until it takes them), what
/// resolves once its runtime runs on it (the thread named and about to take its queue),
/// and what ends when it has served its last.
struct Started {
    hand: mpsc::UnboundedSender<Handed>,
    running: oneshot::Receiver<()>,
    ended: oneshot::Receiver<()>,
}

/// Starts thread `k` with a runtime of its own. The runtime is built here, so one that
/// cannot start fails the front rather than one connection in n.
fn start_thread(
    k: usize,
    addr: SocketAddr,
    app: Router,
    stopped: watch::Receiver<bool>,
) -> anyhow::Result<Started> {
    let (hand, rx) = mpsc::unbounded_channel();
    let (up, running) = oneshot::channel::<()>();
    let (done, ended) = oneshot::channel::<()>();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name(format!("tc-http-{k}"))
        .spawn(move || {
            rt.block_on(async move {
                let _ = up.send(());
                serve_handed(rx, addr, app, stopped).await
            });
            drop(done);
        })?;
    Ok(Started {
        hand,
        running,
        ended,
    })
}

/// Hands a connection to the next thread, round robin: callers are spread over the
/// threads by connection, and each connection's requests then stay where it is. A thread
/// that is gone (it panicked) is passed over; false when every one is.
fn hand(mut conn: Handed, hands: &[mpsc::UnboundedSender<Handed>], next: &mut usize) -> bool {
    for _ in 0..hands.len() {
        let k = *next % hands.len();
        *next = next.wrapping_add(1);
        match hands[k].send(conn) {
            Ok(()) => return true,
            Err(mpsc::error::SendError(c)) => conn = c,
        }
    }
    false
}

/// One thread's share: the connections handed to it, served until `stopped` turns true.
async fn serve_handed(
    rx: mpsc::UnboundedReceiver<Handed>,
    addr: SocketAddr,
    app: Router,
    mut stopped: watch::Receiver<bool>,
) {
    let stop = async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    let _ = axum::serve(Queue { rx, addr }, app)
        .with_graceful_shutdown(stop)
        .await;
}

/// The connections handed to one thread, as axum's [`Listener`].
struct Queue {
    rx: mpsc::UnboundedReceiver<Handed>,
    addr: SocketAddr,
}

impl Listener for Queue {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        loop {
            let Some((s, peer)) = self.rx.recv().await else {
                // The accept loop stopped: no more connections; shutdown is under way.
                return std::future::pending().await;
            };
            // Registered with this thread's reactor; `into_std` left it non-blocking.
            match TcpStream::from_std(s) {
                Ok(t) => return (t, peer),
                Err(e) => tracing::warn!("HTTP front: a handed connection failed: {e}"),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> Handed {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        (std::net::TcpStream::connect(addr).unwrap(), addr)
    }

    #[test]
    fn connections_go_round_robin_and_past_a_thread_that_is_gone() {
        let (tx0, mut rx0) = mpsc::unbounded_channel();
        let (tx1, rx1) = mpsc::unbounded_channel();
        let (tx2, mut rx2) = mpsc::unbounded_channel();
        let hands = [tx0, tx1, tx2];
        let mut next = 0;
        assert!(hand(conn(), &hands, &mut next));
        assert!(rx0.try_recv().is_ok());
        drop(rx1);
        // Thread 1 is gone: its turn goes to thread 2.
        assert!(hand(conn(), &hands, &mut next));
        assert!(rx2.try_recv().is_ok());
        assert!(hand(conn(), &hands, &mut next));
        assert!(rx0.try_recv().is_ok());
        drop((rx0, rx2));
        assert!(!hand(conn(), &hands, &mut next), "handed to no thread");
    }
}
