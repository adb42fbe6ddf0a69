//! The page's front door: `Host` and `Origin` on every request (DNS rebinding, cross-site
//! requests: 403), strict response headers, and the sessions a `tcctl page` link (or, on
//! the remote page, a passkey sign-in) opens.
//!
//! A session belongs to the uid that minted its link over the Unix socket. Its id is in an
//! HttpOnly SameSite=Strict cookie; its CSRF token is in the page (a meta tag) and must
//! come back in the `x-tc-csrf` header of every POST. Nothing is shown or done without one.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rand::RngCore;
use subtle::ConstantTimeEq;
use webauthn_rs::prelude::{PasskeyAuthentication, PasskeyRegistration};

use super::Page;

pub const COOKIE: &str = "tc_page";
pub const CSRF_HEADER: &str = "x-tc-csrf";
/// Sessions kept at once per uid (that uid's oldest goes first): one human's links can
/// never push out another's session.
const MAX_SESSIONS_PER_UID: usize = 8;
/// A session's life: a page left open longer is reloaded.
const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                       connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The page's `Host`/`Origin` rule (`tc_core::origin`): its own loopback names only, and
/// a POST must send an `Origin`.
pub struct Guard(tc_core::origin::HostGuard);

impl Guard {
    pub fn new(addr: SocketAddr) -> Self {
        Guard(tc_core::origin::HostGuard::new(addr, &[], &[]))
    }

    /// The remote page's rule: its `public_url`'s host and origin, nothing else.
    pub fn remote(spec: &tc_core::config::RemoteSpec) -> Self {
        Guard(tc_core::origin::HostGuard::exact(&spec.host, &spec.origin))
    }

    /// Whether `h` names this page (exactly; a rebinding name like `evil.example` never does).
    pub fn host_ok(&self, h: Option<&HeaderValue>) -> bool {
        self.0.host_ok(h.and_then(|h| h.to_str().ok()))
    }

    /// An `Origin`, when sent, must be this page's; a POST must send one.
    pub fn origin_ok(&self, method: &Method, o: Option<&HeaderValue>) -> bool {
        let required = !(method == Method::GET || method == Method::HEAD);
        self.0.origin_ok(o.map(|o| o.to_str().ok()), required)
    }
}

/// The uid owning the client's socket (`peer.rs`), for the handlers that need it; `None`
/// when the kernel's tables did not show it.
#[derive(Debug, Clone, Copy)]
pub struct PeerUid(pub Option<u32>);

/// The uid of `req`'s client socket.
fn peer_uid(page: &Page, req: &Request) -> Option<u32> {
    let client = req
        .extensions()
        .get::<axum::extract::ConnectInfo<SocketAddr>>()?
        .0;
    super::peer::uid(client, page.addr)
}

/// Middleware on every route: refuses a foreign `Host`/`Origin`/cross-site fetch and a
/// session cookie sent from another uid's socket, then adds the headers that keep the
/// page out of frames, caches and referrers.
pub async fn front_door(State(page): State<Arc<Page>>, mut req: Request, next: Next) -> Response {
    // Who is asking matters to a link being spent and to a session being used: a link
    // read off `xdg-open`'s command line, or a copied cookie, is another uid's to use.
    // Off the machine no socket names a uid: the remote page's links and sessions are
    // bound by the passkey and the link alone.
    let local = page.remote.is_none();
    let needs_uid = local && (req.uri().path() == "/open" || cookie(req.headers()).is_some());
    let uid = needs_uid.then(|| peer_uid(&page, &req)).flatten();
    req.extensions_mut().insert(PeerUid(uid));
    let foreign_session = local
        && cookie(req.headers()).is_some_and(|_| {
            page.sessions
                .with(req.headers(), |s| Some(s.uid) != uid)
                .unwrap_or(false)
        });
    let h = req.headers();
    let cross_site = h
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"cross-site");
    let mut resp = if foreign_session {
        (
            StatusCode::FORBIDDEN,
            "forbidden: this page session belongs to another user",
        )
            .into_response()
    } else if !page.guard.host_ok(h.get(header::HOST)) {
        let why = if local {
            "forbidden: unknown Host (the page answers to localhost only)"
        } else {
            "forbidden: unknown Host (the page answers to its public_url only)"
        };
        (StatusCode::FORBIDDEN, why).into_response()
    } else if cross_site || !page.guard.origin_ok(req.method(), h.get(header::ORIGIN)) {
        (StatusCode::FORBIDDEN, "forbidden: foreign Origin").into_response()
    } else {
        next.run(req).await
    };
    let hs = resp.headers_mut();
    let fixed = [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::CACHE_CONTROL, "no-store"),
    ];
    for (k, v) in fixed {
        hs.insert(k, HeaderValue::from_static(v));
    }
    hs.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    hs.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    if !local {
        hs.insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=31536000"),
        );
    }
    resp
}

/// What a session may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// See and answer requests (a `tcctl page` link, or a passkey sign-in off the machine).
    Full,
    /// Register a passkey and nothing else (a `tcctl page --remote` link: no request, id
    /// or history is shown to it).
    Register,
}

