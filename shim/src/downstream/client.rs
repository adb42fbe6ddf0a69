//! HTTP/1.1 to one remote MCP server: keep-alive connections in a small pool, TLS by
//! rustls (the webpki roots, plus the vault's `ca_file`), no redirects and no proxy.
//!
//! Why not reqwest on this path: its URL, redirect, proxy and timeout layers cost ~12 µs
//! of CPU per request, a third of everything tc-shim spends on an HTTP call
//! (docs/BENCHMARKS.md, "hyper connections instead of reqwest").

use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body as _, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderMap, HeaderValue, HOST};
use hyper::{Method, Request, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{self, RootCertStore};
use tokio_rustls::TlsConnector;

/// How long a connection may take to open (TCP and TLS).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Idle connections kept, at most; more are closed when their answer ends.
const IDLE_MAX: usize = 64;
/// What is left of an answer read after its response, so its connection can be reused: at
/// most this long and this many bytes.
const FINISH_FOR: Duration = Duration::from_secs(2);
const FINISH_BYTES: usize = 64 * 1024;
/// An idle connection older than this is closed rather than reused (servers close theirs
/// after a while; reqwest's default, too).
const IDLE_FOR: Duration = Duration::from_secs(90);

type Sender = SendRequest<Full<Bytes>>;

/// Why a request got no answer. Names the host and port, never the path or query.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to {0}: {1}")]
    Connect(String, std::io::Error),
    #[error("connecting to {0} timed out after {1:?}")]
    ConnectTimeout(String, Duration),
    #[error("TLS with {0} failed: {1}")]
    Tls(String, std::io::Error),
    #[error("HTTP exchange with {0} failed: {1}")]
    Http(String, hyper::Error),
}

/// A remote server's connections; cheap to clone (the HTTP front's conversations share one).
#[derive(Clone)]
pub struct Client(Arc<Inner>);

struct Inner {
    /// `host:port`, for connecting and for errors.
    addr: String,
    host: HeaderValue,
    /// The request target: the url's path and query.
    target: Uri,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    idle: Mutex<Vec<Idle>>,
}

/// A pooled connection: when it went idle, and the thread whose runtime drives it. The
/// HTTP front runs a runtime per thread (`http/workers.rs`); a request sent on another
/// thread's connection would cross threads twice.
struct Idle {
    s: Sender,
    since: Instant,
    thread: std::thread::ThreadId,
}

/// An answer: status, headers and a [`Body`].
pub type Response = hyper::Response<Body>;

impl Client {
    /// A client for `url` (`http` or `https`); `extra_roots` are PEM certificates trusted
    /// besides the webpki roots (a private CA).
    pub fn new(url: &url::Url, extra_roots: &[u8]) -> anyhow::Result<Client> {
        let host = url.host_str().unwrap_or_default();
        anyhow::ensure!(!host.is_empty(), "the url has no host");
        let port = url
            .port_or_known_default()
            .ok_or_else(|| anyhow::anyhow!("the url has no port"))?;
        let tls = match url.scheme() {
            "http" => None,
            "https" => Some(tls(host, extra_roots)?),
            s => anyhow::bail!("the url's scheme is {s:?}: expected http or https"),
        };
        let authority = match url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_string(),
        };
        let target = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_string(),
        };
        Ok(Client(Arc::new(Inner {
            // An IPv6 host keeps its brackets: `[::1]:8080` is what connect parses.
            addr: format!("{host}:{port}"),
            host: HeaderValue::from_str(&authority)?,
            target: target.parse()?,
            tls,
            idle: Mutex::new(Vec::new()),
        })))
    }

    /// Sends one request on an idle connection or a new one. A pooled connection the
    /// server closed before the request went out is replaced once (nothing was sent).
    pub async fn send(
        &self,
        method: Method,
        mut headers: HeaderMap,
        body: Bytes,
    ) -> Result<Response, ClientError> {
        headers.insert(HOST, self.0.host.clone());
        let mut req = Request::new(Full::new(body));
        *req.method_mut() = method;
        *req.uri_mut() = self.0.target.clone();
        *req.headers_mut() = headers;
        // This thread's runtime drives a connection opened here; only its own are lent.
        let thread = std::thread::current().id();
        let (mut s, pooled) = match self.0.checkout(thread).await {
            Some(s) => (s, true),
            None => (self.0.connect().await?, false),
        };
        let resp = match s.try_send_request(req).await {
            Ok(r) => r,
            Err(mut e) => match e.take_message().filter(|_| pooled) {
                Some(req) => {
                    s = self.0.connect().await?;
                    s.send_request(req).await.map_err(|e| self.0.http(e))?
                }
                None => return Err(self.0.http(e.into_error())),
            },
        };
        let (parts, inner) = resp.into_parts();
        let back = Some((s, Arc::downgrade(&self.0), thread));
        let mut body = Body { inner, back };
        body.give_back_if_done();
        Ok(Response::from_parts(parts, body))
    }
}

