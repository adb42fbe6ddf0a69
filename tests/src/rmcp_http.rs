//! rmcp's Streamable HTTP client transport over the workspace's reqwest 0.12: rmcp 3.11's
//! own binding needs reqwest 0.13, so the tests implement its `StreamableHttpClient`.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::stream::{BoxStream, StreamExt};
use http::{header, HeaderName, HeaderValue, StatusCode};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::common::http_header::{
    EVENT_STREAM_MIME_TYPE, HEADER_LAST_EVENT_ID, HEADER_SESSION_ID, JSON_MIME_TYPE,
};
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, InsufficientScopeError, SseError, StreamableHttpClient,
    StreamableHttpClientTransportConfig, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use rmcp::transport::StreamableHttpClientTransport;
use sse_stream::{Sse, SseStream};

type Error = StreamableHttpError<reqwest::Error>;
type Events = BoxStream<'static, Result<Sse, SseError>>;

/// A reqwest 0.12 client as rmcp's HTTP backend.
#[derive(Clone, Default)]
pub struct Http(pub reqwest::Client);

/// rmcp's transport for `url` over [`Http`], with `bearer` (without `Bearer `) if given.
pub fn transport(url: &str, bearer: Option<&str>) -> StreamableHttpClientTransport<Http> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url);
    if let Some(b) = bearer {
        config = config.auth_header(b);
    }
    StreamableHttpClientTransport::with_client(Http::default(), config)
}

/// The headers every request of the transport carries.
fn with_headers(
    mut req: reqwest::RequestBuilder,
    session: Option<&str>,
    auth: Option<String>,
    custom: HashMap<HeaderName, HeaderValue>,
) -> reqwest::RequestBuilder {
    if let Some(s) = session {
        req = req.header(HEADER_SESSION_ID, s);
    }
    if let Some(a) = auth {
        req = req.bearer_auth(a);
    }
    for (k, v) in custom {
        req = req.header(k, v);
    }
    req
}

/// A 401 or 403 with a challenge, as rmcp's errors (its auth flow reads them).
fn challenged(r: &reqwest::Response) -> Result<(), Error> {
    let Some(ch) = r.headers().get(header::WWW_AUTHENTICATE) else {
        return Ok(());
    };
    let ch = ch
        .to_str()
        .map_err(|_| Error::UnexpectedServerResponse("non-ASCII WWW-Authenticate".into()))?
        .to_string();
    match r.status() {
        StatusCode::UNAUTHORIZED => Err(Error::AuthRequired(AuthRequiredError::new(ch))),
        StatusCode::FORBIDDEN => {
            let scope = ch
                .split_once("scope=\"")
                .and_then(|(_, rest)| rest.split_once('"'))
                .map(|(s, _)| s.to_string());
            Err(Error::InsufficientScope(InsufficientScopeError::new(
                ch, scope,
            )))
        }
        _ => Ok(()),
    }
}

fn media_type(r: &reqwest::Response) -> Option<String> {
    let ct = r.headers().get(header::CONTENT_TYPE)?.to_str().ok()?;
    Some(ct.split(';').next()?.trim().to_ascii_lowercase())
}

/// The body, refused past `max` bytes (`truncate`: cut there instead).
async fn body(r: reqwest::Response, max: usize, truncate: bool) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    let mut chunks = r.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(Error::Client)?;
        if out.len() + chunk.len() > max {
            if truncate {
                out.extend_from_slice(&chunk[..max - out.len()]);
                break;
            }
            return Err(Error::ResponseBodyTooLarge { max_size: max });
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// The SSE events of `r`, no event larger than `max` bytes.
fn events(r: reqwest::Response, max: usize) -> Events {
    let mut bound = EventBound::new(max);
    let bytes = r.bytes_stream().map(move |chunk| match chunk {
        Ok(b) => bound.feed(&b).map(|()| b),
        Err(e) => Err(std::io::Error::other(e)),
    });
    SseStream::from_bytes_stream(bytes).boxed()
}

/// Counts the bytes of the current SSE event across chunks (an event ends at a blank
/// line; CR, LF and CRLF end lines), so one endless event cannot grow without bound.
pub struct EventBound {
    max: usize,
    len: usize,
    line_start: bool,
    last_cr: bool,
    failed: bool,
}

impl EventBound {
    pub fn new(max: usize) -> EventBound {
        EventBound {
            max,
            len: 0,
            line_start: true,
            last_cr: false,
            failed: false,
        }
    }

    /// Err once the current event passes `max` bytes (and for every chunk after).
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), std::io::Error> {
        for &b in chunk {
            if self.failed {
                break;
            }
            let cr_lf = b == b'\n' && self.last_cr;
            self.last_cr = b == b'\r';
            match b {
                _ if cr_lf => {}
                b'\r' | b'\n' if self.line_start => self.len = 0,
                b'\r' | b'\n' => self.line_start = true,
                _ => {
                    self.line_start = false;
                    self.len += 1;
                    self.failed = self.len > self.max;
                }
            }
        }
        if self.failed {
            return Err(std::io::Error::other(format!(
                "an SSE event over {} bytes",
                self.max
            )));
        }
        Ok(())
    }
}

