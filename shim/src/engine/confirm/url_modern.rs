//! Route 3u, URL elicitation on the 2026-07-28 era: round 1 answers `input_required` with the
//! page's link; the re-sent call (its state spent once) waits for tcd's decision on the page.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::daemon_client::DaemonError;
use crate::engine::confirm::approved::ROUTE;
use crate::engine::confirm::continued::Resumed;
use crate::engine::confirm::form::{self, CONFIRM_KEY};
use crate::engine::confirm::summary::summarize_gated;
use crate::engine::confirm::url_mode::{
    read_url_result, request_url, url_message, Ended, UrlAnswer,
};
use crate::engine::refusal::by_request;
use crate::engine::{key, Call, Shim};

/// What a route-3u state carries (tcd's `inner` bytes): the request the link points at,
/// sealed with the call's binding, so the re-sent call waits on that request only.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(in crate::engine) struct UrlInner {
    url_request: String,
}

impl UrlInner {
    /// The request id, if `inner` is a route-3u state (a downstream round's `Inner` is not:
    /// both refuse each other's fields).
    pub(in crate::engine) fn read(inner: &[u8]) -> Option<String> {
        serde_json::from_slice::<UrlInner>(inner)
            .ok()
            .map(|u| u.url_request)
    }
}

/// The client's answer to our link in a re-sent call, if it carries one.
pub(in crate::engine) fn url_answer(params: &Value) -> Option<UrlAnswer> {
    params
        .get("inputResponses")
        .and_then(|r| r.get(CONFIRM_KEY))
        .map(read_url_result)
}

impl Shim {
    /// Route 3u, round 1: raises the request, seals a state naming it and answers
    /// `input_required` with the page's link for it.
    pub(in crate::engine) async fn offer_url_modern(&self, c: &Call<'_>, base: &str) {
        let summary = summarize_gated(c.shown.tool, c.args, c.gate);
        let Some(request_id) = self.raise_call(c, &summary).await else {
            return;
        };
        let Some(url) = request_url(base, &request_id) else {
            self.not_obtained(c, "tcd's request id cannot be put in a link")
                .await;
            return;
        };
        let inner = serde_json::to_vec(&UrlInner {
            url_request: request_id.clone(),
        })
        .expect("UrlInner serializes");
        match self
            .daemon
            .seal_state(c.binding.clone(), c.shown.state_fp, inner)
            .await
        {
            Ok(state) => {
                let msg = url_message(c.shown, &summary, &request_id);
                self.answer(c.id, form::input_required_url(&state, &msg, &url));
            }
            Err(e) => self.refuse(c.id, self.daemon_result(&e, c.shown)),
        }
    }

    /// Route 3u, round 2: the state (verified, naming `request_id`) is spent whatever the
    /// answer. An accept only means the human agreed to open the page: the call waits for
    /// tcd's decision there, never approved by the answer itself.
    pub(in crate::engine) async fn resume_url(
        &self,
        c: &Call<'_>,
        state: &str,
        request_id: &str,
        answer: Option<UrlAnswer>,
    ) -> Resumed {
        if let Err(e) = self
            .daemon
            .open_state(state, c.binding.clone(), true, "")
            .await
        {
            return self.url_unopened(c, &e, answer).await;
        }
        match answer {
            Some(UrlAnswer::Opened) => match self.wait_url(c, request_id).await {
                Some(a) => Resumed::Approved(a),
                None => Resumed::Answered,
            },
            Some(UrlAnswer::Declined) => {
                self.declined_with_request(c, request_id).await;
                Resumed::Answered
            }
            Some(UrlAnswer::Cancelled) => {
                let why = "the human dismissed the link to the approval page";
                self.url_not_obtained(c, request_id, why).await
            }
            None => {
                let why = "the call came back without an answer to the link";
                self.url_not_obtained(c, request_id, why).await
            }
        }
    }

