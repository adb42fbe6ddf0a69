//! Refusals: the tool errors the client is told when the daemon, the policy or the call
//! itself stops a `tools/call` (nothing ran for any of them).

use serde_json::{json, Value};
use tc_core::ErrorCode;
use tonic::Status;

use crate::daemon_client::DaemonError;
use crate::engine::forward::internal::InternalError;
use crate::engine::judge::policy::{self, PolicyError};
use crate::engine::judge::targets::FingerprintError;
use crate::engine::refusal::Refusal;
use crate::engine::refusal::{self, Shown};
use crate::engine::Shim;

impl Shim {
    /// What a daemon failure or refusal means for a gated call.
    pub(in crate::engine) fn daemon_result(&self, e: &DaemonError, s: &Shown<'_>) -> Refusal {
        match e {
            DaemonError::Unreachable { socket, why } => unreachable_result(
                &format!("Tool `{}` needs a human confirmation", s.tool),
                s,
                socket,
                why,
            ),
            DaemonError::Refused(status) => refused_result(e.reason(), status, s),
        }
    }
}

/// [`Shim::daemon_result`] of a refusal (`reason`: the daemon's, if it gave one).
fn refused_result(reason: Option<tc_core::Reason>, status: &Status, s: &Shown<'_>) -> Refusal {
    let details = json!({"tool": s.tool, "vault": s.vault, "caller": s.caller, "args_hash": s.args_hash, "state_fp": s.state_fp});
    match reason {
        // No refusal reason: the daemon failed (disk full, read-only, internal) and
        // rolled back. Nothing about the confirmation is wrong, so asking the human
        // for a fresh one would not help; the same call works once the daemon does.
        None => {
            let text = format!(
                "Tool `{}` needs a human confirmation, but the tc daemon failed ({}). The call was NOT run \
                 and no confirmation was used up (an elicit_token you hold stays valid). Ask the human to \
                 fix the daemon (its log: `journalctl --user -u tcd`), then retry the same call.",
                s.tool,
                status.message()
            );
            let mut d = details;
            d["reason"] = json!("daemon_error");
            Refusal::new(ErrorCode::ConfirmationUnavailable, text, d)
                .recovery(json!({"command": "journalctl --user -u tcd"}))
        }
        Some(tc_core::Reason::RateLimited) => refusal::rate_limited(s, status.message()),
        Some(tc_core::Reason::ReplayDrift) => {
            let text = format!(
                "The confirmation for `{}` no longer matches: its target changed since the human was asked, \
                 so nothing was run and the confirmation is spent. Send the call again WITHOUT elicit_token \
                 or requestState to request a fresh confirmation from the human.",
                s.tool
            );
            Refusal::new(ErrorCode::ReplayDrift, text, details)
        }
        // A grant approved the call as it was raised, then was revoked or ended before
        // it ran: no approval stands, and the retry asks a human.
        Some(tc_core::Reason::Revoked) => {
            let text = format!(
                "Approval for the tool call `{}` was not obtained: the grant that covered it was                  revoked or ended before it ran ({}). Nothing was run. Send the same call again:                  a human will be asked.",
                s.tool,
                status.message()
            );
            let mut d = details;
            d["reason"] = json!("revoked");
            Refusal::new(ErrorCode::ApprovalNotObtained, text, d)
        }
        Some(reason) => {
            let reason = reason.as_str();
            let text = format!(
                "The confirmation token for `{}` was refused ({reason}: {}). Nothing was run. \
                 Send the call again WITHOUT elicit_token to request a fresh confirmation from the human.",
                s.tool,
                status.message()
            );
            let mut d = details;
            d["reason"] = json!(reason);
            Refusal::new(ErrorCode::InvalidInput, text, d)
        }
    }
}

/// `confirmation_unavailable`: what tcd was needed for (`lead`), where it was looked for,
/// and how to start it; nothing ran.
pub(in crate::engine) fn unreachable_result(
    lead: &str,
    s: &Shown<'_>,
    socket: &std::path::Path,
    why: &str,
) -> Refusal {
    let text = format!(
        "{lead}, but the tc daemon is not reachable at {} ({why}). The call was NOT run. Ask the \
         human to start it with `systemctl --user start tcd`, then retry the call.",
        socket.display()
    );
    let mut d = s.details();
    d["socket"] = json!(socket.display().to_string());
    Refusal::new(ErrorCode::ConfirmationUnavailable, text, d)
        .recovery(json!({"command": "systemctl --user start tcd"}))
}

/// What a policy refusal (ACL, path escape, unjudgeable argument) tells the client.
pub(in crate::engine) fn policy_result(e: &PolicyError) -> Refusal {
    match e {
        PolicyError::Acl { path, list, glob } => Refusal::new(
            ErrorCode::AclDenied,
            format!("Refused: {e}. Nothing was run."),
            json!({"path": path, "list": list, "glob": glob}),
        ),
        PolicyError::InvalidInput { arg, why } => invalid_path(arg, why),
        PolicyError::Name { arg, why } => invalid_path(arg, why),
        PolicyError::Glob(_) => Refusal::new(ErrorCode::InvalidInput, e.to_string(), json!({})),
        PolicyError::Unjudged { arg, .. } => Refusal::new(
            ErrorCode::AclDenied,
            format!("Refused: {e}. Nothing was run."),
            json!({"argument": arg, "reason": "unjudgeable"}),
        ),
    }
}

/// A path argument refused before any ACL: it escapes the root, or names no one entry.
fn invalid_path(arg: &str, why: &dyn std::fmt::Display) -> Refusal {
    Refusal::new(
        ErrorCode::InvalidInput,
        format!("Refused: argument `{arg}`: {why}. Nothing was run."),
        json!({"argument": arg, "reason": "path_escape"}),
    )
}

/// The tool list could not be read, so the floor cannot be seen: a tool the policy does
/// not gate is not run.
pub(in crate::engine) fn unlisted_result(name: &str, e: &InternalError) -> Refusal {
    let text = format!(
        "tc-shim could not read the server's tool list ({e}), so it cannot tell whether \
         `{name}` is destructive; the call was not run. Retry once the server answers tools/list."
    );
    Refusal::new(ErrorCode::InvalidInput, text, json!({"tool": name}))
}

/// A destructive tool (the floor) with no gate entry: disabled.
pub(in crate::engine) fn floor_result(name: &str, def: Option<&Value>) -> Refusal {
    let hint = policy::missing_gate_hint(name, def);
    let text = format!(
        "Tool `{name}` is destructive (destructiveHint: true) and this vault has no gate entry for it, \
         so it is disabled. Ask the operator to add to the tc config: {hint}"
    );
    Refusal::new(
        ErrorCode::GateNotConfigured,
        text,
        json!({"tool": name, "add": hint}),
    )
}

/// A gated call carrying one of tc's own fields (`k`), which no confirmation covers.
pub(in crate::engine) fn reserved_argument_result(name: &str, k: &str) -> Refusal {
    let text = format!(
        "`{k}` is reserved by tc: it is not part of what a confirmation approves, so a gated \
         call cannot pass it in `arguments`; the call was not run. Send it without `{k}`."
    );
    Refusal::new(
        ErrorCode::InvalidInput,
        text,
        json!({"tool": name, "argument": k}),
    )
}

/// The confirmation target of a gated call could not be computed.
pub(in crate::engine) fn target_result(name: &str, e: &FingerprintError) -> Refusal {
    let text = format!("Cannot compute the confirmation target of `{name}`: {e}");
    Refusal::new(ErrorCode::InvalidInput, text, json!({"tool": name}))
}
