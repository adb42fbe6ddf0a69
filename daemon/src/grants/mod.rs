//! Grants: with an approval, a human lets similar calls through for a bounded time
//! ([`tc_core::grant::Scope`]), and can take that back; every use is raised and logged.
//!
//! A grant is given only inside `Approve` (so in guarded mode only with the factor), for
//! the vault, caller and tool of the approved request and for the uid that raised it. A
//! raise the grant covers is approved in the raise's own transaction, by one conditional
//! update of the grant's use count, and is redeemed like any approval; a revoke or the
//! expiry between that raise and the redeem refuses the call.

pub mod wire;

use std::collections::BTreeMap;

use rand::Rng;
use serde_json::json;
use tc_core::codes::events;
use tc_core::grant::{ArgRule, RealPaths, Scope};
use tc_core::{now_ms, Reason};

use crate::error::DaemonError;
use crate::grant_rules::GrantRule;
use crate::ledger::Ledger;
use crate::record::{Binding, NewEvent};
use crate::store::queries::{GrantRow, NewToken, RaisedRow, Tx};

/// Grant ids: "g-" and 10 characters without look-alikes.
const ID_ALPHABET: &[u8] = b"23456789abcdefghjkmnpqrstuvwxyz";
const ID_LEN: usize = 10;
/// How long ended grants stay listed (`tcctl grants` shows what just ended).
pub const ENDED_KEPT_MS: i64 = 24 * 3_600_000;

/// What the human asks for with an approval.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GrantAsk {
    /// Its life in seconds (0: [`tc_core::grant::DEFAULT_SECONDS`]).
    pub seconds: u64,
    /// Uses (0: no count).
    pub uses: u32,
    /// The arguments widened beyond the approved call's values.
    pub widen: BTreeMap<String, ArgRule>,
}

fn refused(why: impl Into<String>) -> DaemonError {
    DaemonError::refused(Reason::GrantRefused, why)
}

/// The rule of the gate the request's tool is under; refused when the gate forbids grants
/// or the daemon's config has no such gate (it cannot tell, so it does not grant).
fn rule_for(l: &Ledger, b: &Binding) -> Result<GrantRule, DaemonError> {
    let vault = b.vault.as_str();
    let Some(rule) = l.grant_rules.get(&(vault.to_string(), b.tool.clone())) else {
        return Err(refused(format!(
            "tcd's config has no gate for tool {:?} in vault {vault:?}, so it cannot tell whether \
             grants are allowed for it; approve without --grant",
            b.tool
        )));
    };
    if !rule.allowed {
        return Err(refused(format!(
            "the gate for tool {:?} in vault {vault:?} forbids grants (grants = false): each of its \
             calls needs its own approval",
            b.tool
        )));
    }
    Ok(rule.clone())
}

/// The grant's expiry and uses as asked, within the gate's caps.
fn bounds(
    rule: &GrantRule,
    ask: &GrantAsk,
    tool: &str,
    now: i64,
) -> Result<(i64, Option<i64>), DaemonError> {
    let seconds = if ask.seconds == 0 {
        tc_core::grant::DEFAULT_SECONDS
    } else {
        ask.seconds
    };
    if seconds > rule.max_seconds {
        return Err(refused(format!(
            "a grant for tool {tool:?} lasts at most {} s (the gate's max_grant_seconds); {seconds} s was asked",
            rule.max_seconds
        )));
    }
    let uses = match (ask.uses, rule.max_uses) {
        (0, Some(max)) => {
            return Err(refused(format!(
                "a grant for tool {tool:?} needs a use count of at most {max} (the gate's max_grant_uses)"
            )))
        }
        (n, Some(max)) if n > max => {
            return Err(refused(format!(
                "a grant for tool {tool:?} allows at most {max} uses (the gate's max_grant_uses); {n} were asked"
            )))
        }
        (0, None) => None,
        (n, _) => Some(i64::from(n)),
    };
    Ok((now + seconds as i64 * 1000, uses))
}

fn new_id() -> String {
    let mut rng = rand::rngs::OsRng;
    let tail: String = (0..ID_LEN)
        .map(|_| ID_ALPHABET[rng.gen_range(0..ID_ALPHABET.len())] as char)
        .collect();
    format!("g-{tail}")
}

/// Whether `s` could be a grant id (checked before it reaches the database).
pub fn is_grant_id(s: &str) -> bool {
    s.strip_prefix("g-")
        .is_some_and(|t| t.len() == ID_LEN && t.bytes().all(|c| ID_ALPHABET.contains(&c)))
}

