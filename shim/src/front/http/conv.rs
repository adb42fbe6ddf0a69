//! One conversation of the HTTP front with the gate engine (a legacy session, or one
//! stateless caller): the engine, its downstream, and the routing of the engine's
//! client-bound messages (`route`) to the HTTP exchanges waiting for them.

mod route;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::subscription::Filter;
use crate::downstream::Attached;
use crate::engine::{Parsed, Shim};
use crate::wire::framing::Frame;
use crate::wire::ids::{self, IdKey};
use crate::wire::outbox::{Direct, Receiver};
use route::route;

/// A message for an HTTP exchange: related to its request, or the request's answer.
pub enum Msg {
    Related(Vec<u8>),
    Final(Vec<u8>),
}

/// Server messages an exchange may have waiting for its HTTP client to read (beyond
/// them they are dropped, with a warning; the answer always has its place).
const EXCHANGE_QUEUE: usize = 64;
/// Messages a GET stream may have waiting; a client that does not read it loses it.
const STREAM_QUEUE: usize = 256;
/// `subscriptions/listen` streams one conversation may hold open.
const MAX_LISTENERS: usize = 16;

struct Waiter {
    /// None once its exchange was dropped and the cancel is on its way into the engine:
    /// the id stays taken until then (see `Exchange::drop`), nothing is delivered to it.
    tx: Option<mpsc::Sender<Msg>>,
    /// Order of arrival: a server message goes to the newest exchange still open…
    seq: u64,
    /// …unless it is progress for the `progressToken` this exchange's request carries.
    progress: Option<IdKey>,
}

/// An open `subscriptions/listen` stream: its request id (the tag) and what it asked for.
struct Listener {
    id: Value,
    filter: Filter,
    tx: mpsc::Sender<Vec<u8>>,
}

#[derive(Default)]
struct Routes {
    waiters: HashMap<IdKey, Waiter>,
    /// The session's GET stream, when one is open.
    stream: Option<mpsc::Sender<Vec<u8>>>,
    /// A stateless caller's `subscriptions/listen` streams.
    listeners: Vec<Listener>,
    next_seq: u64,
}

pub struct Conv {
    pub shim: Arc<Shim>,
    /// Who this conversation belongs to; every request on it must come from them.
    pub caller: String,
    /// The protocol version the session agreed on (legacy), once known.
    pub version: Mutex<Option<String>>,
    routes: Mutex<Routes>,
    /// Seconds since `epoch` at the last exchange's start or end.
    last_used: AtomicU64,
    epoch: Instant,
    /// The conversation's downstream, ended on close (dropping it ends it).
    downstream: Mutex<Option<Attached>>,
    /// The downstream went away or the conversation was closed: it serves nothing more.
    gone: std::sync::atomic::AtomicBool,
    /// A stateless (2026-07-28) caller's conversation: list changes go to its listen
    /// streams only, never onto a request's answer.
    stateless: std::sync::atomic::AtomicBool,
    /// `subscriptions/listen` streams held open or being opened ([`ListenSlot`]s).
    listen_slots: AtomicU64,
}

/// One `subscriptions/listen` stream's place among [`MAX_LISTENERS`], held by the stream
/// from before its acknowledgement until the client hangs up.
pub struct ListenSlot(Arc<Conv>);

impl Drop for ListenSlot {
    fn drop(&mut self) {
        self.0.listen_slots.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Why a request was not taken into a conversation.
pub enum Refused {
    /// Its id is already in flight on this conversation.
    Busy,
    /// The conversation ended (expired, deleted, or its downstream went away) after the
    /// request looked it up.
    Gone,
}

impl Conv {
    /// A conversation over an engine already started; `to_client` is the engine's queue.
    pub fn new(
        shim: Arc<Shim>,
        caller: String,
        to_client: Receiver,
        downstream: Attached,
    ) -> Arc<Conv> {
        let conv = Arc::new(Conv {
            shim,
            caller,
            version: Mutex::new(None),
            routes: Mutex::new(Routes::default()),
            last_used: AtomicU64::new(0),
            epoch: Instant::now(),
            downstream: Mutex::new(Some(downstream)),
            gone: std::sync::atomic::AtomicBool::new(false),
            stateless: std::sync::atomic::AtomicBool::new(false),
            listen_slots: AtomicU64::new(0),
        });
        tokio::spawn(route(Arc::downgrade(&conv), to_client));
        let direct: Weak<dyn Direct> = Arc::downgrade(&conv) as Weak<dyn Direct>;
        conv.shim.client_box().set_direct(direct);
        conv
    }

    fn routes(&self) -> std::sync::MutexGuard<'_, Routes> {
        self.routes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn touch(&self) {
        let now = self.epoch.elapsed().as_secs();
        self.last_used.store(now, Ordering::Relaxed);
    }

    /// Idle for at least `secs` with no exchange open.
    pub fn idle_for(&self, secs: u64) -> bool {
        let idle =
            (self.epoch.elapsed().as_secs()).saturating_sub(self.last_used.load(Ordering::Relaxed));
        let r = self.routes();
        idle >= secs
            && r.waiters.is_empty()
            && r.stream.as_ref().is_none_or(|s| s.is_closed())
            && r.listeners.iter().all(|l| l.tx.is_closed())
    }

    /// Sends a client request into the engine; its answer comes on the returned exchange.
    pub async fn submit(self: &Arc<Self>, id: Value, msg: Parsed) -> Result<Exchange, Refused> {
        let key = IdKey::of(&id);
        let (tx, rx) = mpsc::channel(EXCHANGE_QUEUE + 1);
        let progress =
            crate::wire::value::at(msg.msg(), &["params", "_meta", "progressToken"]).map(IdKey::of);
        {
            let mut r = self.routes();
            // Checked under the routes lock `close` clears them under: a waiter added
            // after would never be answered (another worker may have closed it since the
            // lookup).
            if self.is_gone() {
                return Err(Refused::Gone);
            }
            if r.waiters.contains_key(&key) {
                return Err(Refused::Busy);
            }
            r.next_seq += 1;
            let seq = r.next_seq;
            let tx = Some(tx);
            r.waiters.insert(key.clone(), Waiter { tx, seq, progress });
        }
        self.touch();
        let ex = Exchange {
            conv: Arc::clone(self),
            rx,
            key,
            id,
            done: false,
        };
        self.feed(msg).await;
        Ok(ex)
    }

    /// Sends a client notification or response into the engine.
    pub async fn feed(&self, msg: Parsed) {
        // A client that does not read its answers (or a downstream that does not read its
        // input) is not fed more: memory stays bounded as on stdio.
        self.shim.client_box().room().await;
        self.shim.child_box().room().await;
        self.shim.client_parsed(msg);
    }

    /// Opens the session's GET stream; `Busy` when one is already open.
    pub fn open_stream(&self) -> Result<mpsc::Receiver<Vec<u8>>, Refused> {
        let mut r = self.routes();
        // As in `submit`: nothing registers after `close`.
        if self.is_gone() {
            return Err(Refused::Gone);
        }
        if r.stream.as_ref().is_some_and(|s| !s.is_closed()) {
            return Err(Refused::Busy);
        }
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        r.stream = Some(tx);
        Ok(rx)
    }

    /// Marks the conversation as a stateless caller's.
    pub fn mark_stateless(&self) {
        self.stateless.store(true, Ordering::Release);
    }

    /// A place for one more `subscriptions/listen` stream; `None` when the conversation
    /// already holds [`MAX_LISTENERS`] (open or being opened).
    pub fn reserve_listener(self: &Arc<Self>) -> Option<ListenSlot> {
        let max = MAX_LISTENERS as u64;
        let got = self
            .listen_slots
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            });
        got.ok().map(|_| ListenSlot(Arc::clone(self)))
    }