    /// A route-3u state that would not open (or that could not be told from a form's, see
    /// `modern.rs`): a no is honoured, a spent one refused; otherwise a fresh offer (the
    /// pending request keeps its id).
    pub(in crate::engine) async fn url_unopened(
        &self,
        c: &Call<'_>,
        e: &DaemonError,
        answer: Option<UrlAnswer>,
    ) -> Resumed {
        let spent = e.reason() == Some(tc_core::Reason::Spent);
        match answer {
            Some(UrlAnswer::Declined) if !spent => self.declined(c).await,
            Some(UrlAnswer::Cancelled) if !spent => {
                self.not_obtained(c, "the human dismissed the link to the approval page")
                    .await
            }
            _ => return self.state_refused(c, e).await,
        }
        Resumed::Answered
    }

    /// Holds the call (its id stays in use; a cancellation ends the wait without an
    /// answer) until tcd settles the request or the TTL passes, then redeems it as the
    /// target is now.
    async fn wait_url(&self, c: &Call<'_>, request_id: &str) -> Option<crate::engine::Approval> {
        let (wake_tx, wake_rx) = oneshot::channel();
        if !self.hold_for_human(c, wake_tx, None) {
            return None;
        }
        self.step_aside(c.id);
        let (ended, _) = self.wait_for_page(c, request_id, None, wake_rx).await;
        self.lock().holds.end_wait(&key(c.id), None);
        let cancelled = self.lock().holds.cancelled(&key(c.id));
        match (cancelled, ended) {
            // The exit path answered it meanwhile.
            (None, _) => None,
            // Cancelled: `answer` sends nothing for it (and drops its tracking). The
            // request stays pending, so a later approval is redeemed by the plain retry.
            (Some(true), _) => {
                self.answer(c.id, json!({}));
                None
            }
            (Some(false), Ended::Settled | Ended::TimedOut) => self.redeem_now(c, ROUTE).await,
            (Some(false), Ended::Cancelled | Ended::Client(_)) => {
                self.not_obtained(c, "the wait for the approval page ended")
                    .await;
                None
            }
        }
    }

    /// `approval_not_obtained`, naming `tcctl approve ID` and the page: the request stays
    /// pending, so an approval given later is redeemed by the plain retry.
    async fn url_not_obtained(&self, c: &Call<'_>, request_id: &str, why: &str) -> Resumed {
        self.log_not_obtained(c, why, "not_obtained").await;
        let base = self.page.clone().unwrap_or_default();
        let url = request_url(&base, request_id).unwrap_or_default();
        let mode = self.daemon.mode();
        let r = by_request::page_not_obtained(c.shown, request_id, &url, why, &mode);
        self.refuse(c.id, r);
        Resumed::Answered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_inner_and_a_downstream_round_are_told_apart() {
        let b = serde_json::to_vec(&UrlInner {
            url_request: "abcd2345".into(),
        })
        .unwrap();
        assert_eq!(UrlInner::read(&b).as_deref(), Some("abcd2345"));
        assert_eq!(
            UrlInner::read(br#"{"state":"s","approved":true,"mac":""}"#),
            None
        );
        assert_eq!(
            UrlInner::read(br#"{"url_request":"a","approved":true}"#),
            None
        );
        assert_eq!(UrlInner::read(b""), None);
    }

    #[test]
    fn only_the_action_of_the_answer_counts() {
        let a = |v: Value| url_answer(&json!({ "inputResponses": { "confirm": v } }));
        assert_eq!(a(json!({"action": "accept"})), Some(UrlAnswer::Opened));
        assert_eq!(
            a(json!({"action": "accept", "content": {"approve": true}})),
            Some(UrlAnswer::Opened)
        );
        assert_eq!(a(json!({"action": "decline"})), Some(UrlAnswer::Declined));
        assert_eq!(a(json!({"action": "cancel"})), Some(UrlAnswer::Cancelled));
        assert_eq!(a(json!("accept")), Some(UrlAnswer::Cancelled));
        assert_eq!(url_answer(&json!({"inputResponses": {"x": {}}})), None);
        assert_eq!(url_answer(&json!({})), None);
    }
}
