//! Route 3, the modern round trip: the shim answers `input_required` with its form and a
//! sealed state; the re-sent call's answer is judged against that state, spent once.

use serde_json::{json, Value};
use tc_core::ErrorCode;

use crate::daemon_client::DaemonError;
use crate::engine::confirm::continued::Resumed;
use crate::engine::confirm::form::{self, Answer};
use crate::engine::confirm::summary::summarize_gated;
use crate::engine::confirm::url_modern::{url_answer, UrlInner};
use crate::engine::refusal::Refusal;
use crate::engine::{Approval, Call, Shim};

impl Shim {
    /// Route 3, round 1: raises the request, seals a state and answers `input_required`
    /// with our form; the client re-sends the call with the state and the answer.
    pub(in crate::engine) async fn offer_modern(&self, c: &Call<'_>) {
        let s = c.shown;
        let summary = summarize_gated(s.tool, c.args, c.gate);
        let Some(request_id) = self.raise_call(c, &summary).await else {
            return;
        };
        match self
            .daemon
            .seal_state(c.binding.clone(), s.state_fp, Vec::new())
            .await
        {
            Ok(state) => {
                let msg = self.prompt(c, &summary, &request_id);
                self.answer(c.id, form::input_required(&state, &msg));
            }
            Err(e) => self.refuse(c.id, self.daemon_result(&e, s)),
        }
    }

    /// Route 3, round 2: the daemon verifies the echoed state (authentic, unexpired, this
    /// call) and consumes it whatever the answer, so it can never authorize twice; only
    /// accept + approve, against an unchanged target, approves. A state that carries a
    /// downstream's own round (see `continued.rs`) is no answer to our form: it goes
    /// back to the downstream instead.
    pub(in crate::engine) async fn resume_modern(
        &self,
        c: &Call<'_>,
        params: &Value,
        applies: bool,
    ) -> Resumed {
        let state = form::request_state(params).unwrap_or_default();
        let answer = form::modern_answer(params);
        // Looked at without spending it: what it carries decides how it is spent.
        let opened = self
            .daemon
            .open_state(state, c.binding.clone(), false, "")
            .await;
        // Route 3u: the state names the request its link pointed at.
        if let Some(request_id) = opened.as_ref().ok().and_then(|o| UrlInner::read(&o.inner)) {
            let answer = url_answer(params);
            return self.resume_url(c, state, &request_id, answer).await;
        }
        let answer = match (&opened, answer) {
            (Err(e), _) if self.url_route(params) => {
                // Unopened, so which route sealed it is unknown: read as the link this
                // client is offered (an accept is no approval on either route).
                return self.url_unopened(c, e, url_answer(params)).await;
            }
            (Ok(o), _) if !o.inner.is_empty() => {
                return self
                    .continue_round(c, state, &o.inner, &o.state_fp, applies)
                    .await;
            }
            (Ok(_), Some(a)) => a,
            // The state came back without our answer: offer the same form again.
            (Ok(_), None) => return self.offer_again(c, state).await,
            (Err(e), answer) => return self.unopened(c, e, answer).await,
        };
        let current = if answer == Answer::Approved {
            c.shown.state_fp
        } else {
            ""
        };
        match self
            .daemon
            .open_state(state, c.binding.clone(), true, current)
            .await
        {
            Ok(_) => self.answered(c, answer).await,
            Err(e) => self.unopened(c, &e, Some(answer)).await,
        }
    }

    /// Whether this call's own capabilities get the page's link (route 3u).
    fn url_route(&self, params: &Value) -> bool {
        let caps = params
            .get("_meta")
            .and_then(|m| m.get(crate::wire::era::META_CAPS));
        let route = form::route(
            crate::wire::era::Era::Modern,
            caps,
            false,
            self.page.is_some(),
        );
        route == form::Route::ModernUrl
    }

    /// The state came back without an answer: the same form is offered again.
    async fn offer_again(&self, c: &Call<'_>, state: &str) -> Resumed {
        let s = c.shown;
        let summary = summarize_gated(s.tool, c.args, c.gate);
        let msg = if self.daemon.guarded() {
            // The prompt names the request id (kept while the request waits).
            let Some(id) = self.raise_call(c, &summary).await else {
                return Resumed::Answered;
            };
            self.prompt(c, &summary, &id)
        } else {
            form::message(s.tool, s.vault, &summary, c.gate.targets.as_ref())
        };
        self.answer(c.id, form::input_required(state, &msg));
        Resumed::Answered
    }

    /// The human's answer, its state verified and spent.
    async fn answered(&self, c: &Call<'_>, answer: Answer) -> Resumed {
        match answer {
            // Guarded mode: the accept only cues the redemption of a human's approval.
            Answer::Approved if self.daemon.guarded() => {
                match self.accepted_guarded(c, None).await {
                    Some(a) => Resumed::Approved(a),
                    None => Resumed::Answered,
                }
            }
            Answer::Approved => Resumed::Approved(Approval {
                route: "request_state",
                redemption: None,
            }),
            Answer::Declined => {
                self.declined(c).await;
                Resumed::Answered
            }
            Answer::Cancelled => {
                self.not_obtained(c, "the human dismissed the confirmation prompt")
                    .await;
                Resumed::Answered
            }
        }
    }

    /// A state that would not open, with the answer that came with it. A no is a no even
    /// when the state no longer verifies (never re-prompted for); a spent one is refused;
    /// otherwise see [`Shim::state_refused`].
    async fn unopened(&self, c: &Call<'_>, e: &DaemonError, answer: Option<Answer>) -> Resumed {
        let spent = e.reason() == Some(tc_core::Reason::Spent);
        match answer {
            Some(Answer::Declined) if !spent => self.declined(c).await,
            Some(Answer::Cancelled) if !spent => {
                self.not_obtained(c, "the human dismissed the confirmation prompt")
                    .await
            }
            _ => return self.state_refused(c, e).await,
        }
        Resumed::Answered
    }

    /// A state the daemon would not open: replayed or drifted ones are refused; one that
    /// cannot be verified (rotated or deleted secret, another daemon, expired, garbage,
    /// another call's) sends the call back to be judged as if it came without it (a fresh
    /// confirmation offer, rather than a dead end, when its gate applies).
    pub(in crate::engine) async fn state_refused(&self, c: &Call<'_>, e: &DaemonError) -> Resumed {
        use tc_core::Reason;
        match e.reason() {
            Some(Reason::Spent) => {
                let text = format!(
                    "This confirmation of `{}` was already used (a requestState authorizes one call, once). \
                     Nothing was run. Send the call again without requestState to ask the human again.",
                    c.shown.tool
                );
                let mut d = c.shown.details();
                d["reason"] = json!("spent");
                self.refuse(c.id, Refusal::new(ErrorCode::InvalidInput, text, d));
            }
            Some(
                Reason::Invalid
                | Reason::Expired
                | Reason::Foreign
                | Reason::RequestMismatch
                | Reason::Unknown,
            ) => {
                tracing::info!(
                    tool = %c.shown.tool,
                    "requestState not verifiable ({}); judging the call afresh",
                    e
                );
                return Resumed::Fresh;
            }
            _ => self.refuse(c.id, self.daemon_result(e, c.shown)),
        }
        Resumed::Answered
    }
}