    /// Registers a listen stream tagged `id`; `None` when the conversation has ended.
    pub fn listen(&self, id: Value, filter: Filter) -> Option<mpsc::Receiver<Vec<u8>>> {
        let mut r = self.routes();
        // Checked under the routes lock `close` clears them under: nothing registers after.
        if self.is_gone() {
            return None;
        }
        r.listeners.retain(|l| !l.tx.is_closed());
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        r.listeners.push(Listener { id, filter, tx });
        Some(rx)
    }

    /// Ends the conversation: the downstream's input closes (so it exits), the routing
    /// task ends, and nothing more is sent to the client.
    pub fn close(&self) {
        self.gone.store(true, Ordering::Release);
        self.shim.child_box().close();
        self.shim.client_box().close();
        let mut r = self.routes();
        r.waiters.clear();
        r.stream = None;
        r.listeners.clear();
        drop(r);
        self.downstream
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
    }

    /// The conversation serves nothing more (closed, or its downstream went away).
    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// Runs `f` once the downstream is gone on its own (see [`Attached::when_gone`]).
    pub fn when_downstream_gone(&self, f: Box<dyn Fn() + Send + Sync>) {
        if let Some(d) = &*self.downstream.lock().unwrap_or_else(|p| p.into_inner()) {
            d.when_gone(f);
        }
    }

    /// [`Conv::downstream_gone`] from a synchronous caller: gone at once (the session's
    /// id reads 404 from now on), pending requests answered and closed on a task.
    pub fn end_with_downstream(self: Arc<Self>) {
        self.gone.store(true, Ordering::Release);
        tokio::spawn(async move { self.downstream_gone().await });
    }

    /// The downstream went away: what is pending gets its error, then the conversation
    /// closes.
    pub async fn downstream_gone(&self) {
        self.gone.store(true, Ordering::Release);
        self.shim.finish().await;
        self.close();
    }
}

/// One HTTP exchange waiting for its request's answer. Dropped before the answer (the
/// client went away), it cancels the request in the engine.
pub struct Exchange {
    conv: Arc<Conv>,
    rx: mpsc::Receiver<Msg>,
    key: IdKey,
    id: Value,
    done: bool,
}

impl Exchange {
    /// The next message for this exchange; `None` when the conversation closed.
    pub async fn next(&mut self) -> Option<Msg> {
        let m = self.rx.recv().await;
        if matches!(m, Some(Msg::Final(_)) | None) {
            self.done = true;
        }
        m
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // The id stays taken (its waiter emptied) until the cancel is in: a new request
        // reusing it cannot be admitted in between and be cancelled in its place. The
        // engine is not called under the routes lock: its answer may come straight back
        // through `Direct::take`, which takes that lock.
        {
            let mut routes = self.conv.routes();
            match routes.waiters.get_mut(&self.key) {
                Some(w) if w.tx.is_some() => w.tx = None,
                _ => return,
            }
        }
        let n = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": self.id, "reason": "the HTTP client went away"}});
        self.conv
            .shim
            .client_frame(Frame::Line(n.to_string().into_bytes()));
        let mut routes = self.conv.routes();
        if routes
            .waiters
            .get(&self.key)
            .is_some_and(|w| w.tx.is_none())
        {
            ids::take(&mut routes.waiters, &self.key);
        }
    }
}
