//! The response governor's state and rules: the byte cap, which answers it watches,
//! paging plans for `[[vaults.paged]]` tools, cursor positions, and the results it builds.
//!
//! The engine's side (what happens to a line, a call, a page) is `govern/mod.rs` and
//! `govern/paged.rs`; this module holds no I/O except `stat()` through the `inspect` closure.
//! Plans are in `plan.rs`, the results and refusals it builds in `page.rs`.

mod page;
mod plan;
pub use page::*;
pub use plan::*;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tc_core::config::{GovernorConfig, Paged};
use tokio::sync::oneshot;

use crate::wire::ids::IdKey;

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
        /// The target's fingerprint the event is about; empty when none.
        state_fp: String,
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

#[cfg(test)]
mod tests;
