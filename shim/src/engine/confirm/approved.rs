//! Route 1, approve by request: a call without a token redeems the approval tcd holds for it
//! (raises carry the full arguments); in guarded mode an `accept` only cues that redemption.

use tc_core::Reason;

use crate::daemon_client::{DaemonError, Raise, Raised};
use crate::engine::confirm::form::Route;
use crate::engine::confirm::summary::summarize_gated;
use crate::engine::refusal::by_request;
use crate::engine::{Approval, Call, Shim};

/// The RecordConsumed route of a call run under an approval given by request id.
pub const ROUTE: &str = "approved_request";
/// The RecordConsumed route of a call a human's grant let through.
pub const GRANT_ROUTE: &str = "grant";

/// What tcd holds for a call about to be raised.
pub(in crate::engine) enum Held {
    /// A human approved it (`tcctl approve`): run it, under this approval.
    Approved(Approval),
    /// Nothing: raise it and ask.
    Nothing,
    /// Answered already (declined, expired, drifted, daemon failure).
    Answered,
}

impl Shim {
    /// Redeems the approval tcd holds for this exact call against its target as it is now
    /// (`c.shown.state_fp`); every outcome but "none held" is answered here. An expired
    /// request is told as such on the refusal route; an in-protocol route prompts afresh
    /// instead (the prompt is the new request, as for an expired requestState).
    pub(in crate::engine) async fn held_approval(&self, c: &Call<'_>, route: Route) -> Held {
        match self.redeem_approved(c).await {
            Ok(a) => Held::Approved(a),
            Err(e) if e.reason() == Some(Reason::NotApproved) => Held::Nothing,
            Err(e) if e.reason() == Some(Reason::Expired) && route != Route::Cli => Held::Nothing,
            Err(e) => {
                self.answer_refused(c, &e);
                Held::Answered
            }
        }
    }

    async fn redeem_approved(&self, c: &Call<'_>) -> Result<Approval, DaemonError> {
        let r = self
            .daemon
            .redeem_approved(c.binding.clone(), c.shown.state_fp)
            .await?;
        Ok(Approval {
            route: ROUTE,
            redemption: Some(r),
        })
    }

    /// Answers a refused redemption of a held approval.
    pub(in crate::engine) fn answer_refused(&self, c: &Call<'_>, e: &DaemonError) {
        let why = match e {
            DaemonError::Refused(s) => s.message().to_string(),
            DaemonError::Unreachable { .. } => String::new(),
        };
        let r = match e.reason() {
            Some(Reason::Declined) => by_request::declined(c.shown, strip_lead(&why)),
            Some(Reason::Expired) => by_request::expired(c.shown, &why),
            _ => self.daemon_result(e, c.shown),
        };
        self.refuse(c.id, r);
    }

    /// Raises the call; when a live grant the human gave covers it, tcd approved it as it
    /// landed and it runs under that approval, without a prompt. Otherwise the request's
    /// id is kept for the route that asks next ([`Shim::raise_call`] reuses it).
    pub(in crate::engine) async fn by_grant(&self, c: &Call<'_>) -> Held {
        let summary = summarize_gated(c.shown.tool, c.args, c.gate);
        let raised = match self.raise(c, &summary).await {
            Ok(r) => r,
            Err(e) => {
                self.answer_refused(c, &e);
                return Held::Answered;
            }
        };
        if raised.grant_id.is_none() {
            let _ = c.raised.set(raised.request_id);
            return Held::Nothing;
        }
        // Redeemed like any approval (once, against the target as it is now); a revoke
        // or the expiry since the raise refuses it here. Only here is an approval a grant
        // made redeemed: this raise's real paths are the ones this shim resolved.
        match self
            .daemon
            .redeem_granted(c.binding.clone(), c.shown.state_fp)
            .await
        {
            Ok(r) => Held::Approved(Approval {
                route: GRANT_ROUTE,
                redemption: Some(r),
            }),
            Err(e) => {
                self.answer_refused(c, &e);
                Held::Answered
            }
        }
    }

    /// Records the raised request with what the human is shown (once per call); its id,
    /// or the refusal already answered (a standing decline reads as declined).
    pub(in crate::engine) async fn raise_call(
        &self,
        c: &Call<'_>,
        summary: &str,
    ) -> Option<String> {
        if let Some(id) = c.raised.get() {
            return Some(id.clone());
        }
        match self.raise(c, summary).await {
            Ok(r) => Some(r.request_id),
            Err(e) => {
                self.answer_refused(c, &e);
                None
            }
        }
    }

