//! How an exchange is answered: JSON when the request's answer comes first, else an
//! event stream of the related messages then the answer; and the front's error answers.

use std::convert::Infallible;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::conv::{Exchange, Msg};
use super::plain;
use crate::wire::jsonrpc;

/// own id when the engine saw another.
pub async fn answer(mut ex: Exchange, restore: Option<Value>) -> Response {
    let modern = restore.is_some();
    let fix = move |b: Vec<u8>| -> Vec<u8> {
        match &restore {
            Some(id) => match serde_json::from_slice::<Value>(&b) {
                Ok(mut v) => {
                    v["id"] = id.clone();
                    v.to_string().into_bytes()
                }
                Err(_) => b,
            },
            None => b,
        }
    };
    match ex.next().await {
        Some(Msg::Final(b)) => {
            let b = fix(b);
            let status = if modern {
                status_of(&b)
            } else {
                StatusCode::OK
            };
            json_body(status, b)
        }
        None => unavailable(&anyhow::anyhow!(
            "the downstream went away before answering"
        )),
        Some(Msg::Related(first)) => {
            let stream = futures_util::stream::unfold(
                (Some(first), Some(ex), fix),
                |(pending, ex, fix)| async move {
                    if let Some(b) = pending {
                        return Some((event(b), (None, ex, fix)));
                    }
                    let mut ex = ex?;
                    match ex.next().await? {
                        Msg::Related(b) => Some((event(b), (None, Some(ex), fix))),
                        Msg::Final(b) => Some((event(fix(b)), (None, None, fix))),
                    }
                },
            );
            Sse::new(stream)
                .keep_alive(KeepAlive::default())
                .into_response()
        }
    }
}

pub fn event(b: Vec<u8>) -> Result<Event, Infallible> {
    Ok(Event::default()
        .event("message")
        .data(String::from_utf8_lossy(&b)))
}

/// The HTTP status of a stateless answer, by its JSON-RPC error code.
pub fn status_of(b: &[u8]) -> StatusCode {
    let code = serde_json::from_slice::<Value>(b)
        .ok()
        .and_then(|v| v.pointer("/error/code").and_then(Value::as_i64));
    match code {
        Some(-32700 | -32600 | -32602 | -32020 | -32021 | -32022) => StatusCode::BAD_REQUEST,
        Some(-32601) => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

pub fn json_body(status: StatusCode, b: Vec<u8>) -> Response {
    let mut r = (status, b).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

pub fn rpc_error(status: StatusCode, id: &Value, code: i64, msg: impl Into<String>) -> Response {
    json_body(
        status,
        jsonrpc::error(id, code, msg).to_string().into_bytes(),
    )
}

pub fn session_not_found(id: Option<&Value>) -> Response {
    let m = "session not found (it expired, was ended, or belongs to another caller): initialize a new one";
    rpc_error(StatusCode::NOT_FOUND, id.unwrap_or(&Value::Null), -32001, m)
}

pub fn full() -> Response {
    retry_later(
        StatusCode::SERVICE_UNAVAILABLE,
        "too many sessions: try again later",
    )
}

/// The caller holds its share of the sessions (`max_sessions_per_caller`).
pub fn caller_full() -> Response {
    retry_later(
        StatusCode::TOO_MANY_REQUESTS,
        "too many sessions for this caller: end one (DELETE) or let one expire, then retry",
    )
}

fn retry_later(status: StatusCode, why: &'static str) -> Response {
    let mut r = plain(status, why);
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("30"));
    r
}

pub fn unavailable(e: &anyhow::Error) -> Response {
    tracing::warn!("HTTP front: {e:#}");
    plain(
        StatusCode::BAD_GATEWAY,
        format!("the downstream MCP server is not available: {e:#}"),
    )
}

pub fn unreachable_busy(id: &Value) -> Response {
    rpc_error(
        StatusCode::INTERNAL_SERVER_ERROR,
        id,
        jsonrpc::INTERNAL_ERROR,
        "internal id clash",
    )
}
