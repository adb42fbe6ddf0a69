//! Keys fetched over HTTP(S): a JWKS URL, or one found by OIDC discovery from the
//! issuer. Cached; refreshed when a token names an unknown `kid` or the set is older
//! than [`MAX_AGE`], never more often than the configured floor (one refresh at a time).

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::jwt::{self, Expect, Refused};
use crate::keys::KeySet;
use crate::{AuthError, Caller};

/// Largest discovery or JWKS document read.
pub const MAX_DOCUMENT_BYTES: usize = 256 * 1024;
/// A key set older than this is refetched on next use (revoked keys stop verifying).
pub const MAX_AGE: Duration = Duration::from_secs(600);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const TIMEOUT: Duration = Duration::from_secs(10);

/// The HTTP client for key servers: timeouts, no redirects (a redirect could leave
/// https), rustls.
pub fn client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("tc-auth/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// GETs `url` as JSON: status 200, at most [`MAX_DOCUMENT_BYTES`].
pub async fn get_json(http: &reqwest::Client, url: &str) -> Result<serde_json::Value, String> {
    let mut resp = http
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| format!("GET {url}: {}", without_url(&e)))?;
    if resp.status() != reqwest::StatusCode::OK {
        return Err(format!("GET {url}: HTTP {}", resp.status().as_u16()));
    }
    if resp.content_length().unwrap_or(0) > MAX_DOCUMENT_BYTES as u64 {
        return Err(format!("GET {url}: larger than {MAX_DOCUMENT_BYTES} bytes"));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| format!("GET {url}: {}", without_url(&e)))?
    {
        if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
            return Err(format!("GET {url}: larger than {MAX_DOCUMENT_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|e| format!("GET {url}: not JSON ({e})"))
}

fn without_url(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    if let Some(u) = e.url() {
        s = s.replace(u.as_str(), "");
    }
    s
}

/// OIDC discovery: `{issuer}/.well-known/openid-configuration` must name the same
/// issuer; its `jwks_uri` must be https (or http to a loopback host).
pub async fn discover(http: &reqwest::Client, issuer: &str) -> Result<String, String> {
    let url = format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    );
    let doc = get_json(http, &url).await?;
    let said = doc.get("issuer").and_then(|v| v.as_str()).unwrap_or("");
    if said != issuer {
        return Err(format!(
            "{url} names issuer {said:?}, not the configured {issuer:?} (OIDC Discovery 4.3)"
        ));
    }
    let jwks = doc
        .get("jwks_uri")
        .and_then(|v| v.as_str())
        .ok_or_else(|| format!("{url} has no jwks_uri"))?;
    tc_core::config::check_url(jwks).map_err(|e| format!("{url}: jwks_uri {e}"))?;
    Ok(jwks.to_string())
}

struct Cached {
    keys: Arc<KeySet>,
    fetched: Instant,
    /// Last refresh attempt, successful or not (the floor counts from it).
    tried: Instant,
}

/// A JWKS URL's keys, cached.
pub struct RemoteKeys {
    http: reqwest::Client,
    url: String,
    floor: Duration,
    cached: RwLock<Cached>,
    refreshing: tokio::sync::Mutex<()>,
}

impl RemoteKeys {
    /// Fetches the set once: a start that cannot reach the key server fails.
    pub async fn load(http: reqwest::Client, url: String, floor: Duration) -> Result<Self, String> {
        let keys = fetch(&http, &url).await?;
        let now = Instant::now();
        Ok(RemoteKeys {
            http,
            url,
            floor,
            cached: RwLock::new(Cached {
                keys: Arc::new(keys),
                fetched: now,
                tried: now,
            }),
            refreshing: tokio::sync::Mutex::new(()),
        })
    }

    fn current(&self) -> (Arc<KeySet>, bool) {
        let c = self.cached.read().unwrap_or_else(|p| p.into_inner());
        (c.keys.clone(), c.fetched.elapsed() > MAX_AGE)
    }

    /// Verifies `token`, refreshing the set once (floor permitting) for an unknown
    /// `kid` or a stale set.
    pub async fn verify(&self, token: &str, expect: &Expect) -> Result<Caller, AuthError> {
        let (keys, stale) = self.current();
        let first = if stale {
            Err(Refused::UnknownKid)
        } else {
            jwt::verify(token, &keys, expect)
        };
        match first {
            Err(Refused::UnknownKid) => {
                let keys = self.refresh().await;
                match jwt::verify(token, &keys, expect) {
                    Ok(c) => Ok(c),
                    Err(Refused::UnknownKid) => Err(AuthError::Invalid("unknown kid")),
                    Err(Refused::Auth(e)) => Err(e),
                }
            }
            Ok(c) => Ok(c),
            Err(Refused::Auth(e)) => Err(e),
        }
    }

    /// The key set after at most one refetch: none when the last attempt is more
    /// recent than the floor (another caller's counts); a failed fetch keeps the old set.
    async fn refresh(&self) -> Arc<KeySet> {
        let _one = self.refreshing.lock().await;
        let due = {
            let c = self.cached.read().unwrap_or_else(|p| p.into_inner());
            c.tried.elapsed() >= self.floor
        };
        if due {
            let got = fetch(&self.http, &self.url).await;
            let mut c = self.cached.write().unwrap_or_else(|p| p.into_inner());
            c.tried = Instant::now();
            match got {
                Ok(keys) => {
                    c.keys = Arc::new(keys);
                    c.fetched = c.tried;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "JWKS refresh failed; keeping the cached keys")
                }
            }
        }
        self.current().0
    }
}

async fn fetch(http: &reqwest::Client, url: &str) -> Result<KeySet, String> {
    let doc = get_json(http, url).await?;
    let keys = KeySet::from_jwks(&doc).map_err(|e| format!("{url}: {e}"))?;
    if keys.keys.is_empty() {
        return Err(format!("{url}: no usable signature key"));
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A one-route HTTP server answering every request with `status` and `body`;
    /// returns its URL and the number of requests served.
    async fn serve(status: &'static str, body: String) -> (String, Arc<AtomicUsize>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/jwks", l.local_addr().unwrap());
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                h.fetch_add(1, Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\nlocation: https://elsewhere/\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(body.as_bytes()).await;
            }
        });
        (url, hits)
    }

    fn jwks() -> String {
        serde_json::json!({"keys": [{
            "kty": "EC", "crv": "P-256", "kid": "a",
            "x": "axfR8uEsQkf4vOblY6RA8ncDfYEt6zOg9KE5RdiYwpY",
            "y": "T-NC4v4af5uO5-tKfA-eFivOM1drMV7Oy7ZAaDe_UfU",
        }]})
        .to_string()
    }

    /// A token whose header names `kid` (ES256); its claims and signature are never
    /// looked at when the kid is unknown.
    fn token(kid: &str) -> String {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let h = b64.encode(format!(r#"{{"alg":"ES256","kid":"{kid}"}}"#));
        format!("{h}.e30.c2ln")
    }

    fn expect() -> Expect {
        Expect {
            issuer: "i".into(),
            audience: "a".into(),
        }
    }

    #[tokio::test]
    async fn an_unknown_kid_refetches_only_past_the_floor() {
        let (url, hits) = serve("200 OK", jwks()).await;
        let slow = RemoteKeys::load(client().unwrap(), url.clone(), Duration::from_secs(3600))
            .await
            .unwrap();
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        for _ in 0..5 {
            let e = slow.verify(&token("z"), &expect()).await.unwrap_err();
            assert_eq!(e, AuthError::Invalid("unknown kid"));
        }
        assert_eq!(
            hits.load(Ordering::SeqCst),
            1,
            "the floor holds back refetches"
        );
        let eager = RemoteKeys::load(client().unwrap(), url, Duration::ZERO)
            .await
            .unwrap();
        eager.verify(&token("z"), &expect()).await.unwrap_err();
        assert_eq!(hits.load(Ordering::SeqCst), 3, "one load, one refresh");
        // A known kid needs no fetch (it fails later, on its signature).
        let e = eager.verify(&token("a"), &expect()).await.unwrap_err();
        assert_eq!(e, AuthError::Invalid("bad signature"));
        assert_eq!(hits.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn redirects_errors_and_oversized_documents_are_refused() {
        let http = client().unwrap();
        let (url, _) = serve("302 Found", String::new()).await;
        assert!(get_json(&http, &url)
            .await
            .unwrap_err()
            .contains("HTTP 302"));
        let (url, _) = serve("500 Internal Server Error", jwks()).await;
        assert!(get_json(&http, &url)
            .await
            .unwrap_err()
            .contains("HTTP 500"));
        let (url, _) = serve("200 OK", "x".repeat(MAX_DOCUMENT_BYTES + 1)).await;
        assert!(get_json(&http, &url)
            .await
            .unwrap_err()
            .contains("larger than"));
        let (url, _) = serve("200 OK", "{\"keys\": []}".into()).await;
        assert!(RemoteKeys::load(http, url, Duration::ZERO).await.is_err());
    }
}
