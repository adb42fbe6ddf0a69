//! Paging plans: which items of a `[[vaults.paged]]` tool's call fit the next page under
//! the byte cap, what an item is estimated to cost, and the entries of the ones skipped.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tc_core::ErrorCode;

use super::*;

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

pub(super) fn skip_line(e: &Value) -> String {
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