/// One page session, opened by one `tcctl page` link.
pub struct Session {
    /// The uid whose link opened it: whose requests it shows and for whom it acts.
    pub uid: u32,
    pub access: Access,
    pub csrf: String,
    created: Instant,
    /// Wrong registration codes typed in this session.
    pub code_failures: u32,
    /// A passkey registration under way (started with a valid code).
    pub registering: Option<PasskeyRegistration>,
    /// Approvals under way: the WebAuthn challenge issued for each request id, single use,
    /// and the grant asked with it (fixed when the challenge was issued).
    pub approving: HashMap<String, (PasskeyAuthentication, Option<crate::grants::GrantAsk>)>,
}

#[derive(Default)]
pub struct Sessions(Mutex<HashMap<String, Session>>);

fn random_hex() -> String {
    let mut b = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    hex::encode(b)
}

impl Sessions {
    /// A new session of `uid` with full access: (cookie value, CSRF token).
    pub fn open(&self, uid: u32) -> (String, String) {
        self.open_with(uid, Access::Full)
    }

    /// A new session of `uid` allowed `access`: (cookie value, CSRF token).
    pub fn open_with(&self, uid: u32, access: Access) -> (String, String) {
        let (sid, csrf) = (random_hex(), random_hex());
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.retain(|_, s| s.created.elapsed() < SESSION_TTL);
        while m.values().filter(|s| s.uid == uid).count() >= MAX_SESSIONS_PER_UID {
            let oldest = m
                .iter()
                .filter(|(_, s)| s.uid == uid)
                .min_by_key(|(_, s)| s.created)
                .map(|(k, _)| k.clone());
            oldest.map(|k| m.remove(&k));
        }
        let s = Session {
            uid,
            access,
            csrf: csrf.clone(),
            created: Instant::now(),
            code_failures: 0,
            registering: None,
            approving: HashMap::new(),
        };
        m.insert(sid.clone(), s);
        (sid, csrf)
    }

    /// Runs `f` on the request's session, if its cookie names a live one.
    pub fn with<T>(&self, headers: &HeaderMap, f: impl FnOnce(&mut Session) -> T) -> Option<T> {
        let sid = cookie(headers)?;
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let s = m
            .get_mut(&sid)
            .filter(|s| s.created.elapsed() < SESSION_TTL)?;
        Some(f(s))
    }

    /// A POST's CSRF check: a live session and its token in the header, compared in
    /// constant time.
    pub fn csrf_ok(&self, headers: &HeaderMap) -> bool {
        let Some(sent) = headers.get(CSRF_HEADER).map(|v| v.as_bytes().to_vec()) else {
            return false;
        };
        self.with(headers, |s| bool::from(s.csrf.as_bytes().ct_eq(&sent)))
            .unwrap_or(false)
    }
}

/// The session id from the `Cookie` header.
fn cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_string())
}

/// The `Set-Cookie` value of a new session (`secure`: HTTPS only, the remote page).
pub fn set_cookie(sid: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE}={sid}; Path=/; HttpOnly; SameSite=Strict{secure}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hv(s: &str) -> HeaderValue {
        HeaderValue::from_str(s).unwrap()
    }

    #[test]
    fn host_and_origin_are_this_page_only() {
        let g = Guard::new("127.0.0.1:7777".parse().unwrap());
        assert!(g.host_ok(Some(&hv("localhost:7777"))));
        assert!(g.host_ok(Some(&hv("127.0.0.1:7777"))));
        for bad in [
            "evil.example",
            "evil.example:7777",
            "localhost:7778",
            "localhost",
        ] {
            assert!(!g.host_ok(Some(&hv(bad))), "{bad}");
        }
        assert!(!g.host_ok(None));
        assert!(g.origin_ok(&Method::POST, Some(&hv("http://localhost:7777"))));
        assert!(!g.origin_ok(&Method::POST, Some(&hv("http://evil.example"))));
        assert!(!g.origin_ok(&Method::POST, Some(&hv("null"))));
        assert!(!g.origin_ok(&Method::POST, None));
        assert!(g.origin_ok(&Method::GET, None));
    }

    #[test]
    fn one_uid_opening_sessions_never_evicts_another_uids() {
        let s = Sessions::default();
        let (mine, _) = s.open(1000);
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, hv(&format!("{COOKIE}={mine}")));
        for _ in 0..10 * MAX_SESSIONS_PER_UID {
            s.open(1001);
        }
        assert_eq!(s.with(&h, |x| x.uid), Some(1000));
        // A uid's own sessions are capped: its oldest goes.
        for _ in 0..MAX_SESSIONS_PER_UID {
            s.open(1000);
        }
        assert_eq!(s.with(&h, |x| x.uid), None);
    }

    #[test]
    fn csrf_needs_the_session_cookie_and_its_token() {
        let s = Sessions::default();
        let (sid, csrf) = s.open(1000);
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, hv(&format!("a=b; {COOKIE}={sid}")));
        assert!(!s.csrf_ok(&h));
        h.insert(CSRF_HEADER, hv("0".repeat(64).as_str()));
        assert!(!s.csrf_ok(&h));
        h.insert(CSRF_HEADER, hv(&csrf));
        assert!(s.csrf_ok(&h));
        let (_, other) = s.open(1000);
        h.insert(CSRF_HEADER, hv(&other));
        assert!(!s.csrf_ok(&h), "another session's token");
    }
}
