//! The gate's governor hooks (rules in `crate::engine::govern::governor`; paging in `paged.rs`): caps
//! downstream answers, even a line too long to hold (by its scanned id); limits `resources/read`.

pub mod governor;
mod paged;

use std::sync::Arc;

use serde_json::{json, Value};
use tc_core::codes::events;
use tc_proto::v1;
use tokio::sync::{mpsc, oneshot};

use crate::engine::forward::table::Forwarded;
use crate::engine::refusal::Refusal;
use crate::engine::{key, Shim};
use crate::wire::era;
use crate::wire::framing::MAX_LINE;
use crate::wire::jsonrpc;
use crate::wire::scan::Top;
use crate::wire::value::at;
use governor::{GovEvent, PageReply, Track};

impl Shim {
    /// How much of a downstream line may be buffered now: the cap while only capped
    /// requests wait, the general line limit otherwise.
    pub(in crate::engine) fn line_limit(&self) -> usize {
        let st = self.lock();
        if st.out.own_waiting() {
            return MAX_LINE.max(self.gov.cap);
        }
        self.gov.line_limit(st.out.keys(), MAX_LINE)
    }

    /// Notes a client request whose answer the governor caps, and refuses a
    /// `resources/read` of a file under the root that `stat()` shows is over the cap.
    /// True when the governor answered the request itself.
    pub(in crate::engine) fn govern_request(
        &self,
        method: Option<&str>,
        id: Option<&Value>,
        msg: &Value,
    ) -> bool {
        let (Some(method), Some(id)) = (method, id) else {
            return false;
        };
        let k = key(id);
        match method {
            "tools/call" => {
                let tool = at(msg, &["params", "name"])
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let empty = json!({});
                let args = at(msg, &["params", "arguments"]).unwrap_or(&empty);
                let args = args.clone();
                self.gov.track(k.clone(), Track::Call { tool, args });
            }
            "resources/read" => {
                let uri = at(msg, &["params", "uri"])
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let cap = self.gov.cap;
                if let Some(size) = self.resource_file_size(&uri).filter(|s| *s > cap as u64) {
                    self.gov.untrack(&k);
                    tracing::info!(uri, size, limit = cap, "refusing resources/read by stat()");
                    self.send_client(&governor::resource_refusal(id, &uri, size, cap, true));
                    return true;
                }
                self.gov.track(k.clone(), Track::Resource { uri });
            }
            _ => {
                self.gov.untrack(&k);
            }
        }
        // The request just noted is not in `pending`/`held` yet: keep it by name.
        let st = self.lock();
        self.gov
            .prune(st.in_flight() + 1, |t| *t == k || st.in_use(t));
        false
    }

    /// The size of a `file://` resource under the vault root (None: not one, or not a file).
    fn resource_file_size(&self, uri: &str) -> Option<u64> {
        let path = governor::file_uri_path(uri)?;
        let resolved = self.policy.resolve("uri", path.to_str()?).ok()?;
        governor::file_size(&resolved)
    }

    /// Applies the cap to a parsed downstream response. None when the governor took it
    /// (a page answer, or a refusal sent instead); else the message to go on with.
    pub(in crate::engine) fn govern_response(
        &self,
        id: &Value,
        bytes: usize,
        msg: Value,
    ) -> Option<Value> {
        match self.gov.untrack(&key(id)) {
            None => Some(msg),
            Some(Track::Page(tx)) => {
                let _ = tx.send(PageReply::Full { msg, bytes });
                None
            }
            Some(t) if bytes > self.gov.cap => {
                if self.refuse_answer(id, t, bytes as u64) {
                    None
                } else {
                    Some(msg)
                }
            }
            Some(_) => Some(msg),
        }
    }

    /// Answers a capped client request whose response was over the cap, instead of the
    /// response. False when that request is not waiting (nothing was sent).
    fn refuse_answer(&self, id: &Value, t: Track, bytes: u64) -> bool {
        let Some(p) = self.lock().out.answered(&key(id)) else {
            return false;
        };
        match t {
            Track::Call { tool, args } => {
                let args_hash = tc_core::hash::args_hash(&tool, &args);
                self.overflow(id, &p, &tool, &args_hash, bytes)
            }
            Track::Resource { uri } => {
                tracing::info!(
                    uri,
                    bytes,
                    limit = self.gov.cap,
                    "refusing a resources/read answer over the cap"
                );
                self.send_client(&governor::resource_refusal(
                    id,
                    &uri,
                    bytes,
                    self.gov.cap,
                    false,
                ))
            }
            Track::Page(_) => {}
        }
        true
    }

    /// Answers with the `overflow` refusal of a `tools/call` result.
    fn overflow(&self, id: &Value, p: &Forwarded, tool: &str, args_hash: &str, bytes: u64) {
        let schema = self
            .tool_def(tool)
            .is_some_and(|d| d.get("outputSchema").is_some());
        let mut r = self.overflow_refusal(tool, args_hash, bytes).render(schema);
        if p.modern.is_some() {
            era::mark_complete(&mut r, "tools/call");
        }
        self.send_client(&jsonrpc::response(id, r));
    }

