//! The gate's governor hooks: caps downstream answers (a line too long to hold is
//! matched by its scanned id), pages `[[vaults.paged]]` tools, limits `resources/read`.
//!
//! A child module of `gate` so it can use the engine's state; the rules themselves are
//! in `crate::governor`.

use crate::value::at;
use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Value};
use tc_core::codes::events;
use tc_core::ErrorCode;
use tc_proto::v1::{self, Binding};
use tokio::sync::{mpsc, oneshot};

use super::refusals::policy_result;
use super::{key, Forwarded, Held, Shim};
use crate::daemon_client::DaemonError;
use crate::era;
use crate::framing::MAX_LINE;
use crate::governor::{
    self, GovEvent, Item, Limits, Page, PageReply, Position, Track, MAX_PAGE_ATTEMPTS,
    MAX_PAGE_ITEMS, PAGE_RESERVE,
};
use crate::policy::PolicyError;
use crate::results;
use crate::scan::Top;

/// A page request that could not be answered (the downstream went away).
struct PageFailed(String);

impl Shim {
    /// How much of a downstream line may be buffered now: the cap while only capped
    /// requests wait, the general line limit otherwise.
    pub(super) fn line_limit(&self) -> usize {
        let st = self.lock();
        if !st.internal.is_empty() {
            return MAX_LINE.max(self.gov.cap);
        }
        self.gov.line_limit(st.pending.keys(), MAX_LINE)
    }

