//! The response governor's state and rules: the byte cap, which answers it watches,
//! paging plans for `[[vaults.paged]]` tools, cursor positions, and the results it builds.
//!
//! The engine's side (what happens to a line, a call, a page) is `gate/governed.rs` and
//! `gate/paged.rs`; this module holds no I/O except `stat()` through the `inspect` closure.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tc_core::config::{GovernorConfig, Paged};
use tc_core::ErrorCode;
use tokio::sync::oneshot;

use crate::engine::refusal::Refusal;
use crate::wire::ids::IdKey;
use crate::wire::jsonrpc;

/// `_meta` key of a paged result's paging information.
pub const PAGING_META: &str = "tc/paging";
/// Most items one page asks the downstream for.
pub const MAX_PAGE_ITEMS: usize = 1024;
/// Most downstream requests spent on one page before it is returned as it stands.
pub const MAX_PAGE_ATTEMPTS: usize = 32;
/// Bytes of a page's answer kept for what the shim adds (paging text, `_meta`, the
/// cursor, the JSON-RPC envelope). Skipped-item entries are counted on top, exactly.
pub const PAGE_RESERVE: usize = 3072;
/// What a downstream answer costs beyond its items (envelope, content wrapper).
const ANSWER_OVERHEAD: u64 = 256;

/// What the governor waits for, by canonical request id.
#[derive(Debug)]
pub enum Track {
    /// A client `tools/call`: its answer is capped (over the cap: `overflow`). The
    /// arguments are hashed only if the answer overflows (hashing every call cost more
    /// than the rest of forwarding it).
    Call { tool: String, args: Value },
    /// A client `resources/read`: its answer is capped (over: `invalid_input`).
    Resource { uri: String },
    /// One of the governor's own page requests to the downstream.
    Page(oneshot::Sender<PageReply>),
}

/// The downstream's answer to a page request.
#[derive(Debug)]
pub enum PageReply {
    /// The whole response (it was no longer than the limit in force) and its length.
    Full { msg: Value, bytes: usize },
    /// The response was longer than the cap; only its length is known.
    Over { bytes: u64 },
}

/// An event for the daemon's audit log, appended in order by the proxy's event pump.
#[derive(Debug)]
pub enum GovEvent {
    Append {
        kind: &'static str,
        tool: String,
        args_hash: String,
        detail: Value,
    },
    /// Answered once everything queued before it was sent.
    Flush(oneshot::Sender<()>),
}

/// How long a newly noted request is safe from [`Governor::prune`].
const PRUNE_GRACE: Duration = Duration::from_secs(5);

/// The governor of one shim process.
pub struct Governor {
    /// `governor.max_response_bytes`.
    pub cap: usize,
    /// Paged tool → the array argument holding its items.
    paged: HashMap<String, String>,
    /// Each capped request in flight, and when it was noted.
    tracked: Mutex<HashMap<IdKey, (Track, Instant)>>,
    next_page: AtomicU64,
    /// Learned bytes of answer per estimated byte of items, per tool.
    ratios: Mutex<HashMap<String, f64>>,
}

impl Governor {
    pub fn new(cfg: &GovernorConfig, paged: &[Paged]) -> Governor {
        Governor {
            cap: usize::try_from(cfg.max_response_bytes).unwrap_or(usize::MAX),
            paged: paged
                .iter()
                .map(|p| (p.tool.clone(), p.items.clone()))
                .collect(),
            tracked: Mutex::new(HashMap::new()),
            next_page: AtomicU64::new(1),
            ratios: Mutex::new(HashMap::new()),
        }
    }

    fn tracked(&self) -> std::sync::MutexGuard<'_, HashMap<IdKey, (Track, Instant)>> {
        self.tracked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The items argument of a paged tool.
    pub fn paged_items(&self, tool: &str) -> Option<&str> {
        self.paged.get(tool).map(String::as_str)
    }

    pub fn track(&self, key: IdKey, t: Track) {
        self.tracked().insert(key, (t, Instant::now()));
    }

    pub fn untrack(&self, key: &IdKey) -> Option<Track> {
        crate::wire::ids::take(&mut self.tracked(), key).map(|(t, _)| t)
    }

