//! The Streamable HTTP downstream: each engine line is POSTed to the remote server, and
//! every message of each answer (JSON or SSE) goes back to the engine, through the
//! governor's line limit as on stdio. Session, GET stream and failures live here.
//! The session and its headers live in `session`, reading answers in `answer`.

mod answer;
mod session;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use bytes::Bytes;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::Method;
use serde_json::{json, Value};
use tokio::sync::{oneshot, Notify};
use tokio::task::AbortHandle;

use super::client::{Client, ClientError};
use super::remote::{Peek, Remote};
use crate::engine::Shim;
use crate::wire::framing::Down;
use crate::wire::ids::IdKey;
use crate::wire::jsonrpc;
use crate::wire::mcp_headers::DeclarationError;
use crate::wire::outbox::{Direct, Known, Out, Receiver};
use answer::body_kind;
use session::{Session, SESSION};

/// One remote server as the engine's downstream.
pub struct Conn {
    http: Client,
    remote: Remote,
    shim: Arc<Shim>,
    session: Mutex<Session>,
    /// Requests whose POST is in flight, by id: a 2026-07-28 cancellation aborts it.
    inflight: Mutex<HashMap<IdKey, (AbortHandle, bool)>>,
    /// Told when the last POST in flight ends (shutdown waits for it).
    settled: Notify,
    /// Run once when the server forgets the session (404), after the request that found
    /// out was answered: the HTTP front ends its own session then.
    forgotten: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

/// What a line is, as the engine knew it or read now.
fn peek(line: &[u8], known: Known) -> Peek {
    match known {
        Known::Request(p) => *p,
        _ => Peek::of(line),
    }
}

/// How an engine line is sent (see [`Conn::sending`]).
enum Sending {
    /// Accepted by the server before the next line goes.
    InOrder,
    /// On a task of its own, concurrently (a request).
    OwnTask,
    /// Nothing to send: a 2026-07-28 cancellation, acted on by aborting its request.
    Done,
}

impl Direct for Conn {
    /// A request starts its POST from the engine's own send, when nothing is queued ahead
    /// of it; anything else goes through the queue to [`Conn::write`].
    fn take(self: Arc<Self>, mut out: Out) -> Option<Out> {
        let peek = peek(&out.line, std::mem::replace(&mut out.known, Known::Nothing));
        match self.sending(&peek) {
            Sending::InOrder => {
                out.known = Known::Request(Box::new(peek));
                return Some(out);
            }
            Sending::OwnTask => self.spawn_post(out.line, peek, out.ack),
            Sending::Done => {}
        }
        None
    }
}

/// Why a message posted to the remote server got no answer: the engine's request is
/// answered with a JSON-RPC error saying so, its `data.reason` naming the case.
#[derive(Debug, thiserror::Error)]
pub enum PostFailed {
    /// The server forgot the session (or tc is shutting down): the text says which.
    #[error("{0}")]
    SessionGone(String),
    /// A client MUST NOT use a tool whose `x-mcp-header` declarations are invalid.
    #[error(
        "tool {tool:?} is not called over HTTP: its x-mcp-header declarations are invalid ({why})"
    )]
    InvalidToolSchema { tool: String, why: DeclarationError },
    /// Names the host and port only (the url's query may hold a key).
    #[error("the remote MCP server {server} cannot be reached ({error})")]
    Unreachable { server: String, error: ClientError },
    #[error("the remote MCP server answered HTTP {0} without a message")]
    NoMessage(hyper::StatusCode),
    /// It answered 404 to our session: it forgot the session (the text says what to do).
    #[error("{0}")]
    SessionEnded(String),
    /// Any other non-2xx answer, with what its body said (`detail`, bounded and escaped).
    #[error("the remote MCP server {server} answered HTTP {status}{detail}")]
    Status {
        server: String,
        status: hyper::StatusCode,
        detail: String,
    },
    #[error("the answer from the remote MCP server broke off ({0})")]
    BrokeOff(std::io::Error),
    #[error("the remote MCP server ended its answer without a response")]
    NoResponse,
}

