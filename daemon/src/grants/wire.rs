//! Grants on the wire: the human's `GrantScope` read into a [`GrantAsk`] (malformed asks
//! refused by name), and a stored grant shown as a `Grant`.

use std::collections::BTreeMap;

use tc_core::grant::{ArgRule, Scope};
use tc_core::Reason;
use tc_proto::v1;

use super::{status, GrantAsk};
use crate::error::DaemonError;
use crate::store::queries::GrantRow;

/// The most arguments one ask may widen.
const MAX_WIDENED: usize = 64;

/// The ask in an `ApproveRequest`, checked for shape (the scope itself is checked against
/// the approved call when the grant is given).
pub fn ask_of(s: v1::GrantScope) -> Result<GrantAsk, DaemonError> {
    let bad = |why: String| DaemonError::refused(Reason::GrantRefused, why);
    if s.globs.len() + s.any.len() > MAX_WIDENED {
        return Err(bad(format!(
            "a grant widens at most {MAX_WIDENED} arguments"
        )));
    }
    let mut widen = BTreeMap::new();
    for (arg, glob) in s.globs {
        if widen.insert(arg.clone(), ArgRule::Glob(glob)).is_some() {
            return Err(bad(format!("argument {arg:?} is widened twice")));
        }
    }
    for arg in s.any {
        if widen.insert(arg.clone(), ArgRule::Any).is_some() {
            return Err(bad(format!("argument {arg:?} is widened twice")));
        }
    }
    Ok(GrantAsk {
        seconds: s.seconds,
        uses: s.uses,
        widen,
    })
}

/// A stored grant as `ListGrants` shows it (the caller unqualified by the service).
pub fn to_proto(g: &GrantRow, caller: &str, now: i64) -> v1::Grant {
    let scope = serde_json::from_str::<Scope>(&g.scope)
        .map(|s| s.describe())
        .unwrap_or_else(|_| "(unreadable scope: covers nothing)".into());
    v1::Grant {
        id: g.id.clone(),
        vault: g.vault.clone(),
        tool: g.tool.clone(),
        caller: caller.to_string(),
        scope,
        scope_json: g.scope.clone(),
        given_at_ms: g.given_at,
        expires_at_ms: g.expires_at,
        uses_left: g.uses_left.unwrap_or(-1),
        used: g.used,
        last_used_at_ms: g.last_used_at.unwrap_or(0),
        revoked_at_ms: g.revoked_at.unwrap_or(0),
        request_id: g.request_id.clone(),
        given_by_uid: g.given_by.unwrap_or(u32::MAX),
        status: status(g, now).to_string(),
    }
}
