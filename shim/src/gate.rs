//! The stdio proxy: spawns the downstream, pumps newline-delimited JSON-RPC both ways
//! (original bytes when unmodified), intercepts `tools/list` and gates `tools/call`.

mod admit;
mod approved;
mod continued;
mod governed;
mod url_mode;
pub use url_mode::page_base;

use crate::value::at;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize as _;
use serde_json::{json, Value};
use tc_core::ErrorCode;
use tc_proto::v1::Binding;
use tokio::sync::{oneshot, Semaphore};

use crate::barrier::{Barrier, Kind, Place};
use crate::confirm::{self, Answer, Route};
use crate::daemon_client::{Daemon, DaemonError};
use crate::era::{self, Era};
use crate::framing::{parse_message, Down, Frame, Rejected};
use crate::governor::Governor;
use crate::ids::{IdKey, IdTable};
use crate::lean;
use crate::outbox::Outbox;
use crate::policy::{self, Policy, PolicyError};
use crate::results::{self, Shown};
use crate::roots;
use crate::summary::summarize;
use crate::targets;
use continued::{Resumed, Wrap};

/// Ids of the shim's own requests (to either side) start with this.
const OWN_ID_PREFIX: &str = "tc-shim-";

/// How long a forwarded call the client cancelled keeps its place in the barrier when the
/// server does not answer it.
const CANCEL_GRACE: Duration = Duration::from_secs(10);

/// At most this many downstream requests wait for the client's answer at once.
const MAX_DOWN_REQUESTS: usize = 4096;

/// How long an internal request (tools/list, probe) may take.
const INTERNAL_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Pending {
    Plain,
    ToolsList,
    /// The client's own `initialize`: its answer fixes the downstream era as legacy.
    Initialize,
}

/// A client request forwarded downstream and not yet answered.
struct Forwarded {
    id: Value,
    kind: Pending,
    /// The method, when the request carried the modern envelope (its result must then
    /// be completed if the downstream is legacy).
    modern: Option<String>,
    /// A call of a tool with a gate entry: a round the downstream answers with is
    /// wrapped in our state (`continued.rs`).
    wrap: Option<Wrap>,
    /// A `tools/call`'s place in the barrier, released when this entry goes away.
    place: Option<Place>,
    /// The client cancelled it and the grace timer runs (one timer per call, however many
    /// cancellations come).
    grace: bool,
}

/// A `tools/call` the shim holds before forwarding.
#[derive(Debug)]
struct Held {
    cancelled: bool,
    modern: bool,
    /// The tool declares an `outputSchema`: refusals go in `_meta`, not `structuredContent`.
    schema: bool,
    /// Sent as the lean facade's `call_capability`.
    lean: bool,
    /// Its place in the barrier (none for a read-only call), taken on arrival.
    place: Option<Place>,
}

/// A gated call being confirmed: what every route needs to know about it.
struct Call<'a> {
    id: &'a Value,
    binding: &'a Binding,
    shown: &'a Shown<'a>,
    gate: &'a tc_core::config::Gate,
    args: &'a Value,
}

/// How a gated call was approved, for the audit log and the release rules.
struct Approval {
    /// `cli_token`, `legacy_elicitation` or `request_state` (RecordConsumed's route).
    route: &'static str,
    /// The token's redemption (CLI route): released if nothing ran, else made final.
    redemption: Option<String>,
}

#[derive(Default)]
struct State {
    /// Client requests forwarded downstream and not yet answered, by canonical id.
    pending: IdTable<Forwarded>,
    /// The shim's own requests to the downstream.
    internal: HashMap<String, oneshot::Sender<Value>>,
    /// Tool definitions learned from `tools/list` (None until the first one).
    /// Shared, so looking a definition up per call does not copy its schema.
    tools: Option<HashMap<String, Arc<Value>>>,
    /// `tools/call`s the shim holds (not yet forwarded): id → cancelled.
    held: HashMap<IdKey, Held>,
    /// Wakes a held call that waits on the human when the client cancels it.
    wakers: HashMap<IdKey, oneshot::Sender<()>>,
    /// The shim's own requests to the client (`elicitation/create`), by our id.
    client_requests: HashMap<String, oneshot::Sender<Value>>,
    /// The client's capabilities from its `initialize` (legacy era).
    client_caps: Option<Value>,
    /// The downstream's stdout closed.
    child_gone: bool,
    /// The client's era and protocol version, once known (`initialize` makes it legacy).
    client_era: Option<(Era, String)>,
    /// The downstream's era and protocol version, once known.
    down_era: Option<(Era, String)>,
    /// The downstream's `initialize` result when the shim did the handshake itself.
    down_init: Option<Value>,
    /// The protocol envelope of the latest modern client request.
    envelope: Option<Value>,
    /// The eras were logged.
    eras_logged: bool,
    /// Ids of the downstream's requests shown to the client and not yet answered: the only
    /// answers the client may send downstream.
    down_requests: std::collections::HashSet<IdKey>,
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
    state: Mutex<State>,
    next_id: AtomicU64,
    /// Serializes finding out the downstream's era.
    probe: tokio::sync::Mutex<()>,
    /// How long the legacy route waits for the human (the confirmation TTL).
    prompt_ttl: Duration,
    /// The approval page's base URL (`[approvals] listen`), for the URL route.
    page: Option<String>,
    /// The response governor (byte cap, paging, resources/read): `proxy/governed.rs`.
    gov: Governor,
    /// Orders changes around state-dependent judgments (`barrier.rs`).
    barrier: Arc<Barrier>,
}

/// The members of a downstream line the proxy routes by (see `pass_through`).
#[derive(serde::Deserialize)]
struct Envelope {
    #[serde(default)]
    id: Option<Value>,
    /// Whatever its value (`null` included): only `tools/list_changed` is looked at.
    #[serde(default, deserialize_with = "present_value")]
    method: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    result: bool,
    #[serde(default, deserialize_with = "present")]
    error: bool,
}

/// True for a member that is there, whatever its value (`null` included), skipped unbuilt.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(d).map(|_| true)
}

fn present_value<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// An id in the shim's own namespace (its requests downstream, its prompts upstream).
fn reserved_id(id: &Value) -> bool {
    id.as_str().is_some_and(|s| s.starts_with(OWN_ID_PREFIX))
}

/// The answer to a request (from either side) that uses a reserved id.
fn reserved_id_error(id: &Value) -> Value {
    results::error(
        id,
        results::INVALID_REQUEST,
        format!("request ids starting with {OWN_ID_PREFIX} are reserved by tc-shim"),
    )
}

/// How requests are matched to answers: by JSON value (`ids.rs`).
fn key(id: &Value) -> IdKey {
    IdKey::of(id)
}

impl Shim {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn send_client(&self, v: &Value) {
        self.to_client.send(v.to_string().into_bytes(), None);
    }

    fn send_child(&self, line: Vec<u8>, ack: Option<oneshot::Sender<()>>) -> bool {
        self.to_child.send(line, ack)
    }

    /// Forwards a client request downstream, remembering it so its response can be matched.
    fn forward_request(&self, id: &Value, kind: Pending, modern: Option<String>, line: Vec<u8>) {
        self.lock().pending.insert(
            key(id),
            Forwarded {
                id: id.clone(),
                kind,
                modern,
                wrap: None,
                place: None,
                grace: false,
            },
        );
        if !self.send_child(line, None) {
            self.lock().pending.remove(&key(id));
            self.send_client(&results::error(
                id,
                results::INTERNAL_ERROR,
                "the downstream MCP server is not running",
            ));
        }
    }

    /// Sends the shim's own request downstream and waits for its result.
    async fn internal(&self, method: &str, params: Value) -> Result<Value, String> {
        let resp = self.internal_raw(method, params).await?;
        if let Some(e) = resp.get("error") {
            return Err(format!("downstream {method} failed: {e}"));
        }
        Ok(resp.get("result").cloned().unwrap_or(Value::Null))
    }

