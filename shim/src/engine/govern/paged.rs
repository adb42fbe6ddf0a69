//! Paging (the governor's `[[vaults.paged]]` tools): an un-gated call of one is served page
//! by page within the byte cap, its items ACL-checked one by one, its cursor sealed by tcd.

mod io;

use std::collections::HashMap;

use serde_json::Value;
use tc_proto::v1::Binding;

use crate::engine::govern::governor::{
    self, Limits, Page, PageReply, Plan, Position, MAX_PAGE_ATTEMPTS, MAX_PAGE_ITEMS, PAGE_RESERVE,
};
use crate::engine::judge::policy::PolicyError;
use crate::engine::refusal::judged::policy_result;
use crate::engine::refusal::Refusal;
use crate::engine::rounds::downstream_round;
use crate::engine::{key, Shim};
use crate::wire::era;
use crate::wire::jsonrpc;
use io::PageFailed;

/// One paged call being served: what every attempt at a page needs.
struct Paging<'a> {
    id: &'a Value,
    msg: &'a Value,
    tool: &'a str,
    args: &'a Value,
    read_only: bool,
    /// The argument that holds the items, and the items.
    items_arg: String,
    items: Vec<String>,
    /// What the page's cursor is bound to.
    binding: Binding,
    /// The first item of this page (from the client's cursor).
    from: usize,
    /// The tool declares an `outputSchema`.
    schema: bool,
}

/// What the attempts at one page learned so far.
struct Attempts {
    /// Items known never to fit, with their size.
    measured: HashMap<usize, u64>,
    /// Cursors sealed so far, by position.
    cursors: HashMap<usize, Option<String>>,
    max_items: usize,
    solo: bool,
    end: usize,
}

impl Shim {
    /// Serves one page of a `[[vaults.paged]]` tool (an un-gated call). False when the
    /// call has no array of string items: it then goes on as any other call.
    pub(in crate::engine) async fn page_call(
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
        if let Err(e) = self.check_other_paths(tool, args, &items_arg, read_only) {
            self.refuse(id, policy_result(&e));
            return true;
        }
        let binding = Binding {
            vault: self.policy.vault.clone(),
            tool: tool.to_string(),
            caller: self.caller.clone(),
            args_hash: tc_core::hash::args_hash(tool, args),
        };
        let from = match self.page_start(tool, args, &binding, items.len()).await {
            Ok(from) => from,
            Err(r) => {
                self.refuse(id, r);
                return true;
            }
        };
        let schema = self
            .tool_def(tool)
            .is_some_and(|d| d.get("outputSchema").is_some());
        let p = Paging {
            id,
            msg,
            tool,
            args,
            read_only,
            items_arg,
            items,
            binding,
            from,
            schema,
        };
        self.serve_page(&p).await;
        true
    }

    /// Other path arguments are checked for the whole call, as for any tool.
    fn check_other_paths(
        &self,
        tool: &str,
        args: &Value,
        items_arg: &str,
        read_only: bool,
    ) -> Result<(), PolicyError> {
        let def = self.tool_def(tool);
        let specs: Vec<_> = self
            .policy
            .path_args(tool, def.as_deref(), None)
            .into_iter()
            .filter(|a| a.name != items_arg)
            .collect();
        let others = self.policy.resolve_specs(&specs, args)?;
        self.policy.check_acl(&others, read_only)
    }

    /// The page's first item: 0, or where the client's cursor (opened by tcd) points.
    /// Err: the refusal to answer with.
    async fn page_start(
        &self,
        tool: &str,
        args: &Value,
        binding: &Binding,
        n: usize,
    ) -> Result<usize, Refusal> {
        let Some(c) = args.get("cursor").filter(|c| !c.is_null()) else {
            return Ok(0);
        };
        let c = c
            .as_str()
            .map(String::from)
            .unwrap_or_else(|| c.to_string());
        match self.daemon.open_cursor(&c, binding.clone()).await {
            Ok(pos) => match Position::decode(&pos, n) {
                Some(p) => Ok(p.i),
                None => Err(governor::cursor_refusal(
                    tool,
                    "invalid",
                    "it does not describe this request's items",
                )),
            },
            Err(e) => Err(self.cursor_error(tool, &e)),
        }
    }

    /// Plans a page, asks for it, and shrinks it while it is over the cap, until a page
    /// (possibly of skipped entries only) went out or the call was answered otherwise.
    async fn serve_page(&self, p: &Paging<'_>) {
        let cap = self.gov.cap;
        let budget = cap.saturating_sub(PAGE_RESERVE).max(cap / 4) as u64;
        let mut a = Attempts {
            measured: HashMap::new(),
            cursors: HashMap::new(),
            max_items: MAX_PAGE_ITEMS,
            solo: false,
            end: p.items.len(),
        };
        for attempt in 0..=MAX_PAGE_ATTEMPTS {
            if self.lock().holds.cancelled(&key(p.id)) == Some(true) {
                self.unhold(p.id);
                return;
            }
            let lim = Limits {
                budget,
                ratio: self.gov.ratio(p.tool),
                // The last attempt serves nothing: it returns the skipped items so far.
                max_items: if attempt == MAX_PAGE_ATTEMPTS {
                    0
                } else {
                    a.max_items
                },
                solo: a.solo,
                end: a.end,
            };
            let plan = governor::plan(p.from, &lim, &mut |j| {
                self.inspect(
                    &p.items_arg,
                    &p.items[j],
                    p.read_only,
                    a.measured.get(&j).copied(),
                )
            });
            let Some((answer_bytes, sent_bytes)) = self.attempt(p, &plan, &mut a.cursors).await
            else {
                return;
            };
            // Over the cap: ask for fewer items, and find the ones that never fit.
            tracing::debug!(
                tool = p.tool,
                attempt,
                items = plan.selected.len(),
                answer_bytes,
                "page over the cap; shrinking"
            );
            a.shrink(&plan, answer_bytes, sent_bytes, cap);
        }
    }

