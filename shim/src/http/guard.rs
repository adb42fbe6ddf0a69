//! The front door of the HTTP front: `Host` and `Origin` on every request (a browser page
//! on a rebinding name, or a cross-site fetch, gets 403) and the content headers a POST
//! and a GET must carry.

use std::net::SocketAddr;

use axum::http::{header, HeaderMap, StatusCode};

/// The `Host` values the front answers to and the `Origin`s it accepts.
pub struct Guard {
    hosts: Vec<String>,
    origins: Vec<String>,
}

impl Guard {
    /// The bind's own names (for a loopback bind: `localhost`, `127.0.0.1`, `[::1]`, with
    /// the port) plus the configured extras.
    pub fn new(addr: SocketAddr, extra_hosts: &[String], extra_origins: &[String]) -> Guard {
        let port = addr.port();
        let mut hosts = vec![addr.to_string()];
        if addr.ip().is_loopback() {
            for h in ["localhost", "127.0.0.1", "[::1]"] {
                hosts.push(format!("{h}:{port}"));
            }
        }
        hosts.extend(extra_hosts.iter().cloned());
        hosts.dedup();
        let mut origins: Vec<String> = hosts
            .iter()
            .flat_map(|h| [format!("http://{h}"), format!("https://{h}")])
            .collect();
        origins.extend(extra_origins.iter().cloned());
        Guard { hosts, origins }
    }

    /// `Ok` when `Host` names this front and `Origin`, if sent, is one it accepts.
    pub fn check(&self, h: &HeaderMap) -> Result<(), (StatusCode, &'static str)> {
        let host = h.get(header::HOST).and_then(|v| v.to_str().ok());
        if !host.is_some_and(|x| self.hosts.iter().any(|o| o.eq_ignore_ascii_case(x))) {
            return Err((
                StatusCode::FORBIDDEN,
                "forbidden: the Host header does not name this server (DNS rebinding protection)",
            ));
        }
        match h.get(header::ORIGIN).map(|v| v.to_str()) {
            None => Ok(()),
            Some(Ok(o)) if self.origins.iter().any(|x| x.eq_ignore_ascii_case(o)) => Ok(()),
            Some(_) => Err((
                StatusCode::FORBIDDEN,
                "forbidden: the Origin header is not one this server accepts",
            )),
        }
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
    if !(accepts(h, "application/json") && accepts(h, "text/event-stream")) {
        return Err((
            StatusCode::NOT_ACCEPTABLE,
            "not acceptable: the client must accept both application/json and text/event-stream",
        ));
    }
    Ok(())
}

/// Whether the `Accept` header lists `mime` (or a wildcard covering it).
pub fn accepts(h: &HeaderMap, mime: &str) -> bool {
    let (kind, _) = mime.split_once('/').unwrap_or((mime, ""));
    h.get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|m| m.split(';').next().unwrap_or("").trim())
        .any(|m| m.eq_ignore_ascii_case(mime) || m == "*/*" || m == format!("{kind}/*"))
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
    fn a_rebinding_host_or_a_foreign_origin_is_refused() {
        let g = Guard::new("127.0.0.1:8080".parse().unwrap(), &[], &[]);
        assert!(g.check(&headers(&[("host", "localhost:8080")])).is_ok());
        assert!(g.check(&headers(&[("host", "127.0.0.1:8080")])).is_ok());
        assert!(g
            .check(&headers(&[
                ("host", "127.0.0.1:8080"),
                ("origin", "http://localhost:8080")
            ]))
            .is_ok());
        for bad in [
            headers(&[("host", "evil.example:8080")]),
            headers(&[("host", "localhost:9999")]),
            headers(&[]),
            headers(&[
                ("host", "localhost:8080"),
                ("origin", "http://evil.example"),
            ]),
            headers(&[("host", "localhost:8080"), ("origin", "null")]),
        ] {
            assert_eq!(
                g.check(&bad).unwrap_err().0,
                StatusCode::FORBIDDEN,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn configured_hosts_and_origins_are_added_not_substituted() {
        let g = Guard::new(
            "0.0.0.0:443".parse().unwrap(),
            &["mcp.example.com".into()],
            &["https://app.example.com".into()],
        );
        assert!(g.check(&headers(&[("host", "mcp.example.com")])).is_ok());
        assert!(g
            .check(&headers(&[
                ("host", "mcp.example.com"),
                ("origin", "https://app.example.com")
            ]))
            .is_ok());
        assert!(g.check(&headers(&[("host", "localhost:443")])).is_err());
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
    }
}