impl PostFailed {
    /// The error's `data`: the case, for a client (or test) to tell them apart.
    fn data(&self) -> Value {
        match self {
            PostFailed::SessionGone(_) => json!({"reason": "session_gone"}),
            PostFailed::InvalidToolSchema { .. } => json!({"reason": "invalid_tool_schema"}),
            PostFailed::Unreachable { .. } => json!({"reason": "unreachable"}),
            PostFailed::NoMessage(status) => {
                json!({"reason": "no_answer", "status": status.as_u16()})
            }
            PostFailed::BrokeOff(_) | PostFailed::NoResponse => json!({"reason": "no_answer"}),
            PostFailed::SessionEnded(_) => json!({"reason": "session_gone", "status": 404}),
            PostFailed::Status { status, .. } => {
                json!({"reason": "http_status", "status": status.as_u16()})
            }
        }
    }
}

impl Conn {
    pub fn new(remote: Remote, shim: Arc<Shim>) -> anyhow::Result<Arc<Conn>> {
        let http = remote.client()?;
        Ok(Conn::with_client(remote, shim, http))
    }

    /// A connection on a shared client (the HTTP front's conversations share one pool).
    pub fn with_client(remote: Remote, shim: Arc<Shim>, http: Client) -> Arc<Conn> {
        let conn = Arc::new(Conn {
            http,
            remote,
            shim,
            session: Mutex::new(Session::default()),
            inflight: Mutex::new(HashMap::new()),
            settled: Notify::new(),
            forgotten: OnceLock::new(),
        });
        let direct: Weak<dyn Direct> = Arc::downgrade(&conn) as Weak<dyn Direct>;
        conn.shim.child_box().set_direct(direct);
        conn
    }

    /// Sets what runs once the server forgets the session (see `forgotten`); set once.
    pub fn when_forgotten(&self, f: Box<dyn Fn() + Send + Sync>) {
        let _ = self.forgotten.set(f);
    }

    /// Drains the engine's downstream queue: lines that must go in order, and requests
    /// queued behind them (the rest come straight through [`Direct`]).
    pub async fn write(self: &Arc<Self>, mut rx: Receiver) {
        while let Some(Out { line, ack, known }) = rx.recv().await {
            let n = line.len();
            let peek = peek(&line, known);
            match self.sending(&peek) {
                // Boxed: inline, a POST's state would size this loop, which every idle
                // session of the HTTP front keeps parked.
                Sending::InOrder => Box::pin(self.post(line, peek, ack)).await,
                Sending::OwnTask => self.spawn_post(line, peek, ack),
                Sending::Done => {}
            }
            self.shim.child_box().wrote(n);
        }
        self.shim.child_box().writer_gone();
    }

    /// How a line is sent; a 2026-07-28 cancellation of a request in flight is acted on
    /// here (the wire cancels by closing the request's stream).
    fn sending(&self, peek: &Peek) -> Sending {
        if peek.cancels.as_ref().is_some_and(|t| self.abort_modern(t)) {
            return Sending::Done;
        }
        // Initialize's session id is needed by what follows; notifications and responses
        // keep their order.
        if !peek.is_request() || peek.method.as_deref() == Some("initialize") {
            return Sending::InOrder;
        }
        Sending::OwnTask
    }

    /// Starts a request's POST on a task of its own, noted in flight until it ends.
    fn spawn_post(self: &Arc<Self>, line: Vec<u8>, peek: Peek, ack: Option<oneshot::Sender<()>>) {
        let key = IdKey::of(peek.id.as_ref().unwrap_or(&Value::Null));
        let modern = peek.modern.is_some();
        let me = Arc::clone(self);
        let k = key.clone();
        // Boxed before the spawn: the task moves (and, ended, overwrites) only a pointer,
        // not a POST's whole state, several times per call.
        let post = Box::pin(async move {
            me.post(line, peek, ack).await;
            me.ended(&mut me.inflight_lock(), &k);
        });
        // Held across the spawn: the task's own removal waits for this insertion on any
        // runtime, so no entry outlives its task.
        let mut inflight = self.inflight_lock();
        let h = tokio::spawn(post);
        inflight.insert(key, (h.abort_handle(), modern));
    }

