//! Approve by request: raised requests get short ids; a human approves or
//! declines one by id, and the agent's identical retry redeems the approval once.
//!
//! An approval is a token row nobody is ever shown (its hash is of random bytes), so
//! Redeem's checks, Release and RecordConsumed treat it exactly as a minted token. A
//! decline sticks for one TTL from the moment it was given (never shorter than the
//! request's own expiry); a request that expires unanswered reads as expired, once, and
//! the next retry raises a fresh one.

use rand::Rng;
use serde_json::json;
use tc_core::codes::events;
use tc_core::{now_ms, Reason};

use crate::error::DaemonError;
use crate::factor::{self, Approver};
use crate::ledger::Ledger;
use crate::raised::{Pending, Raised};
use crate::record::{Binding, NewEvent, APPROVED, DECLINED, EXPIRED, PENDING};
use crate::store::queries::{NewRaised, NewToken, RaisedRow as Row, TokenRow, Tx, Written};

/// Request ids: 8 characters without look-alikes (no 0/o, 1/l/i), ~8.5e11 of them.
const ID_ALPHABET: &[u8] = b"23456789abcdefghjkmnpqrstuvwxyz";
const ID_LEN: usize = 8;
/// The longest argument summary a raised request keeps, in characters.
pub const SUMMARY_MAX: usize = 8000;
/// The longest `args_json` kept, in bytes; a longer one is cut visibly.
pub const ARGS_JSON_MAX: usize = 64 * 1024;
/// The longest `covers` text and decline reason kept, in characters.
pub const COVERS_MAX: usize = 2000;
pub const REASON_MAX: usize = 500;
/// How long a raised request is kept past its expiry, so a retry is told it expired.
pub const EXPIRED_KEPT_MS: i64 = 3_600_000;
/// The most raised requests kept at once, over every vault and caller. Rate limits are
/// keyed by names the raiser chooses, so only a total bounds what a flood of raises under
/// many caller names writes to disk (each row holds up to [`ARGS_JSON_MAX`] arguments).
pub const MAX_RAISED: i64 = 1000;

/// What a raise carries besides its binding, all shown to the human.
#[derive(Debug, Default, Clone, Copy)]
pub struct RaiseText<'a> {
    pub summary: &'a str,
    pub args_json: &'a str,
    pub covers: &'a str,
    /// The gate's preview (cut to `tc_core::preview::TEXT_MAX` bytes).
    pub preview: &'a str,
    /// Where the call's path arguments really lead (what grants are matched against).
    pub real_paths: Option<&'a tc_core::grant::RealPaths>,
}

/// What an approver proves (see [`Ledger::approve_with`]).
#[derive(Debug, Clone, Copy)]
pub enum Proof<'a> {
    /// A uid (the peer) and, in guarded mode, their TOTP code.
    Code(&'a Approver),
    /// A WebAuthn assertion with user verification, verified by the page for this id:
    /// the credential it came from and the human that credential belongs to.
    Passkey {
        owner: Option<u32>,
        credential: &'a str,
    },
}

impl Proof<'_> {
    /// The factor the approval event records (never the code itself).
    fn factor(&self) -> &'static str {
        match self {
            Proof::Code(Approver { code: Some(_), .. }) => "totp",
            Proof::Code(_) => "none",
            Proof::Passkey { .. } => "passkey",
        }
    }

    /// The passkey credential the approval event names, if one was used.
    fn credential(&self) -> Option<&str> {
        match self {
            Proof::Passkey { credential, .. } => Some(credential),
            Proof::Code(_) => None,
        }
    }
}

/// What an approval is bound to, as `Approve` reports it.
#[derive(Debug, Clone)]
pub struct Approved {
    pub binding: Binding,
    pub state_fp: String,
    pub expires_at_ms: i64,
    /// The grant given with the approval, if one was asked for.
    pub grant_id: Option<String>,
}

fn token(tx: &dyn Tx, id: Option<i64>) -> Result<Option<TokenRow>, DaemonError> {
    match id {
        Some(id) => Ok(tx.token_by_id(id)?),
        None => Ok(None),
    }
}

fn event(row: &Row, kind: &'static str, detail: serde_json::Value) -> NewEvent {
    row.binding.event(kind, &row.state_fp, detail)
}