    async fn raise(&self, c: &Call<'_>, summary: &str) -> Result<Raised, DaemonError> {
        let text = Raise {
            summary: summary.to_string(),
            args_json: shown_args(c.args),
            covers: crate::engine::confirm::form::describe_targets(c.gate.targets.as_ref()),
            preview: crate::engine::confirm::preview::preview(&self.policy, c.gate, c.args),
            real_paths: self.real_paths(c.shown.tool, c.gate, c.args),
        };
        self.daemon
            .raise(c.binding.clone(), c.shown.state_fp, text)
            .await
    }

    /// Route 1: raise, then tell the agent to have the human approve the request by id.
    pub(in crate::engine) async fn ask_by_request(&self, c: &Call<'_>) {
        let summary = summarize_gated(c.shown.tool, c.args, c.gate);
        if let Some(id) = self.raise_call(c, &summary).await {
            let mode = self.daemon.mode();
            self.refuse(c.id, by_request::approve_required(c.shown, &id, &mode));
        }
    }

    /// The prompt for an in-protocol route: in guarded mode it names `tcctl approve ID`.
    pub(in crate::engine) fn prompt(&self, c: &Call<'_>, summary: &str, id: &str) -> String {
        let (s, targets) = (c.shown, c.gate.targets.as_ref());
        if self.daemon.guarded() {
            by_request::guarded_message(s.tool, s.vault, summary, targets, id)
        } else {
            crate::engine::confirm::form::message(s.tool, s.vault, summary, targets)
        }
    }

    /// Guarded mode, the client accepted: the call runs only under a factor-backed
    /// approval tcd holds for this exact request, against the target as it is now
    /// (`c.shown.state_fp`, recomputed by the caller); else `approval_not_obtained`.
    /// `id` is the request's id when the caller knows it (the legacy route); the modern
    /// route's state does not carry it, so it is raised again, which keeps a pending id.
    pub(in crate::engine) async fn accepted_guarded(
        &self,
        c: &Call<'_>,
        id: Option<&str>,
    ) -> Option<Approval> {
        match self.redeem_approved(c).await {
            Ok(a) => Some(a),
            Err(e) if e.reason() == Some(Reason::NotApproved) => {
                let why = "the prompt was accepted, but in guarded mode only `tcctl approve` with \
                           the human's code approves, and tcd holds no such approval for this request";
                let id = match id {
                    Some(id) => id.to_string(),
                    None => {
                        self.raise_call(c, &summarize_gated(c.shown.tool, c.args, c.gate))
                            .await?
                    }
                };
                self.log_not_obtained(c, why, "not_obtained").await;
                self.refuse(c.id, by_request::not_obtained(c.shown, &id, why));
                None
            }
            Err(e) => {
                self.answer_refused(c, &e);
                None
            }
        }
    }

    /// The client declined request `id`: it is declined in tcd too, so a later approval of
    /// it (`tcctl approve`, the page) is refused, and the call gets `approval_declined`.
    /// tcd's Decline logs `tc.elicit.declined`; only if it fails does the shim log it.
    pub(in crate::engine) async fn declined_with_request(&self, c: &Call<'_>, id: &str) {
        match self.daemon.decline(id, "declined in the MCP client").await {
            Ok(_) => {
                self.record_denied(c, "declined");
                self.refuse(c.id, crate::engine::refusal::approval_declined(c.shown))
            }
            Err(e) => {
                tracing::info!("recording the client's decline in tcd failed: {e}");
                self.declined(c).await;
            }
        }
    }
}

/// The daemon's decline message starts with its own lead; the agent gets the reason.
fn strip_lead(msg: &str) -> &str {
    msg.strip_prefix("the human declined this call: ")
        .unwrap_or(msg)
}

/// The arguments tcd shows the approver: the call's own, without the gate's fields (tcd
/// checks they hash to the binding's `args_hash`); "" (shown as "not sent") past
/// `SHOWN_ARGS_MAX`, which keeps a raise far inside tcd's message limit.
fn shown_args(args: &serde_json::Value) -> String {
    const SHOWN_ARGS_MAX: usize = 1 << 20;
    let s =
        serde_json::to_string_pretty(&tc_core::hash::strip_gate_fields(args)).unwrap_or_default();
    if s.len() > SHOWN_ARGS_MAX {
        String::new()
    } else {
        s
    }
}