    /// A POST's task ended (or was aborted): its entry goes, and a wait for the last one
    /// is told.
    fn ended(&self, inflight: &mut HashMap<IdKey, (AbortHandle, bool)>, key: &IdKey) {
        crate::wire::ids::take(inflight, key);
        if inflight.is_empty() {
            self.settled.notify_waiters();
        }
    }

    /// Waits until no POST is in flight.
    pub async fn settled(&self) {
        loop {
            let idle = self.settled.notified();
            tokio::pin!(idle);
            // Registered before the check, so an end in between is not missed.
            idle.as_mut().enable();
            if self.inflight_lock().is_empty() {
                return;
            }
            idle.await;
        }
    }

    /// Stops every POST in flight (the conversation ended; nobody waits for answers).
    pub fn abort_all(&self) {
        let mut inflight = self.inflight_lock();
        for (_, (h, _)) in inflight.drain() {
            h.abort();
        }
        self.settled.notify_waiters();
    }

    fn inflight_lock(&self) -> std::sync::MutexGuard<'_, HashMap<IdKey, (AbortHandle, bool)>> {
        self.inflight.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn abort_modern(&self, target: &Value) -> bool {
        let key = IdKey::of(target);
        let mut inflight = self.inflight_lock();
        match inflight.get(&key) {
            Some((h, true)) => {
                h.abort();
                // An aborted task never reaches its own removal.
                self.ended(&mut inflight, &key);
                true
            }
            _ => false,
        }
    }

    /// POSTs one message and feeds its answer to the engine; a failure answers the
    /// request (if it is one) with a JSON-RPC error instead.
    async fn post(self: &Arc<Self>, line: Vec<u8>, peek: Peek, ack: Option<oneshot::Sender<()>>) {
        let id = peek.id.clone().filter(|_| peek.is_request());
        let initialize = peek.method.as_deref() == Some("initialize");
        if let Some(why) = self.session().gone.clone().filter(|_| !initialize) {
            return self.fail(id.as_ref(), &PostFailed::SessionGone(why));
        }
        let mut headers = self.base_headers(&peek);
        if let Err(e) = self.param_headers(&peek, &line, &mut headers).await {
            return self.fail(id.as_ref(), &e);
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let sent_session = headers.contains_key(SESSION);
        let resp = match self
            .http
            .send(Method::POST, headers, Bytes::from(line))
            .await
        {
            Ok(r) => r,
            Err(error) => {
                let server = self.remote.shown().into_owned();
                return self.fail(id.as_ref(), &PostFailed::Unreachable { server, error });
            }
        };
        let status = resp.status();
        if !status.is_success() {
            return self.refused(id.as_ref(), resp, sent_session).await;
        }
        if let Some(a) = ack {
            let _ = a.send(());
        }
        if initialize {
            self.learn_session(&resp);
        }
        if peek.method.as_deref() == Some("notifications/initialized") {
            self.listen();
        }
        let Some(id) = id else {
            return;
        };
        let Some(kind) = body_kind(&resp) else {
            return self.fail(Some(&id), &PostFailed::NoMessage(status));
        };
        let answered = self.feed(resp, kind, Some(&id), initialize).await;
        if let Err(e) = answered {
            self.fail(Some(&id), &e);
        }
    }

    fn unreachable(&self, e: &ClientError) -> String {
        // The error names the host and port only (the url's query may hold a key).
        format!(
            "the remote MCP server {} cannot be reached ({e})",
            self.remote.shown()
        )
    }

    /// Answers the engine's request `id` with a JSON-RPC error (a notification: logged).
    fn fail(&self, id: Option<&Value>, why: &PostFailed) {
        let Some(id) = id else {
            tracing::warn!("{why}");
            return;
        };
        let mut e = jsonrpc::error(id, jsonrpc::INTERNAL_ERROR, format!("tc-shim: {why}"));
        e["error"]["data"] = why.data();
        self.shim
            .child_frame(Down::Line(e.to_string().into_bytes()));
    }
}
