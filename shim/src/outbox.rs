//! The queue of lines to one side (the client's stdout or the downstream's stdin), with
//! how many bytes wait in it, so readers can stop reading while the other side does not.
//!
//! Without it a client that writes faster than it reads (or never reads) would make the
//! shim queue its answers without bound; with it, the shim stops reading that client's
//! input once [`HIGH_WATER`] bytes wait, and the pipe pushes back as it would on a server
//! run directly.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use tokio::sync::{mpsc, oneshot, Notify};

/// A line to write, with an optional acknowledgement once it was written.
pub type Out = (Vec<u8>, Option<oneshot::Sender<()>>);

/// Readers feeding an outbox wait while more than this many bytes are queued in it.
pub const HIGH_WATER: usize = 8 * 1024 * 1024;

pub struct Outbox {
    tx: Mutex<Option<mpsc::UnboundedSender<Out>>>,
    queued: AtomicUsize,
    /// The writer is gone: nothing will drain the queue, so nobody may wait on it.
    dead: AtomicBool,
    drained: Notify,
}

impl Outbox {
    /// An outbox and the receiver its writer task drains.
    pub fn new() -> (Outbox, mpsc::UnboundedReceiver<Out>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let b = Outbox {
            tx: Mutex::new(Some(tx)),
            queued: AtomicUsize::new(0),
            dead: AtomicBool::new(false),
            drained: Notify::new(),
        };
        (b, rx)
    }

    /// Queues a line; false once the outbox is closed or its writer is gone.
    pub fn send(&self, line: Vec<u8>, ack: Option<oneshot::Sender<()>>) -> bool {
        let n = line.len();
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        let Some(tx) = tx.as_ref() else {
            return false;
        };
        self.queued.fetch_add(n, Ordering::AcqRel);
        if tx.send((line, ack)).is_err() {
            self.wrote(n);
            return false;
        }
        true
    }

    /// Closes the queue: lines already in it are still written, then the writer ends.
    pub fn close(&self) {
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    /// The writer wrote (or dropped) a line of `n` bytes.
    pub fn wrote(&self, n: usize) {
        let before = self.queued.fetch_sub(n, Ordering::AcqRel);
        if before.saturating_sub(n) <= HIGH_WATER {
            self.drained.notify_waiters();
        }
    }

    /// The writer is gone (its side closed): waiting for room would wait forever.
    pub fn writer_gone(&self) {
        self.dead.store(true, Ordering::Release);
        self.drained.notify_waiters();
    }

    fn has_room(&self) -> bool {
        self.queued.load(Ordering::Acquire) <= HIGH_WATER || self.dead.load(Ordering::Acquire)
    }

    /// Waits until at most [`HIGH_WATER`] bytes are queued (at once in the common case).
    pub async fn room(&self) {
        while !self.has_room() {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            // Registered before the check, so a drain in between is not missed.
            drained.as_mut().enable();
            if self.has_room() {
                return;
            }
            drained.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn a_full_outbox_holds_its_readers_until_the_writer_drains_it() {
        let (b, mut rx) = Outbox::new();
        let b = Arc::new(b);
        assert!(b.send(vec![0; HIGH_WATER], None));
        tokio::time::timeout(Duration::from_millis(10), b.room())
            .await
            .expect("at the mark there is room");
        assert!(b.send(vec![0; 10], None));
        let waiter = {
            let b = Arc::clone(&b);
            tokio::spawn(async move { b.room().await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !waiter.is_finished(),
            "a reader went on past the high-water mark"
        );
        let (line, _) = rx.recv().await.unwrap();
        b.wrote(line.len());
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken once drained")
            .unwrap();
    }

    #[tokio::test]
    async fn a_dead_writer_never_holds_a_reader() {
        let (b, _rx) = Outbox::new();
        assert!(b.send(vec![0; HIGH_WATER + 1], None));
        b.writer_gone();
        tokio::time::timeout(Duration::from_millis(100), b.room())
            .await
            .expect("no waiting on a writer that is gone");
    }

    #[tokio::test]
    async fn a_closed_outbox_refuses_lines() {
        let (b, mut rx) = Outbox::new();
        assert!(b.send(b"a".to_vec(), None));
        b.close();
        assert!(!b.send(b"b".to_vec(), None));
        assert_eq!(rx.recv().await.unwrap().0, b"a");
        assert!(rx.recv().await.is_none());
    }
}
