//! The approval page as a client sees it over raw HTTP/1.1 on loopback: one exchange, and
//! a page session opened the only way there is, from a `tcctl page` link (the link's
//! `/open` answers 303 with the session cookie; the shell then carries the CSRF token).
//!
//! tcd honours a link or a session only from a socket of its own uid. A root test acts
//! as a human by creating the socket under that human's fsuid: the kernel records the
//! creating thread's fsuid as the socket's owner (what `/proc/net/tcp` shows tcd), and
//! `setfsuid` changes only the calling thread.

use std::io::{Read, Write};
use std::net::TcpStream;

use serde_json::Value;

/// A loopback connection to the page's `port` from a socket owned by `uid` (None: this
/// process's own uid).
pub fn connect_as(port: u16, uid: Option<u32>) -> TcpStream {
    let Some(uid) = uid else {
        return TcpStream::connect(("127.0.0.1", port)).expect("connect to the page");
    };
    let before = nix::unistd::setfsuid(nix::unistd::Uid::from_raw(uid));
    let s = TcpStream::connect(("127.0.0.1", port));
    nix::unistd::setfsuid(before);
    s.expect("connect to the page")
}

/// One exchange on the page's `port`: (status, response head and body).
pub fn http(port: u16, req: &str) -> (u16, String) {
    http_as(port, None, req)
}

/// [`http`] from a socket owned by `uid`.
pub fn http_as(port: u16, uid: Option<u32>, req: &str) -> (u16, String) {
    let mut s = connect_as(port, uid);
    s.write_all(req.as_bytes()).expect("send");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    (status_of(&out), out)
}

/// The status code of an HTTP/1.1 response (0 when there is none).
pub fn status_of(out: &str) -> u16 {
    out.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Turns the approval page on at a free loopback port: appends `[approvals] listen` to
/// the config file `config` (before tcd starts); returns the port.
pub fn listen_on_free_port(config: &std::path::Path) -> u16 {
    let port = crate::free_port();
    let text = std::fs::read_to_string(config).unwrap();
    std::fs::write(
        config,
        format!("{text}\n[approvals]\nlisten = \"127.0.0.1:{port}\"\n"),
    )
    .unwrap();
    port
}

/// The body of a response as JSON (Null when it is not).
pub fn json_body(out: &str) -> Value {
    out.split("\r\n\r\n")
        .nth(1)
        .and_then(|b| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null)
}

/// The port and path+query of a page link `http://localhost:PORT/open?t=…`.
pub fn link_parts(link: &str) -> (u16, String) {
    let rest = link
        .trim()
        .strip_prefix("http://localhost:")
        .unwrap_or_else(|| panic!("not a page link: {link:?}"));
    let (port, path) = rest.split_once('/').expect("a path");
    (port.parse().expect("a port"), format!("/{path}"))
}

/// A page session: its cookie (`tc_page=…`) and CSRF token.
#[derive(Debug, Clone)]
pub struct PageSession {
    pub port: u16,
    pub cookie: String,
    pub csrf: String,
    /// The uid its connections come from (None: this process's).
    pub uid: Option<u32>,
}

impl PageSession {
    /// Spends `link` (from `tcctl page --print`); panics unless it opens a session.
    pub fn open(link: &str) -> PageSession {
        Self::open_as(link, None)
    }

    /// [`PageSession::open`] from sockets owned by `uid` (the link's minter, for a
    /// session that works).
    pub fn open_as(link: &str, uid: Option<u32>) -> PageSession {
        Self::try_open_as(link, uid)
            .unwrap_or_else(|(st, out)| panic!("the link opened nothing ({st}):\n{out}"))
    }

    /// Spends `link`: the session, or the status and response it got instead.
    pub fn try_open(link: &str) -> Result<PageSession, (u16, String)> {
        Self::try_open_as(link, None)
    }

    /// [`PageSession::try_open`] from sockets owned by `uid`.
    pub fn try_open_as(link: &str, uid: Option<u32>) -> Result<PageSession, (u16, String)> {
        let (port, path) = link_parts(link);
        let host = format!("localhost:{port}");
        let (st, out) = http_as(
            port,
            uid,
            &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        );
        let cookie = out
            .lines()
            .find_map(|l| l.strip_prefix("set-cookie: "))
            .and_then(|c| c.split(';').next())
            .map(str::to_string);
        let Some(cookie) = cookie.filter(|_| st == 303) else {
            return Err((st, out));
        };
        let (st, shell) = http_as(
            port,
            uid,
            &format!(
                "GET / HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
            ),
        );
        assert_eq!(st, 200, "the session's shell: {shell}");
        let csrf = shell
            .split("name=\"tc-csrf\" content=\"")
            .nth(1)
            .expect("the CSRF token in the shell")[..64]
            .to_string();
        Ok(PageSession {
            port,
            cookie,
            csrf,
            uid,
        })
    }

    /// GET `path` with the session's cookie: (status, response).
    pub fn get(&self, path: &str) -> (u16, String) {
        http_as(
            self.port,
            self.uid,
            &format!(
                "GET {path} HTTP/1.1\r\nHost: localhost:{}\r\nCookie: {}\r\nConnection: close\r\n\r\n",
                self.port, self.cookie
            ),
        )
    }

    /// The session's `/api/state` as JSON.
    pub fn state(&self) -> Value {
        let (st, out) = self.get("/api/state");
        assert_eq!(st, 200, "{out}");
        json_body(&out)
    }

    /// POST `path` with `body` as the page's own script would (Host, Origin, cookie and
    /// CSRF token): (status, JSON body).
    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        post_as(
            self.port,
            self.uid,
            path,
            body,
            Some(&self.cookie),
            Some(&self.csrf),
        )
    }
}

