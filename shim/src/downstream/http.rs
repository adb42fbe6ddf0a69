//! The Streamable HTTP downstream: each engine line is POSTed to the remote server, and
//! every message of each answer (JSON or SSE) goes back to the engine, through the
//! governor's line limit as on stdio. Session, GET stream and failures live here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::io::BufReader;
use tokio::sync::{oneshot, Notify};
use tokio::task::AbortHandle;

use super::client::{Client, ClientError, Response};
use super::remote::{server_token, Peek, Remote};
use super::sse::{Kind, Lines};
use crate::engine::Shim;
use crate::wire::framing::{read_down, Down};
use crate::wire::ids::IdKey;
use crate::wire::jsonrpc;
use crate::wire::mcp_headers;
use crate::wire::outbox::{Direct, Known, Out, Receiver};

const SESSION: &str = "mcp-session-id";
const VERSION: &str = "mcp-protocol-version";
/// Bytes per read of an answer body, at most (as on stdio, fewer passes per long answer).
const BODY_READ: usize = 256 * 1024;
/// Bytes per read of a body of unknown length (an SSE stream, a chunked JSON answer): the
/// buffer is allocated (zeroed) per answer, so a small answer is not given a large one.
const STREAM_READ: usize = 16 * 1024;
/// The least buffer for a body of known length.
const MIN_READ: usize = 512;
/// An error body is read this far for its message.
const ERROR_BODY: usize = 64 * 1024;

