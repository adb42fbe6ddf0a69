//! What became of a call that waited on a human: one `tc.call.outcome` each, executed,
//! errored or unknown once an approved call was sent, denied where confirm refused it.
//!
//! Recorded through the engine's ordered event queue (`govern::gov_event`), which the exit
//! path flushes, so the outcome of the last call before the server exits is not lost.

use serde_json::{json, Value};
use tc_core::codes::{events, Outcome};
use tokio::sync::mpsc;

use crate::engine::govern::governor::GovEvent;
use crate::engine::{Call, Shim};

/// An approved call on its way to the downstream, kept with its forwarded entry: settled
/// with the outcome its answer shows, or, dropped unsettled (the entry went away without
/// an answer: the server exited, the table made room, an answer over the cap), `unknown`.
pub(in crate::engine) struct Ran {
    tool: String,
    args_hash: String,
    state_fp: String,
    /// RecordConsumed's route (how it was approved).
    route: &'static str,
    /// The raised request it answered, when there was one.
    request_id: Option<String>,
    /// The engine's ordered event queue; None once settled.
    queue: Option<mpsc::UnboundedSender<Box<GovEvent>>>,
}

impl Ran {
    pub(in crate::engine) fn of(shim: &Shim, c: &Call<'_>, route: &'static str) -> Box<Ran> {
        Box::new(Ran {
            tool: c.binding.tool.clone(),
            args_hash: c.binding.args_hash.clone(),
            state_fp: c.shown.state_fp.to_string(),
            route,
            request_id: c.raised.get().cloned(),
            queue: Some(shim.event_queue().clone()),
        })
    }

    /// Records how the call ended (once: a settled `Ran` records nothing more).
    pub(in crate::engine) fn settle(mut self, o: Outcome) {
        self.record(o);
    }

    /// The server answered with a round of its own: this run has no outcome yet (the
    /// call's next run, with the client's answer, records its own).
    pub(in crate::engine) fn goes_on(mut self) {
        self.queue = None;
    }

    fn record(&mut self, o: Outcome) {
        let Some(queue) = self.queue.take() else {
            return;
        };
        let _ = queue.send(Box::new(GovEvent::Append {
            kind: events::CALL_OUTCOME,
            tool: std::mem::take(&mut self.tool),
            args_hash: std::mem::take(&mut self.args_hash),
            state_fp: std::mem::take(&mut self.state_fp),
            detail: detail(o, self.route, self.request_id.as_ref()),
        }));
    }
}

impl Drop for Ran {
    fn drop(&mut self) {
        self.record(Outcome::Unknown);
    }
}

/// The outcome of a call the downstream answered: an error, or a result marked
/// `isError`, is `errored`; any other result `executed`.
pub(in crate::engine) fn answered(msg: &Value) -> Outcome {
    let failed = msg.get("error").is_some()
        || msg
            .get("result")
            .and_then(|r| r.get("isError"))
            .and_then(Value::as_bool)
            == Some(true);
    if failed {
        Outcome::Errored
    } else {
        Outcome::Executed
    }
}

fn detail(o: Outcome, route: &str, request_id: Option<&String>) -> Value {
    let mut d = json!({ "outcome": o.as_str(), "route": route });
    if let Some(id) = request_id {
        d["request_id"] = json!(id);
    }
    d
}

impl Shim {
    /// Logs `tc.elicit.not_obtained` (`why` in its detail) and the call's `denied`
    /// outcome (`step`: what stopped it).
    pub(in crate::engine) async fn log_not_obtained(
        &self,
        c: &Call<'_>,
        why: &str,
        step: &'static str,
    ) {
        let ev = events::NOT_OBTAINED;
        let detail = json!({ "why": why });
        if let Err(e) = self
            .daemon
            .append_event(ev, c.binding, c.shown.state_fp, detail)
            .await
        {
            tracing::warn!("recording the unobtained approval failed: {e}");
        }
        self.record_denied(c, step);
    }

    /// Records that a call which waited on a human was not run; `why` names the step
    /// that stopped it (`declined`, `not_obtained`, `redefined`, `acl`, `cancelled`).
    pub(in crate::engine) fn record_denied(&self, c: &Call<'_>, why: &'static str) {
        self.gov_event(GovEvent::Append {
            kind: events::CALL_OUTCOME,
            tool: c.binding.tool.clone(),
            args_hash: c.binding.args_hash.clone(),
            state_fp: c.shown.state_fp.to_string(),
            detail: detail(Outcome::Denied, why, c.raised.get()),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_or_is_error_result_is_errored_anything_else_executed() {
        let a = |v: Value| answered(&v);
        assert_eq!(
            a(json!({"id": 1, "result": {"content": []}})),
            Outcome::Executed
        );
        assert_eq!(
            a(json!({"id": 1, "result": {"content": [], "isError": false}})),
            Outcome::Executed
        );
        assert_eq!(
            a(json!({"id": 1, "result": {"content": [], "isError": true}})),
            Outcome::Errored
        );
        assert_eq!(
            a(json!({"id": 1, "error": {"code": -32603, "message": "x"}})),
            Outcome::Errored
        );
    }
}
