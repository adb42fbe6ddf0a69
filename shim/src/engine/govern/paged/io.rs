//! One page's traffic: each item inspected before it is asked for, the page request to
//! the downstream, the page's cursor sealed by tcd, and what the client is sent.

use std::collections::HashMap;

use serde_json::{json, Value};
use tc_core::ErrorCode;
use tc_proto::v1::Binding;
use tokio::sync::oneshot;

use crate::daemon_client::DaemonError;
use crate::engine::govern::governor::{self, Item, PageReply, Position, Track};
use crate::engine::judge::policy::PolicyError;
use crate::engine::refusal::Refusal;
use crate::engine::{key, Shim};
use crate::wire::era;

/// A page request that could not be answered (the downstream went away).
pub(in crate::engine) struct PageFailed(pub(in crate::engine) String);

impl Shim {
    /// Looks at one item before it is asked for: path under the root, ACL (on the path
    /// as given and on where it really leads), `stat()`.
    pub(in crate::engine) fn inspect(
        &self,
        arg: &str,
        raw: &str,
        read_only: bool,
        measured: Option<u64>,
    ) -> Item {
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
    pub(in crate::engine) async fn page_cursor(
        &self,
        binding: &Binding,
        next: usize,
        n: usize,
        cache: &mut HashMap<usize, Option<String>>,
    ) -> Result<Option<String>, Refusal> {
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
    pub(in crate::engine) fn cursor_error(&self, tool: &str, e: &DaemonError) -> Refusal {
        match e {
            DaemonError::Unreachable { socket, why } => Refusal::new(
                ErrorCode::ConfirmationUnavailable,
                format!(
                    "The result of `{tool}` is paged, and its paging cursor needs the tc daemon, which is not \
                     reachable at {} ({why}). Nothing was passed on. Ask the human to start it with \
                     `systemctl --user start tcd`, then retry the call.",
                    socket.display()
                ),
                json!({"tool": tool, "socket": socket.display().to_string(), "reason": "daemon_unreachable"})).recovery(json!({"command": "systemctl --user start tcd"})),
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
    pub(in crate::engine) async fn page_request(
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
        let pkey = key(&m["id"]);
        {
            // Checked and noted under one state lock: `fail_pending` marks the child gone
            // and then clears the governor, so a waiter noted after would wait forever.
            let st = self.lock();
            if st.out.gone() {
                return Err(PageFailed("the downstream MCP server exited".into()));
            }
            self.gov.track(pkey.clone(), Track::Page(tx));
        }
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
    pub(in crate::engine) fn reply_page(&self, id: &Value, result: Value) {
        self.reply_held(id, result);
    }

    /// Sends a finished page line, unless the call was cancelled meanwhile.
    pub(in crate::engine) fn send_page_line(&self, id: &Value, line: Vec<u8>) {
        if !self.unhold(id).is_some_and(|h| h.cancelled) {
            self.to_client.send(line, None);
        }
    }

    /// The downstream refused a page (JSON-RPC error or `isError`): its answer goes to
    /// the client under the client's id.
    pub(in crate::engine) fn pass_page_error(&self, id: &Value, mut resp: Value) {
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
}
