//! The page's history: the answered, expired and consumed requests from the audit log,
//! newest first, escaped for display.

use serde::Serialize;
use tc_core::codes::events;
use tc_core::display::escape;

use crate::error::DaemonError;
use crate::ledger::Ledger;

/// Rows shown.
const LIMIT: u32 = 100;
const KINDS: [&str; 4] = [
    events::APPROVED,
    events::DECLINED,
    events::EXPIRED,
    events::CONSUMED,
];

#[derive(Debug, Serialize)]
pub struct HistoryRow {
    pub at_ms: i64,
    /// approved, declined, expired or consumed.
    pub what: String,
    pub vault: String,
    pub tool: String,
    pub caller: String,
    pub request_id: String,
    /// The decline's reason, the approval's factor or the route consumed.
    pub note: String,
}

fn text(d: &serde_json::Value, k: &str) -> String {
    match d.get(k) {
        Some(serde_json::Value::String(s)) => escape(s).into_owned(),
        Some(serde_json::Value::Null) | None => String::new(),
        Some(v) => escape(&v.to_string()).into_owned(),
    }
}

fn row(at_ms: i64, kind: &str, v: String, t: String, c: String, detail: &str) -> HistoryRow {
    let d: serde_json::Value = serde_json::from_str(detail).unwrap_or_default();
    let what = kind.rsplit('.').next().unwrap_or(kind).to_string();
    let note = match kind {
        events::DECLINED => text(&d, "reason"),
        events::APPROVED => format!("factor: {}", text(&d, "factor")),
        events::CONSUMED => text(&d, "route"),
        _ => String::new(),
    };
    HistoryRow {
        at_ms,
        what,
        vault: escape(&v).into_owned(),
        tool: escape(&t).into_owned(),
        caller: escape(&c).into_owned(),
        request_id: text(&d, "request_id"),
        note,
    }
}

/// The latest history rows, only `owner`'s when given (runs on the store thread).
pub fn recent(l: &Ledger, owner: Option<u32>) -> Result<Vec<HistoryRow>, DaemonError> {
    let rows = l.store.read(|c| Ok(c.history(&KINDS, LIMIT, owner)?))?;
    Ok(rows
        .into_iter()
        .map(|r| row(r.at_ms, &r.kind, r.vault, r.tool, r.caller, &r.detail))
        .collect())
}
