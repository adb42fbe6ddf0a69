//! The gate engine, transport-independent: a client line is admitted, a `tools/call` judged,
//! confirmed by a human on one of its routes, forwarded, and its answer governed.

// The stages, in the order a message meets them (fronts and downstreams drive the
// engine only through `Shim::start` and the `pub` methods at the end of this file):
//   admission  a client line: parse, roots out, admit, dispatch by method
//   call       a `tools/call`'s order: its turn, judge, then forward or confirm → forward
//   judge      gate entry, floor, paths and ACL, `when`; the tool cache; targets
//   confirm    how a human approves (by request, input_required round, elicitation, page)
//   forward    to the downstream; a held call answered; a downstream line; the exit path
//   govern     the response governor: byte cap, oversize lines, paging
//   refusal    what the agent is told, as one typed `Refusal`
//   rounds     a downstream's own round as our state carries it (confirm opens, forward seals)
// Each stage owns its part of the engine's state (`state.rs`: admission the `Session`,
// judge the `ToolCache`, confirm the `Holds`, forward the `Outstanding` requests), and
// hands the next a typed result: `Judged` or `Unjudged`, then `Obtained` (an
// `Approval` or a downstream's `Round`), which forward runs; `call.rs` passes them on,
// and asks the judge again whether the tool was redefined before an approved call runs.
// `rounds.rs` is the codec of a downstream's own round, below the stages that use it.
pub mod admission;
mod answer;
pub mod barrier;
mod call;
pub mod confirm;
pub mod forward;
pub mod govern;
pub mod judge;
mod outcome;
pub mod refusal;
mod rounds;
mod state;
pub use admission::Parsed;
pub use confirm::url_mode::page_base;

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::Value;
use tc_proto::v1::Binding;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::daemon_client::Daemon;
use crate::engine::barrier::Barrier;
use crate::engine::govern::governor::{GovEvent, Governor};
use crate::engine::judge::policy::Policy;
use crate::wire::framing::{Down, Frame, Rejected};
use crate::wire::ids::IdKey;
use crate::wire::jsonrpc;
use crate::wire::outbox::Outbox;
use refusal::Shown;
use state::State;

/// Ids of the shim's own requests (to either side) start with this.
const OWN_ID_PREFIX: &str = "tc-shim-";

/// The `Mcp-Param-*` headers (lowercase name, decoded value) a message came with over
/// HTTP; None on stdio. They travel with a `tools/call` to its task, whose judgement
/// checks them against the tool once it is known.
type SentParams = Option<Box<[(String, String)]>>;

/// A gated call being confirmed: what every route needs to know about it.
struct Call<'a> {
    id: &'a Value,
    binding: &'a Binding,
    shown: &'a Shown<'a>,
    gate: &'a tc_core::config::Gate,
    args: &'a Value,
    /// The id tcd gave its raised request, once raised (a route asks under that id).
    raised: &'a OnceLock<String>,
    /// The call's `progressToken`: while it waits on a human, it reports progress.
    progress: Option<&'a Value>,
}

/// How a gated call was approved, for the audit log and the release rules.
struct Approval {
    /// RecordConsumed's route: `cli_token`, `legacy_elicitation`, `request_state`,
    /// `approved_request` (by request id, and route 3u) or `url_elicitation`.
    route: &'static str,
    /// The token's redemption (CLI route): released if nothing ran, else made final.
    redemption: Option<String>,
}

/// Everything the pumps and call handlers share.
pub struct Shim {
    /// Who makes the calls (see [`Options::caller`]).
    caller: String,
    /// The front carries the shim's own requests to the client ([`Options::server_requests`]).
    server_requests: bool,
    /// One permit per `tools/call` task still running, so that at exit the shim waits for
    /// their RecordConsumed (the audit record of a forwarded call) instead of dropping it.
    calls: Arc<Semaphore>,
    policy: Arc<Policy>,
    daemon: Arc<Daemon>,
    to_child: Outbox,
    to_client: Outbox,
    /// Every stage's state under one lock, never held across an await (`state.rs`).
    state: Mutex<State>,
    next_id: AtomicU64,
    /// Serializes finding out the downstream's era.
    probe: tokio::sync::Mutex<()>,
    /// How long the legacy route waits for the human (the confirmation TTL).
    prompt_ttl: Duration,
    /// The approval page's base URL (`[approvals] listen`), for the URL route.
    page: Option<String>,
    /// The response governor (byte cap, paging, resources/read): `govern/`.
    gov: Governor,
    /// The governor's events for the daemon's log, once there was one (`gov_event`).
    events: OnceLock<mpsc::UnboundedSender<Box<GovEvent>>>,
    /// Orders changes around state-dependent judgments (`barrier.rs`).
    barrier: Arc<Barrier>,
    /// See [`Options::remote_downstream`].
    remote_downstream: bool,
}

/// An id in the shim's own namespace (its requests downstream, its prompts upstream).
fn reserved_id(id: &Value) -> bool {
    id.as_str().is_some_and(|s| s.starts_with(OWN_ID_PREFIX))
}

/// The answer to a request (from either side) that uses a reserved id.
fn reserved_id_error(id: &Value) -> Value {
    jsonrpc::error(
        id,
        jsonrpc::INVALID_REQUEST,
        format!("request ids starting with {OWN_ID_PREFIX} are reserved by tc-shim"),
    )
}

