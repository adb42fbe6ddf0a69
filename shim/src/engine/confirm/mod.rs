//! Routes: how a gated call gets a human's approval: its requestState (modern round 2, form
//! or page link), an `elicit_token`, an approval held by request id, or a new ask.

mod approved;
pub mod continued;
pub mod form;
pub(in crate::engine) mod holds;
mod legacy;
mod modern;
pub mod preview;
mod progress;
pub mod summary;
pub mod url_mode;
mod url_modern;

use serde_json::{json, Value};

use crate::engine::confirm::continued::{Resumed, Round};
use crate::engine::judge::Judged;
use crate::engine::refusal;
use crate::engine::{Approval, Call, Shim};
use crate::wire::era::{self, Era};
use form::Route;
pub(in crate::engine) use progress::progress_token;

/// How a gated call's confirmation ended.
pub(in crate::engine) enum Obtained {
    /// Approved: run it.
    Approved(Approval),
    /// A downstream's own round the client answered: forward sends it back.
    Continue(Round),
    /// Its requestState could not be verified: judge it afresh without it.
    Fresh,
    /// Answered already (refused, declined, offered, or sent on as a downstream's round).
    Done,
}

impl Shim {
    /// Registers a held call's wait on the human (see `Holds::wait`): false when it must
    /// not wait, because the exit path answered it, or it was cancelled meanwhile (then
    /// nothing goes out, its place is freed and it is answered here).
    pub(in crate::engine) fn hold_for_human(
        &self,
        c: &Call<'_>,
        wake: tokio::sync::oneshot::Sender<()>,
        prompt: Option<(String, tokio::sync::oneshot::Sender<Value>)>,
    ) -> bool {
        let waiting = self
            .lock()
            .holds
            .wait(crate::engine::key(c.id), wake, prompt);
        match waiting {
            Ok(()) => true,
            Err(None) => false,
            Err(_) => {
                self.answer(c.id, json!({}));
                false
            }
        }
    }

    /// A re-sent call carrying a requestState is judged by that state first (ours, or a
    /// downstream's round sealed inside ours); a token it still carries is redeemed
    /// only if the state sends the call back to be judged afresh.
    pub(in crate::engine) async fn obtain(
        &self,
        c: &Call<'_>,
        msg: &Value,
        j: &Judged,
        resuming: bool,
    ) -> Obtained {
        if resuming {
            let no_params = json!({});
            let params = msg.get("params").unwrap_or(&no_params);
            return match self.resume_modern(c, params, j.applies).await {
                Resumed::Approved(a) => Obtained::Approved(a),
                Resumed::Continue(round) => Obtained::Continue(round),
                Resumed::Fresh => Obtained::Fresh,
                Resumed::Answered => Obtained::Done,
            };
        }
        if let Some(token) = j.args.get("elicit_token").and_then(Value::as_str) {
            return match self
                .daemon
                .redeem(token, c.binding.clone(), c.shown.state_fp)
                .await
            {
                Ok(r) => Obtained::Approved(Approval {
                    route: "cli_token",
                    redemption: Some(r),
                }),
                Err(e) => {
                    self.refuse(c.id, self.daemon_result(&e, c.shown));
                    Obtained::Done
                }
            };
        }
        match self.ask(c, era::request_meta(msg)).await {
            Some(a) => Obtained::Approved(a),
            None => Obtained::Done,
        }
    }

    /// No answer came with the call: an approval tcd holds for it by request id, else the
    /// route the client's era and capabilities allow. None when the call was answered.
    async fn ask(&self, c: &Call<'_>, meta: Option<&Value>) -> Option<Approval> {
        let (era, caps) = match meta {
            Some(m) => (Era::Modern, m.get(era::META_CAPS).cloned()),
            None => (Era::Legacy, self.lock().session.client_caps()),
        };
        let route = form::route(
            era,
            caps.as_ref(),
            self.policy.legacy_elicitation && self.server_requests,
            self.page.is_some(),
        );
        // What a human decided about this exact call by its request id, else a grant
        // they gave that covers it (`approved.rs`).
        let held = match self.held_approval(c, route).await {
            approved::Held::Nothing => self.by_grant(c).await,
            held => held,
        };
        match held {
            approved::Held::Approved(a) => Some(a),
            approved::Held::Answered => None,
            approved::Held::Nothing => match route {
                Route::Cli => {
                    self.ask_by_request(c).await;
                    None
                }
                Route::Modern => {
                    self.offer_modern(c).await;
                    None
                }
                Route::ModernUrl => {
                    let base = self.page.clone().unwrap_or_default();
                    self.offer_url_modern(c, &base).await;
                    None
                }
                Route::Legacy => self.legacy_round_trip(c).await,
                Route::Url => {
                    let base = self.page.clone().unwrap_or_default();
                    self.url_round_trip(c, &base).await
                }
            },
        }
    }

    /// Answers `approval_declined` and logs `tc.elicit.declined`.
    pub(in crate::engine) async fn declined(&self, c: &Call<'_>) {
        let ev = tc_core::codes::events::DECLINED;
        if let Err(e) = self
            .daemon
            .append_event(ev, c.binding, c.shown.state_fp, json!({}))
            .await
        {
            tracing::warn!("recording the decline failed: {e}");
        }
        self.record_denied(c, "declined");
        self.refuse(c.id, refusal::approval_declined(c.shown));
    }

    /// Answers `approval_not_obtained` and logs `tc.elicit.not_obtained`.
    pub(in crate::engine) async fn not_obtained(&self, c: &Call<'_>, why: &str) {
        self.log_not_obtained(c, why, "not_obtained").await;
        self.refuse(c.id, refusal::approval_not_obtained(c.shown, why));
    }
}
