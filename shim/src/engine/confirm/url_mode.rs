//! Route 4, URL-mode elicitation (MCP 2025-11-25): a legacy client declaring `elicitation.url`
//! gets the approval page's link; the call runs only under the approval tcd then holds.

use std::time::Duration;

use serde_json::{json, Value};
use tc_core::display::escape;
use tokio::sync::oneshot;

use crate::engine::confirm::summary::summarize_gated;
use crate::engine::refusal::Shown;
use crate::engine::{key, Approval, Call, Shim, OWN_ID_PREFIX};
use std::sync::atomic::Ordering;

/// How often tcd is asked whether the request was answered on the page (or by
/// `tcctl approve` / `decline`). One ListPending of one vault: cheap.
const POLL: Duration = Duration::from_millis(250);
/// Past the TTL, tcd reports the request expired; this margin only bounds the wait if it
/// somehow does not.
const GRACE: Duration = Duration::from_secs(5);

/// RecordConsumed's route for a call approved on the page after a legacy URL elicitation.
const ROUTE: &str = "url_elicitation";

/// The client's answer to a URL elicitation (no content: the page holds the decision).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::engine) enum UrlAnswer {
    /// The human agreed to open the page: keep waiting for tcd.
    Opened,
    /// The human said no in the client: the hard stop.
    Declined,
    /// Dismissed, or anything unreadable: nobody said no.
    Cancelled,
}

/// Reads the client's response to our `elicitation/create` (its `result`, or an error).
pub(in crate::engine) fn read_url_answer(resp: &Value) -> UrlAnswer {
    resp.get("result")
        .map_or(UrlAnswer::Cancelled, read_url_result)
}

/// Reads an `ElicitResult` to a URL elicitation: only its action counts (content, if any,
/// is ignored: a form's `approve: true` sent here approves nothing).
pub(in crate::engine) fn read_url_result(result: &Value) -> UrlAnswer {
    match result.get("action").and_then(Value::as_str) {
        Some("accept") => UrlAnswer::Opened,
        Some("decline") => UrlAnswer::Declined,
        _ => UrlAnswer::Cancelled,
    }
}

/// The page's base URL from `[approvals] listen`; `None` (no URL route) when it is unset
/// or not a socket address.
pub fn page_base(listen: Option<&str>) -> Option<String> {
    let addr: std::net::SocketAddr = listen?.trim().parse().ok()?;
    Some(format!("http://{addr}"))
}

/// The page of request `id`; `None` for an id that would need escaping in a URL path
/// (tcd's ids never do).
pub fn request_url(base: &str, id: &str) -> Option<String> {
    let safe = !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    safe.then(|| format!("{base}/requests/{id}"))
}

/// What the client shows beside the link: the tool, the vault, the request id, and that
/// opening the page is not approving.
pub fn url_message(s: &Shown<'_>, summary: &str, id: &str) -> String {
    format!(
        "An AI agent wants to run `{}` on `{}` (request {}).\n\nCall: {summary}\n\nOpen the \
         link to see the full arguments and approve or decline it on tc's approval page. \
         Opening it approves nothing; the call runs once the approval is given there.",
        escape(s.tool),
        escape(s.vault),
        escape(id)
    )
}

/// How the wait ended.
pub(in crate::engine) enum Ended {
    /// tcd no longer shows the request pending (approved, declined, expired, gone).
    Settled,
    Client(UrlAnswer),
    /// The call was cancelled, or the shim's own bound passed.
    Cancelled,
    TimedOut,
}