    /// Sends the shim's own request downstream (in its own id space, with the modern
    /// envelope when the downstream is modern) and waits for the whole response.
    async fn internal_raw(&self, method: &str, mut params: Value) -> Result<Value, String> {
        let id = format!(
            "{OWN_ID_PREFIX}{}",
            self.next_id.fetch_add(1, Ordering::Relaxed)
        );
        let (tx, rx) = oneshot::channel();
        {
            let mut st = self.lock();
            if st.child_gone {
                return Err("the downstream MCP server exited".into());
            }
            if matches!(st.down_era, Some((Era::Modern, _))) {
                if let Some(p) = params.as_object_mut() {
                    if !p.contains_key("_meta") {
                        let env = st.envelope.clone().unwrap_or_else(era::default_envelope);
                        p.insert("_meta".into(), env);
                    }
                }
            }
            st.internal.insert(id.clone(), tx);
        }
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if !self.send_child(msg.to_string().into_bytes(), None) {
            self.lock().internal.remove(&id);
            return Err("the downstream MCP server is not running".into());
        }
        match tokio::time::timeout(INTERNAL_TIMEOUT, rx).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(_)) => Err("the downstream MCP server exited".into()),
            Err(_) => {
                self.lock().internal.remove(&id);
                Err(format!(
                    "the downstream did not answer {method} within {INTERNAL_TIMEOUT:?}"
                ))
            }
        }
    }

    /// Records the client's era (an `initialize` selects legacy for the whole process).
    fn set_client_era(&self, e: Era, version: String) {
        {
            let mut st = self.lock();
            match (&st.client_era, e) {
                (None, _) | (Some((Era::Modern, _)), Era::Legacy) => {
                    st.client_era = Some((e, version))
                }
                _ => {}
            }
        }
        self.note_eras();
    }

    /// Logs the negotiated eras once both are known.
    fn note_eras(&self) {
        let line = {
            let mut st = self.lock();
            match (&st.client_era, &st.down_era, st.eras_logged) {
                (Some((c, cv)), Some((d, dv)), false) => {
                    let how = if st.down_init.is_some() {
                        ", handshake by tc-shim"
                    } else {
                        ""
                    };
                    let l = format!("client era: {c} ({cv}), downstream era: {d} ({dv}{how})");
                    st.eras_logged = true;
                    Some(l)
                }
                _ => None,
            }
        };
        if let Some(l) = line {
            tracing::info!("{l}");
        }
    }

    /// Finds out (once) which era the downstream speaks, on behalf of a modern client
    /// request with envelope `meta`: probes `server/discover`; on an error answer it does
    /// the legacy `initialize` handshake itself, in its own id space.
    async fn ensure_down_era(&self, meta: &Value) -> Result<Era, String> {
        if let Some((e, _)) = &self.lock().down_era {
            return Ok(*e);
        }
        let _probe = self.probe.lock().await;
        if let Some((e, _)) = &self.lock().down_era {
            return Ok(*e);
        }
        let probe = self
            .internal_raw("server/discover", json!({"_meta": era::envelope(meta)}))
            .await?;
        if probe.get("result").is_some_and(Value::is_object) {
            self.lock().down_era = Some((Era::Modern, era::meta_version(meta)));
            self.note_eras();
            return Ok(Era::Modern);
        }
        let refusal = probe.get("error").cloned().unwrap_or_default();
        tracing::debug!(
            "downstream refused server/discover ({refusal}); doing the legacy handshake"
        );
        let init = self
            .internal("initialize", era::initialize_params())
            .await?;
        let version = init
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or(era::LEGACY_VERSION)
            .to_string();
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        self.send_child(note.to_string().into_bytes(), None);
        {
            let mut st = self.lock();
            st.down_era = Some((Era::Legacy, version));
            st.down_init = Some(init);
        }
        self.note_eras();
        Ok(Era::Legacy)
    }

    /// Handles a client's `server/discover`: forwarded to a modern downstream, answered by
    /// the shim for a legacy one.
    async fn handle_discover(self: Arc<Self>, id: Value, meta: Value, line: Vec<u8>) {
        match self.ensure_down_era(&meta).await {
            Ok(Era::Modern) => self.forward_request(&id, Pending::Plain, None, line),
            Ok(Era::Legacy) => {
                let init = self.lock().down_init.clone();
                match init {
                    Some(init) => {
                        self.send_client(&results::response(&id, era::discover_result(&init)))
                    }
                    // The client did the handshake itself: let the downstream answer.
                    None => self.forward_request(
                        &id,
                        Pending::Plain,
                        Some("server/discover".into()),
                        line,
                    ),
                }
            }
            Err(e) => self.send_client(&results::error(
                &id,
                results::INTERNAL_ERROR,
                format!("cannot reach the downstream MCP server: {e}"),
            )),
        }
    }

    /// Forwards a modern client request once the downstream's era is known.
    async fn forward_modern(
        self: Arc<Self>,
        id: Value,
        kind: Pending,
        meta: Value,
        method: String,
        line: Vec<u8>,
    ) {
        if let Err(e) = self.ensure_down_era(&meta).await {
            tracing::warn!("could not find out the downstream's era: {e}");
        }
        self.forward_request(&id, kind, Some(method), line);
    }

    /// Learns tool definitions from a `tools/list` result and rewrites it for the client.
    fn rewrite_tools_list(&self, result: &mut Value) {
        let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) else {
            return;
        };
        let mut learned = Vec::new();
        tools.retain_mut(|t| {
            let Some(name) = t.get("name").and_then(Value::as_str).map(String::from) else { return true };
            learned.push((name.clone(), t.clone()));
            let gated = self.policy.gate_entry(&name).is_some();
            if policy::is_floor(Some(t)) && !gated {
                tracing::warn!(tool = %name, "hiding destructive tool with no gate entry; add: {}", policy::missing_gate_hint(&name, Some(t)));
                return false;
            }
            if gated {
                add_elicit_token(t);
            }
            self.gov.advertise_cursor(&name, t);
            true
        });
        let mut st = self.lock();
        let map = st.tools.get_or_insert_with(HashMap::new);
        for (k, v) in learned {
            learn_tool(map, k, Arc::new(v));
        }
    }

    /// Makes sure tool annotations are known, listing the downstream's tools ourselves if needed.
    /// Knowing every tool matters for the floor: a tool missing from the cache (on a
    /// page the client never fetched, or added after `list_changed`) triggers a full
    /// re-list rather than being forwarded as if it were not destructive.
    async fn ensure_tools(&self, name: &str) -> Result<(), String> {
        if self
            .lock()
            .tools
            .as_ref()
            .is_some_and(|t| t.contains_key(name))
        {
            return Ok(());
        }
        self.list_all_tools().await.map(|_| ())
    }

    /// Lists every downstream tool (all pages), caching the definitions.
    async fn list_all_tools(&self) -> Result<Vec<Value>, String> {
        let mut cursor: Option<Value> = None;
        let mut all: HashMap<String, Arc<Value>> = HashMap::new();
        for _ in 0..100 {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let r = self.internal("tools/list", params).await?;
            for t in r
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(n) = t.get("name").and_then(Value::as_str) {
                    learn_tool(&mut all, n.to_string(), Arc::new(t.clone()));
                }
            }
            match r.get("nextCursor") {
                Some(c) if !c.is_null() => cursor = Some(c.clone()),
                _ => break,
            }
        }
        let mut list: Vec<Value> = all.values().map(|v| (**v).clone()).collect();
        list.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        let mut st = self.lock();
        let map = st.tools.get_or_insert_with(HashMap::new);
        for (k, v) in all {
            learn_tool(map, k, v);
        }
        Ok(list)
    }

    /// The lean facade's `tools/list`: its two tools, answered by the shim.
    async fn lean_tools_list(self: Arc<Self>, id: Value, modern: bool) {
        let mut result = json!({ "tools": lean::tools() });
        if modern {
            era::mark_complete(&mut result, "tools/list");
        }
        self.send_client(&results::response(&id, result));
    }

    /// The lean facade's `list_capabilities`: the downstream's tools as the client
    /// would see them in `tools/list` (floors without a gate hidden, `elicit_token` added).
    async fn list_capabilities(self: Arc<Self>, id: Value) {
        match self.list_all_tools().await {
            Ok(tools) => {
                let visible = tools
                    .into_iter()
                    .filter_map(|mut t| {
                        let name = t.get("name").and_then(Value::as_str)?.to_string();
                        let gated = self.policy.gate_entry(&name).is_some();
                        if policy::is_floor(Some(&t)) && !gated {
                            return None;
                        }
                        if gated {
                            add_elicit_token(&mut t);
                        }
                        Some(t)
                    })
                    .collect();
                self.answer(&id, lean::catalogue(visible));
            }
            Err(e) => self.answer(
                &id,
                results::tool_error(
                    ErrorCode::InvalidInput,
                    format!("tc-shim could not read the server's tool list: {e}"),
                    json!({}),
                    None,
                ),
            ),
        }
    }

    fn tool_def(&self, name: &str) -> Option<Arc<Value>> {
        self.lock()
            .tools
            .as_ref()
            .and_then(|m| m.get(name).cloned())
    }

    /// The barrier place a `tools/call` takes on arrival: exclusive for a tool with a gate
    /// entry (judged against the vault's state, `when` included), none for a tool the
    /// server declares read-only, shared for any other, which may change what a judged
    /// call looked at. A tool not known yet counts as one that may change the vault.
    fn place_for(&self, msg: &Value, facade: Option<&lean::FacadeCall>) -> Option<Place> {
        let call = match facade {
            None => msg,
            Some(lean::FacadeCall::Call(inner)) => inner,
            Some(_) => return None,
        };
        let name = at(call, &["params", "name"]).and_then(Value::as_str)?;
        let kind = if self.policy.gate_entry(name).is_some() {
            Kind::Exclusive
        } else if policy::is_read_only(self.tool_def(name).as_deref()) {
            return None;
        } else {
            Kind::Shared
        };
        Some(self.barrier.place(kind))
    }

    /// Waits for the held call's turn in the barrier (see `barrier.rs`).
    async fn wait_turn(&self, id: &Value) {
        let ticket = self
            .lock()
            .held
            .get(&key(id))
            .and_then(|h| h.place.as_ref().map(Place::ticket));
        if let Some(t) = ticket {
            self.barrier.enter(t).await;
        }
    }

    /// Gives the held call's place up while it waits on a human, so other changes are not
    /// held for minutes, and takes a new one at the back of the queue for the judgment
    /// that follows the answer (which therefore sees every change made meanwhile).
    fn step_aside(&self, id: &Value) {
        let mut st = self.lock();
        if let Some(h) = st.held.get_mut(&key(id)) {
            h.place = None;
        }
    }

    /// Rejoins the barrier after [`Shim::step_aside`] and waits for the call's turn.
    async fn rejoin(&self, id: &Value) {
        let place = self.barrier.place(Kind::Exclusive);
        if let Some(h) = self.lock().held.get_mut(&key(id)) {
            h.place = Some(place);
        }
        self.wait_turn(id).await;
    }

    /// Notes a downstream request about to be shown to the client, so its answer may go
    /// back. A table full of unanswered questions refuses the newcomer (answered here with
    /// an error) rather than growing without bound.
    fn note_down_request(&self, id: &Value) -> bool {
        if self.try_note_down_request(id) {
            return true;
        }
        tracing::warn!(
            "refusing a downstream request: {MAX_DOWN_REQUESTS} already wait on the client"
        );
        let e = results::error(
            id,
            results::INTERNAL_ERROR,
            format!("tc-shim: {MAX_DOWN_REQUESTS} requests already wait for the client's answer"),
        );
        self.send_child(e.to_string().into_bytes(), None);
        false
    }

    /// A forwarded call the client cancelled keeps its place until it is answered, or for
    /// [`CANCEL_GRACE`]: a server need not answer a cancelled call, and the calls behind it
    /// must not wait forever (THREAT-MODEL: a server that goes on running a cancelled call).
    fn release_after_grace(self: &Arc<Self>, k: IdKey, t: crate::barrier::Ticket) {
        let shim = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(CANCEL_GRACE).await;
            let mut st = shim.lock();
            if let Some(p) = st.pending.get_mut(&k) {
                // The same call: its id may have been answered and reused meanwhile.
                if p.place.as_ref().is_some_and(|p| p.ticket() == t) {
                    p.place = None;
                }
            }
        });
    }

    /// [`Shim::note_down_request`] without the refusal: false when the table is full.
    fn try_note_down_request(&self, id: &Value) -> bool {
        let mut st = self.lock();
        if st.down_requests.len() < MAX_DOWN_REQUESTS {
            st.down_requests.insert(key(id));
            return true;
        }
        false
    }

    fn unhold(&self, id: &Value) -> Option<Held> {
        self.lock().held.remove(&key(id))
    }

    /// Answers a held call with a tool result.
    fn answer(&self, id: &Value, mut result: Value) {
        // Answered here: no downstream answer will come to cap.
        self.gov.untrack(&key(id));
        match self.unhold(id) {
            Some(Held {
                cancelled: true, ..
            }) => {}
            h => {
                if h.as_ref().is_some_and(|h| h.modern) {
                    era::mark_complete(&mut result, "tools/call");
                }
                if h.as_ref().is_some_and(|h| h.schema) {
                    results::refusal_to_meta(&mut result);
                }
                self.send_client(&results::response(id, result));
            }
        }
    }

    /// Handles one `tools/call` from the client.
    /// Runs `handle_call` on its own task, holding one of `calls`' permits until it ends.
    fn spawn_call(self: &Arc<Self>, id: Value, msg: Value, line: Vec<u8>) {
        let permit = Arc::clone(&self.calls).try_acquire_owned().ok();
        let shim = Arc::clone(self);
        tokio::spawn(async move {
            let _running = permit;
            shim.handle_call(id, msg, line).await
        });
    }

    async fn handle_call(self: Arc<Self>, id: Value, msg: Value, line: Vec<u8>) {
        // Everything below judges the call against the vault as it is now: no change made
        // through this shim may land between that and the downstream running it.
        self.wait_turn(&id).await;
        if self.lock().held.get(&key(&id)).is_some_and(|h| h.cancelled) {
            // Cancelled while it waited: judging it would only raise a request nobody gets.
            self.unhold(&id);
            return;
        }
        let Some(name) = at(&msg, &["params", "name"])
            .and_then(Value::as_str)
            .map(String::from)
        else {
            self.forward_held(&id, line, None, None);
            return;
        };
        if let Some(meta) = era::request_meta(&msg) {
            if let Err(e) = self.ensure_down_era(meta).await {
                tracing::warn!("could not find out the downstream's era: {e}");
            }
        }
        let args = at(&msg, &["params", "arguments"])
            .cloned()
            .unwrap_or_else(|| json!({}));
        let gate = self.policy.gate_entry(&name).cloned();
        if let Err(e) = self.ensure_tools(&name).await {
            tracing::warn!("could not list downstream tools before {name}: {e}");
            // Without the tool list the floor (destructiveHint) cannot be seen: fail closed
            // for every tool the policy does not already gate.
            if gate.is_none() {
                let text = format!(
                    "tc-shim could not read the server's tool list ({e}), so it cannot tell whether \
                     `{name}` is destructive; the call was not run. Retry once the server answers tools/list."
                );
                return self.answer(
                    &id,
                    results::tool_error(ErrorCode::InvalidInput, text, json!({"tool": name}), None),
                );
            }
        }
        let def = self.tool_def(&name);
        let def = def.as_deref();
        if def
            .as_ref()
            .is_some_and(|d| d.get("outputSchema").is_some())
        {
            if let Some(h) = self.lock().held.get_mut(&key(&id)) {
                h.schema = true;
            }
        }
        if policy::is_floor(def) && gate.is_none() {
            let hint = policy::missing_gate_hint(&name, def);
            let text = format!(
                "Tool `{name}` is destructive (destructiveHint: true) and this vault has no gate entry for it, \
                 so it is disabled. Ask the operator to add to the tc config: {hint}"
            );
            self.answer(
                &id,
                results::tool_error(
                    ErrorCode::GateNotConfigured,
                    text,
                    json!({"tool": name, "add": hint}),
                    None,
                ),
            );
            return;
        }
        let paths = match self.policy.resolve_all(&name, def, &args, gate.as_ref()) {
            Ok(p) => p,
            Err(e) => return self.answer(&id, policy_result(&e)),
        };
        let applies = match &gate {
            Some(g) => match self.policy.applies(g, &args) {
                Ok(a) => a,
                Err(e) => return self.answer(&id, policy_result(&e)),
            },
            None => false,
        };
        let read_only = policy::is_read_only(def);
        let token = args
            .get("elicit_token")
            .and_then(Value::as_str)
            .map(String::from);
        let no_params = json!({});
        let params = msg.get("params").unwrap_or(&no_params);
        let meta = era::request_meta(&msg).cloned();
        // A call echoing a requestState is the second half of a confirmation that was
        // already offered: it is judged by its answer even if the gate's condition
        // stopped applying meanwhile (a decline must never turn into a plain forward).
        // Only the modern era defines requestState, but a re-send that lost its `_meta`
        // envelope is still that answer: the field alone decides.
        let resuming = confirm::request_state(params).is_some();
        let has_gate = gate.is_some();
        let Some(gate) = gate.filter(|_| applies || resuming) else {
            // Governor: a paged tool is served page by page (its items ACL-checked one by one).
            if self.page_call(&id, &msg, &name, &args, read_only).await {
                return;
            }
            if let Err(e) = self.policy.check_acl(&paths, read_only) {
                return self.answer(&id, policy_result(&e));
            }
            // A tool with a gate entry whose `when` did not hold goes out as the shim read
            // it (re-serialized: duplicate keys collapsed), so a server whose JSON parser
            // keeps another duplicate cannot act on a value the condition never judged.
            let line = if has_gate || args.get("elicit_token").is_some() {
                stripped(&msg)
            } else {
                line
            };
            // Its downstream may answer with a round of its own, which the re-sent call
            // must not present to the gate as an answer to our form. Only a modern call
            // can get one; the others keep the downstream answer's fast path.
            let wrap = (has_gate && meta.is_some()).then(|| {
                let binding = Binding {
                    vault: self.policy.vault.clone(),
                    tool: name.clone(),
                    caller: self.caller.clone(),
                    args_hash: tc_core::hash::args_hash(&name, &args),
                };
                let lean = self.lock().held.get(&key(&id)).is_some_and(|h| h.lean);
                Wrap::unconfirmed(binding, lean)
            });
            self.forward_held(&id, line, None, wrap);
            return;
        };
        // The args_hash leaves out tc's own fields, so a gated call must not carry them
        // to the downstream: approved arguments plus an unbound extra would run.
        if let Some(k) = reserved_argument(&args) {
            let text = format!(
                "`{k}` is reserved by tc: it is not part of what a confirmation approves, so a gated \
                 call cannot pass it in `arguments`; the call was not run. Send it without `{k}`."
            );
            return self.answer(
                &id,
                results::tool_error(
                    ErrorCode::InvalidInput,
                    text,
                    json!({"tool": name, "argument": k}),
                    None,
                ),
            );
        }
        let args_hash = tc_core::hash::args_hash(&name, &args);
        let binding = Binding {
            vault: self.policy.vault.clone(),
            tool: name.clone(),
            caller: self.caller.clone(),
            args_hash: args_hash.clone(),
        };
        let state_fp = match self.state_fp(&gate, &args).await {
            Ok(fp) => fp,
            Err(e) => {
                let text = format!("Cannot compute the confirmation target of `{name}`: {e}");
                return self.answer(
                    &id,
                    results::tool_error(ErrorCode::InvalidInput, text, json!({"tool": name}), None),
                );
            }
        };
        let lean = self.lock().held.get(&key(&id)).is_some_and(|h| h.lean);
        let shown = Shown {
            vault: &self.policy.vault,
            tool: &name,
            caller: &self.caller,
            args_hash: &args_hash,
            state_fp: &state_fp,
            lean,
        };
        let call = Call {
            id: &id,
            binding: &binding,
            shown: &shown,
            gate: &gate,
            args: &args,
        };
        // A re-sent call carrying a requestState is judged by that state first (ours, or a
        // downstream's round sealed inside ours); a token it still carries is redeemed
        // only if the state sends the call back to be judged afresh.
        let resumed = if resuming {
            match self.resume_modern(&call, params, applies).await {
                Resumed::Approved(a) => Some(a),
                Resumed::Continue(round) => {
                    return self
                        .forward_continued(&call, &msg, round, &paths, read_only)
                        .await;
                }
                Resumed::Fresh => {
                    // Judged as if it had come without them: gated or not, token or not.
                    let m = strip(&msg);
                    let line = m.to_string().into_bytes();
                    return Box::pin(Arc::clone(&self).handle_call(id.clone(), m, line)).await;
                }
                Resumed::Answered => return,
            }
        } else {
            None
        };
        let approval = if let Some(a) = resumed {
            a
        } else if let Some(token) = token {
            match self.daemon.redeem(&token, binding.clone(), &state_fp).await {
                Ok(r) => Approval {
                    route: "cli_token",
                    redemption: Some(r),
                },
                Err(e) => return self.answer(&id, self.daemon_result(&e, &shown)),
            }
        } else {
            let (era, caps) = match &meta {
                Some(m) => (Era::Modern, m.get(era::META_CAPS).cloned()),
                None => (Era::Legacy, self.lock().client_caps.clone()),
            };
            let route = confirm::route(
                era,
                caps.as_ref(),
                self.policy.legacy_elicitation && self.server_requests,
                self.page.is_some(),
            );
            // What a human decided about this exact call by its request id (`approved.rs`).
            match self.held_approval(&call, route).await {
                approved::Held::Approved(a) => a,
                approved::Held::Answered => return,
                approved::Held::Nothing => match route {
                    Route::Cli => return self.ask_by_request(&call).await,
                    Route::Modern => return self.offer_modern(&call).await,
                    Route::Legacy => match self.legacy_round_trip(&call).await {
                        Some(a) => a,
                        None => return,
                    },
                    Route::Url => {
                        let base = self.page.clone().unwrap_or_default();
                        match self.url_round_trip(&call, &base).await {
                            Some(a) => a,
                            None => return,
                        }
                    }
                },
            }
        };
        if let Err(e) = self.policy.check_acl(&paths, read_only) {
            if let Some(r) = &approval.redemption {
                if let Err(re) = self.daemon.release(r, "acl").await {
                    tracing::warn!("release after ACL refusal failed: {re}");
                }
            }
            return self.answer(&id, policy_result(&e));
        }
        let (ack_tx, ack_rx) = oneshot::channel();
        let wrap = (meta.is_some() || resuming).then(|| Wrap::approved(&call));
        if !self.forward_held(&id, stripped(&msg), Some(ack_tx), wrap) {
            if let Some(r) = &approval.redemption {
                if let Err(re) = self.daemon.release(r, "cancelled").await {
                    tracing::warn!("release after cancellation failed: {re}");
                }
            }
            return;
        }
        if ack_rx.await.is_ok() {
            let redemption = approval.redemption.as_deref().unwrap_or("");
            if let Err(e) = self
                .daemon
                .consumed(binding, &state_fp, approval.route, redemption)
                .await
            {
                tracing::warn!("recording the consumed confirmation failed: {e}");
            }
        }
    }

    /// Route 3, round 1: raises the request, seals a state and answers `input_required`
    /// with our form; the client re-sends the call with the state and the answer.
    async fn offer_modern(&self, c: &Call<'_>) {
        let s = c.shown;
        let summary = summarize(s.tool, c.args);
        let Some(request_id) = self.raise_call(c, &summary).await else {
            return;
        };
        match self
            .daemon
            .seal_state(c.binding.clone(), s.state_fp, Vec::new())
            .await
        {
            Ok(state) => {
                let msg = self.prompt(c, &summary, &request_id);
                self.answer(c.id, confirm::input_required(&state, &msg));
            }
            Err(e) => self.answer(c.id, self.daemon_result(&e, s)),
        }
    }

    /// Route 3, round 2: the daemon verifies the echoed state (authentic, unexpired, this
    /// call) and consumes it whatever the answer, so it can never authorize twice; only
    /// accept + approve, against an unchanged target, approves. A state that carries a
    /// downstream's own round (see `continued.rs`) is no answer to our form: it goes
    /// back to the downstream instead.
    async fn resume_modern(&self, c: &Call<'_>, params: &Value, applies: bool) -> Resumed {
        let s = c.shown;
        let state = confirm::request_state(params).unwrap_or_default();
        let answer = confirm::modern_answer(params);
        // Looked at without spending it: what it carries decides how it is spent.
        let opened = self
            .daemon
            .open_state(state, c.binding.clone(), false, "")
            .await;
        let answer = match (&opened, answer) {
            (Ok(o), _) if !o.inner.is_empty() => {
                return self
                    .continue_round(c, state, &o.inner, &o.state_fp, applies)
                    .await;
            }
            (Ok(_), Some(a)) => a,
            // The state came back without our answer: offer the same form again.
            (Ok(_), None) => {
                let summary = summarize(s.tool, c.args);
                let msg = if self.daemon.guarded() {
                    // The prompt names the request id (kept while the request waits).
                    let Some(id) = self.raise_call(c, &summary).await else {
                        return Resumed::Answered;
                    };
                    self.prompt(c, &summary, &id)
                } else {
                    confirm::message(s.tool, s.vault, &summary, c.gate.targets.as_ref())
                };
                self.answer(c.id, confirm::input_required(state, &msg));
                return Resumed::Answered;
            }
            (Err(e), answer) => return self.unopened(c, e, answer).await,
        };
        let current = if answer == Answer::Approved {
            s.state_fp
        } else {
            ""
        };
        match self
            .daemon
            .open_state(state, c.binding.clone(), true, current)
            .await
        {
            Ok(_) => match answer {
                // Guarded mode: the accept only cues the redemption of a human's approval.
                Answer::Approved if self.daemon.guarded() => {
                    match self.accepted_guarded(c, None).await {
                        Some(a) => Resumed::Approved(a),
                        None => Resumed::Answered,
                    }
                }
                Answer::Approved => Resumed::Approved(Approval {
                    route: "request_state",
                    redemption: None,
                }),
                Answer::Declined => {
                    self.declined(c).await;
                    Resumed::Answered
                }
                Answer::Cancelled => {
                    self.not_obtained(c, "the human dismissed the confirmation prompt")
                        .await;
                    Resumed::Answered
                }
            },
            Err(e) => self.unopened(c, &e, Some(answer)).await,
        }
    }

    /// A state that would not open, with the answer that came with it. A no is a no even
    /// when the state no longer verifies (never re-prompted for); a spent one is refused;
    /// otherwise see [`Shim::state_refused`].
    async fn unopened(&self, c: &Call<'_>, e: &DaemonError, answer: Option<Answer>) -> Resumed {
        let spent = e.reason() == Some(tc_core::Reason::Spent);
        match answer {
            Some(Answer::Declined) if !spent => self.declined(c).await,
            Some(Answer::Cancelled) if !spent => {
                self.not_obtained(c, "the human dismissed the confirmation prompt")
                    .await
            }
            _ => return self.state_refused(c, e).await,
        }
        Resumed::Answered
    }

    /// A state the daemon would not open: replayed or drifted ones are refused; one that
    /// cannot be verified (rotated or deleted secret, another daemon, expired, garbage,
    /// another call's) sends the call back to be judged as if it came without it (a fresh
    /// confirmation offer, rather than a dead end, when its gate applies).
    async fn state_refused(&self, c: &Call<'_>, e: &DaemonError) -> Resumed {
        use tc_core::Reason;
        match e.reason() {
            Some(Reason::Spent) => {
                let text = format!(
                    "This confirmation of `{}` was already used (a requestState authorizes one call, once). \
                     Nothing was run. Send the call again without requestState to ask the human again.",
                    c.shown.tool
                );
                let mut d = c.shown.details();
                d["reason"] = json!("spent");
                self.answer(
                    c.id,
                    results::tool_error(ErrorCode::InvalidInput, text, d, None),
                );
            }
            Some(
                Reason::Invalid
                | Reason::Expired
                | Reason::Foreign
                | Reason::RequestMismatch
                | Reason::Unknown,
            ) => {
                tracing::info!(
                    tool = %c.shown.tool,
                    "requestState not verifiable ({}); judging the call afresh",
                    e
                );
                return Resumed::Fresh;
            }
            _ => self.answer(c.id, self.daemon_result(e, c.shown)),
        }
        Resumed::Answered
    }

    /// Route 2: the shim asks a legacy client itself with `elicitation/create`, waits for
    /// the answer (or the call's cancellation, or the TTL), then re-checks the target.
    async fn legacy_round_trip(&self, c: &Call<'_>) -> Option<Approval> {
        let s = c.shown;
        let summary = summarize(s.tool, c.args);
        let request_id = self.raise_call(c, &summary).await?;
        // Sealed only so the daemon makes the same spend-once, drift-checked decision as
        // on the other routes; this state never leaves the shim.
        let state = match self
            .daemon
            .seal_state(c.binding.clone(), s.state_fp, Vec::new())
            .await
        {
            Ok(st) => st,
            Err(e) => {
                self.answer(c.id, self.daemon_result(&e, s));
                return None;
            }
        };
        let rid = format!(
            "{OWN_ID_PREFIX}elicit-{}",
            self.next_id.fetch_add(1, Ordering::Relaxed)
        );
        let (answer_tx, answer_rx) = oneshot::channel();
        let (wake_tx, wake_rx) = oneshot::channel();
        let version = {
            let mut st = self.lock();
            if st.held.get(&key(c.id)).is_none_or(|h| h.cancelled) {
                return None;
            }
            st.client_requests.insert(rid.clone(), answer_tx);
            st.wakers.insert(key(c.id), wake_tx);
            match &st.client_era {
                Some((Era::Legacy, v)) => v.clone(),
                _ => era::LEGACY_VERSION.to_string(),
            }
        };
        let message = self.prompt(c, &summary, &request_id);
        self.step_aside(c.id);
        self.send_client(&json!({
            "jsonrpc": "2.0", "id": rid, "method": "elicitation/create",
            "params": confirm::elicit_params(&message, &version),
        }));
        let outcome = tokio::select! {
            r = answer_rx => r.ok(),
            _ = wake_rx => None,
            _ = tokio::time::sleep(self.prompt_ttl) => None,
        };
        let cancelled = {
            let mut st = self.lock();
            st.client_requests.remove(&rid);
            st.wakers.remove(&key(c.id));
            st.held.get(&key(c.id)).is_none_or(|h| h.cancelled)
        };
        let Some(resp) = outcome else {
            // Withdraw our prompt: nobody is waiting for its answer any more.
            self.send_client(&json!({
                "jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": rid, "reason": if cancelled { "the tool call was cancelled" } else { "the confirmation timed out" }},
            }));
            let _ = self
                .daemon
                .open_state(&state, c.binding.clone(), true, "")
                .await;
            let why = if cancelled {
                "the client cancelled the call while the prompt was open"
            } else {
                "nobody answered the prompt before it expired"
            };
            self.not_obtained(c, why).await;
            return None;
        };
        let Some(result) = resp.get("result") else {
            let _ = self
                .daemon
                .open_state(&state, c.binding.clone(), true, "")
                .await;
            let why = format!(
                "the client could not show the prompt: {}",
                at(&resp, &["error", "message"])
                    .and_then(Value::as_str)
                    .unwrap_or("error")
            );
            self.not_obtained(c, &why).await;
            return None;
        };
        match confirm::read_answer(result) {
            Answer::Approved => {
                // The target may have changed while the human was reading the prompt: judged
                // again once every change that arrived meanwhile has been answered.
                self.rejoin(c.id).await;
                let now = match self.state_fp(c.gate, c.args).await {
                    Ok(fp) => fp,
                    Err(e) => {
                        let _ = self
                            .daemon
                            .open_state(&state, c.binding.clone(), true, "")
                            .await;
                        let text = format!(
                            "Cannot recompute the confirmation target of `{}` after approval: {e}. Nothing was run.",
                            s.tool
                        );
                        self.answer(
                            c.id,
                            results::tool_error(ErrorCode::InvalidInput, text, s.details(), None),
                        );
                        return None;
                    }
                };
                match self
                    .daemon
                    .open_state(&state, c.binding.clone(), true, &now)
                    .await
                {
                    // Guarded mode: the accept only cues the redemption of a human's approval.
                    Ok(_) if self.daemon.guarded() => {
                        let shown = Shown {
                            state_fp: &now,
                            ..s.clone()
                        };
                        let at_now = Call {
                            shown: &shown,
                            ..*c
                        };
                        self.accepted_guarded(&at_now, Some(&request_id)).await
                    }
                    Ok(_) => Some(Approval {
                        route: "legacy_elicitation",
                        redemption: None,
                    }),
                    Err(e) => {
                        self.answer(c.id, self.daemon_result(&e, s));
                        None
                    }
                }
            }
            Answer::Declined => {
                let _ = self
                    .daemon
                    .open_state(&state, c.binding.clone(), true, "")
                    .await;
                if self.daemon.guarded() {
                    self.decline_in_tcd(&request_id).await;
                }
                self.declined(c).await;
                None
            }
            Answer::Cancelled => {
                let _ = self
                    .daemon
                    .open_state(&state, c.binding.clone(), true, "")
                    .await;
                self.not_obtained(c, "the human dismissed the confirmation prompt")
                    .await;
                None
            }
        }
    }

    /// Answers `approval_declined` and logs `tc.elicit.declined`.
    async fn declined(&self, c: &Call<'_>) {
        let ev = tc_core::codes::events::DECLINED;
        if let Err(e) = self
            .daemon
            .append_event(ev, c.binding, c.shown.state_fp, json!({}))
            .await
        {
            tracing::warn!("recording the decline failed: {e}");
        }
        self.answer(c.id, results::approval_declined(c.shown));
    }

    /// Answers `approval_not_obtained` and logs `tc.elicit.not_obtained`.
    async fn not_obtained(&self, c: &Call<'_>, why: &str) {
        let ev = tc_core::codes::events::NOT_OBTAINED;
        if let Err(e) = self
            .daemon
            .append_event(ev, c.binding, c.shown.state_fp, json!({ "why": why }))
            .await
        {
            tracing::warn!("recording the unobtained approval failed: {e}");
        }
        self.answer(c.id, results::approval_not_obtained(c.shown, why));
    }

    /// Forwards a held call unless it was cancelled meanwhile (checked under the state lock).
    fn forward_held(
        &self,
        id: &Value,
        line: Vec<u8>,
        ack: Option<oneshot::Sender<()>>,
        wrap: Option<Wrap>,
    ) -> bool {
        {
            let mut st = self.lock();
            let held = st.held.remove(&key(id));
            if held.as_ref().is_some_and(|h| h.cancelled) {
                return false;
            }
            let modern = held.as_ref().is_some_and(|h| h.modern);
            st.pending.insert(
                key(id),
                Forwarded {
                    id: id.clone(),
                    kind: Pending::Plain,
                    modern: modern.then(|| "tools/call".to_string()),
                    wrap,
                    place: held.and_then(|h| h.place),
                    grace: false,
                },
            );
        }
        if !self.send_child(line, ack) {
            self.lock().pending.remove(&key(id));
            self.send_client(&results::error(
                id,
                results::INTERNAL_ERROR,
                "the downstream MCP server is not running",
            ));
        }
        true
    }

    async fn state_fp(&self, gate: &tc_core::config::Gate, args: &Value) -> Result<String, String> {
        match &gate.targets {
            Some(tc_core::config::Targets::Probe { tool, arguments }) => {
                let probe_args = targets::probe_arguments(arguments, args);
                let r = self
                    .internal("tools/call", json!({"name": tool, "arguments": probe_args}))
                    .await?;
                Ok(targets::probe_fp(tool, &probe_args, &r))
            }
            Some(t) => targets::local_fp(&self.policy, t, args).map_err(|e| e.to_string()),
            None => Err("the gate declares no targets".into()),
        }
    }

    fn daemon_result(&self, e: &DaemonError, s: &Shown<'_>) -> Value {
        let details = json!({"tool": s.tool, "vault": s.vault, "caller": s.caller, "args_hash": s.args_hash, "state_fp": s.state_fp});
        match e {
            DaemonError::Unreachable { socket, why } => unreachable_result(
                &format!("Tool `{}` needs a human confirmation", s.tool),
                s,
                socket,
                why,
            ),
            DaemonError::Refused(status) => match e.reason() {
                // No refusal reason: the daemon failed (disk full, read-only, internal) and
                // rolled back. Nothing about the confirmation is wrong, so asking the human
                // for a fresh one would not help; the same call works once the daemon does.
                None => {
                    let text = format!(
                        "Tool `{}` needs a human confirmation, but the tc daemon failed ({}). The call was NOT run \
                         and no confirmation was used up (an elicit_token you hold stays valid). Ask the human to \
                         fix the daemon (its log: `journalctl --user -u tcd`), then retry the same call.",
                        s.tool,
                        status.message()
                    );
                    let mut d = details;
                    d["reason"] = json!("daemon_error");
                    results::tool_error(
                        ErrorCode::ConfirmationUnavailable,
                        text,
                        d,
                        Some(json!({"command": "journalctl --user -u tcd"})),
                    )
                }
                Some(tc_core::Reason::RateLimited) => results::rate_limited(s, status.message()),
                Some(tc_core::Reason::ReplayDrift) => {
                    let text = format!(
                        "The confirmation for `{}` no longer matches: its target changed since the human was asked, \
                         so nothing was run and the confirmation is spent. Send the call again WITHOUT elicit_token \
                         or requestState to request a fresh confirmation from the human.",
                        s.tool
                    );
                    results::tool_error(ErrorCode::ReplayDrift, text, details, None)
                }
                Some(reason) => {
                    let reason = reason.as_str();
                    let text = format!(
                        "The confirmation token for `{}` was refused ({reason}: {}). Nothing was run. \
                         Send the call again WITHOUT elicit_token to request a fresh confirmation from the human.",
                        s.tool,
                        status.message()
                    );
                    let mut d = details;
                    d["reason"] = json!(reason);
                    results::tool_error(ErrorCode::InvalidInput, text, d, None)
                }
            },
        }
    }

    /// Handles one line from the client.
    fn on_client_line(self: &Arc<Self>, line: Vec<u8>) {
        let mut msg: Value = match parse_message(&line) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!("client sent a line that is not a JSON-RPC message: {e}");
                self.send_client(&results::error(&Value::Null, e.code(), e.to_string()));
                return;
            }
        };
        // The downstream works inside the vault root, whatever the client says (roots.rs).
        let line = match roots::strip_client_roots(&mut msg, &self.policy.root, &self.policy.vault)
        {
            true => msg.to_string().into_bytes(),
            false => line,
        };
        let method = msg.get("method").and_then(Value::as_str);
        let id = msg.get("id").filter(|i| !i.is_null()).cloned();
        // An id a downstream could echo as another value, or a full table: refused first.
        if let (Some(_), Some(i)) = (method, &id) {
            if !self.admit(i) {
                return;
            }
        }
        let meta = era::request_meta(&msg).cloned();
        if let (Some(m), Some(_)) = (&meta, &id) {
            self.lock().envelope = Some(era::envelope(m));
            self.set_client_era(Era::Modern, era::meta_version(m));
        }
        let modern = meta.is_some();
        if let (Some(m), Some(id)) = (&meta, &id) {
            let v = era::meta_version(m);
            if v != era::MODERN_VERSION {
                // We cannot gate an era we do not know: refuse rather than guess.
                self.send_client(&era::unsupported_version(id, &v));
                return;
            }
        }
        if let (Some(_), Some(i)) = (method, &id) {
            if msg.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
                // A downstream drops such a request without a word (the TypeScript SDK
                // does): the call would hold its barrier place, and every change behind
                // it, for ever. Refused here, where it can be answered.
                self.send_client(&results::error(
                    i,
                    results::INVALID_REQUEST,
                    "a request must carry \"jsonrpc\": \"2.0\"",
                ));
                return;
            }
            if reserved_id(i) {
                // Our own requests downstream use these ids: a client request with one
                // could take the answer meant for the shim (a probe's, say).
                self.send_client(&reserved_id_error(i));
                return;
            }
            let in_use = {
                let st = self.lock();
                st.held.contains_key(&key(i)) || st.pending.contains_key(&key(i))
            };
            if in_use {
                // Reusing a live id would overwrite the call's state and its governor
                // entry (a cancelled call could come back to life, an answer escape
                // the cap): refuse the newcomer.
                self.send_client(&results::error(
                    i,
                    results::INVALID_REQUEST,
                    "request id already in use by a request in flight",
                ));
                return;
            }
        }
        // Governor: note capped requests; a resources/read over the cap is answered here.
        if self.govern_request(method, id.as_ref(), &msg) {
            return;
        }
        match (method, id) {
            (None, Some(id)) => {
                // A response to one of our own prompts, else to a downstream's request.
                match id.as_str().filter(|s| s.starts_with(OWN_ID_PREFIX)) {
                    Some(s) => {
                        let waiting = self.lock().client_requests.remove(s);
                        match waiting {
                            Some(tx) => {
                                let _ = tx.send(msg);
                            }
                            // A late answer to a prompt we already withdrew: it was
                            // ours, the downstream never sent that request.
                            None => tracing::debug!("dropping a late answer to {s}"),
                        }
                    }
                    // Only to a request the downstream made and the client was shown: an
                    // answer to anything else (a question the shim answered itself, such
                    // as roots/list, or one never asked) would put words in its mouth.
                    None if self.lock().down_requests.remove(&key(&id)) => {
                        self.send_child(line, None);
                    }
                    None => tracing::warn!(
                        "dropping the client's answer to {id}: the downstream is not waiting for it"
                    ),
                }
            }
            (Some(roots::LIST_CHANGED), id) => {
                tracing::debug!(
                    "not forwarding the client's roots/list_changed: the vault root is fixed"
                );
                if let Some(id) = id {
                    self.send_client(&results::error(
                        &id,
                        results::INVALID_REQUEST,
                        "roots/list_changed is a notification, and tc-shim does not forward it: the vault root is fixed",
                    ));
                }
            }
            (Some("initialize"), Some(id)) => {
                let v = at(&msg, &["params", "protocolVersion"])
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_string();
                self.set_client_era(Era::Legacy, v);
                self.lock().client_caps = at(&msg, &["params", "capabilities"]).cloned();
                self.forward_request(&id, Pending::Initialize, None, line)
            }
            (Some("server/discover"), Some(id)) => {
                let meta = meta.unwrap_or_else(era::default_envelope);
                self.set_client_era(Era::Modern, era::meta_version(&meta));
                tokio::spawn(Arc::clone(self).handle_discover(id, meta, line));
            }
            (Some("tools/call"), Some(id)) => {
                let facade = self.policy.lean.then(|| lean::facade_call(&msg)).flatten();
                let place = self.place_for(&msg, facade.as_ref());
                self.lock().held.insert(
                    key(&id),
                    Held {
                        cancelled: false,
                        modern,
                        schema: false,
                        lean: facade.is_some(),
                        place,
                    },
                );
                match facade {
                    None => {
                        self.spawn_call(id, msg, line);
                    }
                    Some(lean::FacadeCall::List) => {
                        tokio::spawn(Arc::clone(self).list_capabilities(id));
                    }
                    Some(lean::FacadeCall::Call(inner)) => {
                        let line = inner.to_string().into_bytes();
                        self.spawn_call(id, inner, line);
                    }
                    Some(lean::FacadeCall::Bad(why)) => self.answer(
                        &id,
                        results::tool_error(ErrorCode::InvalidInput, why, json!({}), None),
                    ),
                }
            }
            (Some("tools/list"), Some(id)) if self.policy.lean => {
                tokio::spawn(Arc::clone(self).lean_tools_list(id, modern));
            }
            (Some(m), Some(id)) => {
                let kind = if m == "tools/list" {
                    Pending::ToolsList
                } else {
                    Pending::Plain
                };
                let m = m.to_string();
                match meta {
                    Some(meta) if self.lock().down_era.is_none() => {
                        tokio::spawn(Arc::clone(self).forward_modern(id, kind, meta, m, line));
                    }
                    _ => self.forward_request(&id, kind, modern.then_some(m), line),
                }
            }
            (Some("tools/call"), None) => {
                // No id (a notification) or `"id": null`: it could not be answered, so it
                // could not be gated either; a downstream that ran it would run it unconfirmed.
                tracing::warn!(
                    "dropping a tools/call without an id: tc only runs calls it can answer"
                );
                if msg.get("id").is_some() {
                    self.send_client(&results::error(
                        &Value::Null,
                        results::INVALID_REQUEST,
                        "tools/call needs a string or number id",
                    ));
                }
            }
            (Some("notifications/cancelled"), None) => {
                if let Some(rid) = at(&msg, &["params", "requestId"]) {
                    let mut st = self.lock();
                    if let Some(h) = st.held.get_mut(&key(rid)) {
                        h.cancelled = true;
                        if let Some(w) = st.wakers.remove(&key(rid)) {
                            let _ = w.send(());
                        }
                        return;
                    }
                    let forwarded = st.pending.get_mut(&key(rid)).filter(|p| !p.grace);
                    if let Some(p) = forwarded {
                        if let Some(t) = p.place.as_ref().map(Place::ticket) {
                            p.grace = true;
                            self.release_after_grace(key(rid), t);
                        }
                    }
                }
                self.send_child(line, None);
            }
            _ => {
                self.send_child(line, None);
            }
        }
    }

    /// Handles one line from the downstream.
    fn on_child_line(self: &Arc<Self>, line: Vec<u8>) {
        if self.pass_through(&line) {
            self.to_client.send(line, None);
            return;
        }
        let mut msg: Value = match serde_json::from_slice(&line) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!("dropping malformed line from the downstream: {e}");
                return;
            }
        };
        if let (Some(_), Some(id)) = (msg.get("method"), msg.get("id").filter(|i| reserved_id(i))) {
            // The client's answer to it would be taken as the answer to the shim's own
            // prompt of that id: a server could approve its own gated call. Refused.
            tracing::warn!("refusing a downstream request with a reserved id {id}");
            self.send_child(reserved_id_error(id).to_string().into_bytes(), None);
            return;
        }
        let down_id = msg.get("id").filter(|i| !i.is_null());
        if let (Some(_), Some(id)) = (msg.get("method"), down_id) {
            // Held in down_requests until the client answers: the client's rules (ids.rs)
            // bound what one server can make the shim keep.
            if let Err(why) = crate::ids::check_request_id(id) {
                tracing::warn!("refusing a downstream request: {why}");
                let e = results::error(&crate::ids::answer_id(id), results::INVALID_REQUEST, why);
                self.send_child(e.to_string().into_bytes(), None);
                return;
            }
        }
        if let Some(m) = msg.get("method") {
            let id = msg.get("id").filter(|i| !i.is_null());
            if m == roots::LIST {
                // Answered here, never asked of the client (roots.rs).
                if let Some(id) = id {
                    let r = roots::list_result(&self.policy.root, &self.policy.vault);
                    self.send_child(results::response(id, r).to_string().into_bytes(), None);
                }
                return;
            }
            if id.is_some_and(|id| !self.note_down_request(id)) {
                return;
            }
            if m == "notifications/cancelled" {
                // The downstream withdrew its question: the client's answer may no longer go.
                if let Some(rid) = at(&msg, &["params", "requestId"]) {
                    self.lock().down_requests.remove(&key(rid));
                }
            }
        }
        let is_response = msg.get("method").is_none()
            && (msg.get("result").is_some() || msg.get("error").is_some());
        if is_response {
            if let Some(id) = msg.get("id").cloned() {
                // Governor: the byte cap, and answers to its own page requests.
                let Some(m) = self.govern_response(&id, line.len(), msg) else {
                    return;
                };
                msg = m;
                if let Some(internal) = id.as_str().and_then(|s| self.lock().internal.remove(s)) {
                    let _ = internal.send(msg);
                    return;
                }
                if id.is_null() {
                    // An error about a line the downstream could not read: no request
                    // to match, nothing the cap covers.
                    self.to_client.send(line, None);
                    return;
                }
                let pending = self.lock().pending.remove(&key(&id));
                let Some(mut p) = pending else {
                    // No request waits for it (a late answer to one the shim stopped
                    // waiting for, or never sent): passing it on could pass the cap.
                    tracing::warn!("dropping a downstream answer to unknown id {id}");
                    return;
                };
                // Matched by value: the client gets its id back as it wrote it.
                let respelled = p.id != id;
                if respelled {
                    msg["id"] = p.id.clone();
                }
                if let Some(w) = p.wrap.take() {
                    match self.wrap_answer(p.id.clone(), msg, w) {
                        Some(m) => msg = m,
                        None => return,
                    }
                }
                if p.kind == Pending::Initialize {
                    let v = at(&msg, &["result", "protocolVersion"])
                        .and_then(Value::as_str)
                        .map(String::from);
                    if let Some(v) = v {
                        let mut st = self.lock();
                        if st.down_era.is_none() {
                            st.down_era = Some((Era::Legacy, v.clone()));
                        }
                        // The client asked for its newest version; this answer is the
                        // one it agrees to, and our own prompts must be shaped for it.
                        if let Some((Era::Legacy, cv)) = &mut st.client_era {
                            *cv = v;
                        }
                    }
                    self.note_eras();
                }
                let down_legacy = matches!(self.lock().down_era, Some((Era::Legacy, _)));
                let mut changed = respelled;
                if let Some(result) = msg.get_mut("result") {
                    if p.kind == Pending::ToolsList {
                        self.rewrite_tools_list(result);
                        changed = true;
                    }
                    if let (Some(m), true) = (&p.modern, down_legacy) {
                        changed |= era::mark_complete(result, m);
                    }
                }
                if changed {
                    self.send_client(&msg);
                    return;
                }
            }
        }
        self.to_client.send(line, None);
    }

    /// The fast path for a downstream line that goes to the client unchanged: a request
    /// or notification, or the answer to a plain forwarded request that the governor lets
    /// pass. Decided from the line's envelope alone, without building the whole value
    /// (results can be file contents); anything else (not an object, duplicate members,
    /// answers the shim rewrites or consumes) takes the full path.
    fn pass_through(&self, line: &[u8]) -> bool {
        if line.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return false;
        }
        // Only UTF-8 goes out as it came (the envelope's parse skips strings unchecked).
        let Ok(text) = std::str::from_utf8(line) else {
            return false;
        };
        let Ok(env) = serde_json::from_str::<Envelope>(text) else {
            return false;
        };
        if let Some(m) = env.method {
            let bad_id = |id: &Value| reserved_id(id) || crate::ids::check_request_id(id).is_err();
            if env.id.as_ref().is_some_and(bad_id)
                || m == roots::LIST
                || m == "notifications/cancelled"
            {
                return false;
            }
            // A full table: the full path refuses it (once).
            if env
                .id
                .as_ref()
                .is_some_and(|id| !self.try_note_down_request(id))
            {
                return false;
            }
            if m == "notifications/tools/list_changed" {
                // Definitions may have changed (a tool may have become destructive): the
                // next call re-lists instead of judging the floor from the old list.
                self.lock().tools = None;
            }
            return true;
        }
        let (true, Some(id)) = (env.result || env.error, env.id) else {
            return true;
        };
        let k = key(&id);
        let mut st = self.lock();
        if id.as_str().is_some_and(|s| st.internal.contains_key(s)) {
            return false;
        }
        let down_legacy = matches!(st.down_era, Some((Era::Legacy, _)));
        match st.pending.get(&k) {
            Some(p)
                if p.kind == Pending::Plain
                    && p.id == id
                    && p.wrap.is_none()
                    && !(p.modern.is_some() && down_legacy) => {}
            // Rewritten by the shim, or not a client request's (the governor's own page
            // requests, late answers): the full path sorts them out.
            _ => return false,
        }
        if !self.gov.passes(&k, line.len()) {
            return false;
        }
        st.pending.remove(&k);
        true
    }

    /// The downstream is gone: every pending call gets an error.
    fn fail_pending(&self) {
        let (pending, held) = {
            let mut st = self.lock();
            st.child_gone = true;
            st.internal.clear();
            self.gov.clear();
            (
                std::mem::take(&mut st.pending),
                std::mem::take(&mut st.held),
            )
        };
        for (_, Forwarded { id, .. }) in pending {
            self.send_client(&results::error(
                &id,
                results::INTERNAL_ERROR,
                "the downstream MCP server exited before answering",
            ));
        }
        for (k, h) in held {
            if !h.cancelled {
                self.send_client(&results::error(
                    &k.to_value(),
                    results::INTERNAL_ERROR,
                    "the downstream MCP server exited before answering",
                ));
            }
        }
    }
}

