//! The front door of the HTTP front: `Host` and `Origin` on every request (a browser page
//! on a rebinding name, or a cross-site fetch, gets 403) and the content headers a POST
//! and a GET must carry.

use std::net::SocketAddr;

use axum::http::{header, HeaderMap, StatusCode};

/// The front's `Host`/`Origin` rule (`tc_core::origin`): an `Origin` is checked when sent
/// (MCP clients outside a browser send none).
pub struct Guard(tc_core::origin::HostGuard);

impl Guard {
    pub fn new(addr: SocketAddr, extra_hosts: &[String], extra_origins: &[String]) -> Guard {
        Guard(tc_core::origin::HostGuard::new(
            addr,
            extra_hosts,
            extra_origins,
        ))
    }

    /// `Ok` when `Host` names this front and `Origin`, if sent, is one it accepts.
    pub fn check(&self, h: &HeaderMap) -> Result<(), (StatusCode, &'static str)> {
        if !self
            .0
            .host_ok(h.get(header::HOST).and_then(|v| v.to_str().ok()))
        {
            return Err((
                StatusCode::FORBIDDEN,
                "forbidden: the Host header does not name this server (DNS rebinding protection)",
            ));
        }
        if !self
            .0
            .origin_ok(h.get(header::ORIGIN).map(|v| v.to_str().ok()), false)
        {
            return Err((
                StatusCode::FORBIDDEN,
                "forbidden: the Origin header is not one this server accepts",
            ));
        }
        Ok(())
    }
}

/// A POST must send JSON and accept both JSON and an event stream (the transport's MUSTs).
pub fn post_headers(h: &HeaderMap) -> Result<(), (StatusCode, &'static str)> {
    let ctype = h.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    let json = ctype.is_some_and(|c| {
        c.split(';')
            .next()
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
    });
    if !json {
        return Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported media type: POST a JSON-RPC message as application/json",
        ));
    }
    if !accepts(h, ["application/json", "text/event-stream"]) {
        return Err((
            StatusCode::NOT_ACCEPTABLE,
            "not acceptable: the client must accept both application/json and text/event-stream",
        ));
    }
    Ok(())
}

/// Whether the `Accept` header lists every one of `mimes`, or wildcards covering them.
pub fn accepts<const N: usize>(h: &HeaderMap, mimes: [&str; N]) -> bool {
    let kinds = mimes.map(|m| m.split_once('/').map_or(m, |(k, _)| k));
    let mut seen = [false; N];
    // One pass on bytes (every POST asks this): a media range, its parameters cut off.
    let values = h.get_all(header::ACCEPT).into_iter();
    for v in values.filter(|v| v.to_str().is_ok()) {
        for range in v.as_bytes().split(|&b| b == b',') {
            let m = range
                .split(|&b| b == b';')
                .next()
                .unwrap_or(b"")
                .trim_ascii();
            for ((mime, kind), seen) in mimes.iter().zip(kinds).zip(&mut seen) {
                *seen |= m.eq_ignore_ascii_case(mime.as_bytes())
                    || m == b"*/*"
                    || m.strip_suffix(b"/*") == Some(kind.as_bytes());
            }
        }
    }
    seen.iter().all(|&s| s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn the_front_checks_host_always_and_origin_when_sent() {
        let g = Guard::new("127.0.0.1:8080".parse().unwrap(), &[], &[]);
        assert!(g.check(&headers(&[("host", "localhost:8080")])).is_ok());
        for bad in [
            headers(&[("host", "evil.example:8080")]),
            headers(&[]),
            headers(&[
                ("host", "localhost:8080"),
                ("origin", "http://evil.example"),
            ]),
        ] {
            assert_eq!(
                g.check(&bad).unwrap_err().0,
                StatusCode::FORBIDDEN,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_post_needs_json_and_both_accepts() {
        let ok = headers(&[
            ("content-type", "application/json; charset=utf-8"),
            ("accept", "application/json, text/event-stream"),
        ]);
        assert!(post_headers(&ok).is_ok());
        let no_sse = headers(&[
            ("content-type", "application/json"),
            ("accept", "application/json"),
        ]);
        assert_eq!(
            post_headers(&no_sse).unwrap_err().0,
            StatusCode::NOT_ACCEPTABLE
        );
        let text = headers(&[("content-type", "text/plain"), ("accept", "*/*")]);
        assert_eq!(
            post_headers(&text).unwrap_err().0,
            StatusCode::UNSUPPORTED_MEDIA_TYPE
        );
        let wild = headers(&[("content-type", "application/json"), ("accept", "*/*")]);
        assert!(post_headers(&wild).is_ok());
        // Spread over two Accept headers, with parameters and letter case: still both.
        let split = headers(&[
            ("content-type", "application/json"),
            ("accept", "Application/JSON;q=0.9"),
            ("accept", "text/*"),
        ]);
        assert!(post_headers(&split).is_ok());
    }
}
