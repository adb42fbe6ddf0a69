//! A target's sender: takes pushes from its queue one at a time, retries each with
//! exponential backoff up to a cap, and records how it ended.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tc_core::codes::events;

use super::{Attempt, Notice, Target};
use crate::ledger::Ledger;
use crate::record::NewEvent;

/// How often and how patiently a push is tried.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    pub attempts: u32,
    pub first: Duration,
    pub max: Duration,
}

impl Retry {
    /// The wait after failed attempt `n` (1-based): `first`, doubled each time, capped.
    pub fn delay(&self, n: u32) -> Duration {
        let factor = 1u32.checked_shl(n.saturating_sub(1)).unwrap_or(u32::MAX);
        self.first.saturating_mul(factor).min(self.max)
    }
}

/// A per-target counter key (target names are checked to be label-safe).
pub fn counter(name: &str, target: &str) -> (String, String) {
    (name.to_string(), format!("target=\"{target}\""))
}

/// How a push ended: after how many attempts, and why when it was given up.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Sent(u32),
    Failed(u32, String),
}

/// Tries `n` on `t` until it is sent, refused for good, or out of attempts.
pub async fn deliver(t: &Target, client: &reqwest::Client, retry: Retry, n: &Notice) -> Outcome {
    let mut tried = 0;
    loop {
        tried += 1;
        let why = match t.attempt(client, n).await {
            Attempt::Sent => return Outcome::Sent(tried),
            Attempt::GiveUp(why) => return Outcome::Failed(tried, why),
            Attempt::Retry(why) => why,
        };
        if tried >= retry.attempts {
            return Outcome::Failed(tried, why);
        }
        tracing::debug!(target_name = %t.name, request_id = %n.request_id, attempt = tried,
            why = %why, "push: attempt failed, retrying");
        tokio::time::sleep(retry.delay(tried)).await;
    }
}

/// The sender's loop: one push at a time, in order, for as long as tcd runs.
pub async fn run(t: Arc<Target>, client: reqwest::Client, retry: Retry, ledger: Arc<Ledger>) {
    loop {
        let n = t.queue.take().await;
        let outcome = deliver(&t, &client, retry, &n).await;
        record(&ledger, &t.name, &n, outcome).await;
    }
}

/// Counts the outcome; a push given up is also an audit event (the human was not told),
/// with the target's name and the reason, never a URL, token or secret.
async fn record(ledger: &Arc<Ledger>, target: &str, n: &Notice, outcome: Outcome) {
    let store = &ledger.store;
    let tried = match &outcome {
        Outcome::Sent(k) | Outcome::Failed(k, _) => *k,
    };
    if tried > 1 {
        store.bump(
            counter("tc_push_retries_total", target),
            u64::from(tried - 1),
        );
    }
    let (attempts, why) = match outcome {
        Outcome::Sent(_) => {
            store.bump(counter("tc_push_sent_total", target), 1);
            return;
        }
        Outcome::Failed(k, why) => (k, why),
    };
    store.bump(counter("tc_push_failed_total", target), 1);
    tracing::warn!(target_name = %target, request_id = %n.request_id, attempts, why = %why,
        "push given up");
    let ev = NewEvent {
        kind: events::PUSH_FAILED,
        vault: n.vault.clone(),
        tool: n.tool.clone(),
        caller: n.caller.clone(),
        args_hash: n.args_hash.clone(),
        state_fp: String::new(),
        detail: json!({
            "target": target,
            "request_id": n.request_id,
            "attempts": attempts,
            "why": why,
        }),
        owner: None,
    };
    let l = ledger.clone();
    if let Err(e) = ledger.store.call(move || l.store.append(ev)).await {
        tracing::warn!(error = %e, "push: recording tc.push.failed failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let r = Retry {
            attempts: 40,
            first: Duration::from_millis(100),
            max: Duration::from_millis(1000),
        };
        let ms: Vec<u128> = (1..=6).map(|n| r.delay(n).as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(r.delay(40).as_millis(), 1000, "no overflow far out");
    }
}
