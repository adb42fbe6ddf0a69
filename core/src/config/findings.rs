//! What validation found so far ([`Findings`]): every problem at its key, in the vault and
//! gate being checked; each section's check records into it, `validate.rs` reports them.

use super::error::Problem;

/// The problems found so far, and where validation is looking: a problem recorded now
/// is in this vault and this gate.
#[derive(Default)]
pub(super) struct Findings {
    problems: Vec<Problem>,
    vault: Option<String>,
    tool: Option<String>,
}

impl Findings {
    /// Records that `key` breaks a rule, and why.
    pub(super) fn add(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.problems.push(Problem {
            key: key.into(),
            vault: self.vault.clone(),
            tool: self.tool.clone(),
            reason: reason.into(),
        });
    }

    /// Problems recorded from now on are in the vault `id`.
    pub(super) fn in_vault(&mut self, id: &str) {
        self.vault = Some(id.to_string());
    }

    /// Problems recorded from now on are in the gate for `tool` (None: in no gate).
    pub(super) fn in_gate(&mut self, tool: Option<&str>) {
        self.tool = tool.map(str::to_string);
    }

    /// Records `reason` at `key` unless `ok`.
    pub(super) fn require(&mut self, ok: bool, key: impl Into<String>, reason: impl Into<String>) {
        if !ok {
            self.add(key, reason);
        }
    }

    /// Every problem recorded, in order.
    pub(super) fn into_problems(self) -> Vec<Problem> {
        self.problems
    }
}
