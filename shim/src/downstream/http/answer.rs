//! What the remote server answers a POST: a body (JSON or SSE) fed to the engine line
//! by line, or a refusal (a non-2xx status; 404 on a session means it was forgotten).

use std::sync::Arc;

use hyper::header::CONTENT_TYPE;
use hyper::StatusCode;
use serde_json::Value;
use tokio::io::BufReader;

use super::{Conn, PostFailed};
use crate::downstream::client::Response;
use crate::downstream::sse::{Kind, Lines};
use crate::wire::framing::{read_down, Down};

/// Bytes per read of an answer body, at most (as on stdio, fewer passes per long answer).
const BODY_READ: usize = 256 * 1024;
/// Bytes per read of a body of unknown length (an SSE stream, a chunked JSON answer): the
/// buffer is allocated (zeroed) per answer, so a small answer is not given a large one.
const STREAM_READ: usize = 16 * 1024;
/// The least buffer for a body of known length.
const MIN_READ: usize = 512;
/// An error body is read this far for its message.
const ERROR_BODY: usize = 64 * 1024;

impl Conn {
    /// Reads an answer body as lines into the engine until `id` is answered (the server
    /// should close the stream then) or the body ends. Ok(()) once `id` was answered.
    pub(super) async fn feed(
        self: &Arc<Self>,
        resp: Response,
        kind: Kind,
        id: Option<&Value>,
        initialize: bool,
    ) -> Result<(), PostFailed> {
        // One more than the body: the adapter ends a JSON body with a newline.
        let read = resp.body().content_length().map_or(STREAM_READ, |n| {
            usize::try_from(n)
                .map_or(BODY_READ, |n| n.saturating_add(1))
                .clamp(MIN_READ, BODY_READ)
        });
        let lines = Lines::new(resp.into_body(), kind);
        let mut r = BufReader::with_capacity(read, lines);
        let shim = Arc::clone(&self.shim);
        let mut limit = || shim.down_line_limit();
        loop {
            self.shim.client_box().room().await;
            let d = match read_down(&mut r, &mut limit).await {
                Ok(Down::Eof) => break,
                Ok(d) => d,
                Err(e) => return Err(PostFailed::BrokeOff(e)),
            };
            if let (true, Down::Line(l)) = (initialize, &d) {
                self.learn_version(l, id);
            }
            let answers = self.shim.child_frame(d);
            let ours = id.is_some() && answers.as_ref() == id;
            if ours {
                let body = std::pin::Pin::into_inner(r.into_inner().into_body());
                body.finish_in_background();
                return Ok(());
            }
        }
        match id {
            Some(_) => Err(PostFailed::NoResponse),
            None => Ok(()),
        }
    }

    /// A non-2xx answer: 404 on a session means the server forgot it.
    pub(super) async fn refused(&self, id: Option<&Value>, resp: Response, sent_session: bool) {
        let status = resp.status();
        let detail = error_detail(resp).await;
        if status == StatusCode::NOT_FOUND && sent_session {
            let why = "the remote MCP server ended the session (HTTP 404): its state is gone; \
                       start a new MCP session (through tc-shim's HTTP front: initialize again, \
                       its session ended too; over stdio: restart the MCP client). tc-shim does \
                       not re-initialize on its own: the client's view of the server may no \
                       longer hold"
                .to_string();
            let first = self.session().gone.replace(why.clone()).is_none();
            if first {
                tracing::warn!("{why}");
            }
            self.fail(id, &PostFailed::SessionEnded(why));
            if let Some(f) = self.forgotten.get().filter(|_| first) {
                f();
            }
            return;
        }
        let why = PostFailed::Status {
            server: self.remote.shown().into_owned(),
            status,
            detail,
        };
        // `fail` logs it when nobody waits for an answer.
        self.fail(id, &why);
    }
}

/// The media type of an answer we read: JSON, SSE, or none (202, empty, other).
pub(super) fn body_kind(resp: &Response) -> Option<Kind> {
    if resp.status() == StatusCode::ACCEPTED || resp.status() == StatusCode::NO_CONTENT {
        return None;
    }
    let ct = resp.headers().get(CONTENT_TYPE)?.to_str().ok()?;
    let media = ct.split(';').next()?.trim().to_ascii_lowercase();
    match media.as_str() {
        "text/event-stream" => Some(Kind::Sse),
        "application/json" => Some(Kind::Json),
        _ => None,
    }
}

/// `: <message>` of an error body (a JSON-RPC error's message, else its first text).
async fn error_detail(mut resp: Response) -> String {
    let mut body = Vec::new();
    while body.len() < ERROR_BODY {
        match resp.body_mut().chunk().await {
            Ok(Some(c)) => body.extend_from_slice(&c),
            _ => break,
        }
    }
    let v: Value = serde_json::from_slice(&body).unwrap_or_default();
    let text = match v["error"]["message"].as_str() {
        Some(m) => m.to_string(),
        None => String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
    };
    let text: String = text.chars().filter(|c| !c.is_control()).take(200).collect();
    if text.trim().is_empty() {
        String::new()
    } else {
        format!(": {}", text.trim())
    }
}