/// Logs `tc.elicit.expired` for an unanswered request, once.
fn log_expired(tx: &dyn Tx, evs: &mut Vec<NewEvent>, row: &Row) -> Result<(), DaemonError> {
    if row.status == PENDING && !row.expired_logged {
        evs.push(event(
            row,
            events::EXPIRED,
            json!({ "request_id": row.request_id, "expired_at_ms": row.expires_at }),
        ));
        tx.mark_expired_logged(&row.binding)?;
    }
    Ok(())
}

/// A fresh id no live request has.
fn new_id(tx: &dyn Tx) -> Result<String, DaemonError> {
    let mut rng = rand::rngs::OsRng;
    for _ in 0..16 {
        let id: String = (0..ID_LEN)
            .map(|_| ID_ALPHABET[rng.gen_range(0..ID_ALPHABET.len())] as char)
            .collect();
        if tx.raised_by_id(&id)?.is_none() {
            return Ok(id);
        }
    }
    Err(DaemonError::Internal("no free request id".into()))
}

/// Whether `s` could be a request id (checked before it reaches the database).
pub fn is_request_id(s: &str) -> bool {
    s.len() == ID_LEN && s.bytes().all(|b| ID_ALPHABET.contains(&b))
}

/// Cuts `s` to `max` characters, visibly.
fn capped(s: &str, max: usize) -> String {
    if s.chars().count() > max {
        s.chars().take(max - 1).chain(['…']).collect()
    } else {
        s.to_string()
    }
}

/// Cuts JSON to [`ARGS_JSON_MAX`] bytes (at a character boundary), saying how long it was.
/// The arguments a human is shown must be the ones the approval binds: anything that
/// can reach the socket (in guarded mode, an agent with the human's shell) could
/// otherwise raise a request showing a harmless call under the hash of another. So
/// `args_json`, when given, must hash (`tc_core::hash::args_hash`) to the binding's
/// `args_hash`; "" means "not shown" and is displayed as such.
fn shown_is_bound(b: &Binding, args_json: &str) -> Result<(), DaemonError> {
    if args_json.is_empty() {
        return Ok(());
    }
    let v: serde_json::Value = serde_json::from_str(args_json).map_err(|_| {
        DaemonError::refused(Reason::BadArgument, "args_json is not a JSON document")
    })?;
    if tc_core::hash::args_hash(&b.tool, &v) != b.args_hash {
        return Err(DaemonError::refused(
            Reason::BadArgument,
            "args_json is not the call the binding's args_hash names: the arguments shown to \
             the approver must be the ones the approval binds",
        ));
    }
    Ok(())
}

fn capped_json(s: &str) -> String {
    if s.len() <= ARGS_JSON_MAX {
        return s.to_string();
    }
    let mut end = ARGS_JSON_MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… (cut: {} bytes in all)", &s[..end], s.len())
}

/// The status a row shows now.
fn status_at(status: &str, expires_at: i64, now: i64) -> &'static str {
    match status {
        DECLINED if expires_at > now => DECLINED,
        APPROVED if expires_at > now => APPROVED,
        PENDING if expires_at > now => PENDING,
        _ => EXPIRED,
    }
}

fn no_request(id: &str) -> DaemonError {
    DaemonError::refused(
        Reason::Unknown,
        format!(
            "no request {id:?} is waiting (the id is from `tcctl pending`; a request the agent \
             raised again for a changed target gets a new id)"
        ),
    )
}

impl Ledger {
    /// Records (replacing) the latest raised request for (vault, caller, args_hash), with
    /// no arguments, coverage or peer (see [`Ledger::raise_request`]).
    pub fn raise(
        &self,
        b: &Binding,
        state_fp: &str,
        summary: &str,
    ) -> Result<(i64, i64), DaemonError> {
        let text = RaiseText {
            summary,
            ..Default::default()
        };
        let r = self.raise_request(b, state_fp, &text, None)?;
        Ok((r.raised_at_ms, r.expires_at_ms))
    }