impl Inner {
    /// An idle connection of thread `me` ready for a request, if one is left.
    async fn checkout(&self, me: std::thread::ThreadId) -> Option<Sender> {
        loop {
            let Idle { mut s, since, .. } = {
                let mut idle = self.lock();
                let i = idle.iter().rposition(|c| c.thread == me)?;
                idle.remove(i)
            };
            if s.is_closed() || since.elapsed() > IDLE_FOR {
                continue;
            }
            if s.ready().await.is_ok() {
                return Some(s);
            }
        }
    }

    async fn connect(&self) -> Result<Sender, ClientError> {
        let open = async {
            let tcp = TcpStream::connect(&self.addr)
                .await
                .map_err(|e| ClientError::Connect(self.addr.clone(), e))?;
            // Requests and answers are small and latency-bound.
            let _ = tcp.set_nodelay(true);
            match &self.tls {
                None => handshake(tcp).await,
                Some((c, name)) => {
                    let tls = c
                        .connect(name.clone(), tcp)
                        .await
                        .map_err(|e| ClientError::Tls(self.addr.clone(), e))?;
                    handshake(tls).await
                }
            }
            .map_err(|e| self.http(e))
        };
        tokio::time::timeout(CONNECT_TIMEOUT, open)
            .await
            .map_err(|_| ClientError::ConnectTimeout(self.addr.clone(), CONNECT_TIMEOUT))?
    }

    fn http(&self, e: hyper::Error) -> ClientError {
        ClientError::Http(self.addr.clone(), e)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Pools `s`, on the thread whose runtime drives it (where its request was sent).
    fn give_back(&self, s: Sender, thread: std::thread::ThreadId) {
        let mut idle = self.lock();
        if idle.len() >= IDLE_MAX {
            // Another thread's connections are only taken there: make room from the dead.
            idle.retain(|c| !c.s.is_closed() && c.since.elapsed() <= IDLE_FOR);
        }
        if idle.len() < IDLE_MAX && !s.is_closed() {
            let since = Instant::now();
            idle.push(Idle { s, since, thread });
        }
    }
}

/// HTTP/1.1 over `io`; the connection runs on a task of its own until either side ends it.
async fn handshake<T>(io: T) -> Result<Sender, hyper::Error>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("connection to the remote MCP server ended: {e}");
        }
    });
    Ok(s)
}