/// A raised row's stored real paths (none when it stored nothing readable).
fn paths_of(row: &RaisedRow) -> RealPaths {
    serde_json::from_str(&row.real_paths).unwrap_or_default()
}

/// Gives a grant with the approval of `row` (inside the approval's transaction).
pub(crate) fn give(
    l: &Ledger,
    tx: &dyn Tx,
    evs: &mut Vec<NewEvent>,
    row: &RaisedRow,
    ask: &GrantAsk,
    by: Option<u32>,
    now: i64,
) -> Result<Result<String, DaemonError>, DaemonError> {
    let b = &row.binding;
    let rule = match rule_for(l, b) {
        Ok(r) => r,
        Err(e) => return Ok(Err(e)),
    };
    let (expires_at, uses_left) = match bounds(&rule, ask, &b.tool, now) {
        Ok(x) => x,
        Err(e) => return Ok(Err(e)),
    };
    if let Some(arg) = rule
        .path_args
        .iter()
        .find(|a| ask.widen.get(*a) == Some(&ArgRule::Any))
    {
        return Ok(Err(refused(format!(
            "argument {arg:?} names files (the gate reads it as a path): widen it with a glob \
             under the vault root, not to any value"
        ))));
    }
    let Ok(args) = serde_json::from_str::<serde_json::Value>(&row.args_json) else {
        return Ok(Err(refused(
            "the request's arguments were not sent in full, so no scope can be written from them",
        )));
    };
    let scope = match Scope::of_call(&args, &ask.widen, &paths_of(row)) {
        Ok(s) => s,
        Err(e) => return Ok(Err(refused(format!("the grant cannot be given: {e}")))),
    };
    let g = GrantRow {
        id: new_id(),
        vault: b.vault.clone(),
        tool: b.tool.clone(),
        caller: b.caller.clone(),
        scope: serde_json::to_string(&scope).map_err(|e| DaemonError::Internal(e.to_string()))?,
        given_at: now,
        expires_at,
        uses_left,
        used: 0,
        last_used_at: None,
        revoked_at: None,
        ended_logged: false,
        request_id: row.request_id.clone().unwrap_or_default(),
        given_by: by,
        raised_by: row.uid,
    };
    tx.insert_grant(&g)?;
    evs.push(b.event(
        events::GRANT_GIVEN,
        &row.state_fp,
        json!({ "grant_id": g.id, "request_id": g.request_id, "scope": scope.describe(),
                "expires_at_ms": expires_at, "uses": uses_left, "uid": by }),
    ));
    Ok(Ok(g.id))
}

/// What a raise tells [`cover`] of its call.
pub(crate) struct Raising<'a> {
    pub binding: &'a Binding,
    pub state_fp: &'a str,
    pub args_json: &'a str,
    pub real_paths: &'a RealPaths,
    pub uid: Option<u32>,
    pub request_id: &'a str,
}

/// Inside a raise's transaction: when a live grant covers the call, takes one use of it
/// and approves the raised request under it; the grant's id.
pub(crate) fn cover(
    l: &Ledger,
    tx: &dyn Tx,
    evs: &mut Vec<NewEvent>,
    r: &Raising<'_>,
    now: i64,
) -> Result<Option<String>, DaemonError> {
    let b = r.binding;
    // A tool whose gate gives no grants costs its raises no query.
    let rule = l.grant_rules.get(&(b.vault.clone(), b.tool.clone()));
    if rule.is_none_or(|g| !g.allowed) {
        return Ok(None);
    }
    let live = tx.live_grants(&b.vault, &b.caller, &b.tool, now)?;
    if live.is_empty() {
        return Ok(None);
    }
    let Ok(args) = serde_json::from_str::<serde_json::Value>(r.args_json) else {
        return Ok(None);
    };
    for g in live.iter().filter(|g| g.raised_by == r.uid) {
        let Ok(scope) = serde_json::from_str::<Scope>(&g.scope) else {
            continue;
        };
        if !scope.covers(&args, r.real_paths) || !tx.use_grant(&g.id, now)? {
            continue;
        }
        let mut secret = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut secret);
        let exp = now + l.ttl_ms;
        let token_id = tx.insert_token(&NewToken {
            hash: &secret,
            binding: b,
            state_fp: r.state_fp,
            created_at: now,
            expires_at: exp,
        })?;
        tx.set_approved(r.request_id, token_id, exp, &g.id)?;
        evs.push(b.event(
            events::GRANT_USED,
            r.state_fp,
            json!({ "grant_id": g.id, "request_id": r.request_id, "uses_left": g.uses_left.map(|n| n - 1) }),
        ));
        return Ok(Some(g.id.clone()));
    }
    Ok(None)
}