/// `confirmation_unavailable`: what tcd was needed for (`lead`), where it was looked for,
/// and how to start it; nothing ran.
fn unreachable_result(lead: &str, s: &Shown<'_>, socket: &std::path::Path, why: &str) -> Value {
    let text = format!(
        "{lead}, but the tc daemon is not reachable at {} ({why}). The call was NOT run. Ask the \
         human to start it with `systemctl --user start tcd`, then retry the call.",
        socket.display()
    );
    let mut d = s.details();
    d["socket"] = json!(socket.display().to_string());
    results::tool_error(
        ErrorCode::ConfirmationUnavailable,
        text,
        d,
        Some(json!({"command": "systemctl --user start tcd"})),
    )
}

/// Caches a tool definition. A destructive one is never replaced by a non-destructive
/// one (a list naming a tool twice, or pages that disagree): the floor holds until the
/// server says `list_changed`, which empties the cache.
fn learn_tool(map: &mut HashMap<String, Arc<Value>>, name: String, def: Arc<Value>) {
    if map
        .get(&name)
        .is_some_and(|old| policy::is_floor(Some(old)) && !policy::is_floor(Some(&def)))
    {
        return;
    }
    map.insert(name, def);
}

fn add_elicit_token(tool: &mut Value) {
    let Some(schema) = tool.get_mut("inputSchema").and_then(Value::as_object_mut) else {
        return;
    };
    let props = schema.entry("properties").or_insert_with(|| json!({}));
    if let Some(p) = props.as_object_mut() {
        p.insert(
            "elicit_token".into(),
            json!({"type": "string", "description": "Single-use confirmation token from `tcctl elicit`, given to you by the human. Omit it on the first call."}),
        );
    }
}