/// TLS towards `host`: the webpki roots and `extra` (PEM), HTTP/1.1 by ALPN.
fn tls(host: &str, extra: &[u8]) -> anyhow::Result<(TlsConnector, ServerName<'static>)> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let mut added = 0;
    for cert in CertificateDer::pem_slice_iter(extra) {
        let cert = cert.map_err(|e| anyhow::anyhow!("ca_file: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| anyhow::anyhow!("ca_file: {e}"))?;
        added += 1;
    }
    anyhow::ensure!(
        extra.is_empty() || added > 0,
        "ca_file holds no PEM certificate"
    );
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = host.trim_start_matches('[').trim_end_matches(']');
    let name = ServerName::try_from(name.to_string())?;
    Ok((TlsConnector::from(Arc::new(cfg)), name))
}

/// An answer's body, read as a stream of chunks. Its connection goes back to the pool once
/// the body has ended; a body dropped before its end takes the connection with it.
pub struct Body {
    inner: Incoming,
    /// The connection, its pool, and the thread it was sent on (whose runtime drives it).
    back: Option<(Sender, Weak<Inner>, std::thread::ThreadId)>,
}

impl Body {
    /// The next chunk of data, or None at the end.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, hyper::Error> {
        std::future::poll_fn(|cx| self.poll_chunk(cx))
            .await
            .transpose()
    }

    /// Reads what is left of an answer the caller is done with, briefly and boundedly, on a
    /// task of its own, so its connection can go back to the pool: an SSE answer's stream
    /// ends just after its response (the server closes it), a few bytes later.
    pub fn finish_in_background(mut self) {
        if self.back.is_none() {
            return;
        }
        tokio::spawn(async move {
            let rest = async {
                let mut read = 0;
                while let Ok(Some(c)) = self.chunk().await {
                    read += c.len();
                    if read > FINISH_BYTES {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(FINISH_FOR, rest).await;
        });
    }

    /// The body's length, when the server declared it.
    pub fn content_length(&self) -> Option<u64> {
        self.inner.size_hint().exact()
    }

    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, hyper::Error>>> {
        loop {
            let frame = match std::pin::Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    // Ended (a chunked body need not say so through `is_end_stream`).
                    self.give_back();
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(Err(e))) => {
                    self.back = None;
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(Some(Ok(f))) => f,
            };
            // Trailers carry nothing we read.
            if let Ok(data) = frame.into_data() {
                self.give_back_if_done();
                return Poll::Ready(Some(Ok(data)));
            }
        }
    }

    /// Returns the connection to the pool as soon as the body is known to be complete (a
    /// declared length fully read counts: the caller may stop reading there).
    fn give_back_if_done(&mut self) {
        if self.inner.is_end_stream() {
            self.give_back();
        }
    }

    fn give_back(&mut self) {
        if let Some((s, pool, thread)) = self.back.take() {
            if let Some(p) = pool.upgrade() {
                p.give_back(s, thread);
            }
        }
    }
}

impl tokio_stream::Stream for Body {
    type Item = Result<Bytes, hyper::Error>;

    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_chunk(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A keep-alive HTTP/1.1 server answering every request with a chunked event stream of
    /// two chunks; counts the connections it accepted.
    async fn server() -> (url::Url, Arc<AtomicUsize>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = url::Url::parse(&format!("http://{}/mcp", l.local_addr().unwrap())).unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let n = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                n.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        // One request: its head, then its (small) body.
                        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                            match s.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(k) => buf.extend_from_slice(&chunk[..k]),
                            }
                            continue;
                        };
                        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length: "))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        while buf.len() < end + 4 + len {
                            match s.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(k) => buf.extend_from_slice(&chunk[..k]),
                            }
                        }
                        buf.drain(..end + 4 + len);
                        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                        let first = "data: {\"id\":1}\n\n";
                        let out = format!("{head}{:x}\r\n{first}\r\n", first.len());
                        if s.write_all(out.as_bytes()).await.is_err() {
                            return;
                        }
                        // The end of the stream comes a moment after the message, as a
                        // server's `end()` after its last event does.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        if s.write_all(b"0\r\n\r\n").await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (url, accepted)
    }

    async fn post(c: &Client) -> Response {
        let mut h = HeaderMap::new();
        h.insert("content-type", HeaderValue::from_static("application/json"));
        c.send(Method::POST, h, Bytes::from_static(b"{}"))
            .await
            .unwrap()
    }

    #[test]
    fn the_url_gives_the_address_host_header_and_request_target() {
        let c = |u: &str| Client::new(&url::Url::parse(u).unwrap(), &[]).unwrap();
        let v6 = c("http://[::1]:8080/mcp?key=k");
        assert_eq!(v6.0.addr, "[::1]:8080");
        assert_eq!(v6.0.host, "[::1]:8080");
        assert_eq!(v6.0.target, "/mcp?key=k");
        let named = c("https://mcp.example.com/v1/mcp");
        assert_eq!(named.0.addr, "mcp.example.com:443");
        assert_eq!(named.0.host, "mcp.example.com");
        assert_eq!(named.0.target, "/v1/mcp");
        assert!(Client::new(&url::Url::parse("ftp://h/mcp").unwrap(), &[]).is_err());
        let bad_ca = Client::new(&url::Url::parse("https://h/mcp").unwrap(), b"not pem");
        assert!(bad_ca.is_err());
    }

    #[tokio::test]
    async fn a_chunked_answer_read_to_its_end_leaves_its_connection_for_the_next_request() {
        let (url, accepted) = server().await;
        let c = Client::new(&url, &[]).unwrap();
        for _ in 0..5 {
            let mut r = post(&c).await;
            let mut got = Vec::new();
            while let Some(b) = r.body_mut().chunk().await.unwrap() {
                got.extend_from_slice(&b);
            }
            assert_eq!(got, b"data: {\"id\":1}\n\n");
        }
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "one connection for five requests"
        );
    }

    #[tokio::test]
    async fn an_answer_left_after_its_message_is_finished_in_the_background_and_reused() {
        let (url, accepted) = server().await;
        let c = Client::new(&url, &[]).unwrap();
        for _ in 0..5 {
            let mut r = post(&c).await;
            let first = r.body_mut().chunk().await.unwrap().unwrap();
            assert_eq!(&first[..], b"data: {\"id\":1}\n\n");
            // The caller is done before the stream's end arrives.
            r.into_body().finish_in_background();
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "one connection for five requests"
        );
        // Without finishing it, a dropped answer takes its connection with it.
        let mut r = post(&c).await;
        r.body_mut().chunk().await.unwrap().unwrap();
        drop(r);
        post(&c).await;
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }
}