    /// Whether an answer of `bytes` to `key` may pass as it is: not a page answer and not
    /// over the cap. If so its entry is dropped; if not nothing changes (the caller then
    /// parses the answer and goes through `untrack`).
    pub fn passes(&self, key: &IdKey, bytes: usize) -> bool {
        let mut t = self.tracked();
        match t.get(key).map(|(t, _)| t) {
            None => true,
            Some(Track::Page(_)) => false,
            Some(_) if bytes > self.cap => false,
            Some(_) => {
                crate::wire::ids::take(&mut t, key);
                true
            }
        }
    }

    /// Drops entries whose request is no longer waiting (answered by the shim itself),
    /// once there are clearly more of them than waiting requests.
    pub fn prune(&self, waiting: usize, keep: impl Fn(&IdKey) -> bool) {
        let mut t = self.tracked();
        if t.len() > 2 * waiting + 64 {
            // A request noted moments ago may not be in flight yet (another worker noted
            // it and has not queued it): young entries stay whatever `keep` says.
            let now = Instant::now();
            t.retain(|k, (v, at)| {
                matches!(v, Track::Page(_)) || now.duration_since(*at) < PRUNE_GRACE || keep(k)
            });
        }
    }

    /// Drops every page waiter (the downstream is gone).
    pub fn clear(&self) {
        self.tracked().clear();
    }

    /// How many bytes of a downstream line may be buffered while these client requests
    /// (canonical ids) wait: the cap when every one of them is capped, else `uncapped`.
    pub fn line_limit<'a>(
        &self,
        waiting: impl Iterator<Item = &'a IdKey>,
        uncapped: usize,
    ) -> usize {
        let t = self.tracked();
        let mut any = t.values().any(|(v, _)| matches!(v, Track::Page(_)));
        for k in waiting {
            if !t.contains_key(k) {
                return uncapped.max(self.cap);
            }
            any = true;
        }
        if any {
            self.cap
        } else {
            uncapped.max(self.cap)
        }
    }

    /// A fresh id for a page request: in the shim's reserved `tc-shim-` namespace, which
    /// a client request cannot use, so no client id collides with a page's.
    pub fn page_id(&self) -> String {
        format!(
            "tc-shim-gov-{}",
            self.next_page.fetch_add(1, Ordering::Relaxed)
        )
    }

    pub fn ratio(&self, tool: &str) -> f64 {
        let r = self.ratios.lock().unwrap_or_else(|p| p.into_inner());
        r.get(tool).copied().unwrap_or(1.0)
    }

    /// Learns how many answer bytes an estimated item byte costs for `tool`.
    pub fn learn(&self, tool: &str, answer_bytes: u64, estimated: u64) {
        if estimated == 0 {
            return;
        }
        let r = (answer_bytes.saturating_sub(ANSWER_OVERHEAD) as f64 / estimated as f64)
            .clamp(1.0, 64.0);
        self.ratios
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(tool.to_string(), r);
    }

    /// Adds the optional `cursor` argument to a paged tool's `inputSchema`.
    pub fn advertise_cursor(&self, name: &str, tool: &mut Value) {
        if !self.paged.contains_key(name) {
            return;
        }
        let Some(schema) = tool.get_mut("inputSchema").and_then(Value::as_object_mut) else {
            return;
        };
        let props = schema.entry("properties").or_insert_with(|| json!({}));
        if let Some(p) = props.as_object_mut() {
            p.insert(
                "cursor".into(),
                json!({"type": "string", "description": "Paging cursor: omit it on the first call. When a result's _meta[\"tc/paging\"].next_cursor is not null, call again with the same arguments plus this cursor; stop when it is null."}),
            );
        }
    }
}

// ------------------------------------------------------------------ cursor positions

/// What a cursor carries (sealed by the daemon; the shim only reads it back).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Position {
    /// Index of the next item to consider.
    pub i: usize,
    /// How many items the request has (bound anyway by the args hash; checked again).
    pub n: usize,
}

impl Position {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The position for a request of `n` items, or None if it does not describe one.
    pub fn decode(bytes: &[u8], n: usize) -> Option<Position> {
        let p: Position = serde_json::from_slice(bytes).ok()?;
        (p.n == n && p.i < n).then_some(p)
    }
}

// ------------------------------------------------------------------ page planning