/// A POST from the page's own origin with whatever cookie and CSRF token are given (an
/// outsider has none): (status, JSON body).
pub fn post(
    port: u16,
    path: &str,
    body: &Value,
    cookie: Option<&str>,
    csrf: Option<&str>,
) -> (u16, Value) {
    post_as(port, None, path, body, cookie, csrf)
}

/// [`post`] from a socket owned by `uid`.
pub fn post_as(
    port: u16,
    uid: Option<u32>,
    path: &str,
    body: &Value,
    cookie: Option<&str>,
    csrf: Option<&str>,
) -> (u16, Value) {
    let host = format!("localhost:{port}");
    let cookie = cookie
        .map(|c| format!("Cookie: {c}\r\n"))
        .unwrap_or_default();
    let csrf = csrf
        .map(|c| format!("x-tc-csrf: {c}\r\n"))
        .unwrap_or_default();
    let head = format!("Host: {host}\r\nOrigin: http://{host}\r\n{cookie}{csrf}");
    post_raw(port, uid, path, &head, body)
}

/// A POST of `body` (JSON) to `path` from a socket owned by `uid`, with the header lines
/// `head` (each ending in CRLF: Host, Origin, cookie, CSRF token, as the caller wants
/// them, right or wrong): (status, JSON body).
pub fn post_raw(port: u16, uid: Option<u32>, path: &str, head: &str, body: &Value) -> (u16, Value) {
    let body = body.to_string();
    let (st, out) = http_as(
        port,
        uid,
        &format!(
            "POST {path} HTTP/1.1\r\n{head}content-type: application/json\r\n\
             content-length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    (st, json_body(&out))
}

impl PageSession {
    /// Opens the session's `/api/events` stream and reads it until its first event is
    /// complete (or 10 s pass, or the server closes): (status, all that was read).
    pub fn first_event(&self) -> (u16, String) {
        let port = self.port;
        let mut s = connect_as(port, self.uid);
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .expect("read timeout");
        s.write_all(
            format!(
                "GET /api/events HTTP/1.1\r\nHost: localhost:{port}\r\nCookie: {}\r\n\
                 Accept: text/event-stream\r\nConnection: close\r\n\r\n",
                self.cookie
            )
            .as_bytes(),
        )
        .expect("send");
        let (mut buf, mut chunk) = (Vec::new(), [0u8; 8192]);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            let text = String::from_utf8_lossy(&buf);
            let done = text
                .split_once("\ndata:")
                .is_some_and(|(_, rest)| rest.contains("\n\n"));
            if done {
                break;
            }
        }
        let out = String::from_utf8_lossy(&buf).into_owned();
        (status_of(&out), out)
    }

    /// POST `path` with `body`, the session's cookie, `host` as the Host header, `origin`
    /// as the Origin header (None: none) and the CSRF token when `csrf`: a request the
    /// page's own script would make but for what the caller changes. (status, JSON body).
    pub fn post_with(
        &self,
        path: &str,
        body: &Value,
        host: &str,
        origin: Option<&str>,
        csrf: bool,
    ) -> (u16, Value) {
        let origin = origin
            .map(|o| format!("Origin: {o}\r\n"))
            .unwrap_or_default();
        let token = if csrf {
            format!("x-tc-csrf: {}\r\n", self.csrf)
        } else {
            String::new()
        };
        let head = format!("Host: {host}\r\n{origin}Cookie: {}\r\n{token}", self.cookie);
        post_raw(self.port, self.uid, path, &head, body)
    }

    /// POST `/api/requests/{id}/approve/totp` with `code`; a refusal for the wrong-code
    /// delay (the code was not checked) is waited out.
    pub fn approve_totp(&self, id: &str, code: &str) -> (u16, Value) {
        for _ in 0..100 {
            let r = self.post(
                &format!("/api/requests/{id}/approve/totp"),
                &serde_json::json!({ "code": code }),
            );
            let delayed = r.1["error"]
                .as_str()
                .is_some_and(|e| e.starts_with("factor_delay"));
            if !delayed {
                return r;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("always refused for the delay");
    }
}
