//! The queue of lines to one side (the client's stdout or the downstream's stdin), with
//! how many bytes wait in it, so readers can stop reading while the other side does not.
//!
//! Without it a client that writes faster than it reads (or never reads) would make the
//! shim queue its answers without bound; with it, the shim stops reading that client's
//! input once [`HIGH_WATER`] bytes wait, and the pipe pushes back as it would on a server
//! run directly.
//!
//! The queue holds no buffer while it is empty: every idle conversation of the HTTP front
//! keeps two of them (a tokio channel allocates its first 32-slot block up front).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use tokio::sync::{oneshot, Notify};

use crate::wire::ids::IdKey;
use crate::wire::peek::Peek;

/// A line to write.
pub struct Out {
    pub line: Vec<u8>,
    /// Told once the line was written (dropped unsent if it never was).
    pub ack: Option<oneshot::Sender<()>>,
    pub known: Known,
}

/// What the engine already read of a line, so that its writer need not read it again.
pub enum Known {
    Nothing,
    /// An answer to the client request of this id (the HTTP front routes it so).
    Answers(IdKey),
    /// A request going downstream exactly as the engine parsed it (the HTTP downstream's
    /// headers mirror it).
    Request(Box<Peek>),
}

/// Readers feeding an outbox wait while more than this many bytes are queued in it.
pub const HIGH_WATER: usize = 8 * 1024 * 1024;

/// A writer that can take a line straight from [`Outbox::send`], on the sender's task,
/// instead of through the queue and a wake-up of its own task (the HTTP downstream starts
/// a request's POST that way: one task hop less per call).
pub trait Direct: Send + Sync {
    /// Takes `out`, or gives it back to be queued. Called under the queue's lock, so it
    /// must not send to this outbox.
    fn take(self: Arc<Self>, out: Out) -> Option<Out>;
}

/// What the outbox and its receiver share.
#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Wakes the receiver: a line was queued or the outbox closed.
    ready: Notify,
    /// Weak: the writer usually owns (through the engine) the outbox that holds it.
    direct: OnceLock<Weak<dyn Direct>>,
}

#[derive(Default)]
struct Queue {
    lines: VecDeque<Out>,
    /// The outbox was closed (or dropped): the receiver ends once the queue is empty.
    closed: bool,
    /// The receiver was dropped: nothing will ever read a line queued now.
    unread: bool,
    /// The receiver holds a line it took and has not asked for the next: a line sent now
    /// is queued behind it, never handed to [`Direct`] ahead of it.
    busy: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub struct Outbox {
    shared: Arc<Shared>,
    queued: AtomicUsize,
    /// The writer is gone: nothing will drain the queue, so nobody may wait on it.
    dead: AtomicBool,
    drained: Notify,
}

/// The writer's end of an outbox: lines in the order they were queued.
pub struct Receiver {
    shared: Arc<Shared>,
}

impl Receiver {
    /// The next line; `None` once the outbox is closed and every line was taken.
    /// Cancel-safe: a line is only taken by the call that returns it. Calling it again
    /// says the writer is done with the line it returned last (see [`Direct`]).
    pub async fn recv(&mut self) -> Option<Out> {
        loop {
            {
                let mut q = self.shared.lock();
                q.busy = false;
                if let Some(out) = q.lines.pop_front() {
                    q.busy = true;
                    if q.lines.is_empty() {
                        // Gives the buffer back: an idle queue holds nothing.
                        q.lines = VecDeque::new();
                    }
                    return Some(out);
                }
                if q.closed {
                    return None;
                }
            }
            // A line queued since the check left a permit: this returns at once.
            self.shared.ready.notified().await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let lines = {
            let mut q = self.shared.lock();
            q.unread = true;
            std::mem::take(&mut q.lines)
        };
        // Dropped outside the lock: an acknowledgement's waiter is told no line was written.
        drop(lines);
    }
}

impl Outbox {
    /// An outbox and the receiver its writer task drains.
    pub fn new() -> (Outbox, Receiver) {
        let shared = Arc::new(Shared::default());
        let b = Outbox {
            shared: Arc::clone(&shared),
            queued: AtomicUsize::new(0),
            dead: AtomicBool::new(false),
            drained: Notify::new(),
        };
        (b, Receiver { shared })
    }

    /// Lets `writer` take lines straight from `send` while nothing is queued ahead of
    /// them; set once.
    pub fn set_direct(&self, writer: Weak<dyn Direct>) {
        let _ = self.shared.direct.set(writer);
    }

    /// Queues a line (or hands it to the [`Direct`] writer); false once the outbox is
    /// closed or its writer is gone.
    pub fn send(&self, line: Vec<u8>, ack: Option<oneshot::Sender<()>>) -> bool {
        self.send_known(line, ack, Known::Nothing)
    }

    /// [`Outbox::send`] of a line with what the engine knows of it.
    pub fn send_known(
        &self,
        line: Vec<u8>,
        ack: Option<oneshot::Sender<()>>,
        known: Known,
    ) -> bool {
        self.push(Out { line, ack, known })
    }