    /// One attempt at the planned page. None when the call was answered (the page went
    /// out, or a refusal); else the page was over the cap: `answer_bytes` is the
    /// downstream's answer (what the estimate learns from), `sent_bytes` the page as it
    /// would have gone out, cursor text included (what a too_large entry reports).
    async fn attempt(
        &self,
        p: &Paging<'_>,
        plan: &Plan,
        cursors: &mut HashMap<usize, Option<String>>,
    ) -> Option<(u64, u64)> {
        if plan.selected.is_empty() {
            let cursor = self.next_cursor(p, plan, cursors).await?;
            let page = self.page_of(p, plan, cursor.as_deref());
            self.reply_page(p.id, governor::empty_page(&page, p.schema));
            return None;
        }
        let reply = match self
            .page_request(p.msg, p.args, &p.items_arg, &plan.selected, &p.items)
            .await
        {
            Ok(r) => r,
            Err(PageFailed(why)) => {
                // Still held: nobody else (the exit path) answered it yet.
                if self.unhold(p.id).is_some_and(|h| !h.cancelled) {
                    self.send_client(&jsonrpc::error(p.id, jsonrpc::INTERNAL_ERROR, why));
                }
                return None;
            }
        };
        match reply {
            PageReply::Full { msg: resp, bytes } => {
                self.full_page(p, plan, cursors, resp, bytes).await
            }
            PageReply::Over { bytes } => {
                self.gov.learn(p.tool, bytes, plan.estimate);
                Some((bytes, bytes))
            }
        }
    }

    /// The downstream answered the page whole: refused pages and questions go back as
    /// refusals; a result is decorated with the page's `_meta` and sent if it fits.
    async fn full_page(
        &self,
        p: &Paging<'_>,
        plan: &Plan,
        cursors: &mut HashMap<usize, Option<String>>,
        resp: Value,
        bytes: usize,
    ) -> Option<(u64, u64)> {
        self.gov.learn(p.tool, bytes as u64, plan.estimate);
        let ok = resp
            .get("result")
            .filter(|r| r.is_object() && r.get("isError") != Some(&Value::Bool(true)));
        let Some(result) = ok else {
            // The downstream refused the page: its answer goes back as it is.
            self.pass_page_error(p.id, resp);
            return None;
        };
        if downstream_round(&resp).is_some() {
            // Its state is bound to this page's items, not to the call: the
            // re-sent call could not carry it back. It only asked; nothing ran.
            self.refuse(p.id, governor::paged_question_refusal(p.tool));
            return None;
        }
        let cursor = self.next_cursor(p, plan, cursors).await?;
        let page = self.page_of(p, plan, cursor.as_deref());
        let mut result = result.clone();
        governor::decorate(&mut result, &page, p.schema);
        if self.lock().holds.get(&key(p.id)).is_some_and(|h| h.modern) {
            era::mark_complete(&mut result, "tools/call");
        }
        let line = jsonrpc::response(p.id, result).to_string();
        if line.len() <= self.gov.cap {
            self.send_page_line(p.id, line.into_bytes());
            return None;
        }
        Some((bytes as u64, line.len() as u64))
    }

    /// The cursor of the page after the planned one (None on the last page); the outer
    /// None when it could not be sealed (the call was answered).
    async fn next_cursor(
        &self,
        p: &Paging<'_>,
        plan: &Plan,
        cursors: &mut HashMap<usize, Option<String>>,
    ) -> Option<Option<String>> {
        match self
            .page_cursor(&p.binding, plan.next, p.items.len(), cursors)
            .await
        {
            Ok(c) => Some(c),
            Err(r) => {
                self.refuse(p.id, r);
                None
            }
        }
    }

    /// The page the plan describes (`cursor`: the next page's).
    fn page_of<'a>(&self, p: &'a Paging<'_>, plan: &'a Plan, cursor: Option<&'a str>) -> Page<'a> {
        let n = p.items.len();
        Page::of(p.tool, &p.items_arg, p.from, n, plan, cursor, self.gov.cap)
    }
}

impl Attempts {
    /// A page over the cap: ask for fewer items next time, and find the ones that never fit.
    fn shrink(&mut self, plan: &Plan, answer_bytes: u64, sent_bytes: u64, cap: usize) {
        if plan.selected.len() > 1 {
            self.max_items = (plan.selected.len() / 2).max(1);
            self.solo = false;
            return;
        }
        let x = plan.selected[0];
        // Never fits: its answer alone is over the cap, or it was already alone on
        // a page and the cursor text pushed it over. An answer that is merely close
        // to the cap gets that solo attempt first.
        if answer_bytes as usize > cap || self.solo {
            self.measured.insert(x, sent_bytes.max(answer_bytes));
            self.solo = false;
        } else if plan.skipped.iter().any(|(j, _)| *j < x) {
            // Skipped entries crowded it out: they go first, the item opens the next page.
            self.end = x;
        } else {
            self.solo = true;
        }
    }
}