/// The first of tc's own fields other than `elicit_token` (which the shim strips) found
/// in a call's arguments.
fn reserved_argument(args: &Value) -> Option<&'static str> {
    tc_core::hash::GATE_FIELDS
        .iter()
        .copied()
        .filter(|k| *k != "elicit_token")
        .find(|k| args.get(k).is_some())
}

/// The call as the downstream gets it: without our token, and without our requestState
/// and answers (they were addressed to the shim, not to the server).
fn stripped(msg: &Value) -> Vec<u8> {
    let mut m = strip(msg);
    remove_token(&mut m);
    m.to_string().into_bytes()
}

/// Removes `elicit_token` from the call's arguments: it is addressed to the shim.
fn remove_token(msg: &mut Value) {
    if let Some(a) = msg
        .pointer_mut("/params/arguments")
        .and_then(Value::as_object_mut)
    {
        a.remove("elicit_token");
    }
}

/// The call without a requestState and its answers (the token stays: it is the call's).
fn strip(msg: &Value) -> Value {
    let mut m = msg.clone();
    if let Some(p) = m.get_mut("params").and_then(Value::as_object_mut) {
        // The snake_case spellings too: the Python SDK reads every field under both.
        for f in [
            "requestState",
            "inputResponses",
            "request_state",
            "input_responses",
        ] {
            p.remove(f);
        }
    }
    m
}

