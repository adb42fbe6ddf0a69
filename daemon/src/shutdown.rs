//! Bounded shutdown: after SIGTERM, in-flight RPCs get a grace period, then every client
//! connection still open (an idle one, a `--follow` stream, a client stopped with SIGSTOP)
//! is cut so the daemon can exit instead of waiting for its peers forever.
//!
//! - [`Switch`]: flipped once; [`Switch::wrap`] makes a connection that fails when it is.
//! - [`Severable`]: a connection whose reads and writes fail once the switch is flipped.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tonic::transport::server::Connected;

/// A one-way switch shared by every connection.
#[derive(Clone)]
pub struct Switch {
    tx: std::sync::Arc<watch::Sender<bool>>,
}

impl Default for Switch {
    fn default() -> Self {
        Switch {
            tx: std::sync::Arc::new(watch::channel(false).0),
        }
    }
}

impl Switch {
    /// Cuts every wrapped connection (and any wrapped later).
    pub fn flip(&self) {
        self.tx.send_replace(true);
    }

    /// Resolves once the switch is flipped.
    pub fn flipped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.tx.subscribe();
        async move {
            // Err means the sender is gone, which can only happen at teardown: treat as cut.
            let _ = rx.wait_for(|cut| *cut).await;
        }
    }

    /// Wraps a connection so it fails once the switch is flipped.
    pub fn wrap<T>(&self, inner: T) -> Severable<T> {
        Severable {
            inner,
            cut: Box::pin(self.flipped()),
            severed: false,
        }
    }
}

/// A connection that errors (and so ends hyper's connection task) once cut.
pub struct Severable<T> {
    inner: T,
    // Polled by every read/write so a pending one is woken when the switch flips, even if
    // the peer never sends another byte or never drains its socket.
    cut: Pin<Box<dyn Future<Output = ()> + Send>>,
    severed: bool,
}

impl<T> Severable<T> {
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if !self.severed && self.cut.as_mut().poll(cx).is_ready() {
            self.severed = true;
        }
        if self.severed {
            Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "tcd is shutting down",
            ))
        } else {
            Ok(())
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Severable<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Severable<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<T: Connected> Connected for Severable<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_pending_read_fails_when_the_switch_flips() {
        let (a, mut b) = tokio::io::duplex(64);
        let sw = Switch::default();
        let mut a = sw.wrap(a);
        b.write_all(b"x").await.unwrap();
        let mut buf = [0u8; 1];
        a.read_exact(&mut buf).await.unwrap();
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 1];
            a.read(&mut buf).await
        });
        tokio::task::yield_now().await;
        sw.flip();
        let err = reader.await.unwrap().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionAborted);
        // A connection wrapped after the flip is cut from the start.
        let (c, _d) = tokio::io::duplex(64);
        let mut c = sw.wrap(c);
        assert!(c.write_all(b"y").await.is_err());
        drop(b);
    }
}