    /// Records the latest raised request for (vault, caller, args_hash). A request still
    /// pending for the same tool and target keeps its id (an approval the human is about
    /// to give stays valid); any other raise gets a new id. A declined request is not
    /// replaced while its decline stands: the raise is refused as `declined`.
    pub fn raise_request(
        &self,
        b: &Binding,
        state_fp: &str,
        text: &RaiseText<'_>,
        uid: Option<u32>,
    ) -> Result<Raised, DaemonError> {
        b.check()?;
        crate::record::check_hash("state_fp", state_fp)?;
        shown_is_bound(b, text.args_json)?;
        // A model can raise at will (each refused call does): bounded per caller.
        self.charge(&b.vault, &b.caller)?;
        let Stored {
            summary,
            args_json,
            covers,
            preview,
            real_paths_json,
        } = Stored::of(text);
        let no_paths = tc_core::grant::RealPaths::new();
        let real_paths = text.real_paths.unwrap_or(&no_paths);
        let now = now_ms();
        let exp = now + self.ttl_ms;
        let raised = self.store.write(|tx, evs| {
            let old = tx.raised_by_call(b)?;
            let keep = match kept_id(tx, evs, old.as_ref(), b, state_fp, now)? {
                Ok(keep) => keep,
                Err(e) => return Ok(Err(e)),
            };
            if old.is_none() && !room_for_one_more(tx, evs, now)? {
                return Ok(Err(full()));
            }
            let fresh = keep.is_none();
            let id = match keep {
                Some(id) => id,
                None => new_id(tx)?,
            };
            tx.upsert_raised(&NewRaised {
                binding: b,
                state_fp,
                summary: &summary,
                raised_at: now,
                expires_at: exp,
                request_id: &id,
                args_json: &args_json,
                covers: &covers,
                uid,
                preview: &preview,
                real_paths: &real_paths_json,
            })?;
            evs.push(b.event(
                events::REQUESTED,
                state_fp,
                json!({ "summary": summary, "request_id": id }),
            ));
            let raising = crate::grants::Raising {
                binding: b,
                state_fp,
                args_json: text.args_json,
                real_paths,
                uid,
                request_id: &id,
            };
            let grant_id = crate::grants::cover(self, tx, evs, &raising, now)?;
            Ok(Ok(Raised {
                request_id: id,
                raised_at_ms: now,
                expires_at_ms: exp,
                grant_id,
                fresh,
            }))
        })?;
        // Told once, after the commit, and only when a human must answer (a grant that
        // covered the call approved it already).
        if let Some(p) = self
            .push
            .as_ref()
            .filter(|_| raised.fresh && raised.grant_id.is_none())
        {
            p.offer(&self.store, b, &raised);
        }
        Ok(raised)
    }

    /// Approves the raised request `id` for one run of the identical call. In guarded
    /// mode the approver must be the uid that raised it and `factor::check` must accept
    /// their code, in this same transaction (the accepted step commits with the approval).
    pub fn approve(&self, id: &str, who: &Approver) -> Result<Approved, DaemonError> {
        self.approve_with(id, Proof::Code(who))
    }

    /// [`Ledger::approve`] with the proof the approver gave: their uid and code, or a
    /// passkey assertion the page verified (which stands for the factor, for any human).
    pub fn approve_with(&self, id: &str, proof: Proof<'_>) -> Result<Approved, DaemonError> {
        self.approve_granting(id, proof, None)
    }