impl Shim {
    /// Route 4: raise, send the page's link, wait for tcd (the client's answer can only
    /// stop the wait), then redeem the approval against the target as it is now.
    pub(in crate::engine) async fn url_round_trip(
        &self,
        c: &Call<'_>,
        base: &str,
    ) -> Option<Approval> {
        let summary = summarize_gated(c.shown.tool, c.args, c.gate);
        let request_id = self.raise_call(c, &summary).await?;
        let Some(url) = request_url(base, &request_id) else {
            self.not_obtained(c, "tcd's request id cannot be put in a link")
                .await;
            return None;
        };
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let rid = format!("{OWN_ID_PREFIX}elicit-{n}");
        let elicitation_id = format!("tc-{request_id}-{n}");
        let (answer_tx, answer_rx) = oneshot::channel();
        let (wake_tx, wake_rx) = oneshot::channel();
        let prompt = Some((rid.clone(), answer_tx));
        if !self.hold_for_human(c, wake_tx, prompt) {
            return None;
        }
        self.step_aside(c.id);
        self.send_client(&json!({
            "jsonrpc": "2.0", "id": rid, "method": "elicitation/create",
            "params": {
                "mode": "url",
                "message": url_message(c.shown, &summary, &request_id),
                "url": url,
                "elicitationId": elicitation_id,
            },
        }));
        let (ended, answered) = self
            .wait_for_page(c, &request_id, Some(answer_rx), wake_rx)
            .await;
        self.lock().holds.end_wait(&key(c.id), Some(&rid));
        if !answered {
            // Withdraw the prompt: nobody waits for its answer any more.
            self.send_client(&json!({
                "jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": rid, "reason": "the confirmation ended"},
            }));
        }
        self.url_outcome(c, ended, &request_id, &elicitation_id)
            .await
    }

    /// How the wait ended decides: a settled request (or the TTL) is redeemed as it is
    /// now; the client's no is a decline; anything else is not an approval.
    async fn url_outcome(
        &self,
        c: &Call<'_>,
        ended: Ended,
        request_id: &str,
        elicitation_id: &str,
    ) -> Option<Approval> {
        match ended {
            Ended::Settled => {
                self.send_client(&json!({
                    "jsonrpc": "2.0", "method": "notifications/elicitation/complete",
                    "params": {"elicitationId": elicitation_id},
                }));
                self.redeem_now(c, ROUTE).await
            }
            // Expired on tcd's clock: the redemption says so (item 6: a timeout reads as one).
            Ended::TimedOut => self.redeem_now(c, ROUTE).await,
            Ended::Client(UrlAnswer::Declined) => {
                self.declined_with_request(c, request_id).await;
                None
            }
            Ended::Client(_) => {
                self.not_obtained(c, "the human dismissed the link to the approval page")
                    .await;
                None
            }
            Ended::Cancelled => {
                self.not_obtained(
                    c,
                    "the client cancelled the call while it waited for the page",
                )
                .await;
                None
            }
        }
    }

    /// Waits until tcd settles the request, the client declines or cancels (legacy: its
    /// answer to our prompt comes on `answer_rx`; modern: it came with the call, so none),
    /// the call is cancelled, or the TTL passes, reporting progress meanwhile when the call
    /// asked for it. Also says whether the client answered.
    pub(in crate::engine) async fn wait_for_page(
        &self,
        c: &Call<'_>,
        request_id: &str,
        answer_rx: Option<oneshot::Receiver<Value>>,
        wake_rx: oneshot::Receiver<()>,
    ) -> (Ended, bool) {
        let poll = self.poll_page(c, request_id, answer_rx, wake_rx);
        self.with_progress(c, poll).await
    }

    /// [`Shim::wait_for_page`]'s loop: the client's answer, a cancellation, the deadline
    /// or tcd's word on the request, whichever comes first.
    async fn poll_page(
        &self,
        c: &Call<'_>,
        request_id: &str,
        mut answer_rx: Option<oneshot::Receiver<Value>>,
        wake_rx: oneshot::Receiver<()>,
    ) -> (Ended, bool) {
        let deadline = tokio::time::Instant::now() + self.prompt_ttl + GRACE;
        let mut answered = false;
        tokio::pin!(wake_rx);
        loop {
            let answer = async {
                match answer_rx.as_mut() {
                    Some(rx) => rx.await.ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = answer => {
                    answer_rx = None;
                    answered = true;
                    // A client error (no URL support after all) approves nothing.
                    match r.as_ref().map(read_url_answer) {
                        Some(UrlAnswer::Opened) => {}
                        Some(a) => return (Ended::Client(a), answered),
                        None => return (Ended::Cancelled, answered),
                    }
                }
                _ = &mut wake_rx => return (Ended::Cancelled, answered),
                _ = tokio::time::sleep_until(deadline) => return (Ended::TimedOut, answered),
                _ = tokio::time::sleep(POLL) => {
                    match self.daemon.request_status(c.shown.vault, request_id).await {
                        Ok(Some(s)) if s == "pending" => {}
                        Ok(_) => return (Ended::Settled, answered),
                        // Unreachable or refused: the redemption reports it.
                        Err(e) => {
                            tracing::info!("asking tcd for request {request_id} failed: {e}");
                            return (Ended::Settled, answered);
                        }
                    }
                }
            }
        }
    }

    /// Redeems the approval tcd holds for this exact call against its target as it is
    /// after the wait (RecordConsumed's `route`); a decline, expiry, drift or absence is
    /// answered here.
    pub(in crate::engine) async fn redeem_now(
        &self,
        c: &Call<'_>,
        route: &'static str,
    ) -> Option<Approval> {
        self.rejoin(c.id).await;
        let now = match self.state_fp(c.gate, c.args).await {
            Ok(fp) => fp,
            Err(e) => {
                let why = format!("cannot recompute the confirmation target after the wait: {e}");
                self.not_obtained(c, &why).await;
                return None;
            }
        };
        let shown = Shown {
            state_fp: &now,
            ..c.shown.clone()
        };
        let at_now = Call {
            shown: &shown,
            ..*c
        };
        match self.daemon.redeem_approved(c.binding.clone(), &now).await {
            Ok(r) => Some(Approval {
                route,
                redemption: Some(r),
            }),
            Err(e) => {
                self.answer_refused(&at_now, &e);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_urls() {
        assert_eq!(
            page_base(Some("127.0.0.1:7777")).as_deref(),
            Some("http://127.0.0.1:7777")
        );
        assert_eq!(
            page_base(Some("[::1]:7777")).as_deref(),
            Some("http://[::1]:7777")
        );
        assert_eq!(page_base(Some("localhost:7777")), None);
        assert_eq!(page_base(Some("")), None);
        assert_eq!(page_base(None), None);
        let b = "http://127.0.0.1:7777";
        assert_eq!(
            request_url(b, "ab12-C").as_deref(),
            Some("http://127.0.0.1:7777/requests/ab12-C")
        );
        assert_eq!(request_url(b, "a/../b"), None);
        assert_eq!(request_url(b, "a?x"), None);
        assert_eq!(request_url(b, ""), None);
    }

    #[test]
    fn url_answers() {
        let a = |v: Value| read_url_answer(&v);
        assert_eq!(
            a(json!({"result": {"action": "accept"}})),
            UrlAnswer::Opened
        );
        assert_eq!(
            a(json!({"result": {"action": "decline"}})),
            UrlAnswer::Declined
        );
        assert_eq!(
            a(json!({"result": {"action": "cancel"}})),
            UrlAnswer::Cancelled
        );
        assert_eq!(a(json!({"error": {"code": -1}})), UrlAnswer::Cancelled);
        assert_eq!(a(json!({"result": {}})), UrlAnswer::Cancelled);
    }
}