    /// The `overflow` refusal of a `tools/call` result (as the downstream era shapes it),
    /// with its log line, event and counter.
    pub(in crate::engine) fn overflow_refusal(
        &self,
        tool: &str,
        args_hash: &str,
        bytes: u64,
    ) -> Refusal {
        let cap = self.gov.cap;
        tracing::warn!(
            tool,
            bytes,
            limit = cap,
            "refusing a tools/call result over governor.max_response_bytes"
        );
        self.gov_event(GovEvent::Append {
            kind: events::OVERFLOW,
            tool: tool.to_string(),
            args_hash: args_hash.to_string(),
            state_fp: String::new(),
            detail: json!({"bytes": bytes, "limit": cap}),
        });
        governor::overflow_result(tool, bytes, cap)
    }

    /// A downstream line too long to hold, scanned as it went by: whoever waits for it
    /// gets an answer (an `overflow` result, an `invalid_input` error, or an error naming
    /// the line limit); it is never passed on and never dropped silently.
    pub(in crate::engine) fn on_child_oversize(&self, bytes: u64, top: Top) {
        let Some(id) = top.id.clone() else {
            tracing::warn!("dropping a {bytes}-byte line from the downstream: over the line limit, and no top-level id to answer");
            return;
        };
        if !top.is_response() {
            if top.has_method {
                tracing::warn!("refusing a {bytes}-byte request from the downstream (id {id}): over the line limit");
                let e = jsonrpc::error(
                    &id,
                    jsonrpc::INVALID_REQUEST,
                    format!(
                        "tc-shim: a {bytes}-byte message exceeds the {MAX_LINE}-byte line limit"
                    ),
                );
                self.send_child(e.to_string().into_bytes(), None);
            } else {
                tracing::warn!("dropping a {bytes}-byte line from the downstream (id {id}, not a response): over the line limit");
            }
            return;
        }
        let k = key(&id);
        let answered = match self.gov.untrack(&k) {
            Some(Track::Page(tx)) => {
                let _ = tx.send(PageReply::Over { bytes });
                true
            }
            Some(t) => self.refuse_answer(&id, t, bytes),
            None => false,
        };
        if answered {
            return;
        }
        let why = format!(
            "the downstream's answer was {bytes} bytes, over tc-shim's {MAX_LINE}-byte line limit; it was not passed on"
        );
        let internal = id.as_str().and_then(|s| self.lock().out.own_answered(s));
        if let Some(tx) = internal {
            let _ = tx.send(jsonrpc::error(&id, jsonrpc::INTERNAL_ERROR, why));
            return;
        }
        let pending = self.lock().out.answered(&k);
        match pending {
            Some(_) => {
                tracing::warn!("{why} (id {id})");
                self.send_client(&jsonrpc::error(&id, jsonrpc::INTERNAL_ERROR, why));
            }
            None => tracing::warn!(
                "dropping a {bytes}-byte answer to unknown id {id} (over the line limit)"
            ),
        }
    }

    /// Queues an event for the daemon's log. The pump that appends them starts with the
    /// first: most conversations never have one, and an idle one then keeps no task for it.
    pub(in crate::engine) fn gov_event(&self, ev: GovEvent) {
        let _ = self.event_queue().send(Box::new(ev));
    }

    /// The queue [`Shim::gov_event`] writes to, started on first use.
    pub(in crate::engine) fn event_queue(&self) -> &mpsc::UnboundedSender<Box<GovEvent>> {
        self.events.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(event_pump(
                Arc::clone(&self.daemon),
                self.policy.vault.clone(),
                self.caller.clone(),
                rx,
            ));
            tx
        })
    }

    /// Waits until every governor event queued so far reached the daemon (or failed).
    pub(in crate::engine) async fn flush_events(&self) {
        let Some(tx) = self.events.get() else {
            return;
        };
        let (done, flushed) = oneshot::channel();
        let _ = tx.send(Box::new(GovEvent::Flush(done)));
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), flushed).await;
    }
}

/// Appends the governor's events to the daemon's log, in order, off the I/O path.
/// Holds what an event needs, not the engine: the engine holds the channel's sender, so
/// the pump ends when the engine is freed.
async fn event_pump(
    daemon: Arc<crate::daemon_client::Daemon>,
    vault: String,
    caller: String,
    mut rx: mpsc::UnboundedReceiver<Box<GovEvent>>,
) {
    while let Some(ev) = rx.recv().await {
        match *ev {
            GovEvent::Flush(tx) => {
                let _ = tx.send(());
            }
            GovEvent::Append {
                kind,
                tool,
                args_hash,
                state_fp,
                detail,
            } => {
                let req = v1::AppendEventRequest {
                    kind: kind.into(),
                    vault: vault.clone(),
                    tool,
                    caller: caller.clone(),
                    args_hash,
                    state_fp,
                    detail_json: detail.to_string(),
                };
                // Boxed: the RPC's state would otherwise size the parked pump of every
                // idle conversation.
                if let Err(e) = Box::pin(daemon.append(req)).await {
                    tracing::warn!("could not record {kind} in the tc daemon: {e}");
                }
            }
        }
    }
}