fn policy_result(e: &PolicyError) -> Value {
    match e {
        PolicyError::Acl { path, list, glob } => results::tool_error(
            ErrorCode::AclDenied,
            format!("Refused: {e}. Nothing was run."),
            json!({"path": path, "list": list, "glob": glob}),
            None,
        ),
        PolicyError::InvalidInput { arg, why } => results::tool_error(
            ErrorCode::InvalidInput,
            format!("Refused: argument `{arg}`: {why}. Nothing was run."),
            json!({"argument": arg, "reason": "path_escape"}),
            None,
        ),
        PolicyError::Glob(_) => {
            results::tool_error(ErrorCode::InvalidInput, e.to_string(), json!({}), None)
        }
        PolicyError::Unjudged { arg, .. } => results::tool_error(
            ErrorCode::AclDenied,
            format!("Refused: {e}. Nothing was run."),
            json!({"argument": arg, "reason": "unjudgeable"}),
            None,
        ),
    }
}

/// What a front-end gives the engine for one conversation: one stdio client, one legacy
/// HTTP session or one stateless HTTP caller.
pub struct Options {
    pub policy: Arc<Policy>,
    pub daemon: Arc<Daemon>,
    /// Who makes the calls: `stdio`, `http-local` or a token's `sub` (DESIGN 12). Every
    /// binding (tokens, states, cursors, approvals) carries it.
    pub caller: String,
    /// How long the legacy route waits for the human (the confirmation TTL).
    pub prompt_ttl: Duration,
    /// The approval page's base URL (`[approvals] listen`), for the URL route.
    pub page: Option<String>,
    pub gov: Governor,
    /// The front can carry the shim's own requests to the client (`elicitation/create`):
    /// stdio can; Streamable HTTP never does (DESIGN 12: legacy HTTP sessions get the
    /// CLI/approve route).
    pub server_requests: bool,
}

