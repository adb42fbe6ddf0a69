//! Route 2, legacy elicitation: the shim asks a legacy client itself (`elicitation/create`),
//! waits for the answer, and judges the target again before an accept approves.

use std::sync::atomic::Ordering;

use serde_json::{json, Value};
use tc_core::ErrorCode;
use tokio::sync::oneshot;

use crate::engine::confirm::form::{self, Answer};
use crate::engine::confirm::summary::summarize_gated;
use crate::engine::refusal::Refusal;
use crate::engine::refusal::Shown;
use crate::engine::{key, Approval, Call, Shim, OWN_ID_PREFIX};
use crate::wire::value::at;

/// A prompt's receivers (the client's answer, the call's cancellation) and the protocol
/// version it is shaped for.
type Registered = (oneshot::Receiver<Value>, oneshot::Receiver<()>, String);

impl Shim {
    /// Route 2: the shim asks a legacy client itself with `elicitation/create`, waits for
    /// the answer (or the call's cancellation, or the TTL), then re-checks the target.
    pub(in crate::engine) async fn legacy_round_trip(&self, c: &Call<'_>) -> Option<Approval> {
        let s = c.shown;
        let summary = summarize_gated(s.tool, c.args, c.gate);
        let request_id = self.raise_call(c, &summary).await?;
        // Sealed only so the daemon makes the same spend-once, drift-checked decision as
        // on the other routes; this state never leaves the shim.
        let state = match self
            .daemon
            .seal_state(c.binding.clone(), s.state_fp, Vec::new())
            .await
        {
            Ok(st) => st,
            Err(e) => {
                self.refuse(c.id, self.daemon_result(&e, s));
                return None;
            }
        };
        match self.elicit(c, &summary, &request_id, &state).await? {
            Answer::Approved => self.legacy_approved(c, &state, &request_id).await,
            Answer::Declined => {
                self.spend(c, &state).await;
                if self.daemon.guarded() {
                    self.declined_with_request(c, &request_id).await;
                } else {
                    self.declined(c).await;
                }
                None
            }
            Answer::Cancelled => {
                self.spend(c, &state).await;
                self.not_obtained(c, "the human dismissed the confirmation prompt")
                    .await;
                None
            }
        }
    }

    /// Sends the prompt and waits for the human's answer. None when no answer came (the
    /// call cancelled, the TTL passed, the client failed): answered here, the state spent.
    async fn elicit(
        &self,
        c: &Call<'_>,
        summary: &str,
        request_id: &str,
        state: &str,
    ) -> Option<Answer> {
        let rid = format!(
            "{OWN_ID_PREFIX}elicit-{}",
            self.next_id.fetch_add(1, Ordering::Relaxed)
        );
        let (answer_rx, wake_rx, version) = self.register_prompt(c, &rid)?;
        let message = self.prompt(c, summary, request_id);
        self.step_aside(c.id);
        self.send_client(&json!({
            "jsonrpc": "2.0", "id": rid, "method": "elicitation/create",
            "params": form::elicit_params(&message, &version),
        }));
        let outcome = self
            .with_progress(c, async {
                tokio::select! {
                    r = answer_rx => r.ok(),
                    _ = wake_rx => None,
                    _ = tokio::time::sleep(self.prompt_ttl) => None,
                }
            })
            .await;
        let cancelled = {
            let mut st = self.lock();
            st.holds.end_wait(&key(c.id), Some(&rid));
            st.holds.cancelled(&key(c.id)).unwrap_or(true)
        };
        let Some(resp) = outcome else {
            self.withdraw(c, &rid, state, cancelled).await;
            return None;
        };
        let Some(result) = resp.get("result") else {
            self.spend(c, state).await;
            let why = format!(
                "the client could not show the prompt: {}",
                at(&resp, &["error", "message"])
                    .and_then(Value::as_str)
                    .unwrap_or("error")
            );
            self.not_obtained(c, &why).await;
            return None;
        };
        Some(form::read_answer(result))
    }

    /// Registers prompt `rid` for the held call; None if the call was cancelled meanwhile.
    fn register_prompt(&self, c: &Call<'_>, rid: &str) -> Option<Registered> {
        let (answer_tx, answer_rx) = oneshot::channel();
        let (wake_tx, wake_rx) = oneshot::channel();
        let mut st = self.lock();
        let prompt = Some((rid.to_string(), answer_tx));
        st.holds.wait(key(c.id), wake_tx, prompt).ok()?;
        let version = st.session.prompt_version();
        Some((answer_rx, wake_rx, version))
    }

    /// No answer came: the prompt is withdrawn, the state spent, the call not run.
    async fn withdraw(&self, c: &Call<'_>, rid: &str, state: &str, cancelled: bool) {
        // Withdraw our prompt: nobody is waiting for its answer any more.
        self.send_client(&json!({
            "jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": rid, "reason": if cancelled { "the tool call was cancelled" } else { "the confirmation timed out" }},
        }));
        self.spend(c, state).await;
        let why = if cancelled {
            "the client cancelled the call while the prompt was open"
        } else {
            "nobody answered the prompt before it expired"
        };
        self.not_obtained(c, why).await;
    }

    /// The human accepted: the target may have changed while they read the prompt, so it
    /// is judged again once every change that arrived meanwhile has been answered.
    async fn legacy_approved(
        &self,
        c: &Call<'_>,
        state: &str,
        request_id: &str,
    ) -> Option<Approval> {
        let s = c.shown;
        self.rejoin(c.id).await;
        let now = match self.state_fp(c.gate, c.args).await {
            Ok(fp) => fp,
            Err(e) => {
                self.spend(c, state).await;
                let text = format!(
                    "Cannot recompute the confirmation target of `{}` after approval: {e}. Nothing was run.",
                    s.tool
                );
                self.refuse(
                    c.id,
                    Refusal::new(ErrorCode::InvalidInput, text, s.details()),
                );
                return None;
            }
        };
        match self
            .daemon
            .open_state(state, c.binding.clone(), true, &now)
            .await
        {
            // Guarded mode: the accept only cues the redemption of a human's approval.
            Ok(_) if self.daemon.guarded() => {
                let shown = Shown {
                    state_fp: &now,
                    ..s.clone()
                };
                let at_now = Call {
                    shown: &shown,
                    ..*c
                };
                self.accepted_guarded(&at_now, Some(request_id)).await
            }
            Ok(_) => Some(Approval {
                route: "legacy_elicitation",
                redemption: None,
            }),
            Err(e) => {
                self.refuse(c.id, self.daemon_result(&e, s));
                None
            }
        }
    }

    /// Spends the route's state whatever the outcome (it never authorizes anything again).
    async fn spend(&self, c: &Call<'_>, state: &str) {
        let _ = self
            .daemon
            .open_state(state, c.binding.clone(), true, "")
            .await;
    }
}