/// How one item looks before it is asked for.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// Not served: this per-item error entry is reported instead.
    Skip(Value),
    /// May be served; its estimated size in the downstream's answer (before the ratio).
    Fits(u64),
}

/// Limits a page is planned under.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Bytes available for the items' answer plus the skipped-item entries.
    pub budget: u64,
    /// Learned answer bytes per estimated byte.
    pub ratio: f64,
    /// Most items to ask for.
    pub max_items: usize,
    /// Stop right after the first item asked for (it must be tried on its own).
    pub solo: bool,
    /// Items from this index on belong to a later page.
    pub end: usize,
}

/// One page: which items to ask the downstream for, which are skipped, where the next
/// page starts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub selected: Vec<usize>,
    /// (index, entry) of skipped items.
    pub skipped: Vec<(usize, Value)>,
    pub next: usize,
    /// Sum of the selected items' estimates.
    pub estimate: u64,
}

/// Bytes a skipped-item entry adds to a page (its `_meta` entry and its text line).
pub fn skip_cost(entry: &Value) -> u64 {
    (entry.to_string().len() + skip_line(entry).len() + 16) as u64
}

/// Walks items from `from`, taking what fits the budget: skipped items are passed over
/// (they are progress too) and the first item that may be served is always taken, so a
/// page never stands still. Stops at the first item that does not fit.
pub fn plan(from: usize, lim: &Limits, inspect: &mut dyn FnMut(usize) -> Item) -> Plan {
    let mut p = Plan {
        next: lim.end,
        ..Plan::default()
    };
    let mut used = ANSWER_OVERHEAD;
    for j in from..lim.end {
        if lim.solo && !p.selected.is_empty() {
            p.next = j;
            return p;
        }
        let item = inspect(j);
        let empty = p.selected.is_empty() && p.skipped.is_empty();
        match item {
            Item::Skip(e) => {
                let cost = skip_cost(&e);
                if !empty && used + cost > lim.budget {
                    p.next = j;
                    return p;
                }
                used += cost;
                p.skipped.push((j, e));
            }
            Item::Fits(_) if lim.max_items == 0 => {
                p.next = j;
                return p;
            }
            Item::Fits(est) => {
                let cost = (est as f64 * lim.ratio).ceil() as u64;
                let full = p.selected.len() >= lim.max_items || used + cost > lim.budget;
                if full && !p.selected.is_empty() {
                    p.next = j;
                    return p;
                }
                if full && !empty {
                    // Only skipped entries so far: they go out first, this item opens
                    // the next page.
                    p.next = j;
                    return p;
                }
                used += cost;
                p.estimate += est;
                p.selected.push(j);
            }
        }
    }
    p
}

/// Estimated answer bytes of a file item of `size` bytes named `raw` (the content, its
/// name as a header, a separator; the ratio learns the rest, e.g. a copy in
/// `structuredContent` and JSON escaping).
pub fn file_estimate(raw: &str, size: u64) -> u64 {
    size + 2 * raw.len() as u64 + 16
}

/// Estimated answer bytes of an item the shim cannot size (missing, not a file).
pub fn unknown_estimate(raw: &str) -> u64 {
    2 * raw.len() as u64 + 160
}

/// A skipped item that can never fit.
pub fn too_large_entry(item: &str, size: u64, measured: bool, budget: usize) -> Value {
    json!({
        "item": item,
        "code": ErrorCode::TooLarge.as_str(),
        "size": size,
        "size_of": if measured { "response" } else { "file" },
        "budget": budget,
    })
}

/// A skipped item the ACL denies.
pub fn acl_entry(item: &str, list: &str, glob: &str) -> Value {
    json!({"item": item, "code": ErrorCode::AclDenied.as_str(), "list": list, "glob": glob})
}

/// A skipped item whose path is refused (escapes the root).
pub fn invalid_entry(item: &str, why: &str) -> Value {
    json!({"item": item, "code": ErrorCode::InvalidInput.as_str(), "reason": "path_escape", "why": why})
}