/// The queues a front-end and a downstream adapter drain: lines for the downstream and
/// lines for the client.
pub struct Queues {
    pub to_child: tokio::sync::mpsc::UnboundedReceiver<crate::outbox::Out>,
    pub to_client: tokio::sync::mpsc::UnboundedReceiver<crate::outbox::Out>,
}

impl Shim {
    /// The engine for one conversation, and the queues its adapters drain.
    pub fn start(o: Options) -> (Arc<Shim>, Queues) {
        let (child_box, to_child) = Outbox::new();
        let (client_box, to_client) = Outbox::new();
        let page = o.page.filter(|_| o.server_requests);
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
            page,
            gov: o.gov,
            barrier: Arc::new(Barrier::default()),
        });
        if let Some(rx) = shim.gov.take_events() {
            tokio::spawn(governed::event_pump(Arc::clone(&shim), rx));
        }
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
                self.send_client(&results::error(&Value::Null, e.code(), e.to_string()));
            }
            Frame::Eof => {}
        }
    }

    /// One unit from the downstream.
    pub fn child_frame(self: &Arc<Self>, d: Down) {
        match d {
            Down::Line(l) => self.on_child_line(l),
            Down::InnerCr(l) => self.on_child_inner_cr(&l),
            Down::Oversize { bytes, top } => self.on_child_oversize(bytes, top),
            Down::Eof => {}
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

#[cfg(test)]
mod tests {
    use super::*;

    fn env(line: &str) -> Option<(Option<Value>, bool, bool, bool)> {
        serde_json::from_str::<Envelope>(line)
            .ok()
            .map(|e| (e.id, e.method.is_some(), e.result, e.error))
    }

    #[test]
    fn a_destructive_definition_is_not_replaced_by_a_plain_one() {
        let mut m = HashMap::new();
        let hard = Arc::new(json!({"name": "t", "annotations": {"destructiveHint": true}}));
        let plain = Arc::new(json!({"name": "t"}));
        learn_tool(&mut m, "t".into(), hard.clone());
        learn_tool(&mut m, "t".into(), plain.clone());
        assert!(policy::is_floor(m.get("t").map(|v| &**v)));
        let mut m = HashMap::new();
        learn_tool(&mut m, "t".into(), plain);
        learn_tool(&mut m, "t".into(), hard);
        assert!(policy::is_floor(m.get("t").map(|v| &**v)));
    }

    #[test]
    fn reserved_arguments_are_tc_fields_other_than_the_token() {
        assert_eq!(
            reserved_argument(&json!({"elicit_token": "x", "a": 1})),
            None
        );
        assert_eq!(reserved_argument(&json!({"cursor": "c"})), Some("cursor"));
        assert_eq!(
            reserved_argument(&json!({"requestState": null})),
            Some("requestState")
        );
        assert_eq!(reserved_argument(&json!("not an object")), None);
    }

    #[test]
    fn envelope_sees_members_whatever_their_value() {
        assert_eq!(
            env(r#"{"jsonrpc":"2.0","id":7,"result":null,"x":{"deep":[1,2]}}"#),
            Some((Some(json!(7)), false, true, false))
        );
        assert_eq!(
            env(r#"{"id":"a","method":null}"#),
            Some((Some(json!("a")), true, false, false))
        );
        assert_eq!(
            env(r#"{"id":1,"error":{"code":-1,"message":"m"}}"#),
            Some((Some(json!(1)), false, false, true))
        );
        assert_eq!(
            env(r#"{"method":"notifications/x"}"#),
            Some((None, true, false, false))
        );
    }

    #[test]
    fn envelope_refuses_what_the_full_path_must_judge() {
        // Duplicate members: which one counts is the full parser's call.
        assert_eq!(env(r#"{"id":1,"id":2,"result":{}}"#), None);
        assert_eq!(env(r#"{"id":1,"result":{},"result":{}}"#), None);
        assert_eq!(env("not json"), None);
    }
}
