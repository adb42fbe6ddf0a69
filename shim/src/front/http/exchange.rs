//! The `/mcp` handlers: POST (a message in, its answer as `answer.rs` shapes it),
//! GET (a legacy session's stream of server messages) and DELETE (end a session).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::answer::{
    answer, caller_full, event, full, json_body, rpc_error, session_not_found, unavailable,
    unreachable_busy,
};
use super::conv::{Conv, Msg, Refused};
use super::sessions::NoRoom;
use super::{guard, modern, plain, Front};
use crate::engine::Parsed;
use crate::wire::jsonrpc;
use axum::extract::RawQuery;

const SESSION_HEADER: &str = "mcp-session-id";

/// Ids the front gives stateless requests, so concurrent ones of one caller never clash.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

pub async fn post(
    State(f): State<Arc<Front>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let caller = match super::caller::caller(&f.verifier, &headers, q.as_deref()).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    if let Err((s, m)) = guard::post_headers(&headers) {
        return plain(s, m);
    }
    let Ok(bytes) = axum::body::to_bytes(body, f.max_body).await else {
        let m = format!("the request body is over {} bytes", f.max_body);
        return rpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &Value::Null,
            jsonrpc::INVALID_REQUEST,
            m,
        );
    };
    // The one parse of the message: the front reads its era and headers from it, and
    // the engine judges it and forwards its bytes without parsing them again.
    let msg = match Parsed::parse(bytes.into()) {
        Ok(p) => p,
        Err(e) => {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                &Value::Null,
                e.code(),
                e.to_string(),
            )
        }
    };
    if modern::is_modern(&headers, msg.msg()) {
        stateless(&f, &caller, &headers, msg).await
    } else {
        legacy(&f, &caller, &headers, msg).await
    }
}

/// A 2026-07-28 request: checked headers, the caller's conversation, an engine-unique id.
async fn stateless(f: &Arc<Front>, caller: &str, h: &HeaderMap, parsed: Parsed) -> Response {
    let msg = parsed.msg();
    let id = msg.get("id").filter(|i| !i.is_null()).cloned();
    let params = match check_modern(h, msg, id.as_ref()) {
        Ok(p) => p,
        Err(refused) => return *refused,
    };
    let (Some(id), Some(_)) = (id, msg.get("method")) else {
        // No client notification means anything on this wire (cancelling is closing the
        // stream), and there is no session a response could belong to.
        return StatusCode::ACCEPTED.into_response();
    };
    if let Err(why) = crate::wire::ids::check_request_id(&id) {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            &crate::wire::ids::answer_id(&id),
            jsonrpc::INVALID_REQUEST,
            why.to_string(),
        );
    }
    let opened = || f.open(caller).inspect(|c| c.mark_stateless());
    let conv = match f.table.caller_conv(caller, opened) {
        Ok(Ok(c)) => c,
        Ok(Err(_)) => return full(),
        Err(e) => return unavailable(&e),
    };

    if msg.get("method").and_then(Value::as_str) == Some("subscriptions/listen") {
        let req = super::listen::Request::of(msg);
        drop(parsed);
        return super::listen::serve(&conv, id, req).await;
    }
    let inner = json!(format!(
        "tc-http-{}",
        NEXT_ID.fetch_add(1, Ordering::Relaxed)
    ));
    let parsed = match params {
        Some(p) => parsed.with_params(p),
        None => parsed,
    };
    match conv.submit(inner.clone(), parsed.with_id(inner)).await {
        Ok(ex) => answer(ex, Some(id)).await,
        Err(Refused::Busy) => unreachable_busy(&id),
        Err(Refused::Gone) => unavailable(&anyhow::anyhow!("the conversation just ended")),
    }
}

