//! One target's bounded queue of pushes: the raise that fills it never waits (a full
//! queue drops its oldest push and counts it); the target's sender drains it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use tokio::sync::Notify;

/// A bounded FIFO with a non-blocking `offer` and an async `take`.
pub struct Queue<T> {
    items: Mutex<VecDeque<T>>,
    cap: usize,
    ready: Notify,
    dropped: AtomicU64,
}

impl<T> Queue<T> {
    /// A queue holding at most `cap` items (at least one).
    pub fn new(cap: usize) -> Queue<T> {
        Queue {
            items: Mutex::new(VecDeque::new()),
            cap: cap.max(1),
            ready: Notify::new(),
            dropped: AtomicU64::new(0),
        }
    }

    /// Adds `item`; when full, the oldest goes first. True when one was dropped. Never
    /// blocks beyond the lock (held for a push or a pop): the ledger calls this.
    pub fn offer(&self, item: T) -> bool {
        let mut q = self.items.lock().unwrap_or_else(|p| p.into_inner());
        // The newest push is kept over the oldest: the oldest request is the likeliest to
        // have been answered or to expire before its push would arrive.
        let dropped = q.len() >= self.cap && q.pop_front().is_some();
        q.push_back(item);
        drop(q);
        if dropped {
            self.dropped.fetch_add(1, Relaxed);
        }
        // A permit is stored when the sender is busy, so the next `take` does not sleep.
        self.ready.notify_one();
        dropped
    }

    /// The oldest item, waiting for one.
    pub async fn take(&self) -> T {
        loop {
            if let Some(item) = self.try_take() {
                return item;
            }
            self.ready.notified().await;
        }
    }

    fn try_take(&self) -> Option<T> {
        let mut q = self.items.lock().unwrap_or_else(|p| p.into_inner());
        q.pop_front()
    }

    /// How many items were dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Relaxed)
    }

    /// Items waiting now.
    pub fn waiting(&self) -> usize {
        self.items.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_the_oldest_and_counts_it() {
        let q = Queue::new(3);
        for i in 0..3 {
            assert!(!q.offer(i), "room for {i}");
        }
        assert!(q.offer(3));
        assert!(q.offer(4));
        assert_eq!((q.waiting(), q.dropped()), (3, 2));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let got: Vec<i32> =
            rt.block_on(async { vec![q.take().await, q.take().await, q.take().await] });
        assert_eq!(got, [2, 3, 4], "the newest are kept, in order");
        assert_eq!(q.waiting(), 0);
    }

    #[test]
    fn take_waits_for_an_offer_made_later() {
        let q = std::sync::Arc::new(Queue::new(1));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let got = rt.block_on(async {
            let taker = tokio::spawn({
                let q = q.clone();
                async move { q.take().await }
            });
            tokio::task::yield_now().await; // the taker is parked on an empty queue
            assert!(!q.offer("late"));
            taker.await.unwrap()
        });
        assert_eq!(got, "late");
    }

    #[test]
    fn a_zero_capacity_still_keeps_the_newest() {
        let q = Queue::new(0);
        assert!(!q.offer(1));
        assert!(q.offer(2));
        assert_eq!((q.waiting(), q.dropped()), (1, 1));
    }
}
