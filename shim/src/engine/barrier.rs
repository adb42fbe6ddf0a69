//! The per-vault barrier: orders the calls that can change the vault around the calls
//! whose judgment depends on its state, so no change made through this shim lands between
//! judging a call (its `when`, its fingerprint check) and the downstream running it.
//!
//! Every call that is not read-only takes a [`Ticket`] when it *arrives* (on the client
//! reader, so the order is the order of the wire, not of task scheduling):
//! - **exclusive** — a call of a tool with a gate entry: it is judged against the vault's
//!   state. It enters once every earlier ticket is done (every earlier change answered),
//!   and every later ticket waits until it is done (answered).
//! - **shared** — any other call that may change the vault (not `readOnlyHint: true`). It
//!   waits only for earlier exclusive tickets; shared calls run concurrently.
//!
//! Read-only calls take no ticket and are never held. A ticket is done when its call is
//! answered (by the downstream or by the shim), when the downstream goes away, or a grace
//! period after the client cancelled the call (a server may never answer a cancelled call).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// How a call takes part in the barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Judged against the vault's state: runs alone among the calls that change it.
    Exclusive,
    /// May change the vault, judged on its arguments only: runs beside other shared calls.
    Shared,
}

/// A call's place in the barrier's queue (its arrival order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    seq: u64,
    kind: Kind,
}

#[derive(Default)]
struct Queue {
    next: u64,
    /// Tickets not yet done, by arrival.
    live: BTreeMap<u64, Kind>,
}

impl Queue {
    fn may_enter(&self, t: Ticket) -> bool {
        let mut earlier = self.live.range(..t.seq);
        match t.kind {
            Kind::Exclusive => earlier.next().is_none(),
            Kind::Shared => earlier.all(|(_, k)| *k == Kind::Shared),
        }
    }
}

/// A ticket held by its call: done when dropped (the call's entry went away: answered,
/// forwarded-and-answered, refused, expired or the downstream gone), so no path that ends
/// a call can forget to let the queue move on.
pub struct Place {
    barrier: Arc<Barrier>,
    ticket: Ticket,
}

impl Place {
    pub fn ticket(&self) -> Ticket {
        self.ticket
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.barrier.done(self.ticket);
    }
}

impl std::fmt::Debug for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.ticket.fmt(f)
    }
}

/// The queue of tickets and the wake-up for those waiting on it.
#[derive(Default)]
pub struct Barrier {
    queue: Mutex<Queue>,
    changed: Notify,
}

impl Barrier {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place at the back of the queue. Synchronous: call it where the order is decided.
    pub fn ticket(&self, kind: Kind) -> Ticket {
        let mut q = self.lock();
        let seq = q.next;
        q.next += 1;
        q.live.insert(seq, kind);
        Ticket { seq, kind }
    }

    /// A place at the back of the queue, released when dropped.
    pub fn place(self: &Arc<Self>, kind: Kind) -> Place {
        Place {
            barrier: Arc::clone(self),
            ticket: self.ticket(kind),
        }
    }

    /// Waits until `t` may run: every earlier ticket it must wait for is done.
    pub async fn enter(&self, t: Ticket) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the check, so a `done` between the check and the wait
            // is not missed.
            changed.as_mut().enable();
            {
                let q = self.lock();
                // A ticket already done (its call answered or cancelled) waits for nothing.
                if !q.live.contains_key(&t.seq) || q.may_enter(t) {
                    return;
                }
            }
            changed.await;
        }
    }

    /// The ticket's call was answered (or will never be): later tickets may go on.
    /// Idempotent.
    pub fn done(&self, t: Ticket) {
        if self.lock().live.remove(&t.seq).is_some() {
            self.changed.notify_waiters();
        }
    }

    /// How many tickets are not done.
    #[cfg(test)]
    pub fn live(&self) -> usize {
        self.lock().live.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Whether `enter` completes without anything else happening.
    async fn enters(b: &Arc<Barrier>, t: Ticket) -> bool {
        tokio::time::timeout(Duration::from_millis(50), b.enter(t))
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn shared_calls_run_together_and_an_exclusive_one_waits_for_them() {
        let b = Arc::new(Barrier::default());
        let s1 = b.ticket(Kind::Shared);
        let s2 = b.ticket(Kind::Shared);
        let x = b.ticket(Kind::Exclusive);
        let s3 = b.ticket(Kind::Shared);
        assert!(enters(&b, s1).await);
        assert!(enters(&b, s2).await);
        assert!(
            !enters(&b, x).await,
            "exclusive entered before earlier changes were answered"
        );
        assert!(
            !enters(&b, s3).await,
            "a later change entered before the judged call"
        );
        b.done(s1);
        assert!(!enters(&b, x).await);
        b.done(s2);
        assert!(enters(&b, x).await);
        assert!(
            !enters(&b, s3).await,
            "a later change entered while the judged call ran"
        );
        b.done(x);
        assert!(enters(&b, s3).await);
        b.done(s3);
        assert_eq!(b.live(), 0);
    }

    #[tokio::test]
    async fn a_waiting_call_wakes_when_the_one_before_is_done() {
        let b = Arc::new(Barrier::default());
        let x1 = b.ticket(Kind::Exclusive);
        let x2 = b.ticket(Kind::Exclusive);
        assert!(enters(&b, x1).await);
        let waiter = {
            let b = Arc::clone(&b);
            tokio::spawn(async move { b.enter(x2).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        b.done(x1);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
    }

    #[tokio::test]
    async fn done_is_idempotent() {
        let b = Arc::new(Barrier::default());
        let x = b.ticket(Kind::Exclusive);
        let s = b.ticket(Kind::Shared);
        b.done(x);
        b.done(x);
        assert!(enters(&b, s).await);
        let x2 = b.ticket(Kind::Exclusive);
        assert!(!enters(&b, x2).await);
        b.done(s);
        assert!(enters(&b, x2).await);
        b.done(x2);
        assert_eq!(b.live(), 0);
    }

    #[tokio::test]
    async fn a_dropped_place_is_done() {
        let b = Arc::new(Barrier::default());
        let first = b.place(Kind::Exclusive);
        let second = b.place(Kind::Shared);
        assert!(!enters(&b, second.ticket()).await);
        drop(first);
        assert!(enters(&b, second.ticket()).await);
        drop(second);
        assert_eq!(b.live(), 0);
    }
}