/// What a 2026-07-28 message must pass before a conversation sees it: its request shape
/// and its routing headers. Its `Mcp-Param-*` headers, or the refusal to send.
fn check_modern(
    h: &HeaderMap,
    msg: &Value,
    id: Option<&Value>,
) -> Result<modern::SentParams, Box<Response>> {
    let id = id.cloned().unwrap_or(Value::Null);
    if let Err((code, why)) = modern::check_request(msg) {
        let status = match code {
            modern::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
            _ => StatusCode::BAD_REQUEST,
        };
        return Err(Box::new(rpc_error(status, &id, code, why)));
    }
    modern::check_headers(h, msg).map_err(|why| {
        let code = modern::HEADER_MISMATCH;
        Box::new(rpc_error(
            StatusCode::BAD_REQUEST,
            &id,
            code,
            why.to_string(),
        ))
    })
}

/// A 2025-era message: `initialize` opens a session; anything else needs one.
async fn legacy(f: &Arc<Front>, caller: &str, h: &HeaderMap, msg: Parsed) -> Response {
    let method = msg.msg().get("method").and_then(Value::as_str);
    let initialize = method == Some("initialize");
    let has_method = method.is_some();
    let id = msg.msg().get("id").filter(|i| !i.is_null()).cloned();
    let sid = h.get(SESSION_HEADER).map(|v| v.to_str().unwrap_or(""));
    if initialize {
        return legacy_initialize(f, caller, sid.is_some(), id, msg).await;
    }
    let bad = |m: String| {
        rpc_error(
            StatusCode::BAD_REQUEST,
            id.as_ref().unwrap_or(&Value::Null),
            jsonrpc::INVALID_REQUEST,
            m,
        )
    };
    let Some(sid) = sid else {
        let m = "no MCP-Session-Id: send initialize first (or use the 2026-07-28 protocol)";
        return bad(m.into());
    };
    let Some(conv) = f.table.session(sid, caller) else {
        return session_not_found(id.as_ref());
    };
    if let Some(m) = version_mismatch(&conv, h) {
        return bad(m);
    }
    in_session(&conv, has_method, id, msg).await
}

/// A 2025-era `initialize`: it opens a session, so it comes without one, with an id.
async fn legacy_initialize(
    f: &Arc<Front>,
    caller: &str,
    has_session: bool,
    id: Option<Value>,
    msg: Parsed,
) -> Response {
    if has_session {
        let m = "initialize opens a session: send it without MCP-Session-Id";
        return rpc_error(
            StatusCode::BAD_REQUEST,
            id.as_ref().unwrap_or(&Value::Null),
            jsonrpc::INVALID_REQUEST,
            m,
        );
    }
    let Some(id) = id else {
        let m = "initialize needs a string or number id";
        return rpc_error(
            StatusCode::BAD_REQUEST,
            &Value::Null,
            jsonrpc::INVALID_REQUEST,
            m,
        );
    };
    open_session(f, caller, id, msg).await
}

/// Why a request's `MCP-Protocol-Version` (when it sends one) is refused: not the
/// version its session agreed on.
fn version_mismatch(conv: &Conv, h: &HeaderMap) -> Option<String> {
    let v = h.get(modern::VERSION_HEADER)?;
    let agreed = conv
        .version
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    (v.to_str().ok() != agreed.as_deref()).then(|| {
        format!(
            "MCP-Protocol-Version {:?} is not the version this session agreed on ({})",
            v.to_str().unwrap_or("?"),
            agreed.as_deref().unwrap_or("none")
        )
    })
}

/// A message within a 2025-era session: a request is answered, anything else is fed
/// to the conversation and accepted.
async fn in_session(
    conv: &Arc<Conv>,
    has_method: bool,
    id: Option<Value>,
    msg: Parsed,
) -> Response {
    match (has_method, id) {
        (true, Some(id)) => match conv.submit(id.clone(), msg).await {
            Ok(ex) => answer(ex, None).await,
            Err(Refused::Gone) => session_not_found(Some(&id)),
            Err(Refused::Busy) => {
                let m = "request id already in use by a request in flight";
                rpc_error(StatusCode::BAD_REQUEST, &id, jsonrpc::INVALID_REQUEST, m)
            }
        },
        _ => {
            conv.feed(msg).await;
            StatusCode::ACCEPTED.into_response()
        }
    }
}