    /// [`Ledger::approve_with`], and with `grant`, a grant for similar calls given in the
    /// same transaction (refused, with nothing approved, when it cannot be given).
    pub fn approve_granting(
        &self,
        id: &str,
        proof: Proof<'_>,
        grant: Option<&crate::grants::GrantAsk>,
    ) -> Result<Approved, DaemonError> {
        if !is_request_id(id) {
            return Err(no_request(id));
        }
        let guarded = self.mode() == tc_core::config::Mode::Guarded;
        let now = now_ms();
        let exp = now + self.ttl_ms;
        let mut secret = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut secret);
        self.store.write(|tx, evs| {
            let Some(row) = tx.raised_by_id(id)? else {
                return Err(no_request(id));
            };
            // Another human's request is theirs to approve, with their own factor or
            // passkey; to anyone else it is answered as an id that does not exist (its
            // existence and status are that human's business), before anything else.
            let approver = match proof {
                Proof::Code(who) => Some(who.uid),
                Proof::Passkey { owner, .. } => owner,
            };
            if guarded && (approver.is_none() || approver != row.uid) {
                return Err(no_request(id));
            }
            let live = token(tx, row.token_id)?
                .is_some_and(|t| t.consumed_at.is_none() && t.expires_at > now);
            approvable(&row, live, now)?;
            let who = match proof {
                Proof::Code(who) => who.clone(),
                Proof::Passkey { .. } => Approver { uid: row.uid.unwrap_or(u32::MAX), code: None },
            };
            if guarded && matches!(proof, Proof::Code(_)) {
                if let Err(e) = factor::check(tx, evs, who.uid, who.code.as_deref(), now)? {
                    return Ok(Err(e));
                }
            }
            let b = &row.binding;
            // The approval: a token row whose token nobody holds (a hash of random bytes).
            let token_id = tx.insert_token(&NewToken {
                hash: &secret,
                binding: b,
                state_fp: &row.state_fp,
                created_at: now,
                expires_at: exp,
            })?;
            tx.set_approved(id, token_id, exp, "")?;
            evs.push(event(&row, events::APPROVED, json!({ "request_id": id, "uid": who.uid, "expires_at_ms": exp, "factor": proof.factor(), "credential": proof.credential() })));
            let grant_id = match grant {
                Some(ask) => match crate::grants::give(self, tx, evs, &row, ask, approver, now)? {
                    Ok(g) => Some(g),
                    // Nothing is approved when the grant asked for cannot be given: the
                    // human decides again, knowing why.
                    Err(e) => return Err(e),
                },
                None => None,
            };
            Ok(Ok(Approved { binding: b.clone(), state_fp: row.state_fp.clone(), expires_at_ms: exp, grant_id }))
        })
    }

    /// Declines the raised request `id`: its retries get `declined` with `reason` for one
    /// TTL from now (or until its own expiry, if later). An approval not yet redeemed is
    /// withdrawn; one already redeemed cannot be. In guarded mode only the human whose
    /// session raised it (or root) may: the agent is told the human said no.
    pub fn decline(&self, id: &str, reason: &str, uid: Option<u32>) -> Result<(), DaemonError> {
        if !is_request_id(id) {
            return Err(no_request(id));
        }
        let reason = capped(reason, REASON_MAX);
        let now = now_ms();
        let guarded = self.mode() == tc_core::config::Mode::Guarded;
        self.store.write(|tx, evs| {
            let Some(row) = tx.raised_by_id(id)? else {
                return Err(no_request(id));
            };
            if guarded && uid != Some(0) && (uid.is_none() || uid != row.uid) {
                // The same answer as for an id that does not exist: another human's
                // request ids are not confirmed to exist.
                return Err(no_request(id));
            }
            let tok = token(tx, row.token_id)?;
            match status_at(&row.status, row.expires_at, now) {
                EXPIRED => {
                    return Err(DaemonError::refused(
                        Reason::Expired,
                        "this request already expired unanswered; nothing waits to be declined",
                    ))
                }
                APPROVED if tok.as_ref().is_some_and(|t| t.consumed_at.is_some()) => {
                    return Err(DaemonError::refused(
                        Reason::Spent,
                        "this approval was already used by the agent's retry; it cannot be declined now",
                    ))
                }
                _ => {}
            }
            if let Some(t) = tok {
                tx.void_token(t.id, now)?;
            }
            tx.set_declined(id, &reason, now + self.ttl_ms)?;
            evs.push(event(&row, events::DECLINED, json!({ "request_id": id, "reason": reason, "uid": uid, "by": "operator" })));
            Ok(Ok(()))
        })
    }

    /// Redeems the approval held for the call `b` (no token): once, for the identical
    /// call against an unchanged target (else `replay_drift`, and it is spent). Refused as
    /// `declined` (with the reason), `expired` (the request or its approval lapsed
    /// unanswered; logged once, and the next retry raises afresh) or `not_approved`.
    ///
    /// An approval a grant made is not redeemed here (`not_approved`), only by
    /// [`Ledger::redeem_granted`]: the grant judged the raiser's own word for where the
    /// paths lead, and any process of the human's uid may raise.
    pub fn redeem_approved(&self, b: &Binding, current_fp: &str) -> Result<String, DaemonError> {
        self.redeem_held(b, current_fp, false)
    }

    /// [`Ledger::redeem_approved`] by the shim that raised this call just now and was
    /// told a grant covered it: an approval a grant made is redeemed too.
    pub fn redeem_granted(&self, b: &Binding, current_fp: &str) -> Result<String, DaemonError> {
        self.redeem_held(b, current_fp, true)
    }

    fn redeem_held(
        &self,
        b: &Binding,
        current_fp: &str,
        under_grant: bool,
    ) -> Result<String, DaemonError> {
        b.check()?;
        crate::record::check_hash("current_state_fp", current_fp)?;
        let now = now_ms();
        let nonce = crate::random::b64(16);
        self.store.write(|tx, evs| {
            let Some(row) = tx.raised_by_call(b)?.filter(|r| r.binding.tool == b.tool) else {
                return Err(not_approved());
            };
            match status_at(&row.status, row.expires_at, now) {
                DECLINED => return Err(declined(&row.reason)),
                PENDING => return Err(not_approved()),
                EXPIRED if row.status == DECLINED => {
                    // The decline lapsed: the next raise asks afresh.
                    tx.delete_raised(b)?;
                    return Ok(Err(not_approved()));
                }
                EXPIRED => {
                    log_expired(tx, evs, &row)?;
                    tx.delete_raised(b)?;
                    return Ok(Err(expired(row.status == APPROVED)));
                }
                _ => {}
            }
            if !row.grant_id.is_empty() && !under_grant {
                // A grant's approval of some raise of this call, not of the caller's own.
                return Err(not_approved());
            }
            let tok = token(tx, row.token_id)?;
            let Some(t) = tok.filter(|t| t.consumed_at.is_none()) else {
                // Used (a retry is running or ran), or voided by a secret rotation.
                return Err(not_approved());
            };
            if t.expires_at <= now {
                tx.delete_raised(b)?;
                return Ok(Err(expired(true)));
            }
            if !row.grant_id.is_empty() {
                if let Err(e) = crate::grants::still_live(tx, &row.grant_id, now) {
                    // The approval goes with its grant: the retry raises afresh.
                    tx.void_token(t.id, now)?;
                    tx.delete_raised(b)?;
                    return Ok(Err(e));
                }
            }
            let r = self.spend(tx, evs, t, b, current_fp, now, &nonce)?;
            if r.is_err() {
                // Drifted (spent): the next retry raises a fresh request.
                tx.delete_raised(b)?;
            }
            Ok(r)
        })
    }

    /// Raised requests, newest first: those still waiting and those answered or expired
    /// within the last hour (what `tcctl pending` and `ListPending` show).
    pub fn pending(&self, vault: &str) -> Result<Vec<Pending>, DaemonError> {
        let now = now_ms();
        let rows = self
            .store
            .read(|c| Ok(c.pending_rows(now - EXPIRED_KEPT_MS, vault)?))?;
        Ok(rows
            .into_iter()
            .map(|r| Pending {
                // An approval is a token row too: "minted" means a `tcctl elicit` token.
                minted: r.minted && r.status != APPROVED,
                status: status_at(&r.status, r.expires_at, now),
                binding: r.binding,
                state_fp: r.state_fp,
                summary: r.summary,
                raised_at_ms: r.raised_at,
                expires_at_ms: r.expires_at,
                request_id: r.request_id,
                args_json: r.args_json,
                covers: r.covers,
                raised_by_uid: r.uid,
                reason: r.reason,
                preview: r.preview,
            })
            .collect())
    }
}

