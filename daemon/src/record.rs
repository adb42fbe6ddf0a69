//! What the ledger records, whatever stores it: the binding every confirmation is bound
//! to, and the audit events committed with each change (imports only `error.rs`).

use tc_core::Reason;

use crate::error::DaemonError;

/// A raised request's status as stored (`expired` is only ever shown, never stored).
pub const PENDING: &str = "pending";
pub const APPROVED: &str = "approved";
pub const DECLINED: &str = "declined";
pub const EXPIRED: &str = "expired";

/// What every confirmation is bound to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Binding {
    pub vault: String,
    pub tool: String,
    pub caller: String,
    pub args_hash: String,
}

impl Binding {
    /// Refuses empty fields and malformed hashes before they reach the database.
    pub fn check(&self) -> Result<(), DaemonError> {
        // A guarded-mode caller carries its owner's " (uid N)" (at most 17 bytes more).
        for (name, v, max) in [
            ("vault", &self.vault, 256),
            ("tool", &self.tool, 256),
            ("caller", &self.caller, 256 + 17),
        ] {
            if v.is_empty() || v.len() > max {
                return Err(DaemonError::refused(
                    Reason::BadArgument,
                    format!("{name} must be 1..=256 bytes"),
                ));
            }
        }
        check_hash("args_hash", &self.args_hash)
    }

    /// An event of `kind` about this call.
    pub(crate) fn event(
        &self,
        kind: &'static str,
        state_fp: &str,
        detail: serde_json::Value,
    ) -> NewEvent {
        NewEvent {
            kind,
            vault: self.vault.clone(),
            tool: self.tool.clone(),
            caller: self.caller.clone(),
            args_hash: self.args_hash.clone(),
            state_fp: state_fp.to_string(),
            detail,
            // The store reads the owner from the qualified caller.
            owner: None,
        }
    }
}

/// Refuses `v` unless it is 64 lowercase hex digits.
pub(crate) fn check_hash(name: &str, v: &str) -> Result<(), DaemonError> {
    if tc_core::hash::is_sha256_hex(v) {
        Ok(())
    } else {
        Err(DaemonError::refused(
            Reason::BadArgument,
            format!("{name} must be 64 lowercase hex digits"),
        ))
    }
}

/// An audit event to commit alongside a state change. Never holds a token or secret.
#[derive(Debug, Default, Clone)]
pub struct NewEvent {
    pub kind: &'static str,
    pub vault: String,
    pub tool: String,
    pub caller: String,
    pub args_hash: String,
    pub state_fp: String,
    pub detail: serde_json::Value,
    /// The human it concerns (guarded mode); when unset, the uid a qualified caller names.
    pub owner: Option<u32>,
}

impl NewEvent {
    /// The detail as stored (`{}` for none).
    pub fn detail_text(&self) -> String {
        if self.detail.is_null() {
            "{}".to_string()
        } else {
            self.detail.to_string()
        }
    }

    /// The uid it belongs to: the one given, else the one a qualified caller names.
    pub fn owner_uid(&self) -> Option<u32> {
        self.owner.or_else(|| tc_core::owner::of(&self.caller))
    }

    /// Its size as retention counts it: [`ROW_OVERHEAD`] plus the UTF-8 bytes of its fields
    /// (`detail` as stored).
    pub fn size(&self, detail: &str) -> u64 {
        ROW_OVERHEAD
            + [
                self.kind,
                &self.vault,
                &self.tool,
                &self.caller,
                &self.args_hash,
                &self.state_fp,
                detail,
            ]
            .iter()
            .map(|f| f.len() as u64)
            .sum::<u64>()
    }
}

/// Fixed bytes counted per event on top of its fields (id, timestamp, record header).
pub const ROW_OVERHEAD: u64 = 64;

/// A committed event as read back.
#[derive(Debug, Clone)]
pub struct EventRow {
    pub id: i64,
    pub at_ms: i64,
    pub kind: String,
    pub vault: String,
    pub tool: String,
    pub caller: String,
    pub args_hash: String,
    pub state_fp: String,
    pub detail: String,
}

/// The counter key of events pruned for `reason` (`age` or `size`).
pub fn pruned_key(reason: &str) -> (String, String) {
    (
        "tc_events_pruned_total".into(),
        format!("reason=\"{reason}\""),
    )
}

/// The counters one event of `kind` adds to.
pub fn counter_keys(kind: &str) -> Vec<(String, String)> {
    let mut keys = vec![("tc_events_total".to_string(), format!("kind=\"{kind}\""))];
    if kind == tc_core::codes::events::OVERFLOW {
        keys.push(("governor_truncations_total".to_string(), String::new()));
    }
    keys
}
