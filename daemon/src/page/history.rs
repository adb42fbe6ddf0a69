//! The page's history: the answered, expired and consumed requests, how each call that
//! waited on a human ended, and the grants given, used, revoked and ended, from the audit
//! log, newest first, escaped for display.

use serde::Serialize;
use tc_core::codes::events;
use tc_core::display::escape;

use crate::error::DaemonError;
use crate::ledger::Ledger;

/// Rows shown.
const LIMIT: u32 = 100;
const KINDS: [&str; 9] = [
    events::APPROVED,
    events::DECLINED,
    events::EXPIRED,
    events::CONSUMED,
    events::GRANT_GIVEN,
    events::GRANT_USED,
    events::GRANT_REVOKED,
    events::GRANT_ENDED,
    events::CALL_OUTCOME,
];

#[derive(Debug, Serialize)]
pub struct HistoryRow {
    pub at_ms: i64,
    /// approved, declined, expired, consumed, grant given/used/revoked/ended, or how a
    /// call that waited on a human ended (executed, denied, errored, unknown).
    pub what: String,
    pub vault: String,
    pub tool: String,
    pub caller: String,
    pub request_id: String,
    /// The decline's reason, the approval's factor, the route consumed or the grant's id.
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
    let last = kind.rsplit('.').next().unwrap_or(kind);
    let grant = kind.starts_with("tc.grant.");
    let what = if grant {
        format!("grant {last}")
    } else if kind == events::CALL_OUTCOME {
        text(&d, "outcome")
    } else {
        last.to_string()
    };
    let note = match kind {
        events::DECLINED => text(&d, "reason"),
        events::APPROVED => format!("factor: {}", text(&d, "factor")),
        events::CONSUMED | events::CALL_OUTCOME => text(&d, "route"),
        events::GRANT_ENDED => format!("{} ({})", text(&d, "grant_id"), text(&d, "why")),
        _ if grant => text(&d, "grant_id"),
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