// rmcp's transport calls `post_message_with_response_limits` and
// `get_stream_with_max_sse_event_size`; `post_message` and `get_stream` (which the trait
// requires) are those with the default limits, and the trait's own
// `post_message_with_max_sse_event_size` is left to its default (unused by the transport).
impl StreamableHttpClient for Http {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let limits = StreamableHttpResponseLimits::default();
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let req = self
            .0
            .post(uri.as_ref())
            .header(
                header::ACCEPT,
                format!("{EVENT_STREAM_MIME_TYPE}, {JSON_MIME_TYPE}"),
            )
            .json(&message);
        let req = with_headers(req, session_id.as_deref(), auth_header, custom_headers);
        let r = req.send().await.map_err(Error::Client)?;
        challenged(&r)?;
        let status = r.status();
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == StatusCode::NOT_FOUND && session_id.is_some() {
            return Err(Error::SessionExpired);
        }
        let session = r
            .headers()
            .get(HEADER_SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        // Notifications and replies await nothing: whatever 2xx body comes back is moot.
        let awaits_nothing = !matches!(message, ClientJsonRpcMessage::Request(_));
        let media = media_type(&r);
        if !status.is_success() {
            // A JSON-RPC error in a 4xx/5xx body is the answer; anything else is a failure.
            let text = body(r, limits.max_error_response_size, true).await?;
            if media.as_deref() == Some(JSON_MIME_TYPE) {
                if let Ok(m @ ServerJsonRpcMessage::Error(_)) = serde_json::from_slice(&text) {
                    return Ok(StreamableHttpPostResponse::Json(m, session));
                }
            }
            let text = String::from_utf8_lossy(&text);
            return Err(Error::UnexpectedServerResponse(
                format!("HTTP {status}: {text}").into(),
            ));
        }
        match media.as_deref() {
            Some(EVENT_STREAM_MIME_TYPE) => Ok(StreamableHttpPostResponse::Sse(
                events(r, limits.max_sse_event_size),
                session,
            )),
            Some(JSON_MIME_TYPE) => {
                let raw = body(r, limits.max_json_response_size, false).await?;
                match serde_json::from_slice(&raw) {
                    Ok(m) => Ok(StreamableHttpPostResponse::Json(m, session)),
                    Err(_) if awaits_nothing => Ok(StreamableHttpPostResponse::Accepted),
                    Err(e) => Err(Error::Deserialize(e)),
                }
            }
            _ if awaits_nothing => Ok(StreamableHttpPostResponse::Accepted),
            _ => Err(Error::UnexpectedContentType(media)),
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Error> {
        let req = self.0.delete(uri.as_ref());
        let req = with_headers(req, Some(&session_id), auth_header, custom_headers);
        let r = req.send().await.map_err(Error::Client)?;
        if r.status() == StatusCode::METHOD_NOT_ALLOWED {
            return Ok(());
        }
        r.error_for_status().map_err(Error::Client)?;
        Ok(())
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<Events, Error> {
        let max = StreamableHttpResponseLimits::default().max_sse_event_size;
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            max,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<Events, Error> {
        let mut req = self.0.get(uri.as_ref()).header(
            header::ACCEPT,
            format!("{EVENT_STREAM_MIME_TYPE}, {JSON_MIME_TYPE}"),
        );
        if let Some(id) = last_event_id {
            req = req.header(HEADER_LAST_EVENT_ID, id);
        }
        let req = with_headers(req, session_id.as_deref(), auth_header, custom_headers);
        let r = req.send().await.map_err(Error::Client)?;
        if r.status() == StatusCode::METHOD_NOT_ALLOWED {
            return Err(Error::ServerDoesNotSupportSse);
        }
        challenged(&r)?;
        let r = r.error_for_status().map_err(Error::Client)?;
        match media_type(&r).as_deref() {
            Some(EVENT_STREAM_MIME_TYPE) => Ok(events(r, max_sse_event_size)),
            other => Err(Error::UnexpectedContentType(other.map(str::to_string))),
        }
    }
}

#[test]
fn event_bound_counts_one_event_across_chunks_and_resets_at_blank_lines() {
    let mut b = EventBound::new(10);
    // Two events of 9 data bytes each ("data:abcd" ×1 line), LF and CRLF framed.
    assert!(b.feed(b"data:abcd\n\ndata:").is_ok());
    assert!(b.feed(b"wxyz\r\n\r\n").is_ok());
    // One event split over chunks: 5 + 6 bytes on two lines exceeds 10.
    assert!(b.feed(b"id:12\n").is_ok());
    assert!(b.feed(b"data:x").is_err());
    // Once failed, it stays failed.
    assert!(b.feed(b"\n\n").is_err());
    // CR alone ends lines too.
    let mut b = EventBound::new(6);
    assert!(b.feed(b"data:1\r\rdata:2\r\r").is_ok());
}
