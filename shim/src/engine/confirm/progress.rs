//! Keeping a client's request alive while its call waits on a human: `notifications/progress`
//! for the call's `progressToken`, every few seconds, only while the call is still held.
//!
//! Clients time a `tools/call` out (the TypeScript SDK after 60 s unless its
//! `resetTimeoutOnProgress` is set); a human may take minutes. A progress notification is
//! the one signal MCP gives for "still working" on a request that asked for it.

use std::future::Future;
use std::time::Duration;

use serde_json::{json, Value};

use crate::engine::{key, Call, Shim};

/// How often a waiting call reports progress: well inside every client default we know
/// (README, "Calls that wait on you").
pub(in crate::engine) const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// The call's `params._meta.progressToken`, if it asked for progress (a string or an
/// integer, as the schema defines it; anything else is no token).
pub(in crate::engine) fn progress_token(msg: &Value) -> Option<&Value> {
    let t = msg.get("params")?.get("_meta")?.get("progressToken")?;
    (t.is_string() || t.is_i64() || t.is_u64()).then_some(t)
}

/// The notification for the `n`th report of a call waiting on a human. `progress` must
/// increase (MCP), so it counts the reports; it names the tool only, never arguments.
fn waiting(token: &Value, n: u64, tool: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {
            "progressToken": token,
            "progress": n,
            "message": format!("waiting for a human to approve `{tool}`"),
        },
    })
}

impl Shim {
    /// Runs `wait` (a call held for a human) and, if the call carried a progress token,
    /// reports progress every [`PROGRESS_EVERY`] until it ends. Nothing is sent for a call
    /// no longer held (answered by the exit path, or cancelled).
    pub(in crate::engine) async fn with_progress<F: Future>(
        &self,
        c: &Call<'_>,
        wait: F,
    ) -> F::Output {
        let Some(token) = c.progress else {
            return wait.await;
        };
        tokio::pin!(wait);
        let start = tokio::time::Instant::now() + PROGRESS_EVERY;
        let mut tick = tokio::time::interval_at(start, PROGRESS_EVERY);
        let mut n = 0u64;
        loop {
            tokio::select! {
                out = &mut wait => return out,
                _ = tick.tick() => {
                    let held = self
                        .lock()
                        .holds
                        .get(&key(c.id))
                        .is_some_and(|h| !h.cancelled);
                    if held {
                        n += 1;
                        self.send_client(&waiting(token, n, c.shown.tool));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_string_or_integer_token_asks_for_progress() {
        let m = |t: Value| json!({"params": {"_meta": {"progressToken": t}}});
        assert_eq!(progress_token(&m(json!("a"))), Some(&json!("a")));
        assert_eq!(progress_token(&m(json!(7))), Some(&json!(7)));
        assert_eq!(progress_token(&m(json!(1.5))), None);
        assert_eq!(progress_token(&m(json!(true))), None);
        assert_eq!(progress_token(&m(json!({"x": 1}))), None);
        assert_eq!(progress_token(&json!({"params": {}})), None);
    }

    #[test]
    fn a_report_counts_up_and_names_the_tool_only() {
        let v = waiting(&json!("t"), 3, "write_file");
        assert_eq!(v["method"], "notifications/progress");
        assert_eq!(v["params"]["progressToken"], "t");
        assert_eq!(v["params"]["progress"], 3);
        assert!(v.get("id").is_none());
        let text = v["params"]["message"].as_str().unwrap();
        assert!(text.contains("write_file"), "{text}");
    }
}