fn skip_line(e: &Value) -> String {
    let item = e["item"].as_str().unwrap_or("?");
    let code = e["code"].as_str().unwrap_or("?");
    match code {
        "too_large" => format!(
            "- {item}: too_large ({} bytes{}; the budget is {} bytes), skipped",
            e["size"],
            if e["size_of"] == "response" {
                " of answer"
            } else {
                ""
            },
            e["budget"]
        ),
        "acl_denied" => format!(
            "- {item}: acl_denied (vault ACL {} {}), skipped",
            e["list"].as_str().unwrap_or(""),
            e["glob"].as_str().unwrap_or("")
        ),
        _ => format!("- {item}: {code}, skipped"),
    }
}

// ------------------------------------------------------------------ page results

/// Everything a page's result reports about paging.
#[derive(Debug, Clone)]
pub struct Page<'a> {
    pub tool: &'a str,
    pub items_arg: &'a str,
    pub from: usize,
    pub next: usize,
    pub total: usize,
    pub served: usize,
    pub skipped: &'a [(usize, Value)],
    pub next_cursor: Option<&'a str>,
    pub budget: usize,
}

impl<'a> Page<'a> {
    /// The paging report of `plan`, a page of a request of `total` items.
    pub fn of(
        tool: &'a str,
        items_arg: &'a str,
        from: usize,
        total: usize,
        plan: &'a Plan,
        next_cursor: Option<&'a str>,
        budget: usize,
    ) -> Page<'a> {
        Page {
            tool,
            items_arg,
            from,
            next: plan.next,
            total,
            served: plan.selected.len(),
            skipped: &plan.skipped,
            next_cursor,
            budget,
        }
    }

    fn meta(&self) -> Value {
        json!({
            "next_cursor": self.next_cursor,
            "items": self.items_arg,
            "from": self.from,
            "next": self.next,
            "total": self.total,
            "served": self.served,
            "skipped": self.skipped.iter().map(|(_, e)| e.clone()).collect::<Vec<_>>(),
            "budget": self.budget,
        })
    }

    fn text(&self) -> String {
        let mut t = format!(
            "[tc governor] `{}` is paged to stay under {} bytes: this page served {} of the {} `{}` (positions {}..{}).",
            self.tool, self.budget, self.served, self.total, self.items_arg, self.from, self.next
        );
        if !self.skipped.is_empty() {
            t.push_str("\nSkipped:");
            for (_, e) in self.skipped {
                t.push('\n');
                t.push_str(&skip_line(e));
            }
        }
        match self.next_cursor {
            Some(c) => t.push_str(&format!(
                "\nnext_cursor: {c}\nMore remain: call `{}` again with exactly the same arguments plus \"cursor\": \"{c}\", and repeat until next_cursor is null.",
                self.tool
            )),
            None => t.push_str("\nnext_cursor: null (this was the last page)."),
        }
        t
    }
}

fn merge_meta(result: &mut Value, key: &str, v: Value) {
    let Some(o) = result.as_object_mut() else {
        return;
    };
    let meta = o.entry("_meta").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    meta[key] = v;
}

/// Adds paging to the downstream's result for a page: `_meta["tc/paging"]` always; a
/// text block when there is more to fetch or something was skipped; and, for a tool
/// without an `outputSchema`, `structuredContent.next_cursor`.
pub fn decorate(result: &mut Value, p: &Page<'_>, schema: bool) {
    merge_meta(result, PAGING_META, p.meta());
    if !schema {
        if let Some(o) = result.as_object_mut() {
            let sc = o.entry("structuredContent").or_insert_with(|| json!({}));
            if let Some(sc) = sc.as_object_mut() {
                sc.insert("next_cursor".into(), json!(p.next_cursor));
            }
        }
    }
    if p.next_cursor.is_some() || !p.skipped.is_empty() {
        if let Some(c) = result.get_mut("content").and_then(Value::as_array_mut) {
            c.push(json!({"type": "text", "text": p.text()}));
        }
    }
}

/// A page on which nothing could be served (every item it reached was skipped): an
/// `isError` result, with `next_cursor` when items remain.
pub fn empty_page(p: &Page<'_>, schema: bool) -> Value {
    let codes: Vec<&str> = p
        .skipped
        .iter()
        .filter_map(|(_, e)| e["code"].as_str())
        .collect();
    let code = if codes.contains(&"too_large") {
        ErrorCode::TooLarge
    } else if codes.contains(&"acl_denied") {
        ErrorCode::AclDenied
    } else {
        ErrorCode::InvalidInput
    };
    let mut r = Refusal::new(code, p.text(), p.meta()).render(schema);
    merge_meta(&mut r, PAGING_META, p.meta());
    r
}