/// Garbage collection of raised requests an hour past their expiry; an unanswered one
/// nobody retried is logged as expired as it goes.
pub(crate) fn sweep(tx: &dyn Tx, evs: &mut Vec<NewEvent>, now: i64) -> Result<(), DaemonError> {
    sweep_expired_before(tx, evs, now - EXPIRED_KEPT_MS)?;
    crate::grants::log_ended(tx, evs, now)
}

/// Whether a new row fits under [`MAX_RAISED`]; at the cap, expired rows go at once
/// (not an hour later) to make room, so only live requests can keep new ones out.
/// What a raise stores of the texts shown with it, each capped.
struct Stored<'a> {
    summary: String,
    args_json: String,
    covers: String,
    preview: std::borrow::Cow<'a, str>,
    /// Kept for the grant form and to check a glob against the approved call; capped like
    /// the arguments (past the cap nothing is kept: no glob can be given for it).
    real_paths_json: String,
}

impl<'a> Stored<'a> {
    fn of(text: &RaiseText<'a>) -> Stored<'a> {
        let no_paths = tc_core::grant::RealPaths::new();
        let real_paths = text.real_paths.unwrap_or(&no_paths);
        Stored {
            summary: capped(text.summary, SUMMARY_MAX),
            args_json: capped_json(text.args_json),
            covers: capped(text.covers, COVERS_MAX),
            preview: tc_core::preview::capped(text.preview),
            real_paths_json: serde_json::to_string(real_paths)
                .ok()
                .filter(|s| s.len() <= ARGS_JSON_MAX)
                .unwrap_or_default(),
        }
    }
}

/// The id a raise of `b` keeps from the call's previous request `old`: a request still
/// pending for the same tool and target keeps its id (an approval the human is about to
/// give stays valid); an expired one is logged as such and replaced; a standing decline
/// refuses the raise.
fn kept_id(
    tx: &dyn Tx,
    evs: &mut Vec<NewEvent>,
    old: Option<&Row>,
    b: &Binding,
    state_fp: &str,
    now: i64,
) -> Written<Option<String>> {
    Ok(Ok(match old {
        Some(o) if o.expires_at > now && o.status == DECLINED => {
            return Ok(Err(declined(&o.reason)));
        }
        Some(o) if o.expires_at <= now => {
            log_expired(tx, evs, o)?;
            None
        }
        Some(o) if o.status == PENDING && o.state_fp == state_fp && o.binding.tool == b.tool => {
            o.request_id.clone()
        }
        _ => None,
    }))
}

/// Whether the request `row` may be approved now (`live`: its approval, if any, is still
/// unspent): not declined, not expired, not approved and waiting to run.
fn approvable(row: &Row, live: bool, now: i64) -> Result<(), DaemonError> {
    match status_at(&row.status, row.expires_at, now) {
        DECLINED => Err(DaemonError::refused(
            Reason::Declined,
            "this request was declined; a declined request cannot be approved (the agent's retry raises a new one once the decline lapses)",
        )),
        EXPIRED => Err(DaemonError::refused(
            Reason::Expired,
            "this request expired unanswered; the agent's retry of the call raises a fresh one",
        )),
        APPROVED if live => Err(DaemonError::refused(
            Reason::Spent,
            "this request is already approved; the agent's identical retry runs it once",
        )),
        _ => Ok(()),
    }
}

fn room_for_one_more(tx: &dyn Tx, evs: &mut Vec<NewEvent>, now: i64) -> Result<bool, DaemonError> {
    if tx.count_raised()? < MAX_RAISED {
        return Ok(true);
    }
    sweep_expired_before(tx, evs, now)?;
    Ok(tx.count_raised()? < MAX_RAISED)
}

fn full() -> DaemonError {
    DaemonError::refused(
        Reason::RateLimited,
        format!(
            "tcd already holds {MAX_RAISED} raised requests (every vault and caller): approve \
             or decline them (tcctl pending), or wait for them to expire, then retry"
        ),
    )
}

fn sweep_expired_before(
    tx: &dyn Tx,
    evs: &mut Vec<NewEvent>,
    cutoff: i64,
) -> Result<(), DaemonError> {
    for row in &tx.unlogged_expired(cutoff)? {
        log_expired(tx, evs, row)?;
    }
    tx.delete_raised_before(cutoff)?;
    Ok(())
}

fn declined(reason: &str) -> DaemonError {
    let why = if reason.is_empty() {
        "no reason given".to_string()
    } else {
        reason.to_string()
    };
    DaemonError::refused(
        Reason::Declined,
        format!("the human declined this call: {why}"),
    )
}

fn not_approved() -> DaemonError {
    DaemonError::refused(Reason::NotApproved, "no approval is held for this call")
}

fn expired(approval: bool) -> DaemonError {
    DaemonError::refused(
        Reason::Expired,
        if approval {
            "the approval expired before the call was retried; a retry raises a fresh request"
        } else {
            "the request expired before anyone answered it; a retry raises a fresh request"
        },
    )
}

#[cfg(test)]
#[path = "approvals_tests.rs"]
mod tests;