    /// Notes a client request whose answer the governor caps, and refuses a
    /// `resources/read` of a file under the root that `stat()` shows is over the cap.
    /// True when the governor answered the request itself.
    pub(super) fn govern_request(
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
        self.gov.prune(st.pending.len() + st.held.len() + 1, |t| {
            *t == k || st.pending.contains_key(t) || st.held.contains_key(t)
        });
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
    pub(super) fn govern_response(&self, id: &Value, bytes: usize, msg: Value) -> Option<Value> {
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
        let Some(p) = self.lock().pending.remove(&key(id)) else {
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
        let mut r = self.overflow_refusal(tool, args_hash, bytes);
        if self
            .tool_def(tool)
            .is_some_and(|d| d.get("outputSchema").is_some())
        {
            results::refusal_to_meta(&mut r);
        }
        if p.modern.is_some() {
            era::mark_complete(&mut r, "tools/call");
        }
        self.send_client(&results::response(id, r));
    }

    /// The `overflow` refusal of a `tools/call` result (as the downstream era shapes it),
    /// with its log line, event and counter.
    pub(super) fn overflow_refusal(&self, tool: &str, args_hash: &str, bytes: u64) -> Value {
        let cap = self.gov.cap;
        tracing::warn!(
            tool,
            bytes,
            limit = cap,
            "refusing a tools/call result over governor.max_response_bytes"
        );
        self.gov.event(
            events::OVERFLOW,
            tool,
            args_hash,
            json!({"bytes": bytes, "limit": cap}),
        );
        governor::overflow_result(tool, bytes, cap)
    }

    /// A downstream line too long to hold, scanned as it went by: whoever waits for it
    /// gets an answer (an `overflow` result, an `invalid_input` error, or an error naming
    /// the line limit); it is never passed on and never dropped silently.
    pub(super) fn on_child_oversize(&self, bytes: u64, top: Top) {
        let Some(id) = top.id.clone() else {
            tracing::warn!("dropping a {bytes}-byte line from the downstream: over the line limit, and no top-level id to answer");
            return;
        };
        if !top.is_response() {
            if top.has_method {
                tracing::warn!("refusing a {bytes}-byte request from the downstream (id {id}): over the line limit");
                let e = results::error(
                    &id,
                    results::INVALID_REQUEST,
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
        let internal = id.as_str().and_then(|s| self.lock().internal.remove(s));
        if let Some(tx) = internal {
            let _ = tx.send(results::error(&id, results::INTERNAL_ERROR, why));
            return;
        }
        let pending = self.lock().pending.remove(&k);
        match pending {
            Some(_) => {
                tracing::warn!("{why} (id {id})");
                self.send_client(&results::error(&id, results::INTERNAL_ERROR, why));
            }
            None => tracing::warn!(
                "dropping a {bytes}-byte answer to unknown id {id} (over the line limit)"
            ),
        }
    }

    /// Serves one page of a `[[vaults.paged]]` tool (an un-gated call). False when the
    /// call has no array of string items: it then goes on as any other call.
    pub(super) async fn page_call(
        &self,
        id: &Value,
        msg: &Value,
        tool: &str,
        args: &Value,
        read_only: bool,
    ) -> bool {
        let Some(items_arg) = self.gov.paged_items(tool).map(String::from) else {
            return false;
        };
        let items: Option<Vec<String>> = args
            .get(&items_arg)
            .and_then(Value::as_array)
            .and_then(|a| a.iter().map(|v| v.as_str().map(String::from)).collect());
        let Some(items) = items.filter(|i| !i.is_empty()) else {
            return false;
        };
        // The client's own id never reaches the downstream: pages use their own ids.
        self.gov.untrack(&key(id));
        // Other path arguments are checked for the whole call, as for any tool.
        let def = self.tool_def(tool);
        let specs: Vec<_> = self
            .policy
            .path_args(tool, def.as_deref(), None)
            .into_iter()
            .filter(|a| a.name != items_arg)
            .collect();
        let others = match self.policy.resolve_specs(&specs, args) {
            Ok(p) => p,
            Err(e) => {
                self.answer(id, policy_result(&e));
                return true;
            }
        };
        if let Err(e) = self.policy.check_acl(&others, read_only) {
            self.answer(id, policy_result(&e));
            return true;
        }
        let binding = Binding {
            vault: self.policy.vault.clone(),
            tool: tool.to_string(),
            caller: self.caller.clone(),
            args_hash: tc_core::hash::args_hash(tool, args),
        };
        let n = items.len();
        let from = match args.get("cursor").filter(|c| !c.is_null()) {
            None => 0,
            Some(c) => {
                let c = c
                    .as_str()
                    .map(String::from)
                    .unwrap_or_else(|| c.to_string());
                match self.daemon.open_cursor(&c, binding.clone()).await {
                    Ok(pos) => match Position::decode(&pos, n) {
                        Some(p) => p.i,
                        None => {
                            let r = governor::cursor_refusal(
                                tool,
                                "invalid",
                                "it does not describe this request's items",
                            );
                            self.answer(id, r);
                            return true;
                        }
                    },
                    Err(e) => {
                        self.answer(id, self.cursor_error(tool, &e));
                        return true;
                    }
                }
            }
        };
        let schema = self
            .tool_def(tool)
            .is_some_and(|d| d.get("outputSchema").is_some());
        let cap = self.gov.cap;
        let budget = cap.saturating_sub(PAGE_RESERVE).max(cap / 4) as u64;
        let mut measured: HashMap<usize, u64> = HashMap::new();
        let mut cursors: HashMap<usize, Option<String>> = HashMap::new();
        let mut max_items = MAX_PAGE_ITEMS;
        let mut solo = false;
        let mut end = n;
        for attempt in 0..=MAX_PAGE_ATTEMPTS {
            if self.lock().held.get(&key(id)).is_some_and(|h| h.cancelled) {
                self.unhold(id);
                return true;
            }
            let lim = Limits {
                budget,
                ratio: self.gov.ratio(tool),
                // The last attempt serves nothing: it returns the skipped items so far.
                max_items: if attempt == MAX_PAGE_ATTEMPTS {
                    0
                } else {
                    max_items
                },
                solo,
                end,
            };
            let plan = governor::plan(from, &lim, &mut |j| {
                self.inspect(&items_arg, &items[j], read_only, measured.get(&j).copied())
            });
            if plan.selected.is_empty() {
                let cursor = match self.page_cursor(&binding, plan.next, n, &mut cursors).await {
                    Ok(c) => c,
                    Err(r) => {
                        self.answer(id, r);
                        return true;
                    }
                };
                let page = Page::of(tool, &items_arg, from, n, &plan, cursor.as_deref(), cap);
                self.reply_page(id, governor::empty_page(&page, schema));
                return true;
            }
            let reply = match self
                .page_request(msg, args, &items_arg, &plan.selected, &items)
                .await
            {
                Ok(r) => r,
                Err(PageFailed(why)) => {
                    // Still held: nobody else (the exit path) answered it yet.
                    if self.unhold(id).is_some_and(|h| !h.cancelled) {
                        self.send_client(&results::error(id, results::INTERNAL_ERROR, why));
                    }
                    return true;
                }
            };
            // `answer_bytes` is the downstream's answer (what the estimate learns from);
            // `sent_bytes` the page as it would have gone out, cursor text included, which
            // is what a too_large entry reports against the budget.
            let (answer_bytes, sent_bytes) = match reply {
                PageReply::Full { msg: resp, bytes } => {
                    self.gov.learn(tool, bytes as u64, plan.estimate);
                    let ok = resp
                        .get("result")
                        .filter(|r| r.is_object() && r.get("isError") != Some(&Value::Bool(true)));
                    let Some(result) = ok else {
                        // The downstream refused the page: its answer goes back as it is.
                        self.pass_page_error(id, resp);
                        return true;
                    };
                    if super::continued::downstream_round(&resp).is_some() {
                        // Its state is bound to this page's items, not to the call: the
                        // re-sent call could not carry it back. It only asked; nothing ran.
                        self.answer(id, governor::paged_question_refusal(tool));
                        return true;
                    }
                    let cursor = match self.page_cursor(&binding, plan.next, n, &mut cursors).await
                    {
                        Ok(c) => c,
                        Err(r) => {
                            self.answer(id, r);
                            return true;
                        }
                    };
                    let page = Page::of(tool, &items_arg, from, n, &plan, cursor.as_deref(), cap);
                    let mut result = result.clone();
                    governor::decorate(&mut result, &page, schema);
                    if self.lock().held.get(&key(id)).is_some_and(|h| h.modern) {
                        era::mark_complete(&mut result, "tools/call");
                    }
                    let line = results::response(id, result).to_string();
                    if line.len() <= cap {
                        self.send_page_line(id, line.into_bytes());
                        return true;
                    }
                    (bytes as u64, line.len() as u64)
                }
                PageReply::Over { bytes } => {
                    self.gov.learn(tool, bytes, plan.estimate);
                    (bytes, bytes)
                }
            };
            // Over the cap: ask for fewer items, and find the ones that never fit.
            tracing::debug!(
                tool,
                attempt,
                items = plan.selected.len(),
                answer_bytes,
                "page over the cap; shrinking"
            );
            if plan.selected.len() > 1 {
                max_items = (plan.selected.len() / 2).max(1);
                solo = false;
                continue;
            }
            let x = plan.selected[0];
            // Never fits: its answer alone is over the cap, or it was already alone on
            // a page and the cursor text pushed it over. An answer that is merely close
            // to the cap gets that solo attempt first.
            if answer_bytes as usize > cap || solo {
                measured.insert(x, sent_bytes.max(answer_bytes));
                solo = false;
            } else if plan.skipped.iter().any(|(j, _)| *j < x) {
                // Skipped entries crowded it out: they go first, the item opens the next page.
                end = x;
            } else {
                solo = true;
            }
        }
        true
    }

    /// Looks at one item before it is asked for: path under the root, ACL (on the path
    /// as given and on where it really leads), `stat()`.
    fn inspect(&self, arg: &str, raw: &str, read_only: bool, measured: Option<u64>) -> Item {
        let cap = self.gov.cap;
        if let Some(b) = measured {
            return Item::Skip(governor::too_large_entry(raw, b, true, cap));
        }
        let path = match self.policy.resolve(arg, raw) {
            Ok(p) => p,
            Err(e) => return Item::Skip(governor::invalid_entry(raw, &e.to_string())),
        };
        let real = std::fs::canonicalize(&path).ok();
        let mut check = vec![path.clone()];
        check.extend(real.clone());
        if let Err(PolicyError::Acl { list, glob, .. }) = self.policy.check_acl(&check, read_only) {
            return Item::Skip(governor::acl_entry(raw, list, &glob));
        }
        match governor::file_size(real.as_deref().unwrap_or(&path)) {
            Some(size) if size > cap as u64 => {
                Item::Skip(governor::too_large_entry(raw, size, false, cap))
            }
            Some(size) => Item::Fits(governor::file_estimate(raw, size)),
            None => Item::Fits(governor::unknown_estimate(raw)),
        }
    }

    /// The cursor for the page ending at `next` (None on the last page), sealed by the
    /// daemon once per position.
    async fn page_cursor(
        &self,
        binding: &Binding,
        next: usize,
        n: usize,
        cache: &mut HashMap<usize, Option<String>>,
    ) -> Result<Option<String>, Value> {
        if next >= n {
            return Ok(None);
        }
        if let Some(c) = cache.get(&next) {
            return Ok(c.clone());
        }
        let pos = Position { i: next, n }.encode();
        match self.daemon.seal_cursor(binding.clone(), pos).await {
            Ok(c) => {
                cache.insert(next, Some(c.clone()));
                Ok(Some(c))
            }
            Err(e) => Err(self.cursor_error(&binding.tool, &e)),
        }
    }

    /// What a daemon failure around a cursor means for the call.
    fn cursor_error(&self, tool: &str, e: &DaemonError) -> Value {
        match e {
            DaemonError::Unreachable { socket, why } => results::tool_error(
                ErrorCode::ConfirmationUnavailable,
                format!(
                    "The result of `{tool}` is paged, and its paging cursor needs the tc daemon, which is not \
                     reachable at {} ({why}). Nothing was passed on. Ask the human to start it with \
                     `systemctl --user start tcd`, then retry the call.",
                    socket.display()
                ),
                json!({"tool": tool, "socket": socket.display().to_string(), "reason": "daemon_unreachable"}),
                Some(json!({"command": "systemctl --user start tcd"})),
            ),
            DaemonError::Refused(status) => {
                let reason = match e.reason() {
                    Some(r @ (tc_core::Reason::Expired
                    | tc_core::Reason::Foreign
                    | tc_core::Reason::RequestMismatch)) => r.as_str(),
                    _ => tc_core::Reason::Invalid.as_str(),
                };
                governor::cursor_refusal(tool, reason, status.message())
            }
        }
    }

    /// Sends one page request (the client's message with the page's items, without
    /// `cursor`, under a page id) and waits for its answer.
    async fn page_request(
        &self,
        msg: &Value,
        args: &Value,
        items_arg: &str,
        selected: &[usize],
        items: &[String],
    ) -> Result<PageReply, PageFailed> {
        let pid = self.gov.page_id();
        let mut a = tc_core::hash::strip_gate_fields(args);
        a[items_arg] = json!(selected.iter().map(|j| &items[*j]).collect::<Vec<_>>());
        let mut m = msg.clone();
        m["id"] = json!(pid);
        m["params"]["arguments"] = a;
        let (tx, rx) = oneshot::channel();
        if self.lock().child_gone {
            return Err(PageFailed("the downstream MCP server exited".into()));
        }
        let pkey = key(&m["id"]);
        self.gov.track(pkey.clone(), Track::Page(tx));
        if !self.send_child(m.to_string().into_bytes(), None) {
            self.gov.untrack(&pkey);
            return Err(PageFailed(
                "the downstream MCP server is not running".into(),
            ));
        }
        rx.await
            .map_err(|_| PageFailed("the downstream MCP server exited before answering".into()))
    }

    /// Answers a held paged call with a result the governor built.
    fn reply_page(&self, id: &Value, mut result: Value) {
        match self.unhold(id) {
            Some(Held {
                cancelled: true, ..
            }) => {}
            h => {
                if h.as_ref().is_some_and(|h| h.modern) {
                    era::mark_complete(&mut result, "tools/call");
                }
                self.send_client(&results::response(id, result));
            }
        }
    }

    /// Sends a finished page line, unless the call was cancelled meanwhile.
    fn send_page_line(&self, id: &Value, line: Vec<u8>) {
        if !self.unhold(id).is_some_and(|h| h.cancelled) {
            self.to_client.send(line, None);
        }
    }

    /// The downstream refused a page (JSON-RPC error or `isError`): its answer goes to
    /// the client under the client's id.
    fn pass_page_error(&self, id: &Value, mut resp: Value) {
        let held = self.unhold(id);
        if held.as_ref().is_some_and(|h| h.cancelled) {
            return;
        }
        resp["id"] = id.clone();
        if let (Some(r), true) = (resp.get_mut("result"), held.is_some_and(|h| h.modern)) {
            era::mark_complete(r, "tools/call");
        }
        self.send_client(&resp);
    }

    /// Waits until every governor event queued so far reached the daemon (or failed).
    pub(super) async fn flush_events(&self) {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), self.gov.flush()).await;
    }
}

/// Appends the governor's events to the daemon's log, in order, off the I/O path.
pub(super) async fn event_pump(shim: Arc<Shim>, mut rx: mpsc::UnboundedReceiver<GovEvent>) {
    while let Some(ev) = rx.recv().await {
        match ev {
            GovEvent::Flush(tx) => {
                let _ = tx.send(());
            }
            GovEvent::Append {
                kind,
                tool,
                args_hash,
                detail,
            } => {
                let req = v1::AppendEventRequest {
                    kind: kind.into(),
                    vault: shim.policy.vault.clone(),
                    tool,
                    caller: shim.caller.clone(),
                    args_hash,
                    state_fp: String::new(),
                    detail_json: detail.to_string(),
                };
                if let Err(e) = shim.daemon.append(req).await {
                    tracing::warn!("could not record {kind} in the tc daemon: {e}");
                }
            }
        }
    }
}