/// Opens a session: a conversation whose `initialize` succeeded gets an id.
async fn open_session(f: &Arc<Front>, caller: &str, id: Value, msg: Parsed) -> Response {
    let slot = match f.table.reserve(caller) {
        Ok(slot) => slot,
        Err(NoRoom::Table) => return full(),
        Err(NoRoom::Caller) => return caller_full(),
    };
    let conv = match f.open(caller) {
        Ok(c) => c,
        Err(e) => return unavailable(&e),
    };
    let mut ex = match conv.submit(id.clone(), msg).await {
        Ok(ex) => ex,
        Err(Refused::Busy) => return unreachable_busy(&id),
        Err(Refused::Gone) => {
            return unavailable(&anyhow::anyhow!("the downstream ended during initialize"))
        }
    };
    let answer = loop {
        match ex.next().await {
            Some(Msg::Final(b)) => break b,
            Some(Msg::Related(_)) => continue,
            None => {
                conv.close();
                return unavailable(&anyhow::anyhow!("the downstream ended during initialize"));
            }
        }
    };
    let v: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
    let Some(version) = v.pointer("/result/protocolVersion").and_then(Value::as_str) else {
        conv.close();
        return json_body(StatusCode::OK, answer);
    };
    *conv.version.lock().unwrap_or_else(|p| p.into_inner()) = Some(version.to_string());
    let sid = f.table.add_session(Arc::clone(&conv), slot);
    let mut r = json_body(StatusCode::OK, answer);
    if let Ok(v) = HeaderValue::from_str(&sid) {
        r.headers_mut().insert(SESSION_HEADER, v);
    }
    r
}

/// The answer to one request: JSON when it comes before anything else, else an event
/// stream carrying the related messages and then the answer. `restore` is the client's
/// GET: a legacy session's stream of server messages (one at a time).
pub async fn get_stream(
    State(f): State<Arc<Front>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
) -> Response {
    let modern_hdr = headers
        .get(modern::VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| !modern::LEGACY_VERSIONS.contains(&v));
    if modern_hdr {
        let mut r = plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "the 2026-07-28 protocol has no GET stream",
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return r;
    }
    if !guard::accepts(&headers, ["text/event-stream"]) {
        return plain(
            StatusCode::NOT_ACCEPTABLE,
            "not acceptable: a GET must accept text/event-stream",
        );
    }
    let caller = match super::caller::caller(&f.verifier, &headers, q.as_deref()).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let Some(sid) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return plain(StatusCode::BAD_REQUEST, "no MCP-Session-Id");
    };
    let Some(conv) = f.table.session(sid, &caller) else {
        return session_not_found(None);
    };
    let rx = match conv.open_stream() {
        Ok(rx) => rx,
        Err(Refused::Gone) => return session_not_found(None),
        Err(Refused::Busy) => {
            return plain(
                StatusCode::CONFLICT,
                "this session already has a GET stream open",
            )
        }
    };
    let stream =
        futures_util::stream::unfold((rx, conv), |(mut rx, conv): (_, Arc<Conv>)| async move {
            let b = rx.recv().await?;
            Some((event(b), (rx, conv)))
        });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// DELETE: ends the caller's session.
pub async fn delete(
    State(f): State<Arc<Front>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
) -> Response {
    let caller = match super::caller::caller(&f.verifier, &headers, q.as_deref()).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let Some(sid) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return plain(StatusCode::BAD_REQUEST, "no MCP-Session-Id");
    };
    if f.table.end_session(sid, &caller) {
        StatusCode::OK.into_response()
    } else {
        session_not_found(None)
    }
}