/// At the redeem of a request a grant approved: the grant must still be live (not
/// revoked, not expired); a use already taken is not given back.
pub(crate) fn still_live(tx: &dyn Tx, grant_id: &str, now: i64) -> Result<(), DaemonError> {
    match tx.grant_by_id(grant_id)? {
        Some(g) if g.revoked_at.is_none() && g.expires_at > now => Ok(()),
        Some(g) if g.revoked_at.is_some() => Err(DaemonError::refused(
            Reason::Revoked,
            format!("grant {grant_id} was revoked before this call ran; nothing was applied (the retry asks a human)"),
        )),
        _ => Err(DaemonError::refused(
            Reason::Revoked,
            format!("grant {grant_id} expired before this call ran; nothing was applied (the retry asks a human)"),
        )),
    }
}

/// Logs `tc.grant.ended` once for each grant past its expiry or last use.
pub(crate) fn log_ended(tx: &dyn Tx, evs: &mut Vec<NewEvent>, now: i64) -> Result<(), DaemonError> {
    for g in tx.unlogged_ended_grants(now)? {
        let why = if g.uses_left == Some(0) {
            "used up"
        } else {
            "expired"
        };
        evs.push(grant_event(
            &g,
            events::GRANT_ENDED,
            json!({ "grant_id": g.id, "why": why }),
        ));
        tx.mark_grant_ended(&g.id)?;
    }
    tx.delete_grants_before(now - ENDED_KEPT_MS)?;
    Ok(())
}

fn grant_event(g: &GrantRow, kind: &'static str, detail: serde_json::Value) -> NewEvent {
    NewEvent {
        kind,
        vault: g.vault.clone(),
        tool: g.tool.clone(),
        caller: g.caller.clone(),
        detail,
        owner: g.raised_by,
        ..Default::default()
    }
}

/// A grant's status as shown.
pub fn status(g: &GrantRow, now: i64) -> &'static str {
    if g.revoked_at.is_some() {
        "revoked"
    } else if g.uses_left == Some(0) {
        "used up"
    } else if g.expires_at <= now {
        "expired"
    } else {
        "live"
    }
}

/// Whether `viewer` may see (and revoke) grant `g`: in guarded mode its humans and root.
fn visible(l: &Ledger, g: &GrantRow, viewer: Option<u32>) -> bool {
    l.mode() != tc_core::config::Mode::Guarded
        || viewer == Some(0)
        || (viewer.is_some() && (viewer == g.given_by || viewer == g.raised_by))
}

impl Ledger {
    /// Grants live now or ended within the last day, newest first, as `viewer` may see them.
    pub fn grants(&self, viewer: Option<u32>) -> Result<Vec<GrantRow>, DaemonError> {
        let since = now_ms() - ENDED_KEPT_MS;
        let all = self.store.read(|tx| Ok(tx.list_grants(since)?))?;
        Ok(all
            .into_iter()
            .filter(|g| visible(self, g, viewer))
            .collect())
    }

    /// Revokes grant `id`: the next call it would have covered asks a human again, and a
    /// call it approved that has not run yet is refused at its redeem.
    pub fn revoke_grant(&self, id: &str, viewer: Option<u32>) -> Result<(), DaemonError> {
        let unknown = || {
            DaemonError::refused(
                Reason::Unknown,
                format!("no grant {id:?} (the id is from `tcctl grants`)"),
            )
        };
        if !is_grant_id(id) {
            return Err(unknown());
        }
        let now = now_ms();
        self.store.write(|tx, evs| {
            let Some(g) = tx.grant_by_id(id)?.filter(|g| visible(self, g, viewer)) else {
                return Err(unknown());
            };
            if !tx.revoke_grant(id, now)? {
                return Err(DaemonError::refused(
                    Reason::Spent,
                    format!("grant {id} was already revoked"),
                ));
            }
            evs.push(grant_event(
                &g,
                events::GRANT_REVOKED,
                json!({ "grant_id": id, "uid": viewer }),
            ));
            Ok(Ok(()))
        })
    }
}

#[cfg(test)]
mod tests;