/// The refusal of a `tools/call` result over the cap.
pub fn overflow_result(tool: &str, bytes: u64, limit: usize) -> Refusal {
    Refusal::new(
        ErrorCode::Overflow,
        format!(
            "Refused: the result of `{tool}` is {bytes} bytes, over the governor limit of {limit} bytes \
             (governor.max_response_bytes), so it was not passed on. Ask for less (a smaller range, fewer \
             items, a narrower query) instead of repeating the same call."
        ),
        json!({"tool": tool, "bytes": bytes, "limit": limit}))
}

/// The refusal of a paged call whose downstream asked a question of its own
/// (`input_required`): a page's round cannot be carried back through the paged call.
pub fn paged_question_refusal(tool: &str) -> Refusal {
    Refusal::new(
        ErrorCode::InvalidInput,
        format!(
            "Refused: `{tool}` asked a question of its own (input_required) while tc was serving it \
             page by page, and a paged call cannot carry the server's question back. Nothing was run. \
             Tell the human: `{tool}` should not be listed under [[vaults.paged]] for this server."
        ),
        json!({"tool": tool, "reason": "paged_input_required"}))
}

/// The refusal of a cursor the daemon would not open (`reason`: expired, invalid,
/// foreign or request_mismatch).
pub fn cursor_refusal(tool: &str, reason: &str, why: &str) -> Refusal {
    Refusal::new(
        ErrorCode::InvalidInput,
        format!(
            "Refused: the cursor given to `{tool}` is not valid for this call ({reason}: {why}). Nothing was \
             read. Send the call again without `cursor` to start from the first page."
        ),
        json!({"tool": tool, "argument": "cursor", "reason": reason}))
}

/// The refusal of a `resources/read` over the cap: a plain JSON-RPC error.
pub fn resource_refusal(id: &Value, uri: &str, bytes: u64, limit: usize, by_stat: bool) -> Value {
    let mut e = jsonrpc::error(
        id,
        INVALID_PARAMS,
        format!(
            "invalid_input: resource {uri} is {bytes} bytes, over the governor limit of {limit} bytes \
             (governor.max_response_bytes){}",
            if by_stat { "; it was not read" } else { "" }
        ),
    );
    e["error"]["data"] = json!({
        "code": ErrorCode::InvalidInput.as_str(),
        "reason": "too_large",
        "uri": uri,
        "bytes": bytes,
        "limit": limit,
        "checked": if by_stat { "stat" } else { "response" },
    });
    e
}

/// JSON-RPC "invalid params", the code of a refused `resources/read`.
pub const INVALID_PARAMS: i64 = -32602;

/// The local path of a `file://` URI (percent-decoded), if it is one.
pub fn file_uri_path(uri: &str) -> Option<PathBuf> {
    let rest = uri.strip_prefix("file://")?;
    // `file:///p` or `file://localhost/p`; other hosts are not local files.
    let path = if rest.starts_with('/') {
        rest
    } else {
        rest.strip_prefix("localhost")?
    };
    let path = path.split(['?', '#']).next().unwrap_or(path);
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    use std::os::unix::ffi::OsStringExt;
    Some(PathBuf::from(std::ffi::OsString::from_vec(out)))
}