/// The 2025 session (`MCP-Session-Id`, negotiated version) and what ended it.
#[derive(Default)]
struct Session {
    id: Option<HeaderValue>,
    version: Option<HeaderValue>,
    /// The server forgot the session (404): later calls fail with this.
    gone: Option<String>,
    listening: bool,
}

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

    fn session(&self) -> std::sync::MutexGuard<'_, Session> {
        self.session.lock().unwrap_or_else(|p| p.into_inner())
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
            return self.fail(id.as_ref(), &why, json!({"reason": "session_gone"}));
        }
        let mut headers = self.base_headers(&peek);
        if let Err(why) = self.param_headers(&peek, &line, &mut headers).await {
            return self.fail(id.as_ref(), &why, json!({"reason": "invalid_tool_schema"}));
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let sent_session = headers.contains_key(SESSION);
        let resp = match self
            .http
            .send(Method::POST, headers, Bytes::from(line))
            .await
        {
            Ok(r) => r,
            Err(e) => {
                return self.fail(
                    id.as_ref(),
                    &self.unreachable(&e),
                    json!({"reason": "unreachable"}),
                )
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
            return self.fail(
                Some(&id),
                &format!("the remote MCP server answered HTTP {status} without a message"),
                json!({"reason": "no_answer", "status": status.as_u16()}),
            );
        };
        let answered = self.feed(resp, kind, Some(&id), initialize).await;
        if let Err(why) = answered {
            self.fail(Some(&id), &why, json!({"reason": "no_answer"}));
        }
    }

    /// Headers of every request: the configured ones and Accept; a legacy request's
    /// session and version, a 2026-07-28 request's mirror of its body.
    fn base_headers(&self, peek: &Peek) -> HeaderMap {
        let mut h = self.remote.headers.clone();
        h.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        if peek.modern.is_none() {
            let s = self.session();
            if let Some(id) = &s.id {
                h.insert(SESSION, id.clone());
            }
            if let Some(v) = &s.version {
                h.insert(VERSION, v.clone());
            }
        }
        peek.mirror(&mut h);
        h
    }

    /// A 2026-07-28 `tools/call`'s `Mcp-Param-*` headers, for the tool's `x-mcp-header`
    /// arguments (a client MUST send them); a tool whose declarations are invalid is not
    /// called over HTTP (a client MUST NOT use it).
    async fn param_headers(
        &self,
        peek: &Peek,
        line: &[u8],
        h: &mut HeaderMap,
    ) -> Result<(), String> {
        if peek.modern.is_none() || peek.method.as_deref() != Some("tools/call") {
            return Ok(());
        }
        let Some(tool) = peek.name.as_deref() else {
            return Ok(());
        };
        // Listed again if a `list_changed` emptied the cache while the call waited for its
        // human: a call sent without its headers would be refused after its approval.
        let decls = match self.shim.param_headers(tool).await {
            Some(Ok(d)) if !d.is_empty() => d,
            None | Some(Ok(_)) => return Ok(()),
            Some(Err(why)) => {
                return Err(format!(
                    "tool {tool:?} is not called over HTTP: its x-mcp-header declarations are invalid ({why})"
                ))
            }
        };
        // Parsed again only for a tool that declares parameters.
        let msg: Option<Value> = serde_json::from_slice(line).ok();
        let args = msg.as_ref().and_then(|m| m.get("params")?.get("arguments"));
        for (name, value) in mcp_headers::param_headers(&decls, args) {
            let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(&value),
            ) else {
                continue;
            };
            h.insert(n, v);
        }
        Ok(())
    }

    fn learn_session(&self, resp: &Response) {
        let sid = resp.headers().get(SESSION).map(|v| v.as_bytes().to_vec());
        let mut s = self.session();
        s.gone = None;
        s.id = sid.as_deref().and_then(server_token);
        if sid.is_some() && s.id.is_none() {
            tracing::warn!(
                "the remote MCP server sent an invalid session id; continuing without one"
            );
        }
    }

    /// Reads an answer body as lines into the engine until `id` is answered (the server
    /// should close the stream then) or the body ends. Ok(()) once `id` was answered.
    async fn feed(
        self: &Arc<Self>,
        resp: Response,
        kind: Kind,
        id: Option<&Value>,
        initialize: bool,
    ) -> Result<(), String> {
        // One more than the body: the adapter ends a JSON body with a newline.
        let read = resp.body().content_length().map_or(STREAM_READ, |n| {
            usize::try_from(n)
                .map_or(BODY_READ, |n| n.saturating_add(1))
                .clamp(MIN_READ, BODY_READ)
        });
        let lines = Lines::new(resp.into_body(), kind);
        let mut r = BufReader::with_capacity(read, lines);
        let shim = Arc::clone(&self.shim);
        let mut limit = || shim.down_line_limit();
        loop {
            self.shim.client_box().room().await;
            let d = match read_down(&mut r, &mut limit).await {
                Ok(Down::Eof) => break,
                Ok(d) => d,
                Err(e) => {
                    return Err(format!(
                        "the answer from the remote MCP server broke off ({e})"
                    ))
                }
            };
            if let (true, Down::Line(l)) = (initialize, &d) {
                self.learn_version(l, id);
            }
            let answers = self.shim.child_frame(d);
            let ours = id.is_some() && answers.as_ref() == id;
            if ours {
                let body = std::pin::Pin::into_inner(r.into_inner().into_body());
                body.finish_in_background();
                return Ok(());
            }
        }
        match id {
            Some(_) => Err("the remote MCP server ended its answer without a response".into()),
            None => Ok(()),
        }
    }

    /// The version an `initialize` answer (`id`'s response) agreed on, learnt before the
    /// engine passes the answer on: the requests that follow it carry it.
    fn learn_version(&self, line: &[u8], id: Option<&Value>) {
        let v: Value = serde_json::from_slice(line).unwrap_or_default();
        let answer = v.get("method").is_none()
            && (v.get("result").is_some() || v.get("error").is_some())
            && id.is_some_and(|id| v.get("id") == Some(id));
        if let Some(ver) = v["result"]["protocolVersion"].as_str().filter(|_| answer) {
            self.session().version = server_token(ver.as_bytes());
        }
    }

    /// Opens the GET stream for server-initiated messages once (legacy sessions only);
    /// 405 means the server offers none.
    fn listen(self: &Arc<Self>) {
        {
            let mut s = self.session();
            if s.listening {
                return;
            }
            s.listening = true;
        }
        let me = Arc::clone(self);
        tokio::spawn(async move {
            // A stream the server closes is reopened; one it refuses is not.
            while me.session().gone.is_none() {
                let mut headers = me.base_headers(&Peek::default());
                headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
                let resp = match me.http.send(Method::GET, headers, Bytes::new()).await {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::warn!("GET stream: {}", me.unreachable(&e));
                        return;
                    }
                };
                let status = resp.status();
                if status == StatusCode::METHOD_NOT_ALLOWED {
                    tracing::debug!("the remote MCP server offers no GET stream (405)");
                    return;
                }
                if !status.is_success() || body_kind(&resp) != Some(Kind::Sse) {
                    tracing::warn!("the remote MCP server refused the GET stream (HTTP {status})");
                    return;
                }
                if let Err(e) = me.feed(resp, Kind::Sse, None, false).await {
                    tracing::warn!("GET stream: {e}");
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }

    /// Ends the session at shutdown (`DELETE`), best effort and bounded.
    pub async fn close(&self) {
        let id = {
            let mut s = self.session();
            // Stops the GET stream from being reopened.
            let forgotten = s.gone.replace("tc-shim is shutting down".into()).is_some();
            // A session the server forgot has nothing to end.
            s.id.clone().filter(|_| !forgotten)
        };
        let Some(id) = id else {
            return;
        };
        let mut headers = self.base_headers(&Peek::default());
        headers.insert(SESSION, id);
        let req = self.http.send(Method::DELETE, headers, Bytes::new());
        match tokio::time::timeout(Duration::from_secs(3), req).await {
            Ok(Ok(r))
                if r.status().is_success() || r.status() == StatusCode::METHOD_NOT_ALLOWED => {}
            Ok(Ok(r)) => tracing::debug!("DELETE of the session: HTTP {}", r.status()),
            Ok(Err(e)) => tracing::debug!("DELETE of the session: {}", self.unreachable(&e)),
            Err(_) => tracing::debug!("DELETE of the session timed out"),
        }
    }

    /// A non-2xx answer: 404 on a session means the server forgot it.
    async fn refused(&self, id: Option<&Value>, resp: Response, sent_session: bool) {
        let status = resp.status();
        let detail = error_detail(resp).await;
        if status == StatusCode::NOT_FOUND && sent_session {
            let why = "the remote MCP server ended the session (HTTP 404): its state is gone; \
                       start a new MCP session (through tc-shim's HTTP front: initialize again, \
                       its session ended too; over stdio: restart the MCP client). tc-shim does \
                       not re-initialize on its own: the client's view of the server may no \
                       longer hold"
                .to_string();
            let first = self.session().gone.replace(why.clone()).is_none();
            if first {
                tracing::warn!("{why}");
            }
            self.fail(id, &why, json!({"reason": "session_gone", "status": 404}));
            if let Some(f) = self.forgotten.get().filter(|_| first) {
                f();
            }
            return;
        }
        let why = format!(
            "the remote MCP server {} answered HTTP {status}{detail}",
            self.remote.shown()
        );
        if id.is_none() {
            tracing::warn!("{why}");
        }
        self.fail(
            id,
            &why,
            json!({"reason": "http_status", "status": status.as_u16()}),
        );
    }

    fn unreachable(&self, e: &ClientError) -> String {
        // The error names the host and port only (the url's query may hold a key).
        format!(
            "the remote MCP server {} cannot be reached ({e})",
            self.remote.shown()
        )
    }

    /// Answers the engine's request `id` with a JSON-RPC error (a notification: logged).
    fn fail(&self, id: Option<&Value>, why: &str, data: Value) {
        let Some(id) = id else {
            tracing::warn!("{why}");
            return;
        };
        let mut e = jsonrpc::error(id, jsonrpc::INTERNAL_ERROR, format!("tc-shim: {why}"));
        e["error"]["data"] = data;
        self.shim
            .child_frame(Down::Line(e.to_string().into_bytes()));
    }
}

/// The media type of an answer we read: JSON, SSE, or none (202, empty, other).
fn body_kind(resp: &Response) -> Option<Kind> {
    if resp.status() == StatusCode::ACCEPTED || resp.status() == StatusCode::NO_CONTENT {
        return None;
    }
    let ct = resp.headers().get(CONTENT_TYPE)?.to_str().ok()?;
    let media = ct.split(';').next()?.trim().to_ascii_lowercase();
    match media.as_str() {
        "text/event-stream" => Some(Kind::Sse),
        "application/json" => Some(Kind::Json),
        _ => None,
    }
}

/// `: <message>` of an error body (a JSON-RPC error's message, else its first text).
async fn error_detail(mut resp: Response) -> String {
    let mut body = Vec::new();
    while body.len() < ERROR_BODY {
        match resp.body_mut().chunk().await {
            Ok(Some(c)) => body.extend_from_slice(&c),
            _ => break,
        }
    }
    let v: Value = serde_json::from_slice(&body).unwrap_or_default();
    let text = match v["error"]["message"].as_str() {
        Some(m) => m.to_string(),
        None => String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
    };
    let text: String = text.chars().filter(|c| !c.is_control()).take(200).collect();
    if text.trim().is_empty() {
        String::new()
    } else {
        format!(": {}", text.trim())
    }
}
