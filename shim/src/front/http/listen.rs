//! `subscriptions/listen` (2026-07-28): a stateless caller's stream of the list-changed
//! notifications its conversation's downstream sends, acknowledged first, each tagged.
//!
//! tc honours `toolsListChanged`, `promptsListChanged` and `resourcesListChanged` when the
//! downstream speaks the legacy era and its `initialize` advertised that kind's
//! `listChanged` (it then sends them unasked); it subscribes to nothing downstream, so for
//! a 2026-07-28 downstream and for `resourceSubscriptions`/`taskIds` the acknowledgement
//! honours nothing. Nothing the caller did not ask for is sent.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::answer::{event, rpc_error};
use super::conv::Conv;
use super::modern;
use super::subscription::{Filter, SUBSCRIPTION_ID};
use crate::wire::era;
use crate::wire::jsonrpc;

/// What serving a `subscriptions/listen` needs of its request (the body itself is not
/// kept while the downstream's era is found out).
pub struct Request {
    filter: Option<Filter>,
    meta: Value,
}

impl Request {
    pub fn of(msg: &Value) -> Request {
        Request {
            filter: Filter::requested(msg),
            meta: era::request_meta(msg).cloned().unwrap_or_default(),
        }
    }
}

/// Answers a `subscriptions/listen` request with its stream: the acknowledgement, then
/// every matching notification until the caller hangs up or the conversation ends. The
/// stream's place is taken first, so at most `MAX_LISTENERS` (16) requests of a
/// conversation wait on the downstream's era.
pub async fn serve(conv: &Arc<Conv>, id: Value, req: Request) -> Response {
    let Some(asked) = req.filter else {
        let m = "subscriptions/listen needs params.notifications (an object)";
        return rpc_error(StatusCode::BAD_REQUEST, &id, modern::INVALID_PARAMS, m);
    };
    let Some(slot) = conv.reserve_listener() else {
        let m = "this caller already holds the most subscriptions/listen streams tc keeps open";
        return rpc_error(
            StatusCode::TOO_MANY_REQUESTS,
            &id,
            jsonrpc::INTERNAL_ERROR,
            m,
        );
    };
    let filter = match conv.shim.legacy_capabilities(&req.meta).await {
        Ok(Some(caps)) => asked.and(Filter::advertised(&caps)),
        Ok(None) => Filter::default(),
        Err(e) => {
            tracing::warn!("subscriptions/listen: could not find out the downstream's era: {e}");
            Filter::default()
        }
    };
    let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
        "params": {"notifications": filter.honoured(), "_meta": {SUBSCRIPTION_ID: &id}}});
    let Some(rx) = conv.listen(id.clone(), filter) else {
        let m = "the conversation ended (its downstream went away); open a new stream";
        return rpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            &id,
            jsonrpc::INTERNAL_ERROR,
            m,
        );
    };
    let first = futures_util::stream::once(async move { event(ack.to_string().into_bytes()) });
    // The stream holds its slot (and so the conversation) until the client hangs up.
    let rest = futures_util::stream::unfold((rx, slot), |(mut rx, slot)| async move {
        let b = rx.recv().await?;
        Some((event(b), (rx, slot)))
    });
    use futures_util::StreamExt as _;
    Sse::new(first.chain(rest))
        .keep_alive(KeepAlive::default())
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::http::subscription::tag;

    #[test]
    fn a_filter_passes_only_what_was_asked() {
        let msg = json!({"params": {"notifications": {"promptsListChanged": true,
            "toolsListChanged": false, "resourceSubscriptions": ["file:///x"]}}});
        let f = Filter::requested(&msg).unwrap();
        assert!(f.wants("notifications/prompts/list_changed"));
        assert!(!f.wants("notifications/tools/list_changed"));
        assert!(!f.wants("notifications/resources/updated"));
        assert_eq!(f.honoured(), json!({"promptsListChanged": true}));
        assert!(Filter::requested(&json!({"params": {"notifications": []}})).is_none());
    }

    #[test]
    fn only_kinds_the_server_advertised_are_honoured() {
        let msg = json!({"params": {"notifications": {"promptsListChanged": true,
            "toolsListChanged": true, "resourcesListChanged": true}}});
        let asked = Filter::requested(&msg).unwrap();
        let caps = json!({"tools": {"listChanged": true}, "prompts": {},
            "resources": {"listChanged": "yes"}});
        let f = asked.and(Filter::advertised(&caps));
        assert_eq!(f.honoured(), json!({"toolsListChanged": true}));
        assert!(!f.wants("notifications/prompts/list_changed"));
        let none = asked.and(Filter::advertised(&Value::Null));
        assert_eq!(none.honoured(), json!({}));
    }

    #[test]
    fn a_tag_names_the_subscription_and_keeps_the_rest() {
        let line = br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
        let t: Value = serde_json::from_slice(&tag(line, &json!(7)).unwrap()).unwrap();
        assert_eq!(t["params"]["_meta"][SUBSCRIPTION_ID], 7);
        assert_eq!(t["method"], "notifications/tools/list_changed");
        let line = br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"k":1}}}"#;
        let t: Value = serde_json::from_slice(&tag(line, &json!("s")).unwrap()).unwrap();
        assert_eq!(t["params"]["_meta"], json!({"k": 1, SUBSCRIPTION_ID: "s"}));
    }
}