/// Size of a regular file, if `p` is one.
pub fn file_size(p: &Path) -> Option<u64> {
    std::fs::metadata(p)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim(budget: u64) -> Limits {
        Limits {
            budget,
            ratio: 1.0,
            max_items: MAX_PAGE_ITEMS,
            solo: false,
            end: 0,
        }
    }

    fn run(items: &[Item], from: usize, mut l: Limits) -> Plan {
        l.end = items.len();
        plan(from, &l, &mut |j| items[j].clone())
    }

    #[test]
    fn pages_take_what_fits_and_always_progress() {
        let items = vec![
            Item::Fits(400),
            Item::Fits(400),
            Item::Fits(400),
            Item::Fits(5000),
        ];
        let p = run(&items, 0, lim(1000));
        assert_eq!((p.selected.clone(), p.next, p.estimate), (vec![0], 1, 400));
        let p = run(&items, 0, lim(1100));
        assert_eq!((p.selected.clone(), p.next), (vec![0, 1], 2));
        // An item larger than the budget is still asked for on its own page: only the
        // downstream's answer can say it never fits.
        let p = run(&items, 3, lim(1000));
        assert_eq!((p.selected.clone(), p.next), (vec![3], 4));
        // The ratio scales estimates.
        let p = run(
            &items,
            0,
            Limits {
                ratio: 2.0,
                ..lim(2000)
            },
        );
        assert_eq!(p.selected, vec![0, 1]);
        // max_items and solo.
        let p = run(
            &items,
            0,
            Limits {
                max_items: 1,
                ..lim(100_000)
            },
        );
        assert_eq!((p.selected.clone(), p.next), (vec![0], 1));
        let skip = Item::Skip(acl_entry("p/x", "deny", "p/**"));
        let items2 = vec![Item::Fits(10), skip.clone(), Item::Fits(10)];
        let p = run(
            &items2,
            0,
            Limits {
                solo: true,
                ..lim(100_000)
            },
        );
        assert_eq!(
            (p.selected.clone(), p.skipped.len(), p.next),
            (vec![0], 0, 1)
        );
        let p = run(&items2, 0, lim(100_000));
        assert_eq!(
            (p.selected.clone(), p.skipped.len(), p.next),
            (vec![0, 2], 1, 3)
        );
    }

    #[test]
    fn skipped_items_are_progress_and_cost_their_entries() {
        let tl = Item::Skip(too_large_entry("big.bin", 9_000_000, false, 1000));
        let items = vec![tl.clone(), tl.clone(), Item::Fits(100)];
        let p = run(&items, 0, lim(100_000));
        assert_eq!(
            (p.selected.clone(), p.skipped.len(), p.next),
            (vec![2], 2, 3)
        );
        // With room for only one entry, the page is that entry and moves on by one.
        let one = skip_cost(&too_large_entry("big.bin", 9_000_000, false, 1000)) + ANSWER_OVERHEAD;
        let p = run(&items, 0, lim(one));
        assert_eq!((p.selected.len(), p.skipped.len(), p.next), (0, 1, 1));
        // Skipped entries first, then an item that does not fit: the item opens the next page.
        let p = run(
            &items,
            0,
            lim(one + skip_cost(&too_large_entry("big.bin", 9_000_000, false, 1000)) + 10),
        );
        assert_eq!((p.selected.len(), p.skipped.len(), p.next), (0, 2, 2));
        // Everything skipped: the page ends at the end.
        let p = run(std::slice::from_ref(&tl), 0, lim(10));
        assert_eq!((p.selected.len(), p.skipped.len(), p.next), (0, 1, 1));
    }

    #[test]
    fn positions_round_trip_and_are_checked() {
        let p = Position { i: 3, n: 10 };
        assert_eq!(Position::decode(&p.encode(), 10), Some(p));
        assert_eq!(Position::decode(&p.encode(), 11), None);
        assert_eq!(
            Position::decode(&Position { i: 10, n: 10 }.encode(), 10),
            None
        );
        assert_eq!(Position::decode(b"garbage", 10), None);
    }

    #[test]
    fn decorated_pages_keep_the_schema_and_say_how_to_go_on() {
        let skipped = vec![(1, too_large_entry("b", 5, false, 4))];
        let page = Page {
            tool: "read_multiple_files",
            items_arg: "paths",
            from: 0,
            next: 2,
            total: 3,
            served: 1,
            skipped: &skipped,
            next_cursor: Some("tc1.abc"),
            budget: 4,
        };
        let down = json!({"content": [{"type": "text", "text": "a:\nx\n"}], "structuredContent": {"content": "a:\nx\n"}});
        let mut r = down.clone();
        decorate(&mut r, &page, true);
        assert_eq!(
            r["structuredContent"], down["structuredContent"],
            "schema tools keep their structuredContent"
        );
        assert_eq!(r["_meta"][PAGING_META]["next_cursor"], "tc1.abc");
        assert_eq!(r["_meta"][PAGING_META]["skipped"][0]["code"], "too_large");
        let t = r["content"][1]["text"].as_str().unwrap();
        assert!(
            t.contains("\"cursor\": \"tc1.abc\"") && t.contains("b: too_large"),
            "{t}"
        );
        let mut r = down.clone();
        decorate(&mut r, &page, false);
        assert_eq!(r["structuredContent"]["next_cursor"], "tc1.abc");
        // The last page without skips adds only _meta.
        let last = Page {
            next_cursor: None,
            skipped: &[],
            ..page.clone()
        };
        let mut r = down.clone();
        decorate(&mut r, &last, true);
        assert_eq!(r["content"].as_array().unwrap().len(), 1);
        assert!(r["_meta"][PAGING_META]["next_cursor"].is_null());
        // Nothing served: an isError result, code too_large, refusal in _meta for schema tools.
        let e = empty_page(&page, true);
        assert_eq!(e["isError"], true);
        assert_eq!(
            e["_meta"][crate::engine::refusal::REFUSAL_META]["code"],
            "too_large"
        );
        assert_eq!(e["_meta"][PAGING_META]["next_cursor"], "tc1.abc");
    }

    #[test]
    fn file_uris() {
        assert_eq!(
            file_uri_path("file:///a/b%20c.txt"),
            Some(PathBuf::from("/a/b c.txt"))
        );
        assert_eq!(
            file_uri_path("file://localhost/x"),
            Some(PathBuf::from("/x"))
        );
        assert_eq!(file_uri_path("file:///x?y#z"), Some(PathBuf::from("/x")));
        assert_eq!(file_uri_path("file://host/x"), None);
        assert_eq!(file_uri_path("demo://x"), None);
        assert_eq!(file_uri_path("file:///bad%zz"), None);
        assert_eq!(
            file_uri_path("file:///cut%2"),
            Some(PathBuf::from("/cut%2"))
        );
    }

    /// A request another worker noted a moment ago may not be in flight yet: prune keeps
    /// it; a stale one (a call whose answer never came) goes once the table is large.
    #[test]
    fn prune_spares_requests_noted_moments_ago_and_drops_stale_ones() {
        let g = Governor::new(
            &GovernorConfig {
                max_response_bytes: 1000,
            },
            &[],
        );
        let call = || Track::Call {
            tool: "t".into(),
            args: Value::Null,
        };
        for i in 0..100 {
            g.track(IdKey::of(&json!(i)), call());
        }
        // Nothing is in flight by the engine's tables, and all are young: all stay.
        g.prune(0, |_| false);
        assert_eq!(g.tracked().len(), 100);
        // The first 80 age past the grace: they go, the 20 young ones stay.
        let old = Instant::now() - PRUNE_GRACE - Duration::from_secs(1);
        for i in 0..80 {
            g.tracked().get_mut(&IdKey::of(&json!(i))).unwrap().1 = old;
        }
        g.prune(0, |k| *k == IdKey::of(&json!(0)));
        let t = g.tracked();
        assert_eq!(t.len(), 21, "20 young ones and the one still in flight");
        assert!(t.contains_key(&IdKey::of(&json!(0))) && t.contains_key(&IdKey::of(&json!(99))));
    }

    #[test]
    fn line_limit_is_the_cap_only_when_every_waiting_request_is_capped() {
        let g = Governor::new(
            &GovernorConfig {
                max_response_bytes: 1000,
            },
            &[],
        );
        let big = 1 << 24;
        assert_eq!(g.line_limit(std::iter::empty(), big), big, "nothing waits");
        let k = |v: Value| IdKey::of(&v);
        g.track(
            k(json!(1)),
            Track::Call {
                tool: "t".into(),
                args: Value::Null,
            },
        );
        let one = [k(json!(1))];
        assert_eq!(g.line_limit(one.iter(), big), 1000);
        let two = [k(json!(1)), k(json!(2))];
        assert_eq!(g.line_limit(two.iter(), big), big);
        // An answer that spells the id another way is the same request's, by value.
        assert!(
            !g.passes(&k(json!(1.0)), 1001),
            "over the cap, whatever the spelling"
        );
        let (tx, _rx) = oneshot::channel();
        g.untrack(&k(json!(1.0)));
        g.track(k(json!("tc-shim-gov-1")), Track::Page(tx));
        assert_eq!(
            g.line_limit(std::iter::empty(), big),
            1000,
            "a page request waits"
        );
    }
}