/// How requests are matched to answers: by JSON value (`ids.rs`).
fn key(id: &Value) -> IdKey {
    IdKey::of(id)
}

impl Shim {
    /// The engine's state, taken back even if a holder panicked.
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a message the shim built for the client.
    fn send_client(&self, v: &Value) {
        self.to_client.send(v.to_string().into_bytes(), None);
    }

    /// Queues a line for the downstream; false when its writer is gone.
    fn send_child(&self, line: Vec<u8>, ack: Option<oneshot::Sender<()>>) -> bool {
        self.to_child.send(line, ack)
    }
}

/// What a front-end gives the engine for one conversation: one stdio client, one legacy
/// HTTP session or one stateless HTTP caller.
pub struct Options {
    pub policy: Arc<Policy>,
    pub daemon: Arc<Daemon>,
    /// Who makes the calls: `stdio`, `http-local` or a token's `sub`. Every
    /// binding (tokens, states, cursors, approvals) carries it.
    pub caller: String,
    /// How long the legacy route waits for the human (the confirmation TTL).
    pub prompt_ttl: Duration,
    /// The approval page's base URL (`[approvals] listen`), for the URL routes: the
    /// 2026-07-28 one (a link inside `input_required`) on every front, the legacy one (an
    /// `elicitation/create` of the shim's own) only where `server_requests`.
    pub page: Option<String>,
    pub gov: Governor,
    /// The front can carry the shim's own requests to the client (`elicitation/create`):
    /// stdio can; Streamable HTTP never does (legacy HTTP sessions get the
    /// CLI/approve route).
    pub server_requests: bool,
    /// The downstream is a Streamable HTTP server, to which tc is the client that mirrors
    /// `x-mcp-header` arguments into `Mcp-Param-*` headers: a tool whose declarations are
    /// invalid is dropped from the listings passed on, as a conforming client drops it.
    pub remote_downstream: bool,
}

/// The queues a front-end and a downstream adapter drain: lines for the downstream and
/// lines for the client.
pub struct Queues {
    pub to_child: crate::wire::outbox::Receiver,
    pub to_client: crate::wire::outbox::Receiver,
}

impl Shim {
    /// The engine for one conversation, and the queues its adapters drain.
    pub fn start(o: Options) -> (Arc<Shim>, Queues) {
        let (child_box, to_child) = Outbox::new();
        let (client_box, to_client) = Outbox::new();
        let shim = Arc::new(Shim {
            calls: Arc::new(Semaphore::new(CALL_PERMITS as usize)),
            policy: o.policy,
            daemon: o.daemon,
            caller: o.caller,
            server_requests: o.server_requests,
            to_child: child_box,
            to_client: client_box,
            state: Mutex::new(State::default()),
            next_id: AtomicU64::new(1),
            probe: tokio::sync::Mutex::new(()),
            prompt_ttl: o.prompt_ttl,
            page: o.page,
            gov: o.gov,
            events: OnceLock::new(),
            barrier: Arc::new(Barrier::default()),
            remote_downstream: o.remote_downstream,
        });
        (
            shim,
            Queues {
                to_child,
                to_client,
            },
        )
    }

    /// The engine's side of the client queue (its writer reports progress here).
    pub fn client_box(&self) -> &Outbox {
        &self.to_client
    }

    /// The engine's side of the downstream queue.
    pub fn child_box(&self) -> &Outbox {
        &self.to_child
    }

    /// One frame from the client.
    pub fn client_frame(self: &Arc<Self>, f: Frame) {
        match f {
            Frame::Line(l) => self.on_client_line(l),
            Frame::InnerCr(l) => self.on_client_inner_cr(&l),
            Frame::TooLong(n) => {
                let e = Rejected::TooLong(n);
                tracing::warn!("client sent a line that is not a JSON-RPC message: {e}");
                self.send_client(&jsonrpc::error(&Value::Null, e.code(), e.to_string()));
            }
            Frame::Eof => {}
        }
    }

    /// One unit from the downstream; the id it answers, when it is a response (an HTTP
    /// answer's reader stops at its request's own, without reading the line again).
    pub fn child_frame(self: &Arc<Self>, d: Down) -> Option<Value> {
        match d {
            Down::Line(l) => self.on_child_line(l),
            Down::InnerCr(l) => {
                self.on_child_inner_cr(&l);
                None
            }
            Down::Oversize { bytes, top } => {
                let id = top.id.clone().filter(|_| top.is_response());
                self.on_child_oversize(bytes, top);
                id
            }
            Down::Eof => None,
        }
    }

    /// How long a downstream line may be buffered whole (the governor's view of who waits).
    pub fn down_line_limit(&self) -> usize {
        self.line_limit()
    }

    /// The downstream is gone and the client is done: waits (bounded) for the audit
    /// records of calls already forwarded, fails what is still pending, flushes events.
    pub async fn finish(&self) {
        // Bounded, since a daemon that is down makes each of them give up on its own.
        let _ = tokio::time::timeout(
            Duration::from_secs(3),
            self.calls.acquire_many(CALL_PERMITS),
        )
        .await;
        self.fail_pending();
        self.flush_events().await;
    }
}

/// More `tools/call` tasks than can ever run at once (each holds one permit).
const CALL_PERMITS: u32 = 1 << 20;