    fn push(&self, mut out: Out) -> bool {
        let n = out.line.len();
        // Dropped after the lock: the last reference to the writer may go with it.
        let mut writer = None;
        {
            let mut q = self.shared.lock();
            if q.closed || q.unread {
                return false;
            }
            if q.lines.is_empty() && !q.busy {
                writer = self.shared.direct.get().and_then(Weak::upgrade);
                if let Some(w) = &writer {
                    match Arc::clone(w).take(out) {
                        None => return true,
                        Some(back) => out = back,
                    }
                }
            }
            self.queued.fetch_add(n, Ordering::AcqRel);
            q.lines.push_back(out);
        }
        drop(writer);
        self.shared.ready.notify_one();
        true
    }

    /// Closes the queue: lines already in it are still written, then the writer ends.
    pub fn close(&self) {
        self.shared.lock().closed = true;
        self.shared.ready.notify_one();
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

impl Drop for Outbox {
    /// As a channel's last sender: the writer drains what is queued, then ends.
    fn drop(&mut self) {
        self.close();
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
        let out = rx.recv().await.unwrap();
        b.wrote(out.line.len());
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
        assert_eq!(rx.recv().await.unwrap().line, b"a");
        assert!(rx.recv().await.is_none());
    }

    #[tokio::test]
    async fn a_dropped_outbox_ends_its_receiver_after_the_queued_lines() {
        let (b, mut rx) = Outbox::new();
        assert!(b.send(b"a".to_vec(), None));
        drop(b);
        assert_eq!(rx.recv().await.unwrap().line, b"a");
        assert!(rx.recv().await.is_none());
    }

    #[tokio::test]
    async fn a_dropped_receiver_refuses_lines_and_drops_their_acks() {
        let (b, rx) = Outbox::new();
        let (tx, ack) = oneshot::channel();
        assert!(b.send(b"a".to_vec(), Some(tx)));
        drop(rx);
        assert!(ack.await.is_err(), "the line was never written");
        assert!(!b.send(b"b".to_vec(), None));
    }

    #[tokio::test]
    async fn a_waiting_receiver_is_woken_and_an_empty_queue_keeps_no_buffer() {
        let (b, mut rx) = Outbox::new();
        let reader = tokio::spawn(async move {
            let first = rx.recv().await.unwrap().line;
            let capacity = rx.shared.lock().lines.capacity();
            (first, capacity, rx)
        });
        tokio::task::yield_now().await;
        assert!(b.send(b"x".to_vec(), None));
        let (first, capacity, _rx) = reader.await.unwrap();
        assert_eq!(first, b"x");
        assert_eq!(capacity, 0, "a drained queue gave its buffer back");
    }

    /// Takes lines that start with `d`, and keeps them in order.
    #[derive(Default)]
    struct Taker(Mutex<Vec<Vec<u8>>>);

    impl Direct for Taker {
        fn take(self: Arc<Self>, out: Out) -> Option<Out> {
            if out.line.first() != Some(&b'd') {
                return Some(out);
            }
            self.0.lock().unwrap().push(out.line);
            None
        }
    }

    #[tokio::test]
    async fn a_direct_writer_takes_lines_only_when_none_wait_ahead_of_them() {
        let (b, mut rx) = Outbox::new();
        let taker = Arc::new(Taker::default());
        b.set_direct(Arc::downgrade(&taker) as Weak<dyn Direct>);
        assert!(b.send(b"d1".to_vec(), None));
        assert_eq!(*taker.0.lock().unwrap(), vec![b"d1".to_vec()]);
        // Given back: queued for the receiver.
        assert!(b.send(b"q1".to_vec(), None));
        // Queued behind q1, though the writer would take it.
        assert!(b.send(b"d2".to_vec(), None));
        assert_eq!(rx.recv().await.unwrap().line, b"q1");
        // The receiver holds d2 (taken, not yet done with): d3 waits behind it.
        assert_eq!(rx.recv().await.unwrap().line, b"d2");
        assert!(b.send(b"d3".to_vec(), None));
        assert_eq!(taker.0.lock().unwrap().len(), 1, "d3 overtook d2");
        assert_eq!(rx.recv().await.unwrap().line, b"d3");
        // Asking for the next line says the receiver is done: the writer takes d4.
        let next = tokio::time::timeout(Duration::from_millis(20), rx.recv()).await;
        assert!(next.is_err(), "nothing was queued");
        assert!(b.send(b"d4".to_vec(), None));
        assert_eq!(taker.0.lock().unwrap().last().unwrap(), b"d4");
        // A writer that is gone takes nothing; a closed outbox refuses as before.
        drop(taker);
        assert!(b.send(b"d5".to_vec(), None));
        assert_eq!(rx.recv().await.unwrap().line, b"d5");
        b.close();
        assert!(!b.send(b"d6".to_vec(), None));
    }
}
