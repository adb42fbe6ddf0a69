//! The remote server's 2025 session as a downstream keeps it: its id and version
//! learnt and sent back, the headers each request carries, its GET stream, its end.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT};
use hyper::{Method, StatusCode};
use serde_json::Value;

use super::answer::body_kind;
use super::{Conn, PostFailed};
use crate::downstream::client::Response;
use crate::downstream::remote::{server_token, Peek};
use crate::downstream::sse::Kind;
use crate::wire::mcp_headers;

pub(super) const SESSION: &str = "mcp-session-id";
const VERSION: &str = "mcp-protocol-version";

/// The 2025 session (`MCP-Session-Id`, negotiated version) and what ended it.
#[derive(Default)]
pub(super) struct Session {
    id: Option<HeaderValue>,
    version: Option<HeaderValue>,
    /// The server forgot the session (404): later calls fail with this.
    pub(super) gone: Option<String>,
    listening: bool,
}

impl Conn {
    pub(super) fn session(&self) -> std::sync::MutexGuard<'_, Session> {
        self.session.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Headers of every request: the configured ones and Accept; a legacy request's
    /// session and version, a 2026-07-28 request's mirror of its body.
    pub(super) fn base_headers(&self, peek: &Peek) -> HeaderMap {
        let mut h = self.remote.headers.clone();
        h.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        if peek.modern.is_none() {
            let s = self.session();
            if let Some(id) = &s.id {
                h.insert(SESSION, id.clone());
            }
            if let Some(v) = &s.version {
                h.insert(VERSION, v.clone());
            }
        }
        peek.mirror(&mut h);
        h
    }

    /// A 2026-07-28 `tools/call`'s `Mcp-Param-*` headers, for the tool's `x-mcp-header`
    /// arguments (a client MUST send them); a tool whose declarations are invalid is not
    /// called over HTTP (a client MUST NOT use it).
    pub(super) async fn param_headers(
        &self,
        peek: &Peek,
        line: &[u8],
        h: &mut HeaderMap,
    ) -> Result<(), PostFailed> {
        if peek.modern.is_none() || peek.method.as_deref() != Some("tools/call") {
            return Ok(());
        }
        let Some(tool) = peek.name.as_deref() else {
            return Ok(());
        };
        // Listed again if a `list_changed` emptied the cache while the call waited for its
        // human: a call sent without its headers would be refused after its approval.
        let decls = match self.shim.param_headers(tool).await {
            Some(Ok(d)) if !d.is_empty() => d,
            None | Some(Ok(_)) => return Ok(()),
            Some(Err(why)) => {
                return Err(PostFailed::InvalidToolSchema {
                    tool: tool.to_string(),
                    why,
                })
            }
        };
        // Parsed again only for a tool that declares parameters.
        let msg: Option<Value> = serde_json::from_slice(line).ok();
        let args = msg.as_ref().and_then(|m| m.get("params")?.get("arguments"));
        for (name, value) in mcp_headers::param_headers(&decls, args) {
            let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(&value),
            ) else {
                continue;
            };
            h.insert(n, v);
        }
        Ok(())
    }

    pub(super) fn learn_session(&self, resp: &Response) {
        let sid = resp.headers().get(SESSION).map(|v| v.as_bytes().to_vec());
        let mut s = self.session();
        s.gone = None;
        s.id = sid.as_deref().and_then(server_token);
        if sid.is_some() && s.id.is_none() {
            tracing::warn!(
                "the remote MCP server sent an invalid session id; continuing without one"
            );
        }
    }

    /// The version an `initialize` answer (`id`'s response) agreed on, learnt before the
    /// engine passes the answer on: the requests that follow it carry it.
    pub(super) fn learn_version(&self, line: &[u8], id: Option<&Value>) {
        let v: Value = serde_json::from_slice(line).unwrap_or_default();
        let answer = v.get("method").is_none()
            && (v.get("result").is_some() || v.get("error").is_some())
            && id.is_some_and(|id| v.get("id") == Some(id));
        if let Some(ver) = v["result"]["protocolVersion"].as_str().filter(|_| answer) {
            self.session().version = server_token(ver.as_bytes());
        }
    }

    /// Opens the GET stream for server-initiated messages once (legacy sessions only);
    /// 405 means the server offers none.
    pub(super) fn listen(self: &Arc<Self>) {
        {
            let mut s = self.session();
            if s.listening {
                return;
            }
            s.listening = true;
        }
        let me = Arc::clone(self);
        tokio::spawn(async move {
            // A stream the server closes is reopened; one it refuses is not.
            while me.session().gone.is_none() {
                let mut headers = me.base_headers(&Peek::default());
                headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
                let resp = match me.http.send(Method::GET, headers, Bytes::new()).await {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::warn!("GET stream: {}", me.unreachable(&e));
                        return;
                    }
                };
                let status = resp.status();
                if status == StatusCode::METHOD_NOT_ALLOWED {
                    tracing::debug!("the remote MCP server offers no GET stream (405)");
                    return;
                }
                if !status.is_success() || body_kind(&resp) != Some(Kind::Sse) {
                    tracing::warn!("the remote MCP server refused the GET stream (HTTP {status})");
                    return;
                }
                if let Err(e) = me.feed(resp, Kind::Sse, None, false).await {
                    tracing::warn!("GET stream: {e}");
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }

    /// Ends the session at shutdown (`DELETE`), best effort and bounded.
    pub async fn close(&self) {
        let id = {
            let mut s = self.session();
            // Stops the GET stream from being reopened.
            let forgotten = s.gone.replace("tc-shim is shutting down".into()).is_some();
            // A session the server forgot has nothing to end.
            s.id.clone().filter(|_| !forgotten)
        };
        let Some(id) = id else {
            return;
        };
        let mut headers = self.base_headers(&Peek::default());
        headers.insert(SESSION, id);
        let req = self.http.send(Method::DELETE, headers, Bytes::new());
        match tokio::time::timeout(Duration::from_secs(3), req).await {
            Ok(Ok(r))
                if r.status().is_success() || r.status() == StatusCode::METHOD_NOT_ALLOWED => {}
            Ok(Ok(r)) => tracing::debug!("DELETE of the session: HTTP {}", r.status()),
            Ok(Err(e)) => tracing::debug!("DELETE of the session: {}", self.unreachable(&e)),
            Err(_) => tracing::debug!("DELETE of the session timed out"),
        }
    }
}
